"""Control message bodies, checked against Dispatch's protocol v1 keys and types."""

from __future__ import annotations

import re
from typing import Any

import pytest
from proton import Message, symbol, ulong

from router.network.messages import (
    ALL_ROUTERS_ADDRESS,
    ALL_ROUTERS_MA_ADDRESS,
    HELLO_ADDRESS,
    NO_HINT,
    Hello,
    LinkState,
    LinkStateRequest,
    LinkStateUpdate,
    MobileAddressRequest,
    MobileAddressSnapshot,
    MobileAddressUpdate,
    ProtocolError,
    RouterAdvertisement,
    from_body,
    router_address,
    router_ma_address,
)


def test_addresses() -> None:
    assert HELLO_ADDRESS == "amqp:/_local/qdhello"
    assert ALL_ROUTERS_ADDRESS == "amqp:/_topo/0/all/qdrouter"
    assert ALL_ROUTERS_MA_ADDRESS == "_topo/0/all/qdrouter.ma"
    assert router_address("R2") == "amqp:/_topo/0/R2/qdrouter"
    assert router_ma_address("R2") == "amqp:/_topo/0/R2/qdrouter.ma"


# Bodies exactly as Dispatch 1.19 builds them (data.py to_dict, mobile.c compose_*).
DISPATCH_BODIES: list[tuple[str, dict[str, Any], object]] = [
    (
        "HELLO",
        {"id": "R1", "pv": 1, "area": "0", "instance": 1700000000, "seen": ["R2", "R3"]},
        Hello("R1", 1700000000, ("R2", "R3")),
    ),
    (
        "RA",
        {"id": "R1", "pv": 1, "area": "0", "instance": 7, "ls_seq": 3, "mobile_seq": 9},
        RouterAdvertisement("R1", 7, 3, 9),
    ),
    ("LSR", {"id": "R1", "pv": 1, "area": "0"}, LinkStateRequest("R1")),
    (
        "LSU",
        {
            "id": "R1",
            "pv": 1,
            "area": "0",
            "instance": 7,
            "ls_seq": 4,
            "ls": {"id": "R1", "area": "0", "ls_seq": 4, "peers": {"R2": 1, "R3": 10}},
        },
        LinkStateUpdate("R1", 7, LinkState("R1", 4, {"R2": 1, "R3": 10})),
    ),
    ("MAR", {"id": "R1", "pv": 1, "area": "0", "have_seq": 2}, MobileAddressRequest("R1", 2)),
    (
        "MAU",
        {
            "id": "R1",
            "pv": 1,
            "area": "0",
            "mobile_seq": 5,
            "hints": [2, 1],
            "add": ["M0orders", "M0news"],
            "del": ["M0old"],
        },
        MobileAddressUpdate("R1", 5, ("M0orders", "M0news"), ("M0old",), (2, 1)),
    ),
    (
        "MAU",
        {
            "id": "R1",
            "pv": 1,
            "area": "0",
            "mobile_seq": 5,
            "exist": ["M0orders"],
            "hints": [3],
        },
        MobileAddressSnapshot("R1", 5, ("M0orders",), (3,)),
    ),
]


@pytest.mark.parametrize(("opcode", "body", "message"), DISPATCH_BODIES)
def test_round_trip(opcode: str, body: dict[str, Any], message: Any) -> None:
    assert from_body(opcode, body) == message
    assert message.to_body() == body
    assert opcode == message.OPCODE


@pytest.mark.parametrize(("opcode", "body", "message"), DISPATCH_BODIES)
def test_round_trip_through_amqp(opcode: str, body: dict[str, Any], message: Any) -> None:
    """Encoded and decoded by proton, as the engine will carry them."""
    wire = Message(address="x", properties={"opcode": opcode}, body=message.to_body())
    decoded = Message()
    decoded.decode(wire.encode())
    assert from_body(decoded.properties["opcode"], decoded.body) == message


def test_symbol_keys_and_ulong_values_as_dispatch_c_sends_them() -> None:
    # mobile.c writes symbol keys and long values; proton may hand us symbol/ulong subclasses.
    body = {
        symbol("id"): "R1",
        symbol("pv"): ulong(1),
        symbol("area"): "0",
        symbol("mobile_seq"): ulong(4),
        symbol("hints"): [2],
        symbol("add"): ["M0a"],
        symbol("del"): [],
    }
    msg = from_body("MAU", body)
    assert msg == MobileAddressUpdate("R1", 4, ("M0a",), (), (2,))
    assert type(msg.id) is str and type(msg.mobile_seq) is int


