"""rhea scripts (tests/rhea/*.js) as child processes, for the tests that drive rhea.

Each script takes its arguments as one JSON object and prints JSON lines: `{"event": ...}`
while it runs, then one `{"result": ...}` (or `{"error": ...}`). The scripts have their own
deadline; the tests also bound every wait and kill the process on the way out.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness import RouterProcess

RHEA_DIR = Path(__file__).resolve().parent / "rhea"
SCRIPT_TIMEOUT = 20.0


class NodeScript:
    """One rhea script as a child process; its stdout is read without blocking the test."""

    def __init__(self, script: str, log_dir: Path, **args: Any) -> None:
        node = shutil.which("node")
        if node is None or not (RHEA_DIR / "node_modules" / "rhea").is_dir():
            pytest.fail(
                "node and tests/rhea/node_modules are needed: run `make test` "
                "or `cd tests/rhea && npm ci`"
            )
        args.setdefault("timeout", SCRIPT_TIMEOUT)
        self.name = script
        self.stderr_path = log_dir / f"{script}.stderr"
        with self.stderr_path.open("wb") as stderr:
            self.proc = subprocess.Popen(
                [node, str(RHEA_DIR / script), json.dumps(args)],
                cwd=RHEA_DIR,
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
        self.lines: list[dict[str, Any]] = []
        self._partial = b""
        self._eof = False

    def poll(self) -> list[dict[str, Any]]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while not self._eof and select.select([fd], [], [], 0)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                self._eof = True
                break
            self._partial += chunk
            *done, self._partial = self._partial.split(b"\n")
            self.lines += [json.loads(line) for line in done if line.strip()]
        return self.lines

    def _failure(self) -> str | None:
        for line in self.poll():
            if "error" in line:
                return f"{self.name} failed: {line['error']}\n{self.stderr()}"
        if self._eof and self.proc.poll() is not None and self.proc.returncode != 0:
            return f"{self.name} exited with {self.proc.returncode}\n{self.stderr()}"
        return None

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def has_event(self, name: str) -> bool:
        failure = self._failure()
        assert failure is None, failure
        return any(line.get("event") == name for line in self.lines)

    def finished(self) -> bool:
        failure = self._failure()
        assert failure is None, failure
        return any("result" in line for line in self.lines) or self._eof

    def result(self) -> dict[str, Any]:
        for line in self.poll():
            if "result" in line:
                return line["result"]
        raise AssertionError(
            f"{self.name} gave no result (exit {self.proc.poll()}, printed {self.lines}, "
            f"unterminated {self._partial[:200]!r})\n{self.stderr()}"
        )

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def endpoint(router: RouterProcess) -> dict[str, Any]:
    return {"host": router.host, "port": router.port}


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """For tests with no python client: nothing to pump while waiting."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.01)
