"""Proves the benchmark harness works end to end without waiting for a real benchmark run:
the C clients compile, a peer-to-peer transfer of a few thousand messages completes in both
settlement modes, so does one through a chain of three routers, and one through a queue hosted
on another router, the host survives a kill -9 with its queue, a large message crosses a chain
whole, qdrouterd is configured as our routers are, and the results render as docs/benchmark.md's
tables."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import processes
import pytest

REPO_DIR = Path(__file__).resolve().parent.parent
COUNT = 2_000
# A bound on one bench run, not its duration: a few seconds on an idle machine, many times that
# beside a CPU hog. The bench and whatever it started are stopped as a group when it is hit
# (tests/processes.py), or when pytest-timeout's RUN_LIMIT, a little later, interrupts the test.
BENCH_TIMEOUT = 240.0
RUN_LIMIT = 300


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return _python("-m", "bench", *args)


def _python(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return processes.run([sys.executable, *args], BENCH_TIMEOUT, cwd=REPO_DIR, text=True, env=env)


def test_console_suite_loads_the_pages_of_a_simulated_network(tmp_path: Path) -> None:
    """--quick: two rounds and one load of each page, the suite's whole path (scraper, server,
    Chromium) and its table in seconds rather than the suite's minute."""
    output = tmp_path / "console.json"
    args = ["--suite", "console", "--scenarios", "console-5-routers", "--quick"]
    ran = _bench(*args, "--output", str(output))
    assert ran.returncode == 0, ran.stderr
    scenario = json.loads(output.read_text())["scenarios"]["console-5-routers"]
    assert (scenario["routers"], scenario["links"]) == (5, 7)
    assert all(page["cold_ms"] > 0 for page in scenario["pages"].values())
    assert "| 5 routers, 50 clients | 7 |" in ran.stdout


@pytest.mark.network
@pytest.mark.timeout(RUN_LIMIT)
def test_p2p_runs_and_renders(tmp_path: Path) -> None:
    output = tmp_path / "one-router.json"
    scenarios = "p2p-unsettled,p2p-presettled"
    common = ["--count", str(COUNT), "--latency-seconds", "1", "--scenarios", scenarios]
    ran = _bench(*common, "--output", str(output))
    assert ran.returncode == 0, ran.stderr

    results = json.loads(output.read_text())
    assert results["machine"]["nproc"] >= 1
    for name in scenarios.split(","):
        scenario = results["scenarios"][name]
        assert scenario["throughput"]["received"] == COUNT
        assert scenario["throughput"]["msgs_per_s"] > 0
        latency = scenario["latency"]
        assert latency["received"] == latency["messages"] >= 2
        assert 0 < latency["p50_us"] <= latency["p99_us"] <= latency["max_us"]

    rendered = _bench("--markdown", "--output", str(output))
    assert rendered.returncode == 0, rendered.stderr
    assert rendered.stdout == ran.stdout
    assert "| p2p-unsettled |" in rendered.stdout


@pytest.mark.network
@pytest.mark.timeout(RUN_LIMIT)
def test_chain_of_three_runs_and_renders(tmp_path: Path) -> None:
    output = tmp_path / "network.json"
    chains = "chain3-unsettled,chain3-unsettled-source"
    common = ["--count", str(COUNT), "--latency-seconds", "1", "--scenarios", chains]
    ran = _bench(*common, "--output", str(output))
    assert ran.returncode == 0, ran.stderr

    results = json.loads(output.read_text())
    assert results["machine"]["router_modules"] == "compiled with mypyc"
    ran_as = ("compiled with mypyc", "Python source")
    for name, modules in zip(chains.split(","), ran_as, strict=True):
        scenario = results["scenarios"][name]
        assert scenario["router_modules"] == modules
        throughput = scenario["throughput"]
        # A router network may release unsettled messages under load; none may go missing.
        assert throughput["received"] + throughput["not_accepted"] == COUNT
        assert throughput["msgs_per_s"] > 0
        assert scenario["latency"]["received"] >= 2
        assert set(scenario["routers"]) == {"A", "B", "C"}
        assert all(r["cpu_us_per_msg"] > 0 for r in scenario["routers"].values())

    rendered = _bench("--markdown", "--output", str(output))
    assert rendered.returncode == 0, rendered.stderr
    assert rendered.stdout == ran.stdout
    assert "| chain3-unsettled |" in rendered.stdout
    assert "| chain3-unsettled-source |" in rendered.stdout


