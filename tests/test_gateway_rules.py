"""Which container ``()/node`` means (router/gateway/rules.py): rules over facts taken from real
encoded messages and from links."""

from __future__ import annotations

from typing import Any

import pytest
from proton import Message, int32, symbol, ulong

from router.gateway.config import Gateway, Match
from router.gateway.rules import Facts, exported, link_facts, message_facts, resolve


def gateway(*rules: dict[str, Any], **fields: Any) -> Gateway:
    return Gateway.model_validate({"rules": list(rules), **fields})


@pytest.mark.parametrize(
    ("match", "value", "expected"),
    [
        ({"exact": "atm"}, "atm", True),
        ({"exact": "atm"}, "atm.1", False),
        ({"exact": ""}, "", True),
        # Plain string prefixes: names, not token paths.
        ({"prefix": "branch-"}, "branch-34", True),
        ({"prefix": "branch-"}, "branch", False),
        ({"prefix": "a.b"}, "a.bc", True),
        # Patterns as address rules match them.
        ({"pattern": "a.*"}, "a.b", True),
        ({"pattern": "a.*"}, "a.b.c", False),
        ({"pattern": "a.*"}, "a", False),
        ({"pattern": "a.#"}, "a", True),
        ({"pattern": "a.#"}, "a/b.c", True),
        ({"pattern": "#.z"}, "x.y.z", True),
        ({"pattern": "#"}, "anything/at.all", True),
        ({"pattern": "a.*.c"}, "a.b.d", False),
    ],
)
def test_match_kinds(match: dict[str, Any], value: str, expected: bool) -> None:
    assert Match.model_validate(match).matches(value) is expected


def test_first_matching_rule_wins() -> None:
    gw = gateway(
        {"container": "first", "subject": {"prefix": "a"}},
        {"container": "second", "subject": {"exact": "ab"}},
    )
    assert resolve(gw, Facts(node="n", subject="ab")) == "first"


def test_every_condition_of_a_rule_must_hold() -> None:
    gw = gateway(
        {
            "container": "c",
            "node": {"exact": "atm"},
            "subject": {"exact": "s"},
            "groupId": {"prefix": "g"},
            "userId": {"exact": "u"},
            "applicationProperties": {"k": {"exact": "v"}},
        }
    )
    facts = Facts(node="atm", subject="s", group_id="g1", user_id="u", properties={"k": "v"})
    assert resolve(gw, facts) == "c"
    for missing in (
        Facts(node="other", subject="s", group_id="g1", user_id="u", properties={"k": "v"}),
        Facts(node="atm", subject=None, group_id="g1", user_id="u", properties={"k": "v"}),
        Facts(node="atm", subject="s", group_id="x", user_id="u", properties={"k": "v"}),
        Facts(node="atm", subject="s", group_id="g1", user_id=None, properties={"k": "v"}),
        Facts(node="atm", subject="s", group_id="g1", user_id="u", properties={}),
    ):
        assert resolve(gw, missing) is None


def test_default_container_when_nothing_matches() -> None:
    gw = gateway({"container": "c", "node": {"exact": "atm"}}, defaultContainer="head-office")
    assert resolve(gw, Facts(node="atm")) == "c"
    assert resolve(gw, Facts(node="control")) == "head-office"


def test_no_match_and_no_default_is_none() -> None:
    assert resolve(gateway({"container": "c", "node": {"exact": "atm"}}), Facts(node="x")) is None
    assert resolve(Gateway(), Facts(node="x")) is None


