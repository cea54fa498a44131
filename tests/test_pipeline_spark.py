"""The Spark analyses on handmade records with known answers, sharing one session per
worker: traffic matrix, address stats (duplicates counted once, egress null undeliverable),
merged-histogram percentiles as schema.histogram_quantile reads them, rollups giving the same
answer as raw records, router load, recommend's shape, plots and report, stream --once; a
hosted queue's trips in and out and its node records."""

from __future__ import annotations

import contextlib
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.analyze import analyze, write
from pipeline.dataset import TimeRange, arrow_schema, partition_dir
from pipeline.recommend import as_yaml, compute
from pipeline.report import write_report
from pipeline.rollup import compact
from router.telemetry.schema import LATENCY_BUCKETS, columns, histogram_quantile

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]
HOUR = datetime(2026, 1, 5, 10, tzinfo=UTC)


def _hist(**buckets: int) -> list[int]:
    h = [0] * LATENCY_BUCKETS
    for k, v in buckets.items():
        h[int(k[1:])] = v
    return h


def _flow(rid: str, egress: str | None, start: datetime, **values: Any) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(columns("flow"), 0)
    row.update(
        record_id=rid,
        schema_version=1,
        router=egress or "hub-0",
        window_start=start,
        window_end=start + timedelta(seconds=10),
        address="orders",
        ingress_router="hub-0",
        egress_router=egress,
        latency_sum_us=0.0,
        latency_max_us=None,
        latency_hist=[0] * LATENCY_BUCKETS,
        node_leg=None,
    )
    row.update(values)
    return row


def _router(rid: str, name: str, start: datetime, d_in: int, d_out: int) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(columns("router"), 0)
    row.update(
        record_id=rid,
        schema_version=1,
        router=name,
        window_start=start,
        window_end=start + timedelta(seconds=30),
        mode="interior" if name.startswith("hub") else "edge",
        deliveries_in=d_in,
        deliveries_out=d_out,
        cpu_seconds=0.0,
    )
    return row


def _node(rid: str, start: datetime, **values: Any) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(columns("node"), 0)
    row.update(
        record_id=rid,
        schema_version=2,
        router="hub-0",
        window_start=start,
        window_end=start + timedelta(seconds=10),
        node="jobs",
        node_type="queue",
    )
    row.update(values)
    return row


def _write(dataset: Path, kind: str, hour: datetime, name: str, rows: list[dict[str, Any]]) -> None:
    directory = partition_dir(dataset, kind, hour)  # type: ignore[arg-type]
    directory.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=arrow_schema(kind))  # type: ignore[arg-type]
    pq.write_table(table, directory / name)


R1 = _flow(
    "r1",
    "edge-1",
    HOUR,
    deliveries=10,
    bytes=1000,
    accepted=9,
    released=1,
    latency_samples=4,
    latency_sum_us=400.0,
    latency_max_us=30.0,
    latency_hist=_hist(b5=4),
)
R2 = _flow(
    "r2",
    "edge-1",
    HOUR + timedelta(seconds=10),
    deliveries=5,
    bytes=500,
    accepted=5,
    latency_samples=2,
    latency_sum_us=300.0,
    latency_max_us=50.0,
    latency_hist=_hist(b7=2),
)
R3 = _flow("r3", None, HOUR, deliveries=3, bytes=300, released=3)
R4 = _flow(
    "r4",
    "edge-2",
    HOUR,
    deliveries=5,
    bytes=500,
    accepted=5,
    latency_samples=1,
    latency_sum_us=25.0,
    latency_max_us=25.0,
    latency_hist=_hist(b5=1),
)
LATER = _flow("r5", "edge-1", HOUR + timedelta(hours=2), deliveries=100, accepted=100)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("handmade")
    _write(d, "flow", HOUR, "part-00000.parquet", [R1, R2, R3, R4])
    _write(d, "flow", HOUR, "part-00001.parquet", [R1])  # resent after a reconnect
    _write(d, "flow", HOUR + timedelta(hours=2), "part-00000.parquet", [LATER])
    routers = [
        _router("h1", "hub-0", HOUR, 60, 30),
        _router("h2", "hub-0", HOUR + timedelta(seconds=30), 120, 60),
        _router("h2", "hub-0", HOUR + timedelta(seconds=30), 120, 60),  # duplicate
        _router("e1", "edge-1", HOUR, 30, 30),
    ]
    _write(d, "router", HOUR, "part-00000.parquet", routers)
    return d


