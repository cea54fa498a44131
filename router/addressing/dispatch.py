"""Address classification, following Qpid Dispatch's conventions.

Routernet shares networks and tools with qdrouterd, so an address must land in the same class,
under the same routing-table key, as Dispatch would put it (`src/iterator.c`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

MANAGEMENT_ADDRESS = "$management"
# The routing-table key of every `(container)/node` address: one entry whose handler
# (router/containers/messages.py) reads the container from each message's address. Class `L`,
# so Dispatch's tools show it as local and an edge does not send it up before the handler looks.
CONTAINER_KEY = "L()"

# Dispatch skips "scheme:/", "scheme://host/" and a bare leading "/" before reading the node
# name; "amqp://host" with no path is left whole, as Dispatch leaves it.
_SCHEME = re.compile(r"(?:amqps?:)?(?://[^/]*/|/(?=[^/]))", re.IGNORECASE)
# Per-message lookups for anonymous senders hit this; distinct addresses beyond it (say, one
# reply address per request) only cost a re-parse.
_PARSE_CACHE_SIZE = 4096


class Kind(StrEnum):
    LOCAL = "local"
    MANAGEMENT = "management"
    REMOTE = "remote"
    MOBILE = "mobile"
    CONTAINER = "container"


@dataclass(frozen=True, slots=True)
class Destination:
    """Where an address leads: `key` is the routing-table key, spelled as Dispatch's address
    hash (`L<x>`, `M0<x>`, `R<router>`) so that qdstat shows our keys the way it shows its own.
    `address` is the address with any `amqp:` scheme and host removed; `router` is set only for
    remote topological destinations."""

    kind: Kind
    key: str
    address: str
    router: str | None = None


@lru_cache(maxsize=_PARSE_CACHE_SIZE)
def parse(address: str, router_id: str) -> Destination:
    """Classify `address` as seen by router `router_id`.

    Every spelling of a local node yields the same key, so a dynamic receiver given
    `_topo/0/R1/temp.abc` and a sender to `_local/temp.abc` meet. `_topo/0/all/<x>` is treated
    as local (Dispatch keys it `T<x>` and floods it; flooding is not implemented yet).
    `_edge/<edge>/<x>` is local on that edge and the mobile address `_edge/<edge>` elsewhere.
    The global forms of seed 001 (router/addressing/uri.py): `(container)/node` and `()/node`,
    also after `_topo/0/<this router>/`, are CONTAINER, the path in `address`; a reserved
    `$node` is local to the router the client is attached to, never routed or advertised.
    Deliberate gap, falling through to mobile: `_topo/<area>/...` for an area other than
    `0`/`all`, which Dispatch keys `A<area>` but never routes since area routing was never
    built.
    """
    match = _SCHEME.match(address)
    stripped = address[match.end() :] if match else address
    # Dispatch drops one trailing separator before hashing, so `orders/` is `orders`.
    name = stripped[:-1] if stripped[-1:] in (".", "/") else stripped
    if name.startswith("_local/"):
        return _local(name[7:], stripped)
    if name.startswith("_topo/"):
        area, slash, rest = name[6:].partition("/")
        if slash and area in ("0", "all"):
            router, _, path = rest.partition("/")
            if router in (router_id, "all"):
                return _local(path, stripped)
            return Destination(Kind.REMOTE, "R" + router, stripped, router)
    if name.startswith("_edge/"):
        # An edge router's own space: local there; elsewhere routed as the mobile address
        # `_edge/<id>` that the edge's interior advertises for it.
        edge, _, path = name[6:].partition("/")
        if edge == router_id:
            return _local(path, stripped)
        return Destination(Kind.MOBILE, f"M0_edge/{edge}", stripped)
    if name[:1] == "$":
        return _local(name, stripped)
    if name[:1] == "(":
        return Destination(Kind.CONTAINER, CONTAINER_KEY, name)
    if name[:4].lower() == "amqp":
        # The seed's `amqp:(c)/node` has no slash after the scheme, which _SCHEME requires.
        scheme, colon, rest = name.partition(":")
        if colon and rest[:1] == "(" and scheme.lower() in ("amqp", "amqps"):
            return Destination(Kind.CONTAINER, CONTAINER_KEY, rest)
    return Destination(Kind.MOBILE, "M0" + name, stripped)


def _local(path: str, address: str) -> Destination:
    if path[:1] == "(":
        return Destination(Kind.CONTAINER, CONTAINER_KEY, path)
    kind = Kind.MANAGEMENT if path == MANAGEMENT_ADDRESS else Kind.LOCAL
    return Destination(kind, "L" + path, address)
