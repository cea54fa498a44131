"""Link routes: which links go, attach and all, to a container such as a broker.

A message route picks a destination per message; a link route picks one per link: the client's
attach is passed on hop by hop until it reaches the container, and from then on the link's
transfers, dispositions and credit are relayed along that path untouched. This module holds the
pure part: matching an address to a route (with Dispatch's prefix/pattern precedence), the
routing-table keys Dispatch uses for routes (`C`/`D` for prefixes, `E`/`F` for patterns, in/out),
and the external-prefix rewriting of addresses on the container's side (and back).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from router.addressing import Kind, TokenTree, parse, rule_tokens
from router.addressing.rewrite import Rewrite, external
from router.config.records import RouterConfig

# The hint link-route keys carry in mobile address updates: Dispatch's "link-balanced".
LINK_BALANCED = 4
NO_ROUTE = "qd:no-route-to-dest"
LINK_LOST = "qd:routed-link-lost"


@dataclass(frozen=True, slots=True)
class LinkRouteRule:
    """One link route. `direction` is seen from the client: "in" for links on which the client
    sends (into the router), "out" for links on which it receives. A `scoped` route names no
    container: the connections that created it over management (router/linkroutes/scoped.py), or
    the other routers that advertise it, serve it (router/linkroutes/relay.py)."""

    direction: str
    prefix: str | None = None
    pattern: str | None = None
    container_id: str | None = None
    connection: str | None = None
    add_prefix: str | None = None
    del_prefix: str | None = None
    scoped: bool = False

    def __post_init__(self) -> None:
        if self.direction not in ("in", "out"):
            raise ValueError("direction must be 'in' or 'out'")
        if (self.prefix is None) == (self.pattern is None):
            raise ValueError("exactly one of 'prefix' and 'pattern' must be given")
        if self.scoped:
            if self.container_id is not None or self.connection is not None:
                raise ValueError("a connection-scoped route names no container or connection")
        elif (self.container_id is None) == (self.connection is None):
            raise ValueError("exactly one of 'container_id' and 'connection' must be given")

    @property
    def key(self) -> str:
        """The routing-table key, as Dispatch hashes it: what a router with the container
        advertises to the others in its mobile address updates.

        Dispatch turns a prefix `p` into the pattern `p.#`, and keys any pattern whose only
        wildcard is a final `#` as the prefix before it (`a.b.#` -> `Ca.b`, for routers that
        know prefixes only); its address hash then drops one trailing separator."""
        inbound = self.direction == "in"
        if self.prefix is not None:
            text, as_prefix = self.prefix, True
        else:
            text = self.pattern or ""
            as_prefix = "*" not in text and text.endswith("#") and text.count("#") == 1
            if as_prefix:
                text = text[:-1]
        if text.endswith((".", "/")):
            text = text[:-1]
        if as_prefix:
            return ("C" if inbound else "D") + text
        return ("E" if inbound else "F") + text

    def tokens(self) -> tuple[str, ...]:
        return rule_tokens(self.prefix, self.pattern)

    def serves(self, container_id: str | None, connection_name: str) -> bool:
        """Whether links of this route go to a route-container connection with this peer
        container id and this (listener's or connector's) name."""
        if self.container_id is not None:
            return self.container_id == container_id
        return self.connection is not None and self.connection == connection_name

    def external(self, address: str) -> tuple[str, Rewrite | None]:
        """The address the container sees (delExternalPrefix taken off, addExternalPrefix put
        on), and how to turn the container's answer back into `address`."""
        return external(address, self.add_prefix, self.del_prefix)


class LinkRouteTable:
    """Link routes by direction, indexed like address rules. Equivalent prefixes or patterns
    in one direction are refused, as Dispatch refuses them."""

    def __init__(self, rules: Iterable[LinkRouteRule] = ()) -> None:
        self._trees: dict[str, TokenTree[LinkRouteRule]] = {"in": TokenTree(), "out": TokenTree()}
        self._rules: dict[tuple[str, tuple[str, ...]], LinkRouteRule] = {}
        for rule in rules:
            if self.get(rule.direction, rule.tokens()) is not None:
                raise ValueError(
                    f"a link route for {'.'.join(rule.tokens())!r} direction {rule.direction} "
                    "exists"
                )
            self.add(rule)

    @property
    def rules(self) -> tuple[LinkRouteRule, ...]:
        return tuple(self._rules.values())

    @property
    def configured(self) -> tuple[LinkRouteRule, ...]:
        """The configuration's routes (`linkRoutes`), without the scoped and learned ones."""
        return tuple(rule for rule in self._rules.values() if not rule.scoped)

    def get(self, direction: str, tokens: tuple[str, ...]) -> LinkRouteRule | None:
        return self._rules.get((direction, tokens))

    def add(self, rule: LinkRouteRule) -> None:
        """Put `rule` in (replacing one of the same direction and pattern)."""
        tokens = rule.tokens()
        self._rules[(rule.direction, tokens)] = rule
        self._trees[rule.direction].add(tokens, rule)

    def remove(self, rule: LinkRouteRule) -> None:
        tokens = rule.tokens()
        del self._rules[(rule.direction, tokens)]
        self._trees[rule.direction].remove(tokens)

    def __bool__(self) -> bool:
        return bool(self._rules)

    def lookup(self, address: str | None, direction: str) -> LinkRouteRule | None:
        """The route for a link with this address, if any. Only mobile addresses are link
        routed: `_local`, `_topo`, `_edge` and `$management` always stay with the router."""
        if not self._rules or not address:
            return None
        destination = parse(address, "")
        # An edge's space (`_edge/<edge>/...`) parses as mobile away from that edge, and as
        # mobile here too since no router id is given: it is the edge's, never a container's.
        if destination.kind is not Kind.MOBILE or destination.key.startswith("M0_edge/"):
            return None
        return self._trees[direction].find(destination.key[2:])


def link_route_table(config: RouterConfig) -> LinkRouteTable:
    """The table for a configuration's `linkRoutes` (which validation made conflict-free)."""
    return LinkRouteTable(
        LinkRouteRule(
            direction=r.direction,
            prefix=r.prefix,
            pattern=r.pattern,
            container_id=r.containerId,
            connection=r.connection,
            add_prefix=r.addExternalPrefix,
            del_prefix=r.delExternalPrefix,
        )
        for r in config.linkRoutes
    )
