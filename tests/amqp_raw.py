"""AMQP 1.0 encodings written byte by byte, for requests python-qpid-proton cannot build.

Proton's encoder refuses a section of more than 65,535 values and only writes the four
message-id types as ids, while a peer may send anything: a list of a million items, a symbol
correlation-id, a described or array value anywhere. These helpers write such messages so tests
can send them to the management agent (tests/test_management_fuzz.py) or to a router process
(tests/test_management_router.py). Each returns the encoded bytes of one value or section.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from typing import Any

NULL = b"\x40"


def boolean(value: bool) -> bytes:
    return b"\x41" if value else b"\x42"


def ubyte(value: int) -> bytes:
    return b"\x50" + struct.pack(">B", value)


def ushort(value: int) -> bytes:
    return b"\x60" + struct.pack(">H", value)


def uint(value: int) -> bytes:
    if value == 0:
        return b"\x43"
    if value < 256:
        return b"\x52" + struct.pack(">B", value)
    return b"\x70" + struct.pack(">I", value)


def ulong(value: int) -> bytes:
    if value == 0:
        return b"\x44"
    if value < 256:
        return b"\x53" + struct.pack(">B", value)
    return b"\x80" + struct.pack(">Q", value)


def byte(value: int) -> bytes:
    return b"\x51" + struct.pack(">b", value)


def short(value: int) -> bytes:
    return b"\x61" + struct.pack(">h", value)


def int32(value: int) -> bytes:
    if -128 <= value < 128:
        return b"\x54" + struct.pack(">b", value)
    return b"\x71" + struct.pack(">i", value)


def long(value: int) -> bytes:
    if -128 <= value < 128:
        return b"\x55" + struct.pack(">b", value)
    return b"\x81" + struct.pack(">q", value)


def float32(value: float) -> bytes:
    return b"\x72" + struct.pack(">f", value)


def double(value: float) -> bytes:
    return b"\x82" + struct.pack(">d", value)


def decimal(raw: bytes) -> bytes:
    """decimal32, decimal64 or decimal128, by the length of `raw` (4, 8 or 16 bytes)."""
    return {4: b"\x74", 8: b"\x84", 16: b"\x94"}[len(raw)] + raw


def char(value: str) -> bytes:
    return b"\x73" + struct.pack(">I", ord(value))


def timestamp(millis: int) -> bytes:
    return b"\x83" + struct.pack(">q", millis)


def uuid_(value: uuid.UUID) -> bytes:
    return b"\x98" + value.bytes


def _variable(short_code: int, long_code: int, raw: bytes, wide: bool = False) -> bytes:
    if len(raw) < 256 and not wide:
        return bytes([short_code, len(raw)]) + raw
    return bytes([long_code]) + struct.pack(">I", len(raw)) + raw


def binary(raw: bytes, wide: bool = False) -> bytes:
    return _variable(0xA0, 0xB0, raw, wide)


def string(text: str | bytes, wide: bool = False) -> bytes:
    """A str8/str32; bytes are written as they are (invalid UTF-8 included)."""
    raw = text.encode() if isinstance(text, str) else text
    return _variable(0xA1, 0xB1, raw, wide)


def symbol(text: str | bytes, wide: bool = False) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return _variable(0xA3, 0xB3, raw, wide)


def _compound(short_code: int, long_code: int, count: int, body: bytes, wide: bool) -> bytes:
    if len(body) + 1 < 256 and count < 256 and not wide:
        return bytes([short_code, len(body) + 1, count]) + body
    return bytes([long_code]) + struct.pack(">II", len(body) + 4, count) + body


def list_(items: Sequence[bytes], wide: bool = False) -> bytes:
    if not items and not wide:
        return b"\x45"
    return _compound(0xC0, 0xD0, len(items), b"".join(items), wide)


def repeated_list(item: bytes, count: int) -> bytes:
    """A list32 of `count` copies of one encoded value, built without a Python list of them."""
    return _compound(0xC0, 0xD0, count, item * count, wide=True)


def map_(pairs: Sequence[tuple[bytes, bytes]], wide: bool = False) -> bytes:
    body = b"".join(k + v for k, v in pairs)
    return _compound(0xC1, 0xD1, 2 * len(pairs), body, wide)


def array(constructor: bytes, elements: Sequence[bytes], wide: bool = False) -> bytes:
    """An array: `constructor` is the element type's code (with its descriptor, if described),
    each element its encoding without the code."""
    body = constructor + b"".join(elements)
    if len(body) + 1 < 256 and len(elements) < 256 and not wide:
        return bytes([0xE0, len(body) + 1, len(elements)]) + body
    return b"\xf0" + struct.pack(">II", len(body) + 4, len(elements)) + body


def described(descriptor: bytes, value: bytes) -> bytes:
    return b"\x00" + descriptor + value


# ----- message sections ---------------------------------------------------------------------


def properties(
    message_id: bytes = NULL, reply_to: str | bytes | None = None, correlation_id: bytes = NULL
) -> bytes:
    """The properties section: message-id, user-id, to, subject, reply-to (bytes are written
    as they are), correlation-id."""
    fields = [message_id, NULL, NULL, NULL, NULL if reply_to is None else string(reply_to)]
    fields.append(correlation_id)
    return described(ulong(0x73), list_(fields))


def application_properties(pairs: Sequence[tuple[bytes, bytes]]) -> bytes:
    return described(ulong(0x74), map_(pairs))


def amqp_value(value: bytes) -> bytes:
    return described(ulong(0x77), value)


def amqp_sequence(items: Sequence[bytes]) -> bytes:
    return described(ulong(0x76), list_(items))


def data(raw: bytes) -> bytes:
    return described(ulong(0x75), binary(raw))


def string_map(entries: dict[str, Any]) -> list[tuple[bytes, bytes]]:
    """Pairs for a map with string keys; str values become strings, bytes are taken as encoded."""
    return [(string(k), string(v) if isinstance(v, str) else v) for k, v in entries.items()]


def request(
    operation: str,
    reply_to: str,
    correlation_id: bytes,
    body: bytes | None = None,
    **extra: str | bytes,
) -> bytes:
    """A whole management request: properties, application-properties and an amqp-value body
    (`body` is the encoded value; none means an empty map)."""
    return (
        properties(reply_to=reply_to, correlation_id=correlation_id)
        + application_properties(string_map({"operation": operation, **extra}))
        + amqp_value(map_([]) if body is None else body)
    )
