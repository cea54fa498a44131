"""Many addresses: COUNT mobile addresses, one consumer each, appearing on the first router of
a ring of 16 routers (networks.py), ours and qdrouterd's alike, all on loopback.

- routable: a probe on the farthest router holds a sender on every one of the addresses
  before they exist (no credit yet); from the consumers' first attach until every sender has
  credit (the address flooded in MAUs hop by hop, each router's table grown by COUNT);
- memory: RSS growth of the consumers' router (a link, its address, its advertisement) and
  of the far one (a remote address) per address;
- join: a new router dialling the far one once they all exist: from its start until its
  table has every one of them (its link-state and mobile-address requests answered);
- withdrawal: the consumers all detach at once: from their first detach until the far
  router's table has none of them left (its `router.address` rows polled over management).
"""

from __future__ import annotations

import json
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from bench.clients import HOST, BenchError, free_ports, running, wait_for_port
from bench.one_router import REPO_DIR, START_TIMEOUT_S, proc_status_mib
from bench.routers import Management, Router, Spec, management, network, router_process, wait_until
from bench.scale.networks import farthest, ring

SCENARIOS = ("addresses-16",)
EXTRA_SCENARIOS = ("addresses-8",)
"""On a ring of 8: the scenario's whole path in seconds (tests/test_bench_smoke.py)."""
COUNT = 10_000
QUICK_COUNT = 200
PREFIX = "scale.addr."
ADDRESS_TIMEOUT_S = 300.0
MEMORY_SETTLE_S = 2.0
POLL_S = 0.2
ADDRESS_TYPE = "org.apache.qpid.dispatch.router.address"
"""In full: qdrouterd answers a query for "router.address" with no rows."""


@contextmanager
def address_client(mode: str, router: Router, count: int) -> Iterator[subprocess.Popen[str]]:
    args = [sys.executable, "-m", "bench.scale.address_client", mode]
    args += [f"amqp://{HOST}:{router.port}", PREFIX, str(count)]
    with running(
        args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO_DIR
    ) as proc:
        yield proc


def said(proc: subprocess.Popen[str], event: str, timeout: float) -> int:
    """The time (ns) at which the client said `event`; the lines before it are skipped."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = _readline(proc.stdout, deadline - time.monotonic())
        if line is None:
            continue  # nothing yet: the deadline decides
        if not line:
            raise BenchError(f"address client exited (code {proc.wait()}) before {event!r}")
        told = json.loads(line)
        if told["event"] == event:
            return int(told["ns"])
    raise BenchError(f"address client did not say {event!r} within {timeout:.0f} s")


def _readline(stream: IO[str], timeout: float) -> str | None:
    """The next line ("" at the end), or None if none came within `timeout`."""
    with selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)
        if not sel.select(max(0.0, timeout)):
            return None
    return stream.readline()


def known(mgmt: Management) -> int:
    """How many of the scenario's addresses the router has a destination for (here or on
    another router)."""
    rows = mgmt.query(ADDRESS_TYPE, ["name", "remoteCount", "subscriberCount"])
    return sum(
        1
        for r in rows
        if PREFIX in (r["name"] or "") and (r["remoteCount"] or 0) + (r["subscriberCount"] or 0)
    )


def join(far: Router, count: int, log_dir: Path, scenario: str, qdrouterd: bool) -> dict[str, Any]:
    """A new router J dialling `far` once every address exists: seconds from its start until
    it listens, and from then until its table has all `count` of them."""
    spec = Spec("J", ((far.id, 1),))
    port, ir_port = free_ports(2)
    ports = {far.id: (far.port, far.inter_router_port)}
    command = router_process(spec, port, ir_port, ports, log_dir, scenario, qdrouterd)
    with (log_dir / f"{scenario}-J.log").open("wb") as log:
        started = time.monotonic()
        with running(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_DIR) as proc:
            wait_for_port(proc, port, "router J", START_TIMEOUT_S)
            listening = time.monotonic()
            with management(port) as mgmt:
                wait_until(
                    lambda: known(mgmt) >= count,
                    ADDRESS_TIMEOUT_S,
                    "router J learning them",
                    POLL_S,
                )
            learned = time.monotonic()
    return {
        "join_start_s": round(listening - started, 2),
        "join_learn_s": round(learned - listening, 2),
    }


def config(quick: bool) -> dict[str, Any]:
    return {
        "addresses": QUICK_COUNT if quick else COUNT,
        "topology": "ring-16 (networks.py)",
        "clients": "one connection of receivers, one of senders (bench/scale/address_client.py)",
        "management_poll_s": POLL_S,
    }


ROWS = (
    ("attach_s", "consumers: first attach until all attached, s", 2),
    ("routable_s", "first attach until a sender on the farthest router has credit on all, s", 2),
    ("kib_per_address_near", "memory per address, consumers' router, KiB", 2),
    ("kib_per_address_far", "memory per address, farthest router, KiB", 2),
    ("join_start_s", "a new router: start until it listens, s", 2),
    ("join_learn_s", "a new router: listening until it has every address, s", 2),
    ("withdrawn_s", "consumers all detach until the farthest router has none left, s", 2),
)


def measure(
    name: str, log_dir: Path, qdrouterd: bool = False, quick: bool = False
) -> dict[str, Any]:
    count = QUICK_COUNT if quick else COUNT
    specs = ring(int(name.rsplit("-", 1)[1]))
    first, last = specs[0].id, farthest(specs, specs[0].id)
    scenario = f"{'qdrouterd-' if qdrouterd else ''}{name}"
    with network(specs, log_dir, scenario, qdrouterd=qdrouterd, sequential=True) as (
        routers,
        _views,
    ):
        near, far = routers[first], routers[last]
        rss = {rid: proc_status_mib(routers[rid].proc.pid, "VmRSS") for rid in (first, last)}
        with address_client("probe", far, count) as probe:
            said(probe, "attached", ADDRESS_TIMEOUT_S)
            with address_client("consume", near, count) as consumer:
                attaching = said(consumer, "attaching", ADDRESS_TIMEOUT_S)
                attached = said(consumer, "attached", ADDRESS_TIMEOUT_S)
                credited = said(probe, "credited", ADDRESS_TIMEOUT_S)
                time.sleep(MEMORY_SETTLE_S)
                grown = {
                    rid: proc_status_mib(routers[rid].proc.pid, "VmRSS") - rss[rid]
                    for rid in (first, last)
                }
                joined = join(far, count, log_dir, scenario, qdrouterd)
                with management(far.port) as mgmt:
                    assert consumer.stdin is not None
                    consumer.stdin.write("detach\n")
                    consumer.stdin.flush()
                    detaching = said(consumer, "detaching", ADDRESS_TIMEOUT_S)
                    wait_until(lambda: known(mgmt) == 0, ADDRESS_TIMEOUT_S, "withdrawal", POLL_S)
                    withdrawn = time.monotonic_ns()
    return {
        "addresses": count,
        "routers": len(specs),
        "consumers_on": first,
        "probe_on": last,
        "attach_s": round((attached - attaching) / 1e9, 2),
        "routable_s": round((credited - attaching) / 1e9, 2),
        "withdrawn_s": round((withdrawn - detaching) / 1e9, 2),
        "kib_per_address_near": round(grown[first] * 1024 / count, 2),
        "kib_per_address_far": round(grown[last] * 1024 / count, 2),
        **joined,
    }
