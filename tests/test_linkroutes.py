"""Link-route matching, keys and prefix rewriting (router/linkroutes/table.py), as Dispatch does
them."""

from __future__ import annotations

from typing import Any

import pytest

from router.config.models import validate_config
from router.linkroutes.table import LinkRouteRule, LinkRouteTable, link_route_table


def rule(direction: str = "in", **fields: Any) -> LinkRouteRule:
    fields.setdefault("container_id", "broker")
    return LinkRouteRule(direction=direction, **fields)


def matched(table: LinkRouteTable, address: str, direction: str = "in") -> str | None:
    """The prefix or pattern of the route `address` takes, if any."""
    found = table.lookup(address, direction)
    return None if found is None else (found.prefix or found.pattern)


# ----- keys ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "key"),
    [
        ({"direction": "in", "prefix": "queue"}, "Cqueue"),
        ({"direction": "out", "prefix": "queue"}, "Dqueue"),
        ({"direction": "in", "prefix": "a/b.c"}, "Ca/b.c"),
        ({"direction": "in", "pattern": "*.orders"}, "E*.orders"),
        ({"direction": "out", "pattern": "*.orders"}, "F*.orders"),
        ({"direction": "in", "pattern": "a.#.b"}, "Ea.#.b"),
        ({"direction": "out", "pattern": "a.*.#"}, "Fa.*.#"),
        # A pattern whose only wildcard is a final '#' is a prefix to Dispatch, and keyed so.
        ({"direction": "in", "pattern": "queue.#"}, "Cqueue"),
        ({"direction": "out", "pattern": "a/b/#"}, "Da/b"),
        ({"direction": "in", "pattern": "#"}, "C"),
    ],
)
def test_keys_are_spelt_as_dispatch_hashes_them(fields: dict[str, Any], key: str) -> None:
    assert rule(**fields).key == key


def test_a_prefix_and_its_pattern_spelling_share_a_key() -> None:
    assert rule(prefix="queue").key == rule(pattern="queue.#").key == rule(pattern="queue/#").key


# ----- external addresses --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("add", "delete", "address", "external", "answered", "back"),
    [
        (None, None, "queue.a", "queue.a", "queue.a", "queue.a"),
        ("broker.", None, "queue.a", "broker.queue.a", "broker.queue.a", "queue.a"),
        (None, "queue.", "queue.a", "a", "a", "queue.a"),
        ("q/", "queue.", "queue.a", "q/a", "q/a", "queue.a"),
        # Taken off only where it matches; the added prefix goes on regardless.
        (None, "other.", "queue.a", "queue.a", "queue.a", "queue.a"),
        ("q/", "other.", "queue.a", "q/queue.a", "q/queue.a", "queue.a"),
        (None, "queue.a.b", "queue.a", "queue.a", "queue.a", "queue.a"),
        # As Dispatch strips: only from a longer address, so that something is left.
        (None, "queue.", "queue.", "queue.", "queue.", "queue."),
        # A container that names the node otherwise: Dispatch's prefix swap on its answer.
        ("q/", "queue.", "queue.a", "q/a", "q/b", "queue.b"),
        ("q/", "queue.", "queue.a", "q/a", "b", "queue.b"),
    ],
)
def test_external_address_and_back(
    add: str | None, delete: str | None, address: str, external: str, answered: str, back: str
) -> None:
    there, rewrite = rule(prefix="queue", add_prefix=add, del_prefix=delete).external(address)
    assert there == external
    if there == address:
        assert rewrite is None  # nothing changed: the answer goes back as it is
    else:
        assert rewrite is not None and rewrite.back(answered) == back


# ----- lookup --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "route"),
    [
        ("queue", "queue"),
        ("queue.a", "queue"),
        ("queue/a/b", "queue"),
        ("queue.a/b.c", "queue"),
        ("queue.", "queue"),
        ("queues", None),
        ("queue2.a", None),
        ("que", None),
        ("a.queue", None),
    ],
)
def test_a_prefix_matches_whole_tokens(address: str, route: str | None) -> None:
    table = LinkRouteTable([rule(prefix="queue")])
    assert matched(table, address) == route


