"""Connection-scoped link routes: link routes a peer creates for itself, over management.

A qdrouterd edge with link routes of its own (a broker behind it) registers each on its
interior: a management CREATE of `org.apache.qpid.dispatch.router.connection.linkRoute`,
`{name, pattern, direction}`, sent to `$management` over its uplink, and a DELETE by identity
when the route goes (Dispatch's edge_router/link_route_proxy.c). Dispatch lets any connection
do so (policy `allowDynamicLinkRoutes`, on by default): the route serves links toward that
connection only, is seen by that connection only (READ, QUERY), and lives as long as it does.
Without this, an interior answers the edge's CREATE with an error and links from elsewhere to
the edge's broker find no route.

Only edge and route-container connections may create them (CREATORS). This module holds the
bookkeeping, free of the engine: which connection created which route,
and which connections serve a (direction, pattern). router/linkroutes/relay.py puts the patterns in
its link-route table, relays matching links to a serving connection and, in a network,
advertises them as it advertises its containers' routes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import count
from typing import Any

from router.addressing import rule_tokens

CONN_LINK_ROUTE = "org.apache.qpid.dispatch.router.connection.linkRoute"
# Dispatch's column order for the type (agent_conn_link_route.c).
ATTRIBUTES = ("name", "identity", "type", "pattern", "direction", "containerId")
MAX_PATTERN = 1000
# Management status codes, as the AMQP management draft takes them from HTTP.
CREATED, NO_CONTENT, BAD_REQUEST, FORBIDDEN, NOT_FOUND = 201, 204, 400, 403, 404
# Who may create them: edges (for their containers) and containers themselves. Dispatch lets any
# connection unless a policy says `allowDynamicLinkRoutes: false`; a client that could take any
# pattern could take every new link in the network (`#`), so ours refuse other clients.
CREATORS = frozenset({"edge", "route-container"})


class RequestError(Exception):
    """A request refused: its status code and a one-line description."""

    def __init__(self, status: int, description: str) -> None:
        super().__init__(description)
        self.status = status
        self.description = description


@dataclass(frozen=True, slots=True)
class ScopedRoute:
    identity: str
    name: str | None
    pattern: str
    direction: str
    tokens: tuple[str, ...]

    def row(self, container_id: str | None) -> dict[str, Any]:
        return {
            "name": self.name,
            "identity": self.identity,
            "type": CONN_LINK_ROUTE,
            "pattern": self.pattern,
            "direction": self.direction,
            "containerId": container_id,
        }


def _pattern(value: object) -> str:
    if not isinstance(value, str):
        raise RequestError(BAD_REQUEST, "Pattern field is required (a string)")
    if not value.strip("./") or len(value) > MAX_PATTERN:
        raise RequestError(
            BAD_REQUEST, f"Pattern must name at least one token, in at most {MAX_PATTERN} chars"
        )
    return value


def _direction(value: object) -> str:
    if value is None:
        raise RequestError(BAD_REQUEST, "Missing value for 'direction'")
    if value not in ("in", "out"):
        raise RequestError(BAD_REQUEST, "Invalid value for 'direction': 'in' or 'out'")
    return str(value)


class ScopedRoutes:
    """The connection-scoped link routes of one router. Connections are opaque keys here."""

    def __init__(self) -> None:
        self.by_conn: dict[Any, dict[str, ScopedRoute]] = {}
        # (direction, pattern tokens) -> the connections that serve it, oldest first
        self.serving: dict[tuple[str, tuple[str, ...]], list[Any]] = {}
        self._identities = count(1)

    def create(self, conn: Any, name: str | None, attributes: object) -> ScopedRoute:
        if not isinstance(attributes, Mapping):
            raise RequestError(BAD_REQUEST, "Body of request must be a map")
        pattern = _pattern(attributes.get("pattern"))
        direction = _direction(attributes.get("direction"))
        mine = self.by_conn.setdefault(conn, {})
        if name is not None and any(r.name == name for r in mine.values()):
            raise RequestError(BAD_REQUEST, f"A link route named {name[:40]!r} exists already")
        route = ScopedRoute(
            str(next(self._identities)),
            name,
            pattern,
            direction,
            rule_tokens(None, pattern),
        )
        mine[route.identity] = route
        self.serving.setdefault((direction, route.tokens), []).append(conn)
        return route

    def find(self, conn: Any, name: str | None, identity: str | None) -> ScopedRoute | None:
        """By identity if given, else by name, as Dispatch looks them up."""
        mine = self.by_conn.get(conn, {})
        if identity is not None:
            return mine.get(identity)
        return next((r for r in mine.values() if r.name == name), None)

    def delete(self, conn: Any, route: ScopedRoute) -> None:
        del self.by_conn[conn][route.identity]
        if not self.by_conn[conn]:
            del self.by_conn[conn]
        key = (route.direction, route.tokens)
        servers = self.serving[key]
        servers.remove(conn)
        if not servers:
            del self.serving[key]

    def drop(self, conn: Any) -> list[ScopedRoute]:
        """A connection closed: its routes go with it."""
        routes = list(self.by_conn.get(conn, {}).values())
        for route in routes:
            self.delete(conn, route)
        return routes

    def routes(self, conn: Any) -> list[ScopedRoute]:
        return list(self.by_conn.get(conn, {}).values())
