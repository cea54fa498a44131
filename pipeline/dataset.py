"""The collector's dataset on disk: its layout, its schema in Arrow and Spark, and the files a
time range needs.

Files are found here in Python, by the `date=`/`hour=` directory names, rather than by Spark's
partition discovery: a time range then reads only the hours it overlaps (partition pruning
before Spark lists anything), and an empty or missing dataset is reported before a JVM starts.
The schema is derived from router/telemetry/schema.py's FIELDS, never restated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline import PipelineError
from router.telemetry.schema import FIELDS, Kind

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

KINDS: tuple[Kind, ...] = ("flow", "router", "node")
_DATE = re.compile(r"^date=(\d{4}-\d{2}-\d{2})$")
_HOUR = re.compile(r"^hour=(\d{2})$")


def arrow_schema(kind: Kind) -> pa.Schema:
    """The Arrow schema the collector writes: timestamp_ms is timestamp('ms', UTC),
    int64_list is list<int64>, nullability as the field says."""
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "int64": pa.int64(),
        "float64": pa.float64(),
        "timestamp_ms": pa.timestamp("ms", tz="UTC"),
        "int64_list": pa.list_(pa.int64()),
    }
    return pa.schema([pa.field(f.name, types[f.type], nullable=f.nullable) for f in FIELDS[kind]])


def spark_schema(kind: Kind, columns: tuple[str, ...] | None = None) -> StructType:
    """The same schema for Spark; `columns` keeps only those (Parquet then reads only them).

    Every field is declared nullable: Spark's Parquet reader ignores a non-null declaration
    anyway, and nullability is checked where it matters (egress null means undeliverable)."""
    from pyspark.sql import types as T

    types = {
        "string": T.StringType(),
        "int64": T.LongType(),
        "float64": T.DoubleType(),
        "timestamp_ms": T.TimestampType(),
        "int64_list": T.ArrayType(T.LongType(), containsNull=True),
    }
    fields = [f for f in FIELDS[kind] if columns is None or f.name in columns]
    return T.StructType([T.StructField(f.name, types[f.type], True) for f in fields])


def parse_time(text: str, option: str) -> datetime:
    """An ISO 8601 time, UTC unless it says otherwise; PipelineError naming the option."""
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise PipelineError(f"{option} {text!r} is not an ISO 8601 time") from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


@dataclass(frozen=True)
class TimeRange:
    """[start, end): records whose window starts in it. None is open on that side."""

    start: datetime | None = None
    end: datetime | None = None

    def __post_init__(self) -> None:
        if self.start and self.end and self.start >= self.end:
            raise PipelineError(
                f"bad time range: --from {self.start.isoformat()} is not before"
                f" --to {self.end.isoformat()}"
            )

    def overlaps_hour(self, hour: datetime) -> bool:
        after_start = self.start is None or hour + timedelta(hours=1) > self.start
        return after_start and (self.end is None or hour < self.end)

    def as_json(self) -> dict[str, str | None]:
        return {
            "from": self.start.isoformat() if self.start else None,
            "to": self.end.isoformat() if self.end else None,
        }


@dataclass(frozen=True)
class Partition:
    kind: Kind
    hour: datetime
    path: Path


def partitions(dataset: Path, kind: Kind, time_range: TimeRange = TimeRange()) -> list[Partition]:
    """The hour directories of `kind` that overlap the range and hold at least one Parquet
    file, oldest first."""
    found = []
    base = dataset / kind
    if not base.is_dir():
        return []
    for date_dir in base.iterdir():
        date_match = _DATE.match(date_dir.name)
        if not date_match or not date_dir.is_dir():
            continue
        for hour_dir in date_dir.iterdir():
            hour_match = _HOUR.match(hour_dir.name)
            if not hour_match:
                continue
            try:
                hour = datetime.fromisoformat(f"{date_match[1]}T{hour_match[1]}:00+00:00")
            except ValueError:
                continue
            if time_range.overlaps_hour(hour) and any(hour_dir.glob("*.parquet")):
                found.append(Partition(kind, hour, hour_dir))
    return sorted(found, key=lambda p: p.hour)


def check_dataset(dataset: Path, time_range: TimeRange) -> dict[Kind, list[Partition]]:
    """The partitions of every kind in the range; PipelineError when there is nothing to
    read, saying whether the dataset is missing, empty or just has nothing in that range."""
    if not dataset.exists():
        raise PipelineError(f"dataset {dataset} does not exist")
    if not dataset.is_dir():
        raise PipelineError(f"dataset {dataset} is not a directory")
    found = {kind: partitions(dataset, kind, time_range) for kind in KINDS}
    if not any(found.values()):
        if not any(partitions(dataset, kind) for kind in KINDS):
            raise PipelineError(
                f"dataset {dataset} holds no telemetry (no flow/, router/ or node/"
                " date=YYYY-MM-DD/hour=HH/*.parquet files)"
            )
        raise PipelineError(
            f"dataset {dataset} holds no telemetry in the range {_shown(time_range)}"
        )
    return found


def _shown(time_range: TimeRange) -> str:
    start = time_range.start.isoformat() if time_range.start else "the start"
    end = time_range.end.isoformat() if time_range.end else "the end"
    return f"{start} .. {end}"


def read(
    spark: SparkSession,
    parts: list[Partition],
    kind: Kind,
    time_range: TimeRange,
    columns: tuple[str, ...] | None = None,
) -> DataFrame:
    """The records of `kind` in the range: only the hour directories it overlaps, only the
    columns asked for (plus window_start for the range filter), with the schema given so
    Spark infers nothing. An empty kind reads as an empty DataFrame of that schema."""
    from pyspark.sql import functions as F

    wanted = None if columns is None else tuple({*columns, "window_start"})
    schema = spark_schema(kind, wanted)
    if not parts:
        return spark.createDataFrame([], schema)
    frame = spark.read.schema(schema).parquet(*[str(p.path) for p in parts])
    if time_range.start is not None:
        frame = frame.where(F.col("window_start") >= F.lit(time_range.start))
    if time_range.end is not None:
        frame = frame.where(F.col("window_start") < F.lit(time_range.end))
    return frame if columns is None else frame.select(*columns)


def data_span(found: dict[Kind, list[Partition]]) -> dict[str, str | None]:
    """The first window start and the last window end of the records in `found`, as ISO 8601
    (None without records): what a report shows for a side of the range no --from/--to set.

    Read off the Parquet files' column statistics of the first and the last hour only (the
    other hours' records lie between), so it costs some footers and no Spark job."""
    firsts = [parts[0] for parts in found.values() if parts]
    lasts = [parts[-1] for parts in found.values() if parts]
    starts = [t for p in firsts if (t := _bound(p, "window_start", first=True)) is not None]
    ends = [t for p in lasts if (t := _bound(p, "window_end", first=False)) is not None]
    return {
        "from": json_ready(min(starts)) if starts else None,
        "to": json_ready(max(ends)) if ends else None,
    }


