"""Filters on hosted queues and topics (router/nodes/filters.py, selector.py, facts.py): the JMS
selector's grammar and three-valued logic, the JMS header mapping, one-line parse errors naming
the position, AMQP 0-10 topic patterns, the filter-set as proton hands it over, and facts read
from real encoded messages."""

from __future__ import annotations

import re
from uuid import UUID

import proton
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from router.nodes.config import Binding
from router.nodes.facts import MessageFacts, Scalar, facts_of
from router.nodes.filters import (
    DIRECT_BINDING,
    SELECTOR_FILTER,
    TOPIC_BINDING,
    FilterError,
    binding_filters,
    parse_filters,
    subject_matches,
)
from router.nodes.selector import SelectorError, compile_selector

PROPS: dict[str, Scalar] = {
    "a": 1,
    "b": 2.5,
    "s": "blue",
    "t": True,
    "f": False,
    "n": -7,
    "u": "under_score",
}
FACTS = MessageFacts(application_properties=PROPS)


def selects(selector: str, facts: MessageFacts = FACTS) -> bool:
    return compile_selector(selector).matches(facts)


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("a = 1", True),
        ("a = 1.0", True),  # int and float compare as numbers
        ("b > 2", True),
        ("b >= 2.5 AND b <= 2.5", True),
        ("a <> 1", False),
        ("s = 'blue'", True),
        ("s <> 'red'", True),
        ("t", True),
        ("t = TRUE", True),
        ("f", False),
        ("NOT f", True),
        ("a + 1 = 2", True),
        ("a + b = 3.5", True),
        ("7 / 2 = 3", True),  # integers divide as Java's longs
        ("-7 / 2 = -3", True),  # truncating toward zero
        ("7 / 2.0 = 3.5", True),
        ("n * -1 = 7", True),
        ("-n = 7", True),
        ("+a = 1", True),
        ("1 + 2 * 3 = 7", True),  # * before +
        ("(1 + 2) * 3 = 9", True),
        ("10 - 2 - 3 = 5", True),  # left-associative
        ("TRUE OR FALSE AND FALSE", True),  # AND before OR
        ("(TRUE OR FALSE) AND FALSE", False),
        ("NOT a = 2", True),  # NOT binds looser than =
        ("a BETWEEN 1 AND 2", True),
        ("a BETWEEN 2 AND 3", False),
        ("a NOT BETWEEN 2 AND 3", True),
        ("a BETWEEN 0 AND 1 AND s = 'blue'", True),
        ("s IN ('red', 'blue')", True),
        ("s IN ('red')", False),
        ("s NOT IN ('red', 'green')", True),
        ("a IN (1, 2)", True),
        ("s LIKE 'bl%'", True),
        ("s LIKE 'b_ue'", True),
        ("s LIKE 'b_'", False),
        ("s NOT LIKE '%x%'", True),
        ("u LIKE 'under\\_score' ESCAPE '\\'", True),
        ("u LIKE 'under!_%' ESCAPE '!'", True),
        ("s LIKE 'blue!_' ESCAPE '!'", False),
        ("'50%' LIKE '50!%' ESCAPE '!'", True),
        ("missing IS NULL", True),
        ("a IS NULL", False),
        ("a IS NOT NULL", True),
        ("0x10 = 16 AND 010 = 8 AND 5L = 5 AND 1e1 = 10 AND .5 = 0.5 AND 2.5F = 2.5", True),
        ("'it''s' = 'it''s'", True),
        ("a=1 AND(s='blue')", True),
    ],
)
def test_selector_cases(selector: str, expected: bool) -> None:
    assert selects(selector) is expected


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        # A missing identifier is NULL: comparisons with it are unknown, and so is their NOT.
        ("missing = 1", False),
        ("NOT missing = 1", False),
        ("missing <> 1", False),
        ("missing + 1 = 2", False),
        ("NOT (missing + 1 = 2)", False),
        ("missing BETWEEN 1 AND 2", False),
        ("missing NOT BETWEEN 1 AND 2", False),
        ("missing IN ('x')", False),
        ("missing NOT IN ('x')", False),
        ("missing LIKE '%'", False),
        ("missing NOT LIKE '%'", False),
        # Unknown AND FALSE is FALSE, unknown OR TRUE is TRUE, otherwise unknown stays.
        ("missing = 1 AND FALSE", False),
        ("NOT (missing = 1 AND FALSE)", True),
        ("missing = 1 OR TRUE", True),
        ("missing = 1 OR FALSE", False),
        ("NOT (missing = 1 OR FALSE)", False),
        ("NOT (missing = 1 AND TRUE)", False),
        ("missing", False),
        ("NOT missing", False),
    ],
)
def test_three_valued_logic(selector: str, expected: bool) -> None:
    assert selects(selector) is expected


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        # Different types compare as FALSE (JMS), not as unknown and never as an error.
        ("s = 1", False),
        ("NOT s = 1", True),
        ("s <> 1", False),
        ("a = 'blue'", False),
        ("t = 1", False),
        ("s > 1", False),
        ("s BETWEEN 1 AND 2", False),
        ("a LIKE '1'", False),
        ("a IN ('1')", False),
        # Arithmetic on non-numbers, or dividing by zero, is unknown.
        ("s + 1 = 1", False),
        ("NOT s + 1 = 1", False),
        ("t * 2 = 2", False),
        ("a / 0 = 1", False),
        ("NOT a / 0 = 1", False),
        ("-s = 1", False),
        # A non-boolean used as a condition is unknown.
        ("s", False),
        ("NOT s", False),
        ("a OR TRUE", True),
    ],
)
def test_type_mismatch_is_false_or_unknown(selector: str, expected: bool) -> None:
    assert selects(selector) is expected