@pytest.mark.parametrize(
    ("value", "rule", "expected"),
    [
        ("34", {"exact": "34"}, True),
        (symbol("34"), {"exact": "34"}, True),
        (34, {"exact": "34"}, True),
        (int32(-7), {"exact": "-7"}, True),
        (ulong(5), {"prefix": "5"}, True),
        (True, {"exact": "true"}, True),
        (False, {"exact": "False"}, False),
        (1.5, {"exact": "1.5"}, False),  # floats have no one spelling
        (b"34", {"exact": "34"}, False),
        (None, {"pattern": "#"}, False),
        (["34"], {"exact": "['34']"}, False),
    ],
)
def test_property_values_match_as_text(value: object, rule: dict[str, Any], expected: bool) -> None:
    gw = gateway({"container": "c", "applicationProperties": {"k": rule}})
    assert (resolve(gw, Facts(node="n", properties={"k": value})) == "c") is expected


def encoded(**fields: Any) -> bytes:
    data: bytes = Message(address="()/atm", body="a body rules never read", **fields).encode()
    return data


def test_facts_from_an_encoded_message() -> None:
    data = encoded(
        subject="withdraw.cash",
        group_id="session-1",
        user_id=b"teller",
        properties={"branch": "34", "amount": 100, "urgent": True},
    )
    facts = message_facts(data, "atm")
    assert facts == Facts(
        node="atm",
        subject="withdraw.cash",
        group_id="session-1",
        user_id="teller",
        properties={"branch": "34", "amount": 100, "urgent": True},
    )
    gw = gateway(
        {
            "container": "london-branch-34",
            "subject": {"pattern": "withdraw.*"},
            "applicationProperties": {"branch": {"exact": "34"}, "urgent": {"exact": "true"}},
        }
    )
    assert resolve(gw, facts) == "london-branch-34"


def test_facts_of_a_bare_message() -> None:
    assert message_facts(Message(body="x").encode(), "n") == Facts(node="n")
    assert message_facts(bytearray(Message().encode()), "n") == Facts(node="n")


def test_a_user_id_that_is_not_utf8_is_decoded_with_replacements() -> None:
    facts = message_facts(encoded(user_id=b"te\xffler"), "atm")
    assert facts.user_id == "te\ufffdler"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty message"),
        (b"\x00\x53\x73\xc0\x05", "runs past the end"),
        (b"\x01\x02\x03", "expected a section at offset 0"),
    ],
)
def test_a_message_that_does_not_decode_is_a_value_error(data: bytes, reason: str) -> None:
    with pytest.raises(ValueError, match=reason) as info:
        message_facts(data, "atm")
    assert "\n" not in str(info.value)


def test_properties_that_scan_but_do_not_decode_are_a_value_error() -> None:
    # A properties list whose subject (field 3) is a string of invalid UTF-8.
    fields = b"\x40\x40\x40\xa1\x02\xff\xfe"
    body = b"\x00\x53\x77\xa1\x01x"
    data = b"\x00\x53\x73\xc0" + bytes([len(fields) + 1, 4]) + fields + body
    with pytest.raises(ValueError, match=r"^message properties do not decode: ") as info:
        message_facts(data, "atm")
    assert "\n" not in str(info.value)


def test_link_facts_take_link_properties_and_the_user() -> None:
    facts = link_facts("atm", {symbol("branch"): "34"}, "teller@BANK")
    assert facts == Facts(node="atm", user_id="teller@BANK", properties={"branch": "34"})
    gw = gateway(
        {"container": "c", "userId": {"prefix": "teller@"}},
        {"container": "d", "applicationProperties": {"branch": {"exact": "34"}}},
    )
    assert resolve(gw, facts) == "c"
    assert link_facts("atm", None, None) == Facts(node="atm")
    # A link has no subject: a rule on it never matches a link.
    assert resolve(gateway({"container": "c", "subject": {"pattern": "#"}}), facts) is None


def test_exported_containers() -> None:
    gw = Gateway.model_validate({"export": [{"prefix": "branch-"}, {"exact": "head-office"}]})
    assert exported(gw, "branch-34")
    assert exported(gw, "head-office")
    assert not exported(gw, "head-office-2")
    assert not exported(Gateway(), "branch-34")  # nothing crosses unless exported