@pytest.mark.parametrize(
    ("address", "route"),
    [
        ("eu.orders", "*.orders"),
        ("us/orders", "*.orders"),
        ("orders", None),
        ("eu.west.orders", None),
        ("eu.orders.x", None),
        # The first token matching exactly beats a wildcard there, as in the address tree.
        ("queue.orders", "queue"),
        ("queue.x", "queue"),
        # The longer prefix is the more specific one.
        ("queue.special", "queue.special"),
        ("queue.special.x", "queue.special"),
        ("queue.specials", "queue"),
        ("queue.b.tail", "queue.*.tail"),
        ("queue.special.tail", "queue.special"),
    ],
)
def test_precedence_is_the_address_trees(address: str, route: str | None) -> None:
    table = LinkRouteTable(
        [
            rule(prefix="queue"),
            rule(prefix="queue.special"),
            rule(pattern="*.orders"),
            rule(pattern="queue.*.tail"),
        ]
    )
    assert matched(table, address) == route


@pytest.mark.parametrize(
    ("address", "route"),
    [
        ("queue.a", "queue"),
        ("eu.orders", "*.orders"),
        ("orders", "#"),
        ("x.y.z", "#"),
    ],
)
def test_a_catch_all_loses_to_anything_more_specific(address: str, route: str) -> None:
    table = LinkRouteTable([rule(pattern="#"), rule(prefix="queue"), rule(pattern="*.orders")])
    assert matched(table, address) == route


def test_directions_are_separate() -> None:
    table = LinkRouteTable([rule("in", prefix="queue"), rule("out", prefix="topic")])
    assert matched(table, "queue.a", "in") == "queue"
    assert matched(table, "queue.a", "out") is None
    assert matched(table, "topic.a", "out") == "topic"
    assert matched(table, "topic.a", "in") is None


def test_in_and_out_routes_for_one_prefix_are_distinct() -> None:
    sender = rule("in", prefix="queue", container_id="b1")
    receiver = rule("out", prefix="queue", container_id="b2")
    table = LinkRouteTable([sender, receiver])
    assert table.lookup("queue.a", "in") is sender
    assert table.lookup("queue.a", "out") is receiver
    assert table.rules == (sender, receiver)


@pytest.mark.parametrize(
    "address",
    [
        "_local/queue",
        "_local/queue.a",
        "amqp:/_local/queue.a",
        "_topo/0/R1/queue.a",
        "_topo/0/R2/queue.a",
        "_topo/0/all/queue.a",
        "amqp:/_topo/0/R2/queue.a",
        "$management",
        "_local/$management",
        "amqp:/$management",
        # An edge router's own space: its reply addresses must reach it, not a container.
        "_edge/E1/temp.abc",
        "_edge/E1",
        "amqp:/_edge/E1/x",
    ],
)
def test_non_mobile_addresses_are_never_link_routed(address: str) -> None:
    table = LinkRouteTable([rule("in", pattern="#"), rule("out", pattern="#")])
    assert table.lookup(address, "in") is None
    assert table.lookup(address, "out") is None


def test_a_catch_all_takes_every_mobile_address() -> None:
    table = LinkRouteTable([rule(pattern="#")])
    assert matched(table, "anything.at/all") == "#"
    assert matched(table, "_other/x") == "#"
    assert matched(table, "_edge") == "#"  # no edge's space without the slash
    assert matched(table, "_edgy/x") == "#"


@pytest.mark.parametrize(
    "address",
    ["amqp:/queue.x", "amqp://broker.example.com/queue.x", "amqps://h:5671/queue.x", "/queue.x"],
)
def test_schemes_and_hosts_are_stripped_as_for_addresses(address: str) -> None:
    table = LinkRouteTable([rule(prefix="queue")])
    assert matched(table, address) == "queue"
    assert matched(table, address.replace("queue.x", "queues.x")) is None


@pytest.mark.parametrize("address", [None, ""])
def test_no_address_is_no_route(address: str | None) -> None:
    assert LinkRouteTable([rule(pattern="#")]).lookup(address, "in") is None


def test_an_empty_table_is_false_and_matches_nothing() -> None:
    table = LinkRouteTable()
    assert not table
    assert table.rules == ()
    assert table.lookup("queue", "in") is None
    assert LinkRouteTable([rule(prefix="queue")])