def test_keywords_are_case_insensitive_identifiers_are_not() -> None:
    assert selects("s like 'b%' aNd a between 0 and 2 or not TrUe")
    assert selects("S IS null")


def test_empty_selector_selects_everything() -> None:
    assert selects("")
    assert selects("  \n")


def test_identifiers_may_hold_dots_and_dollars() -> None:
    facts = MessageFacts(application_properties={"x.y": 1, "$z": 2})
    assert selects("x.y = 1 AND $z = 2", facts)


@pytest.mark.parametrize(
    ("facts", "selector"),
    [
        (MessageFacts(), "JMSPriority = 4"),
        (MessageFacts(priority=9), "JMSPriority > 5 AND amqp.priority = 9"),
        (MessageFacts(subject="order"), "JMSType = 'order' AND amqp.subject = 'order'"),
        (
            MessageFacts(subject="subj", annotations={"x-opt-jms-type": "order"}),
            "JMSType = 'order' AND amqp.subject = 'subj'",
        ),
        (MessageFacts(durable=True), "JMSDeliveryMode = 'PERSISTENT'"),
        (MessageFacts(), "JMSDeliveryMode = 'NON_PERSISTENT' AND amqp.delivery_mode <> 'x'"),
        (MessageFacts(message_id="ID:1"), "JMSMessageID = 'ID:1' AND amqp.message_id LIKE 'ID%'"),
        (MessageFacts(correlation_id=5), "JMSCorrelationID = 5 AND amqp.correlation_id = 5"),
        (MessageFacts(creation_time=1000), "JMSTimestamp = 1000 AND amqp.creation_time < 2000"),
        (MessageFacts(absolute_expiry_time=7), "JMSExpiration = 7"),
        (MessageFacts(), "JMSTimestamp IS NULL AND JMSExpiration IS NULL"),
        (
            MessageFacts(to="q", reply_to="r", user_id="bob", content_type="t", group_id="g"),
            "amqp.to = 'q' AND amqp.reply_to = 'r' AND amqp.user_id = 'bob'"
            " AND amqp.content_type = 't' AND amqp.group_id = 'g'",
        ),
        # Other names, even JMS-looking ones, are application properties.
        (MessageFacts(application_properties={"JMSXGroupID": "g"}), "JMSXGroupID = 'g'"),
    ],
)
def test_header_mapping(facts: MessageFacts, selector: str) -> None:
    assert selects(selector, facts)


