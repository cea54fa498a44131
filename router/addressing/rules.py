"""Address rules and the token tree they live in, matched as Dispatch's parse tree does.

Configured address rules (and link routes) must match addresses the way Dispatch's parse tree
does (`src/parse_tree.c`), so that one configuration means the same on both kinds of router.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from router.addressing.dispatch import Kind, parse

_SEPARATORS = "./"
_TOKEN_SPLIT = re.compile(r"[./]")

V = TypeVar("V")


DISTRIBUTIONS = ("closest", "balanced", "multicast")
UNDELIVERABLE_ACTIONS = ("drop", "hold", "redirect")


@dataclass(frozen=True, slots=True)
class AddressRule:
    """Semantics for the mobile addresses matching `prefix` (whole segments: `a.b` covers `a.b`,
    `a.b.c`, `a.b/c` but not `a.bc`) or `pattern` (`*` one token, `#` zero or more), as
    Dispatch's `router.config.address`. Invalid combinations raise ValueError at construction so
    that a bad live-config change is refused before it reaches the table."""

    prefix: str | None = None
    pattern: str | None = None
    distribution: str = "balanced"
    undeliverable: str = "drop"
    hold_timeout: float = 30.0
    fallback: str | None = None
    priority: int = -1

    def __post_init__(self) -> None:
        if (self.prefix is None) == (self.pattern is None):
            raise ValueError("exactly one of 'prefix' and 'pattern' must be given")
        if not (self.prefix or self.pattern or "").strip(_SEPARATORS):
            raise ValueError(f"{'prefix' if self.pattern is None else 'pattern'} has no tokens")
        if self.distribution not in DISTRIBUTIONS:
            raise ValueError(f"distribution must be one of {DISTRIBUTIONS}")
        if self.undeliverable not in UNDELIVERABLE_ACTIONS:
            raise ValueError(f"undeliverable must be one of {UNDELIVERABLE_ACTIONS}")
        if self.hold_timeout <= 0:
            raise ValueError("hold_timeout must be positive")
        if (self.undeliverable == "redirect") != (self.fallback is not None):
            raise ValueError("a fallback address is required by, and only by, 'redirect'")
        if self.priority != -1 and not 0 <= self.priority <= 9:
            raise ValueError("priority must be -1 (unset) or 0..9")

    def tokens(self) -> tuple[str, ...]:
        return rule_tokens(self.prefix, self.pattern)


def rule_tokens(prefix: str | None, pattern: str | None) -> tuple[str, ...]:
    """The normalised pattern a prefix or pattern occupies in a TokenTree: a prefix `p` is
    `p/#`, separators at either end are ignored and wildcard runs are rewritten as Dispatch does
    (`#.#` -> `#`, `#.*` -> `*.#`), so equivalent spellings collide as duplicates."""
    text = (prefix if pattern is None else pattern) or ""
    raw = _TOKEN_SPLIT.split(text.strip(_SEPARATORS))
    if pattern is None:
        raw.append("#")
    tokens: list[str] = []
    wildcards: list[str] = []
    for token in raw:
        if token in ("*", "#"):
            wildcards.append(token)
        else:
            tokens += _normalise_wildcards(wildcards)
            wildcards.clear()
            tokens.append(token)
    tokens += _normalise_wildcards(wildcards)
    return tuple(tokens)


def _normalise_wildcards(run: list[str]) -> list[str]:
    # A run of wildcards matches "at least as many tokens as it has stars", which is the stars
    # followed by one `#` if the run had any.
    return ["*"] * run.count("*") + (["#"] if "#" in run else [])


DEFAULT_RULE = AddressRule(pattern="#")


class _Node(Generic[V]):
    __slots__ = ("children", "hash", "star", "value")

    def __init__(self) -> None:
        self.children: dict[str, _Node[V]] = {}
        self.star: _Node[V] | None = None
        self.hash: _Node[V] | None = None
        self.value: V | None = None

    def empty(self) -> bool:
        return self.value is None and not self.children and self.star is None and self.hash is None

    def child(self, token: str) -> _Node[V] | None:
        if token == "*":
            return self.star
        if token == "#":
            return self.hash
        return self.children.get(token)

    def set_child(self, token: str, node: _Node[V] | None) -> None:
        if token == "*":
            self.star = node
        elif token == "#":
            self.hash = node
        elif node is None:
            del self.children[token]
        else:
            self.children[token] = node


class TokenTree(Generic[V]):
    """Values stored under normalised token patterns (see rule_tokens) and found for an address
    with Dispatch's precedence: address rules and link routes match addresses alike."""

    def __init__(self) -> None:
        self._root: _Node[V] = _Node()

    def add(self, tokens: tuple[str, ...], value: V) -> None:
        node = self._root
        for token in tokens:
            nxt = node.child(token)
            if nxt is None:
                nxt = _Node()
                node.set_child(token, nxt)
            node = nxt
        node.value = value

    def remove(self, tokens: tuple[str, ...]) -> None:
        path = [self._root]
        for token in tokens:
            nxt = path[-1].child(token)
            assert nxt is not None
            path.append(nxt)
        path[-1].value = None
        for depth in range(len(tokens), 0, -1):
            if not path[depth].empty():
                break
            path[depth - 1].set_child(tokens[depth - 1], None)

    def find(self, name: str) -> V | None:
        """The value whose pattern best matches `name`, an address without scheme or class."""
        # Leading separators are skipped as in Dispatch's tokenizer; `parse` has already dropped
        # the one trailing separator Dispatch ignores.
        name = name.lstrip(_SEPARATORS)
        return _search_children(self._root, _TOKEN_SPLIT.split(name) if name else [], 0)


