"""Address classification and address rules, checked against Qpid Dispatch's behaviour."""

from __future__ import annotations

import pytest

from router.addressing import (
    CONTAINER_KEY,
    DEFAULT_RULE,
    AddressRule,
    AddressTable,
    Destination,
    Kind,
    parse,
)

ME = "R1"


@pytest.mark.parametrize(
    ("address", "kind", "key", "router"),
    [
        ("_local/qdhello", Kind.LOCAL, "Lqdhello", None),
        ("amqp:/_local/qdhello", Kind.LOCAL, "Lqdhello", None),
        ("_topo/0/R1/temp.abc", Kind.LOCAL, "Ltemp.abc", None),
        ("amqp:/_topo/0/R1/temp.abc", Kind.LOCAL, "Ltemp.abc", None),
        ("_topo/0/all/qdrouter", Kind.LOCAL, "Lqdrouter", None),
        ("amqp:/_topo/0/all/qdrouter", Kind.LOCAL, "Lqdrouter", None),
        ("_topo/all/R1/x", Kind.LOCAL, "Lx", None),
        ("_topo/0/R2/qdrouter", Kind.REMOTE, "RR2", "R2"),
        ("amqp:/_topo/0/R2/qdrouter.ma", Kind.REMOTE, "RR2", "R2"),
        ("_topo/0/R2", Kind.REMOTE, "RR2", "R2"),
        ("_topo/0/R2/$management", Kind.REMOTE, "RR2", "R2"),
        ("$management", Kind.MANAGEMENT, "L$management", None),
        ("_local/$management", Kind.MANAGEMENT, "L$management", None),
        ("_topo/0/R1/$management", Kind.MANAGEMENT, "L$management", None),
        ("amqp:/_topo/0/R1/$management", Kind.MANAGEMENT, "L$management", None),
        ("orders.eu", Kind.MOBILE, "M0orders.eu", None),
        ("orders/", Kind.MOBILE, "M0orders", None),
        ("orders.", Kind.MOBILE, "M0orders", None),
        ("_other/x", Kind.MOBILE, "M0_other/x", None),
        # Reserved `$` nodes are local to the router (seed 001), never mobile.
        ("$other", Kind.LOCAL, "L$other", None),
        ("_topo/0/R1/$other", Kind.LOCAL, "L$other", None),
        # Global addresses: one key; the container is read from each message's address.
        ("(c)/node", Kind.CONTAINER, CONTAINER_KEY, None),
        ("()/node", Kind.CONTAINER, CONTAINER_KEY, None),
        ("amqp:(c)/node", Kind.CONTAINER, CONTAINER_KEY, None),
        ("AMQPS:(c)/node", Kind.CONTAINER, CONTAINER_KEY, None),
        ("amqp:/(c)/node", Kind.CONTAINER, CONTAINER_KEY, None),
        ("_topo/0/R1/(c)/node", Kind.CONTAINER, CONTAINER_KEY, None),
        ("_topo/0/R2/(c)/node", Kind.REMOTE, "RR2", "R2"),
        ("amqp:other", Kind.MOBILE, "M0amqp:other", None),
        # Another edge's space is routed on that edge's summary address; our own is local.
        ("_edge/E1/x", Kind.MOBILE, "M0_edge/E1", None),
        ("_edge/E1", Kind.MOBILE, "M0_edge/E1", None),
        (f"_edge/{ME}/temp.x", Kind.LOCAL, "Ltemp.x", None),
        # Area routing was never built; documented to fall through to mobile.
        ("_topo/1/R2/x", Kind.MOBILE, "M0_topo/1/R2/x", None),
    ],
)
def test_classification(address: str, kind: Kind, key: str, router: str | None) -> None:
    dest = parse(address, ME)
    assert (dest.kind, dest.key, dest.router) == (kind, key, router)


@pytest.mark.parametrize(
    "address", ["(c)/node", "amqp:(c)/node", "amqp:/(c)/node", "_topo/0/R1/(c)/node"]
)
def test_a_container_address_keeps_its_path(address: str) -> None:
    assert parse(address, ME).address == "(c)/node"