@pytest.mark.parametrize(
    ("selector", "position", "problem"),
    [
        ("a = ", 5, "expected a value, found the end"),
        ("a = 'open", 5, "unterminated string literal"),
        ("a = 1 b", 7, "unexpected 'b'"),
        ("(a = 1", 7, "expected ')'"),
        ("a # 1", 3, "unexpected character '#'"),
        ("a = 12abc", 5, "malformed number"),
        ("a = 09", 5, "malformed octal number"),
        ("NOT 5", 5, "the operand of NOT cannot be a number"),
        ("a = 1 AND 'x'", 11, "the operand of AND cannot be a string"),
        ("'x' + 1 = 2", 1, "an operand of + cannot be a string"),
        ("s < 'x'", 5, "an operand of < cannot be a string"),
        ("TRUE > FALSE", 1, "an operand of > cannot be a boolean"),
        ("a + 1", 1, "the selector is a number, not a condition"),
        ("'x'", 1, "the selector is a string, not a condition"),
        ("a = NULL", 5, "NULL is only allowed in IS [NOT] NULL"),
        ("and = 1", 1, "'AND' is a keyword"),
        ("a NOT 1", 7, "expected BETWEEN, IN or LIKE after NOT"),
        ("a IS 1", 6, "expected NULL after IS"),
        ("a BETWEEN 1 OR 2", 13, "expected AND in BETWEEN"),
        ("a IN 'x'", 6, "expected '(' after IN"),
        ("a IN (b)", 7, "expected a literal in IN"),
        ("a IN ('x' 'y')", 11, "expected ',' or ')'"),
        ("a LIKE b", 8, "expected a pattern after LIKE"),
        ("a LIKE 'x' ESCAPE 'ab'", 19, "ESCAPE takes a single character"),
        ("a LIKE 'x!' ESCAPE '!'", 3, "ends with its escape character"),
        ("5 LIKE 'x'", 1, "the operand of LIKE cannot be a number"),
        ("a = 1 = 2", 7, "unexpected '='"),
        ("a\n=\n", 5, "expected a value"),
    ],
)
def test_errors_are_one_line_naming_the_position(
    selector: str, position: int, problem: str
) -> None:
    with pytest.raises(SelectorError) as raised:
        compile_selector(selector)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"selector error at position {position}: "), message
    assert problem in message


@given(st.text(max_size=30))
def test_any_text_compiles_or_fails_with_one_line(text: str) -> None:
    try:
        selector = compile_selector(text)
    except SelectorError as error:
        assert "\n" not in str(error)
        assert re.match(r"selector error at position \d+: ", str(error))
    else:
        selector.matches(FACTS)  # never raises while testing a message


@given(st.integers(-100, 100), st.integers(-100, 100), st.integers(-100, 100))
def test_between_is_two_comparisons(value: int, low: int, high: int) -> None:
    facts = MessageFacts(application_properties={"v": value})
    assert selects(f"v BETWEEN {low} AND {high}", facts) is (low <= value <= high)
    assert selects(f"v NOT BETWEEN {low} AND {high}", facts) is not (low <= value <= high)


@pytest.mark.parametrize(
    ("pattern", "subject", "expected"),
    [
        ("a.*.c", "a.b.c", True),
        ("a.*.c", "a.c", False),
        ("a.*.c", "a.b.b.c", False),
        ("a.*.c", "a..c", True),  # '*' matches one word, an empty one too
        ("#", "a.b.c", True),
        ("#", "", True),
        ("#", None, True),
        ("a.#", "a", True),
        ("a.#", "a.b.c", True),
        ("a.#", "b.a", False),
        ("#.c", "c", True),
        ("#.c", "a.b.c", True),
        ("#.c", "a.b", False),
        ("a.#.c", "a.c", True),
        ("a.#.c", "a.x.y.c", True),
        ("#.#", "a", True),
        ("*", "", False),
        ("*", None, False),
        ("*", "a", True),
        ("*", "a.b", False),
        ("*.#", "a", True),
        ("", "", True),
        ("", "a", False),
        ("a.b", "a.b", True),
        ("a.b", "a.bc", False),
        ("a*", "ab", False),  # wildcards are whole words only
    ],
)
def test_topic_patterns(pattern: str, subject: str | None, expected: bool) -> None:
    assert subject_matches(pattern, subject) is expected


