"""The queue's bookkeeping (router/nodes/queue.py), placement and lifetime policies, as pure
logic: no router, a store that keeps entries in memory."""

from __future__ import annotations

from typing import Any

from proton import Described, symbol, ulong

from router.nodes.config import NodeSettings
from router.nodes.lifetime import ended, requested
from router.nodes.placement import owner
from router.nodes.queue import Queue, Subscriber
from router.store.store import Entry


class MemoryStore:
    """What a queue asks of router/store/: entries with ids, settled and counted."""

    def __init__(self) -> None:
        self.next_id = 0
        self.settled: list[int] = []
        self.counts: dict[int, int] = {}

    def append(self, node: str, data: bytes, **fields: Any) -> Entry:
        self.next_id += 1
        return Entry(
            self.next_id,
            node,
            fields["priority"],
            fields["expiry"],
            fields["durable"],
            0,
            len(data),
            0,
        )

    def settle(self, entry: Entry) -> None:
        self.settled.append(entry.id)

    def count(self, entry: Entry, delivery_count: int) -> None:
        self.counts[entry.id] = delivery_count

    def room(self) -> bool:
        return True  # never pages (tests/test_store_paging.py has queues that do)

    def paged(self, node: str) -> None:
        return None


def queue(**settings: Any) -> tuple[Queue, MemoryStore]:
    store = MemoryStore()
    q = Queue("q", NodeSettings(**settings), store, lambda entry: None)  # type: ignore[arg-type]
    return q, store


def put(q: Queue, n: int, priority: int = 4, expiry: float | None = None) -> list[int]:
    return [q.put(b"m", priority, expiry, durable=True).entry.id for _ in range(n)]


def test_fifo_within_a_priority_and_higher_first() -> None:
    q, _ = queue()
    low, high = put(q, 2, priority=1), put(q, 2, priority=9)
    sub = Subscriber(1, browse=False, filters=None)
    taken = [q.take(sub) for _ in range(5)]
    assert [h.entry.id for h in taken if h] == high + low
    assert taken[-1] is None


def test_released_goes_back_to_the_head_and_undeliverable_here_skips_its_consumer() -> None:
    q, store = queue()
    first, second = put(q, 2)
    a, b = Subscriber(1, False, None), Subscriber(2, False, None)
    held = q.take(a)
    assert held is not None and held.entry.id == first
    assert q.returned(held, failed=False, excluded=1)
    assert store.counts == {}  # released or undeliverable-here alone is no failed attempt
    again = q.take(a)
    assert again is not None and again.entry.id == second  # not `first`: a refused it
    other = q.take(b)
    assert other is not None and other.entry.id == first


def test_delivery_limit_and_counts_are_stored() -> None:
    q, store = queue(maxDeliveryCount=2)
    [mid] = put(q, 1)
    sub = Subscriber(1, False, None)
    held = q.take(sub)
    assert held is not None and q.returned(held, failed=True, excluded=None)
    assert store.counts == {mid: 1}
    held = q.take(sub)
    assert held is not None and not q.returned(held, failed=True, excluded=None)


def test_accepted_settles_in_the_store_and_counts() -> None:
    q, store = queue()
    [mid] = put(q, 1)
    held = q.take(Subscriber(1, False, None))
    assert held is not None
    q.accepted(held)
    assert (q.depth, q.bytes, store.settled, q.dequeued) == (0, 0, [mid], 1)


def test_browsers_see_each_message_once_and_take_none() -> None:
    q, _ = queue()
    ids = put(q, 3)
    browser = Subscriber(1, browse=True, filters=None)
    seen = [q.take(browser) for _ in range(4)]
    assert [h.entry.id for h in seen if h] == ids and seen[-1] is None
    assert q.depth == 3 and q.take(Subscriber(2, False, None)) is not None


def test_expiry_skips_messages_out_with_a_consumer() -> None:
    q, _ = queue()
    [out] = put(q, 1, expiry=10.0)
    [waiting] = put(q, 1, expiry=10.0)
    held = q.take(Subscriber(1, False, None))
    assert held is not None and held.entry.id == out
    assert [h.entry.id for h in q.expire(11.0)] == [waiting]


def test_limits() -> None:
    q, _ = queue(maxDepth=2)
    put(q, 1)
    assert not q.full()
    put(q, 1)
    assert q.full()


def test_placement_is_stable_and_moves_few_nodes_when_a_host_is_added() -> None:
    names = [f"jobs.{i}" for i in range(1000)]
    before = {n: owner(n, ["hub-0", "hub-1", "hub-2"]) for n in names}
    assert before == {n: owner(n, ["hub-2", "hub-0", "hub-1"]) for n in names}  # order-free
    assert len(set(before.values())) == 3
    after = {n: owner(n, ["hub-0", "hub-1", "hub-2", "hub-3"]) for n in names}
    moved = [n for n in names if before[n] != after[n]]
    assert all(after[n] == "hub-3" for n in moved)  # only to the new host
    assert 150 < len(moved) < 350  # about a quarter


def test_lifetime_policies() -> None:
    close = {symbol("lifetime-policy"): Described(ulong(0x2B), [])}
    assert requested(close, None) == ("queue", "delete-on-close")
    by_name = {symbol("lifetime-policy"): Described(symbol("amqp:delete-on-no-links:list"), [])}
    assert requested(by_name, None) == ("queue", "delete-on-no-links")
    assert requested(None, [symbol("temporary-topic")]) == ("topic", "delete-on-close")
    assert requested(None, None) is None  # a plain dynamic reply address
    assert ended("delete-on-close", creator_attached=False, links=1, emptied=False)
    assert not ended("delete-on-no-links", creator_attached=False, links=1, emptied=True)
    assert ended("delete-on-no-messages", creator_attached=True, links=1, emptied=True)
    assert ended("delete-on-no-links-or-messages", creator_attached=True, links=0, emptied=False)
