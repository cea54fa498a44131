"""Real router processes for tests: started on loopback, always stopped, logs kept for failures."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import processes
import pytest

from router.config.models import ConfigError, validate_config

# Bounds on waits for a condition, not durations: a router on an idle machine listens within a
# second, but on a loaded one (a CI runner with a CPU hog beside the suite) importing Proton and
# the router's modules takes many times that. Only a router that never starts waits this long.
STARTUP_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0
# router.drainTimeoutSeconds of test routers: stopping one at the end of a test is no test of
# draining (tests/test_drain.py is), so a router left holding deliveries a test never settled
# stops within a second rather than the default ten. A test's `router` settings override it.
DRAIN_SECONDS = 1.0


def _port_block() -> range:
    """This test process's own ports: below the kernel's ephemeral range, where no client's
    source port lands, and split between pytest-xdist workers. A port the kernel hands out with
    `bind(0)` is free in this process only: another worker, or a client's ephemeral source port,
    could take it before the router binds it, and then the router exits with "address in use"
    while the test talks to whatever did take it."""
    try:
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    low = 20000 if ephemeral_low > 24000 else 1024  # 10xxx is where kubelet and its kin listen
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    size = (ephemeral_low - low) // max(workers, 1)
    return range(low + worker * size, low + (worker + 1) * size)


_BLOCK = _port_block()
_next = 0


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, from this process's block (`_port_block`), each handed
    out once before the block wraps: the kernel can hand out a port just closed again, and a
    router given one twice refuses its config."""
    global _next
    for _ in range(len(_BLOCK)):
        port = _BLOCK[_next % len(_BLOCK)]
        _next += 1
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the router binds
            try:
                s.bind((host, port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {_BLOCK}")


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
        sections: dict[str, Any] | None = None,
    ) -> None:
        """`router` holds more settings for the router entity (e.g. saslConfigDir); `sections`
        more top-level sections (connectors, linkRoutes)."""
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
            "router": {"id": router_id, "drainTimeoutSeconds": DRAIN_SECONDS, **(router or {})},
            "listeners": self.listeners,
            "addresses": addresses or [],
            **(sections or {}),
        }
        workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = workdir / f"{router_id}.json"
        self.log_path = workdir / f"{router_id}.log"
        self.extra_args = extra_args or []
        # More environment for the process (ROUTERNET_PURE=1 runs the router's plain source).
        self.env: dict[str, str] = {}
        # A command the router runs under (it ends with the router's command line).
        self.command_prefix: list[str] = []
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"amqp://{self.host}:{self.port}"

    def listener_url(self, index: int) -> str:
        lst = self.listeners[index]
        return f"amqp://{lst['host']}:{lst['port']}"

    def start(self, timeout: float = STARTUP_TIMEOUT) -> RouterProcess:
        """Launches the router and waits for it to listen; a router that does not is stopped
        before the error is raised (no `__exit__` follows a failed `__enter__`)."""
        self.launch()
        try:
            self.wait_listening(timeout)
        except BaseException:
            self.stop(signal.SIGKILL)
            raise
        return self

    def launch(self) -> None:
        """Start the process without waiting for it to listen (see `wait_listening`)."""
        self.config_path.write_text(json.dumps(self.config))
        log = self.log_path.open("ab")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        self.proc = processes.start(
            [
                *self.command_prefix,
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

    def wait_listening(self, timeout: float = STARTUP_TIMEOUT) -> None:
        assert self.proc is not None
        wait_for_port(self.host, self.port, timeout, self.proc)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """`sig` to the router's process group (with whatever it started), SIGKILL to what of
        it still runs after STOP_TIMEOUT."""
        if self.proc is None:
            return 0
        return processes.stop_group(self.proc, sig, STOP_TIMEOUT)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def rewrite_config(self) -> None:
        """Replace the config file with what `config` now says, as an operator's tool would
        (a new file renamed over the old)."""
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.config))
        os.replace(tmp, self.config_path)

    def wait_log(self, pattern: str, timeout: float = 10.0) -> str:
        """The first match of `pattern` in the log, once there."""
        deadline = time.monotonic() + timeout
        while True:
            found = re.search(pattern, self.log())
            if found:
                return found.group(0)
            assert time.monotonic() < deadline, f"no {pattern!r} in the log:\n{self.log()}"
            time.sleep(0.02)

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


