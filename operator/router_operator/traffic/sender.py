"""``routernet send``: messages at a rate, each sent until the network accepts (or rejects) it.

One proton Container runs the connections (pool.py), a tick every ``TICK_SECONDS`` and the
proton events. Messages go only where there is credit, round-robin over the connections that
have some, so nothing is buffered beyond what the routers granted; messages to send again go
first and are not paced (they were paced when first sent), new ones follow the schedule
(rate.py). The ledger (ledger.py) decides what is sent again.

Phases: *sending* until ``count`` messages were created, ``duration`` passed, the ramp ended at
rate 0 or a first SIGINT/SIGTERM; then *finishing*, sending only again what comes back, until
nothing is unresolved or ``finish_timeout`` passed (or a second signal); then the connections
are closed cleanly (bounded) and the loop stops.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from proton import Delivery, Event, Message
from proton.reactor import Container

from router_operator.traffic.endpoints import Security
from router_operator.traffic.ledger import Ledger, Outcome
from router_operator.traffic.pool import CLOSE_SECONDS, SENDER, Call, Pool, Slot
from router_operator.traffic.rate import Pacer, Schedule

TICK_SECONDS = 0.01
PROGRESS_SECONDS = 2.0
FINISH_TIMEOUT = 30.0

_OUTCOMES = {
    Delivery.ACCEPTED: Outcome.ACCEPTED,
    Delivery.REJECTED: Outcome.REJECTED,
    Delivery.RELEASED: Outcome.RELEASED,
    Delivery.MODIFIED: Outcome.MODIFIED,
}


@dataclass(frozen=True)
class SendOptions:
    address: str | None
    """The link's target; None: the anonymous relay, each message addressed to ``to``."""
    source: Callable[[], list[str]]
    """The endpoints now (amqp://host:port); called again every few seconds."""
    connections: int | None = None
    """Connections to spread over the endpoints; None: one per endpoint."""
    count: int | None = None
    duration: float | None = None
    schedule: Schedule | None = None
    """None: as fast as credit allows."""
    body_size: int = 100
    body: str | None = None
    """The body as an AMQP string instead of ``body_size`` bytes."""
    subject: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    """Application properties besides ``seq``."""
    durable: bool = False
    """The header's durable: a queue's host then takes responsibility for each message (its
    store has it) before it is accepted."""
    to: str | None = None
    security: Security | None = None
    wait: float | None = None
    """Seconds to try to reach a first router before giving up (None: for ever)."""
    finish_timeout: float = FINISH_TIMEOUT
    progress_seconds: float = PROGRESS_SECONDS


@dataclass(frozen=True)
class SendSummary:
    sent: int
    accepted: int
    rejected: int
    resent: int
    unresolved: int
    seconds: float

    def record(self) -> dict[str, Any]:
        return {
            "sent": self.sent,
            "accepted": self.accepted,
            "rejected": self.rejected,
            "resent": self.resent,
            "unresolved": self.unresolved,
            "seconds": round(self.seconds, 3),
        }


