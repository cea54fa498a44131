"""What the tests start, they stop, whole, on every path: a router that does not listen in time
is stopped before the error is raised, and a process stopped by a timeout takes whatever it
started with it (tests/processes.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import processes
import pytest
from harness import RouterProcess

# Starts a child that outlives it unless its group is stopped, says the child's pid, and waits.
PARENT = (
    "import subprocess, sys, time; "
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
    "print(child.pid, flush=True); time.sleep(600)"
)


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return state[state.rindex(b")") + 2 :][:1] != b"Z"


@pytest.mark.network
def test_a_router_that_does_not_listen_in_time_is_stopped(tmp_path: Path) -> None:
    router = RouterProcess(tmp_path)
    with pytest.raises(TimeoutError):
        router.start(timeout=0)
    assert router.proc is not None
    assert not router.alive() and not processes.group_alive(router.proc)


@pytest.mark.network
def test_a_router_interrupted_while_starting_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As by pytest-timeout, while `with RouterProcess(...)` waits for it to listen: no
    `__exit__` follows, so the start itself must stop it."""
    router = RouterProcess(tmp_path)

    def interrupted(timeout: float = 0) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(router, "wait_listening", interrupted)
    with pytest.raises(KeyboardInterrupt), router:
        pass
    assert router.proc is not None
    assert not router.alive() and not processes.group_alive(router.proc)


def test_a_timed_out_process_is_stopped_with_what_it_started() -> None:
    proc = processes.start([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    assert running(child)
    with pytest.raises(subprocess.TimeoutExpired):
        processes.finish(proc, timeout=0.1)
    assert proc.returncode is not None
    assert not running(child) and processes.group_members(proc.pid) == []


def test_what_a_test_left_running_is_stopped_after_it() -> None:
    """conftest.py's wrapper of each test's call: anything recorded since the test began and
    still running."""
    shared = processes.recorded()
    proc = processes.start([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    stopped = processes.stop_all(keep=shared)
    assert stopped == [f"{sys.executable} -c {PARENT}"]
    assert not running(child) and not running(proc.pid)
