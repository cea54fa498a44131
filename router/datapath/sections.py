"""Scan and rewrite encoded AMQP 1.0 messages without decoding them.

The router only needs a message's address and its own annotations, and it forwards every other
byte untouched, so decoding whole messages (as proton.Message does) would spend most of the
per-message budget on work whose result is thrown away. Everything here works on offsets into
the encoded bytes and copies section bytes verbatim.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import lru_cache
from typing import Final

from router.datapath import scanfast

Buffer = bytes | bytearray | memoryview


class MessageFormatError(ValueError):
    """The bytes are not an AMQP 1.0 message this router can forward; the text gives the offset."""


# Encoded size of each AMQP 1.0 constructor's value: >= 0 is a fixed width, the negatives below
# say where the size lives. Codes the spec does not define are _BAD so garbage is caught early.
_V1: Final = -1  # variable/compound/array with a 1-byte size after the constructor
_V4: Final = -4  # ... with a 4-byte size
_DESCRIBED: Final = -2
_BAD: Final = -3


def _constructor_widths() -> tuple[int, ...]:
    widths = [_BAD] * 256
    widths[0x00] = _DESCRIBED
    for codes, width in (
        (range(0x40, 0x46), 0),
        (range(0x50, 0x57), 1),
        ((0x60, 0x61), 2),
        (range(0x70, 0x75), 4),
        (range(0x80, 0x85), 8),
        ((0x94, 0x98), 16),
        ((0xA0, 0xA1, 0xA3, 0xC0, 0xC1, 0xE0), _V1),
        ((0xB0, 0xB1, 0xB3, 0xD0, 0xD1, 0xF0), _V4),
    ):
        for code in codes:
            widths[code] = width
    return tuple(widths)


_WIDTH: Final = _constructor_widths()

_U32: Final = struct.Struct(">I").unpack_from
_U64: Final = struct.Struct(">Q").unpack_from
_PACK_U32_PAIR: Final = struct.Struct(">II").pack
_OUT_OF_BOUNDS: Final = (IndexError, struct.error)

# A section's rank is its position in the order the spec requires; codes 0x70..0x78 are ranks 0..8.
_RANK: Final = {0x70 + rank: rank for rank in range(9)}
# In a C static (Final), not looked up by name per message.
section_offsets: Final = scanfast.section_offsets
_MESSAGE_ANN, _PROPERTIES = 2, 3
_DATA, _SEQUENCE, _FOOTER = 5, 6, 8
_SYMBOLIC: Final = {
    b"amqp:header:list": 0x70,
    b"amqp:delivery-annotations:map": 0x71,
    b"amqp:message-annotations:map": 0x72,
    b"amqp:properties:list": 0x73,
    b"amqp:application-properties:map": 0x74,
    b"amqp:data:binary": 0x75,
    b"amqp:amqp-sequence:list": 0x76,
    b"amqp:amqp-value:*": 0x77,
    b"amqp:footer:map": 0x78,
}
# Constructors each section's value may use, so that a stray 0x00 in garbage is not taken for a
# section. A described null is tolerated where the readers below can treat it as empty.
_LIST: Final = frozenset((0x40, 0x45, 0xC0, 0xD0))
_MAP: Final = frozenset((0x40, 0xC1, 0xD1))
_ALLOWED: Final = (
    _LIST,  # header
    _MAP,  # delivery-annotations
    _MAP,  # message-annotations
    _LIST,  # properties
    _MAP,  # application-properties
    frozenset((0xA0, 0xB0)),  # data
    _LIST - {0x40},  # amqp-sequence
    None,  # amqp-value: any value
    _MAP,  # footer
)

# Router annotations: Dispatch's, and Routernet's own (telemetry), which Dispatch routers in the
# network pass on untouched like any annotation they do not know.
_ROUTER_PREFIX: Final = b"x-opt-qd."
_ROUTERNET_PREFIX: Final = b"x-opt-routernet."
_K_INGRESS: Final = b"\xa3\x10x-opt-qd.ingress"
_K_TRACE: Final = b"\xa3\x0ex-opt-qd.trace"
_K_TO: Final = b"\xa3\x0bx-opt-qd.to"
_K_PHASE: Final = b"\xa3\x0ex-opt-qd.phase"
_SAMPLE_NAME: Final = b"x-opt-routernet.ingress-ns"  # router.telemetry.schema.SAMPLE_ANNOTATION
_K_SAMPLE: Final = b"\xa3" + bytes((len(_SAMPLE_NAME),)) + _SAMPLE_NAME
_ORIGIN_NAME: Final = b"x-opt-routernet.origin"  # router.telemetry.schema.ORIGIN_ANNOTATION
_K_ORIGIN: Final = b"\xa3" + bytes((len(_ORIGIN_NAME),)) + _ORIGIN_NAME
_PACK_I64: Final = struct.Struct(">q").pack
_MA_MAP8: Final = b"\x00\x53\x72\xc1"
_MA_MAP32: Final = b"\x00\x53\x72\xd1"
_STR8: Final = tuple(bytes((0xA1, n)) for n in range(256))
# Integer constructors and whether they are signed; uint0/ulong0 carry no bytes and read as 0.
_INTS: Final = {
    0x43: False,
    0x44: False,
    0x50: False,
    0x51: True,
    0x52: False,
    0x53: False,
    0x54: True,
    0x55: True,
    0x60: False,
    0x61: True,
    0x70: False,
    0x71: True,
    0x80: False,
    0x81: True,
}


class Scan:
    """Section offsets of one message, so the readers and rewrite never search for them again."""

    __slots__ = ("body_start", "ma_end", "ma_start", "props_end", "props_start")

    def __init__(
        self, ma_start: int, ma_end: int, props_start: int, props_end: int, body_start: int
    ) -> None:
        self.ma_start = ma_start
        self.ma_end = ma_end
        self.props_start = props_start
        self.props_end = props_end
        self.body_start = body_start


class RouterAnnotations:
    """The x-opt-qd.* and x-opt-routernet.* message annotations; `present` says whether any
    such key is there. `sample` is the ingress router's clock (ns since the epoch) on a message
    sampled for transit latency, `origin` the edge router a message entered the network at
    (which the interior it came up to replaces as ingress): both for router/telemetry/.

    Values of the wrong AMQP type read as None (as Qpid Dispatch ignores them), yet still count
    as present so that they are stripped rather than forwarded.
    """

    __slots__ = (
        "_routers",
        "_sections",
        "ingress",
        "origin",
        "phase",
        "present",
        "sample",
        "split",
        "to",
        "trace",
    )

    def __init__(self) -> None:
        self.ingress: str | None = None
        self.trace: list[str] | None = None
        self.to: str | None = None
        self.phase: int | None = None
        self.sample: int | None = None
        self.origin: str | None = None
        self.present = False
        # The user entries as read (their byte runs, item count), so that rewriting the same
        # message does not split its annotations a second time.
        self.split: tuple[tuple[bytes, ...], int] | None = None
        self._routers: frozenset[str] | None = None
        self._sections: dict[tuple[str, str] | None, bytes] = {}

    @property
    def routers(self) -> frozenset[str]:
        """The ids of the routers in the trace, which routing must not send the message back to.

        Computed once: a stream's messages share one parse (see read_annotations).
        """
        routers = self._routers
        if routers is None:
            routers = self._routers = frozenset(t.split("/", 1)[-1] for t in self.trace or ())
        return routers

    def forwarded(self, buf: Buffer, s: Scan, to: str, me: str) -> bytes:
        """`buf` as it goes to the next router: ingress set if absent, hop `me` traced, `to` as
        the to-override. `buf` must be the message these annotations were read from, or one
        without message annotations if these are EMPTY_ANNOTATIONS.

        The new section depends on nothing but these annotations, `to` and `me`, so it is kept
        here: a stream's messages share one parse and pay for one encoding."""
        key = (to, me)
        section = self._sections.get(key)
        if section is None:
            section = self._encode(
                self.ingress or me,
                (*(self.trace or ()), me),
                to,
                self.phase,
                self.sample,
                self.origin,
            )
            self._keep(key, section)
        return _splice(buf, s, section)

    def stripped(self, buf: Buffer, s: Scan) -> bytes:
        """`buf` without router annotations, for a client; `buf` as for `forwarded`."""
        section = self._sections.get(None)
        if section is None:
            section = self._encode(None, None, None, None, None, None)
            self._keep(None, section)
        return _splice(buf, s, section)

    def _encode(
        self,
        ingress: str | None,
        trace: tuple[str, ...] | None,
        to: str | None,
        phase: int | None,
        sample: int | None,
        origin: str | None,
    ) -> bytes:
        runs, user = self.split or ((), 0)
        return _section(runs, user, ingress, trace, to, phase, sample, origin)

    def _keep(self, key: tuple[str, str] | None, section: bytes) -> None:
        # Bounded: one parse may serve messages to many addresses (EMPTY_ANNOTATIONS serves all).
        if len(self._sections) >= _SECTIONS_KEPT:
            self._sections.clear()
        self._sections[key] = section


