"""A queue the router hosts: messages kept in the store, distributed one consumer each.

Pure bookkeeping (no links, no clocks): router/nodes/hosting.py does the AMQP and passes time
in. The seed's queue semantics live here:

- each message goes to one consumer (`take`); a browser (distribution-mode copy) sees every
  message without taking it, from a cursor of its own;
- outcomes are instructions: accepted removes the message; released puts it back at the head
  of its priority, its delivery count unchanged (it was not processed); modified with
  `delivery-failed` counts a failed attempt, with `undeliverable-here` keeps it from that
  consumer; reaching the node's maxDeliveryCount sends it to dead-lettering (the caller's
  business, as is rejected);
- order is FIFO within a priority (0..9; AMQP allows up to 255, which count as 9, as in JMS
  brokers), and a higher priority overtakes;
- expiry (`ttl`, `absolute-expiry-time`) removes a message that is not out with a consumer.

Messages' bodies stay in the store (router/store/), which keeps them on disk beyond its memory
budget; a queue keeps a small `Held` per message in memory. Past the store's budget of indexed
messages, a queue pages (router/store/paging.py): what comes in is only counted here, and
taken in, oldest first, as the part in memory runs low (`refill`).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from router.config.records import NodeSettings

if TYPE_CHECKING:
    from router.nodes.facts import MessageFacts
    from router.nodes.filters import Filters
    from router.store.store import Entry, Store

PRIORITIES = 10
DEFAULT_PRIORITY = 4
# A paging queue takes in a batch of paged messages when fewer than LOW are ready in memory
# (and the store has room, or none are ready at all: a queue is never starved by others).
LOW = 500
REFILL = 1000


def priority_of(value: int | None) -> int:
    if value is None:
        return DEFAULT_PRIORITY
    return min(max(value, 0), PRIORITIES - 1)


class Held:
    """One message in a queue: its store entry, whether a consumer has it, and the consumers
    that said `undeliverable-here`."""

    __slots__ = ("acquired", "entry", "excluded")

    def __init__(self, entry: Entry) -> None:
        self.entry = entry
        self.acquired = False
        self.excluded: set[int] | None = None


class Subscriber:
    """A consuming link's standing with a queue."""

    __slots__ = ("browse", "cursor", "filters", "key")

    def __init__(self, key: int, browse: bool, filters: Filters | None) -> None:
        self.key = key
        self.browse = browse
        self.filters = filters
        self.cursor = -1  # a browser's last message id seen