words = st.lists(st.sampled_from(["a", "b", ""]), max_size=5)
pattern_words = st.lists(st.sampled_from(["a", "b", "", "*", "#"]), max_size=5)


@given(pattern_words, words)
def test_topic_patterns_agree_with_a_regular_expression(
    pattern: list[str], subject: list[str]
) -> None:
    """'#' as any run of whole words, '*' as one word, against words joined by '.'."""
    regex = "".join(
        r"(?:[^.]*\.)*" if w == "#" else (r"[^.]*\." if w == "*" else re.escape(w) + r"\.")
        for w in pattern
    )
    text = "".join(w + "." for w in subject)
    expected = re.fullmatch(regex, text) is not None
    pattern_text = ".".join(pattern)
    subject_text = ".".join(subject)
    if pattern != [""] and subject != [""]:  # one empty word prints as zero words
        assert subject_matches(pattern_text, subject_text) is expected


def described(descriptor: str | int, value: object) -> proton.Described:
    if isinstance(descriptor, str):
        return proton.Described(proton.symbol(descriptor), value)
    return proton.Described(proton.ulong(descriptor), value)


def filter_set_via_proton(filter_set: dict[proton.symbol, object]) -> dict[object, object]:
    """The filter-set as a receiving router sees it: encoded, decoded, get_object()."""
    data = proton.Data()
    data.put_object(filter_set)
    encoded = data.encode()
    decoded = proton.Data()
    decoded.decode(encoded)
    decoded.rewind()
    decoded.next()
    result = decoded.get_object()
    assert isinstance(result, dict)
    return result


@pytest.mark.parametrize(
    ("direct", "topic", "selector"),
    [
        (DIRECT_BINDING, TOPIC_BINDING, SELECTOR_FILTER),
        (0x0000468C00000000, 0x0000468C00000001, 0x0000468C00000004),
    ],
)
def test_filter_set_by_symbol_and_by_code(
    direct: str | int, topic: str | int, selector: str | int
) -> None:
    raw = {
        proton.symbol("d"): described(direct, "orders.eu"),
        proton.symbol("t"): described(topic, "orders.*"),
        proton.symbol("sel"): described(selector, "amount > 10"),
        proton.symbol("other"): described("example.org:no-such-filter", "x"),
    }
    filters = parse_filters(filter_set_via_proton(raw))
    assert [f.kind for f in filters.filters] == ["direct", "topic", "selector"]
    assert filters.unsupported == ("other",)
    assert set(filters.applied) == {"d", "t", "sel"}
    assert filters.applied["sel"].value == "amount > 10"
    big = MessageFacts(subject="orders.eu", application_properties={"amount": 11})
    small = MessageFacts(subject="orders.eu", application_properties={"amount": 1})
    elsewhere = MessageFacts(subject="orders.us", application_properties={"amount": 11})
    assert filters.matches(big)
    assert not filters.matches(small)
    assert not filters.matches(elsewhere)


def test_no_filter_set_matches_everything() -> None:
    empty: dict[str, object] | None
    for empty in (None, {}):
        filters = parse_filters(empty)
        assert filters.matches(MessageFacts())
        assert filters.applied == {}
        assert filters.unsupported == ()


def test_entries_that_are_not_described_are_unsupported() -> None:
    filters = parse_filters({proton.symbol("plain"): "x", proton.symbol("num"): 5})
    assert filters.unsupported == ("plain", "num")
    assert filters.matches(MessageFacts())


