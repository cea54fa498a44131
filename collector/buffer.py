"""Rows waiting to be written, when to write them, and the record ids seen lately.

Pure: times are passed in, nothing is written here. The collector writes a file per partition
per flush, so the two flush triggers bound both a file's size and how long a row waits:

- ``max_rows`` buffered (over all partitions): files stay under about that many rows, and the
  collector's memory with them;
- ``max_seconds`` since the oldest buffered row arrived: a quiet network's records are still
  on disk within that time.

Each message's *token* (for the receiver, the AMQP delivery to settle) is released by the flush
that writes the message's rows, never earlier: an unsettled sender learns its records are
accepted only once they are on disk.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import pyarrow as pa

from collector.partitions import Partition

T = TypeVar("T")


@dataclass
class Flush(Generic[T]):
    """What one flush writes (a file per partition) and then settles."""

    parts: dict[Partition, list[pa.RecordBatch]] = field(default_factory=dict)
    tokens: list[T] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(b.num_rows for batches in self.parts.values() for b in batches)


class Buffer(Generic[T]):
    def __init__(self, max_rows: int, max_seconds: float) -> None:
        if max_rows < 1 or max_seconds <= 0:
            raise ValueError("a buffer needs max_rows >= 1 and max_seconds > 0")
        self.max_rows = max_rows
        self.max_seconds = max_seconds
        self._flush: Flush[T] = Flush()
        self._rows = 0
        self._since: float | None = None

    @property
    def rows(self) -> int:
        return self._rows

    @property
    def pending(self) -> int:
        """Messages waiting for the next flush (with or without rows)."""
        return len(self._flush.tokens)

    def add(self, parts: Mapping[Partition, pa.RecordBatch], token: T, now: float) -> None:
        """One message's rows, split by partition, and its token."""
        for partition, batch in parts.items():
            if batch.num_rows:
                self._flush.parts.setdefault(partition, []).append(batch)
                self._rows += batch.num_rows
        self._flush.tokens.append(token)
        if self._since is None:
            self._since = now

    def due(self, now: float) -> bool:
        """Whether to flush now: enough rows, or the oldest message has waited long enough."""
        if self._since is None:
            return False
        return self._rows >= self.max_rows or now - self._since >= self.max_seconds

    def take(self) -> Flush[T]:
        """Everything buffered, leaving the buffer empty."""
        flush, self._flush = self._flush, Flush()
        self._rows, self._since = 0, None
        return flush


class RecentIds:
    """The last ``capacity`` record ids, to drop the obvious duplicates of a resend (a sender
    that reconnects and sends again what it had no outcome for). Bounded, so not a guarantee:
    the pipeline removes duplicates by record_id over the whole dataset."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, record_id: object) -> bool:
        return record_id in self._ids

    def fresh(self, ids: Iterable[str]) -> list[bool]:
        """For each id, whether it was not seen before (repeats within ``ids`` count as seen);
        remembers them all, forgetting the oldest beyond capacity."""
        seen = self._ids
        out = []
        for record_id in ids:
            if record_id in seen:
                seen.move_to_end(record_id)
                out.append(False)
            else:
                seen[record_id] = None
                out.append(True)
        while len(seen) > self.capacity:
            seen.popitem(last=False)
        return out
