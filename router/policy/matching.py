"""The address and host lists of a vhost's groups, matched as Qpid Dispatch matches them.

Plain lists (``sources``, ``targets``): an item ``*`` allows any address; an item ending in
``*`` allows the addresses that start with the rest; any other item allows itself, compared
exactly; ``${user}`` anywhere in an item stands for the connection's user. Pattern lists
(``sourcePattern``, ``targetPattern``): Dispatch's parse-tree patterns (router.addressing:
tokens separated by '.' or '/', ``*`` one token, ``#`` any number), where ``${user}`` may be
the whole first or last token and matches the user's name there. An empty address is never
allowed by either. Remote hosts: ``*``, one address, or an inclusive range LOW-HIGH of one
family.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from router.addressing import TokenTree, rule_tokens

USER = "${user}"  # as router/config/policy.py, which pulls in pydantic: not here
_SEPARATORS = "./"


class PlainList:
    """``sources``/``targets``."""

    __slots__ = ("items",)

    def __init__(self, items: Sequence[str]) -> None:
        self.items = tuple(items)

    def allows(self, address: str, user: str) -> bool:
        if not address:
            return False
        for item in self.items:
            if item == "*":
                return True
            wanted = item.replace(USER, user, 1)
            if wanted.endswith("*"):
                if address.startswith(wanted[:-1]):
                    return True
            elif address == wanted:
                return True
        return False


class PatternList:
    """``sourcePattern``/``targetPattern``: every item in one token tree, ``${user}`` kept as
    a literal token there and the user's name put in its place at lookup."""

    __slots__ = ("first", "last", "plain", "tree")

    def __init__(self, items: Sequence[str]) -> None:
        self.tree: TokenTree[bool] = TokenTree()
        self.plain = self.first = self.last = False
        for item in items:
            self.tree.add(rule_tokens(None, item), True)
            tokens = item.replace("/", ".").split(".")
            if tokens[0] == USER:
                self.first = True
            elif tokens[-1] == USER:
                self.last = True
            else:
                self.plain = True

    def allows(self, address: str, user: str) -> bool:
        if not address:
            return False
        if self.plain and self.tree.find(address):
            return True
        if self.first and address.startswith(user):
            rest = address[len(user) :]
            if (not rest or rest[0] in _SEPARATORS) and self.tree.find(USER + rest):
                return True
        if self.last and address.endswith(user):
            head = address[: len(address) - len(user)]
            if head and head[-1] in _SEPARATORS and self.tree.find(head + USER):
                return True
        return False


class NoAddresses:
    """Neither list given: nothing is allowed."""

    __slots__ = ()

    def allows(self, address: str, user: str) -> bool:
        return False


Addresses = PlainList | PatternList | NoAddresses


def addresses(plain: Sequence[str] | None, pattern: Sequence[str] | None) -> Addresses:
    if pattern is not None:
        return PatternList(pattern)
    if plain is not None:
        return PlainList(plain)
    return NoAddresses()


Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class Hosts:
    """``remoteHosts``: ``*``, single addresses and inclusive ranges."""

    __slots__ = ("any", "ranges")

    def __init__(self, items: Sequence[str]) -> None:
        self.any = "*" in items
        self.ranges: list[tuple[Address, Address]] = []
        for item in items:
            if item != "*":
                ends = [ipaddress.ip_address(end.strip()) for end in item.split("-")]
                self.ranges.append((ends[0], ends[-1]))

    def allows(self, host: str) -> bool:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # an IPv4 client on a dual-stack listener
        if self.any:
            return True
        return any(
            low.version == address.version and low <= address <= high  # type: ignore[operator]
            for low, high in self.ranges
        )