def test_convergence_means_shortest_path_costs() -> None:
    """A network counts as converged only at its shortest-path costs: in the reroute square
    A reaches C through D (cost 4) before it learns the way through B (cost 2)."""
    done = _python(
        "-c",
        "import json; from bench.network import SQUARE; from bench.routers import shortest_costs; "
        "print(json.dumps(shortest_costs(SQUARE)))",
    )
    assert done.returncode == 0, done.stderr
    costs = json.loads(done.stdout)
    assert costs["A"] == {"B": 1, "C": 2, "D": 2}
    assert costs["B"]["D"] == 3


def test_the_scale_suites_topologies() -> None:
    """Each router dials only routers started before it (the suite starts them in order), the
    ring's chords shorten its paths, and the far end is the farthest router."""
    program = """
import json
from bench.routers import shortest_costs
from bench.scale import networks as scale
out = {}
for name in ("ring-8", "ring-16", "ring-64", "line-16"):
    specs = scale.topology(name)
    order = [s.id for s in specs]
    out[name] = {
        "routers": len(specs),
        "links": sum(len(s.connect) for s in specs),
        "dial_earlier": all(order.index(p) < i for i, s in enumerate(specs) for p, _ in s.connect),
        "reach": all(len(c) == len(specs) - 1 for c in shortest_costs(specs).values()),
        "far": [far := scale.farthest(specs, "R00"), shortest_costs(specs)["R00"][far]],
    }
print(json.dumps(out))
"""
    done = _python("-c", program)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert all(t["dial_earlier"] and t["reach"] for t in found.values()), found
    assert (found["ring-16"]["links"], found["ring-64"]["links"]) == (17, 68)  # 1 and 4 chords
    assert found["ring-64"]["far"][1] < 32 // 2 + 2  # a ring of 64 alone: 32 hops
    assert found["line-16"] == {**found["line-16"], "links": 15, "far": ["R15", 15]}


@pytest.mark.network
@pytest.mark.timeout(RUN_LIMIT)
def test_scale_suite_runs_and_renders(tmp_path: Path) -> None:
    output = tmp_path / "scale.json"
    scenarios = "ring-8,addresses-8"
    ran = _bench("--suite", "scale", "--scenarios", scenarios, "--quick", "--output", str(output))
    assert ran.returncode == 0, ran.stderr
    found = json.loads(output.read_text())["scenarios"]
    ours = found["ring-8"]["routernet"]
    assert (ours["routers"], ours["links"], ours["farthest"]["hops"]) == (8, 9, 2)
    assert ours["converge_s"] > 0 and 0 < ours["first_message_s"] < 30
    assert ours["reroute"]["killed"] not in ("R00", ours["farthest"]["to"])
    assert 0 < ours["reroute_s"] < 30
    assert 0 <= ours["cpu_percent_mean"] < 100 and ours["rss_mib_mean"] > 10
    assert ours["sent_bytes_per_s"] > 0  # hellos, every second
    assert "| consumer attach to first message, s |" in ran.stdout
    many = found["addresses-8"]["routernet"]
    assert (many["addresses"], many["consumers_on"], many["probe_on"]) == (200, "R00", "R06")
    assert 0 < many["attach_s"] <= many["routable_s"] < 60
    assert 0 < many["withdrawn_s"] < 60 and 0 < many["join_learn_s"] < 60
    assert "| a new router: listening until it has every address, s |" in ran.stdout


