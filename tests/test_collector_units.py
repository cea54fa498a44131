"""The collector's pure parts: Arrow schema conversion, partitioning, buffering and flush
triggers, recent-id dedup; and the file writer on a temporary directory."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from telemetry_rows import BASE_MS, HOUR_MS, make_rows, record_id

from collector.arrow import ARROW_TYPES, arrow_schema, record_batch
from collector.buffer import Buffer, RecentIds
from collector.partitions import Partition, split
from collector.store import write_flush
from router.telemetry.schema import FIELDS, SchemaError, columns, decode_batch, encode_batch


def batch_of(kind, rows):
    _, decoded = decode_batch(encode_batch(kind, rows))
    return record_batch(kind, decoded)


@pytest.mark.parametrize("kind", list(FIELDS))
def test_arrow_schema_follows_fields(kind) -> None:
    schema = arrow_schema(kind)
    assert schema.names == list(columns(kind))
    for f in FIELDS[kind]:
        assert schema.field(f.name).type == ARROW_TYPES[f.type]
        assert schema.field(f.name).nullable == f.nullable
    assert schema.field("window_start").type == pa.timestamp("ms", tz="UTC")
    assert schema.metadata[b"routernet.schema_version"] == b"2"


def test_list_and_timestamp_conversion() -> None:
    batch = batch_of("flow", make_rows("flow", 3))
    assert batch.schema.field("latency_hist").type == pa.list_(pa.int64())
    start = batch.column("window_start")[0].as_py()
    assert start == dt.datetime(2026, 11, 22, 7, tzinfo=dt.UTC)
    assert batch.column("latency_hist")[1].as_py()[0] == 1


def test_a_nullable_field_takes_null_and_a_required_one_does_not() -> None:
    kind = "flow"
    names = list(columns(kind))
    row = list(make_rows(kind, 1)[0])
    row[names.index("egress_router")] = None
    assert batch_of(kind, [row]).column("egress_router").null_count == 1
    row[names.index("address")] = None
    with pytest.raises(SchemaError, match="column address is null"):
        batch_of(kind, [row])


def test_a_value_of_the_wrong_type_names_its_column() -> None:
    names = list(columns("router"))
    row = list(make_rows("router", 1)[0])
    row[names.index("connections")] = "many"
    with pytest.raises(SchemaError, match="telemetry router column connections: ") as err:
        batch_of("router", [row])
    assert "\n" not in str(err.value)


def test_partition_paths() -> None:
    p = Partition("flow", BASE_MS // HOUR_MS)
    assert p.path == "flow/date=2026-11-22/hour=07"
    late = Partition("router", (BASE_MS + 17 * HOUR_MS) // HOUR_MS)
    assert late.path == "router/date=2026-11-23/hour=00"


def test_split_by_hour_of_window_start() -> None:
    rows = make_rows("flow", 3) + make_rows("flow", 2, BASE_MS + HOUR_MS - 1)
    rows += make_rows("flow", 4, BASE_MS + HOUR_MS)
    parts = split("flow", batch_of("flow", rows))
    assert {p.path: b.num_rows for p, b in parts.items()} == {
        "flow/date=2026-11-22/hour=07": 5,
        "flow/date=2026-11-22/hour=08": 4,
    }
    one = split("flow", batch_of("flow", make_rows("flow", 3)))
    assert [b.num_rows for b in one.values()] == [3]
    assert split("flow", batch_of("flow", [])) == {}


def test_buffer_flushes_at_rows_or_age_and_keeps_tokens() -> None:
    buffer: Buffer[str] = Buffer(max_rows=10, max_seconds=5.0)
    assert not buffer.due(100.0)
    buffer.add(split("flow", batch_of("flow", make_rows("flow", 4))), "m1", now=100.0)
    assert not buffer.due(104.9)
    assert buffer.due(105.0)  # the oldest row waited max_seconds
    buffer.add(split("flow", batch_of("flow", make_rows("flow", 6))), "m2", now=101.0)
    assert buffer.due(101.0)  # max_rows
    flush = buffer.take()
    assert flush.rows == 10 and flush.tokens == ["m1", "m2"]
    assert len(flush.parts) == 1 and len(next(iter(flush.parts.values()))) == 2
    assert buffer.rows == 0 and not buffer.due(1000.0)
    # A message without rows (all duplicates) still waits for a flush to be settled.
    buffer.add({}, "m3", now=200.0)
    assert buffer.pending == 1 and buffer.due(205.0)


def test_recent_ids_are_bounded() -> None:
    ids = RecentIds(capacity=3)
    assert ids.fresh(["a", "b", "a"]) == [True, True, False]
    assert ids.fresh(["c", "d"]) == [True, True]
    assert len(ids) == 3 and "b" not in ids  # the oldest forgotten ("a" was seen again)
    assert ids.fresh(["b", "a"]) == [True, False]


def test_write_flush_is_a_readable_hive_dataset(tmp_path: Path) -> None:
    buffer: Buffer[None] = Buffer(max_rows=1000, max_seconds=5.0)
    flows = make_rows("flow", 5) + make_rows("flow", 3, BASE_MS + 2 * HOUR_MS)
    routers = make_rows("router", 2)
    buffer.add(split("flow", batch_of("flow", flows)), None, 0.0)
    buffer.add(split("router", batch_of("router", routers)), None, 0.0)
    files = write_flush(tmp_path, buffer.take())
    assert sorted(str(f.relative_to(tmp_path).parent) for f in files) == [
        "flow/date=2026-11-22/hour=07",
        "flow/date=2026-11-22/hour=09",
        "router/date=2026-11-22/hour=07",
    ]
    assert all(f.name.startswith("part-") and f.suffix == ".parquet" for f in files)
    assert not list(tmp_path.rglob(".*"))  # no temporary files left
    assert pq.read_schema(files[0]).remove_metadata() == arrow_schema("flow").remove_metadata()
    table = ds.dataset(tmp_path / "flow", format="parquet", partitioning="hive").to_table()
    assert table.num_rows == 8
    assert sorted(set(table.column("hour").to_pylist())) == [7, 9]
    got = set(table.column("record_id").to_pylist())
    assert got == {record_id("flow", row) for row in flows}