class Queue:
    kind = "queue"

    def __init__(
        self,
        name: str,
        settings: NodeSettings,
        store: Store,
        facts: Callable[[Entry], MessageFacts],
        store_name: str | None = None,
    ) -> None:
        self.name = name
        self.settings = settings
        self.store = store
        self.facts = facts
        # A topic's subscription keeps its messages under a name of its own.
        self.store_name = store_name or name
        self.messages: dict[int, Held] = {}  # by id: arrival order, for browsers
        self.ready: list[deque[Held]] = [deque() for _ in range(PRIORITIES)]
        self.expiries: list[tuple[float, int]] = []
        self.bytes = 0
        self.durable = 0
        self.enqueued = 0
        self.dequeued = 0
        self.dead_lettered = 0
        self.expired = 0
        self.dropped = 0

    # ----- in ---------------------------------------------------------------------------------

    def put(self, data: bytes, priority: int, expiry: float | None, durable: bool) -> Held | None:
        """Takes the message in: held in memory, or (None) paged."""
        store = self.store
        self.enqueued += 1
        if not store.room() or store.paged(self.store_name) is not None:  # in order behind them
            store.page(self.store_name, data, priority=priority, expiry=expiry, durable=durable)
            return None
        entry = store.append(
            self.store_name, data, priority=priority, expiry=expiry, durable=durable
        )
        return self.restore(entry)

    def refill(self) -> bool:
        """Takes paged messages in when few are ready; whether it took any."""
        ready = sum(map(len, self.ready))
        if ready >= LOW or (ready and not self.store.room()):
            return False
        entries = self.store.depage(self.store_name, REFILL)
        for entry in entries:
            self.restore(entry)
        return bool(entries)

    def clear(self) -> None:
        """Every message goes, paged ones too (the node is deleted)."""
        for held in list(self.messages.values()):
            self.remove(held)
        self.store.drop_pages(self.store_name)

    def restore(self, entry: Entry) -> Held:
        """Index a stored message (a new one, or one recovered from the store at start)."""
        held = Held(entry)
        self.messages[entry.id] = held
        self.ready[priority_of(entry.priority)].append(held)
        self.bytes += entry.size
        if entry.durable:
            self.durable += 1
        if entry.expiry is not None:
            heapq.heappush(self.expiries, (entry.expiry, entry.id))
        return held

    @property
    def depth(self) -> int:
        pages = self.store.paged(self.store_name)
        return len(self.messages) + (pages.count if pages is not None else 0)

    @property
    def total_bytes(self) -> int:
        """`bytes` (in memory) and those of the paged messages."""
        pages = self.store.paged(self.store_name)
        return self.bytes + (pages.bytes if pages is not None else 0)

    def full(self) -> bool:
        s = self.settings
        return (s.maxDepth is not None and self.depth >= s.maxDepth) or (
            s.maxBytes is not None and self.total_bytes >= s.maxBytes
        )

    # ----- out --------------------------------------------------------------------------------

    def take(self, sub: Subscriber) -> Held | None:
        """The next message for `sub`: the oldest of the highest priority it may have. A
        consumer acquires it; a browser only moves its cursor past it."""
        if self.store.paged(self.store_name) is not None:
            self.refill()
        if sub.browse:
            for held in self.browsable(sub):
                sub.cursor = held.entry.id
                return held
            return None
        for ready in reversed(self.ready):
            for held in ready:
                if self.eligible(held, sub):
                    if ready[0] is held:
                        ready.popleft()
                    else:
                        ready.remove(held)
                    held.acquired = True
                    return held
        return None

    def browsable(self, sub: Subscriber) -> Iterator[Held]:
        for mid, held in self.messages.items():
            if mid > sub.cursor and self.matches(held, sub):
                yield held

    def eligible(self, held: Held, sub: Subscriber) -> bool:
        excluded = held.excluded
        return (excluded is None or sub.key not in excluded) and self.matches(held, sub)

    def matches(self, held: Held, sub: Subscriber) -> bool:
        return sub.filters is None or sub.filters.matches(self.facts(held.entry))

    # ----- outcomes ---------------------------------------------------------------------------

    def accepted(self, held: Held) -> None:
        """Done: gone from the queue and the store."""
        self.dequeued += 1
        self.remove(held)

    def remove(self, held: Held) -> None:
        entry = held.entry
        if self.messages.pop(entry.id, None) is None:
            return
        if not held.acquired:
            ready = self.ready[priority_of(entry.priority)]
            if ready and ready[0] is held:
                ready.popleft()
            else:
                ready.remove(held)
        self.bytes -= entry.size
        if entry.durable:
            self.durable -= 1
        self.store.settle(entry)

    def returned(self, held: Held, failed: bool, excluded: int | None) -> bool:
        """Back for another consumer (released, modified, or its consumer went). False when
        that was its last allowed delivery: the caller dead-letters it."""
        entry = held.entry
        if failed:
            entry.delivery_count += 1
            limit = self.settings.maxDeliveryCount
            if limit is not None and entry.delivery_count >= limit:
                return False
            self.store.count(entry, entry.delivery_count)
        if excluded is not None:
            if held.excluded is None:
                held.excluded = set()
            held.excluded.add(excluded)
        held.acquired = False
        # At the head of its priority: it was the oldest when it went out.
        self.ready[priority_of(entry.priority)].appendleft(held)
        return True

    def forget_subscriber(self, key: int) -> None:
        """A consumer that went may not come back under the same key: drop its exclusions."""
        for held in self.messages.values():
            if held.excluded is not None:
                held.excluded.discard(key)

    # ----- time -------------------------------------------------------------------------------

    def expire(self, now: float) -> list[Held]:
        """Messages past their expiry that no consumer holds: removed from the ready lists
        (the caller dead-letters or drops them, then calls `remove`)."""
        due: list[Held] = []
        expiries = self.expiries
        while expiries and expiries[0][0] <= now:
            _, mid = heapq.heappop(expiries)
            held = self.messages.get(mid)
            if held is None:
                continue
            if held.acquired:
                # Out with a consumer: looked at again if it comes back.
                heapq.heappush(expiries, (now + 1.0, mid))
                continue
            due.append(held)
        return due

    def counters(self) -> dict[str, int]:
        pages = self.store.paged(self.store_name)
        return {
            "depth": self.depth,
            "bytes": self.total_bytes,
            "durable": self.durable + (pages.durable if pages is not None else 0),
            "paged": pages.count if pages is not None else 0,
            "enqueued": self.enqueued,
            "dequeued": self.dequeued,
            "deadLettered": self.dead_lettered,
            "expired": self.expired,
        }