# ----- networks of interior routers ----------------------------------------------------------

# Dispatch's HELLO timers; advertisements more often than its 30 s / 4 s so that a missed
# update is repaired within a test's patience (changes are still announced at once).
NETWORK_TIMERS: dict[str, Any] = {
    "helloIntervalSeconds": 1,
    "helloMaxAgeSeconds": 3,
    "raIntervalSeconds": 5,
    "raIntervalFluxSeconds": 1,
}
CONVERGE_TIMEOUT = 45.0  # a bound, as STARTUP_TIMEOUT: a network at rest converges in seconds


class RouterNetwork:
    """Interior routers joined by inter-router connections, each on a loopback address of its
    own (127.0.0.2, 127.0.0.3, ... in the order of `routers`, then of first mention in
    `edges`), as pods have theirs.

    `edges` are (dialler, listener, cost): the first router's connector dials the second's
    inter-router listener. Every router has a normal listener (`url(name)`) and an inter-router
    listener. `ids` maps a name to another router id (two routers sharing one id). Management
    queries go through the test's `world` (tests/clients.py), which `stop` keeps stepping so
    that routers closing their client connections are answered at once.

    Used as a context manager: starts every router, waits until each one's routing table shows
    all the others at their shortest-path cost (`wait_converged`), and stops every process on
    exit (SIGTERM, then SIGKILL). `kill` and `restart` act on one router; `start(names)` starts
    some only (a peer that appears later).
    """

    def __init__(
        self,
        workdir: Path,
        world: Any,
        edges: list[tuple[str, str, int]],
        *,
        routers: list[str] | None = None,
        addresses: list[dict[str, Any]] | None = None,
        settings: dict[str, Any] | None = None,
        ids: dict[str, str] | None = None,
        listener: dict[str, Any] | None = None,
    ) -> None:
        """`listener`: more settings for every router's normal listener."""
        self.world = world
        self.edges = edges
        names = list(routers or [])
        for a, b, _cost in edges:
            names += [n for n in (a, b) if n not in names]
        self.names = names
        self.ids = {n: (ids or {}).get(n, n) for n in names}
        self.routers: dict[str, RouterProcess] = {}
        for i, name in enumerate(names):
            host = f"127.0.0.{2 + i}"
            router = RouterProcess(
                workdir / name,
                self.ids[name],
                host=host,
                listeners=[{**(listener or {})}, {"role": "inter-router"}],
                addresses=addresses,
                router={"mode": "interior", **NETWORK_TIMERS, **(settings or {})},
            )
            router.config["connectors"] = []
            self.routers[name] = router
        for a, b, cost in edges:
            peer = self.routers[b]
            self.routers[a].config["connectors"].append(
                {
                    "host": peer.host,
                    "port": peer.listeners[1]["port"],
                    "role": "inter-router",
                    "cost": cost,
                }
            )
        self._mgmt: dict[str, Any] = {}

    # ----- processes ---------------------------------------------------------------------

    def __getitem__(self, name: str) -> RouterProcess:
        return self.routers[name]

    def url(self, name: str) -> str:
        return self.routers[name].url

    def start(self, names: list[str] | None = None) -> RouterNetwork:
        chosen = [self.routers[n] for n in (names or self.names)]
        for router in chosen:
            router.launch()
        for router in chosen:
            router.wait_listening()
        return self

    def alive(self) -> list[str]:
        return [n for n in self.names if self.routers[n].alive()]

    def kill(self, name: str) -> None:
        """SIGKILL: no goodbye to anyone, as a node that loses power."""
        router = self.routers[name]
        self._mgmt.pop(name, None)
        if router.proc is not None:
            processes.stop_group(router.proc, signal.SIGKILL, STOP_TIMEOUT)

    def restart(self, name: str) -> None:
        """A new process with the same id, config and ports (after `kill` or stop)."""
        self.kill(name)
        self.routers[name].start()

    def stop(self) -> None:
        """SIGTERM to every router at once, SIGKILL to the process group of any still running
        after STOP_TIMEOUT (and of any that left something of its own running)."""
        self._mgmt.clear()
        procs = [r.proc for r in self.routers.values() if r.proc is not None]
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            if self.world is not None and not self.world.closed:
                self.world.step()  # answer the routers' Close on client connections
            else:
                time.sleep(0.02)
        for proc in procs:
            processes.stop_group(proc, signal.SIGKILL, STOP_TIMEOUT)

    def __enter__(self) -> RouterNetwork:
        try:
            self.start()
            self.wait_converged()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def logs(self) -> str:
        return "\n".join(f"===== {n}\n{self.routers[n].log()}" for n in self.names)

    # ----- management --------------------------------------------------------------------

    def management(self, name: str) -> Any:
        """A `Management` client on router `name` (kept until the router is killed)."""
        from clients import Management

        mgmt = self._mgmt.get(name)
        if mgmt is None or mgmt.client.failed:
            mgmt = self._mgmt[name] = Management(self.world.connect(self.url(name)))
        return mgmt

    def query(self, name: str, entity: str, attributes: list[str] | None = None) -> Any:
        return self.management(name).query(entity, attributes)

    def reachable(self, name: str) -> set[str]:
        """Router ids `name` has a route to (router.node rows with a cost)."""
        return set(self.costs(name))

    def costs(self, name: str) -> dict[str, int]:
        """Router id -> path cost, for every router `name` has a route to."""
        rows = self.query(name, "router.node", ["id", "cost"])
        return {r["id"]: r["cost"] for r in rows[1:] if r["cost"] is not None}

    def expected_costs(self, names: list[str]) -> dict[str, dict[str, int]]:
        """The shortest-path costs between `names` over the configured edges among them."""
        from router.network.path import compute_paths

        graph: dict[str, dict[str, int]] = {n: {} for n in names}
        for a, b, cost in self.edges:
            if a in graph and b in graph:
                graph[a][b] = graph[b][a] = cost
        return {n: compute_paths(graph, n).cost for n in names}

    def wait_until(self, condition: Any, timeout: float, what: str) -> None:
        """Steps the world until `condition()` (which may query management) holds."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            self.world.run_for(0.1)

    def wait_converged(
        self, names: list[str] | None = None, timeout: float = CONVERGE_TIMEOUT
    ) -> None:
        """Until each of `names` (default: the running routers) routes to all the others at
        the cost the configured edges among them give (so no cheaper path is still to come)."""
        names = names or self.alive()
        expected = self.expected_costs(names)

        def converged() -> bool:
            return all(self.costs(n) == expected[n] for n in names)

        self.wait_until(converged, timeout, f"routers {names} to converge on {expected}")

    def wait_address(
        self, address: str, consumers: set[str], at: list[str] | None = None, timeout: float = 10
    ) -> None:
        """Until every router of `at` (default: the running ones) knows exactly `consumers`
        (router names) as the routers with consumers for mobile `address`."""
        key = "M0" + address
        names = at or self.alive()

        def known() -> bool:
            for n in names:
                rows = self.query(n, "router.address", ["key", "remoteHostRouters"])
                remote = next((r["remoteHostRouters"] for r in rows if r["key"] == key), [])
                if set(remote) != {self.ids[c] for c in consumers if c != n}:
                    return False
            return True

        self.wait_until(known, timeout, f"{address!r} to be known at {names} on {consumers}")


def write_kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig for an API server without authentication (kmock's emulator)."""
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "kmock",
                "clusters": [{"name": "kmock", "cluster": {"server": server}}],
                "users": [{"name": "kmock", "user": {}}],
                "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "kmock"}}],
            }
        )
    )
    return path


def config_error(data: dict[str, Any]) -> str:
    """The one-line error a router configuration is refused with."""
    with pytest.raises(ConfigError) as info:
        validate_config(data)
    message = str(info.value)
    assert "\n" not in message
    return message
