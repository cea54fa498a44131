"""Autoscaling end to end on this machine: `routernet up` with an autoscaled Router, reliable
traffic from `routernet send` ramping up and down, `routernet receive` consuming on every
router. The Router scales out while the load is high, back in once it has dropped and the
stabilization window has passed, with traffic still flowing through the routers that leave,
and every message sent is accepted exactly once by a consumer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.network

ROUTER = """\
apiVersion: routernet.io/v1alpha1
kind: Router
metadata: {name: hub}
spec:
  replicas: 1
  autoscaling:
    minReplicas: 1
    maxReplicas: 3
    targets: {messagesPerSecond: 100}
    behavior:
      scaleDown: {stabilizationWindowSeconds: 4}
"""
# msgs/s over seconds: up to 500 (5x the target on one router), held, then down to 30 and held
# while the routers that are no longer needed drain and go. Small rates: the test shares two
# cores with the others, whose timers must not starve.
RAMP = "0:100,3:500,14:500,16:30,34:30"
SEND_SECONDS = 34


def routernet(*args: str) -> list[str]:
    return [sys.executable, "-m", "router_operator.cli.main", *args]


def replicas(state: Path) -> tuple[int | None, int]:
    """What the autoscaler has in force, and how many routers of the state are running."""
    try:
        scaled = json.loads((state / "autoscaling.json").read_text())["routers"]["hub"]
    except (OSError, ValueError, KeyError):
        scaled = {}
    pids = state / "pids"
    running = 0
    for pid_file in pids.glob("hub-*.pid") if pids.is_dir() else ():
        try:
            os.kill(int(pid_file.read_text()), 0)
        except (OSError, ValueError):
            continue
        running += 1
    return scaled.get("replicas"), running


def summary(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


@pytest.mark.timeout(180)
def test_a_router_scales_out_and_back_in_losing_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (tmp_path / "hub.yaml").write_text(ROUTER)
    env = {**os.environ, "ROUTERNET_AUTOSCALE_SECONDS": "1"}
    timeline: list[tuple[float, int | None, int]] = []
    try:  # `down` whatever happens: a failed `up` may have started routers too
        up = subprocess.run(
            routernet(
                "up", "--no-collector", "--state-dir", str(state), str(tmp_path / "hub.yaml")
            ),
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert up.returncode == 0, up.stderr
        assert "autoscaler: started" in up.stdout
        received = tmp_path / "received.json"
        sent = tmp_path / "sent.json"
        receiver = subprocess.Popen(
            routernet(
                "receive",
                "load",
                "--state-dir",
                str(state),
                "--idle",
                "8",
                "--summary",
                str(received),
            ),
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "receive.log").open("w"),
        )
        time.sleep(1)  # the consumer attached before the first message
        sender = subprocess.Popen(
            routernet(
                "send",
                "load",
                "--state-dir",
                str(state),
                "--ramp",
                RAMP,
                "--duration",
                str(SEND_SECONDS),
                "--summary",
                str(sent),
            ),
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "send.log").open("w"),
        )
        start = time.monotonic()
        try:
            while sender.poll() is None and time.monotonic() - start < SEND_SECONDS + 60:
                timeline.append((round(time.monotonic() - start, 1), *replicas(state)))
                time.sleep(0.5)
            assert sender.wait(timeout=1) == 0, (tmp_path / "send.log").read_text()[-2000:]
            assert receiver.wait(timeout=30) == 0, (tmp_path / "receive.log").read_text()[-2000:]
        finally:
            for proc in (sender, receiver):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        deadline = time.monotonic() + 30
        while replicas(state) != (1, 1) and time.monotonic() < deadline:
            time.sleep(0.5)
        final = replicas(state)
    finally:
        subprocess.run(routernet("down", "--state-dir", str(state)), timeout=60, check=False)
    log = (state / "logs" / "autoscaler.log").read_text()
    assert max(r for _, r, _ in timeline if r is not None) == 3, (timeline, log)
    assert max(n for _, _, n in timeline) == 3, timeline
    assert final == (1, 1), (timeline, log)
    assert "1 -> 3" in log or "1 -> 2" in log, log
    # Scaled in while messages still flowed through the routers that left.
    scaled_in = [t for t, r, _ in timeline if r == 1 and t > 10]
    assert scaled_in and scaled_in[0] < SEND_SECONDS, timeline
    out, got = summary(sent), summary(received)
    assert out["unresolved"] == 0 and out["rejected"] == 0, out
    assert out["accepted"] == out["sent"] > 5_000, out
    assert got["distinct"] == out["sent"], (got, out)
    assert got["duplicates"] == 0, got
