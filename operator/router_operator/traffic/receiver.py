"""``routernet receive``: a consumer on every router, accepting everything, counting
duplicates.

One link per router endpoint (pool.py, re-read every few seconds like ``send``), because a
router delivers a message to consumers attached to it or reachable from it; a consumer on each
router is what a Service-fronted consumer deployment looks like. Every message is accepted as
it arrives and counted by message-id (ledger.Tally); credit is topped up to ``CREDIT`` per link
so a slow receiver holds back the routers (and so the senders) rather than buffering without
bound.

Stopping (``count`` distinct messages, ``duration``, ``idle`` seconds without a message, or
SIGINT/SIGTERM) closes the links and connections cleanly, so the accepts already given reach the
routers, and whatever the routers had sent on the remaining credit is released back to them
(and so to its senders) rather than lost.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proton import Delivery, Event, Message
from proton.reactor import Container

from router_operator.traffic.endpoints import Security
from router_operator.traffic.ledger import Tally
from router_operator.traffic.pool import CLOSE_SECONDS, RECEIVER, Call, Pool, Slot

TICK_SECONDS = 0.1
PROGRESS_SECONDS = 2.0
CREDIT = 200


@dataclass(frozen=True)
class ReceiveOptions:
    address: str
    source: Callable[[], list[str]]
    count: int | None = None
    duration: float | None = None
    idle: float = 0.0
    """Stop after this long without a message (from the start, too); 0: never."""
    progress_seconds: float = PROGRESS_SECONDS
    credit: int = CREDIT
    security: Security | None = None
    wait: float | None = None
    """Seconds to try to reach a first router before giving up (None: for ever)."""
    show: Callable[[Message], None] | None = None
    """Called with every message received (``--print``)."""


@dataclass(frozen=True)
class ReceiveSummary:
    received: int
    distinct: int
    duplicates: int
    seconds: float

    def record(self) -> dict[str, Any]:
        return {
            "received": self.received,
            "distinct": self.distinct,
            "duplicates": self.duplicates,
            "seconds": round(self.seconds, 3),
        }


class TrafficReceiver:
    """The container's handler. ``run()`` returns the summary; ``request_stop()`` is safe in a
    signal handler."""

    def __init__(
        self,
        options: ReceiveOptions,
        report: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.options = options
        self.report = report
        self.clock = clock
        self.tally = Tally()
        self.container: Any = None
        self.pool: Pool | None = None
        self.phase = "receiving"  # -> closing -> stopped
        self.stop_requests = 0
        self.failure: str | None = None  # why it gave up: a link refused, no router reached
        self._started = 0.0
        self._ended: float | None = None
        self._last_message = 0.0
        self._deadline = 0.0
        self._progress_at = 0.0
        self._progress_received = 0

    def run(self) -> ReceiveSummary:
        self.container = container = Container(self)
        container.container_id = f"routernet-receive-{time.time_ns()}"
        container.run()
        return self.summary()

    def request_stop(self) -> None:
        self.stop_requests += 1

    def summary(self) -> ReceiveSummary:
        end = self._ended if self._ended is not None else self.clock()
        return ReceiveSummary(
            received=self.tally.received,
            distinct=self.tally.distinct,
            duplicates=self.tally.duplicates,
            seconds=end - self._started,
        )

    def on_reactor_init(self, event: Event) -> None:
        """The loop has started (the container's first event)."""
        self._started = self._last_message = self._progress_at = self.clock()
        self.pool = Pool(
            self.container,
            RECEIVER,
            self.options.address,
            self.options.source,
            self,
            None,
            clock=self.clock,
            security=self.options.security,
            wait=self.options.wait,
        )
        self.pool.refresh()
        self._tick()

    def _tick(self) -> None:
        pool = self.pool
        assert pool is not None
        now = self.clock()
        unreachable = pool.unreachable(now)
        if unreachable is not None and self.failure is None:
            self.failure = unreachable
            self.report(unreachable)
            self.stop_requests += 1
        if self.phase == "receiving":
            if self._done(now):
                self._close(now)
            else:
                pool.tick(now)
        if self.phase == "closing" and (not pool.closing or now >= self._deadline):
            self.phase = "stopped"
            self.container.stop()
            return
        if now - self._progress_at >= self.options.progress_seconds:
            self._progress(now)
        self.container.schedule(TICK_SECONDS, Call(self._tick))

    def _done(self, now: float) -> bool:
        options = self.options
        return bool(
            self.stop_requests
            or (options.count is not None and self.tally.distinct >= options.count)
            or (options.duration is not None and now - self._started >= options.duration)
            or (options.idle and now - self._last_message >= options.idle)
        )

    def _close(self, now: float) -> None:
        assert self.pool is not None
        self._ended = now
        self.phase = "closing"
        self._deadline = now + CLOSE_SECONDS
        self.pool.close_all()

    # --- what the slots report --------------------------------------------------------------

    def attached(self, slot: Slot) -> None:
        slot.link.flow(self.options.credit)

    def message(self, slot: Slot, event: Event) -> None:
        delivery = event.delivery
        self.tally.record(event.message.id)
        if self.options.show is not None:
            self.options.show(event.message)
        self._last_message = self.clock()
        delivery.update(Delivery.ACCEPTED)
        delivery.settle()
        link = event.link
        if self.phase == "receiving" and link.credit <= self.options.credit // 2:
            link.flow(self.options.credit - link.credit)
        count = self.options.count
        if self.phase == "receiving" and count is not None and self.tally.distinct >= count:
            self._close(self._last_message)  # at once: no more credit, no more messages

    def lost(self, slot: Slot, reason: str, was_attached: bool) -> None:
        if was_attached and self.phase == "receiving":
            self.report(f"{slot.endpoint}: {reason}")

    def refused(self, slot: Slot, reason: str) -> None:
        if self.failure is None:
            self.failure = reason
            self.report(f"{slot.endpoint}: {reason}")
        self.stop_requests += 1

    def sendable(self, slot: Slot) -> None:
        pass

    def settled(self, slot: Slot, delivery: Delivery) -> None:
        pass

    def in_flight(self, slot: Slot) -> int:
        return 0

    def _progress(self, now: float) -> None:
        assert self.pool is not None
        tally = self.tally
        rate = (tally.received - self._progress_received) / max(now - self._progress_at, 1e-9)
        self._progress_at, self._progress_received = now, tally.received
        self.report(
            f"{now - self._started:.0f}s received {tally.received} distinct {tally.distinct}"
            f" duplicates {tally.duplicates} rate {rate:.0f}/s links"
            f" {self.pool.attached}/{len(self.pool.slots)}"
        )