def _bound(part: Partition, column: str, first: bool) -> datetime | None:
    """The smallest (`first`) or largest value of `column` in the hour's files: from each row
    group's statistics, or from the column itself where a writer left them out."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    found: list[datetime] = []
    for path in part.path.glob("*.parquet"):
        meta = pq.read_metadata(path)
        # By path, not position: a list column (latency_hist) is a leaf of another name.
        index = [meta.schema.column(i).path for i in range(meta.num_columns)].index(column)
        groups = [meta.row_group(i).column(index).statistics for i in range(meta.num_row_groups)]
        if all(s is not None and s.has_min_max for s in groups):
            found += [s.min if first else s.max for s in groups]  # type: ignore[union-attr]
        else:
            values = pq.read_table(path, columns=[column])[column]
            value = (pc.min if first else pc.max)(values).as_py()
            if value is not None:
                found.append(value)
    if not found:
        return None
    return min(found) if first else max(found)


def partition_dir(dataset: Path, kind: Kind, hour: datetime) -> Path:
    """Where the collector puts the records whose window starts in `hour` (UTC)."""
    hour = hour.astimezone(UTC)
    return dataset / kind / f"date={hour:%Y-%m-%d}" / f"hour={hour:%H}"


def json_ready(value: Any) -> Any:
    """Values of collected rows made JSON-friendly (datetimes as ISO 8601 UTC)."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    return value
