"""Many routers: networks of 16 to 64 interior routers, ours beside qdrouterd 1.19's
(QDROUTERD) in the same run, with the same topology and Dispatch's default timers (hello 1 s,
RA 30 s), all on loopback, every process stopped (bench/routers.py starts and stops them).

A control plane written in Python is where a skeptic expects a router network to fall over
first, so each scenario times what grows with the number of routers:

- start: the routers started one after the other, each once the one before listens (so that
  no connector finds its peer not there yet: qdrouterd waits 5 s before it dials again), until
  the last listens: the processes' own start, the Python interpreter's for ours;
- converge: from then until every router has every other at its shortest-path cost
  (`router.node`, polled every 50 ms over management): the last routers to start found by all
  the others, every router's paths computed again as the network grows;
- first message: a sender on the first router sends to an address nobody consumes; a receiver
  attaches on the router farthest from it: from the receiver's attach to its first message
  (the address advertised hop by hop, the sender's credit coming back, the message going out);
- reroute (rings: a line has no other path): a sender on the first router streams to a
  receiver on the farthest; kill -9 of the router in the middle of their path; from the kill
  until messages arrive again (the longest silence at the receiver from the kill on): the
  neighbors seeing the connection gone, the topology flooded, paths and the address's route
  computed again, the sender's credit flowing over the other way;
- at rest, SETTLE_S after convergence (past Dispatch's flux window, two raIntervalFluxSeconds
  after the last topology change, when RAs slow to one per raIntervalSeconds), over IDLE_S:
  CPU per router (% of one core), RSS per router, and the bytes all routers together send
  per second (their sockets' bytes_acked, as `ss -ti` counts them: the hellos and router
  advertisements).

Topologies: a ring whose router i dials i+1, with a chord from i to i+n/2 every 8 routers (a
mesh of several paths, as sites are wired); and a line, the longest paths for its size.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.clients import (
    PIPES,
    BenchError,
    Clients,
    read_trace,
    receiver_args,
    report,
    running,
    sender_args,
    wait_ready,
)
from bench.one_router import proc_cpu_seconds, proc_status_mib
from bench.routers import Router, Spec, network, shortest_costs

SETTLE_S = 10.0
IDLE_S = 30.0
"""One router advertisement period: a router sends one RA in it, and a hello every second."""
FIRST_RATE = 1_000.0
FIRST_TIMEOUT_S = 30.0
CHORD_EVERY = 8
REROUTE_RATE = 1_000.0
REROUTE_BEFORE_S, REROUTE_AFTER_S = 2.0, 8.0
"""Messages flowing before the kill, and the stream's length after it."""
REROUTE_TIMEOUT_S = 60.0

SCENARIOS = ("ring-16", "ring-32", "ring-64", "line-16", "line-32")
EXTRA_SCENARIOS = ("ring-8",)
"""Not run by default: the suite's whole path in seconds (tests/test_bench_smoke.py)."""
QUICK_SETTLE_S, QUICK_IDLE_S = 1.0, 3.0