@pytest.mark.network
@pytest.mark.timeout(RUN_LIMIT)
def test_collector_suite_runs_and_renders(tmp_path: Path) -> None:
    output = tmp_path / "collector.json"
    args = ["--suite", "collector", "--count", str(COUNT), "--output", str(output)]
    ran = _bench(*args)
    assert ran.returncode == 0, ran.stderr
    results = json.loads(output.read_text())
    assert results["benchmark"] == "collector"
    for name in ("collector-unsettled", "parquet-only"):
        assert results["scenarios"][name]["records"] == COUNT
        assert results["scenarios"][name]["records_per_s"] > 0
    assert results["scenarios"]["collector-unsettled"]["files"] >= 1
    rendered = _bench("--markdown", "--output", str(output))
    assert rendered.returncode == 0 and rendered.stdout == ran.stdout
    assert "| collector-unsettled |" in rendered.stdout


@pytest.mark.network
@pytest.mark.timeout(RUN_LIMIT)
def test_hosted_queue_suite_runs_and_renders(tmp_path: Path) -> None:
    """Durable messages through a queue hosted on another router, and a kill -9 and recovery
    of the host; the RabbitMQ rows are left to the real run (a broker takes seconds to start)."""
    output = tmp_path / "nodes.json"
    scenarios = "queue-durable-network,queue-recovery"
    ran = _bench("--count", str(COUNT), "--scenarios", scenarios, "--output", str(output))
    assert ran.returncode == 0, ran.stderr

    results = json.loads(output.read_text())
    assert results["benchmark"] == "nodes"
    assert "fdatasync" in results["config"]["fsync_policy"]
    queue = results["scenarios"]["queue-durable-network"]
    assert queue["durable"] and queue["throughput"]["messages"] == COUNT
    assert queue["throughput"]["msgs_per_s"] > 0
    assert set(queue["servers"]) == {"A", "B"}
    recovery = results["scenarios"]["queue-recovery"]
    assert recovery["messages"] == COUNT
    assert 0 <= recovery["recovered_seconds_logged"] <= recovery["restart_to_recovered_logged_s"]
    assert recovery["restart_to_recovered_logged_s"] <= recovery["restart_to_first_message_s"]
    assert recovery["recovered_rss_mib"] > 0

    rendered = _bench("--markdown", "--output", str(output))
    assert rendered.returncode == 0, rendered.stderr
    assert rendered.stdout == ran.stdout
    assert "| queue-durable-network |" in rendered.stdout
    assert "store.recovered" in rendered.stdout


def test_qdrouterd_runs_first_and_is_configured_as_our_routers(tmp_path: Path) -> None:
    """With QDROUTERD set, qdrouterd's scenarios come first (ours are then also measured at
    their latency loads), and its chain routers are configured as ours: interior, one worker
    thread, anonymous client and inter-router listeners, a connector per peer at its cost."""
    code = (
        "import json; from bench import network, one_router, routers; "
        "line = routers.LINE; ports = {s.id: (1000 + i, 2000 + i) for i, s in enumerate(line)}; "
        "print(json.dumps({"
        "'one': [s.name for s in one_router.scenarios('router')], "
        "'network': list(network.SCENARIOS), "
        "'B': routers.qdrouterd_config(line[1], 1001, 2001, ports)}))"
    )
    done = _python("-c", code, env={**os.environ, "QDROUTERD": str(tmp_path / "qdrouterd")})
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["one"][:4] == [
        "qdrouterd1-unsettled",
        "qdrouterd1-presettled",
        "qdrouterd-unsettled",
        "qdrouterd-presettled",
    ]
    assert got["network"][:2] == ["qdrouterd1-chain3-unsettled", "qdrouterd1-chain3-presettled"]
    conf = got["B"]
    assert "mode: interior\n    id: B\n    workerThreads: 1\n" in conf
    assert "port: 1001\n    role: normal\n" in conf
    assert "port: 2001\n    role: inter-router\n" in conf
    # B dials A's inter-router port at cost 1, and nothing else
    assert conf.count("connector {") == 1
    assert "port: 2000\n    role: inter-router\n    cost: 1\n" in conf


