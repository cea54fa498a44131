"""The one scan of flow records everything else is computed from.

Every flow analysis (traffic matrix, address stats, hottest addresses and paths,
undeliverable and released rates, connection latencies) is a function of per (address,
ingress, egress, node leg) totals over the range, histograms summed bucket by bucket. So the
records are read once, reduced map-side to those totals (a few thousand rows, whatever the
record count), and only that crosses a shuffle; later steps work on the small result.

The histogram is summed as LATENCY_BUCKETS plain `sum(get(latency_hist, i))` aggregates:
codegen'd, no explode (which would make 90 rows of every record) and no higher-order
functions (interpreted, per row). `get` reads a missing bucket as null, so a shorter list
counts as trailing zeros.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from router.telemetry.schema import FLOW_COUNTS, LATENCY_BUCKETS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# node_leg: a hosted node's trips in and out are rows of their own (schema.py).
KEY = ("address", "ingress_router", "egress_router", "node_leg")
SUMS = (*FLOW_COUNTS, "latency_sum_us")
# What the scan reads of a flow record: nothing else is decoded.
COLUMNS = ("record_id", *KEY, *SUMS, "latency_max_us", "latency_hist")


def deduplicate(records: DataFrame) -> DataFrame:
    """The records, one per record_id.

    A shuffle of whole records (dropDuplicates) would move every histogram across the
    network to drop a handful of resent ones. Instead only a 64-bit hash of each record_id
    is shuffled to find ids seen more than once (map-side it is just a long per row); the
    few records under such a hash are deduplicated exactly by record_id (a hash collision
    only makes a record a candidate), and all others pass through a broadcast anti join."""
    from pyspark.sql import functions as F

    hashed = records.withColumn("_h", F.xxhash64("record_id"))
    repeated = hashed.groupBy("_h").count().where(F.col("count") > 1).select("_h")
    repeated = F.broadcast(repeated)
    once = hashed.join(repeated, "_h", "left_anti")
    candidates = hashed.join(repeated, "_h", "left_semi").dropDuplicates(["record_id"])
    return once.unionByName(candidates).drop("_h")


def hist_sums(column: str = "latency_hist") -> list[Column]:
    from pyspark.sql import functions as F

    return [
        F.coalesce(F.sum(F.get(F.col(column), i)), F.lit(0)).alias(f"_b{i}")
        for i in range(LATENCY_BUCKETS)
    ]


def flow_totals(flow: DataFrame, extra_key: tuple[str, ...] = ()) -> DataFrame:
    """Per (address, ingress, egress) and `extra_key`: the sums of SUMS, the largest latency
    and the summed histogram (`latency_hist`), over deduplicated records."""
    from pyspark.sql import functions as F

    aggs = [F.sum(c).alias(c) for c in SUMS]
    aggs += [F.max("latency_max_us").alias("latency_max_us"), F.count("*").alias("records")]
    grouped = flow.groupBy(*extra_key, *KEY).agg(*aggs, *hist_sums())
    return _pack(grouped)


def merge_totals(totals: DataFrame, extra_key: tuple[str, ...] = ()) -> DataFrame:
    """Totals of totals (rollups of several hours or days, raw hours' totals): the same
    shape, summed again."""
    from pyspark.sql import functions as F

    aggs = [F.sum(c).alias(c) for c in (*SUMS, "records")]
    aggs.append(F.max("latency_max_us").alias("latency_max_us"))
    grouped = totals.groupBy(*extra_key, *KEY).agg(*aggs, *hist_sums())
    return _pack(grouped)


def _pack(grouped: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    buckets = [F.col(f"_b{i}") for i in range(LATENCY_BUCKETS)]
    return grouped.withColumn("latency_hist", F.array(*buckets)).drop(
        *[f"_b{i}" for i in range(LATENCY_BUCKETS)]
    )
