"""The pipeline's CLI on bad input: one line on stderr, exit code 2, no traceback, and no
JVM started for any of it. Also the synthetic generator's layout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.dataset import arrow_schema
from pipeline.synthetic import Spec, generate

REPO = Path(__file__).resolve().parent.parent


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def _one_line_error(ran: subprocess.CompletedProcess[str], *words: str) -> None:
    assert ran.returncode == 2, ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1, ran.stderr
    assert "Traceback" not in ran.stderr
    for word in words:
        assert word in lines[0]


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dataset = tmp_path_factory.mktemp("small")
    generate(dataset, Spec(flow_rows=3_000, hours=2, addresses=50, hubs=2, edges=3))
    return dataset


def test_synthetic_layout_and_schema(small: Path) -> None:
    files = sorted(small.glob("*/date=*/hour=*/*.parquet"))
    assert {f.parts[-4] for f in files} == {"flow", "router"}
    for f in files:
        kind = f.parts[-4]
        assert pq.read_schema(f).equals(arrow_schema(kind), check_metadata=False)  # type: ignore[arg-type]
    flow = pq.read_table(small / "flow")
    assert flow.num_rows >= 3_000
    ids = flow["record_id"].to_pylist()
    assert len(set(ids)) == 3_000 < len(ids) or len(set(ids)) == len(ids) == 3_000


def test_synthetic_is_deterministic(tmp_path: Path) -> None:
    spec = Spec(flow_rows=500, hours=1, addresses=20)
    generate(tmp_path / "a", spec, workers=1)
    generate(tmp_path / "b", spec, workers=1)
    for f in sorted((tmp_path / "a").rglob("*.parquet")):
        other = tmp_path / "b" / f.relative_to(tmp_path / "a")
        assert pq.read_table(f).equals(pq.read_table(other))


def test_missing_dataset(tmp_path: Path) -> None:
    _one_line_error(_cli("analyze", str(tmp_path / "nope")), "does not exist")


def test_empty_dataset(tmp_path: Path) -> None:
    (tmp_path / "flow").mkdir()
    _one_line_error(_cli("analyze", str(tmp_path)), "holds no telemetry")


def test_range_with_nothing_in_it(small: Path) -> None:
    ran = _cli("analyze", str(small), "--from", "2030-01-01T00:00", "--to", "2030-01-02")
    _one_line_error(ran, "no telemetry in the range")


def test_bad_time_range(small: Path) -> None:
    ran = _cli("analyze", str(small), "--from", "2026-01-05T02:00", "--to", "2026-01-05T01:00")
    _one_line_error(ran, "bad time range")
    _one_line_error(_cli("analyze", str(small), "--from", "yesterday"), "--from", "ISO 8601")


def test_no_java(small: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(Path(sys.executable).parent)  # python, no java
    _one_line_error(_cli("analyze", str(small), env=env), "no Java")
    env["JAVA_HOME"] = str(tmp_path / "nowhere")
    _one_line_error(_cli("analyze", str(small), env=env), "no Java")


def test_routernet_analyze_reads_the_state_dir(tmp_path: Path) -> None:
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "router_operator.cli.main",
            "analyze",
            "--state-dir",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    _one_line_error(ran, str(tmp_path / "telemetry"), "does not exist")


def test_routernet_does_not_import_pyspark() -> None:
    code = "import router_operator.cli.main, sys; print('pyspark' in sys.modules)"
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert ran.stdout.strip() == "False", ran.stderr


def test_the_printed_matrix_folds_dynamic_reply_addresses_per_path() -> None:
    import pyarrow as pa

    from pipeline.cli import matrix_table
    from pipeline.dynamic_addresses import DYNAMIC_SHOWN

    def row(
        ingress: str, egress: str | None, address: str, n: int, leg: str | None = None
    ) -> dict[str, object]:
        return {
            "ingress_router": ingress,
            "egress_router": egress,
            "address": address,
            "node_leg": leg,
            "deliveries": n,
            "bytes": 10 * n,
            "accepted": n,
            "released": 0,
            "rejected": 0,
            "modified": 0,
        }

    table = pa.Table.from_pylist(
        [
            row("A", "B", "orders", 5),
            row("A", "A", "_topo/0/A/temp.x1", 3),
            row("A", "A", "_topo/0/A/temp.x2", 4),
            row("E", "E", "_edge/E/temp.y", 2),
            row("A", "A", "_topo/0/A/not-temp", 1),  # a name, not a dynamic one
            row("B", "B", "jobs", 8, "in"),  # a queue hosted on B: into it, and out of it
            row("B", "B", "jobs", 6, "out"),
            row("A", "A", "_topo/0/A/temp.q1", 9, "out"),  # a queue a client made
        ]
    )
    lines = [line.split() for line in matrix_table(table).splitlines()]
    assert lines[0][:3] == ["INGRESS", "EGRESS", "ADDRESS"]
    shown = {(r[0], r[1], " ".join(r[2:-6])): r[-6] for r in lines[1:]}
    assert shown == {
        ("A", "A", DYNAMIC_SHOWN): "7",
        ("A", "B", "orders"): "5",
        ("E", "E", DYNAMIC_SHOWN): "2",
        ("A", "A", "_topo/0/A/not-temp"): "1",
        ("B", "B", "jobs (in)"): "8",
        ("B", "B", "jobs (out)"): "6",
        ("A", "A", f"{DYNAMIC_SHOWN} (out)"): "9",
    }
