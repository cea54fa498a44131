"""What a hosted node reads from, and writes into, the messages it keeps.

A node reads the header (durable, priority, ttl) and the properties' absolute-expiry-time of
every message it takes, so that read decodes those two sections and nothing else (bodies may
be large). Rewriting a message (the delivery count of a redelivery, the annotations of a dead
letter) is rare and goes through Proton's Message.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from proton import Data, Described, Message, symbol, ulong

from router.nodes.queue import priority_of

_HEADER = 0x70
_DELIVERY_ANNOTATIONS = 0x71
_MESSAGE_ANNOTATIONS = 0x72
_PROPERTIES = 0x73
_ABSOLUTE_EXPIRY = 8  # the properties list's absolute-expiry-time field
# The sections a node reads, by their small-ulong descriptor codes as encoded.
_READ = {
    bytes((code,)) for code in (_HEADER, _DELIVERY_ANNOTATIONS, _MESSAGE_ANNOTATIONS, _PROPERTIES)
}


# The sections before the delivery annotations, and they.
_BEFORE_ANNOTATIONS = {bytes((code,)) for code in (_HEADER, _DELIVERY_ANNOTATIONS)}


class Stamp:
    """What a node needs to know of a message to keep it."""

    __slots__ = ("durable", "expiry", "priority")

    def __init__(self, durable: bool, priority: int, expiry: float | None) -> None:
        self.durable = durable
        self.priority = priority
        self.expiry = expiry


def stamp(data: bytes, now: float) -> Stamp:
    """Header and expiry of an encoded message; ValueError (one line) if they do not decode.
    `now` is wall-clock seconds: ttl counts from when the node took the message."""
    durable, priority, expiry = False, priority_of(None), None
    for _, _, code, value in _sections(data, _READ):
        if code == _HEADER:
            fields = _fields(value)
            durable = bool(_at(fields, 0))
            if (p := _at(fields, 1)) is not None:
                priority = priority_of(int(p))
            if (ttl := _at(fields, 2)) is not None:
                expiry = now + int(ttl) / 1000.0
        elif code == _PROPERTIES:
            absolute = _at(_fields(value), _ABSOLUTE_EXPIRY)
            if absolute is not None:
                at = int(absolute) / 1000.0
                expiry = at if expiry is None else min(expiry, at)
            break
        elif code not in (_DELIVERY_ANNOTATIONS, _MESSAGE_ANNOTATIONS):
            break  # application properties or the body: past what a node reads
    return Stamp(durable, priority, expiry)


def _sections(data: bytes, read: set[bytes]) -> Iterator[tuple[int, int, int | None, Any]]:
    """Offset, end, descriptor code and value of each section from the start of the message,
    as far as the sections in `read`: the one after them (application properties, the body,
    which may be large) is not decoded. ValueError (one line) if a section does not decode."""
    offset = 0
    view = memoryview(data)
    while offset < len(data):
        if data[offset : offset + 2] == b"\x00\x53" and data[offset + 2 : offset + 3] not in read:
            return
        section = Data()
        try:
            used = section.decode(view[offset:].tobytes() if offset else data)
        except Exception as err:
            raise ValueError(f"the message does not decode: {err}"[:200]) from None
        value = section.get_object()
        yield offset, offset + used, _code(value), value
        offset += used


def _code(value: Any) -> int | None:
    descriptor = getattr(value, "descriptor", None)
    if isinstance(descriptor, int):
        return descriptor
    return None


def _fields(value: Any) -> list[Any]:
    fields = getattr(value, "value", None)
    return list(fields) if isinstance(fields, list | tuple) else []


def _at(fields: list[Any], index: int) -> Any:
    return fields[index] if index < len(fields) else None


def redelivered(data: bytes, count: int) -> bytes:
    """The message as sent again: its header's delivery-count says how often it failed."""
    msg = Message()
    msg.decode(data)
    msg.delivery_count = count
    msg.first_acquirer = False
    return bytes(msg.encode())


def dead_lettered(
    data: bytes, reason: str, node: str, condition: tuple[str, str | None] | None
) -> bytes:
    """The message as it goes to a dead letter address: annotations say why and from where,
    named as RabbitMQ names them (`x-first-death-*` kept from the first time, `x-last-death-*`
    this time), and a rejection's error condition as the consumer gave it. Its `ttl` and
    `absolute-expiry-time` go, as RabbitMQ drops its expiration: a dead letter is kept to be
    looked at, not to expire again."""
    msg = Message()
    msg.decode(data)
    msg.ttl = 0
    msg.expiry_time = 0
    annotations: dict[Any, Any] = dict(msg.annotations or {})
    if symbol("x-first-death-reason") not in annotations:
        annotations[symbol("x-first-death-reason")] = reason
        annotations[symbol("x-first-death-queue")] = node
    annotations[symbol("x-last-death-reason")] = reason
    annotations[symbol("x-last-death-queue")] = node
    if condition is not None:
        annotations[symbol("x-opt-routernet-reject-condition")] = symbol(condition[0])
        if condition[1]:
            annotations[symbol("x-opt-routernet-reject-description")] = condition[1]
    msg.annotations = annotations
    msg.delivery_count = 0
    return bytes(msg.encode())


def with_delivery_annotation(data: bytes, key: str, value: Any) -> bytes:
    """The message with `key` in its delivery annotations (the section for one hop's
    information), the rest of it as it was: the body is not decoded."""
    start, end, annotations = _delivery_annotations(data)
    annotations[symbol(key)] = value
    return data[:start] + _encoded(annotations) + data[end:]


def without_delivery_annotation(data: bytes, key: str) -> tuple[Any, bytes]:
    """`key`'s value in the delivery annotations (None if absent) and the message without it;
    ValueError (one line) if the sections before the body do not decode."""
    start, end, annotations = _delivery_annotations(data)
    value = annotations.pop(symbol(key), None)
    if value is None:
        return None, data
    return value, data[:start] + (_encoded(annotations) if annotations else b"") + data[end:]


def _delivery_annotations(data: bytes) -> tuple[int, int, dict[Any, Any]]:
    """Where the delivery annotations are (or go: after the header) and what they hold."""
    where = 0
    for start, end, code, value in _sections(data, _BEFORE_ANNOTATIONS):
        if code == _DELIVERY_ANNOTATIONS:
            found = getattr(value, "value", None)
            return start, end, dict(found) if isinstance(found, dict) else {}
        if code != _HEADER:
            return start, start, {}
        where = end
    return where, where, {}


def _encoded(annotations: dict[Any, Any]) -> bytes:
    section = Data()
    section.put_object(Described(ulong(_DELIVERY_ANNOTATIONS), annotations))
    return bytes(section.encode())