_SECTIONS_KEPT: Final = 64


def entering_network(ann: RouterAnnotations) -> RouterAnnotations:
    """A message coming up from an edge enters the interior network here: this router is its
    ingress as far as the other interiors are concerned (multicast valid origins are interior
    routers), so the edge's ingress annotation is not carried on as such. Telemetry still
    counts the message as entering at the edge: the edge travels on as `origin`."""
    entered = RouterAnnotations()
    entered.trace, entered.to, entered.phase = ann.trace, ann.to, ann.phase
    entered.sample = ann.sample
    entered.origin = ann.origin or ann.ingress
    entered.present = ann.present
    return entered


# Returned for every message without router annotations, so the common case allocates nothing.
# Callers must treat it as read-only (its kept sections are a cache).
EMPTY_ANNOTATIONS: Final = RouterAnnotations()


def _skip(buf: Buffer, i: int, end: int) -> int:
    """Return the offset just past the value at `i`, which must not extend beyond `end`.

    Compound values are skipped by their size field rather than walked, which is what keeps body
    sections cheap. Described values are handled by counting pending values instead of recursing,
    so a run of 0x00 bytes cannot exhaust the stack.
    """
    start = i
    pending = 1
    try:
        while True:
            width = _WIDTH[buf[i]]
            if width >= 0:
                i += 1 + width
            elif width == _V1:
                i += 2 + buf[i + 1]
            elif width == _V4:
                i += 5 + _U32(buf, i + 1)[0]
            elif width == _DESCRIBED:
                i += 1
                pending += 1
                continue
            else:
                raise MessageFormatError(f"unknown constructor 0x{buf[i]:02x} at offset {i}")
            pending -= 1
            if not pending:
                break
    except _OUT_OF_BOUNDS:
        raise MessageFormatError(f"value at offset {start} runs past the end") from None
    if i > end:
        raise MessageFormatError(f"value at offset {start} runs past its container's end {end}")
    return i


