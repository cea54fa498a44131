"""The pipeline benchmark: `analyze` over 10M synthetic flow records against DuckDB.

Generates the dataset once (bench/build/pipeline-<rows>/, reused while its spec matches),
then, in one run: DuckDB's traffic-matrix, address-stats and load-per-minute queries over the
raw Parquet files (the baseline, deduplicated by record_id like analyze); Spark in this
process: `compact` (the once-per-hour rollups, timed on their own), analyze over raw records
and over rollups, each cold then warm (second run, same session); one-shot `python -m
pipeline analyze` in a new process (JVM start included), whose java child's peak RSS
(VmHWM) is read from /proc. Writes bench/results/pipeline.json.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.one_router import RESULTS_DIR

BUILD = Path(__file__).resolve().parent / "build"
REPO = Path(__file__).resolve().parent.parent
ROWS = 10_000_000


def dataset(rows: int) -> Path:
    from pipeline.synthetic import Spec, generate

    path = BUILD / f"pipeline-{rows}"
    marker = path / "_spec.json"
    spec = Spec(flow_rows=rows)
    if marker.exists() and json.loads(marker.read_text()) == {"rows": rows, "seed": spec.seed}:
        return path
    shutil.rmtree(path, ignore_errors=True)
    started = time.monotonic()
    generate(path, spec)
    print(f"bench: generated {rows:,} rows in {time.monotonic() - started:.1f} s", file=sys.stderr)
    marker.write_text(json.dumps({"rows": rows, "seed": spec.seed}))
    return path


def duckdb_queries(path: Path) -> dict[str, float]:
    import duckdb

    from router.telemetry.schema import LATENCY_BUCKETS

    con = duckdb.connect()
    flow = f"read_parquet('{path}/flow/*/*/*.parquet')"
    router = f"read_parquet('{path}/router/*/*/*.parquet')"
    hist = ", ".join(f"sum(latency_hist[{i + 1}]) b{i}" for i in range(LATENCY_BUCKETS))
    dedup = f"(SELECT * FROM {flow} QUALIFY row_number() OVER (PARTITION BY record_id) = 1)"
    started = time.monotonic()
    con.execute(
        f"CREATE TEMP TABLE totals AS SELECT address, ingress_router, egress_router,"
        f" sum(deliveries) d, sum(bytes) b, sum(accepted) a, sum(released) r,"
        f" sum(rejected) j, sum(modified) m, {hist} FROM {dedup} GROUP BY ALL"
    )
    con.execute("SELECT * FROM totals ORDER BY d DESC").fetchall()  # traffic matrix
    con.execute(
        f"SELECT address, sum(d), {', '.join(f'sum(b{i})' for i in range(LATENCY_BUCKETS))}"
        " FROM totals GROUP BY address"
    ).fetchall()  # address stats
    con.execute(
        f"SELECT router, date_trunc('minute', window_start) m, sum(deliveries_in) /"
        f" sum(epoch(window_end) - epoch(window_start)) FROM (SELECT DISTINCT ON (record_id) *"
        f" FROM {router}) GROUP BY ALL"
    ).fetchall()  # load per minute
    return {"seconds": time.monotonic() - started}


def _peak_java_rss(pid: int, stop: threading.Event, out: dict[str, float]) -> None:
    while not stop.is_set():
        for child in Path("/proc").iterdir():
            if not child.name.isdigit():
                continue
            try:
                if str(pid) != (child / "stat").read_text().rpartition(")")[2].split()[1]:
                    continue
                for line in (child / "status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        mib = int(line.split()[1]) / 1024
                        out["java_peak_rss_mib"] = max(out.get("java_peak_rss_mib", 0), mib)
            except OSError:
                continue
        stop.wait(0.2)


def one_shot(path: Path, raw: bool) -> dict[str, float]:
    args = [
        sys.executable,
        "-m",
        "pipeline",
        "analyze",
        str(path),
        "--output",
        str(BUILD / "pipeline-out"),
        "--no-plots",
        "--quiet",
        "--master",
        "local[2]",
    ]
    started = time.monotonic()
    proc = subprocess.Popen(
        [*args, *(["--raw"] if raw else [])],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    out: dict[str, float] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_peak_java_rss, args=(proc.pid, stop, out))
    watcher.start()
    code = proc.wait(timeout=1800)
    stop.set()
    watcher.join()
    out["seconds"] = time.monotonic() - started
    out["exit"] = code
    return out


def run(rows: int = ROWS) -> dict[str, Any]:
    from pipeline.analyze import analyze
    from pipeline.rollup import ROLLUP_DIR, compact
    from pipeline.session import spark_session

    path = dataset(rows)
    shutil.rmtree(path / ROLLUP_DIR, ignore_errors=True)
    results: dict[str, Any] = {
        "benchmark": "pipeline",
        "rows": rows,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "nproc": os.cpu_count(),
    }
    results["duckdb"] = duckdb_queries(path)
    results["spark_one_shot_raw"] = one_shot(path, raw=True)
    spark = spark_session("local[2]", "bench", progress=False)
    for name in ("raw_cold", "raw_warm"):
        started = time.monotonic()
        analyze(spark, path, use_rollups=False)
        results[f"spark_{name}"] = {"seconds": time.monotonic() - started}
    started = time.monotonic()
    results["compact"] = {"seconds": time.monotonic() - started, **compact(spark, path)}
    results["compact"]["seconds"] = time.monotonic() - started
    for name in ("rollup_cold", "rollup_warm"):
        started = time.monotonic()
        analyze(spark, path)
        results[f"spark_{name}"] = {"seconds": time.monotonic() - started}
    spark.stop()
    results["spark_one_shot_rollup"] = one_shot(path, raw=False)
    base = results["duckdb"]["seconds"]
    for key, value in results.items():
        if key.startswith("spark_"):
            value["ratio_to_duckdb"] = round(value["seconds"] / base, 2)
            value["records_per_s"] = round(rows / value["seconds"])
    results["duckdb"]["records_per_s"] = round(rows / base)
    return results


def main() -> int:
    rows = int(os.environ.get("BENCH_PIPELINE_ROWS", ROWS))
    results = run(rows)
    out = RESULTS_DIR / "pipeline.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
