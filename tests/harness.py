"""Real router processes for tests: started on loopback, always stopped, logs kept for failures."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

STARTUP_TIMEOUT = 15.0
STOP_TIMEOUT = 10.0


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_for_port(host: str, port: int, timeout: float, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"router exited with {proc.returncode} before listening")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"router did not listen on {host}:{port} within {timeout}s")


class RouterProcess:
    """`python -m router` with a generated config; `url` is its first normal listener."""

    def __init__(
        self,
        workdir: Path,
        router_id: str = "R1",
        *,
        listeners: list[dict[str, Any]] | None = None,
        addresses: list[dict[str, Any]] | None = None,
        host: str = "127.0.0.1",
        extra_args: list[str] | None = None,
        router: dict[str, Any] | None = None,
    ) -> None:
        """`router` holds more settings for the router entity (e.g. saslConfigDir)."""
        self.id = router_id
        self.host = host
        self.port = free_port(host)
        if listeners is None:
            listeners = [{}]
        self.listeners = [
            {"host": host, "port": self.port if i == 0 else free_port(host), **lst}
            for i, lst in enumerate(listeners)
        ]
        self.config = {
            "router": {"id": router_id, **(router or {})},
            "listeners": self.listeners,
            "addresses": addresses or [],
        }
        workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = workdir / f"{router_id}.json"
        self.log_path = workdir / f"{router_id}.log"
        self.extra_args = extra_args or []
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"amqp://{self.host}:{self.port}"

    def listener_url(self, index: int) -> str:
        lst = self.listeners[index]
        return f"amqp://{lst['host']}:{lst['port']}"

    def start(self) -> RouterProcess:
        self.config_path.write_text(json.dumps(self.config))
        log = self.log_path.open("ab")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "router",
                "--config",
                str(self.config_path),
                "--log-level",
                "debug",
                *self.extra_args,
            ],
            stdout=log,
            stderr=log,
            env=env,
        )
        log.close()
        wait_for_port(self.host, self.port, STARTUP_TIMEOUT, self.proc)
        return self

    def stop(self, sig: int = signal.SIGTERM) -> int:
        proc = self.proc
        if proc is None:
            return 0
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_TIMEOUT)
        return proc.returncode

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def rss_bytes(self) -> int:
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def __enter__(self) -> RouterProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