def _descriptor(buf: Buffer, p: int) -> tuple[int, int]:
    """Decode the section descriptor at `p` into (section code, offset of the described value).

    Only the smallulong form is common, so callers test for it inline and leave the legal but
    unusual long and symbolic forms to this function.
    """
    d = buf[p]
    if d == 0x80:
        return _U64(buf, p + 1)[0], p + 9
    if d == 0x44:
        return 0, p + 1
    if d == 0xA3:
        a = p + 2
        a_end = a + buf[p + 1]
    elif d == 0xB3:
        a = p + 5
        a_end = a + _U32(buf, p + 1)[0]
    else:
        raise MessageFormatError(f"section descriptor at offset {p} has constructor 0x{d:02x}")
    if a_end > len(buf):
        raise MessageFormatError(f"section descriptor at offset {p} runs past the end")
    return _SYMBOLIC.get(bytes(buf[a:a_end]), -1), a_end


def scan(buf: Buffer) -> Scan:
    """Find the section boundaries, rejecting anything that is not a well-formed section sequence.

    Everything else in this module trusts these offsets, so this is where garbage, truncation
    and out-of-order sections are caught. Messages as clients send them are walked in C
    (router/datapath/scanfast.c); anything else, and every error, by `walk_sections`.
    """
    found = section_offsets(buf)
    if found is not None:
        ma_start, ma_end, props_start, props_end, body_start = found
        return Scan(ma_start, ma_end, props_start, props_end, body_start)
    return walk_sections(buf)


