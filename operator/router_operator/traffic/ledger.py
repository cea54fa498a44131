"""Bookkeeping of reliable traffic, free of I/O: the sender's ledger and the receiver's tally.

The sender's promise is at-least-once: a message is done only when the network accepted or
rejected it. So every transmission (an *attempt*) is recorded with the link that carries it
(its *carrier*), and a message goes back to the queue to be sent again, with the same
message-id, when

- the router released or modified it (no consumer took it; the router is draining), or
- its carrier went away before an outcome came (connection closed or failed, link detached):
  the router may or may not have delivered it, and at-least-once means sending it again.

Only outstanding messages are kept (in flight or queued), so memory is bounded by the credit the
routers grant, however long the run. An outcome for an attempt the ledger no longer knows (its
carrier was already given up) is ignored, so a message is never counted twice.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field


class Outcome(enum.Enum):
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    RELEASED = "released"
    MODIFIED = "modified"


@dataclass
class Ledger:
    """Messages are numbered 0, 1, 2, ... (``seq``); ``message_id(seq)`` is
    ``<sender_id>:<seq>``. Attempts are numbered too, and the number is the delivery tag."""

    sender_id: str
    sent: int = 0
    """Distinct messages created (each is sent at least once)."""
    accepted: int = 0
    rejected: int = 0
    resent: int = 0
    """Transmissions after the first (each resend of each message)."""
    _attempt_count: int = 0
    _outstanding: dict[int, int] = field(default_factory=dict)
    """seq -> transmissions so far, for messages neither accepted nor rejected."""
    _queue: deque[int] = field(default_factory=deque)
    """Messages to send again, oldest first."""
    _attempts: dict[int, tuple[int, Hashable]] = field(default_factory=dict)
    """attempt -> (seq, carrier), for attempts in flight."""
    _by_carrier: dict[Hashable, set[int]] = field(default_factory=dict)

    def message_id(self, seq: int) -> str:
        return f"{self.sender_id}:{seq}"

    # --- what to send ----------------------------------------------------------------------

    def create(self) -> int:
        """A new message's seq; it counts as sent from now on."""
        seq = self.sent
        self.sent += 1
        self._outstanding[seq] = 0
        return seq

    def next_resend(self) -> int | None:
        """The oldest message waiting to be sent again, taken off the queue."""
        return self._queue.popleft() if self._queue else None

    def dispatch(self, seq: int, carrier: Hashable) -> int:
        """Record a transmission of ``seq`` on ``carrier``; returns the attempt (the tag)."""
        transmissions = self._outstanding[seq]
        if transmissions:
            self.resent += 1
        self._outstanding[seq] = transmissions + 1
        self._attempt_count += 1
        attempt = self._attempt_count
        self._attempts[attempt] = (seq, carrier)
        self._by_carrier.setdefault(carrier, set()).add(attempt)
        return attempt

    # --- what became of it ------------------------------------------------------------------

    def settle(self, attempt: int, outcome: Outcome | None) -> int | None:
        """The router's outcome for ``attempt``; returns its seq, or None for an attempt given
        up already. No outcome at all (settled without a state) is taken as released: the
        message may not have been delivered, so it is sent again."""
        seq = self._forget(attempt)
        if seq is None:
            return None
        if outcome is Outcome.ACCEPTED:
            self.accepted += 1
            del self._outstanding[seq]
        elif outcome is Outcome.REJECTED:
            self.rejected += 1
            del self._outstanding[seq]
        else:
            self._queue.append(seq)
        return seq

    def lost(self, carrier: Hashable) -> int:
        """``carrier`` is gone: every attempt in flight on it is queued to be sent again (in
        the order they were sent). Returns how many."""
        attempts = sorted(self._by_carrier.pop(carrier, ()))
        for attempt in attempts:
            seq, _ = self._attempts.pop(attempt)
            self._queue.append(seq)
        return len(attempts)

    def _forget(self, attempt: int) -> int | None:
        entry = self._attempts.pop(attempt, None)
        if entry is None:
            return None
        seq, carrier = entry
        on_carrier = self._by_carrier.get(carrier)
        if on_carrier is not None:
            on_carrier.discard(attempt)
            if not on_carrier:
                del self._by_carrier[carrier]
        return seq

    # --- counts -------------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Transmissions awaiting an outcome."""
        return len(self._attempts)

    @property
    def queued(self) -> int:
        """Messages waiting to be sent again."""
        return len(self._queue)

    @property
    def unresolved(self) -> int:
        """Messages sent and neither accepted nor rejected (yet)."""
        return len(self._outstanding)

    def in_flight_on(self, carrier: Hashable) -> int:
        return len(self._by_carrier.get(carrier, ()))


@dataclass
class Tally:
    """The receiver's count: every message received, the distinct message-ids among them, and
    duplicates (a message-id seen again: the receiver accepts everything, so a repeat is a
    message delivered more than once). A message without a message-id is counted as distinct:
    there is nothing to compare."""

    received: int = 0
    distinct: int = 0
    duplicates: int = 0
    _seen: set[object] = field(default_factory=set)

    def record(self, message_id: object) -> bool:
        """Count one message; True when its id is new."""
        self.received += 1
        if message_id is not None:
            if message_id in self._seen:
                self.duplicates += 1
                return False
            self._seen.add(message_id)
        self.distinct += 1
        return True
