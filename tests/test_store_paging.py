"""Paging (router/store/paging.py): a deep queue's memory stays bounded, its order is kept, and
what was paged comes back after a close or a crash exactly once, never resurrected after its
node is gone."""

from __future__ import annotations

import os
from pathlib import Path

from router.nodes.config import NodeSettings
from router.nodes.facts import facts_of
from router.nodes.queue import REFILL, Queue, Subscriber
from router.store import Store

BUDGET = 100


def open_store(path: Path, **kwargs: int) -> Store:
    return Store.open(path, indexed=BUDGET, **kwargs)


def a_queue(store: Store, name: str = "q") -> Queue:
    return Queue(name, NodeSettings(), store, lambda entry: facts_of(store.body(entry)))


def recovered_queue(store: Store, name: str = "q") -> Queue:
    q = a_queue(store, name)
    for entry in store.recovered().get(name, []):
        q.restore(entry)
    return q


def fill(q: Queue, first: int, n: int, durable: bool = True) -> None:
    for i in range(first, first + n):
        q.put(i.to_bytes(4, "big"), 4, None, durable)


def consume(q: Queue, n: int | None = None) -> list[int]:
    """Takes and accepts up to `n` (all) messages, as a consumer would: their numbers."""
    sub = Subscriber(1, browse=False, filters=None)
    got = []
    while n is None or len(got) < n:
        held = q.take(sub)
        if held is None:
            break
        got.append(int.from_bytes(q.store.body(held.entry), "big"))
        q.accepted(held)
    return got


def test_a_deep_queue_pages_past_the_budget_and_keeps_its_order(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    q = a_queue(store)
    fill(q, 0, 5000)
    assert q.depth == 5000 and q.counters()["paged"] == 5000 - BUDGET
    assert q.counters()["bytes"] == 5000 * 4 and q.counters()["durable"] == 5000
    assert store.stats()["live_messages"] == BUDGET  # the index stops at the budget
    got: list[int] = []
    sent = 5000
    while q.depth:
        got += consume(q, 10)
        assert store.stats()["live_messages"] <= BUDGET + REFILL
        if sent < 6000:  # new ones keep coming: they wait behind the paged ones
            fill(q, sent, 1)
            sent += 1
    assert got == list(range(6000))
    store.close()


def test_paged_messages_come_back_once_after_a_crash(tmp_path: Path) -> None:
    """A crash (no close) after part was taken in and consumed: the rest, exactly once."""
    store = open_store(tmp_path, segment_bytes=64 << 10)
    q = a_queue(store)
    fill(q, 0, 3000)
    assert consume(q, 1200) == list(range(1200))
    store.sync()
    os.close(store._lock_fd)  # as if the process died: nothing more reaches the files

    store = open_store(tmp_path, segment_bytes=64 << 10)
    q = recovered_queue(store)
    assert q.depth == 1800
    assert consume(q) == list(range(1200, 3000))
    store.close()


def test_taking_in_is_atomic_with_its_cursor(tmp_path: Path) -> None:
    """Taken in but not consumed, then a restart: in memory or paged, each message once."""
    store = open_store(tmp_path)
    q = a_queue(store)
    fill(q, 0, 1000)
    sub = Subscriber(1, browse=False, filters=None)
    held = [q.take(sub) for _ in range(BUDGET + 5)]  # the take that refilled
    assert all(h is not None for h in held)
    store.close()

    store = open_store(tmp_path)
    q = recovered_queue(store)
    assert q.depth == 1000
    assert sorted(consume(q)) == list(range(1000))
    store.close()


def test_pages_end_and_begin_again(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    q = a_queue(store)
    fill(q, 0, 300)
    assert consume(q) == list(range(300))
    assert store.paged("q") is None and q.depth == 0
    fill(q, 300, 300)  # below the budget: indexed, then paged again
    store.close()
    store = open_store(tmp_path)
    q = recovered_queue(store)
    assert consume(q) == list(range(300, 600))
    store.close()


def test_a_dropped_nodes_pages_do_not_come_back(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    q = a_queue(store, "sub")
    fill(q, 0, 500)
    q.clear()
    assert q.depth == 0 and store.paged("sub") is None
    fill(q, 1000, 3)  # a node of the same name again
    store.close()
    store = open_store(tmp_path)
    q = recovered_queue(store, "sub")
    assert consume(q) == [1000, 1001, 1002]
    store.close()


def test_segments_holding_paged_messages_stay_and_go_once_consumed(tmp_path: Path) -> None:
    store = open_store(tmp_path, segment_bytes=16 << 10)
    q = a_queue(store)
    other = a_queue(store, "other")
    for i in range(4000):  # two queues' records interleaved
        q.put(i.to_bytes(4, "big"), 4, None, True)
        if i % 40 == 0:
            other.put(b"x", 4, None, True)
    store.sync()
    assert store.stats()["segments"] >= 8
    consume(other)
    store.sync()
    assert consume(q) == list(range(4000))
    for _ in range(3):  # compaction and freeing happen at syncs
        store.sync()
    assert store.stats()["segments"] <= 2
    store.close()
    store = open_store(tmp_path, segment_bytes=16 << 10)
    assert store.stats()["live_messages"] == 0 and store.paged("q") is None
    store.close()