class AddressTable:
    """Address rules indexed as a token tree, answering which rule governs an address.

    Only mobile addresses are subject to rules, as in Dispatch, which consults its table for
    `M`-class addresses alone: a local, management or topological address always gets
    DEFAULT_RULE, so that a catch-all rule such as `#` cannot turn reply addresses or
    inter-router traffic into multicast. Answers are memoised per table; `add` and `remove` edit
    the tree in place and drop the memo, so live configuration changes are cheap and never serve
    a stale rule.
    """

    def __init__(self, rules: Iterable[AddressRule], *, cache_size: int = 4096) -> None:
        self._tree: TokenTree[AddressRule] = TokenTree()
        self._rules: dict[tuple[str, ...], AddressRule] = {}
        self._cache: dict[str, AddressRule] = {}
        self._cache_size = cache_size
        for rule in rules:
            self.add(rule)

    @property
    def rules(self) -> tuple[AddressRule, ...]:
        return tuple(self._rules.values())

    def add(self, rule: AddressRule) -> None:
        """Raise ValueError if an equivalent prefix/pattern is already present: Dispatch refuses
        such a CREATE rather than letting one rule silently shadow another."""
        tokens = rule.tokens()
        if tokens in self._rules:
            raise ValueError(f"a rule for {'.'.join(tokens)!r} already exists")
        self._tree.add(tokens, rule)
        self._rules[tokens] = rule
        self._cache.clear()

    def remove(self, rule: AddressRule) -> None:
        """Raise KeyError if `rule` is not in the table."""
        tokens = rule.tokens()
        if self._rules.get(tokens) != rule:
            raise KeyError(rule)
        del self._rules[tokens]
        self._tree.remove(tokens)
        self._cache.clear()

    def lookup(self, address: str) -> AddressRule:
        """The best rule for `address` (in any form `parse` accepts), or DEFAULT_RULE (balanced,
        drop) when none matches or the address is not mobile."""
        rule = self._cache.get(address)
        if rule is None:
            # Mobility does not depend on which router asks, so any router id will do here.
            destination = parse(address, "")
            rule = DEFAULT_RULE
            if destination.kind is Kind.MOBILE:
                rule = self._tree.find(destination.key[2:]) or DEFAULT_RULE
            if len(self._cache) >= self._cache_size:
                del self._cache[next(iter(self._cache))]
            self._cache[address] = rule
        return rule


# The search visits candidates in Dispatch's precedence: at each token an exact child, then `*`,
# then `#` (consuming as few tokens as possible first), backtracking when a branch dead-ends.
# The first rule reached wins. Recursion depth is bounded by the deepest rule, not the address.
def _search(node: _Node[V], tokens: list[str], i: int) -> V | None:
    if i == len(tokens) and node.value is not None:
        return node.value
    return _search_children(node, tokens, i)


def _search_children(node: _Node[V], tokens: list[str], i: int) -> V | None:
    if i < len(tokens):
        exact = node.children.get(tokens[i])
        if exact is not None and (found := _search(exact, tokens, i + 1)) is not None:
            return found
        if node.star is not None and (found := _search(node.star, tokens, i + 1)) is not None:
            return found
    hashed = node.hash
    if hashed is not None:
        for j in range(i, len(tokens)):
            if (found := _search_children(hashed, tokens, j)) is not None:
                return found
        return hashed.value
    return None
