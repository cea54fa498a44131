"""The pipeline on a real Spark standalone cluster: a master and a worker started on loopback
with the pyspark package's own launcher (`bin/spark-class`), `analyze --master spark://...`
run against it, and its tables compared with the same analysis in local mode. One test: it
starts two JVMs besides the drivers'. Every process it starts, it stops."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow.parquet as pq
import pyspark
import pytest
from harness import free_port

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
ENV = {
    **os.environ,
    "SPARK_LOCAL_IP": "127.0.0.1",
    "PYSPARK_PYTHON": sys.executable,
    "PYSPARK_DRIVER_PYTHON": sys.executable,
}


@contextmanager
def spark_daemon(log: Path, *args: str, ready: str) -> Iterator[subprocess.Popen[bytes]]:
    """A master or worker in its own session (the JVM and anything it forks), stopped after."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(SPARK_CLASS), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=ENV,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while ready not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, f"{args[0]} not ready:\n{log.read_text()[-3000:]}"
            time.sleep(0.2)
        yield proc
    finally:
        with_group = os.getpgid(proc.pid) if proc.poll() is None else None
        if with_group is not None:
            os.killpg(with_group, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def pipeline(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def rows(output: Path, table: str) -> list[dict[str, object]]:
    """A result table's rows in a stable order, floats rounded (sums may add up in another
    order on another executor)."""
    data = pq.read_table(output / table).to_pylist()
    rounded = [
        {k: round(v, 6) if isinstance(v, float) else v for k, v in row.items()} for row in data
    ]
    return sorted(rounded, key=repr)


def test_a_standalone_cluster_gives_the_same_tables_as_local_mode(tmp_path: Path) -> None:
    dataset = tmp_path / "dataset"
    pipeline("generate", str(dataset), "--rows", "20000", "--hours", "3", "--seed", "7")
    pipeline(
        "analyze",
        str(dataset),
        "--raw",
        "--quiet",
        "--master",
        "local[2]",
        "--output",
        str(tmp_path / "local"),
    )
    port = free_port()
    master = f"spark://127.0.0.1:{port}"
    with (
        spark_daemon(
            tmp_path / "master.log",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            "0",
            ready="I have been elected leader",
        ),
        spark_daemon(
            tmp_path / "worker.log",
            "org.apache.spark.deploy.worker.Worker",
            master,
            "--host",
            "127.0.0.1",
            "--webui-port",
            "0",
            "--cores",
            "2",
            "--memory",
            "2g",
            "--work-dir",
            str(tmp_path / "work"),
            ready="Successfully registered with master",
        ),
    ):
        pipeline(
            "analyze",
            str(dataset),
            "--raw",
            "--quiet",
            "--master",
            master,
            "--output",
            str(tmp_path / "cluster"),
        )
    ran = list((tmp_path / "work").glob("app-*"))
    assert ran, "the analysis ran no executor on the worker"
    for table in ("traffic_matrix", "paths", "address_stats", "load_per_minute", "router_load"):
        assert rows(tmp_path / "cluster", table) == rows(tmp_path / "local", table), table