def test_direct_binding_without_subject() -> None:
    filters = parse_filters({"d": described(DIRECT_BINDING, "")})
    assert filters.matches(MessageFacts())
    assert not filters.matches(MessageFacts(subject="x"))


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (described(SELECTOR_FILTER, "a = "), "filter 'f': selector error at position 5: "),
        (described(0x0000468C00000001, 5), "filter 'f': a topic filter's value must be a string"),
    ],
)
def test_malformed_known_filters_refuse_the_attach(value: proton.Described, problem: str) -> None:
    with pytest.raises(FilterError, match=re.escape(problem)) as raised:
        parse_filters({proton.symbol("f"): value})
    assert "\n" not in str(raised.value)


def test_bindings_reuse_the_filters() -> None:
    binding = Binding(address="audit", selector="region = 'eu'", subject="orders.#")
    filters = binding_filters(binding)
    assert filters.matches(
        MessageFacts(subject="orders.new", application_properties={"region": "eu"})
    )
    assert not filters.matches(
        MessageFacts(subject="invoices", application_properties={"region": "eu"})
    )
    assert not filters.matches(
        MessageFacts(subject="orders", application_properties={"region": "us"})
    )
    assert binding_filters(Binding(address="all")).matches(MessageFacts())


def test_a_binding_with_a_bad_selector_is_a_configuration_error() -> None:
    with pytest.raises(ValidationError, match="selector error at position 13"):
        Binding(address="audit", selector="region LIKE 5")


def test_facts_of_a_real_message() -> None:
    message = proton.Message(
        body="the body is not read",
        id="ID:42",
        correlation_id=UUID(int=7),
        subject="orders.new",
        durable=True,
        priority=9,
        address="orders",
        reply_to="replies",
        user_id=b"bob",
        content_type="text/plain",
        properties={
            "region": "eu",
            "count": proton.int32(3),
            "weight": proton.float32(1.5),
            "code": proton.symbol("sym"),
            "big": proton.ulong(2**63),
            "raw": b"\x00\x01",
            "flag": True,
        },
        annotations={proton.symbol("x-opt-jms-type"): "order"},
    )
    message.group_id = "g1"
    message.creation_time = 1700000000.123
    message.expiry_time = 1700000001.5
    facts = facts_of(message.encode())
    assert facts.durable is True
    assert facts.priority == 9
    assert facts.subject == "orders.new"
    assert facts.message_id == "ID:42"
    assert facts.correlation_id is None  # a uuid is nothing a selector can compare
    assert facts.creation_time == 1700000000123
    assert facts.absolute_expiry_time == 1700000001500
    assert (facts.user_id, facts.to, facts.reply_to) == ("bob", "orders", "replies")
    assert (facts.content_type, facts.group_id) == ("text/plain", "g1")
    assert facts.application_properties == {
        "region": "eu",
        "count": 3,
        "weight": 1.5,
        "code": "sym",
        "big": 2**63,
        "raw": None,
        "flag": True,
    }
    assert all(
        type(v) in (str, int, float, bool, type(None))
        for v in facts.application_properties.values()
    )
    assert facts.annotations == {"x-opt-jms-type": "order"}
    assert selects(
        "JMSType = 'order' AND JMSPriority = 9 AND JMSDeliveryMode = 'PERSISTENT'"
        " AND count * weight = 4.5 AND code = 'sym' AND raw IS NULL AND flag",
        facts,
    )


def test_facts_of_a_bare_message_has_the_defaults() -> None:
    facts = facts_of(proton.Message(body=None).encode())
    assert (facts.durable, facts.priority, facts.subject) == (False, 4, None)
    assert facts.creation_time is None
    assert facts.application_properties == {}
    assert facts.annotations == {}


@pytest.mark.parametrize(
    "data",
    [b"", b"garbage", b"\x00Sp", bytes(proton.Message(subject="s").encode())[:-1]],
)
def test_undecodable_messages(data: bytes) -> None:
    with pytest.raises(ValueError) as raised:
        facts_of(data)
    assert "\n" not in str(raised.value)


def test_invalid_utf8_in_a_property_is_undecodable() -> None:
    encoded = bytes(proton.Message(subject="ab").encode())
    broken = encoded.replace(b"\xa1\x02ab", b"\xa1\x02\xff\xfe")
    with pytest.raises(ValueError, match="undecodable message"):
        facts_of(broken)
