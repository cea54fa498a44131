"""The chaos soak (bench/chaos/): its schedule and bookkeeping, then a 60-second soak of the
example network with traffic of every kind, its invariants required to hold (the 10-minute one
is `python -m bench --suite chaos`)."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import processes
import pytest

REPO_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_DIR))  # bench/ is the repository's, not installed

from bench.chaos.cut import Connection, parse  # noqa: E402
from bench.chaos.ledger import Ledger  # noqa: E402
from bench.chaos.schedule import (  # noqa: E402
    DOWN_SECONDS,
    KINDS,
    ROUTER_KINDS,
    STOP_SECONDS,
    plan,
)

ROUTERS = ["core-0", "core-1", "core-2", "edge-0", "edge-1"]


def test_a_seed_gives_the_same_schedule_and_faults_one_router_at_a_time() -> None:
    events = plan(7, 600, ROUTERS)
    assert events == plan(7, 600, ROUTERS)
    assert events != plan(8, 600, ROUTERS)
    assert {e.kind for e in events} == set(KINDS)
    assert {e.router for e in events if e.kind in ROUTER_KINDS} == set(ROUTERS)
    assert {e.router for e in events if e.kind == "cut"} <= set(ROUTERS)
    for before, after in itertools.pairwise(events):
        assert after.at >= before.at + before.seconds + 4.0 - 0.1  # back, plus a gap
    for e in events:
        if e.kind == "address":
            assert (e.router, e.seconds) == ("address", 0.0)
            continue
        if e.kind == "cut":
            assert e.seconds == 0.0
            continue
        low, high = STOP_SECONDS if e.kind == "stop" else DOWN_SECONDS
        assert low <= e.seconds <= high
        assert e.at >= 10.0 and e.at + e.seconds <= 590.0


def test_a_machine_that_cannot_cut_connections_gets_a_schedule_without_cuts() -> None:
    kinds = tuple(k for k in KINDS if k != "cut")
    events = plan(7, 600, ROUTERS, kinds=kinds)
    assert {e.kind for e in events} == set(kinds)


def test_the_sockets_of_a_router_are_read_from_ss() -> None:
    listed = (
        '0 0 127.0.0.3:45678 127.0.0.2:5673 users:(("python3",pid=1234,fd=12))\n'
        "0 0 127.0.0.1:5672 127.0.0.1:40000\n"  # no process: not ours to see
    )
    assert parse(listed) == [(Connection(("127.0.0.3", 45678), ("127.0.0.2", 5673)), 1234)]


def test_the_ledger_counts_losses_and_duplicates() -> None:
    ledger = Ledger(("anycast",))
    for _ in range(3):
        ledger.sent("anycast")
    ledger.sent("anycast", resend=True)
    for mid in ("a-0", "a-1", "a-2"):
        ledger.accepted("anycast", mid)
    ledger.received("anycast", "a-0")
    ledger.received("anycast", "a-0")
    ledger.received("anycast", "a-1")
    assert ledger.lost("anycast") == ["a-2"]
    assert ledger.summary() == {
        "anycast": {
            "sent": 4,
            "resent": 1,
            "accepted": 3,
            "delivered": 2,
            "duplicates": 1,
            "lost": 1,
        }
    }


def test_every_durable_subscription_must_get_every_message() -> None:
    ledger = Ledger(("topic",), {"topic": ("sub-a", "sub-b")})
    for mid in ("t-0", "t-1"):
        ledger.sent("topic")
        ledger.accepted("topic", mid)
        ledger.received("topic", mid, "sub-a")
    ledger.received("topic", "t-0", "sub-b")
    assert ledger.lost("topic") == ["sub-b:t-1"]
    assert ledger.summary()["topic"]["delivered"] == 2
    assert ledger.summary()["topic"]["lost"] == 1


@pytest.mark.network
@pytest.mark.xdist_group("chaos")
@pytest.mark.timeout(480)
def test_a_minute_of_faults_loses_nothing_accepted(tmp_path: Path) -> None:
    """`python -m bench --suite chaos --quick`: the soak as a user runs it, one minute."""
    output = tmp_path / "chaos.json"
    ran = processes.run(
        [sys.executable, "-m", "bench", "--suite", "chaos", "--quick", "--output", str(output)],
        420,
        cwd=REPO_DIR,
        text=True,
    )
    results = json.loads(output.read_text())["scenarios"]["soak"]
    assert ran.returncode == 0, (
        results.get("violations"),
        results.get("error"),
        ran.stderr[-2000:],
    )
    assert sum(results["events"].values()) >= 4, results["schedule"]
    for kind, counts in results["flows"].items():
        assert counts["accepted"] > 100, (kind, counts)
        assert counts["lost"] == 0, (kind, counts)
    restarted = results["events"]["kill"] + results["events"]["term"]
    assert results["recoverySeconds"]["count"] == restarted
    assert "Invariants: all held" in ran.stdout
