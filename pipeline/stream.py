"""`stream`: per-router load and recommendations kept current with Structured Streaming.

A file source over `<dataset>/router/` (the collector's new Parquet files, read with the
schema from schema.py; records are few, one per router per window), deduplicated by
record_id within the watermark, aggregated per (router, minute) with a watermark on
window_end so state for minutes long closed is dropped. Each micro-batch's updated minutes are
merged into `<output>/load_per_minute.parquet`, and `<output>/recommendation.json` (the shape
recommend.py documents, without connection costs) is recomputed from it. `--once` processes
what is there and stops (trigger availableNow); otherwise a trigger every `--interval` s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline.dataset import TimeRange, spark_schema
from pipeline.recommend import recommendation, sized

WATERMARK = "2 minutes"


def minute_load(records: Any) -> Any:
    """Streaming (or batch) router records to per (router, minute) sums."""
    from pyspark.sql import functions as F

    seconds = (F.unix_millis("window_end") - F.unix_millis("window_start")) / 1000.0
    return (
        records.withWatermark("window_end", WATERMARK)
        .dropDuplicatesWithinWatermark(["record_id"])
        .groupBy("router", F.window("window_start", "1 minute").alias("w"))
        .agg(
            F.first("mode").alias("mode"),
            F.sum("deliveries_in").alias("deliveries_in"),
            F.sum("deliveries_out").alias("deliveries_out"),
            F.sum(seconds).alias("seconds"),
        )
        .select(
            "router",
            "mode",
            F.col("w.start").alias("minute"),
            "deliveries_in",
            "deliveries_out",
            "seconds",
        )
    )


class _Sink:
    """foreachBatch: merge updated minutes into the output's table, recompute recommendations."""

    def __init__(self, output: Path, target: float) -> None:
        self.output = output
        self.target = target

    def __call__(self, batch: Any, batch_id: int) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq
        from pyspark.sql import functions as F

        updates = batch.toArrow()
        path = self.output / "load_per_minute.parquet"
        if path.exists():
            old = pq.read_table(path).select(updates.column_names)
            keys = set(
                zip(updates["router"].to_pylist(), updates["minute"].to_pylist(), strict=True)
            )
            keep = [
                (r, m) not in keys
                for r, m in zip(old["router"].to_pylist(), old["minute"].to_pylist(), strict=True)
            ]
            table = pa.concat_tables([old.filter(pa.array(keep)), updates.cast(old.schema)])
        else:
            table = updates
        tmp = path.with_suffix(".tmp")
        pq.write_table(table, tmp)
        tmp.replace(path)
        spark = batch.sparkSession
        per_minute = spark.createDataFrame(table).select(
            "router",
            "mode",
            "minute",
            (F.col("deliveries_in") / F.col("seconds")).alias("in_per_s"),
            (F.col("deliveries_out") / F.col("seconds")).alias("out_per_s"),
        )
        rec = recommendation(sized(per_minute, self.target), [], self.target, TimeRange())
        rec["batch"] = batch_id
        out = self.output / "recommendation.json"
        out.with_suffix(".tmp").write_text(json.dumps(rec, indent=2) + "\n")
        out.with_suffix(".tmp").replace(out)


def start(
    spark: Any, dataset: Path, output: Path, *, once: bool, interval: float, target: float
) -> Any:
    """The running query."""
    output.mkdir(parents=True, exist_ok=True)
    source = (
        spark.readStream.schema(spark_schema("router"))
        .option("recursiveFileLookup", "true")
        .option("maxFilesPerTrigger", 1000)
        .parquet(str(dataset / "router"))
    )
    writer = (
        minute_load(source)
        .writeStream.outputMode("update")
        .option("checkpointLocation", str(output / "_checkpoint"))
        .foreachBatch(_Sink(output, target))
    )
    trigger = {"availableNow": True} if once else {"processingTime": f"{interval:g} seconds"}
    return writer.trigger(**trigger).start()