RANGE = TimeRange(HOUR, HOUR + timedelta(hours=1))


def _by_key(table: pa.Table) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {(r["address"], r["ingress_router"], r["egress_router"]): r for r in table.to_pylist()}


def test_traffic_matrix_counts_each_record_once(spark: Any, dataset: Path) -> None:
    result = analyze(spark, dataset, RANGE)
    matrix = _by_key(result.tables["traffic_matrix"])
    assert set(matrix) == {
        ("orders", "hub-0", "edge-1"),
        ("orders", "hub-0", None),
        ("orders", "hub-0", "edge-2"),
    }
    one = matrix[("orders", "hub-0", "edge-1")]
    assert (one["deliveries"], one["bytes"], one["accepted"], one["released"]) == (15, 1500, 14, 1)
    assert one["records"] == 2
    assert one["latency_max_us"] == 50.0
    merged = _hist(b5=4, b7=2)
    assert one["latency_p50_us"] == histogram_quantile(merged, 0.5)
    assert one["latency_p95_us"] == histogram_quantile(merged, 0.95)
    lost = matrix[("orders", "hub-0", None)]
    assert (lost["deliveries"], lost["released"]) == (3, 3)


def test_address_stats(spark: Any, dataset: Path) -> None:
    [stats] = analyze(spark, dataset, RANGE).tables["address_stats"].to_pylist()
    assert stats["address"] == "orders"
    assert (stats["deliveries"], stats["undeliverable"], stats["released"]) == (20, 3, 4)
    assert stats["undeliverable_rate"] == pytest.approx(3 / 23)
    assert stats["released_rate"] == pytest.approx(4 / 23)
    assert stats["egress_routers"] == 2
    assert stats["max_egress_share"] == pytest.approx(0.75)
    assert stats["imbalance"] == pytest.approx(1.5)
    merged = _hist(b5=5, b7=2)
    assert stats["latency_hist"] == merged
    for q, column in ((0.5, "latency_p50_us"), (0.95, "latency_p95_us"), (0.99, "latency_p99_us")):
        assert stats[column] == histogram_quantile(merged, q)


def test_range_and_whole_dataset(spark: Any, dataset: Path) -> None:
    whole = analyze(spark, dataset).summary
    assert whole["deliveries"] == 120 and whole["flow_records"] == 5
    # What the data covers, for a report without --from/--to: from the first router window
    # to the end of the last flow window (LATER's, two hours on).
    assert whole["range"] == {"from": None, "to": None}
    assert whole["data_range"] == {
        "from": HOUR.isoformat(),
        "to": (HOUR + timedelta(hours=2, seconds=10)).isoformat(),
    }
    hour = analyze(spark, dataset, RANGE).summary
    assert hour["deliveries"] == 20
    assert hour["data_range"]["to"] == (HOUR + timedelta(minutes=1)).isoformat()


def test_router_load_per_minute(spark: Any, dataset: Path) -> None:
    tables = analyze(spark, dataset, RANGE).tables
    rows = {r["router"]: r for r in tables["load_per_minute"].to_pylist()}
    assert rows["hub-0"]["in_per_s"] == pytest.approx(180 / 60)
    assert rows["hub-0"]["out_per_s"] == pytest.approx(90 / 60)
    assert rows["edge-1"]["in_per_s"] == pytest.approx(1.0)
    summary = {r["router"]: r for r in tables["router_load"].to_pylist()}
    assert summary["hub-0"]["in_max_per_s"] == pytest.approx(3.0)
    assert summary["hub-0"]["minutes"] == 1


