"""Where rows go: ``<kind>/date=YYYY-MM-DD/hour=HH/part-<uuid>.parquet`` under the dataset.

Pure. Partitioned by the hour (UTC) of a record's ``window_start``, Hive-style, so Spark and
pyarrow.dataset read ``date`` and ``hour`` as columns and skip the hours a query does not want.
A window belongs to the hour it starts in, whenever it arrives: a record that comes late (a
router's last window, sent as it drains) still lands in the right hour. Every file has a name of
its own (a random UUID), so any number of flushes and collectors can write into one partition
without coordination.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc

MS_PER_HOUR = 3_600_000
PARTITION_COLUMN = "window_start"
FILE_PREFIX = "part-"
FILE_SUFFIX = ".parquet"


@dataclass(frozen=True, order=True)
class Partition:
    """One directory of the dataset: a kind and an hour (hours since the epoch, UTC)."""

    kind: str
    hour_index: int

    @property
    def start(self) -> datetime:
        return datetime.fromtimestamp(self.hour_index * 3600, tz=UTC)

    @property
    def date(self) -> str:
        return self.start.strftime("%Y-%m-%d")

    @property
    def hour(self) -> str:
        return self.start.strftime("%H")

    @property
    def path(self) -> str:
        """Relative to the dataset root, '/'-separated."""
        return f"{self.kind}/date={self.date}/hour={self.hour}"


def file_name() -> str:
    """A new file's name: unique without asking anyone."""
    return f"{FILE_PREFIX}{uuid.uuid4()}{FILE_SUFFIX}"


def split(kind: str, batch: pa.RecordBatch) -> dict[Partition, pa.RecordBatch]:
    """The batch's rows by partition (usually all in one: a message is one router's window)."""
    if batch.num_rows == 0:
        return {}
    millis = batch.column(PARTITION_COLUMN).cast(pa.int64())
    # Floor division, right for times before 1970 too.
    hours = pc.floor(pc.divide(millis.cast(pa.float64()), float(MS_PER_HOUR))).cast(pa.int64())
    distinct = pc.unique(hours).to_pylist()
    if len(distinct) == 1:
        return {Partition(kind, distinct[0]): batch}
    return {Partition(kind, hour): batch.filter(pc.equal(hours, hour)) for hour in sorted(distinct)}
