"""Where each AMQP container is: here, on another router, or across a gateway.

Seed 001 makes every container addressable as `(container-id)/node` from any router. A router
knows four kinds of container: those connected to it (a client, a broker, a service: any
connection whose Open carried a container-id, other than another router's), those connected to
its edge routers (which report them up), those other routers of the network advertise, and those
another network exports through a gateway connection (or the hand-made table names). Container
ids are chosen by clients, so one id may be seen twice; the table keeps every sighting, says which
ids are duplicated, and always picks the same one: here first (the oldest connection), then an
edge of this router, then a gateway here, then the nearest router, equal costs going to the
lowest router id, as Dispatch breaks ties.

Pure bookkeeping: connections are opaque keys, costs are passed in.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass

# Other routers advertise a container as the link-route keys (Dispatch's `C`/`D` classes,
# "link-balanced") of the prefix `(id)`: a qdrouterd in the network then routes links to
# `(id)/node` toward the router that has it, as it does for a route-container's prefixes.
_KEY_CLASSES = ("C", "D")
# Characters that would make the advertised prefix mean something else to Dispatch's parse tree
# (wildcards), or that no `(container)/node` address can hold (router/addressing/uri.py).
_UNADVERTISABLE = frozenset("()*#/")


def keys(container: str) -> tuple[str, str]:
    """The routing-table keys that advertise `container` (in and out)."""
    return (f"C({container})", f"D({container})")


def container_of(key: str) -> str | None:
    """The container a `C(id)`/`D(id)` key advertises; None for any other key."""
    if key[:1] in _KEY_CLASSES and key[1:2] == "(" and key[-1:] == ")" and len(key) > 3:
        return key[2:-1]
    return None


def advertisable(container: str | None) -> bool:
    return bool(container) and not (_UNADVERTISABLE & set(container or ""))


@dataclass(frozen=True, slots=True)
class Here:
    """Connected to this router on `conn`."""

    conn: Hashable


@dataclass(frozen=True, slots=True)
class Below:
    """Connected to the edge router on the other end of `conn`."""

    conn: Hashable


@dataclass(frozen=True, slots=True)
class Across:
    """Reached through the gateway connection `conn` of this router."""

    conn: Hashable


@dataclass(frozen=True, slots=True)
class There:
    """Served by another router of this network."""

    router: str


Location = Here | Below | Across | There


class ContainerTable:
    def __init__(self) -> None:
        self.local: dict[str, list[Hashable]] = {}
        self.remote: dict[str, set[str]] = {}
        self.below: dict[str, list[Hashable]] = {}
        self.imported: dict[str, list[Hashable]] = {}

    def connected(self, container: str, conn: Hashable) -> bool:
        """A connection here opened with this container id; True if the id is now seen
        elsewhere too."""
        self.local.setdefault(container, []).append(conn)
        return self.duplicated(container)

    def disconnected(self, container: str, conn: Hashable) -> None:
        _discard(self.local, container, conn)

    def set_remote(self, router: str, containers: Iterable[str]) -> list[str]:
        """What `router` advertises now (nothing when it is gone); returns the ids that this
        made duplicates."""
        wanted = set(containers)
        for container in [c for c, routers in self.remote.items() if router in routers]:
            if container not in wanted:
                routers = self.remote[container]
                routers.discard(router)
                if not routers:
                    del self.remote[container]
        added = [c for c in sorted(wanted) if router not in self.remote.get(c, ())]
        for container in added:
            self.remote.setdefault(container, set()).add(router)
        return [c for c in added if self.duplicated(c)]

    def set_below(self, conn: Hashable, containers: Iterable[str]) -> None:
        """The containers the edge router on `conn` has now (nothing when it is gone)."""
        _replace(self.below, conn, containers)

    def set_imported(self, conn: Hashable, containers: Iterable[str]) -> None:
        """The containers gateway connection `conn` offers now (nothing when it is gone)."""
        _replace(self.imported, conn, containers)

    def served(self) -> set[str]:
        """The containers this router advertises to the rest of its network."""
        return {c for c in (*self.local, *self.below, *self.imported) if advertisable(c)}

    def native(self) -> set[str]:
        """The containers of this network (not those imported through gateways): what a gateway
        may export."""
        ours = set(self.local) | set(self.below)
        return (ours | set(self.remote)) - (set(self.imported) - ours)

    def duplicated(self, container: str) -> bool:
        return len(self.places(container)) > 1

    def places(self, container: str) -> list[str]:
        """Every sighting of `container`, for logs and management."""
        return [
            *(f"connection {getattr(c, 'conn_id', c)}" for c in self.local.get(container, ())),
            *(f"edge {getattr(c, 'remote_container', c)}" for c in self.below.get(container, ())),
            *(f"gateway {getattr(c, 'conn_id', c)}" for c in self.imported.get(container, ())),
            *(f"router {r}" for r in sorted(self.remote.get(container, ()))),
        ]

    def locate(self, container: str, cost: Mapping[str, int]) -> Location | None:
        """Where to send what is for `container`: deterministic whatever the duplicates."""
        conns = self.local.get(container)
        if conns:
            return Here(conns[0])
        conns = self.below.get(container)
        if conns:
            return Below(conns[0])
        conns = self.imported.get(container)
        if conns:
            return Across(conns[0])
        reachable = [(cost[r], r) for r in self.remote.get(container, ()) if r in cost]
        if reachable:
            return There(min(reachable)[1])
        return None


def _replace(table: dict[str, list[Hashable]], conn: Hashable, containers: Iterable[str]) -> None:
    for container in [c for c, conns in table.items() if conn in conns]:
        _discard(table, container, conn)
    for container in sorted(set(containers)):
        table.setdefault(container, []).append(conn)


def _discard(table: dict[str, list[Hashable]], container: str, conn: Hashable) -> None:
    conns = table.get(container)
    if conns is not None and conn in conns:
        conns.remove(conn)
        if not conns:
            del table[container]
