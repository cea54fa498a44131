"""The local backend's autoscaler as `routernet up`, `down` and `status` see it (local/backend.py):
its state file `<state>/autoscaling.json` (the replicas it set, which `up` plans with, and the
status it would write), its pid and log, and starting or stopping its process. Apart from the
process itself (local/scaler.py), which runs `up` when it scales: so the backend needs no more of
the autoscaler than this, and the autoscaler may call the backend.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from router_operator.local.terminate import terminate
from router_operator.resources.models import Router

STATE_FILE = "autoscaling.json"
STOP_TIMEOUT = 20.0
"""Long enough for a scale-in it is in the middle of (routers drain for up to 10 s)."""


def state_path(state_dir: Path) -> Path:
    return state_dir / STATE_FILE


def pid_path(state_dir: Path) -> Path:
    return state_dir / "pids" / "autoscaler.pid"


def log_path(state_dir: Path) -> Path:
    return state_dir / "logs" / "autoscaler.log"


def load(state_dir: Path) -> dict[str, dict[str, Any]]:
    """Router name -> {"replicas": int, "status": RouterStatus JSON}; empty when unreadable
    (the autoscaler writes it atomically, so that means not written yet)."""
    try:
        data = json.loads(state_path(state_dir).read_text())
    except (OSError, ValueError):
        return {}
    routers = data.get("routers") if isinstance(data, dict) else None
    return routers if isinstance(routers, dict) else {}


def replicas(state_dir: Path) -> dict[str, int]:
    """The replicas the autoscaler set, by Router: what `up` plans with."""
    return {
        name: entry["replicas"]
        for name, entry in load(state_dir).items()
        if isinstance(entry.get("replicas"), int)
    }


def save(state_dir: Path, routers: Mapping[str, Mapping[str, Any]]) -> None:
    path = state_path(state_dir)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({"routers": routers}, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def autoscaled(resources: Mapping[str, Mapping[str, Any]]) -> list[Router]:
    """The Routers of a state's resources that the operator's autoscaler scales."""
    found = []
    for stored in resources.get("Router", {}).values():
        router = Router.model_validate(stored["object"])
        if router.spec.autoscaling is not None and router.spec.autoscaling.mode == "operator":
            found.append(router)
    return found


# --- the process ------------------------------------------------------------------------------


def _is_scaler(pid: int, state_dir: Path) -> bool:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it was ours and has exited
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return False
    return "router_operator.local.scaler" in args and str(state_dir) in args


def running_pid(state_dir: Path) -> int | None:
    try:
        pid = int(pid_path(state_dir).read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _is_scaler(pid, state_dir) else None


def start(state_dir: Path) -> int:
    """Starts it in a session of its own (Ctrl-C in the terminal of `up` does not reach it)."""
    out_path = log_path(state_dir)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "router_operator.local.scaler", "--state-dir", str(state_dir)]
    with out_path.open("ab") as out:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=state_dir,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )
    path = pid_path(state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(f"{proc.pid}\n")
    tmp.replace(path)
    return proc.pid


def stop(state_dir: Path, timeout: float = STOP_TIMEOUT) -> bool:
    """SIGTERM, SIGKILL after `timeout`; whether one was running."""
    pid = running_pid(state_dir)
    if pid is not None:
        terminate({"autoscaler": pid}, lambda _, p: _is_scaler(p, state_dir), timeout)
    pid_path(state_dir).unlink(missing_ok=True)
    return pid is not None


def status(state_dir: Path) -> dict[str, Any]:
    pid = running_pid(state_dir)
    return {
        "pid": pid,
        "running": pid is not None,
        "log": str(log_path(state_dir)),
        "routers": {name: entry.get("status", {}) for name, entry in load(state_dir).items()},
    }
