"""What the chaos soak's clients saw, and whether it keeps the promises: every message a
sender saw accepted reached a consumer (every one of them, for a topic's durable
subscriptions), duplicates only where a router died holding unsettled deliveries. A consumer
getting the same message twice is a duplicate; two subscribers each getting it is not. For
request/response a request is delivered when its reply reaches the requester.

Pure bookkeeping, thread-safe (the clients record from their own thread, the runner reads).
Messages are identified by ``<kind>-<n>``, which the senders put in the message id.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Flow:
    """One kind of traffic (anycast, queue, multicast)."""

    sent: int = 0
    accepted: set[str] = field(default_factory=set)
    resent: int = 0
    """Messages sent again: released, modified, or unsettled when their connection was lost."""
    received: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Copies received, by (consumer, id): a multicast message is one per subscriber."""
    delivered: set[str] = field(default_factory=set)


class Ledger:
    def __init__(
        self, kinds: tuple[str, ...], subscribers: dict[str, tuple[str, ...]] | None = None
    ) -> None:
        self.flows = {kind: Flow() for kind in kinds}
        self.subscribers = subscribers or {}
        """Kinds whose every consumer named here must get every message accepted (a durable
        subscription keeps what is published while its subscriber is away)."""
        self._lock = threading.Lock()

    def sent(self, kind: str, resend: bool = False) -> None:
        with self._lock:
            flow = self.flows[kind]
            flow.sent += 1
            flow.resent += resend

    def accepted(self, kind: str, mid: str) -> None:
        with self._lock:
            self.flows[kind].accepted.add(mid)

    def received(self, kind: str, mid: str, consumer: str = "") -> None:
        with self._lock:
            flow = self.flows[kind]
            flow.received[consumer, mid] += 1
            flow.delivered.add(mid)

    def lost(self, kind: str) -> list[str]:
        """Accepted and never received (by one of the subscribers that must get it all, as
        ``<subscriber>:<id>``)."""
        with self._lock:
            return sorted(self._lost(kind))

    def _lost(self, kind: str) -> set[str]:
        flow = self.flows[kind]
        if kind not in self.subscribers:
            return flow.accepted - flow.delivered
        return {
            f"{consumer}:{mid}"
            for consumer in self.subscribers[kind]
            for mid in flow.accepted
            if (consumer, mid) not in flow.received
        }

    def summary(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {
                kind: {
                    "sent": flow.sent,
                    "resent": flow.resent,
                    "accepted": len(flow.accepted),
                    "delivered": len(flow.delivered),
                    "duplicates": sum(n - 1 for n in flow.received.values() if n > 1),
                    "lost": len(self._lost(kind)),
                }
                for kind, flow in self.flows.items()
            }