@pytest.mark.network
@pytest.mark.timeout(RUN_LIMIT)
def test_large_message_scenario_runs(tmp_path: Path) -> None:
    """chain3-1gib's harness, with 8 MiB: the message arrives whole and the RSS is sampled."""
    done = _python(
        "-c",
        "import json, sys; from pathlib import Path; from bench import large; "
        "print(json.dumps(large.run(Path(sys.argv[1]), size=8 * 2**20)))",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["identical"] and result["received_bytes"] == 8 * 2**20
    assert set(result["routers"]) == {"A", "B", "C"}
    for r in result["routers"].values():
        assert 0 < r["idle_rss_mib"] <= r["peak_rss_mib"]


@pytest.mark.network
@pytest.mark.timeout(RUN_LIMIT)
def test_sizes_scenario_runs(tmp_path: Path) -> None:
    """sizes-chain3's harness with 1 and 16 MiB: each kind of sender (python-qpid-proton's
    blocking API and Proton C's, both sending whole, and the streaming one) gets each message
    through the chain intact, and each size has its timing and the routers' RSS growth."""
    done = processes.run(
        [
            sys.executable,
            "-c",
            "import json, sys; from pathlib import Path; from bench import clients, whole; "
            "print(json.dumps(whole.run('sizes-chain3', Path(sys.argv[1]), "
            "clients.build().whole_sender, (1, 16))))",
            str(tmp_path),
        ],
        BENCH_TIMEOUT,
        cwd=REPO_DIR,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["path"] == "A-B-C" and result["router"] == "routernet"
    assert set(result["sizes"]) == {"1", "16"}
    for row in result["sizes"].values():
        assert set(row) == {"whole", "whole-c", "streamed"}
        for how in row:
            assert row[how]["seconds"] > 0
            assert isinstance(row[how]["rss_over_idle_mib"], float)


def _group_commands(pgid: int) -> list[str]:
    commands = []
    for pid in processes.group_members(pgid):
        with contextlib.suppress(OSError):  # gone meanwhile
            commands.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
    return commands


def _start_filling(tmp_path: Path) -> subprocess.Popen[str]:
    """The queue-recovery scenario, started and waited on until its filling sender runs (the
    router B is up by then): a run with every kind of process it starts running."""
    bench = processes.start(
        [
            sys.executable,
            "-m",
            "bench",
            "--scenarios",
            "queue-recovery",
            "--count",
            "1000000",
            "--output",
            str(tmp_path / "nodes.json"),
        ],
        cwd=REPO_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + BENCH_TIMEOUT
    sender = f"{REPO_DIR}/bench/build/sender "
    while not any(c.startswith(sender) for c in _group_commands(bench.pid)):
        assert bench.poll() is None, bench.communicate()
        assert time.monotonic() < deadline, "the bench's sender never started"
        time.sleep(0.05)
    assert any("--id B" in c for c in _group_commands(bench.pid))
    return bench


@pytest.mark.network
@pytest.mark.timeout(RUN_LIMIT)
def test_a_bench_run_cut_short_leaves_no_process_behind(tmp_path: Path) -> None:
    """Stopped when the test's bound on it runs out, a bench run goes with every router and
    client it started; and so does one sent SIGTERM alone (a cancelled CI job): it unwinds,
    stopping them itself."""
    bench = _start_filling(tmp_path)
    with pytest.raises(subprocess.TimeoutExpired):
        processes.finish(bench, timeout=0.1)
    assert _group_commands(bench.pid) == []

    bench = _start_filling(tmp_path)
    bench.send_signal(signal.SIGTERM)
    _, err = bench.communicate(timeout=BENCH_TIMEOUT)
    assert bench.returncode == 128 + signal.SIGTERM, err
    # A router's warm config child (router/config/child.py) ends when its router's pipe closes,
    # a moment after the router: what is left must go by itself, soon.
    deadline = time.monotonic() + 10
    while (left := _group_commands(bench.pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == []
