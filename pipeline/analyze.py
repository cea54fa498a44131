"""`analyze`: a time range of the dataset to tables, summary.json, plots and a report.

The flow side is one reduction (rollup.totals_for: rollups where fresh, one scan of the raw
records elsewhere) to per (address, ingress, egress) totals, kept in memory because every
flow table is derived from it; the router side is the few router records, the node side
(hosted queues and topics) the few node records. Result tables are
small, so each comes back to the driver once as Arrow and is written with pyarrow as one
Parquet file: no per-table Spark write job, no directories of tiny part files.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.address_stats import address_stats
from pipeline.dataset import TimeRange, check_dataset, data_span, json_ready, read
from pipeline.load import COLUMNS as ROUTER_COLUMNS
from pipeline.load import load_per_minute, load_summary
from pipeline.node_stats import COLUMNS as NODE_COLUMNS
from pipeline.node_stats import node_stats
from pipeline.rollup import plan, totals_for
from pipeline.totals import deduplicate
from pipeline.traffic_matrix import paths, traffic_matrix

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

TOP = 10


@dataclass
class Result:
    """The analysis as Arrow tables, and its summary."""

    tables: dict[str, pa.Table] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


def analyze(
    spark: SparkSession,
    dataset: Path,
    time_range: TimeRange | None = None,
    *,
    use_rollups: bool = True,
    progress: Callable[[str], None] | None = None,
) -> Result:
    """Compute every table of the range."""
    started = time.monotonic()
    say = progress or (lambda _: None)
    time_range = time_range or TimeRange()
    found = check_dataset(dataset, time_range)
    the_plan = plan(dataset, found["flow"], time_range, use_rollups)
    result = Result()
    say(f"flow totals ({_shown_plan(the_plan.as_json())})")
    totals = totals_for(spark, the_plan, time_range).cache()
    try:
        for name, frame in (
            ("traffic_matrix", traffic_matrix(totals)),
            ("paths", paths(totals)),
            ("address_stats", address_stats(totals)),
        ):
            say(name)
            result.tables[name] = frame.toArrow()
    finally:
        totals.unpersist()
    say("router load")
    router = deduplicate(read(spark, found["router"], "router", time_range, ROUTER_COLUMNS))
    per_minute = load_per_minute(router).cache()
    try:
        result.tables["load_per_minute"] = per_minute.toArrow()
        result.tables["router_load"] = load_summary(per_minute).toArrow()
    finally:
        per_minute.unpersist()
    say("node stats")
    nodes = deduplicate(read(spark, found["node"], "node", time_range, NODE_COLUMNS))
    result.tables["node_stats"] = node_stats(nodes).toArrow()
    result.summary = summarize(result.tables, dataset, time_range)
    result.summary["data_range"] = data_span(found)
    result.summary["sources"] = the_plan.as_json()
    result.summary["seconds"] = round(time.monotonic() - started, 3)
    return result


def _shown_plan(p: dict[str, int]) -> str:
    return ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in p.items() if v) or "no records"


def _rows(table: pa.Table, columns: list[str], limit: int | None = None) -> list[dict[str, Any]]:
    rows = table.select(columns).slice(0, limit).to_pylist()
    return [{k: json_ready(v) for k, v in row.items()} for row in rows]


def summarize(tables: dict[str, pa.Table], dataset: Path, time_range: TimeRange) -> dict[str, Any]:
    """summary.json: totals, rates, the hottest addresses and paths, per-router load, the
    busiest hosted nodes."""
    import pyarrow.compute as pc

    stats = tables["address_stats"]
    delivered = int(pc.sum(stats["deliveries"]).as_py() or 0)
    undeliverable = int(pc.sum(stats["undeliverable"]).as_py() or 0)
    released = int(pc.sum(stats["released"]).as_py() or 0)
    records = int(pc.sum(tables["traffic_matrix"]["records"]).as_py() or 0)
    total = delivered + undeliverable
    return {
        "dataset": str(dataset),
        "range": time_range.as_json(),
        "flow_records": records,
        "router_minutes": tables["load_per_minute"].num_rows,
        "deliveries": delivered,
        "undeliverable": undeliverable,
        "undeliverable_rate": undeliverable / total if total else None,
        "released": released,
        "released_rate": released / total if total else None,
        "addresses": stats.num_rows,
        "hottest_addresses": _rows(
            stats,
            ["address", "deliveries", "bytes", "latency_p50_us", "latency_p95_us", "imbalance"],
            TOP,
        ),
        "hottest_paths": _rows(
            tables["paths"],
            ["ingress_router", "egress_router", "deliveries", "bytes", "latency_p95_us"],
            TOP,
        ),
        "routers": _rows(tables["router_load"], tables["router_load"].column_names),
        "nodes": _rows(tables["node_stats"], tables["node_stats"].column_names, TOP),
    }


def write(result: Result, output: Path) -> list[Path]:
    """Each table as `<output>/<name>/part-0.parquet`, and summary.json; the paths written."""
    import pyarrow.parquet as pq

    written = []
    for name, table in result.tables.items():
        directory = output / name
        directory.mkdir(parents=True, exist_ok=True)
        for old in directory.glob("*.parquet"):
            old.unlink()
        pq.write_table(table, directory / "part-0.parquet")
        written.append(directory)
    summary = output / "summary.json"
    summary.write_text(json.dumps(result.summary, indent=2) + "\n")
    written.append(summary)
    return written