@pytest.mark.parametrize(
    ("address", "stripped"),
    [
        ("amqp:/orders", "orders"),
        ("amqp://broker.example.com/orders", "orders"),
        ("amqp://broker.example.com:5672/orders.eu", "orders.eu"),
        ("amqps://h:5671/orders", "orders"),
        ("AMQP:/orders", "orders"),
        ("/orders", "orders"),
        ("//host/orders", "orders"),
        ("orders", "orders"),
        # Dispatch leaves these whole: no path after the host, or no slash after the scheme.
        ("amqp://host", "amqp://host"),
        ("amqp:orders", "amqp:orders"),
    ],
)
def test_scheme_and_host_are_stripped(address: str, stripped: str) -> None:
    dest = parse(address, ME)
    assert dest.address == stripped
    assert dest.key == "M0" + stripped


def test_dynamic_receiver_and_sender_meet() -> None:
    receiver = parse("amqp:/_topo/0/R1/temp.abc", ME)
    sender = parse("_local/temp.abc", ME)
    assert receiver.key == sender.key
    # The same topological address seen from another router is remote.
    assert parse("amqp:/_topo/0/R1/temp.abc", "R2").key == "RR1"


def test_destination_is_memoised_and_immutable() -> None:
    first = parse("orders.memo", ME)
    assert parse("orders.memo", ME) is first
    assert parse("orders.memo", "R9") == first  # mobile does not depend on the router
    with pytest.raises(AttributeError):
        first.key = "x"  # type: ignore[misc]
    assert parse.cache_info().maxsize is not None  # bounded


def test_destination_fields() -> None:
    assert parse("amqp:/_topo/0/R2/x", ME) == Destination(Kind.REMOTE, "RR2", "_topo/0/R2/x", "R2")


# ----- rules ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"prefix": "a", "pattern": "a"},
        {"prefix": ""},
        {"pattern": "./"},
        {"prefix": "a", "distribution": "flood"},
        {"prefix": "a", "undeliverable": "retry"},
        {"prefix": "a", "hold_timeout": 0},
        {"prefix": "a", "undeliverable": "redirect"},
        {"prefix": "a", "fallback": "b"},
        {"prefix": "a", "priority": 10},
        {"prefix": "a", "priority": -2},
    ],
)
def test_invalid_rules_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        AddressRule(**kwargs)  # type: ignore[arg-type]


def test_rule_defaults() -> None:
    rule = AddressRule(prefix="a")
    assert (rule.distribution, rule.undeliverable, rule.hold_timeout) == ("balanced", "drop", 30.0)
    assert (rule.fallback, rule.priority) == (None, -1)
    assert AddressRule(prefix="a", undeliverable="redirect", fallback="dlq").fallback == "dlq"


@pytest.mark.parametrize(
    ("rule", "tokens"),
    [
        (AddressRule(prefix="a.b"), ("a", "b", "#")),
        (AddressRule(prefix="/a/b."), ("a", "b", "#")),
        (AddressRule(pattern="a.*.c"), ("a", "*", "c")),
        (AddressRule(pattern="a.#.#"), ("a", "#")),
        (AddressRule(pattern="#.*"), ("*", "#")),
        (AddressRule(pattern="#.*.#.*.b"), ("*", "*", "#", "b")),
    ],
)
def test_rule_patterns_are_normalised(rule: AddressRule, tokens: tuple[str, ...]) -> None:
    assert rule.tokens() == tokens


def test_default_rule_when_nothing_matches() -> None:
    table = AddressTable([AddressRule(prefix="orders")])
    assert table.lookup("invoices") is DEFAULT_RULE
    assert (DEFAULT_RULE.distribution, DEFAULT_RULE.undeliverable) == ("balanced", "drop")
    assert AddressTable([]).lookup("anything") is DEFAULT_RULE


@pytest.mark.parametrize(
    ("address", "matches"),
    [
        ("a.b", True),
        ("a.b.c", True),
        ("a.b/c", True),
        ("a/b", True),
        ("a.b.c.d.e", True),
        ("a.b.", True),
        ("amqp:/a.b.c", True),
        ("a.bc", False),
        ("a", False),
        ("ab", False),
        ("x.a.b", False),
    ],
)
def test_prefix_matches_whole_segments(address: str, matches: bool) -> None:
    rule = AddressRule(prefix="a.b", distribution="multicast")
    assert (AddressTable([rule]).lookup(address) is rule) == matches


