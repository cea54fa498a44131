"""A state directory's console process as ``routernet console``, ``down`` and ``status`` see
it: its pid file, URL file and log, starting it in the background (``console --detach``, what
``make run`` does) and stopping it (``down`` does, first). The console itself is
router_operator/console/; this is only its process, so the backend needs none of it.

A console in the foreground writes the same files, so ``down`` stops it too. Its pid counts
only while /proc shows that process serving this state directory.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

from router_operator.local.terminate import exited, terminate

STOP_TIMEOUT = 5.0
START_TIMEOUT = 30.0


class ConsoleStartError(Exception):
    """The background console did not come up; the text says why, with its log's tail."""


def pid_path(state_dir: Path) -> Path:
    return state_dir / "console" / "console.pid"


def url_path(state_dir: Path) -> Path:
    return state_dir / "console" / "url"


def log_path(state_dir: Path) -> Path:
    return state_dir / "logs" / "console.log"


def _started(pid: int) -> str | None:
    """When the process started (clock ticks since boot, /proc/<pid>/stat field 22): with the
    pid, it names one process, never a later one given the same pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]


def _is_console(pid: int, started: str | None) -> bool:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it was ours and has exited
    return started is not None and _started(pid) == started


def running_pid(state_dir: Path) -> int | None:
    try:
        pid_text, started = pid_path(state_dir).read_text().split()
        pid = int(pid_text)
    except (OSError, ValueError):
        return None
    return pid if _is_console(pid, started) else None


def running_url(state_dir: Path) -> str | None:
    if running_pid(state_dir) is None:
        return None
    with contextlib.suppress(OSError):
        return url_path(state_dir).read_text().strip() or None
    return None


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def serving(state_dir: Path, url: str) -> None:
    """Called by the console once it listens: its pid and URL for ``down`` and ``--detach``."""
    _write(url_path(state_dir), url + "\n")
    _write(pid_path(state_dir), f"{os.getpid()} {_started(os.getpid())}\n")


def served(state_dir: Path) -> None:
    """Called by the console as it stops."""
    for path in (pid_path(state_dir), url_path(state_dir)):
        path.unlink(missing_ok=True)


def start(state_dir: Path, args: list[str], timeout: float = START_TIMEOUT) -> str:
    """``routernet console`` with ``args`` in a session of its own; its URL once it serves."""
    state_dir = state_dir.resolve()
    url_path(state_dir).unlink(missing_ok=True)
    out_path = log_path(state_dir)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "router_operator.cli.main",
        "console",
        "--state-dir",
        str(state_dir),
        *args,
    ]
    with out_path.open("ab") as out:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )
    started = _started(proc.pid)  # the fork's start time: an exec keeps it
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            url = url_path(state_dir).read_text().strip()
            if url:
                return url
        if exited(proc.pid):
            break
        time.sleep(0.05)
    else:
        terminate({"console": proc.pid}, lambda _, p: _is_console(p, started), STOP_TIMEOUT)
    tail = out_path.read_text(errors="replace").strip().splitlines()[-1:]
    raise ConsoleStartError(f"the console did not start: {' '.join(tail) or 'no output'}")


def stop(state_dir: Path, timeout: float = STOP_TIMEOUT) -> bool:
    """SIGTERM, SIGKILL after ``timeout``; whether one was running."""
    pid = running_pid(state_dir)
    if pid is not None:
        started = _started(pid)
        terminate({"console": pid}, lambda _, p: _is_console(p, started), timeout)
    served(state_dir)
    return pid is not None
