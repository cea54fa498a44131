"""The traffic matrix: who sends what to whom, over the range.

One row per (address, ingress router, egress router, node leg) with deliveries, bytes,
outcomes and transit latency percentiles; egress null is traffic that reached no consumer, a
node leg a hosted queue's or topic's trip in (producer's router to host) or out (host to
consumer's router). Paths
(ingress, egress) summed over addresses give the heat map and the hottest paths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.histogram import quantile
from pipeline.totals import KEY, hist_sums

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

OUTCOMES = ("accepted", "released", "rejected", "modified", "presettled", "dropped")


def traffic_matrix(totals: DataFrame) -> DataFrame:
    """The matrix table from flow totals, busiest first."""
    from pyspark.sql import functions as F

    return totals.select(
        *KEY,
        "deliveries",
        "bytes",
        *OUTCOMES,
        "records",
        "latency_samples",
        quantile("latency_hist", 0.5).alias("latency_p50_us"),
        quantile("latency_hist", 0.95).alias("latency_p95_us"),
        "latency_max_us",
    ).orderBy(F.desc("deliveries"), *KEY)


def paths(totals: DataFrame) -> DataFrame:
    """Per (ingress, egress) over all addresses: deliveries, bytes, addresses, latency
    percentiles from the merged histogram; undeliverable traffic (egress null) excluded. A
    hosted node's trips are paths too: producer's router to host, host to consumer's."""
    from pyspark.sql import functions as F

    delivered = totals.where(F.col("egress_router").isNotNull())
    grouped = delivered.groupBy("ingress_router", "egress_router").agg(
        F.sum("deliveries").alias("deliveries"),
        F.sum("bytes").alias("bytes"),
        F.countDistinct("address").alias("addresses"),
        F.sum("latency_samples").alias("latency_samples"),
        F.sum("latency_sum_us").alias("latency_sum_us"),
        *hist_sums(),
    )
    buckets = [c for c in grouped.columns if c.startswith("_b")]
    merged = grouped.withColumn("latency_hist", F.array(*buckets)).drop(*buckets)
    return merged.select(
        "ingress_router",
        "egress_router",
        "deliveries",
        "bytes",
        "addresses",
        "latency_samples",
        F.try_divide("latency_sum_us", "latency_samples").alias("latency_mean_us"),
        quantile("latency_hist", 0.5).alias("latency_p50_us"),
        quantile("latency_hist", 0.95).alias("latency_p95_us"),
        quantile("latency_hist", 0.99).alias("latency_p99_us"),
    ).orderBy(F.desc("deliveries"), "ingress_router", "egress_router")