def walk_sections(buf: Buffer) -> Scan:
    """`scan` in Python: every descriptor form, and the words of every error."""
    n = len(buf)
    if not n:
        raise MessageFormatError("empty message: no sections at offset 0")
    i = 0
    last = -1
    ma_start = ma_end = props_start = props_end = body_start = -1
    try:
        while i < n:
            if buf[i]:
                raise MessageFormatError(
                    f"expected a section at offset {i}, found constructor 0x{buf[i]:02x}"
                )
            if buf[i + 1] == 0x53:
                code = buf[i + 2]
                j = i + 3
            else:
                code, j = _descriptor(buf, i + 1)
            rank = _RANK.get(code)
            if rank is None:
                raise MessageFormatError(f"unknown section descriptor {code:#x} at offset {i}")
            if rank <= last:
                if rank != last or rank > _SEQUENCE or rank < _DATA:
                    raise MessageFormatError(f"section {code:#x} at offset {i} is out of order")
            elif last >= _DATA and rank != _FOOTER:
                raise MessageFormatError(f"body section {code:#x} at offset {i} mixes body kinds")
            allowed = _ALLOWED[rank]
            if allowed is not None and buf[j] not in allowed:
                raise MessageFormatError(
                    f"section {code:#x} at offset {i} has a value of constructor 0x{buf[j]:02x}"
                )
            width = _WIDTH[buf[j]]
            if width >= 0:
                end = j + 1 + width
            elif width == _V1:
                end = j + 2 + buf[j + 1]
            else:
                end = _skip(buf, j, n)
            if end > n:
                raise MessageFormatError(f"section at offset {i} runs past the end ({n} bytes)")
            if ma_start < 0 and rank >= _MESSAGE_ANN:
                ma_start = i
                ma_end = end if rank == _MESSAGE_ANN else i
            if rank == _PROPERTIES:
                props_start = i
                props_end = end
            elif body_start < 0 and rank >= _DATA:
                body_start = i
            last = rank
            i = end
    except _OUT_OF_BOUNDS:
        raise MessageFormatError(f"section at offset {i} is truncated") from None
    if ma_start < 0:
        ma_start = ma_end = n
    if body_start < 0:
        body_start = n
    return Scan(ma_start, ma_end, props_start, props_end, body_start)


_APP_PROPERTIES: Final = 4


