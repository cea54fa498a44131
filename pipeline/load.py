"""Router load: messages per second in and out, per router per minute, and its spread.

From `router` records (one per router per window, so few): a minute's rate is the minute's
deliveries over the seconds of the windows that started in it, so windows of any length and
a router that reported for part of a minute both read right.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

COLUMNS = (
    "record_id",
    "router",
    "mode",
    "window_start",
    "window_end",
    "deliveries_in",
    "deliveries_out",
)


def load_per_minute(router: DataFrame) -> DataFrame:
    """Per (router, minute): mode, msgs/s in and out, seconds reported."""
    from pyspark.sql import functions as F

    seconds = (F.unix_millis("window_end") - F.unix_millis("window_start")) / 1000.0
    return (
        router.withColumn("minute", F.date_trunc("minute", "window_start"))
        .withColumn("_s", seconds)
        .groupBy("router", "minute")
        .agg(
            F.first("mode").alias("mode"),
            F.sum("deliveries_in").alias("deliveries_in"),
            F.sum("deliveries_out").alias("deliveries_out"),
            F.sum("_s").alias("seconds"),
        )
        .where(F.col("seconds") > 0)
        .select(
            "router",
            "mode",
            "minute",
            (F.col("deliveries_in") / F.col("seconds")).alias("in_per_s"),
            (F.col("deliveries_out") / F.col("seconds")).alias("out_per_s"),
            "seconds",
        )
        .orderBy("router", "minute")
    )


def load_summary(per_minute: DataFrame) -> DataFrame:
    """Per router: minutes seen, p50/p95/max of msgs/s in and out over them."""
    from pyspark.sql import functions as F

    return (
        per_minute.groupBy("router")
        .agg(
            F.first("mode").alias("mode"),
            F.count("*").alias("minutes"),
            F.expr("percentile(in_per_s, 0.5)").alias("in_p50_per_s"),
            F.expr("percentile(in_per_s, 0.95)").alias("in_p95_per_s"),
            F.max("in_per_s").alias("in_max_per_s"),
            F.expr("percentile(out_per_s, 0.5)").alias("out_p50_per_s"),
            F.expr("percentile(out_per_s, 0.95)").alias("out_p95_per_s"),
            F.max("out_per_s").alias("out_max_per_s"),
        )
        .orderBy(F.desc("in_max_per_s"), "router")
    )
