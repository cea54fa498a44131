"""Tests for router.datapath.sections, checked against proton's own encoder and decoder.

Hand-built messages use the tiny encoder below, so section boundaries are known independently
of the scanner under test; each hand-built message is also decoded by proton to show that the
encoder produces real AMQP.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable

import pytest
from proton import Described, Message, int32, symbol, ulong

from router.datapath.sections import (
    EMPTY_ANNOTATIONS,
    MessageFormatError,
    RouterAnnotations,
    Scan,
    get_to,
    read_annotations,
    rewrite,
    scan,
)

NULL = b"\x40"
INGRESS = symbol("x-opt-qd.ingress")
TRACE = symbol("x-opt-qd.trace")
TO = symbol("x-opt-qd.to")
PHASE = symbol("x-opt-qd.phase")


def _var(code8: int, data: bytes, wide: bool = False) -> bytes:
    """Encode a variable-width value, taking the 4-byte-size form (code8 + 0x10) when needed."""
    if len(data) < 256 and not wide:
        return bytes((code8, len(data))) + data
    return bytes((code8 + 0x10,)) + len(data).to_bytes(4) + data


def string(text: str) -> bytes:
    return _var(0xA1, text.encode())


def sym(text: str) -> bytes:
    return _var(0xA3, text.encode())


def binary(data: bytes) -> bytes:
    return _var(0xA0, data)


def compound(code8: int, items: tuple[bytes, ...], wide: bool) -> bytes:
    body = b"".join(items)
    if wide or len(body) >= 255:
        return bytes((code8 + 0x10,)) + (len(body) + 4).to_bytes(4) + len(items).to_bytes(4) + body
    return bytes((code8, len(body) + 1, len(items))) + body


def list_(*items: bytes, wide: bool = False) -> bytes:
    return compound(0xC0, items, wide)


def map_(*items: bytes, wide: bool = False) -> bytes:
    return compound(0xC1, items, wide)


def section(code: int, value: bytes) -> bytes:
    return b"\x00\x53" + bytes((code,)) + value


HEADER = section(0x70, list_(b"\x41"))  # durable
DA = section(0x71, map_(sym("x-opt-da"), string("d")))
USER_MA = section(0x72, map_(sym("user"), string("u"), sym("n"), b"\x54\x07"))
PROPS = section(0x73, list_(string("id-1"), NULL, string("dest")))
AP = section(0x74, map_(string("color"), string("red")))
DATA1 = section(0x75, binary(b"first"))
DATA2 = section(0x75, binary(b"second"))
SEQ1 = section(0x76, list_(b"\x54\x01"))
SEQ2 = section(0x76, list_(string("two")))
VALUE = section(0x77, string("body"))
FOOTER = section(0x78, map_(sym("x-opt-f"), b"\x54\x01"))


def join(*sections: bytes) -> tuple[bytes, list[int]]:
    """Concatenate sections, also returning every section boundary (ends included)."""
    bounds = [0]
    for sec in sections:
        bounds.append(bounds[-1] + len(sec))
    return b"".join(sections), bounds


def decode(data: bytes) -> Message:
    msg = Message()
    msg.decode(data)
    return msg


def scan_tuple(s: Scan) -> tuple[int, int, int, int, int]:
    return s.ma_start, s.ma_end, s.props_start, s.props_end, s.body_start


def annotations_of(data: bytes) -> RouterAnnotations:
    return read_annotations(data, scan(data))


# --- scan ---------------------------------------------------------------------------------------


def test_scan_locates_every_section_of_a_full_message() -> None:
    data, b = join(HEADER, DA, USER_MA, PROPS, AP, DATA1, DATA2, FOOTER)
    assert scan_tuple(scan(data)) == (b[2], b[3], b[3], b[4], b[5])
    msg = decode(data)  # the hand encoder writes messages proton accepts
    assert msg.durable and msg.address == "dest" and msg.properties == {"color": "red"}


def test_scan_without_ma_gives_the_spec_insertion_point() -> None:
    data, b = join(HEADER, DA, PROPS, VALUE)
    assert scan_tuple(scan(data)) == (b[2], b[2], b[2], b[3], b[3])
    data, b = join(HEADER, AP, VALUE)
    assert scan_tuple(scan(data)) == (b[1], b[1], -1, -1, b[2])
    data, b = join(HEADER, DA)
    assert scan_tuple(scan(data)) == (b[2], b[2], -1, -1, b[2])


def test_scan_of_proton_messages_without_body() -> None:
    data = Message().encode()  # proton writes header and properties even when both are empty
    assert data == b"\x00\x53\x70\x45\x00\x53\x73\x45"
    assert scan_tuple(scan(data)) == (4, 4, 4, 8, 8)
    assert get_to(data, scan(data)) is None


@pytest.mark.parametrize(
    "body",
    [
        pytest.param([SEQ1, SEQ2], id="sequences"),
        pytest.param([DATA1, DATA2, DATA1], id="data"),
        pytest.param([VALUE, FOOTER], id="value-footer"),
        pytest.param([FOOTER], id="footer-only"),
    ],
)
def test_scan_accepts_every_body_shape(body: list[bytes]) -> None:
    data, b = join(HEADER, PROPS, *body)
    assert scan(data).body_start == b[2]


def test_scan_accepts_long_and_symbolic_descriptors() -> None:
    ma = b"\x00\xa3\x1camqp:message-annotations:map" + map_(sym("k"), NULL)
    props = b"\x00\x80" + (0x73).to_bytes(8) + list_(NULL, NULL, sym("dest"))
    body = b"\x00\xb3" + len(b"amqp:data:binary").to_bytes(4) + b"amqp:data:binary" + binary(b"x")
    data, b = join(HEADER, ma, props, body)
    s = scan(data)
    assert scan_tuple(s) == (b[1], b[2], b[2], b[3], b[3])
    assert get_to(data, s) == "dest"
    # proton's own decoder silently skips sections with symbolic descriptors
    assert decode(data).annotations is None


def test_scan_accepts_every_buffer_type() -> None:
    data, _ = join(HEADER, USER_MA, PROPS, DATA1)
    expected = scan_tuple(scan(data))
    for buf in (bytearray(data), memoryview(data), memoryview(bytearray(data))):
        s = scan(buf)
        assert scan_tuple(s) == expected
        assert get_to(buf, s) == "dest"
        assert rewrite(buf, s, ingress="r") == rewrite(data, scan(data), ingress="r")


def test_scan_of_a_one_mebibyte_body() -> None:
    body = bytes(range(256)) * 4096
    msg = Message(address="q", body=body, inferred=True)
    data = msg.encode()
    s = scan(data)
    assert data[s.body_start : s.body_start + 8] == b"\x00\x53\x75\xb0" + (1 << 20).to_bytes(4)
    assert get_to(data, s) == "q"
    out = rewrite(data, s, ingress="0/R", trace=["0/R"])
    assert out.endswith(data[s.body_start :])
    assert decode(out).body == body


# --- garbage ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "empty"),
        (b"\x53\x70\x45", "expected a section at offset 0"),
        (HEADER + b"\x45", "expected a section at offset 7"),
        (section(0x79, NULL), "unknown section descriptor 0x79"),
        (b"\x00\x44\x45", "unknown section descriptor 0x0"),
        (b"\x00\x80" + (1 << 32 | 0x70).to_bytes(8) + b"\x45", "unknown section descriptor"),
        (b"\x00\xa3\x0bamqp:x:list\x45", "unknown section descriptor"),
        (b"\x00\xa1\x10amqp:header:list\x45", "constructor 0xa1"),
        (section(0x70, b"\x00\x53\x01\x45"), "value of constructor 0x00"),
        (section(0x72, list_()), "value of constructor 0xc0"),
        (section(0x75, string("s")), "value of constructor 0xa1"),
        (section(0x77, b"\x57"), "unknown constructor 0x57"),
        (section(0x77, b"\xa0\x05abc"), "runs past the end"),
        (section(0x77, b"\xc0\x01"), "runs past the end"),
        (section(0x77, b"\xb0\xff\xff\xff\xff"), "runs past"),
        (section(0x77, b"\x00\x53"), "runs past the end"),
        (section(0x77, b"\x00" * 100_000), "runs past the end"),
        (PROPS + HEADER, "out of order"),
        (HEADER + HEADER, "out of order"),
        (USER_MA + DA, "out of order"),
        (USER_MA + USER_MA, "out of order"),
        (AP + PROPS, "out of order"),
        (VALUE + VALUE, "out of order"),
        (FOOTER + DATA1, "out of order"),
        (FOOTER + FOOTER, "out of order"),
        (DATA1 + SEQ1, "mixes body kinds"),
        (SEQ1 + VALUE, "mixes body kinds"),
        (DATA1 + VALUE, "mixes body kinds"),
    ],
)
def test_scan_rejects(data: bytes, match: str) -> None:
    with pytest.raises(MessageFormatError, match=match):
        scan(data)


def _exercise(data: bytes | bytearray | memoryview) -> None:
    """Run everything the router does with a message, so every reader sees the garbage."""
    s = scan(data)
    get_to(data, s)
    read_annotations(data, s)
    rewrite(data, s)
    out = rewrite(data, s, ingress="0/R", trace=["0/A", "0/R"], to="t", phase=1)
    ann = annotations_of(out)
    assert (ann.ingress, ann.trace, ann.to, ann.phase) == ("0/R", ["0/A", "0/R"], "t", 1)


def _succeeds(action: Callable[[], None]) -> bool:
    """Return whether action succeeded; any exception but MessageFormatError fails the test."""
    try:
        action()
    except MessageFormatError:
        return False
    return True


RICH, RICH_BOUNDS = join(
    HEADER,
    DA,
    section(
        0x72,
        map_(
            sym("user"),
            list_(string("a"), b"\x00\xa3\x01d" + b"\x54\x01"),
            sym("x-opt-qd.ingress"),
            string("0/A"),
            sym("x-opt-qd.trace"),
            list_(string("0/A"), sym("0/B")),
            sym("x-opt-qd.phase"),
            b"\x71\x00\x00\x01\x00",
            b"\x53\x05",  # a ulong key
            b"\x98" + bytes(16),
            wide=True,
        ),
    ),
    PROPS,
    AP,
    DATA1,
    DATA2,
    FOOTER,
)


def test_rich_message_is_valid() -> None:
    msg = decode(RICH)
    assert msg.annotations[ulong(5)] == uuid.UUID(int=0)
    ann = annotations_of(RICH)
    assert (ann.ingress, ann.trace, ann.to, ann.phase, ann.present) == (
        "0/A",
        ["0/A", "0/B"],
        None,
        256,
        True,
    )


def test_every_truncation_fails_except_at_section_boundaries() -> None:
    for cut in range(len(RICH) + 1):
        ok = _succeeds(lambda cut=cut: _exercise(RICH[:cut]))
        assert ok == (cut in RICH_BOUNDS[1:]), f"cut at {cut}"


@pytest.mark.parametrize("seed", range(4))
def test_random_mutations_fail_only_with_message_format_error(seed: int) -> None:
    rng = random.Random(seed)
    samples = [
        RICH,
        join(HEADER, USER_MA, PROPS, SEQ1, SEQ2)[0],
        Message(address="a" * 300, id=7, body={"k": [1, 2.5]}, annotations={TRACE: ["x"]}).encode(),
    ]
    survived = 0
    for _ in range(3000):
        data = bytearray(rng.choice(samples))
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(len(data))
            choice = rng.random()
            if choice < 0.6:
                data[pos] = rng.randrange(256)
            elif choice < 0.8:
                del data[pos]
            else:
                data.insert(pos, rng.randrange(256))
        survived += _succeeds(lambda data=bytes(data): _exercise(data))
    assert survived  # some mutations must hit bytes that are legal either way


def test_random_bytes_fail_only_with_message_format_error() -> None:
    rng = random.Random(1234)
    for _ in range(5000):
        data = rng.randbytes(rng.randrange(64))
        if rng.random() < 0.5:  # give it a plausible start so scanning gets further
            data = b"\x00\x53" + bytes((rng.randrange(0x70, 0x79),)) + data
        _succeeds(lambda data=data: _exercise(data))


# --- get_to -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "msg",
    [
        Message(address="amqp://host/queue"),
        Message(address="q", id=uuid.UUID(int=5), user_id=b"me"),
        Message(address="q", id=ulong(1 << 40), subject="s", reply_to="r"),
        Message(address="é/ü" * 200),  # str32 in a list32
        Message(address=""),
        Message(),
        Message(subject="to is an explicit null"),
        Message(id="only the id"),
    ],
)
def test_get_to_matches_proton(msg: Message) -> None:
    data = msg.encode()
    assert get_to(data, scan(data)) == msg.address


@pytest.mark.parametrize(
    ("props", "to"),
    [
        (list_(NULL, NULL, sym("s")), "s"),
        (list_(NULL, NULL, _var(0xA3, b"s" * 300)), "s" * 300),
        (list_(NULL, NULL, string("wide"), wide=True), "wide"),
        (list_(b"\x00\xa3\x01d\xa1\x01x", binary(b"u"), string("described id")), "described id"),
        (list_(NULL, NULL, NULL, string("subject")), None),
        (list_(NULL, NULL), None),
        (b"\x45", None),
        (NULL, None),
    ],
)
def test_get_to_of_hand_encoded_properties(props: bytes, to: str | None) -> None:
    data = HEADER + section(0x73, props)
    assert get_to(data, scan(data)) == to


def test_get_to_without_properties() -> None:
    data, _ = join(HEADER, AP, DATA1)
    assert get_to(data, scan(data)) is None


@pytest.mark.parametrize(
    ("props", "match"),
    [
        (list_(NULL, NULL, b"\x54\x01"), "constructor 0x54"),
        (list_(NULL, NULL, b"\xa1\x02\xff\xfe"), "UTF-8"),
        (b"\xc0\x03\x03\x40\x40", "fewer fields"),
        (b"\xc0\x05\x03\x40\x40\xa1\x07", "runs past the properties' end"),
        (b"\xc0\x08\x03\x40\x40\xb1\x00\x00\x00\x07", "runs past the properties' end"),
    ],
)
def test_get_to_rejects(props: bytes, match: str) -> None:
    data = section(0x73, props) + DATA1
    with pytest.raises(MessageFormatError, match=match):
        get_to(data, scan(data))


# --- read_annotations ---------------------------------------------------------------------------


def test_read_annotations_without_ma_returns_the_shared_empty_instance() -> None:
    first = annotations_of(Message(address="a").encode())
    assert first is EMPTY_ANNOTATIONS
    assert annotations_of(Message(annotations={symbol("u"): 1}).encode()) is EMPTY_ANNOTATIONS
    assert (first.ingress, first.trace, first.to, first.phase, first.present) == (
        None,
        None,
        None,
        None,
        False,
    )


def test_forwarded_and_stripped_reuse_one_encoding_per_parse() -> None:
    """What the forwarder sends on: each message keeps its own body whatever the shared parse
    kept, and messages without annotations (EMPTY_ANNOTATIONS) get their own addresses."""
    ma = section(0x72, map_(sym("user"), string("u"), sym("x-opt-qd.ingress"), string("0/A")))
    first = ma + section(0x77, string("one"))
    second = ma + section(0x77, string("two"))
    ann = annotations_of(first)
    assert annotations_of(second) is ann
    for data, body in ((first, "one"), (second, "two")):
        out = ann.forwarded(data, scan(data), "q", "0/B")
        got = annotations_of(out)
        assert (got.ingress, got.trace, got.to) == ("0/A", ["0/B"], "q")
        assert out.endswith(section(0x77, string(body)))
        stripped = ann.stripped(data, scan(data))
        assert stripped == section(0x72, map_(sym("user"), string("u"))) + section(
            0x77, string(body)
        )
    bare = section(0x77, string("x"))
    for address in [f"a{i}" for i in range(100)]:  # more than are kept: stays right, bounded
        got = annotations_of(EMPTY_ANNOTATIONS.forwarded(bare, scan(bare), address, "0/B"))
        assert (got.ingress, got.trace, got.to) == ("0/B", ["0/B"], address)
    assert EMPTY_ANNOTATIONS.present is False and EMPTY_ANNOTATIONS.trace is None


def test_messages_with_the_same_annotations_share_one_parse() -> None:
    def hop(trace: list[str], body: bytes) -> bytes:
        ma = map_(
            sym("x-opt-qd.ingress"),
            string(trace[0]),
            sym("x-opt-qd.trace"),
            list_(*map(string, trace)),
        )
        return section(0x72, ma) + section(0x77, body)

    first = annotations_of(hop(["0/A"], string("one")))
    second = annotations_of(hop(["0/A"], string("two")))
    other = annotations_of(hop(["0/A", "0/B"], string("one")))
    assert first is second
    assert first.routers == frozenset({"A"})
    assert (other.trace, other.routers) == (["0/A", "0/B"], frozenset({"A", "B"}))
    # A rewrite reuses the shared parse and leaves every other section as it was.
    data = hop(["0/A"], string("two"))
    out = rewrite(data, scan(data), ingress="0/A", trace=["0/A", "0/R"], to="t", read=second)
    assert out.endswith(section(0x77, string("two")))
    assert annotations_of(out).trace == ["0/A", "0/R"]
    assert first.trace == ["0/A"]


@pytest.mark.parametrize(
    "annotations",
    [
        {symbol("user"): "u", symbol("x-opt-other"): [1, 2]},
        {symbol("x-opt-qd"): 1, symbol("x-opt-qd-not"): 2},  # no dot: not a router key
        {},
    ],
)
def test_read_annotations_ignores_user_keys(annotations: dict[symbol, object]) -> None:
    assert annotations_of(Message(annotations=annotations).encode()).present is False


def test_read_annotations_of_string_keys_that_look_like_router_keys() -> None:
    data = section(0x72, map_(string("x-opt-qd.ingress"), string("0/A")))
    assert annotations_of(data).present is False


@pytest.mark.parametrize("user", [False, True])
def test_read_annotations_matches_proton(user: bool) -> None:
    annotations: dict[symbol, object] = {
        INGRESS: "0/Router.A",
        TRACE: ["0/Router.A", "0/Router.B"],
        TO: "override",
        PHASE: int32(1),
    }
    if user:
        annotations = {symbol("u1"): {"nested": [1, 2]}, **annotations, symbol("u2"): b"\x00"}
    ann = annotations_of(Message(annotations=annotations, body="b").encode())
    assert (ann.ingress, ann.trace, ann.to, ann.phase, ann.present) == (
        "0/Router.A",
        ["0/Router.A", "0/Router.B"],
        "override",
        1,
        True,
    )


@pytest.mark.parametrize(
    ("value", "phase"),
    [
        (b"\x54\xff", -1),
        (b"\x71\x80\x00\x00\x00", -(1 << 31)),
        (b"\x50\xff", 255),
        (b"\x52\x09", 9),
        (b"\x43", 0),
        (b"\x44", 0),
        (b"\x55\x02", 2),
        (b"\x81" + (5).to_bytes(8), 5),
        (b"\x80" + (1 << 40).to_bytes(8), 1 << 40),
        (b"\x60\x01\x00", 256),
        (b"\x61\xff\xfe", -2),
        (b"\x70\x00\x00\x01\x00", 256),
        (string("7"), None),
        (NULL, None),
    ],
)
def test_read_annotations_reads_any_integer_phase(value: bytes, phase: int | None) -> None:
    ann = annotations_of(section(0x72, map_(sym("x-opt-qd.phase"), value)))
    assert (ann.phase, ann.present) == (phase, True)


@pytest.mark.parametrize(
    ("value", "trace"),
    [
        (b"\x45", []),
        (list_(string("a"), sym("b"), _var(0xA1, b"c" * 300)), ["a", "b", "c" * 300]),
        (list_(string("a"), wide=True), ["a"]),
        (list_(string("a"), b"\x54\x01", NULL, string("b")), ["a", "b"]),  # junk hops dropped
        (string("a"), None),
        (map_(), None),
    ],
)
def test_read_annotations_trace(value: bytes, trace: list[str] | None) -> None:
    ann = annotations_of(section(0x72, map_(sym("x-opt-qd.trace"), value)))
    assert (ann.trace, ann.present) == (trace, True)


def test_read_annotations_of_wrong_types_and_odd_encodings() -> None:
    ma = map_(
        _var(0xA3, b"x-opt-qd.ingress", wide=True),
        _var(0xA1, b"0/A", wide=True),
        sym("x-opt-qd.to"),
        b"\x54\x01",  # not a string: ignored, yet present
        sym("x-opt-qd.unknown"),
        NULL,
        wide=True,
    )
    ann = annotations_of(b"\x00\x80" + (0x72).to_bytes(8) + ma)
    assert (ann.ingress, ann.to, ann.present) == ("0/A", None, True)


def test_read_annotations_of_a_null_ma_section() -> None:
    data = section(0x72, NULL) + PROPS
    assert annotations_of(data).present is False
    assert rewrite(data, scan(data)) == PROPS


@pytest.mark.parametrize(
    ("ma", "match"),
    [
        (b"\xc1\x02\x01\x40", "odd item count"),
        (b"\xc1\x04\x02\xa3\x01k", "truncated"),
        (b"\xc1\x0c\x02\xa3\x09x-opt-qd.", "truncated"),
        (b"\xc1\x05\x04\xa3\x01k\x40", "truncated"),
        (b"\xc1\x06\x02\xa3\x01k\x40\x40", "not at the map's end"),
        (b"\xc1\x0a\x02\xa3\x01k\xa1\x090123", "runs past the map's end"),
        (b"\xc1\x05\x02\xa3\x01k\x57", "unknown constructor 0x57"),
        (map_(sym("x-opt-qd.ingress"), b"\xa1\x01\xff"), "UTF-8"),
        (map_(sym("x-opt-qd.trace"), b"\xc0\x05\x01\xa1\x01a\x40"), "does not match its size"),
        (map_(sym("x-opt-qd.trace"), b"\xc0\x04\x01\xa1\x01\xff"), "UTF-8"),
        (map_(sym("x-opt-qd.trace"), b"\xc0\x04\x01\xa3\x01\xff"), "UTF-8"),
        (map_(sym("x-opt-qd.trace"), b"\xc0\x00"), "truncated"),
    ],
)
def test_read_annotations_rejects(ma: bytes, match: str) -> None:
    data = section(0x72, ma)
    with pytest.raises(MessageFormatError, match=match):
        read_annotations(data, scan(data))


# --- rewrite ------------------------------------------------------------------------------------


def _other_sections_intact(before: bytes, after: bytes) -> Scan:
    s, t = scan(before), scan(after)
    assert after[: t.ma_start] == before[: s.ma_start]
    assert after[t.ma_end :] == before[s.ma_end :]
    return t


def _assert_same_message(a: Message, b: Message) -> None:
    for field in (
        "durable",
        "priority",
        "ttl",
        "id",
        "user_id",
        "address",
        "subject",
        "reply_to",
        "correlation_id",
        "content_type",
        "instructions",
        "properties",
        "body",
    ):
        assert getattr(a, field) == getattr(b, field), field


FULL = Message(
    durable=True,
    priority=7,
    id="id-1",
    address="amqp:/queue",
    subject="subj",
    reply_to="reply",
    instructions={symbol("x-opt-da"): 1},
    properties={"color": "red", "n": 3},
    body=b"x" * 100,
    inferred=True,
)


def test_rewrite_adds_annotations_where_the_spec_puts_them() -> None:
    data = FULL.encode()
    out = rewrite(data, scan(data), ingress="0/R", trace=["0/R"], to="elsewhere", phase=2)
    _other_sections_intact(data, out)
    got = decode(out)
    _assert_same_message(got, FULL)
    assert got.annotations == {INGRESS: "0/R", TRACE: ["0/R"], TO: "elsewhere", PHASE: 2}
    assert type(got.annotations[PHASE]) is int32  # Dispatch writes the phase as an AMQP int


def test_rewrite_adds_ingress_only() -> None:
    data = Message(address="q", body="b").encode()
    out = rewrite(data, scan(data), ingress="0/R")
    t = _other_sections_intact(data, out)
    assert out[t.ma_start : t.ma_end] == b"\x00\x53\x72\xc1\x18\x02" + sym(INGRESS) + string("0/R")
    assert decode(out).annotations == {INGRESS: "0/R"}


def test_rewrite_preserves_user_annotations_byte_for_byte() -> None:
    user = {
        symbol("u1"): Described(symbol("d"), [1, "x"]),
        symbol("u2"): {"nested": [1.5, None, True]},
        ulong(9): uuid.UUID(int=9),
    }
    msg = Message(address="q", annotations={**user, TRACE: ["0/A"], INGRESS: "0/A"}, body=[1])
    data = msg.encode()
    out = rewrite(data, scan(data), ingress="0/B", trace=["0/A", "0/B"])
    _other_sections_intact(data, out)
    got = decode(out)
    assert got.annotations == {**user, INGRESS: "0/B", TRACE: ["0/A", "0/B"]}
    stripped = Message(address="q", annotations=user, body=[1]).encode()
    s = scan(stripped)
    user_bytes = stripped[s.ma_start + 12 : s.ma_end]  # past descriptor and map32 header
    assert user_bytes in out


def test_rewrite_phase_zero_is_not_written_and_wide_phases_are() -> None:
    data = Message(address="q").encode()
    assert rewrite(data, scan(data), phase=0) == data
    for phase in (127, 128, -129, (1 << 31) - 1, -(1 << 31)):
        out = rewrite(data, scan(data), phase=phase)
        assert decode(out).annotations == {PHASE: phase}
        assert annotations_of(out).phase == phase


def test_rewrite_empty_and_long_values_use_the_right_widths() -> None:
    data = FULL.encode()
    hops = [f"0/router-{i:03d}" for i in range(100)]
    for kwargs in (
        {"trace": []},
        {"trace": hops},
        {"ingress": "i" * 300, "to": "ü" * 200},
        {"ingress": "", "to": ""},
        {"trace": ["h" * 250]},
    ):
        out = rewrite(data, scan(data), **kwargs)
        _other_sections_intact(data, out)
        got = decode(out)
        _assert_same_message(got, FULL)
        expected = {symbol(f"x-opt-qd.{key}"): value for key, value in kwargs.items()}
        assert got.annotations == expected
        ann = annotations_of(out)
        assert {k: getattr(ann, k) for k in kwargs} == kwargs


def test_rewrite_to_a_map_of_exactly_the_map8_limit() -> None:
    data = Message(address="q").encode()
    for length in range(220, 240):  # crosses 255 bytes of map content
        out = rewrite(data, scan(data), ingress="i" * length)
        assert decode(out).annotations == {INGRESS: "i" * length}


def test_rewrite_replaces_existing_router_annotations() -> None:
    msg = Message(
        address="q",
        annotations={INGRESS: "0/A", symbol("u"): 1, TRACE: ["0/A"], PHASE: int32(3)},
        body="b",
    )
    data = msg.encode()
    out = rewrite(data, scan(data), ingress="0/B", trace=["0/A", "0/B"])
    _other_sections_intact(data, out)
    got = decode(out).annotations
    assert got == {symbol("u"): 1, INGRESS: "0/B", TRACE: ["0/A", "0/B"]}
    assert list(got) == [symbol("u"), INGRESS, TRACE]  # user annotations first
    assert rewrite(out, scan(out), ingress="0/B", trace=["0/A", "0/B"]) == out


def test_strip_of_router_only_annotations_drops_the_section() -> None:
    annotations = {INGRESS: "0/A", TRACE: ["0/A"], TO: "t", PHASE: int32(1)}
    for msg in (FULL, Message(address="q"), Message(body=[1, 2], inferred=True)):
        bare = msg.encode()
        msg.annotations = annotations
        data = msg.encode()
        msg.annotations = None
        s = scan(data)
        out = rewrite(data, s)
        assert out == bare
        assert scan_tuple(scan(out))[:2] == (s.ma_start, s.ma_start)


def test_strip_keeps_user_annotations() -> None:
    msg = Message(address="q", annotations={INGRESS: "0/A", symbol("u"): "v"}, body="b")
    data = msg.encode()
    out = rewrite(data, scan(data))
    _other_sections_intact(data, out)
    assert decode(out).annotations == {symbol("u"): "v"}
    assert annotations_of(out).present is False


def test_strip_without_router_annotations_returns_the_message_unchanged() -> None:
    data = bytes(Message(address="q", annotations={symbol("u"): "v"}).encode())
    assert rewrite(data, scan(data)) is data
    assert rewrite(bytearray(data), scan(data)) == data


def test_strip_drops_an_empty_ma_section() -> None:
    data = Message(address="q", annotations={}).encode()
    s = scan(data)
    assert s.ma_end - s.ma_start == 12  # proton writes an empty map as map32
    assert rewrite(data, s) == Message(address="q").encode()


def test_rewrite_of_symbolic_ma_writes_the_canonical_descriptor() -> None:
    ma = b"\x00\xa3\x1camqp:message-annotations:map" + map_(sym("u"), NULL)
    data, _ = join(HEADER, ma, PROPS, DATA1, DATA2)
    out = rewrite(data, scan(data), ingress="r")
    _other_sections_intact(data, out)
    s = scan(out)
    assert out[s.ma_start : s.ma_start + 3] == b"\x00\x53\x72"
    assert out[s.body_start :] == DATA1 + DATA2
    assert annotations_of(out).ingress == "r"


def test_rewrite_of_sequence_bodies_and_footers() -> None:
    data, _ = join(HEADER, DA, PROPS, AP, SEQ1, SEQ2, FOOTER)
    out = rewrite(data, scan(data), trace=["0/A"])
    assert _other_sections_intact(data, out).ma_start == len(HEADER + DA)
    assert out.endswith(PROPS + AP + SEQ1 + SEQ2 + FOOTER)


SAMPLE = symbol("x-opt-routernet.ingress-ns")


def test_routernet_annotations_are_router_annotations_kept_between_routers() -> None:
    """x-opt-routernet.* is read and carried like x-opt-qd.*: the telemetry stamp survives a
    hop, and stripping for a client removes it with the rest."""
    msg = Message(body="b", address="a")
    msg.annotations = {symbol("user"): "u", SAMPLE: 1_700_000_000_123_456_789}
    data = msg.encode()
    s = scan(data)
    ann = read_annotations(data, s)
    assert ann.present and ann.sample == 1_700_000_000_123_456_789
    hop = ann.forwarded(data, s, "a", "0/B")
    decoded = Message()
    decoded.decode(hop)
    assert decoded.annotations[SAMPLE] == 1_700_000_000_123_456_789
    assert decoded.annotations[INGRESS] == "0/B"
    plain = Message()
    plain.decode(ann.stripped(data, s))
    assert plain.annotations == {symbol("user"): "u"}


def test_rewrite_stamps_a_sample() -> None:
    data = Message(body="b", address="a").encode()
    out = rewrite(data, scan(data), ingress="0/A", trace=["0/A"], to="a", sample=42)
    ann = read_annotations(out, scan(out))
    assert (ann.ingress, ann.sample) == ("0/A", 42)
    other = Message()
    other.annotations = {symbol("x-opt-routernet.other"): 1}
    data = other.encode()
    assert read_annotations(data, scan(data)).present  # unknown x-opt-routernet.* keys too


def test_scan_head_finds_what_routing_reads_in_a_prefix() -> None:
    from proton import Message

    from router.datapath.sections import get_to, read_annotations, scan, scan_head

    m = Message(
        body=b"x" * 100_000,
        address="big",
        annotations={"x-opt-qd.trace": ["0/A"], "k": 1},
        properties={"a": 1},
    )
    data = m.encode()
    whole = scan(data)
    assert scan_head(data[: whole.ma_end]) is None  # properties not there yet
    head = scan_head(data[:1000])
    assert head is not None
    assert (head.ma_start, head.ma_end, head.props_start, head.props_end) == (
        whole.ma_start,
        whole.ma_end,
        whole.props_start,
        whole.props_end,
    )
    assert get_to(data[:1000], head) == "big"
    assert read_annotations(data[:1000], head).trace == ["0/A"]
    with pytest.raises(MessageFormatError):
        scan_head(b"\x01" + data[1:1000])
