"""`recommend`: replicas per Router and inter-router connection costs, from measured load.

Replicas: router ids are pod names `<Router>-<i>`, so pods group by Router name. A pod's load
in a minute is max(msgs/s in, msgs/s out); the Router's is the sum over its pods. Sized so the
peak minute's load, spread over the pods, puts at most `target` msgs/s on each:
`replicas = max(1, ceil(peak / target))`. The hottest single pod is reported too: far above
peak/replicas means clients are unevenly spread, which more replicas do not fix.

Per hour of the day (UTC), the same sizing for the peak that hour saw on any day of the range
(`hourly`): the daily profile with which `autoscaling.predictive` raises a Router's
minReplicas ahead of a known peak (operator/router_operator/autoscaling/predict.py).

Costs: for each pair of interior routers that traffic crossed directly (ingress and egress
both interior, so one hop in the mesh), the p50 transit latency over the range; the fastest
pair costs 1 and the others `round(p50 / fastest p50)`, so routing prefers measured-fast links.

recommendation.json (what the operator reads):

    {"apiVersion": "routernet.io/v1alpha1", "kind": "Recommendation",
     "generated": ISO, "range": {"from": ISO|null, "to": ISO|null},
     "targetMsgsPerSecond": float,
     "routers": [{"name": "core", "role": "interior", "observedReplicas": 3,
                  "peakMsgsPerSecond": float, "peakPodMsgsPerSecond": float,
                  "replicas": 2,
                  "hourly": [{"hour": 0..23 (UTC), "peakMsgsPerSecond": float,
                              "replicas": int}]}],
     "connections": [{"from": "core-0", "to": "core-1", "latencyP50Us": float,
                      "latencyP95Us": float, "samples": int, "cost": 1}]}

recommendation.yaml: the Router objects with only spec.replicas, for
`kubectl apply --server-side --field-manager=routernet-recommend -f recommendation.yaml`
(server-side apply with its own field manager sets replicas and leaves every other field to
whoever owns it).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.dataset import TimeRange, check_dataset, read
from pipeline.load import COLUMNS as ROUTER_COLUMNS
from pipeline.load import load_per_minute
from pipeline.totals import deduplicate

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

DEFAULT_TARGET = 5_000.0
GROUP = "router_group"


def _grouped(per_minute: DataFrame) -> tuple[DataFrame, DataFrame]:
    """The pods with their Router's name, and per (Router, minute) its total and hottest pod."""
    from pyspark.sql import functions as F

    load = F.greatest("in_per_s", "out_per_s")
    name = F.regexp_extract("router", r"^(.+)-\d+$", 1)
    pods = per_minute.withColumn(GROUP, F.when(name == "", F.col("router")).otherwise(name))
    per_group_minute = pods.groupBy(GROUP, "minute").agg(
        F.sum(load).alias("total"), F.max(load).alias("pod")
    )
    return pods, per_group_minute


def _replicas(peak: Column, target: float) -> Column:
    from pyspark.sql import functions as F

    return F.greatest(F.lit(1), F.ceil(peak / F.lit(target))).cast("int")


def hourly_replicas(per_minute: DataFrame, target: float) -> DataFrame:
    """Per Router and hour of the day (UTC): the peak msgs/s that hour saw on any day of the
    range, and the replicas it needs: the daily profile predictive autoscaling reads."""
    from pyspark.sql import functions as F

    _, per_group_minute = _grouped(per_minute)
    return (
        per_group_minute.groupBy(F.col(GROUP).alias("name"), F.hour("minute").alias("hour"))
        .agg(F.max("total").alias("peakMsgsPerSecond"))
        .withColumn("replicas", _replicas(F.col("peakMsgsPerSecond"), target))
        .orderBy("name", "hour")
    )


def sized(per_minute: DataFrame, target: float) -> list[dict[str, Any]]:
    """recommendation.json's `routers`: router_replicas with each Router's hourly profile."""
    replicas = [r.asDict() for r in router_replicas(per_minute, target).collect()]
    hourly: dict[str, list[dict[str, Any]]] = {}
    for row in hourly_replicas(per_minute, target).collect():
        entry = row.asDict()
        hourly.setdefault(entry.pop("name"), []).append(entry)
    for r in replicas:
        r["hourly"] = hourly.get(r["name"], [])
    return replicas