class TrafficSender:
    """The container's handler. ``run()`` returns the summary; ``request_stop()`` is safe in a
    signal handler (it only sets a flag the next tick reads)."""

    def __init__(
        self,
        options: SendOptions,
        report: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.options = options
        self.report = report
        self.clock = clock
        self.id = str(uuid.uuid4())
        self.ledger = Ledger(self.id)
        self.pacer = Pacer(options.schedule)
        self.body: str | bytes = b"x" * options.body_size
        if options.body is not None:
            self.body = options.body
        self.container: Any = None
        self.pool: Pool | None = None
        self.phase = "sending"  # -> finishing -> closing -> stopped
        self.stop_requests = 0
        self.failure: str | None = None  # why it gave up: a link refused, no router reached
        self._started = 0.0
        self._ended: float | None = None
        self._deadline = 0.0
        self._turn = 0
        self._progress_at = 0.0
        self._progress_accepted = 0

    # --- lifecycle ----------------------------------------------------------------------------

    def run(self) -> SendSummary:
        self.container = container = Container(self)
        container.container_id = f"routernet-send-{self.id}"
        container.run()
        return self.summary()

    def request_stop(self) -> None:
        self.stop_requests += 1

    def summary(self) -> SendSummary:
        ledger = self.ledger
        end = self._ended if self._ended is not None else self.clock()
        return SendSummary(
            sent=ledger.sent,
            accepted=ledger.accepted,
            rejected=ledger.rejected,
            resent=ledger.resent,
            unresolved=ledger.unresolved,
            seconds=end - self._started,
        )

    def on_reactor_init(self, event: Event) -> None:
        """The loop has started (the container's first event)."""
        self._started = self._progress_at = self.clock()
        self.pool = Pool(
            self.container,
            SENDER,
            self.options.address,
            self.options.source,
            self,
            connections=self.options.connections,
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
            self.stop_requests = 2  # nothing was sent: no finishing wait
        if self.phase == "sending" and self._done_creating(now):
            self.phase = "finishing"
            self._deadline = now + self.options.finish_timeout
        if self.phase == "finishing" and (
            self.ledger.unresolved == 0 or now >= self._deadline or self.stop_requests > 1
        ):
            self._close(now)
        if self.phase == "closing" and (not pool.closing or now >= self._deadline):
            self.phase = "stopped"
            self.container.stop()
            return
        if self.phase in ("sending", "finishing"):
            pool.tick(now)
            self._pump()
        if now - self._progress_at >= self.options.progress_seconds:
            self._progress(now)
        self.container.schedule(TICK_SECONDS, Call(self._tick))

    def _done_creating(self, now: float) -> bool:
        options, elapsed = self.options, now - self._started
        ends_at = options.schedule.ends_at if options.schedule is not None else None
        return bool(
            self.stop_requests
            or (options.count is not None and self.ledger.sent >= options.count)
            or (options.duration is not None and elapsed >= options.duration)
            or (ends_at is not None and elapsed >= ends_at)
        )

    def _close(self, now: float) -> None:
        assert self.pool is not None
        self._ended = now
        self.phase = "closing"
        self._deadline = now + CLOSE_SECONDS
        self.pool.close_all()

    # --- sending ------------------------------------------------------------------------------

    def _pump(self) -> None:
        """Send what may go now on the connections with credit, round-robin."""
        if self.pool is None or self.phase not in ("sending", "finishing"):
            return
        ready = [slot for slot in self.pool.slots if slot.sendable]
        if not ready:
            return
        ledger = self.ledger
        allowance = 0
        if self.phase == "sending":
            allowance = self.pacer.allowance(self.clock() - self._started, ledger.sent)
            if self.options.count is not None:
                allowance = min(allowance, self.options.count - ledger.sent)
        turn = self._turn
        while ready:
            seq = ledger.next_resend()
            if seq is None:
                if allowance <= 0:
                    break
                seq = ledger.create()
                allowance -= 1
            index = turn % len(ready)
            slot = ready[index]
            attempt = ledger.dispatch(seq, slot.carrier)
            slot.send(self._message(seq), attempt)
            if slot.credit > 0:
                turn = index + 1
            else:
                del ready[index]
                turn = index
        self._turn = turn

    def _message(self, seq: int) -> Message:
        options = self.options
        message = Message(
            id=self.ledger.message_id(seq),
            address=options.to,
            subject=options.subject,
            properties={**options.properties, "seq": seq},
            body=self.body,
            durable=options.durable,
        )
        # Bytes as a data section, as most clients send them; a --body string as amqp-value.
        message.inferred = isinstance(self.body, bytes)
        return message

    # --- what the slots report -------------------------------------------------------------

    def attached(self, slot: Slot) -> None:
        pass  # credit comes with the router's flow: sendable()

    def sendable(self, slot: Slot) -> None:
        self._pump()

    def settled(self, slot: Slot, delivery: Delivery) -> None:
        try:
            attempt = int(delivery.tag)
        except ValueError:
            return
        outcome = _OUTCOMES.get(delivery.remote_state)
        self.ledger.settle(attempt, outcome)
        if outcome not in (Outcome.ACCEPTED, Outcome.REJECTED):
            self._pump()

    def message(self, slot: Slot, event: Event) -> None:
        pass  # a sender receives nothing

    def lost(self, slot: Slot, reason: str, was_attached: bool) -> None:
        again = self.ledger.lost(slot.carrier)
        if (was_attached or again) and self.phase in ("sending", "finishing"):
            note = f"; {again} in flight will be sent again" if again else ""
            self.report(f"{slot.endpoint}: {reason}{note}")
        self._pump()

    def in_flight(self, slot: Slot) -> int:
        return self.ledger.in_flight_on(slot.carrier)

    def refused(self, slot: Slot, reason: str) -> None:
        if self.failure is None:
            self.failure = reason
            self.report(f"{slot.endpoint}: {reason}")
        self.stop_requests = 2  # nothing will get through: stop, without the finishing wait

    # --- progress -----------------------------------------------------------------------------

    def _progress(self, now: float) -> None:
        assert self.pool is not None
        ledger, elapsed = self.ledger, now - self._started
        rate = (ledger.accepted - self._progress_accepted) / max(now - self._progress_at, 1e-9)
        self._progress_at, self._progress_accepted = now, ledger.accepted
        target = self.pacer.target(elapsed) if self.phase == "sending" else 0.0
        shown = "max" if target is None else f"{target:.0f}/s"
        self.report(
            f"{elapsed:.0f}s sent {ledger.sent} accepted {ledger.accepted} rejected"
            f" {ledger.rejected} resent {ledger.resent} in flight {ledger.in_flight}"
            f" rate {rate:.0f}/s (target {shown}) connections"
            f" {self.pool.attached}/{len(self.pool.slots)} {self.phase}"
        )