def ring(n: int) -> tuple[Spec, ...]:
    """Routers R00..R(n-1) in a ring, plus a chord between every CHORD_EVERY-th router of the
    first half and the one opposite it. Each dials routers started before it: R(i) dials
    R(i-1), the last also R00, the chord's far end its near one."""
    ids = [f"R{i:02d}" for i in range(n)]
    dials: dict[int, list[int]] = {i: [i - 1] if i else [] for i in range(n)}
    dials[n - 1].append(0)
    for i in range(0, n // 2 if n >= CHORD_EVERY else 0, CHORD_EVERY):
        dials[i + n // 2].append(i)
    return tuple(Spec(ids[i], tuple((ids[j], 1) for j in dials[i])) for i in range(n))


def line(n: int) -> tuple[Spec, ...]:
    """R00 - R01 - ... - R(n-1): each dials the one before it."""
    ids = [f"R{i:02d}" for i in range(n)]
    return tuple(Spec(ids[i], ((ids[i - 1], 1),) if i else ()) for i in range(n))


def topology(name: str) -> tuple[Spec, ...]:
    shape, size = name.rsplit("-", 1)
    return ring(int(size)) if shape == "ring" else line(int(size))


def farthest(specs: tuple[Spec, ...], start: str) -> str:
    """The router farthest from `start` (by cost; the highest id among ties)."""
    costs = shortest_costs(specs)[start]
    return max(costs, key=lambda rid: (costs[rid], rid))


def sent_bytes(pids: set[int]) -> int:
    """Bytes the TCP sockets of processes `pids` have sent (and had acknowledged) so far."""
    out = subprocess.run(
        ["ss", "-tinpH", "state", "established"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    total = 0
    for head, info in zip(out[::2], out[1::2], strict=False):
        owner = re.search(r"pid=(\d+)", head)
        acked = re.search(r"bytes_acked:(\d+)", info)
        if owner and acked and int(owner.group(1)) in pids:
            total += int(acked.group(1))
    return total


def at_rest(routers: Mapping[str, Router], seconds: float) -> dict[str, Any]:
    """CPU, RSS and bytes written by the routers over `seconds` of doing nothing else."""
    pids = {r.proc.pid for r in routers.values()}
    before = {rid: proc_cpu_seconds(r.proc.pid) for rid, r in routers.items()}
    sent = sent_bytes(pids)
    started = time.monotonic()
    time.sleep(seconds)
    took = time.monotonic() - started
    cpu = [100 * (proc_cpu_seconds(r.proc.pid) - before[rid]) / took for rid, r in routers.items()]
    sent = sent_bytes(pids) - sent
    rss = [proc_status_mib(r.proc.pid, "VmRSS") for r in routers.values()]
    return {
        "cpu_percent_mean": round(sum(cpu) / len(cpu), 3),
        "cpu_percent_max": round(max(cpu), 3),
        "rss_mib_mean": round(sum(rss) / len(rss), 1),
        "rss_mib_max": round(max(rss), 1),
        "sent_bytes_per_s": round(sent / took),
    }


def first_message(clients: Clients, sender_at: Router, receiver_at: Router) -> float:
    """Seconds from a receiver's attach on `receiver_at` to its first message, sent from
    `sender_at` by a sender waiting there for credit."""
    address = "scale.first"
    sender = sender_args(clients, sender_at.port, 1_000_000_000, FIRST_RATE, False, address=address)
    with running(sender, **PIPES) as proc:
        time.sleep(1.0)  # attached, waiting for credit
        if proc.poll() is not None:
            raise BenchError(f"sender exited with code {proc.returncode}")
        with running(receiver_args(clients, receiver_at.port, 1, address=address), **PIPES) as r:
            got = report(r, FIRST_TIMEOUT_S, "receiver")
    if got["received"] < 1:
        raise BenchError(f"no message within {FIRST_TIMEOUT_S:.0f} s of the receiver's attach")
    return (got["first_ns"] - got["attach_ns"]) / 1e9


def path(views: Mapping[str, Mapping[str, Any]], start: str, end: str) -> list[str]:
    """The routers from `start` to `end` by each one's next hop, as their tables say (a
    neighbor's row has no nextHop: it is reached directly)."""
    hops = [start]
    while hops[-1] != end:
        row = views[hops[-1]][end]
        hops.append(row["nextHop"] or end)
        if len(hops) > len(views):
            raise BenchError(f"no loop-free path from {start} to {end} in the routing tables")
    return hops


def reroute(
    clients: Clients, sender_at: Router, receiver_at: Router, victim: Router, trace: Path
) -> float:
    """Seconds from kill -9 of `victim`, on the path from `sender_at` to `receiver_at`, until
    a stream between them arrives again: the end of the longest silence at the receiver after
    the kill. Messages the victim held are lost to the receiver (their sender is told)."""
    address = "scale.reroute"
    count = int(REROUTE_RATE * (REROUTE_BEFORE_S + REROUTE_AFTER_S))
    quiet = {**os.environ, "BENCH_RECEIVER_IDLE_MS": str(int(REROUTE_TIMEOUT_S * 1000))}
    receiving = receiver_args(clients, receiver_at.port, count, trace, address=address)
    with running(receiving, env=quiet, **PIPES) as receiver:
        wait_ready(receiver)
        sending = sender_args(clients, sender_at.port, count, REROUTE_RATE, False, address=address)
        with running(sending, **PIPES) as sender:
            time.sleep(REROUTE_BEFORE_S)
            killed = time.monotonic_ns()
            victim.proc.kill()
            victim.proc.wait()
            report(sender, REROUTE_BEFORE_S + REROUTE_AFTER_S + REROUTE_TIMEOUT_S, "sender")
        receiver.send_signal(signal.SIGTERM)
        report(receiver, REROUTE_TIMEOUT_S, "receiver")
    after = [got for _seq, _sent, got in read_trace(trace) if got > killed]
    if not after:
        raise BenchError("no message arrived after the kill")
    longest, resumed, previous = 0, after[0], killed
    for t in after:
        if t - previous > longest:
            longest, resumed = t - previous, t
        previous = t
    return (resumed - killed) / 1e9


def measure(
    clients: Clients, name: str, log_dir: Path, qdrouterd: bool = False, quick: bool = False
) -> dict[str, Any]:
    specs = topology(name)
    first, last = specs[0].id, farthest(specs, specs[0].id)
    scenario = f"{'qdrouterd-' if qdrouterd else ''}{name}"
    started = time.monotonic()
    timings: dict[str, float] = {}
    with network(
        specs, log_dir, scenario, qdrouterd=qdrouterd, sequential=True, timings=timings
    ) as (routers, views):
        time.sleep(QUICK_SETTLE_S if quick else SETTLE_S)
        rest = at_rest(routers, QUICK_IDLE_S if quick else IDLE_S)
        first_s = first_message(clients, routers[first], routers[last])
        dead = [rid for rid, r in routers.items() if r.proc.poll() is not None]
        if dead:
            raise BenchError(f"routers exited: {', '.join(dead)}")
        hops = path(views, first, last)
        victim = hops[len(hops) // 2]
        rerouted = None
        if name.startswith("ring") and len(hops) > 2:
            trace = log_dir / f"{scenario}-reroute.trace.log"
            rerouted = round(
                reroute(clients, routers[first], routers[last], routers[victim], trace), 3
            )
    return {
        "routers": len(specs),
        "links": sum(len(s.connect) for s in specs),
        "farthest": {"from": first, "to": last, "hops": shortest_costs(specs)[first][last]},
        "start_s": round(timings["listening"] - started, 2),
        "converge_s": round(timings["converged"] - timings["listening"], 2),
        "first_message_s": round(first_s, 3),
        "reroute": {"killed": victim, "path": hops} if rerouted is not None else "no other path",
        "reroute_s": rerouted,
        **rest,
    }


def config(quick: bool) -> dict[str, Any]:
    return {
        "settle_s": QUICK_SETTLE_S if quick else SETTLE_S,
        "idle_s": QUICK_IDLE_S if quick else IDLE_S,
        "first_message": {"sender_msgs_per_s": FIRST_RATE, "address": "scale.first"},
        "reroute": {
            "sender_msgs_per_s": REROUTE_RATE,
            "before_kill_s": REROUTE_BEFORE_S,
            "after_kill_s": REROUTE_AFTER_S,
            "killed": "the router in the middle of the path from the first to the farthest",
        },
        "timers": "defaults of both: helloInterval 1 s, raInterval 30 s",
        "ring": f"router i dials i+1; a chord i -> i+n/2 every {CHORD_EVERY} routers",
    }


ROWS = (
    ("start_s", "routers started one by one until the last listens, s", 2),
    ("converge_s", "from then until every router has every other, s", 2),
    ("first_message_s", "consumer attach to first message, s", 3),
    ("reroute_s", "kill -9 of a router on the path until messages arrive again, s", 3),
    ("cpu_percent_mean", "CPU at rest per router, % of a core (mean)", 2),
    ("rss_mib_mean", "RSS at rest per router, MiB (mean)", 1),
    ("sent_bytes_per_s", "bytes sent per second, all routers, at rest", 0),
)
