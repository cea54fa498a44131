"""Hosted queues and topics over the range: one row per (node, host router) from the `node`
records (schema.py): what went in and out, dead-lettered and expired, summed over the windows;
depth, bytes and paged messages as the last window in the range left them, and the deepest the
node got (at a window's end). Records are few (one per node per window), so they are read raw.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from router.telemetry.schema import NODE_COUNTS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

COLUMNS = (
    "record_id",
    "router",
    "window_end",
    "node",
    "node_type",
    "depth",
    "bytes",
    "paged",
    *NODE_COUNTS,
)


def node_stats(records: DataFrame) -> DataFrame:
    """Deduplicated node records to the table, most enqueued first."""
    from pyspark.sql import functions as F

    return (
        records.groupBy("node", "router")
        .agg(
            F.max_by("node_type", "window_end").alias("node_type"),
            *[F.sum(c).alias(c) for c in NODE_COUNTS],
            F.max_by("depth", "window_end").alias("depth"),
            F.max("depth").alias("depth_max"),
            F.max_by("bytes", "window_end").alias("bytes"),
            F.max_by("paged", "window_end").alias("paged"),
            F.count("*").alias("records"),
        )
        .select(
            "node",
            "router",
            "node_type",
            *NODE_COUNTS,
            "depth",
            "depth_max",
            "bytes",
            "paged",
            "records",
        )
        .orderBy(F.desc("enqueued"), "node", "router")
    )