def test_rollups_answer_the_same(spark: Any, dataset: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(dataset, copy)
    raw = analyze(spark, copy, use_rollups=False).tables["traffic_matrix"]
    done = compact(spark, copy, now=HOUR + timedelta(days=2))
    assert done == {"hours": 2, "days": 1}
    rolled = analyze(spark, copy)
    assert rolled.summary["sources"] == {"day_rollups": 1, "hour_rollups": 0, "raw_hours": 0}
    assert _by_key(rolled.tables["traffic_matrix"]) == _by_key(raw)
    hour = analyze(spark, copy, RANGE)
    assert hour.summary["sources"]["hour_rollups"] == 1
    # A late file makes the hour's rollup stale: raw records answer until compacted again.
    _write(copy, "flow", HOUR, "part-late.parquet", [_flow("r9", "edge-2", HOUR, deliveries=7)])
    late = analyze(spark, copy, RANGE)
    assert late.summary["sources"]["raw_hours"] == 1
    assert late.summary["deliveries"] == 27


def test_outputs_plots_and_report(spark: Any, dataset: Path, tmp_path: Path) -> None:
    result = analyze(spark, dataset, RANGE)
    write(result, tmp_path)
    written = write_report(result, tmp_path)
    for name in ("traffic_matrix", "address_stats", "paths", "load_per_minute", "router_load"):
        assert pq.read_table(tmp_path / name).num_rows > 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["hottest_addresses"][0]["address"] == "orders"
    assert summary["undeliverable"] == 3
    for png in ("traffic_matrix.png", "router_load.png", "latency.png"):
        assert (tmp_path / "plots" / png).read_bytes()[:4] == b"\x89PNG"
    html = (tmp_path / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 3
    assert len(written) == 4


def test_the_time_printed_is_the_whole_run(
    spark: Any, dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`analyze … in N s`: the whole command, the Spark session's start included (here one
    that takes a second longer than the shared session's)."""
    import re
    import time

    from pipeline import cli

    def slow_start(args: Any, app: str) -> Any:
        time.sleep(1.0)
        return spark

    monkeypatch.setattr(cli, "_session", slow_start)
    out = tmp_path / "out"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = cli.main(["analyze", str(dataset), "--output", str(out), "--no-plots", "--quiet"])
    assert code == 0
    found = re.search(r" in ([0-9.]+) s\b", printed.getvalue())
    assert found, printed.getvalue()
    analysis = json.loads((out / "summary.json").read_text())["seconds"]
    assert float(found[1]) + 0.05 >= 1.0 + analysis  # printed to a tenth of a second


def test_recommend_shape(spark: Any, dataset: Path) -> None:
    rec = compute(spark, dataset, RANGE, target=2.0)
    assert rec["apiVersion"] == "routernet.io/v1alpha1" and rec["kind"] == "Recommendation"
    routers = {r["name"]: r for r in rec["routers"]}
    assert routers["hub"]["role"] == "interior"
    assert routers["hub"]["observedReplicas"] == 1
    assert routers["hub"]["peakMsgsPerSecond"] == pytest.approx(3.0)
    assert routers["hub"]["replicas"] == 2  # ceil(3 / 2)
    assert routers["edge"]["replicas"] == 1
    # The daily profile predictive autoscaling reads: only the hour the load was seen in.
    assert routers["hub"]["hourly"] == [
        {"hour": HOUR.hour, "peakMsgsPerSecond": pytest.approx(3.0), "replicas": 2}
    ]
    assert rec["connections"] == []  # no interior-to-interior traffic here
    import yaml

    docs = [d for d in yaml.safe_load_all(as_yaml(rec, "prod")) if d]
    assert {(d["kind"], d["metadata"]["name"], d["spec"]["replicas"]) for d in docs} == {
        ("Router", "hub", 2),
        ("Router", "edge", 1),
    }


def test_stream_once(spark: Any, dataset: Path, tmp_path: Path) -> None:
    from pipeline.stream import start

    query = start(spark, dataset, tmp_path, once=True, interval=1, target=2.0)
    query.awaitTermination(120)
    load = {r["router"]: r for r in pq.read_table(tmp_path / "load_per_minute.parquet").to_pylist()}
    assert load["hub-0"]["deliveries_in"] == 180  # the duplicate dropped
    rec = json.loads((tmp_path / "recommendation.json").read_text())
    assert {r["name"]: r["replicas"] for r in rec["routers"]} == {"hub": 2, "edge": 1}
    hourly = {r["name"]: [(h["hour"], h["replicas"]) for h in r["hourly"]] for r in rec["routers"]}
    assert hourly == {"hub": [(HOUR.hour, 2)], "edge": [(HOUR.hour, 1)]}


def test_a_hosted_queues_legs_and_node_records(spark: Any, tmp_path: Path) -> None:
    """A queue `jobs` on hub-0: producers on hub-0 and edge-1 put in, consumers on edge-1 and
    hub-0 take out. Its trips in and out stay apart in the matrix, even both on hub-0; its
    address counts what consumers got; node_stats, the summary and the report have the queue."""
    legs = {"address": "jobs", "router": "hub-0"}
    _write(
        tmp_path,
        "flow",
        HOUR,
        "part-00000.parquet",
        [
            _flow("j1", "hub-0", HOUR, **legs, node_leg="in", deliveries=4, accepted=4),
            _flow(
                "j2", "hub-0", HOUR, **legs, ingress_router="edge-1", node_leg="in", deliveries=6
            ),
            _flow(
                "j3", "edge-1", HOUR, **legs, node_leg="out", deliveries=5, accepted=4, released=1
            ),
            _flow("j4", "hub-0", HOUR, **legs, node_leg="out", deliveries=3, accepted=3),
        ],
    )
    first = _node("n1", HOUR, enqueued=10, dequeued=2, depth=8, bytes=800)
    second = _node("n2", HOUR + timedelta(seconds=10), dequeued=6, expired=1, depth=2, bytes=200)
    _write(tmp_path, "node", HOUR, "part-00000.parquet", [first, second])
    _write(tmp_path, "node", HOUR, "part-00001.parquet", [second])  # resent after a reconnect
    result = analyze(spark, tmp_path)
    matrix = {
        (r["ingress_router"], r["egress_router"], r["node_leg"]): r["deliveries"]
        for r in result.tables["traffic_matrix"].to_pylist()
    }
    assert matrix == {
        ("hub-0", "hub-0", "in"): 4,
        ("edge-1", "hub-0", "in"): 6,
        ("hub-0", "edge-1", "out"): 5,
        ("hub-0", "hub-0", "out"): 3,
    }
    (jobs,) = result.tables["address_stats"].to_pylist()
    assert (jobs["deliveries"], jobs["accepted"], jobs["released"]) == (8, 7, 1)
    assert (jobs["ingress_routers"], jobs["egress_routers"]) == (1, 2)
    (node,) = result.tables["node_stats"].to_pylist()
    assert node == {
        "node": "jobs",
        "router": "hub-0",
        "node_type": "queue",
        "enqueued": 10,
        "dequeued": 8,
        "dead_lettered": 0,
        "expired": 1,
        "depth": 2,
        "depth_max": 8,
        "bytes": 200,
        "paged": 0,
        "records": 2,
    }
    assert result.summary["nodes"][0]["node"] == "jobs"
    write_report(result, tmp_path / "out")
    html = (tmp_path / "out" / "report.html").read_text()
    assert "Hosted queues and topics" in html and "<td>jobs</td>" in html
