"""The one-router benchmark: 1 sender → 1 receiver through one router, against peer-to-peer.

Each scenario measures throughput with the sender unthrottled, then latency with the sender
held at half that throughput: latency at saturation only measures queue depth, so a fixed
fraction of what the path can carry is what makes latencies comparable between paths. Each
intermediary scenario gets a fresh router, so its idle and peak RSS and CPU are its own.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.clients import (
    BENCH_DIR,
    HOST,
    BenchError,
    Clients,
    Transfer,
    free_port,
    running,
    transfer,
    wait_for_port,
)

REPO_DIR = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
BODY_BYTES = 100  # fixed by bench/c/bench.h
LATENCY_LOAD = 0.5  # latency is measured at this fraction of the path's throughput
# Ours against qdrouterd at qdrouterd's latency load is decided over this many rounds, each
# side's median: the scenarios' own runs first, then a fresh qdrouterd and a fresh router in
# turn. One paced run each moves with the machine more than the two differ (here, ours p50
# 107 µs against qdrouterd's 140 in one run, 173 against 154 in the next).
LATENCY_ROUNDS = 3
# Without qdrouterd in the run: router-unsettled msgs/s and idle RSS, on the project's 2-core
# machine. With it: at least qdrouterd's rate (one worker thread and default alike), and an
# idle RSS at most this many times qdrouterd's.
TARGET_MSGS_PER_S = 100_000
TARGET_IDLE_RSS_MIB = 60
TARGET_IDLE_OVER_QDROUTERD = 1.3
IDLE_SETTLE_S = 1.0  # lets start-up allocations finish before idle RSS is read
# Bounds on waits for a condition (listening, converged, a management reply): only a hung
# run reaches them, and a loaded machine (a CI runner, the test suite beside a CPU hog) makes
# every step many times slower than on an idle one.
START_TIMEOUT_S = 120.0
MIB = 1024 * 1024
# A qdrouterd binary (its Python modules and libraries found through the environment, as its
# own install sets them up) to measure beside ours in the same run; no registry ships one, so
# without it the suite says so and measures ours alone.
QDROUTERD = os.environ.get("QDROUTERD")
# qdrouterd with one worker thread (the fair match for our one event loop), and its default.
QDROUTERD_WORKERS = {"qdrouterd1": 1, "qdrouterd": None}


@dataclass(frozen=True, slots=True)
class Scenario:
    """A path (`via` None for peer-to-peer, else "router" or "broker") and a settlement mode."""

    via: str | None
    presettled: bool

    @property
    def name(self) -> str:
        settlement = "presettled" if self.presettled else "unsettled"
        return f"{self.via or 'p2p'}-{settlement}"


def scenarios(via: str) -> list[Scenario]:
    """qdrouterd first (one worker thread, then its default) when QDROUTERD names one and `via`
    is the router, so the router's latency can also be taken at qdrouterd's loads; then the
    peer-to-peer baseline, then through `via`."""
    paths: list[str | None] = [None, via]
    if QDROUTERD and via == "router":
        paths = [*QDROUTERD_WORKERS, *paths]
    return [Scenario(path, presettled) for path in paths for presettled in (False, True)]


def qdrouterd_config(port: int, workers: int | None) -> str:
    """A standalone qdrouterd with one anonymous listener: the same job as `--listen`."""
    threads = f"    workerThreads: {workers}\n" if workers else ""
    return (
        f"router {{\n    mode: standalone\n    id: bench\n{threads}}}\n"
        f"listener {{\n    host: {HOST}\n    port: {port}\n    role: normal\n"
        "    authenticatePeer: no\n    saslMechanisms: ANONYMOUS\n}\n"
    )


def proc_cpu_seconds(pid: int) -> float:
    """CPU time of the process's threads. From the scheduler's runtime where the kernel shows
    it (/proc/<pid>/task/*/sched, nanoseconds): utime and stime count clock ticks (10 ms), and
    a short run's router may spend less than one. Else from those ticks."""
    total, seen = 0.0, False
    for sched in Path(f"/proc/{pid}/task").glob("*/sched"):
        try:
            text = sched.read_text()
        except OSError:
            continue  # a thread that ended meanwhile
        for line in text.splitlines():
            if line.startswith("se.sum_exec_runtime"):
                total += float(line.partition(":")[2]) / 1000  # ms
                seen = True
    if seen:
        return total
    # utime and stime, fields 14 and 15 of /proc/<pid>/stat, cover all of the process's
    # threads; the command name (field 2) may hold spaces, so count from after it.
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_status_mib(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == key:
            return int(value.split()[0]) * 1024 / MIB
    raise BenchError(f"/proc/{pid}/status has no {key}")


@contextmanager
def _intermediary(
    via: str, clients: Clients, log: Path
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = free_port()
    if via == "router":
        command = [sys.executable, "-m", "router", "--id", "bench", "--listen", f"{HOST}:{port}"]
    elif via in QDROUTERD_WORKERS and QDROUTERD:
        config = log.with_suffix(".conf")
        config.write_text(qdrouterd_config(port, QDROUTERD_WORKERS[via]))
        command = [QDROUTERD, "-c", str(config)]
    elif clients.broker is not None:
        command = [str(clients.broker), HOST, str(port)]
    else:
        raise BenchError("the broker stand-in was not built")
    with (
        log.open("wb") as out,
        running(command, stdout=out, stderr=subprocess.STDOUT, cwd=REPO_DIR) as proc,
    ):
        try:
            wait_for_port(proc, port, via, START_TIMEOUT_S)
            yield proc, port
        except BenchError as e:
            raise BenchError(f"{e}; see {log}") from e


def _transfer(
    scenario: Scenario, clients: Clients, port: int | None, count: int, rate: float
) -> Transfer:
    return transfer(clients, port=port, count=count, rate=rate, presettled=scenario.presettled)


def latency_plan(full: Transfer, count: int, latency_seconds: float) -> tuple[float, int]:
    """The offered load for the latency run and its message count: `latency_seconds` of
    traffic, or `count` messages if fewer, so slow paths do not stretch the run."""
    load = LATENCY_LOAD * full.receiver["msgs_per_s"]
    return load, max(2, min(count, int(load * latency_seconds)))


def shortfall_notes(name: str, scenario: dict[str, Any]) -> list[str]:
    """Notes for messages that did not arrive in a scenario's throughput and latency runs:
    pre-settled ones dropped, unsettled ones released (or otherwise not accepted) back to the
    sender, which does not resend them."""
    what = (
        "pre-settled messages dropped"
        if scenario["settlement"] == "presettled"
        else "unsettled messages not accepted (released; the bench does not resend them)"
    )
    notes = []
    for run_name in ("throughput", "latency"):
        run = scenario[run_name]
        missing = run["messages"] - run["received"]
        if missing > 0:
            notes.append(
                f"{name}: {missing:,} of {run['messages']:,} {what} in the {run_name} run."
            )
    return notes


def rate_cells(scenario: dict[str, Any]) -> str:
    """The msgs/s, latency load, p50 and p99 cells of a scenario's table row."""
    t, lat = scenario["throughput"], scenario["latency"]
    return (
        f"{cell(t['msgs_per_s'])} | {cell(lat['offered_msgs_per_s'])} "
        f"| {cell(lat['p50_us'])} | {cell(lat['p99_us'])}"
    )


def summary(t: Transfer) -> dict[str, Any]:
    return {
        "messages": t.sender["sent"],
        "received": t.receiver["received"],
        # unsettled only: outcomes other than accepted (a router network releases under load)
        "not_accepted": t.sender["not_accepted"],
        "elapsed_s": t.receiver["elapsed_s"],
        "msgs_per_s": round(t.receiver["msgs_per_s"]),
        "sender_cpu_s": t.sender["cpu_s"],
        "receiver_cpu_s": t.receiver["cpu_s"],
    }


def _identity(scenario: Scenario) -> dict[str, str]:
    return {
        "path": scenario.via or "p2p",
        "settlement": "presettled" if scenario.presettled else "unsettled",
    }


def latency_result(paced: Transfer, load: float) -> dict[str, Any]:
    return {
        **summary(paced),
        "offered_msgs_per_s": round(load),
        "p50_us": paced.receiver["latency_p50_us"],
        "p99_us": paced.receiver["latency_p99_us"],
        "max_us": paced.receiver["latency_max_us"],
    }


def _result(scenario: Scenario, full: Transfer, paced: Transfer, load: float) -> dict[str, Any]:
    return {
        **_identity(scenario),
        "throughput": summary(full),
        "latency": latency_result(paced, load),
        "intermediary": None,
    }


def run_scenario(
    scenario: Scenario,
    clients: Clients,
    count: int,
    latency_seconds: float,
    log_dir: Path,
    other_loads: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Measures one scenario; an intermediary's CPU is counted over the throughput run only,
    its peak RSS over the whole scenario. `other_loads`: more latency runs, at these offered
    loads by name (another router's latency load, to compare at the same load)."""
    if scenario.via is None:
        full = _transfer(scenario, clients, None, count, 0)
        load, latency_count = latency_plan(full, count, latency_seconds)
        return _result(
            scenario, full, _transfer(scenario, clients, None, latency_count, load), load
        )
    with _intermediary(scenario.via, clients, log_dir / f"{scenario.name}.log") as (proc, port):
        time.sleep(IDLE_SETTLE_S)
        idle_rss = proc_status_mib(proc.pid, "VmRSS")
        cpu_start, started = proc_cpu_seconds(proc.pid), time.monotonic()
        full = _transfer(scenario, clients, port, count, 0)
        cpu, wall = proc_cpu_seconds(proc.pid) - cpu_start, time.monotonic() - started
        load, latency_count = latency_plan(full, count, latency_seconds)
        result = _result(
            scenario, full, _transfer(scenario, clients, port, latency_count, load), load
        )
        result["latency_at"] = {
            name: latency_result(_transfer(scenario, clients, port, latency_count, other), other)
            for name, other in (other_loads or {}).items()
        }
        if proc.poll() is not None:
            raise BenchError(f"{scenario.via} exited with code {proc.returncode}")
        peak_rss = proc_status_mib(proc.pid, "VmHWM")
    result["intermediary"] = {
        "cpu_s": round(cpu, 2),
        "cpu_us_per_msg": round(cpu / full.receiver["received"] * 1e6, 2),
        "cpu_percent": round(100 * cpu / wall, 1),
        "idle_rss_mib": round(idle_rss, 1),
        "peak_rss_mib": round(peak_rss, 1),
    }
    return result


def _paced_run(
    scenario: Scenario, clients: Clients, load: float, messages: int, log: Path
) -> dict[str, Any]:
    """One latency run at `load` through a fresh intermediary."""
    with _intermediary(scenario.via or "", clients, log) as (_, port):
        time.sleep(IDLE_SETTLE_S)
        return latency_result(_transfer(scenario, clients, port, messages, load), load)


def _percentiles(latency: dict[str, Any]) -> dict[str, float]:
    return {"p50_us": latency["p50_us"], "p99_us": latency["p99_us"]}


def latency_comparison(load: float, rounds: list[dict[str, dict[str, float]]]) -> dict[str, Any]:
    """Each side's median p50 and p99 over the rounds (each round {"router": …, "qdrouterd":
    …}); met when neither of ours is above qdrouterd's."""
    medians = {
        side: {key: statistics.median(r[side][key] for r in rounds) for key in ("p50_us", "p99_us")}
        for side in ("router", "qdrouterd")
    }
    ours, theirs = medians["router"], medians["qdrouterd"]
    return {
        "offered_msgs_per_s": round(load),
        "rounds": rounds,
        **medians,
        "met": all(ours[key] <= theirs[key] for key in ours),
    }


def compare_latency(
    results: dict[str, Any], clients: Clients, rounds: int, log_dir: Path
) -> dict[str, Any]:
    """Ours against each qdrouterd of the same settlement, at that qdrouterd's latency load:
    the scenarios' runs are the first round, `rounds` - 1 more alternate fresh processes."""
    ran = results["scenarios"]
    comparisons: dict[str, Any] = {}
    for presettled in (False, True):
        ours = Scenario("router", presettled)
        at = ran.get(ours.name, {}).get("latency_at", {})
        for path in QDROUTERD_WORKERS:
            theirs = Scenario(path, presettled)
            if theirs.name not in at:
                continue
            first = ran[theirs.name]["latency"]
            load, messages = first["offered_msgs_per_s"], first["messages"]
            pairs = [{"router": _percentiles(at[theirs.name]), "qdrouterd": _percentiles(first)}]
            name = f"{ours.name} at {theirs.name}'s latency load"
            try:
                for n in range(2, rounds + 1):
                    print(f"bench: {name}, round {n} of {rounds} ...", file=sys.stderr, flush=True)
                    pairs.append(
                        {
                            side: _percentiles(
                                _paced_run(
                                    sc, clients, load, messages, log_dir / f"{sc.name}-{n}.log"
                                )
                            )
                            for side, sc in (("qdrouterd", theirs), ("router", ours))
                        }
                    )
            except BenchError as e:
                comparisons[f"{ours.name}/{theirs.name}"] = {"error": str(e)}
                continue
            comparisons[f"{ours.name}/{theirs.name}"] = latency_comparison(load, pairs)
    return comparisons


def _git_commit() -> str | None:
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_DIR, capture_output=True, text=True
    )
    return head.stdout.strip() if head.returncode == 0 else None


def _uncommitted_router_changes() -> list[str] | None:
    """Files of the router itself that differ from the commit: the numbers measured them.
    Read-only: no optional locks, so it never refreshes the index under a concurrent git."""
    status = subprocess.run(
        ["git", "--no-optional-locks", "status", "--porcelain", "--", "router"],
        cwd=REPO_DIR,
        capture_output=True,
        text=True,
    )
    if status.returncode != 0:
        return None
    return [line[3:] for line in status.stdout.splitlines()]


def router_modules() -> str:
    """How the routers run the modules every message passes through (setup.py)."""
    spec = importlib.util.find_spec("router.core.engine")
    origin = spec.origin if spec is not None else None
    return "Python source" if origin is None or origin.endswith(".py") else "compiled with mypyc"


def process_router_modules(pid: int) -> str:
    """What a running router process actually loaded: its compiled modules or not."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    return "compiled with mypyc" if "native__mypyc" in maps else "Python source"


def machine_info(clients: Clients) -> dict[str, Any]:
    """What the numbers depend on besides the code, so results from two runs can be compared."""
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    models = [line.partition(":")[2].strip() for line in cpuinfo if line.startswith("model name")]
    return {
        "cpu_model": models[0] if models else platform.processor(),
        "nproc": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "python_qpid_proton": importlib.metadata.version("python-qpid-proton"),
        "proton_c": clients.proton_c_version,
        "git_commit": _git_commit(),
        "uncommitted_router_changes": _uncommitted_router_changes(),
        "router_modules": router_modules(),
        # Anything else running on two cores moves the numbers; this says whether it did.
        "load_average_1m": round(os.getloadavg()[0], 2),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _targets(results: dict[str, Any]) -> dict[str, Any]:
    ran = {n: s for n, s in results["scenarios"].items() if "error" not in s}
    router = [s for s in ran.values() if s["path"] == "router"]
    unsettled = [s["throughput"]["msgs_per_s"] for s in router if s["settlement"] == "unsettled"]
    idle = [s["intermediary"]["idle_rss_mib"] for s in router]
    rate = unsettled[0] if unsettled else None
    worst_idle = max(idle) if idle else None
    qd_rates = [
        s["throughput"]["msgs_per_s"]
        for n, s in ran.items()
        if s["path"] in QDROUTERD_WORKERS and s["settlement"] == "unsettled"
    ]
    qd_idle = [
        s["intermediary"]["idle_rss_mib"] for s in ran.values() if s["path"] in QDROUTERD_WORKERS
    ]
    rate_target, rate_basis = TARGET_MSGS_PER_S, "fixed"
    if qd_rates:
        rate_target, rate_basis = max(qd_rates), "qdrouterd's best unsettled rate in this run"
    compared = [c for c in results.get("latency_comparison", {}).values() if "error" not in c]
    ratios = [c["router"][k] / c["qdrouterd"][k] for c in compared for k in ("p50_us", "p99_us")]
    worst_latency = round(max(ratios), 2) if ratios else None
    idle_target, idle_basis = TARGET_IDLE_RSS_MIB, "fixed"
    if qd_idle:
        idle_target = round(TARGET_IDLE_OVER_QDROUTERD * min(qd_idle), 1)
        idle_basis = f"{TARGET_IDLE_OVER_QDROUTERD} times qdrouterd's idle RSS in this run"
    return {
        "router_unsettled_msgs_per_s": {
            "target": rate_target,
            "basis": rate_basis,
            "measured": rate,
            "met": None if rate is None else rate >= rate_target,
        },
        "router_idle_rss_mib": {
            "target": idle_target,
            "basis": idle_basis,
            "measured": worst_idle,
            "met": None if worst_idle is None else worst_idle <= idle_target,
        },
        "router_latency_over_qdrouterd": {
            "target": 1.0,
            "basis": "ours over qdrouterd's p50 and p99 at qdrouterd's latency load, each the "
            "median of the rounds; the worst of those ratios",
            "measured": worst_latency,
            "met": None if worst_latency is None else worst_latency <= 1.0,
        },
    }


def _progress(outcome: dict[str, Any]) -> str:
    if "error" in outcome:
        return f"failed: {outcome['error']}"
    t, lat = outcome["throughput"], outcome["latency"]
    return (
        f"{t['msgs_per_s']:,} msgs/s; at {lat['offered_msgs_per_s']:,} msgs/s "
        f"p50 {lat['p50_us']:,.0f} us, p99 {lat['p99_us']:,.0f} us"
    )


def run(
    clients: Clients,
    chosen: list[Scenario],
    *,
    via: str,
    count: int,
    latency_seconds: float,
    log_dir: Path,
    latency_rounds: int = LATENCY_ROUNDS,
) -> dict[str, Any]:
    """Runs the chosen scenarios in order; a failed one is recorded with its error and the
    rest still run, so a broken router does not hide the baseline. Then the latency
    comparison with qdrouterd, if both ran, over `latency_rounds` rounds."""
    results: dict[str, Any] = {
        "benchmark": "one-router",
        "machine": machine_info(clients),
        "config": {
            "via": via,
            "messages": count,
            "body_bytes": BODY_BYTES,
            "latency_load_fraction": LATENCY_LOAD,
            "latency_max_seconds": latency_seconds,
            "latency_rounds": latency_rounds,
        },
        "scenarios": {},
    }
    for scenario in chosen:
        print(f"bench: {scenario.name} ...", file=sys.stderr, flush=True)
        # The router's latency also at each qdrouterd's latency load measured before it.
        settlement = _identity(scenario)["settlement"]
        other_loads = {
            name: s["latency"]["offered_msgs_per_s"]
            for name, s in results["scenarios"].items()
            if scenario.via == "router"
            and name in {f"{path}-{settlement}" for path in QDROUTERD_WORKERS}
            and "error" not in s
        }
        try:
            outcome = run_scenario(scenario, clients, count, latency_seconds, log_dir, other_loads)
        except BenchError as e:
            outcome = {**_identity(scenario), "error": str(e)}
        print(f"bench: {scenario.name}: {_progress(outcome)}", file=sys.stderr, flush=True)
        results["scenarios"][scenario.name] = outcome
    results["latency_comparison"] = compare_latency(results, clients, latency_rounds, log_dir)
    results["targets"] = _targets(results)
    return results


def commit_label(m: dict[str, Any]) -> str:
    label = f"commit {m['git_commit'] or 'unknown'}"
    if m.get("uncommitted_router_changes"):
        label += " plus uncommitted router changes"
    if m.get("router_modules"):
        label += f", router modules {m['router_modules']}"
    return label


def cell(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def verdict(met: bool | None) -> str:
    return "not measured" if met is None else "met" if met else "not met"


def markdown(results: dict[str, Any]) -> str:
    """Renders results as the Markdown table docs/benchmark.md quotes."""
    m, config = results["machine"], results["config"]
    via = config["via"]
    lines = [
        f"1 sender → 1 receiver, {config['body_bytes']}-byte bodies, {config['messages']:,} "
        f"messages; latency at {config['latency_load_fraction']:.0%} of each path's "
        "throughput, one-way.",
        f"{m['cpu_model']}, {m['nproc']} CPUs, Linux {m['kernel']}, Python {m['python']}, "
        f"Proton C {m['proton_c']}, python-qpid-proton {m['python_qpid_proton']}, "
        f"{commit_label(m)}, {m['date'][:10]}, "
        f"load average {m['load_average_1m']:.2f} at start.",
        "",
        f"| scenario | msgs/s | latency load msgs/s | p50 µs | p99 µs | {via} CPU µs/msg "
        f"| {via} CPU % | idle RSS MiB | peak RSS MiB |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    notes = []
    for name, s in results["scenarios"].items():
        if "error" in s:
            lines.append(f"| {name} | failed | | | | | | | |")
            notes.append(f"{name} failed: {s['error']}")
            continue
        i = s["intermediary"] or {}
        lines.append(
            f"| {name} | {rate_cells(s)} "
            f"| {cell(i.get('cpu_us_per_msg'), 1)} | {cell(i.get('cpu_percent'))} "
            f"| {cell(i.get('idle_rss_mib'), 1)} | {cell(i.get('peak_rss_mib'), 1)} |"
        )
        notes += shortfall_notes(name, s)
    targets = _targets(results)  # from the scenarios: results of older runs render as today's
    rate, idle = targets["router_unsettled_msgs_per_s"], targets["router_idle_rss_mib"]
    latency = targets["router_latency_over_qdrouterd"]
    if rate["measured"] is not None or idle["measured"] is not None:
        notes.append(
            f"Targets: router-unsettled ≥ {rate['target']:,} msgs/s ({rate['basis']}): "
            f"{cell(rate['measured'])} ({verdict(rate['met'])}); "
            f"idle RSS ≤ {idle['target']} MiB ({idle['basis']}): {cell(idle['measured'], 1)} "
            f"({verdict(idle['met'])})"
            + (
                f"; latency ≤ {latency['target']:.1f} times qdrouterd's ({latency['basis']}): "
                f"{cell(latency['measured'], 2)} ({verdict(latency['met'])})."
                if latency["measured"] is not None
                else "."
            )
        )
    notes += qdrouterd_notes(results)
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


def qdrouterd_notes(results: dict[str, Any]) -> list[str]:
    """Ours against qdrouterd in the same run, or why there is no such comparison."""
    if results["config"]["via"] != "router":
        return []
    ran = results["scenarios"]
    if not any(name.startswith("qdrouterd") for name in ran):
        return ["qdrouterd not measured in this run (set QDROUTERD to a qdrouterd binary)."]
    notes = []
    for settlement in ("unsettled", "presettled"):
        router = ran.get(f"router-{settlement}", {})
        ours = router.get("throughput", {}).get("msgs_per_s")
        for path in QDROUTERD_WORKERS:
            name = f"{path}-{settlement}"
            theirs = ran.get(name, {}).get("throughput", {}).get("msgs_per_s")
            if ours and theirs:
                ratio = ours / theirs
                notes.append(f"router-{settlement} / {name}: {ratio:.2f} times.")
    for key, c in results.get("latency_comparison", {}).items():
        ours_name, _, theirs_name = key.partition("/")
        if "error" in c:
            notes.append(f"{ours_name} at {theirs_name}'s latency load failed: {c['error']}")
            continue
        per_round = "; ".join(
            f"{r['router']['p50_us']:,.0f}/{r['router']['p99_us']:,.0f} vs "
            f"{r['qdrouterd']['p50_us']:,.0f}/{r['qdrouterd']['p99_us']:,.0f}"
            for r in c["rounds"]
        )
        notes.append(
            f"{ours_name} at {theirs_name}'s latency load ({c['offered_msgs_per_s']:,} msgs/s), "
            f"medians of {len(c['rounds'])} rounds: p50 {c['router']['p50_us']:,.0f} µs, p99 "
            f"{c['router']['p99_us']:,.0f} µs; {theirs_name}: p50 "
            f"{c['qdrouterd']['p50_us']:,.0f} µs, p99 {c['qdrouterd']['p99_us']:,.0f} µs "
            f"(p50/p99 µs per round, ours vs theirs: {per_round})."
        )
    return notes
