"""Draining: how a router leaves (scale-down, rolling upgrade) without losing a message.

On the first SIGTERM or SIGINT the router drains before it closes. It:
- stops listening and stops following its configuration (a change cannot reopen a listener);
- refuses new links from clients: the attach is answered, then detached with
  ``amqp:link:detach-forced`` ("an operator intervened") and a description saying the router
  is shutting down (the engine's `on_link_open`); links between routers are still taken;
- gives clients' senders no more credit, so they stop sending here (what they were already
  given may still arrive: it is routed as usual);
- releases deliveries held for a consumer that has not appeared (``undeliverable: hold``), and
  releases at once what would be held from now on, so that their senders can resend them
  through a router that stays;
- on an interior router, withdraws from the network the mobile addresses only its own clients
  consume, so other routers stop routing new deliveries to it (those consumers still get what
  is on its way). Addresses an edge consumes through it stay: the edge keeps this router as its
  uplink until it is gone, and only then moves to another interior;
- keeps forwarding: queued deliveries go out as consumers give credit, outcomes go back to
  senders, inter-router and edge links keep their credit, management still answers on links
  already attached.

A router with a store that is no host of any node any more (its Router scaled in: the
operator shrank the hosts first) also waits until it has moved every node it still holds to
its host (router/nodes/moving.py), so that nothing stays behind on a volume that is going.
A host waits for its outboxes (dead letters, bindings' copies for nodes on other routers) to
be taken: kept in its store, they would otherwise wait for it to come back.

It waits until no delivery it holds is unsettled and none waits for a consumer's credit, at most
``router.drainTimeoutSeconds`` (``--drain-seconds``), or until a second SIGTERM/SIGINT; then the
engine's `shutdown` releases whatever is left to its senders and closes every connection.
Logs: ``router.draining`` (what it holds), ``router.drained`` (why the wait ended, what is left).

Not withdrawn either: the telemetry address. A collector attached here keeps receiving the
last windows the other routers send as they drain too (the whole network stopping at once);
telemetry is pre-settled, so it never holds a drain up.

Not withdrawn: transit paths through an interior (routers keep sending through it until it is
gone; what is in flight then comes back to its senders released or modified), and a draining
edge's consumers (its interior keeps routing to them until the edge leaves). Traffic through
either keeps a drain going until its timeout.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from router.log import get_logger
from router.telemetry.schema import TELEMETRY_ADDRESS

if TYPE_CHECKING:
    from router.core.engine import Router

log = get_logger("router")

# The AMQP condition a draining router refuses new links with.
DRAINING_ERROR = "amqp:link:detach-forced"
# How often the loop counts what is still held (a walk over every link).
CHECK_SECONDS = 0.02
# Connection roles whose new links are refused while draining: clients, not other routers.
CLIENT_ROLES = frozenset({"normal", "route-container", "gateway"})


def refuses(router: Router, role: str) -> bool:
    """Whether a new link on a connection of `role` is refused (the router is draining)."""
    return router.fwd.draining and role in CLIENT_ROLES


def refusal(router: Router) -> str:
    return f"router {router.id} is shutting down: attach through another router"


def outstanding(router: Router) -> tuple[int, int, int]:
    """(senders' deliveries still unsettled in the router, deliveries waiting for credit,
    nodes and outboxes still to move away)."""
    unsettled = queued = 0
    for link in router.links.values():
        if link.incoming:
            unsettled += len(link.unsettled)
        else:
            queued += len(link.queue)
    nodes = router.nodes
    moving = 0
    if nodes.store is not None:
        moving = nodes.outboxes_holding() if nodes.hosting else nodes.held()
    return unsettled, queued, moving


class Drain:
    """One drain, from the first signal to the moment the engine shuts down."""

    def __init__(self, router: Router, now: float) -> None:
        self.router = router
        self.started = now
        self.timeout = router.config.router.drainTimeoutSeconds
        self.deadline = now + self.timeout
        self.next_check = 0.0
        self.left = (0, 0, 0)
        self.reason = ""

    def begin(self) -> None:
        router = self.router
        fwd = router.fwd
        fwd.draining = True
        for source in router.config_sources:
            source.stop()
        for sock, _cfg in list(router.listeners):
            router.close_listener(sock)
        released = 0
        for entry in list(fwd.holding):
            while entry.held:
                q = entry.held.popleft()
                fwd.unblock(q)
                fwd.drop(q.fwd)
                released += 1
            fwd.holding.discard(entry)
            fwd.forget_if_idle(entry)
        withdrawn = 0
        if router.network is not None:
            for entry in fwd.entries.values():
                consumers = entry.consumers
                if (
                    entry.key[0] == "M"
                    and consumers
                    and all(c.kind == "endpoint" for c in consumers)
                    and entry.address != TELEMETRY_ADDRESS
                ):
                    router.network.control.remove_local(entry.key)
                    withdrawn += 1
        unsettled, queued, moving = outstanding(router)
        log.info(
            "router.draining",
            id=router.id,
            signal=router.stop_signals[0],
            unsettled=unsettled,
            queued=queued,
            moving_nodes=moving,
            released_held=released,
            withdrawn_addresses=withdrawn,
            connections=len(router.conns),
            timeout=self.timeout,
        )

    def keep_going(self) -> bool:
        """The loop's condition while draining; sets `reason` when the wait is over."""
        router = self.router
        if len(router.stop_signals) > 1:
            self.reason = "signal"
            self.left = outstanding(router)
            return False
        now = time.monotonic()
        if now >= self.next_check or now >= self.deadline:
            self.next_check = now + CHECK_SECONDS
            self.left = outstanding(router)
            if not any(self.left):
                self.reason = "settled"
                return False
            if now >= self.deadline:
                self.reason = "timeout"
                return False
        return True

    def finish(self) -> None:
        unsettled, queued, moving = self.left
        log.info(
            "router.drained",
            id=self.router.id,
            reason=self.reason,
            seconds=round(time.monotonic() - self.started, 3),
            unsettled=unsettled,
            queued=queued,
            moving_nodes=moving,
            **({"signal": self.router.stop_signals[1]} if self.reason == "signal" else {}),
        )


def run(router: Router) -> None:
    """Drain after the first stop signal; returns when the engine should shut down."""
    drain = Drain(router, time.monotonic())
    drain.begin()
    router.loop(drain.keep_going)
    drain.finish()
