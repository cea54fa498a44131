"""The one-router bench decides ours against qdrouterd's latency on each side's median over
rounds, not on one paced run each: one run each moves with the machine more than the two
differ. These check that decision and what docs/benchmark.md quotes from it, without running a
benchmark."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO_DIR = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    """bench/one_router.py: bench/ is a directory of the repository, not an installed package
    (tests/test_bench_smoke.py runs it as `python -m bench` from there)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(REPO_DIR))
        return importlib.import_module("bench.one_router")


def _round(ours: tuple[float, float], theirs: tuple[float, float]) -> dict[str, dict[str, float]]:
    return {
        "router": {"p50_us": ours[0], "p99_us": ours[1]},
        "qdrouterd": {"p50_us": theirs[0], "p99_us": theirs[1]},
    }


def test_one_bad_round_does_not_decide(bench: ModuleType) -> None:
    rounds = [
        _round((173.0, 787.0), (154.0, 1771.0)),  # behind on p50 in this round only
        _round((112.0, 300.0), (166.0, 1090.0)),
        _round((108.0, 280.0), (145.0, 690.0)),
    ]
    c = bench.latency_comparison(74_311.4, rounds)
    assert c["offered_msgs_per_s"] == 74_311
    assert c["router"] == {"p50_us": 112.0, "p99_us": 300.0}
    assert c["qdrouterd"] == {"p50_us": 154.0, "p99_us": 1090.0}
    assert c["met"] is True
    assert c["rounds"] == rounds


def test_behind_on_either_percentile_is_not_met(bench: ModuleType) -> None:
    rounds = [_round((100.0, 900.0), (150.0, 800.0)), _round((110.0, 950.0), (160.0, 700.0))]
    assert bench.latency_comparison(1000, rounds)["met"] is False


def _results(comparisons: dict[str, object]) -> dict[str, object]:
    return {
        "config": {"via": "router"},
        "scenarios": {
            "qdrouterd1-unsettled": {
                "path": "qdrouterd1",
                "settlement": "unsettled",
                "throughput": {"msgs_per_s": 148_623},
                "intermediary": {"idle_rss_mib": 21.7},
            },
        },
        "latency_comparison": comparisons,
    }


def test_target_and_notes_quote_the_medians_and_every_round(bench: ModuleType) -> None:
    c = bench.latency_comparison(
        74_311, [_round((120.0, 400.0), (150.0, 500.0)), _round((130.0, 300.0), (140.0, 600.0))]
    )
    results = _results({"router-unsettled/qdrouterd1-unsettled": c})
    target = bench._targets(results)["router_latency_over_qdrouterd"]
    # The worst ratio of the medians: p50 125 / 145.
    assert target["measured"] == round(125 / 145, 2)
    assert target["met"] is True
    notes = "\n".join(bench.qdrouterd_notes(results))
    assert "router-unsettled at qdrouterd1-unsettled's latency load (74,311 msgs/s)" in notes
    assert "medians of 2 rounds: p50 125 µs, p99 350 µs" in notes
    assert "qdrouterd1-unsettled: p50 145 µs, p99 550 µs" in notes
    assert "120/400 vs 150/500; 130/300 vs 140/600" in notes


def test_a_failed_comparison_is_said_and_not_counted(bench: ModuleType) -> None:
    results = _results({"router-presettled/qdrouterd1-presettled": {"error": "router exited"}})
    assert bench._targets(results)["router_latency_over_qdrouterd"]["met"] is None
    assert (
        "router-presettled at qdrouterd1-presettled's latency load failed: router exited"
        in bench.qdrouterd_notes(results)
    )


def test_rounds_below_one_are_refused_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--latency-rounds", "0"],
        cwd=REPO_DIR,
        capture_output=True,
        text=True,
        timeout=25,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "python -m bench: error: argument --latency-rounds: must be above 0: 0"
    )