def test_star_matches_exactly_one_token_and_hash_any_number() -> None:
    star = AddressRule(pattern="a.*")
    hashed = AddressRule(pattern="b.#")
    table = AddressTable([star, hashed])
    assert table.lookup("a.x") is star
    assert table.lookup("a") is DEFAULT_RULE
    assert table.lookup("a.x.y") is DEFAULT_RULE
    assert table.lookup("b") is hashed
    assert table.lookup("b.x.y.z") is hashed


def test_exact_beats_star_beats_hash() -> None:
    exact = AddressRule(pattern="a.b.c")
    star = AddressRule(pattern="a.*.c")
    hashed = AddressRule(pattern="a.#")
    table = AddressTable([hashed, star, exact])  # insertion order must not matter
    assert table.lookup("a.b.c") is exact
    assert table.lookup("a.x.c") is star
    assert table.lookup("a.x.d") is hashed


def test_failed_specific_branch_backtracks() -> None:
    deep = AddressRule(pattern="a.b.c")
    star = AddressRule(pattern="a.*.d")
    hashed = AddressRule(pattern="#.e")
    table = AddressTable([deep, star, hashed])
    # `a.b` leads only to `c`; the search must back off to `a.*`.
    assert table.lookup("a.b.d") is star
    # Neither the `a.b` nor the `a.*` branch fits; `#` takes all but the last token.
    assert table.lookup("a.b.x.e") is hashed


def test_hash_consumes_as_few_tokens_as_possible() -> None:
    longer = AddressRule(pattern="a.#.c")
    shorter = AddressRule(pattern="a.#")
    table = AddressTable([shorter, longer])
    assert table.lookup("a.b.c") is longer
    assert table.lookup("a.c") is longer
    assert table.lookup("a.b.d") is shorter


def test_prefix_and_pattern_share_precedence() -> None:
    prefix = AddressRule(prefix="orders")
    pattern = AddressRule(pattern="orders.*.urgent", distribution="closest")
    table = AddressTable([prefix, pattern])
    assert table.lookup("orders.eu.urgent") is pattern
    assert table.lookup("orders.eu") is prefix


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (AddressRule(prefix="a"), AddressRule(pattern="a.#")),
        (AddressRule(prefix="a.b"), AddressRule(prefix="a/b/")),
        (AddressRule(pattern="a.#.#"), AddressRule(pattern="a/#", distribution="closest")),
    ],
)
def test_equivalent_rules_collide(first: AddressRule, second: AddressRule) -> None:
    with pytest.raises(ValueError):
        AddressTable([first, second])


@pytest.mark.parametrize(
    "address",
    ["_local/x", "_topo/0/R1/x", "_topo/0/R2/x", "_topo/0/all/qdrouter", "$management"],
)
def test_non_mobile_addresses_are_not_subject_to_rules(address: str) -> None:
    table = AddressTable([AddressRule(pattern="#", distribution="multicast")])
    assert table.lookup(address) is DEFAULT_RULE
    assert table.lookup("orders").distribution == "multicast"


def test_add_and_remove_invalidate_cached_answers() -> None:
    table = AddressTable([AddressRule(prefix="orders")])
    before = table.lookup("orders.eu")
    assert table.lookup("orders.eu") is before
    eu = AddressRule(prefix="orders.eu", distribution="multicast")
    table.add(eu)
    assert table.lookup("orders.eu") is eu
    table.remove(eu)
    assert table.lookup("orders.eu") is before
    assert table.rules == (before,)


def test_remove_prunes_and_keeps_siblings() -> None:
    keep = AddressRule(pattern="a.*.c")
    drop = AddressRule(pattern="a.*.c.#")
    table = AddressTable([keep, drop])
    table.remove(drop)
    assert table.lookup("a.b.c") is keep
    assert table.lookup("a.b.c.d") is DEFAULT_RULE
    table.add(drop)  # re-adding after pruning works
    assert table.lookup("a.b.c.d") is drop


def test_remove_unknown_rule() -> None:
    table = AddressTable([AddressRule(prefix="a")])
    with pytest.raises(KeyError):
        table.remove(AddressRule(prefix="b"))
    with pytest.raises(KeyError):  # same pattern, different semantics: not the rule we hold
        table.remove(AddressRule(prefix="a", distribution="closest"))


def test_lookup_cache_is_bounded() -> None:
    rule = AddressRule(prefix="a")
    table = AddressTable([rule], cache_size=4)
    for i in range(20):
        assert table.lookup(f"a.{i}") is rule
    assert len(table._cache) <= 4
