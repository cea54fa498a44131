"""Processes a test starts, each in a session of its own and stopped as a whole group.

A process a test starts may start more (the bench its routers and clients, a router its config
checker); killing only the one the test knows of leaves the rest running for as long as the
machine is up, holding ports and CPU. So every process starts as the leader of a new session,
and stopping it leaves nothing of its process group running. Every one is also recorded, so
that what a test leaves running on a path it did not foresee (a timeout raised in the middle of
a start, an interrupted run) is killed when the test ends (conftest.py) and, at the latest,
when pytest exits.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Collection, Sequence
from typing import Any

STOP_TIMEOUT = 10.0

_STARTED: list[subprocess.Popen[Any]] = []


def start(args: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
    """`subprocess.Popen` in a new session, recorded until its group is stopped."""
    proc: subprocess.Popen[Any] = subprocess.Popen(args, start_new_session=True, **popen)
    _STARTED.append(proc)
    return proc


def group_members(pgid: int) -> list[int]:
    """The processes of group `pgid` still running: a zombie counts as gone, for one
    reparented to an init that does not reap (as in some containers) stays a zombie."""
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
        state, _ppid, pgrp = stat[stat.rindex(b")") + 2 :].split(b" ", 3)[:3]
        if int(pgrp) == pgid and state != b"Z":
            members.append(int(entry.name))
    return members


def group_alive(proc: subprocess.Popen[Any]) -> bool:
    """Whether anything of `proc`'s group still runs."""
    return bool(group_members(proc.pid))


def _signal_group(proc: subprocess.Popen[Any], sig: int) -> None:
    # The group outlives its leader while any member runs: signal it even once the leader is
    # reaped (its id cannot be given to another process while the group exists).
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def stop_group(
    proc: subprocess.Popen[Any], sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT
) -> int:
    """`sig` to `proc`, which stops what it started in its own way (a router its config
    checker, the bench its routers); after it has gone, or `timeout`, SIGKILL to whatever of
    its group is left. Returns its exit code; safe to call on a group already gone."""
    if proc.poll() is None:
        proc.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout)
    if proc.poll() is None or group_alive(proc):
        _signal_group(proc, signal.SIGKILL)
        deadline = time.monotonic() + STOP_TIMEOUT
        while group_alive(proc) and time.monotonic() < deadline:
            time.sleep(0.01)  # SIGKILLed processes take a moment to go
    proc.wait()
    with contextlib.suppress(ValueError):
        _STARTED.remove(proc)
    return proc.returncode


def finish(
    proc: subprocess.Popen[Any], timeout: float, input: str | bytes | None = None
) -> tuple[Any, Any]:
    """`proc.communicate(timeout=...)`, and its group stopped on the way out however that goes
    (TimeoutExpired, a pytest-timeout or a KeyboardInterrupt raised while waiting)."""
    try:
        return proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        stop_group(proc)
        # What it said before it was stopped, for the failure to show (as subprocess.run's).
        with contextlib.suppress(subprocess.TimeoutExpired, ValueError):
            e.output, e.stderr = proc.communicate(timeout=STOP_TIMEOUT)
        raise
    finally:
        stop_group(proc)


def run(args: Sequence[str], timeout: float, **popen: Any) -> subprocess.CompletedProcess[Any]:
    """`subprocess.run(args, capture_output=True, timeout=...)`, in a session of its own whose
    whole group is stopped on every path: `subprocess.run` kills only the process it started,
    and a timed-out bench left its routers running."""
    proc = start(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)
    out, err = finish(proc, timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def recorded() -> set[subprocess.Popen[Any]]:
    """The processes started and not stopped through `stop_group` so far."""
    return set(_STARTED)


def stop_all(keep: Collection[subprocess.Popen[Any]] = ()) -> list[str]:
    """Stops every recorded group still alive but those of `keep` (a module's shared router),
    with SIGKILL: it was due to stop already. Returns the command lines of those it stopped."""
    left = [p for p in list(_STARTED) if p not in keep and (p.poll() is None or group_alive(p))]
    for proc in left:
        stop_group(proc, signal.SIGKILL, timeout=STOP_TIMEOUT)
    _STARTED[:] = [p for p in _STARTED if p in keep]
    return [" ".join(str(a) for a in p.args) for p in left]


atexit.register(stop_all)