def scan_head(buf: Buffer) -> Scan | None:
    """Scan the first bytes of a message that is still arriving: its Scan once `buf` holds every
    section routing reads (header, delivery and message annotations, properties) and the start
    of the next one, None while more bytes are needed.

    The sections read are checked as `scan` checks them; what follows (application properties,
    the body, the footer) is not looked at: it is forwarded as it arrives. `body_start` is where
    the first of those sections starts, and the Scan's offsets are valid for any longer prefix
    of the same message, so `rewrite` and the readers above work on `buf` as on the whole.
    """
    n = len(buf)
    i = 0
    last = -1
    ma_start = ma_end = props_start = props_end = -1
    try:
        while True:
            if i + 3 > n:
                return None
            if buf[i]:
                raise MessageFormatError(
                    f"expected a section at offset {i}, found constructor 0x{buf[i]:02x}"
                )
            if buf[i + 1] == 0x53:
                code = buf[i + 2]
                j = i + 3
            else:
                code, j = _descriptor(buf, i + 1)
            rank = _RANK.get(code)
            if rank is None:
                raise MessageFormatError(f"unknown section descriptor {code:#x} at offset {i}")
            if rank <= last:
                raise MessageFormatError(f"section {code:#x} at offset {i} is out of order")
            if rank >= _APP_PROPERTIES:
                if ma_start < 0:
                    ma_start = ma_end = i
                return Scan(ma_start, ma_end, props_start, props_end, i)
            if buf[j] not in _ALLOWED[rank]:  # type: ignore[operator]
                raise MessageFormatError(
                    f"section {code:#x} at offset {i} has a value of constructor 0x{buf[j]:02x}"
                )
            # Lists and maps only (and null): sized by their size field.
            width = _WIDTH[buf[j]]
            if width >= 0:
                end = j + 1 + width
            elif width == _V1:
                end = j + 2 + buf[j + 1]
            else:
                end = j + 5 + _U32(buf, j + 1)[0]
            if end > n:
                return None
            if ma_start < 0 and rank >= _MESSAGE_ANN:
                ma_start = i
                ma_end = end if rank == _MESSAGE_ANN else i
            if rank == _PROPERTIES:
                props_start = i
                props_end = end
            last = rank
            i = end
    except _OUT_OF_BOUNDS:
        return None


def _decode_str(ma: bytes, i: int, end: int, what: str) -> str | None:
    """Decode a str/sym value at `i` (ending by `end`) in an MA copy, None for any other type."""
    c = ma[i]
    if c == 0xA1 or c == 0xA3:
        a = i + 2
    elif c == 0xB1 or c == 0xB3:
        a = i + 5
    else:
        return None
    try:
        return ma[a:end].decode()
    except UnicodeDecodeError as e:
        raise MessageFormatError(f"{what} at offset {i} is not valid UTF-8: {e.reason}") from None


def get_to(buf: Buffer, s: Scan) -> str | None:
    """Return properties.to, the address the router routes on unless an annotation overrides it.

    message-id and user-id are sized inline because _skip's call costs more than the sizing.
    """
    p = s.props_start
    if p < 0:
        return None
    end = s.props_end
    try:
        i = p + 3 if buf[p + 1] == 0x53 else _descriptor(buf, p + 1)[1]
        c = buf[i]
        if c == 0xC0:
            count = buf[i + 2]
            k = i + 3
        elif c == 0xD0:
            count = _U32(buf, i + 5)[0]
            k = i + 9
        else:  # list0 or null: scan admits nothing else here
            return None
        if count < 3:
            return None
        for _ in (0, 1):
            width = _WIDTH[buf[k]]
            if width >= 0:
                k += 1 + width
            elif width == _V1:
                k += 2 + buf[k + 1]
            else:
                k = _skip(buf, k, end)
        if k >= end:
            raise MessageFormatError(f"properties at offset {p} hold fewer fields than they count")
        c = buf[k]
        if c == 0xA1 or c == 0xA3:
            a = k + 2
            a_end = a + buf[k + 1]
        elif c == 0xB1 or c == 0xB3:
            a = k + 5
            a_end = a + _U32(buf, k + 1)[0]
        elif c == 0x40:
            return None
        else:
            raise MessageFormatError(f"properties.to at offset {k} has constructor 0x{c:02x}")
    except _OUT_OF_BOUNDS:
        raise MessageFormatError(f"properties at offset {p} are truncated") from None
    if a_end > end:
        raise MessageFormatError(f"properties.to at offset {k} runs past the properties' end")
    try:
        return bytes(buf[a:a_end]).decode()
    except UnicodeDecodeError as e:
        raise MessageFormatError(
            f"properties.to at offset {k} is not valid UTF-8: {e.reason}"
        ) from None


