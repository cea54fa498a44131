"""Paging: a deep queue's newest messages stay on disk only, so that the store's memory stays
bounded whatever the depth.

Every message the store indexes costs memory (store.py's `Entry`, the queue's `Held`: some
350 bytes with the dicts that hold them) while its body may be on disk. Past the store's
budget of indexed messages a queue pages: what it takes in from then on is written as PAGE
records (format.py) that nothing in memory points to; the queue only counts them, here. As
its consumers empty the part in memory, the queue takes paged messages in, oldest first, a
batch at a time (`Store.depage`): each is copied as an ENQUEUE of the same id, in one BATCH
with a PAGE_CURSOR that says how far the node has read, so that a crash leaves each paged
message either paged or taken in, never both and never neither. While a queue has paged
messages everything it takes in is paged too, which keeps its order.

What it costs: a paged message is written twice, and it is found by reading the log forward
from the node's cursor (other nodes' records in between are read and skipped). Until it is
taken in, a paged message is counted in its queue's depth but not seen by priority ordering,
selectors, browsers or expiry, as in ActiveMQ Artemis's paging.

Space: the segments from the oldest cursor on hold paged messages, so they stay (`pinned`);
a cursor's or a drop's record refers to the segments whose PAGE records it passes, so that
it cannot go before them (a PAGE record outliving its cursor would come back as paged).
"""

from __future__ import annotations

from collections.abc import Iterator

from router.store.format import RECORD, Batch, FormatError, Page, Record, decode
from router.store.log import Log

# Reads while looking for paged messages: large enough that a batch of small messages is a
# few reads, small enough not to read far past the batch.
CHUNK = 1 << 20


class NodePages:
    """One node's paged messages: how many, and where the oldest may be found."""

    __slots__ = ("bytes", "count", "cursor", "durable")

    def __init__(self) -> None:
        self.count = 0
        self.bytes = 0
        self.durable = 0
        self.cursor: tuple[int, int] | None = None  # (segment, offset) to read from

    def add(self, size: int, durable: bool) -> None:
        self.count += 1
        self.bytes += size
        self.durable += durable


class Recovering:
    """A node's pages as recovery meets its records, oldest first: what its last PAGE_DROP
    and PAGE_CURSOR say, and its PAGE records per segment. Only at the end is it known which
    of them are still paged (those from the cursor on), so they are counted per segment, and
    the cursor's own segment is read again from the cursor (`finish`)."""

    __slots__ = ("per_segment", "start")

    def __init__(self) -> None:
        self.start: tuple[int, int] | None = None  # the cursor, or the first PAGE record
        self.per_segment: dict[int, NodePages] = {}

    def page(self, segment: int, at: int, size: int, durable: bool) -> None:
        if self.start is None:
            self.start = (segment, at)
        found = self.per_segment.get(segment)
        if found is None:
            found = self.per_segment[segment] = NodePages()
        found.add(size, durable)

    def cursor(self, segment: int, offset: int) -> None:
        self.start = (segment, offset)

    def finish(self, log: Log, node: str) -> NodePages:
        pages = NodePages()
        if self.start is None:
            return pages
        first, offset = self.start
        for segment, counted in self.per_segment.items():
            if segment > first:
                pages.count += counted.count
                pages.bytes += counted.bytes
                pages.durable += counted.durable
        if first in log.sizes:
            for record, _, _ in records_from(log, first, offset):
                if type(record) is Page and record.node == node:
                    pages.add(record.size, record.durable)
        if pages.count:
            pages.cursor = self.start
        return pages


def pinned(pages: dict[str, NodePages]) -> int | None:
    """The oldest segment that holds a paged message, if any: it and those after it stay."""
    return min((p.cursor[0] for p in pages.values() if p.cursor is not None), default=None)


def records_from(log: Log, segment: int, offset: int) -> Iterator[tuple[Record, int, bytes]]:
    """The records of `segment` from `offset` on, those inside a BATCH one by one: each with
    the offset of its end and the bytes its offsets (`data_at`) are relative to. The log is
    flushed and recovered: every record in it is whole."""
    end = log.sizes[segment]
    pos = offset
    while pos < end:
        chunk = log.read(segment, pos, min(CHUNK, end - pos))
        if decode(chunk, 0) is None:  # one record larger than a chunk: read it whole
            chunk = log.read(segment, pos, RECORD.size + RECORD.unpack_from(chunk)[0])
        at = 0
        while (decoded := decode(chunk, at)) is not None:
            record, after = decoded
            if isinstance(record, Batch):
                inner = record.start
                while (found := decode(chunk, inner, record.end)) is not None:
                    yield found[0], pos + found[1], chunk
                    inner = found[1]
            yield record, pos + after, chunk
            at = after
        if at == 0:
            raise FormatError(f"segment {segment}: no whole record at {pos}")
        pos += at
