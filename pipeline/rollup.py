"""Rollups: the collector's windows compacted into hourly and daily totals, once.

Ten-second windows make many records; every analysis only needs per (address, ingress,
egress) totals. So each closed hour is reduced once (deduplicated, histograms summed) to its
totals, and each closed day to the totals of its hours, under `<dataset>/_rollup/flow/`:

    _rollup/flow/hour/date=YYYY-MM-DD/hour=HH/part-*.parquet   + _sources.json
    _rollup/flow/day/date=YYYY-MM-DD/part-*.parquet            + _sources.json

`_sources.json` records the raw files (name, size, mtime) a rollup was made from, and the
rollup's FORMAT. A rollup whose sources no longer match (late records, a rewritten file), or
made in an older format (before `node_leg` was a key, say), is stale and not used until
compacted again, so `analyze` always answers from the raw data's current content: days and
hours wholly inside the range from fresh rollups, everything else (range edges, the open
hour, stale rollups) from raw records. Duplicates share their record's window, hence its
hour, so deduplicating per hour is deduplicating everywhere.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.dataset import Partition, TimeRange, partitions, read
from pipeline.totals import COLUMNS, deduplicate, flow_totals, merge_totals

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

ROLLUP_DIR = "_rollup"
SOURCES = "_sources.json"
# Bumped when totals change shape: 2 — keyed by node_leg too.
FORMAT = 2
# An hour is closed this long after it ends: records of its last windows have arrived.
DEFAULT_GRACE = timedelta(minutes=5)


def hour_dir(dataset: Path, hour: datetime) -> Path:
    return dataset / ROLLUP_DIR / "flow" / "hour" / f"date={hour:%Y-%m-%d}" / f"hour={hour:%H}"


def day_dir(dataset: Path, day: datetime) -> Path:
    return dataset / ROLLUP_DIR / "flow" / "day" / f"date={day:%Y-%m-%d}"


def signature(part: Partition) -> dict[str, Any]:
    """The rollup format and the raw files of an hour as [name, size, mtime_ns], sorted."""
    files = sorted(part.path.glob("*.parquet"))
    return {
        "format": FORMAT,
        "files": [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in files],
    }


def _stored(directory: Path) -> Any:
    try:
        return json.loads((directory / SOURCES).read_text())
    except (OSError, ValueError):
        return None


def _day_signature(hours: list[Partition]) -> dict[str, Any]:
    return {f"{p.hour:%H}": signature(p) for p in hours}


@dataclass
class Plan:
    """Where each part of a range is read from."""

    day_rollups: list[Path] = field(default_factory=list)
    hour_rollups: list[Path] = field(default_factory=list)
    raw: list[Partition] = field(default_factory=list)

    def as_json(self) -> dict[str, int]:
        return {
            "day_rollups": len(self.day_rollups),
            "hour_rollups": len(self.hour_rollups),
            "raw_hours": len(self.raw),
        }


def plan(dataset: Path, parts: list[Partition], time_range: TimeRange, use: bool = True) -> Plan:
    """Fresh day rollups for days wholly in the range, fresh hour rollups for other hours
    wholly in it, raw records for the rest."""
    result = Plan()
    if not use:
        result.raw = list(parts)
        return result
    by_day: dict[datetime, list[Partition]] = {}
    for p in parts:
        by_day.setdefault(p.hour.replace(hour=0), []).append(p)
    for day, hours in sorted(by_day.items()):
        if _inside(time_range, day, timedelta(days=1)):
            directory = day_dir(dataset, day)
            if _stored(directory) == _day_signature(hours):
                result.day_rollups.append(directory)
                continue
        for p in hours:
            directory = hour_dir(dataset, p.hour)
            if _inside(time_range, p.hour, timedelta(hours=1)) and _stored(directory) == signature(
                p
            ):
                result.hour_rollups.append(directory)
            else:
                result.raw.append(p)
    return result


def _inside(time_range: TimeRange, start: datetime, length: timedelta) -> bool:
    return (time_range.start is None or time_range.start <= start) and (
        time_range.end is None or start + length <= time_range.end
    )


def totals_for(spark: SparkSession, the_plan: Plan, time_range: TimeRange) -> DataFrame:
    """Per (address, ingress, egress) totals over the range, from rollups and raw records."""
    frames = []
    rollups = [str(d) for d in (*the_plan.day_rollups, *the_plan.hour_rollups)]
    if rollups:
        frames.append(spark.read.parquet(*rollups))
    if the_plan.raw or not frames:
        raw = read(spark, the_plan.raw, "flow", time_range, COLUMNS)
        frames.append(flow_totals(deduplicate(raw)))
    if len(frames) == 1 and not rollups:
        return frames[0]
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    return merge_totals(union)


def compact(
    spark: SparkSession,
    dataset: Path,
    now: datetime | None = None,
    grace: timedelta = DEFAULT_GRACE,
) -> dict[str, int]:
    """Roll up every closed hour and day whose rollup is missing or stale; returns how many
    of each were written. One Spark job per level, whatever the number of hours."""
    from pyspark.sql import functions as F

    now = now or datetime.now(UTC)
    closed = [p for p in partitions(dataset, "flow") if p.hour + timedelta(hours=1) + grace <= now]
    stale = [p for p in closed if _stored(hour_dir(dataset, p.hour)) != signature(p)]
    if stale:
        raw = read(spark, stale, "flow", TimeRange(), (*COLUMNS, "window_start")).withColumns(
            {
                "date": F.date_format("window_start", "yyyy-MM-dd"),
                "hour": F.date_format("window_start", "HH"),
            }
        )
        totals = flow_totals(deduplicate(raw.drop("window_start")), ("date", "hour"))
        target = dataset / ROLLUP_DIR / "flow" / "hour"
        totals.write.mode("overwrite").partitionBy("date", "hour").parquet(str(target))
        for p in stale:
            directory = hour_dir(dataset, p.hour)
            directory.mkdir(parents=True, exist_ok=True)
            (directory / SOURCES).write_text(json.dumps(signature(p)))
    by_day: dict[datetime, list[Partition]] = {}
    for p in closed:
        by_day.setdefault(p.hour.replace(hour=0), []).append(p)
    days = [
        (day, hours)
        for day, hours in sorted(by_day.items())
        if day + timedelta(days=1) + grace <= now
        and _stored(day_dir(dataset, day)) != _day_signature(hours)
    ]
    if days:
        sources = [str(hour_dir(dataset, p.hour)) for _, hours in days for p in hours]
        hourly = spark.read.option("basePath", str(dataset / ROLLUP_DIR / "flow" / "hour"))
        daily = merge_totals(hourly.parquet(*sources).drop("hour"), ("date",))
        target = dataset / ROLLUP_DIR / "flow" / "day"
        daily.write.mode("overwrite").partitionBy("date").parquet(str(target))
        for day, hours in days:
            (day_dir(dataset, day) / SOURCES).write_text(json.dumps(_day_signature(hours)))
    return {"hours": len(stale), "days": len(days)}