def test_optional_fields_default_as_in_dispatch() -> None:
    # Missing pv means version 0 (accepted); missing instance means 0; area is not checked.
    assert from_body("HELLO", {"id": "R1", "seen": []}) == Hello("R1", 0, ())
    assert from_body("RA", {"id": "R1", "ls_seq": 0, "mobile_seq": 0}) == RouterAdvertisement(
        "R1", 0, 0, 0
    )


def test_newer_protocol_version_is_ignored() -> None:
    assert from_body("HELLO", {"id": "R1", "pv": 2, "seen": "anything"}) is None
    assert from_body("RA", {"id": "R1", "pv": 2}) is None


def test_hints_that_do_not_line_up_are_dropped_not_fatal() -> None:
    body = {"id": "R1", "mobile_seq": 1, "add": ["M0a", "M0b"], "del": [], "hints": [2]}
    assert from_body("MAU", body) == MobileAddressUpdate(
        "R1", 1, ("M0a", "M0b"), (), (NO_HINT, NO_HINT)
    )
    body = {"id": "R1", "mobile_seq": 1, "exist": ["M0a"]}
    assert from_body("MAU", body) == MobileAddressSnapshot("R1", 1, ("M0a",), (NO_HINT,))


@pytest.mark.parametrize(
    ("opcode", "body", "complaint"),
    [
        ("NOPE", {"id": "R1"}, "unknown opcode"),
        ("HELLO", ["not", "a", "map"], "expected a map"),
        ("HELLO", {"seen": []}, "'id' missing"),
        ("HELLO", {"id": "", "seen": []}, "empty router id"),
        ("HELLO", {"id": 5, "seen": []}, "HELLO.id: expected a string"),
        ("HELLO", {"id": "R1"}, "'seen' missing"),
        ("HELLO", {"id": "R1", "seen": "R2"}, "HELLO.seen: expected a list"),
        ("HELLO", {"id": "R1", "seen": [1]}, "HELLO.seen[]: expected a string"),
        ("HELLO", {"id": "R1", "seen": [], "instance": "x"}, "HELLO.instance: expected an int"),
        ("HELLO", {"id": "R1", "seen": [], "pv": "1"}, "HELLO.pv: expected an integer"),
        ("RA", {"id": "R1", "ls_seq": 1}, "'mobile_seq' missing"),
        ("RA", {"id": "R1", "ls_seq": True, "mobile_seq": 0}, "RA.ls_seq: expected an integer"),
        ("RA", {"id": "R1", "ls_seq": -1, "mobile_seq": 0}, "RA.ls_seq: -1 is below 0"),
        ("LSU", {"id": "R1", "ls_seq": 1}, "'ls' missing"),
        ("LSU", {"id": "R1", "ls_seq": 1, "ls": []}, "LSU.ls: expected a map"),
        (
            "LSU",
            {"id": "R1", "ls_seq": 1, "ls": {"id": "R1", "ls_seq": 1, "peers": {"R2": 0}}},
            "is below 1",
        ),
        (
            "LSU",
            {"id": "R1", "ls_seq": 1, "ls": {"id": "R1", "ls_seq": 1, "peers": {"R2": "1"}}},
            "expected an integer",
        ),
        (
            "LSU",
            {"id": "R1", "ls_seq": 1, "ls": {"id": "R9", "ls_seq": 1, "peers": {}}},
            "is not the sender",
        ),
        ("MAR", {"id": "R1"}, "'have_seq' missing"),
        ("MAU", {"id": "R1", "mobile_seq": 1, "add": []}, "both 'add' and 'del'"),
        (
            "MAU",
            {"id": "R1", "mobile_seq": 1, "exist": [], "add": [], "del": []},
            "cannot be combined",
        ),
        ("MAU", {"id": "R1", "mobile_seq": 1, "exist": "M0a"}, "MAU.exist: expected a list"),
        ("MAU", {"id": "R1", "mobile_seq": 1, "add": [1], "del": []}, "expected a string"),
        ("MAU", {"id": "R1", "mobile_seq": 1, "exist": [], "hints": ["x"]}, "MAU.hints[]"),
    ],
)
def test_malformed_bodies(opcode: str, body: Any, complaint: str) -> None:
    with pytest.raises(ProtocolError, match=re.escape(complaint)):
        from_body(opcode, body)
