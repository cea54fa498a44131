"""Stopping processes this machine's network started: SIGTERM, a grace period, SIGKILL; and
telling whether one just started has already exited.

Shared by the routers and the telemetry collectors of the local backend, which differ only in
how a pid is recognised as still theirs (/proc shows the command line: a recycled pid is never
signalled).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path

KILL_WAIT = 5.0  # seconds a SIGKILLed process may take to go


def terminate(
    pids: Mapping[str, int], still_ours: Callable[[str, int], bool], timeout: float
) -> tuple[list[str], dict[str, int]]:
    """SIGTERM to each of `pids` (name -> pid), SIGKILL to those still running after `timeout`.
    Returns the names that had to be killed and those still alive after that."""
    for pid in pids.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)

    def alive() -> dict[str, int]:
        return {name: pid for name, pid in pids.items() if still_ours(name, pid)}

    deadline = time.monotonic() + timeout
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    killed = alive()
    for pid in killed.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    return sorted(killed), alive()


def exited(pid: int) -> bool:
    """Whether our child ``pid`` has exited (reaping it). /proc is no help just after the fork:
    until the exec the child's command line is ours."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return not Path(f"/proc/{pid}").exists()
    return done == pid
