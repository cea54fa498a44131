"""The filters of receivers and bindings on the queues and topics the network hosts (no I/O).

A receiver's source may carry a filter-set: symbol keys, each naming a described value whose
descriptor (a symbol or its ulong code) says the filter type. Supported, from the Apache
filter registry that Qpid and ActiveMQ Artemis share:

- ``apache.org:selector-filter:string`` (0x0000468C00000004): a JMS selector (selector.py);
- ``apache.org:legacy-amqp-direct-binding:string`` (0x0000468C00000000): the subject equals
  the string;
- ``apache.org:legacy-amqp-topic-binding:string`` (0x0000468C00000001): the subject matches an
  AMQP 0-10 topic pattern: '.'-separated words, ``*`` one word, ``#`` zero or more.

A filter type the node does not know is not refused: AMQP 1.0 (3.5.3, the source's filter
field) has the node answer the attach with the filters it actually applies, and leaves the
receiver to detach if one it needs is missing. parse_filters therefore lists those in
``unsupported`` and leaves them out of ``applied``, the filter-set to answer with. A known
filter that is malformed (a selector outside the grammar, a value that is not a string) is the
receiver's mistake, and raises FilterError so that the attach is refused with its message.

A message without a subject has the empty subject: zero words, matched by ``#`` and by a direct
binding to ''.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

import proton

from router.config.records import Binding
from router.nodes.facts import MessageFacts
from router.nodes.selector import SelectorError, compile_selector

FilterKind = Literal["selector", "direct", "topic"]

SELECTOR_FILTER = "apache.org:selector-filter:string"
DIRECT_BINDING = "apache.org:legacy-amqp-direct-binding:string"
TOPIC_BINDING = "apache.org:legacy-amqp-topic-binding:string"

DESCRIPTORS: dict[object, FilterKind] = {
    SELECTOR_FILTER: "selector",
    0x0000468C00000004: "selector",
    DIRECT_BINDING: "direct",
    0x0000468C00000000: "direct",
    TOPIC_BINDING: "topic",
    0x0000468C00000001: "topic",
}
"""Filter types by either form of their descriptor."""


class FilterError(ValueError):
    """A filter of a known type that cannot be applied; the message is one line naming it."""


@lru_cache(maxsize=1024)
def _pattern_words(pattern: str) -> tuple[str, ...]:
    """A pattern's words, cached: each binding's pattern is tested against every message."""
    return tuple(pattern.split(".")) if pattern else ()


def subject_matches(pattern: str, subject: str | None) -> bool:
    """Whether `subject` matches the AMQP 0-10 topic `pattern`: words split at '.', where a word
    ``*`` matches exactly one word (empty ones too) and ``#`` zero or more; '' and None are the
    subject of zero words."""
    words = tuple(subject.split(".")) if subject else ()
    pattern_words = _pattern_words(pattern)
    # reachable[j]: the pattern words seen so far can match the first j subject words.
    reachable = [True] + [False] * len(words)
    for word in pattern_words:
        if word == "#":
            for j in range(1, len(reachable)):
                reachable[j] = reachable[j] or reachable[j - 1]
        else:
            for j in range(len(words), 0, -1):
                reachable[j] = reachable[j - 1] and word in ("*", words[j - 1])
            reachable[0] = False
    return reachable[-1]


@dataclass(frozen=True, slots=True)
class Filter:
    """One filter of a filter-set, compiled."""

    kind: FilterKind
    text: str
    """The selector, the direct binding's subject or the topic pattern."""
    matches: Callable[[MessageFacts], bool] = field(repr=False, compare=False)


def make_filter(kind: FilterKind, text: str) -> Filter:
    """The filter of `kind` for `text`; SelectorError for a selector outside the grammar."""
    if kind == "selector":
        return Filter(kind, text, compile_selector(text).matches)
    if kind == "direct":
        return Filter(kind, text, lambda facts: (facts.subject or "") == text)
    return Filter(kind, text, lambda facts: subject_matches(text, facts.subject))


@dataclass(frozen=True, slots=True)
class Filters:
    """What a receiver or binding takes: the messages every one of `filters` matches."""

    filters: tuple[Filter, ...] = ()
    applied: dict[str, Any] = field(default_factory=dict)
    """The filter-set entries applied, as they came: the source's filter in the attach answer."""
    unsupported: tuple[str, ...] = ()
    """Keys of the entries left out, whose filter type this router does not know."""

    def matches(self, facts: MessageFacts) -> bool:
        return all(f.matches(facts) for f in self.filters)


NO_FILTERS = Filters()


def _descriptor(value: object) -> str | int | None:
    descriptor = value.descriptor if isinstance(value, proton.Described) else None
    if isinstance(descriptor, str):
        return str(descriptor)
    if isinstance(descriptor, int) and not isinstance(descriptor, bool):
        return int(descriptor)
    return None


def parse_filters(filter_set: Mapping[Any, Any] | None) -> Filters:
    """The filters of a source's filter-set as proton's Data.get_object() gives it (None or
    empty: none). FilterError for a supported filter that cannot be applied."""
    if not filter_set:
        return NO_FILTERS
    filters: list[Filter] = []
    applied: dict[str, Any] = {}
    unsupported: list[str] = []
    for key, value in filter_set.items():
        kind = DESCRIPTORS.get(_descriptor(value))
        if kind is None:
            unsupported.append(str(key))
            continue
        text = value.value
        if not isinstance(text, str):
            raise FilterError(f"filter {str(key)!r}: a {kind} filter's value must be a string")
        try:
            filters.append(make_filter(kind, str(text)))
        except SelectorError as error:
            raise FilterError(f"filter {str(key)!r}: {error}") from None
        applied[key] = value
    return Filters(tuple(filters), applied, tuple(unsupported))


def binding_filters(binding: Binding) -> Filters:
    """What a binding of an address's node passes on: its selector and subject pattern both."""
    filters = []
    if binding.selector is not None:
        filters.append(make_filter("selector", binding.selector))
    if binding.subject is not None:
        filters.append(make_filter("topic", binding.subject))
    return Filters(tuple(filters))


def described(filters: Filters | None) -> list[list[str]]:
    """The filters as JSON can keep them (a durable subscription's, in the store's nodes.json
    and in the attach that moves it): [kind, text] each."""
    return [[f.kind, f.text] for f in filters.filters] if filters is not None else []


def from_described(items: object) -> Filters | None:
    """The filters `described` gave (None for none). What does not compile any more (an
    older router's selector grammar, a file edited by hand) is a FilterError."""
    if not items:
        return None
    if not isinstance(items, list | tuple):
        raise FilterError(f"stored filters {items!r} are not a list")
    filters = []
    for item in items:
        kind = item[0] if isinstance(item, list | tuple) and len(item) == 2 else None
        if kind not in ("selector", "direct", "topic") or not isinstance(item[1], str):
            raise FilterError(f"stored filter {item!r} is not [kind, text]")
        try:
            filters.append(make_filter(kind, item[1]))
        except SelectorError as error:
            raise FilterError(f"stored selector {item[1]!r}: {error}") from None
    return Filters(tuple(filters))
