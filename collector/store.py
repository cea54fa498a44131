"""Writing rows into the dataset: one Parquet file per partition per flush, on disk before it
counts.

A file is written under a hidden temporary name (``.part-<uuid>.parquet.tmp``: readers such as
pyarrow.dataset and Spark skip names starting with ``.`` or ``_``), fsynced, renamed to its final
name, and the directory fsynced (and, when the partition directory is new, its parents), so a
crash leaves either the whole file or none of it, never a torn file a reader would fail on.
Only then does the receiver settle the messages the rows came from.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from collector.arrow import arrow_schema
from collector.buffer import Flush
from collector.partitions import Partition, file_name

COMPRESSION = "zstd"


def write_partition(dataset: Path, partition: Partition, batches: list[pa.RecordBatch]) -> Path:
    """The batches as one new Parquet file of the partition; its path once durable."""
    directory = dataset / partition.path
    created = _make_dirs(dataset, directory)
    name = file_name()
    tmp = directory / f".{name}.tmp"
    table = pa.Table.from_batches(batches, schema=arrow_schema(partition.kind))  # type: ignore[arg-type]
    try:
        with tmp.open("wb") as out:
            pq.write_table(table, out, compression=COMPRESSION)
            out.flush()
            os.fsync(out.fileno())
        final = directory / name
        tmp.rename(final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    for path in [directory, *created]:
        _fsync_dir(path)
    return final


def write_flush(dataset: Path, flush: Flush[object]) -> list[Path]:
    """Every partition of a flush, in order; the files written."""
    return [write_partition(dataset, p, batches) for p, batches in sorted(flush.parts.items())]


def _make_dirs(root: Path, directory: Path) -> list[Path]:
    """Creates ``directory`` and what is missing above it; returns the parents of what was
    created (their entries changed, so they need an fsync too), deepest first."""
    missing = []
    path = directory
    while not path.exists():
        missing.append(path)
        if path == root or path.parent == path:
            break
        path = path.parent
    directory.mkdir(parents=True, exist_ok=True)
    return [p.parent for p in missing]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