def get_user_id(buf: Buffer, s: Scan) -> str | None:
    """Return properties.user-id as text (None when absent), for a vhost policy that checks it
    against the connection's user: only policed links ask (router/policy/gate.py)."""
    p = s.props_start
    if p < 0:
        return None
    end = s.props_end
    try:
        i = p + 3 if buf[p + 1] == 0x53 else _descriptor(buf, p + 1)[1]
        c = buf[i]
        if c == 0xC0:
            count = buf[i + 2]
            k = i + 3
        elif c == 0xD0:
            count = _U32(buf, i + 5)[0]
            k = i + 9
        else:
            return None
        if count < 2:
            return None
        k = _skip(buf, k, end)  # message-id
        if k >= end:
            raise MessageFormatError(f"properties at offset {p} hold fewer fields than they count")
        c = buf[k]
        if c == 0xA0:
            a = k + 2
            a_end = a + buf[k + 1]
        elif c == 0xB0:
            a = k + 5
            a_end = a + _U32(buf, k + 1)[0]
        elif c == 0x40:
            return None
        else:
            raise MessageFormatError(f"properties.user-id at offset {k} has constructor 0x{c:02x}")
    except _OUT_OF_BOUNDS:
        raise MessageFormatError(f"properties at offset {p} are truncated") from None
    if a_end > end:
        raise MessageFormatError(f"properties.user-id at offset {k} runs past the properties' end")
    return bytes(buf[a:a_end]).decode(errors="replace")


def _split_annotations(ma: bytes) -> tuple[list[bytes], int, list[int]]:
    """Split the MA section `ma` into user entries, kept encoded, and router entries, kept as
    offsets.

    Returns (runs, user_count, router): `runs` are the byte runs of consecutive user entries,
    `user_count` their key and value count, and `router` holds (name offset, value offset,
    value end) triples into `ma` for each x-opt-qd.* or x-opt-routernet.* key (the offset of
    the whole key name). Only symbol keys can be router keys,
    because Qpid Dispatch matches symbols only. Keys are nearly always sym8 and values small
    scalars, so both are sized inline rather than through _skip.
    """
    end = len(ma)  # scan ended the section where the map's size field says the map ends
    runs: list[bytes] = []
    router: list[int] = []
    user = 0
    try:
        j = 3 if ma[1] == 0x53 else _descriptor(ma, 1)[1]
        c = ma[j]
        if c == 0xC1:
            count = ma[j + 2]
            k = j + 3
        elif c == 0xD1:
            count = _U32(ma, j + 5)[0]
            k = j + 9
        else:  # a described null, the only other value scan lets through
            return runs, user, router
        if count & 1:
            raise MessageFormatError(f"map has an odd item count {count}")
        run = k
        for _ in range(count >> 1):
            c = ma[k]
            if c == 0xA3:
                a = k + 2
                k_end = a + ma[k + 1]
            else:
                a = k + 5
                k_end = _skip(ma, k, end)
            width = _WIDTH[ma[k_end]]
            if width >= 0:
                v_end = k_end + 1 + width
            elif width == _V1:
                v_end = k_end + 2 + ma[k_end + 1]
            else:
                v_end = _skip(ma, k_end, end)
            if v_end > end:
                raise MessageFormatError(f"entry at {k} runs past the map's end {end}")
            if (c == 0xA3 or c == 0xB3) and (
                ma.startswith(_ROUTER_PREFIX, a, k_end)
                or ma.startswith(_ROUTERNET_PREFIX, a, k_end)
            ):
                if k > run:
                    runs.append(ma[run:k])
                run = v_end
                router += (a, k_end, v_end)
            else:
                user += 2
            k = v_end
        if k != end:
            raise MessageFormatError(f"entries end at {k}, not at the map's end {end}")
        if end > run:
            runs.append(ma[run:end])
    except _OUT_OF_BOUNDS:
        raise MessageFormatError("truncated") from None
    return runs, user, router


