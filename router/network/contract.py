"""What the engine and the control plane exchange: timer settings, the engine's side of the
contract (`Container`), and the routing table handed to it (`Routes`).

Kept apart from the protocol modules so the engine can depend on this small surface alone.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Timers:
    """Protocol timers, named and defaulted as Dispatch's `router` entity attributes.

    `mobileSyncIntervalSeconds` is ours: Dispatch batches mobile-address changes on its core's
    one-second timer. We default to 0.25 s so a new consumer is announced network-wide well
    within a second (worst case one interval plus a tick plus transit), while a router whose
    consumers churn still sends at most four differential MAUs (and four RAs) per second.
    The first change after a quiet interval goes out at the next tick, not after a full
    interval: the interval only spaces consecutive batches.
    """

    helloIntervalSeconds: float = 1.0
    helloMaxAgeSeconds: float = 3.0
    raIntervalSeconds: float = 30.0
    raIntervalFluxSeconds: float = 4.0
    remoteLsMaxAgeSeconds: float = 60.0
    mobileSyncIntervalSeconds: float = 0.25

    @property
    def tick_seconds(self) -> float:
        """How often the engine should call `ControlPlane.tick`: often enough that HELLOs and
        mobile batches leave on time (a slower tick only delays them, it breaks nothing)."""
        return min(self.helloIntervalSeconds, self.mobileSyncIntervalSeconds)


@dataclass(frozen=True)
class Routes:
    """The routing table the control plane computed, handed whole to the engine.

    * `next_hop[r]`: the neighbor link (as given to `link_up`) to send toward router r; every
      reachable router has one, neighbors included (a neighbor may be cheaper to reach through
      another router than over its direct link);
    * `via[r]`: the router id at the other end of `next_hop[r]` (r itself for a direct route),
      for traces and management;
    * `cost[r]`: total link cost to r;
    * `valid_origins[r]`: origins whose multicast copies toward r this router forwards (see
      `path.Paths`); keys are the reachable routers;
    * `radius`: hops to the farthest router; a delivery whose trace is longer than
      `radius + 1` is looping;
    * `neighbors[r]`: the two-way neighbors and their control link.
    """

    next_hop: Mapping[str, Hashable] = field(default_factory=dict)
    via: Mapping[str, str] = field(default_factory=dict)
    cost: Mapping[str, int] = field(default_factory=dict)
    valid_origins: Mapping[str, frozenset[str]] = field(default_factory=dict)
    radius: int = 0
    neighbors: Mapping[str, Hashable] = field(default_factory=dict)

    @classmethod
    def empty(cls) -> Routes:
        """A standalone router's table: nobody reachable."""
        return cls()


class Container(Protocol):
    """Implemented by the engine; the control plane calls it, never the other way round from
    inside these calls (the control plane is not re-entrant)."""

    def send_hello(self, link: Hashable, body: dict[str, Any]) -> None:
        """Send a HELLO (to `amqp:/_local/qdhello`, opcode HELLO) on that neighbor's control
        link only: HELLO travels one hop."""

    def send(self, address: str, opcode: str, body: dict[str, Any]) -> None:
        """Route a control message: `_topo/0/all/...` floods to every router (trace-guarded),
        `_topo/0/<id>/...` goes toward router `<id>` on `Routes.next_hop`; drop it if there is
        no route (the protocol retries)."""

    def topology_changed(self, routes: Routes) -> None:
        """The routing table changed; replace the previous one."""

    def mobile_changed(self, router_id: str, added: dict[str, int], removed: list[str]) -> None:
        """What changed in router_id's mobile addresses: keys added or whose treatment hint
        changed (hash key -> hint; -1 when the sender gave no hint), and keys gone (all of
        them when the router is). Changes, not the whole set: a router with 10,000 addresses
        sends them a few hundred at a time, and each batch costs what it holds."""

    def duplicate_router(self, router_id: str, detail: str) -> None:
        """Another router uses our id: routing is unreliable until it is fixed; log loudly."""
