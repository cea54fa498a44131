"""The store's on-disk format, defined once: what a reader in any language needs.

A store is a directory:

* `lock`: holds an exclusive `flock` while a router has the store open (and its pid, as text).
* `nodes.json`: the hosted nodes, `{"<node name>": {<properties>}}`, replaced atomically.
* `NNNNNNNN.log`: the segments of one append-only log, `NNNNNNNN` the segment's sequence number
  in decimal, zero-padded to 8 digits, starting at 00000001. Read them in ascending order: the
  log is their concatenation, and a later record overrides an earlier one.

All integers are big-endian (network order, as in AMQP); floats are IEEE 754 binary64.

A segment starts with a 16-byte header:

    offset 0   8 bytes  magic and version, the ASCII bytes `RNSTORE1`
    offset 8   u64      the message id the writer would have given next when it created the
                        segment: ids only grow, so this keeps them growing after every older
                        segment is deleted (a reader may ignore it)

then records, back to back, to the end of the file. A record is

    u32  length of payload (the bytes after the type byte)
    u32  CRC-32 (ISO-HDLC, as zlib.crc32) of the type byte followed by the payload
    u8   type
    ...  payload

A record cut short by the end of the file, or whose CRC does not match, is a torn write: the
segment ends just before it, and the writer truncates it there when it next opens the store.
A record with a matching CRC but a type not listed below comes from a newer writer: a reader
must refuse the store rather than skip or truncate it.

Types and payloads:

* 1 ENQUEUE, a message taken into a node:
      u64  message id (unique within the store; a later ENQUEUE of the same id moves the
           message: it replaces the earlier one, which compaction left behind)
      u16  length n of the node name, then n bytes of UTF-8
      u8   priority
      f64  expiry, seconds since the Unix epoch; 0.0 for none
      u8   durable: 1, or 0 (the writer did not wait for it to reach disk)
      u32  delivery count
      ...  the rest of the payload: the AMQP message exactly as received (its sections)
* 2 SETTLE, the message left its node (consumed, expired, moved elsewhere):
      u64  message id
* 3 COUNT, a delivery of the message failed (released or modified with delivery-failed):
      u64  message id
      u32  its delivery count from now on
* 4 BATCH, records that take effect together or not at all (a transaction's commit):
      ...  the payload is records of types 1 to 3, back to back, each as above (length, CRC,
           type, payload); their offsets within the segment are where they are in the file.
      A torn or corrupt BATCH is a torn write like any other record: none of its records
      happened. A BATCH whose inner records do not fill it exactly is a corrupt store.
* 5 PAGE, a message taken into a node that is paging (its queue is deep: the writer keeps no
  index entry for it in memory): the payload is as ENQUEUE's. No SETTLE or COUNT ever names a
  paged message: when the node takes it into memory it copies it as an ENQUEUE of the same id
  (see PAGE_CURSOR), and what happens to it then happens to that copy.
* 6 PAGE_CURSOR, a node took paged messages into memory:
      u64  segment, u64 offset: where the node's first PAGE record still paged starts, or
           where its pages ended (no PAGE record of the node is at or after it yet)
      u16  length n of the node name, then n bytes of UTF-8
  It is written in one BATCH with the ENQUEUE copies of the PAGE records it passes. A later
  PAGE_CURSOR of the node overrides an earlier one.
* 7 PAGE_DROP, the node's paged messages are gone (the node was deleted):
      u16  length n of the node name, then n bytes of UTF-8

A message is live if its last ENQUEUE is not followed by a SETTLE of its id. SETTLE and COUNT
records of ids with no ENQUEUE before them are to be ignored: they refer to messages whose
segment was already deleted. A node's paged messages are its PAGE records after both its last
PAGE_DROP and the position its last PAGE_CURSOR names, in log order.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

MAGIC = b"RNSTORE1"
HEADER = struct.Struct(">8sQ")
RECORD = struct.Struct(">IIB")

ENQUEUE = 1
SETTLE = 2
COUNT = 3
BATCH = 4
PAGE = 5
PAGE_CURSOR = 6
PAGE_DROP = 7

_ENQUEUE_ID = struct.Struct(">QH")
_ENQUEUE_REST = struct.Struct(">BdBI")
_ID = struct.Struct(">Q")
_COUNT = struct.Struct(">QI")
_CURSOR = struct.Struct(">QQH")
_NAME = struct.Struct(">H")


class FormatError(ValueError):
    """Not a store this code can read: a foreign file, or one written by a newer version."""


class Enqueue(NamedTuple):
    """An ENQUEUE as decoded; the body is `buf[data_at:data_at + size]`, left where it is so
    recovery does not copy every message it scans."""

    id: int
    node: str
    priority: int
    expiry: float | None
    durable: bool
    delivery_count: int
    data_at: int
    size: int


class Page(Enqueue):
    """A PAGE as decoded: the fields of an `Enqueue` (tell them apart by `type()`)."""

    __slots__ = ()


class PageCursor(NamedTuple):
    node: str
    segment: int
    offset: int


class PageDrop(NamedTuple):
    node: str


class Settle(NamedTuple):
    id: int


class Count(NamedTuple):
    id: int
    delivery_count: int


class Batch(NamedTuple):
    """Its records are `decode(buf, at, end)` from `start` until `end`."""

    start: int
    end: int


Record = Enqueue | Settle | Count | Batch | Page | PageCursor | PageDrop


def segment_name(segment: int) -> str:
    return f"{segment:08d}.log"


def segment_header(next_id: int) -> bytes:
    return HEADER.pack(MAGIC, next_id)


def read_segment_header(buf: bytes) -> int | None:
    """The header's next id; None when the file is shorter than a header (a crash as it was
    created). Raises FormatError when the file is not a segment of this version."""
    if len(buf) < HEADER.size:
        if not MAGIC.startswith(buf[: len(MAGIC)]):
            raise FormatError("not a routernet store segment")
        return None
    magic, next_id = HEADER.unpack_from(buf)
    if magic != MAGIC:
        raise FormatError(f"not a segment this version reads (header {magic!r})")
    return int(next_id)


def _record(kind: int, payload: bytes) -> bytes:
    crc = zlib.crc32(payload, zlib.crc32(bytes((kind,))))
    return RECORD.pack(len(payload), crc, kind) + payload


def encode_enqueue(
    id: int,
    node: str,
    priority: int,
    expiry: float | None,
    durable: bool,
    delivery_count: int,
    data: bytes,
    kind: int = ENQUEUE,
) -> bytes:
    """The record (a PAGE with `kind`); its last `len(data)` bytes are the message, where the
    store reads it back."""
    name = node.encode()
    payload = b"".join(
        (
            _ENQUEUE_ID.pack(id, len(name)),
            name,
            _ENQUEUE_REST.pack(priority, expiry or 0.0, durable, delivery_count),
            data,
        )
    )
    return _record(kind, payload)


def encode_page_cursor(node: str, segment: int, offset: int) -> bytes:
    name = node.encode()
    return _record(PAGE_CURSOR, _CURSOR.pack(segment, offset, len(name)) + name)


def encode_page_drop(node: str) -> bytes:
    name = node.encode()
    return _record(PAGE_DROP, _NAME.pack(len(name)) + name)


def encode_settle(id: int) -> bytes:
    return _record(SETTLE, _ID.pack(id))


def encode_count(id: int, delivery_count: int) -> bytes:
    return _record(COUNT, _COUNT.pack(id, delivery_count))


def encode_batch(records: bytes) -> bytes:
    """One BATCH of `records` (encoded records, back to back); they start `BATCH_HEAD` bytes
    into it."""
    return _record(BATCH, records)


BATCH_HEAD = RECORD.size


def decode(buf: bytes, at: int, end: int | None = None) -> tuple[Record, int] | None:
    """The record at `at` and the offset after it; None at `end` (the end of the segment) or
    at a torn or corrupt record (the segment's valid data ends at `at`). Within a BATCH
    (`end` its end) a record that is not whole is a FormatError: its CRC held."""
    inner = end is not None
    if end is None:
        end = len(buf)
    if at == end:
        return None
    if at + RECORD.size > end:
        if inner:
            raise FormatError(f"BATCH ends inside a record header at {at}")
        return None
    length, crc, kind = RECORD.unpack_from(buf, at)
    start = at + RECORD.size
    after = start + length
    # The type byte and the payload are contiguous: one CRC over both.
    if after > end or zlib.crc32(buf[at + 8 : after]) != crc:
        if inner:
            raise FormatError(f"record at {at} inside a BATCH is not whole")
        return None
    try:
        if kind in (ENQUEUE, PAGE):
            id, n = _ENQUEUE_ID.unpack_from(buf, start)
            name_at = start + _ENQUEUE_ID.size
            rest = name_at + n
            priority, expiry, durable, count = _ENQUEUE_REST.unpack_from(buf, rest)
            data_at = rest + _ENQUEUE_REST.size
            if data_at > after:
                raise FormatError(f"ENQUEUE record at {at} overruns its length")
            node = buf[name_at:rest].decode()
            made = Enqueue if kind == ENQUEUE else Page
            return made(
                id, node, priority, expiry or None, bool(durable), count, data_at, after - data_at
            ), after
        if kind == PAGE_CURSOR:
            segment, offset, n = _CURSOR.unpack_from(buf, start)
            if start + _CURSOR.size + n != after:
                raise FormatError(f"PAGE_CURSOR record at {at} has length {length}")
            node = buf[start + _CURSOR.size : after].decode()
            return PageCursor(node, segment, offset), after
        if kind == PAGE_DROP:
            (n,) = _NAME.unpack_from(buf, start)
            if start + _NAME.size + n != after:
                raise FormatError(f"PAGE_DROP record at {at} has length {length}")
            return PageDrop(buf[start + _NAME.size : after].decode()), after
        if kind == SETTLE and length == _ID.size:
            return Settle(_ID.unpack_from(buf, start)[0]), after
        if kind == COUNT and length == _COUNT.size:
            return Count(*_COUNT.unpack_from(buf, start)), after
        if kind == BATCH and not inner:
            return Batch(start, after), after
    except (struct.error, UnicodeDecodeError) as exc:
        raise FormatError(f"malformed record at {at}: {exc}") from exc
    raise FormatError(f"record at {at} has type {kind} and length {length}: not this version's")
