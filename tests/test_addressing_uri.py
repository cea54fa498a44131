"""Global addresses (router/addressing/uri.py): the proposal's examples, printing back what was
parsed, every error as one line naming the input, and the router's split_container agreeing
with the full parser."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.addressing import AddressError, GlobalAddress, parse_uri, split_container


@pytest.mark.parametrize(
    ("text", "expected", "routing"),
    [
        (
            "amqps://broker.example.com/queue1",
            GlobalAddress(scheme="amqps", host="broker.example.com", node="queue1"),
            "queue1",
        ),
        (
            "amqp:(london-branch-34)/atm",
            GlobalAddress(scheme="amqp", container="london-branch-34", node="atm"),
            "(london-branch-34)/atm",
        ),
        (
            "amqps://megabank.example.com/(london-branch-34)/atm",
            GlobalAddress(
                scheme="amqps",
                host="megabank.example.com",
                container="london-branch-34",
                node="atm",
            ),
            "(london-branch-34)/atm",
        ),
        (
            "amqp:()/control",
            GlobalAddress(scheme="amqp", container="", node="control"),
            "()/control",
        ),
        ("somewhere", GlobalAddress(node="somewhere"), "somewhere"),
        ("$somewhere", GlobalAddress(node="$somewhere"), "$somewhere"),
    ],
)
def test_the_proposals_examples(text: str, expected: GlobalAddress, routing: str) -> None:
    address = parse_uri(text, require_node=True)
    assert address == expected
    assert address.routing_address() == routing
    assert str(address) == text


def test_parts_and_defaults() -> None:
    gateway = parse_uri("amqps://megabank.example.com/(london-branch-34)/atm")
    assert (gateway.default_port(), gateway.reserved, gateway.anonymous) == (5671, False, False)
    assert parse_uri("amqp:()/control").anonymous
    assert parse_uri("$somewhere").reserved
    assert parse_uri("(c)/$management").reserved
    assert parse_uri("amqp://h").default_port() == 5672
    assert parse_uri("amqps://h:5999/q").default_port() == 5999


@pytest.mark.parametrize(
    ("text", "expected", "canonical"),
    [
        ("AMQPS://Gw/q", GlobalAddress(scheme="amqps", host="Gw", node="q"), "amqps://Gw/q"),
        ("amqp://host", GlobalAddress(scheme="amqp", host="host"), None),
        ("amqp://host/", GlobalAddress(scheme="amqp", host="host"), "amqp://host"),
        (
            "amqp://host:5673/queue1",
            GlobalAddress(scheme="amqp", host="host", port=5673, node="queue1"),
            None,
        ),
        (
            "amqp://[::1]:5672/x",
            GlobalAddress(scheme="amqp", host="::1", port=5672, node="x"),
            None,
        ),
        (
            "amqp://al%20ice:p%40ss%3Aw%2Fd@h/q",
            GlobalAddress(scheme="amqp", user="al ice", key="p@ss:w/d", host="h", node="q"),
            None,
        ),
        (
            "amqp://alice:@h/q",
            GlobalAddress(scheme="amqp", user="alice", key="", host="h", node="q"),
            None,
        ),
        (
            "amqp://alice@h/q",
            GlobalAddress(scheme="amqp", user="alice", host="h", node="q"),
            None,
        ),
        ("a/b.c", GlobalAddress(node="a/b.c"), None),
        ("amqp:/queue", GlobalAddress(scheme="amqp", node="queue"), "amqp:queue"),
        ("/queue", GlobalAddress(node="queue"), "queue"),
        ("topic:orders", GlobalAddress(node="topic:orders"), None),
        ("amqp:", GlobalAddress(scheme="amqp"), None),
        (
            "(9f1c2e4a-7b7d-4f0e-9a51-3b1d2c4e5f60)/a/b.c",
            GlobalAddress(container="9f1c2e4a-7b7d-4f0e-9a51-3b1d2c4e5f60", node="a/b.c"),
            None,
        ),
        ("(router.east:5672)/x", GlobalAddress(container="router.east:5672", node="x"), None),
        ("()/node", GlobalAddress(container="", node="node"), None),
        ("(c)/", GlobalAddress(container="c"), None),
    ],
)
def test_other_forms(text: str, expected: GlobalAddress, canonical: str | None) -> None:
    address = parse_uri(text)
    assert address == expected
    assert str(address) == (canonical or text)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty"),
        ("$", "'$' alone"),
        ("amqp:$", "'$' alone"),
        ("(c", "unbalanced '('"),
        ("(c/x", "unbalanced '('"),
        ("((c))/x", "nested parentheses"),
        ("(a(b))/x", "nested parentheses"),
        ("(c))/x", "is not followed by '/'"),
        ("(c)x", "(c) is not followed by '/'"),
        ("amqp:(c)", "(c) is not followed by '/'"),
        ("(a)(b)/x", "(a) is not followed by '/'"),
        ("(c)/(d)/x", "parentheses may only enclose a container name"),
        ("queue(1)", "parentheses may only enclose a container name"),
        ("amqp://h:port/x", "port 'port' is not a number"),
        ("amqp://h:/x", "port '' is not a number"),
        ("amqp://h:+5/x", "port '+5' is not a number"),
        ("amqp://h:0/x", "port 0 out of range"),
        ("amqp://h:65536/x", "port 65536 out of range"),
        ("amqp:///x", "no host"),
        ("amqp://:5672/x", "no host"),
        ("amqp://u@/x", "no host"),
        ("amqp://::1/x", "IPv6 host needs brackets"),
        ("amqp://[::1/x", "unbalanced '['"),
        ("amqp://[not-v6]/x", "is not an IPv6 address"),
        ("amqp://[::1]5672/x", "after the host"),
        ("amqp://ho st/x", "bad host"),
        ("amqp://@h/x", "empty user name"),
        ("amqp://u%zz@h/x", "bad percent-encoding in the user"),
        ("amqp://%ff@h/x", "the user is not UTF-8"),
        ("amqp://h//x", "the node path starts with '/'"),
        ("http://example.com/x", "unknown scheme 'http'"),
        ("//h/x", "a host needs the amqp: or amqps: scheme"),
        ("/", "nothing to address"),
    ],
)
def test_errors_are_one_line_naming_the_input(text: str, why: str) -> None:
    with pytest.raises(AddressError) as info:
        parse_uri(text)
    message = str(info.value)
    assert message.startswith(f"bad address {text!r}: ")
    assert why in message
    assert "\n" not in message


@pytest.mark.parametrize("text", ["amqp:(c)/", "amqps://gw/", "amqp://gw", "()/", "amqp:"])
def test_require_node(text: str) -> None:
    parse_uri(text)
    with pytest.raises(AddressError, match="no node path"):
        parse_uri(text, require_node=True)


def test_an_error_does_not_show_the_key() -> None:
    with pytest.raises(AddressError) as info:
        parse_uri("amqp://alice:hunter2@h:99/x(")
    assert "hunter2" not in str(info.value)
    assert "amqp://alice:***@h:99/x(" in str(info.value)
    assert "hunter2" not in repr(GlobalAddress(scheme="amqp", user="a", key="hunter2", host="h"))


@pytest.mark.parametrize(
    "parts",
    [
        {"host": "h"},
        {"scheme": "amqp", "key": "k", "host": "h"},
        {"scheme": "amqp", "port": 5672},
        {"scheme": "ftp"},
        {"scheme": "amqp", "host": "h", "port": 0},
        {"container": "a/b", "node": "x"},
        {"node": "(x"},
        {},
    ],
)
def test_constructing_an_unprintable_address_fails(parts: dict[str, object]) -> None:
    with pytest.raises(AddressError):
        GlobalAddress(**parts)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("(c)/node", ("c", "node")),
        ("amqp:(c)/node", ("c", "node")),
        ("AMQPS:(c)/node", ("c", "node")),
        ("amqp:/(c)/node", ("c", "node")),
        ("/(c)/node", ("c", "node")),
        ("()/node", ("", "node")),
        ("amqp:()/control", ("", "control")),
        ("(london-branch-34)/a/b.c", ("london-branch-34", "a/b.c")),
        ("amqps://gw.example.com:5671/(c)/$x", ("c", "$x")),
        ("(c)/", ("c", "")),
        ("orders", None),
        ("$management", None),
        ("amqp:orders", None),
        ("amqp://gw/orders", None),
        ("_topo/0/R1/temp.abc", None),
        ("", None),
        ("(c", None),
        ("(c)x", None),
        ("((c))/x", None),
        ("(c)/(d)/x", None),
        ("(c)/$", None),
        ("amqp://h:x/(c)/n", None),
        ("amqpx:(c)/n", None),
    ],
)
def test_split_container(address: str, expected: tuple[str, str] | None) -> None:
    assert split_container(address) == expected


# ----- properties over generated addresses ------------------------------------------------

_label = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)
_hosts = st.one_of(
    st.lists(_label, min_size=1, max_size=3).map(".".join),
    st.ip_addresses().map(str),
)
_containers = st.text(st.characters(blacklist_characters="()/", codec="utf-8"), max_size=12)
_nodes = st.text(st.characters(blacklist_characters="()", codec="utf-8"), max_size=16).filter(
    lambda n: not n.startswith("/") and n != "$"
)
_secrets = st.text(st.characters(codec="utf-8"), max_size=10)


@st.composite
def addresses(draw: st.DrawFn) -> GlobalAddress:
    scheme = draw(st.sampled_from([None, "amqp", "amqps"]))
    host = user = key = port = None
    if scheme is not None and draw(st.booleans()):
        host = draw(_hosts)
        port = draw(st.none() | st.integers(1, 65535))
        if draw(st.booleans()):
            user = draw(_secrets.filter(bool))
            key = draw(st.none() | _secrets)
    container = draw(st.none() | _containers)
    node = draw(_nodes)
    if scheme is None and container is None and not node:
        node = "q"
    return GlobalAddress(scheme, user, key, host, port, container, node)


@settings(max_examples=500, derandomize=True, deadline=None, database=None)
@given(addresses())
def test_printing_parses_back(address: GlobalAddress) -> None:
    assert parse_uri(str(address)) == address


@settings(max_examples=500, derandomize=True, deadline=None, database=None)
@given(st.one_of(addresses().map(str), st.text(max_size=30), st.from_regex(r"(amqps?:)?/?\(.*")))
def test_split_container_agrees_with_the_parser(text: str) -> None:
    try:
        parsed = parse_uri(text)
    except AddressError:
        assert split_container(text) is None
        return
    expected = None if parsed.container is None else (parsed.container, parsed.node)
    assert split_container(text) == expected