# ----- duplicates ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"prefix": "a.b"}, {"prefix": "a.b"}),
        ({"prefix": "a.b"}, {"prefix": "a/b"}),
        ({"prefix": "a"}, {"pattern": "a.#"}),
        ({"pattern": "a.*.c"}, {"pattern": "a/*/c"}),
        ({"pattern": "#.#"}, {"pattern": "#"}),
    ],
)
def test_equivalent_routes_in_one_direction_are_refused(
    first: dict[str, str], second: dict[str, str]
) -> None:
    with pytest.raises(ValueError, match="direction in exists"):
        LinkRouteTable([rule("in", **first), rule("in", container_id="other", **second)])
    # The same in the other direction is another route.
    assert len(LinkRouteTable([rule("in", **first), rule("out", **second)]).rules) == 2


# ----- serves --------------------------------------------------------------------------------


def test_serves_by_container_id() -> None:
    by_container = rule(prefix="q", container_id="broker-1")
    assert by_container.serves("broker-1", "listener/0.0.0.0:5673")
    assert not by_container.serves("broker-2", "listener/0.0.0.0:5673")
    assert not by_container.serves(None, "broker-1")  # the connection's name is not its id


def test_serves_by_connection_name() -> None:
    by_connection = LinkRouteRule("out", prefix="q", connection="brokers")
    assert by_connection.serves("anyone", "brokers")
    assert by_connection.serves(None, "brokers")
    assert not by_connection.serves("brokers", "listener/0.0.0.0:5673")


# ----- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"direction": "both", "prefix": "q", "container_id": "b"}, "direction must be"),
        ({"direction": "in", "container_id": "b"}, "exactly one of 'prefix' and 'pattern'"),
        (
            {"direction": "in", "prefix": "q", "pattern": "q.#", "container_id": "b"},
            "exactly one of 'prefix' and 'pattern'",
        ),
        ({"direction": "in", "prefix": "q"}, "exactly one of 'container_id' and 'connection'"),
        (
            {"direction": "in", "prefix": "q", "container_id": "b", "connection": "c"},
            "exactly one of 'container_id' and 'connection'",
        ),
    ],
)
def test_rule_validation(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LinkRouteRule(**fields)


# ----- from a configuration ------------------------------------------------------------------


def test_table_from_config() -> None:
    config = validate_config(
        {
            "router": {"id": "R1"},
            "linkRoutes": [
                {
                    "prefix": "queue",
                    "direction": "in",
                    "containerId": "broker",
                    "addExternalPrefix": "ext.",
                    "delExternalPrefix": "queue.",
                },
                {"pattern": "*.orders", "direction": "out", "connection": "brokers"},
            ],
        }
    )
    table = link_route_table(config)
    assert table.rules == (
        LinkRouteRule(
            "in", prefix="queue", container_id="broker", add_prefix="ext.", del_prefix="queue."
        ),
        LinkRouteRule("out", pattern="*.orders", connection="brokers"),
    )
    found = table.lookup("queue.a", "in")
    assert found is not None and found.external("queue.a")[0] == "ext.a"
    assert matched(table, "eu.orders", "out") == "*.orders"
    assert not link_route_table(validate_config({"router": {"id": "R1"}}))


@pytest.mark.parametrize(
    "fields",
    [
        {"direction": "in", "prefix": "queue"},
        {"direction": "out", "prefix": "a/b.c"},
        {"direction": "in", "pattern": "*.orders"},
        {"direction": "out", "pattern": "a.*.#"},
        {"direction": "out", "pattern": "a/b/#"},
        {"direction": "in", "pattern": "#"},
    ],
)
def test_a_route_learned_from_its_key_matches_as_the_advertised_one(
    fields: dict[str, Any],
) -> None:
    """A router routes what another advertises without configuring it (as Dispatch's routers
    learn link-route patterns from address updates): the key must give back the same route."""
    from router.linkroutes.relay import _learned

    advertised = rule(**fields)
    learned = _learned(advertised.key)
    assert learned is not None and learned.scoped
    assert (learned.direction, learned.tokens(), learned.key) == (
        advertised.direction,
        advertised.tokens(),
        advertised.key,
    )
