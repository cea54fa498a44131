"""Per address: deliveries, outcomes, undeliverable and released rates, latency percentiles
from the merged histograms, and how evenly its consumers' routers shared it.

Consumers' share: deliveries per egress router. For a balanced or closest address the
imbalance `max_egress_share * egress_routers` is 1.0 when the routers of its consumers took
equal shares and approaches `egress_routers` when one took everything (a multicast address
gives every consumer a copy, so it reads as even). Which distribution an address has is not
in the records; the table has it for every address.

A hosted queue's or topic's address counts what its consumers got (its `out` rows): what
producers put in is the same messages once more, and is in node_stats (enqueued).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.histogram import quantile
from pipeline.totals import hist_sums

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def address_stats(totals: DataFrame) -> DataFrame:
    """One row per address, busiest first."""
    from pyspark.sql import functions as F

    totals = totals.where(~F.col("node_leg").eqNullSafe("in"))
    delivered = F.col("egress_router").isNotNull()

    def when_delivered(column: str) -> F.Column:
        return F.sum(F.when(delivered, F.col(column)).otherwise(F.lit(0)))

    per_address = totals.groupBy("address").agg(
        when_delivered("deliveries").alias("deliveries"),
        F.sum(F.when(~delivered, F.col("deliveries")).otherwise(F.lit(0))).alias("undeliverable"),
        when_delivered("bytes").alias("bytes"),
        when_delivered("accepted").alias("accepted"),
        F.sum("released").alias("released"),
        when_delivered("rejected").alias("rejected"),
        when_delivered("modified").alias("modified"),
        when_delivered("presettled").alias("presettled"),
        F.sum("dropped").alias("dropped"),
        F.sum("records").alias("records"),
        F.countDistinct("ingress_router").alias("ingress_routers"),
        F.countDistinct("egress_router").alias("egress_routers"),
        F.sum("latency_samples").alias("latency_samples"),
        F.sum("latency_sum_us").alias("latency_sum_us"),
        F.max("latency_max_us").alias("latency_max_us"),
        *hist_sums(),
    )
    buckets = [c for c in per_address.columns if c.startswith("_b")]
    per_address = per_address.withColumn("latency_hist", F.array(*buckets)).drop(*buckets)
    shares = (
        totals.where(delivered)
        .groupBy("address", "egress_router")
        .agg(F.sum("deliveries").alias("d"))
        .groupBy("address")
        .agg(F.max("d").alias("top_egress"), F.sum("d").alias("all_egress"))
    )
    total = F.col("deliveries") + F.col("undeliverable")
    return (
        per_address.join(shares, "address", "left")
        .select(
            "address",
            "deliveries",
            "undeliverable",
            "bytes",
            "accepted",
            "released",
            "rejected",
            "modified",
            "presettled",
            "dropped",
            "records",
            "ingress_routers",
            "egress_routers",
            F.when(total > 0, F.col("undeliverable") / total).alias("undeliverable_rate"),
            F.when(total > 0, F.col("released") / total).alias("released_rate"),
            F.try_divide("top_egress", "all_egress").alias("max_egress_share"),
            (F.try_divide("top_egress", "all_egress") * F.col("egress_routers")).alias("imbalance"),
            F.try_divide("latency_sum_us", "latency_samples").alias("latency_mean_us"),
            quantile("latency_hist", 0.5).alias("latency_p50_us"),
            quantile("latency_hist", 0.95).alias("latency_p95_us"),
            quantile("latency_hist", 0.99).alias("latency_p99_us"),
            "latency_max_us",
            "latency_samples",
            "latency_hist",
        )
        .orderBy(F.desc("deliveries"), "address")
    )