def _trace(ma: bytes, v: int, v_end: int) -> list[str] | None:
    """Decode a trace list; non-string items are dropped so the rest still prevents loops.

    Hops written by routers are str8, so those are sized and decoded inline.
    """
    c = ma[v]
    if c == 0x45:
        return []
    if c == 0xC0:
        count = ma[v + 2]
        k = v + 3
    elif c == 0xD0:
        count = _U32(ma, v + 5)[0]
        k = v + 9
    else:
        return None
    hops = []
    try:
        for _ in range(count):
            if ma[k] == 0xA1:
                k_end = k + 2 + ma[k + 1]
                hops.append(ma[k + 2 : k_end].decode())
            else:
                k_end = _skip(ma, k, v_end)
                hop = _decode_str(ma, k, k_end, "trace entry")
                if hop is not None:
                    hops.append(hop)
            k = k_end
    except UnicodeDecodeError as e:
        raise MessageFormatError(
            f"trace entry at offset {k} is not valid UTF-8: {e.reason}"
        ) from None
    if k != v_end:
        raise MessageFormatError(f"trace list at offset {v} does not match its size")
    return hops


def _parse(ma: bytes) -> RouterAnnotations:
    """Parse a message-annotations section; `present` is False when it has no router keys."""
    runs, user, router = _split_annotations(ma)
    found = RouterAnnotations()
    found.present = bool(router)
    found.split = (tuple(runs), user)
    fields = iter(router)
    try:
        for a, v, v_end in zip(fields, fields, fields, strict=True):
            name = ma[a:v]
            if name == b"x-opt-qd.ingress":
                found.ingress = _decode_str(ma, v, v_end, "x-opt-qd.ingress")
            elif name == b"x-opt-qd.trace":
                found.trace = _trace(ma, v, v_end)
            elif name == b"x-opt-qd.to":
                found.to = _decode_str(ma, v, v_end, "x-opt-qd.to")
            elif name == b"x-opt-qd.phase":
                signed = _INTS.get(ma[v])
                if signed is not None:
                    found.phase = int.from_bytes(ma[v + 1 : v_end], signed=signed)
            elif name == _SAMPLE_NAME:
                signed = _INTS.get(ma[v])
                if signed is not None:
                    found.sample = int.from_bytes(ma[v + 1 : v_end], signed=signed)
            elif name == _ORIGIN_NAME:
                found.origin = _decode_str(ma, v, v_end, "x-opt-routernet.origin")
    except _OUT_OF_BOUNDS:
        raise MessageFormatError("truncated") from None
    return found


# A stream's messages nearly always carry the same annotation bytes (the same ingress, trace and
# to-override for every message one router forwards to the next), so one parse serves them all.
# Sections longer than this are parsed afresh rather than kept.
_CACHED_SECTION: Final = 1024
_parse_cached: Final = lru_cache(maxsize=512)(_parse)


def _annotations(buf: Buffer, s: Scan) -> RouterAnnotations:
    ma = bytes(buf[s.ma_start : s.ma_end])
    try:
        return _parse_cached(ma) if len(ma) <= _CACHED_SECTION else _parse(ma)
    except MessageFormatError as e:
        raise MessageFormatError(
            f"in message-annotations at offset {s.ma_start} (offsets below relative to it): {e}"
        ) from None


def read_annotations(buf: Buffer, s: Scan) -> RouterAnnotations:
    """Read the router's annotations, leaving user annotation values undecoded.

    The result may be shared with other messages whose annotations are the same bytes, so
    callers must not change it.
    """
    if s.ma_start == s.ma_end:
        return EMPTY_ANNOTATIONS
    found = _annotations(buf, s)
    return found if found.present else EMPTY_ANNOTATIONS


def _encode_str(value: str) -> bytes:
    data = value.encode()
    n = len(data)
    return _STR8[n] + data if n < 256 else b"\xb1" + n.to_bytes(4) + data