def router_replicas(per_minute: DataFrame, target: float) -> DataFrame:
    """Per Router (pod-name prefix): role, pods seen, peak total and per-pod msgs/s,
    recommended replicas."""
    from pyspark.sql import functions as F

    pods, per_group_minute = _grouped(per_minute)
    peaks = per_group_minute.groupBy(GROUP).agg(
        F.max("total").alias("peakMsgsPerSecond"), F.max("pod").alias("peakPodMsgsPerSecond")
    )
    roles = pods.groupBy(GROUP).agg(
        F.first("mode").alias("role"), F.countDistinct("router").alias("observedReplicas")
    )
    return (
        roles.join(peaks, GROUP)
        .select(
            F.col(GROUP).alias("name"),
            "role",
            "observedReplicas",
            "peakMsgsPerSecond",
            "peakPodMsgsPerSecond",
            _replicas(F.col("peakMsgsPerSecond"), target).alias("replicas"),
        )
        .orderBy("name")
    )


def connection_costs(paths: DataFrame, modes: DataFrame) -> DataFrame:
    """Costs of interior-to-interior connections from `paths` (traffic_matrix.paths) and
    `modes` (router, mode)."""
    from pyspark.sql import functions as F

    interior = modes.where(F.col("mode") == "interior").select("router").distinct()
    direct = (
        paths.where(F.col("ingress_router") != F.col("egress_router"))
        .where(F.col("latency_p50_us").isNotNull())
        .join(interior.withColumnRenamed("router", "ingress_router"), "ingress_router")
        .join(interior.withColumnRenamed("router", "egress_router"), "egress_router")
    )
    fastest = direct.agg(F.min("latency_p50_us").alias("_fastest"))
    return (
        direct.crossJoin(fastest)
        .select(
            F.col("ingress_router").alias("from"),
            F.col("egress_router").alias("to"),
            F.col("latency_p50_us").alias("latencyP50Us"),
            F.col("latency_p95_us").alias("latencyP95Us"),
            F.col("latency_samples").alias("samples"),
            F.greatest(F.lit(1), F.round(F.col("latency_p50_us") / F.col("_fastest")))
            .cast("int")
            .alias("cost"),
        )
        .orderBy("from", "to")
    )


def recommendation(
    replicas: list[dict[str, Any]],
    costs: list[dict[str, Any]],
    target: float,
    time_range: TimeRange,
) -> dict[str, Any]:
    return {
        "apiVersion": "routernet.io/v1alpha1",
        "kind": "Recommendation",
        "generated": datetime.now(UTC).isoformat(),
        "range": time_range.as_json(),
        "targetMsgsPerSecond": target,
        "routers": replicas,
        "connections": costs,
    }


def as_yaml(rec: dict[str, Any], namespace: str | None = None) -> str:
    """The Router objects with spec.replicas, one YAML document each."""
    import yaml

    lines = [
        "# Generated by `python -m pipeline recommend`: replicas per Router at a peak of"
        f" {rec['targetMsgsPerSecond']:g} msgs/s per router.",
        "# kubectl apply --server-side --field-manager=routernet-recommend -f THIS_FILE",
    ]
    documents = []
    for r in rec["routers"]:
        metadata: dict[str, Any] = {"name": r["name"]}
        if namespace:
            metadata["namespace"] = namespace
        documents.append(
            {
                "apiVersion": "routernet.io/v1alpha1",
                "kind": "Router",
                "metadata": metadata,
                "spec": {"replicas": r["replicas"]},
            }
        )
    body = yaml.safe_dump_all(documents, sort_keys=False, explicit_start=True)
    return "\n".join(lines) + "\n" + body


def compute(
    spark: Any,
    dataset: Path,
    time_range: TimeRange,
    target: float,
    use_rollups: bool = True,
) -> dict[str, Any]:
    from pipeline.rollup import plan, totals_for
    from pipeline.traffic_matrix import paths

    found = check_dataset(dataset, time_range)
    router = deduplicate(read(spark, found["router"], "router", time_range, ROUTER_COLUMNS))
    per_minute = load_per_minute(router)
    replicas = sized(per_minute, target)
    modes = router.select("router", "mode")
    costs: list[dict[str, Any]] = []
    if found["flow"]:
        the_plan = plan(dataset, found["flow"], time_range, use_rollups)
        path_table = paths(totals_for(spark, the_plan, time_range))
        costs = [r.asDict() for r in connection_costs(path_table, modes).collect()]
    return recommendation(replicas, costs, target, time_range)


def write(rec: dict[str, Any], output: Path, namespace: str | None = None) -> list[Path]:
    output.mkdir(parents=True, exist_ok=True)
    as_json = output / "recommendation.json"
    as_json.write_text(json.dumps(rec, indent=2) + "\n")
    patch = output / "recommendation.yaml"
    patch.write_text(as_yaml(rec, namespace))
    return [as_json, patch]
