"""The autoscaling benchmark: how soon a Router scales out under load, and what a scale-in loses.

`routernet up` on a Router of 1 to 2 routers (500 msgs/s each; the HPA's default behaviour
but a 20 s scale-down window) with the autoscaler's default 15 s period, `routernet receive`
consuming on every router, `routernet send` sending reliably (released or modified messages
sent again) and spreading its connections over the routers as they come and go:

1. From t0, 1,500 msgs/s: three times the target on the one router. Timed from t0 to the
   first delivery the new router `hub-1` forwards (the counter on its /metrics moving), i.e.
   until it carries traffic: the autoscaler's period, the decision, `up` starting the router,
   the mesh forming and the sender connecting to it all count.
2. The load drops to 100 msgs/s and stays there while the scale-down window passes and `hub-1`
   drains and goes; then the sender stops. Lost: messages the sender never saw accepted;
   duplicates: messages the consumer got more than once. Both must be 0.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.clients import BUILD_DIR, BenchError, Clients
from bench.one_router import machine_info

SCENARIOS = ("scale-out-in",)
TARGET = 500
HIGH, LOW = 1500, 100
HIGH_SECONDS = 45.0  # long enough for a 15 s period, a router start and the mesh
LOW_SECONDS = 60.0  # the 20 s window, a period, a drain of up to 10 s, and some more
ROUTER = f"""\
apiVersion: routernet.io/v1alpha1
kind: Router
metadata: {{name: hub}}
spec:
  replicas: 1
  autoscaling:
    minReplicas: 1
    maxReplicas: 2
    targets: {{messagesPerSecond: {TARGET}}}
    behavior:
      scaleDown: {{stabilizationWindowSeconds: 20}}
"""


def _routernet(*args: str) -> list[str]:
    return [sys.executable, "-m", "router_operator.cli.main", *args]


def _forwarded(state: Path, pod: str) -> float | None:
    """The pod's deliveries in so far, or None while it is not there or not answering."""
    try:
        pods = json.loads((state / "state.json").read_text())["pods"]
        url = pods[pod]["httpEndpoint"] + "/metrics"
        with urllib.request.urlopen(url, timeout=1) as response:
            text = response.read().decode()
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for line in text.splitlines():
        if line.startswith("routernet_deliveries_total{") and 'direction="in"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def _replicas(state: Path) -> int | None:
    try:
        return int(
            json.loads((state / "autoscaling.json").read_text())["routers"]["hub"]["replicas"]
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def scale_out_in(work: Path) -> dict[str, Any]:
    state = work / "state"
    (work / "hub.yaml").write_text(ROUTER)
    end = HIGH_SECONDS + LOW_SECONDS
    ramp = f"0:{HIGH},{HIGH_SECONDS}:{HIGH},{HIGH_SECONDS + 1}:{LOW},{end}:{LOW}"
    sent, received = work / "sent.json", work / "received.json"
    procs: list[subprocess.Popen[bytes]] = []
    try:  # `down` whatever happens: a failed `up` may have started routers too
        up = subprocess.run(
            _routernet("up", "--no-collector", "--state-dir", str(state), str(work / "hub.yaml")),
            capture_output=True,
            text=True,
            timeout=60,
        )
        if up.returncode != 0:
            raise BenchError(f"routernet up: {up.stderr.strip()}")
        procs.append(
            subprocess.Popen(
                _routernet(
                    "receive",
                    "load",
                    "--state-dir",
                    str(state),
                    "--idle",
                    "10",
                    "--summary",
                    str(received),
                ),
                stdout=subprocess.DEVNULL,
                stderr=(work / "receive.log").open("wb"),
            )
        )
        time.sleep(1)
        t0 = time.monotonic()
        procs.append(
            subprocess.Popen(
                _routernet(
                    "send",
                    "load",
                    "--state-dir",
                    str(state),
                    "--ramp",
                    ramp,
                    "--duration",
                    str(end),
                    "--summary",
                    str(sent),
                ),
                stdout=subprocess.DEVNULL,
                stderr=(work / "send.log").open("wb"),
            )
        )
        carrying = scaled_in = None
        deadline = t0 + end + 60
        while procs[1].poll() is None and time.monotonic() < deadline:
            now = time.monotonic() - t0
            if carrying is None and (_forwarded(state, "hub-1") or 0) > 0:
                carrying = now
            if carrying is not None and scaled_in is None and _replicas(state) == 1:
                scaled_in = now
            time.sleep(0.2)
        if procs[1].wait(timeout=5) != 0:
            raise BenchError(f"routernet send failed: see {work / 'send.log'}")
        if procs[0].wait(timeout=30) != 0:
            raise BenchError(f"routernet receive failed: see {work / 'receive.log'}")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        subprocess.run(_routernet("down", "--state-dir", str(state)), timeout=60, check=False)
    out, got = json.loads(sent.read_text()), json.loads(received.read_text())
    return {
        "target_msgs_per_s": TARGET,
        "high_msgs_per_s": HIGH,
        "low_msgs_per_s": LOW,
        "scale_out_s": None if carrying is None else round(carrying, 1),
        "scale_in_at_s": None if scaled_in is None else round(scaled_in, 1),
        "sent": out["sent"],
        "accepted": out["accepted"],
        "resent": out["resent"],
        "lost": out["sent"] - out["accepted"] - out["rejected"],
        "received_distinct": got["distinct"],
        "duplicates": got["duplicates"],
    }


def run(clients: Clients, chosen: list[str]) -> dict[str, Any]:
    results: dict[str, Any] = {
        "benchmark": "autoscaling",
        "machine": machine_info(clients),
        "config": {
            "router": ROUTER,
            "autoscaler_period_s": float(os.environ.get("ROUTERNET_AUTOSCALE_SECONDS") or 15),
            "high_seconds": HIGH_SECONDS,
            "low_seconds": LOW_SECONDS,
        },
        "scenarios": {},
    }
    for name in chosen:
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        work = BUILD_DIR / "autoscaling"  # state, logs and summaries of the last run
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        try:
            outcome = scale_out_in(work)
        except (BenchError, OSError, ValueError, subprocess.TimeoutExpired) as e:
            outcome = {"error": str(e)}
        results["scenarios"][name] = outcome
        print(f"bench: {name}: {outcome}", file=sys.stderr, flush=True)
    return results


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "| scenario | scale-out s (load → new router carrying traffic) | scale-in at s "
        "| sent | resent | lost | duplicates |",
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    for name, s in results["scenarios"].items():
        if "error" in s:
            lines.append(f"| {name} | failed: {s['error']} | | | | | |")
            continue
        lines.append(
            f"| {name} | {s['scale_out_s']} | {s['scale_in_at_s']} | {s['sent']:,} "
            f"| {s['resent']:,} | {s['lost']} | {s['duplicates']} |"
        )
    return "\n".join(lines) + "\n"
