"""The local backend's telemetry collectors: one ``routernet-collector`` process per network,
as the operator runs one Deployment per network on Kubernetes (rendering/collector.py).

- It attaches to the client listener of the network's first interior router (by pod name; an
  edge's when a network has no interior), where telemetry from every router of the network
  arrives, and writes the Parquet dataset ``<state>/telemetry/`` (every network's collector
  writes there: file names are unique, router ids are unique in a namespace).
- ``up`` starts it after the routers listen, and restarts it when the router it attaches to
  changes; ``up --no-collector`` stops it. ``down`` stops it *after* the routers have stopped,
  so the last windows they send as they drain are written: SIGTERM makes it drain its link,
  flush and fsync before it exits.
- Pid file ``<state>/collector/<network>.pid``, log ``<state>/logs/collector-<network>.log``.
  As for routers, a pid counts only while /proc shows that process running this state
  directory's collector, so a reused pid is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from router_operator.local.terminate import exited, terminate

COLLECTOR_DIR = "collector"
DATASET_DIR = "telemetry"
ATTACHED_EVENT = "event=collector.attached"
# The collector drains its link (at most 2 s), flushes and closes (at most 2 s) on SIGTERM.
STOP_TIMEOUT = 10.0


class Pod(Protocol):
    """What a collector needs to know of a router pod (local.LocalPod)."""

    name: str
    network: str
    mode: str

    def endpoints(self, role: str) -> list[str]: ...


@dataclass(frozen=True)
class LocalCollector:
    network: str
    router: str
    """The pod it attaches to."""
    endpoint: str
    """host:port of that pod's client listener."""
    dataset: Path

    @property
    def name(self) -> str:
        return f"collector-{self.network}"

    @property
    def container_id(self) -> str:
        return f"routernet-collector-{self.network}"

    @property
    def url(self) -> str:
        return f"amqp://{self.endpoint}"

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "collector",
            "--url",
            self.url,
            "--dataset",
            str(self.dataset),
            "--id",
            self.container_id,
        ]

    def record(self) -> dict[str, Any]:
        """What the state file keeps (and status shows)."""
        return {
            "network": self.network,
            "router": self.router,
            "url": self.url,
            "dataset": str(self.dataset),
        }


def plan_collectors(state_dir: Path, pods: Iterable[Pod]) -> dict[str, LocalCollector]:
    """Network -> its collector: on the first interior pod by name that has a client listener
    (else the first such edge). Networks whose pods have no client listener get none."""
    chosen: dict[str, tuple[tuple[int, str], Pod, str]] = {}
    for pod in pods:
        endpoints = pod.endpoints("normal")
        if not endpoints:
            continue
        rank = (0 if pod.mode == "interior" else 1, pod.name)
        if pod.network not in chosen or rank < chosen[pod.network][0]:
            chosen[pod.network] = (rank, pod, endpoints[0])
    dataset = state_dir / DATASET_DIR
    return {
        network: LocalCollector(network, pod.name, endpoint, dataset)
        for network, (_, pod, endpoint) in sorted(chosen.items())
    }


def pid_path(state_dir: Path, network: str) -> Path:
    return state_dir / COLLECTOR_DIR / f"{network}.pid"


def log_path(state_dir: Path, network: str) -> Path:
    return state_dir / "logs" / f"collector-{network}.log"


def _is_collector(pid: int, state_dir: Path, network: str) -> bool:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it was ours and has exited
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return False
    dataset = str(state_dir / DATASET_DIR)
    return "collector" in args and dataset in args and f"routernet-collector-{network}" in args


def running_pid(state_dir: Path, network: str) -> int | None:
    try:
        pid = int(pid_path(state_dir, network).read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _is_collector(pid, state_dir, network) else None


def known_networks(state_dir: Path, recorded: Iterable[str]) -> list[str]:
    """Networks with a collector in the state file or a pid file (an interrupted ``up``)."""
    found = set(recorded)
    directory = state_dir / COLLECTOR_DIR
    if directory.is_dir():
        found |= {p.stem for p in directory.glob("*.pid")}
    return sorted(found)


def start(state_dir: Path, collector: LocalCollector) -> tuple[int, int]:
    """Starts it in a session of its own: its pid, and where its log stood (for
    wait_attached)."""
    log = log_path(state_dir, collector.network)
    log.parent.mkdir(parents=True, exist_ok=True)
    collector.dataset.mkdir(parents=True, exist_ok=True)
    offset = log.stat().st_size if log.exists() else 0
    with log.open("ab") as out:
        proc = subprocess.Popen(
            collector.command(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=state_dir,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )
    path = pid_path(state_dir, collector.network)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(f"{proc.pid}\n")
    tmp.replace(path)
    return proc.pid, offset


def wait_attached(
    state_dir: Path, started: Mapping[LocalCollector, tuple[int, int]], timeout: float
) -> None:
    """Until each collector just started (with its pid and log offset, from start()) logs that
    it is attached; RuntimeError saying why not (it exited: its last log line; or the
    timeout)."""
    deadline = time.monotonic() + timeout
    for c, (pid, offset) in started.items():
        log = log_path(state_dir, c.network)
        while True:
            text = log.read_text(errors="replace")[offset:]
            if ATTACHED_EVENT in text:
                break
            if exited(pid):
                last = text.strip().splitlines()[-1:] or ["(empty)"]
                raise RuntimeError(
                    f"collector of network {c.network} exited; its log ends: {last[0]}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"collector of network {c.network} did not attach to {c.url} within"
                    f" {timeout:g} s; see {log}"
                )
            time.sleep(0.05)


def stop(state_dir: Path, networks: Sequence[str], timeout: float = STOP_TIMEOUT) -> list[str]:
    """SIGTERM (drain, flush, fsync, exit), SIGKILL after ``timeout``; the pid files go.
    Returns the networks whose collector had to be killed."""
    pids = {n: pid for n in networks if (pid := running_pid(state_dir, n)) is not None}
    killed, _left = terminate(
        pids, lambda network, pid: _is_collector(pid, state_dir, network), timeout
    )
    for network in networks:
        pid_path(state_dir, network).unlink(missing_ok=True)
    return killed


def status(state_dir: Path, records: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each recorded collector: its record, pid, log, and the dataset's files so far."""
    out = []
    for network, record in sorted(records.items()):
        pid = running_pid(state_dir, network)
        dataset = Path(record["dataset"])
        files = list(dataset.rglob("part-*.parquet")) if dataset.is_dir() else []
        out.append(
            {
                "name": f"collector-{network}",
                **record,
                "pid": pid,
                "running": pid is not None,
                "log": str(log_path(state_dir, network)),
                "files": len(files),
                "bytes": sum(f.stat().st_size for f in files),
            }
        )
    return out