def _router_entries(
    ingress: str | None,
    trace: tuple[str, ...] | None,
    to: str | None,
    phase: int | None,
    sample: int | None,
    origin: str | None,
) -> list[bytes]:
    """Encode the router annotations to write, each in its smallest encoding."""
    out: list[bytes] = []
    if ingress is not None:
        out += (_K_INGRESS, _encode_str(ingress))
    if trace is not None:
        hops = b"".join([_encode_str(hop) for hop in trace])
        if not trace:
            encoded = b"\x45"
        elif len(hops) < 255 and len(trace) < 256:
            encoded = bytes((0xC0, len(hops) + 1, len(trace))) + hops
        else:
            encoded = b"\xd0" + _PACK_U32_PAIR(len(hops) + 4, len(trace)) + hops
        out += (_K_TRACE, encoded)
    if to is not None:
        out += (_K_TO, _encode_str(to))
    if phase:
        if -128 <= phase < 128:
            encoded = bytes((0x54, phase & 0xFF))
        else:
            encoded = b"\x71" + phase.to_bytes(4, signed=True)
        out += (_K_PHASE, encoded)
    if sample is not None:
        out += (_K_SAMPLE, b"\x81" + _PACK_I64(sample))
    if origin is not None:
        out += (_K_ORIGIN, _encode_str(origin))
    return out


@lru_cache(maxsize=512)
def _section(
    runs: tuple[bytes, ...],
    user: int,
    ingress: str | None,
    trace: tuple[str, ...] | None,
    to: str | None,
    phase: int | None,
    sample: int | None = None,
    origin: str | None = None,
) -> bytes:
    """Encode a message-annotations section: the user entries as they were, then the router's.

    Kept, like the parse, because one stream's messages get the same section over and over.
    A section with no entries is empty bytes rather than an empty map.
    """
    pieces = [*runs, *_router_entries(ingress, trace, to, phase, sample, origin)]
    count = user + len(pieces) - len(runs)
    if not count:
        return b""
    size = sum(map(len, pieces))
    if size < 255 and count < 256:
        head = _MA_MAP8 + bytes((size + 1, count))
    else:
        head = _MA_MAP32 + _PACK_U32_PAIR(size + 4, count)
    return b"".join((head, *pieces))


def rewrite(
    buf: Buffer,
    s: Scan,
    *,
    ingress: str | None = None,
    trace: Sequence[str] | None = None,
    to: str | None = None,
    phase: int | None = None,
    sample: int | None = None,
    origin: str | None = None,
    read: RouterAnnotations | None = None,
) -> bytes:
    """Return the message with its router annotations replaced by the given ones.

    `read`, if given, is what read_annotations returned for these very bytes: its split of the
    annotations is reused instead of done again.

    The new map holds the user annotations, then the given router annotations that are not None
    (phase only if non-zero; sample and origin are telemetry's). User annotations are copied as
    encoded, so values this module cannot decode survive intact, and every other section is
    copied byte for byte. A map left
    empty is dropped rather than encoded, because an empty section only costs bytes on the wire.
    """
    start = s.ma_start
    ma_end = s.ma_end
    writes = (
        ingress is not None
        or trace is not None
        or to is not None
        or bool(phase)
        or sample is not None
        or origin is not None
    )
    if start != ma_end:
        parsed = read if read is not None and read.split is not None else _annotations(buf, s)
        runs, user = parsed.split  # type: ignore[misc]
        if not parsed.present and not writes and user:
            return bytes(buf)
    elif not writes:
        return bytes(buf)
    else:
        runs, user = (), 0
    section = _section(
        runs, user, ingress, None if trace is None else tuple(trace), to, phase, sample, origin
    )
    return _splice(buf, s, section)


def _splice(buf: Buffer, s: Scan, section: bytes) -> bytes:
    """`buf` with its message-annotations section (or where one would go) replaced."""
    # Large messages are sliced through a memoryview so their bytes are copied once, by join.
    view = memoryview(buf) if len(buf) > 4096 else buf
    return b"".join((view[: s.ma_start], section, view[s.ma_end :]))
