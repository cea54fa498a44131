"""Connectors: the retry schedule, and real routers dialling peers that are not there yet.

The peers are a second router process with an inter-router listener, and a python-qpid-proton
Container in a process of its own that prints what each connection's Open carried. A host name
that resolves only later is simulated by injecting the resolver into an in-process router.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from clients import Management, World
from harness import RouterProcess, free_port

from router.config.models import validate_config
from router.config.views import read_secret
from router.transport.connector import FAILED, INITIAL_DELAY, MAX_DELAY, SUCCESS, backoff_delay

# ----- the schedule ---------------------------------------------------------------------------


def test_backoff_doubles_from_a_tenth_of_a_second_to_the_cap() -> None:
    middle = [backoff_delay(n, rand=lambda: 0.5) for n in range(1, 11)]
    assert middle == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 10.0, 10.0, 10.0])
    assert backoff_delay(1, rand=lambda: 0.5) == INITIAL_DELAY
    assert backoff_delay(10_000, rand=lambda: 0.5) == MAX_DELAY  # no overflow, ever


@pytest.mark.parametrize("failures", [1, 2, 5, 7])
def test_jitter_is_plus_or_minus_a_fifth(failures: int) -> None:
    base = backoff_delay(failures, rand=lambda: 0.5)
    assert backoff_delay(failures, rand=lambda: 0.0) == pytest.approx(base * 0.8)
    assert backoff_delay(failures, rand=lambda: 0.999999) == pytest.approx(base * 1.2, rel=1e-5)


def test_jitter_never_goes_past_the_cap() -> None:
    assert backoff_delay(20, rand=lambda: 0.999999) == MAX_DELAY
    assert backoff_delay(20, rand=lambda: 0.0) == pytest.approx(0.8 * MAX_DELAY)


def test_failures_below_one_count_as_the_first() -> None:
    assert backoff_delay(0, rand=lambda: 0.5) == INITIAL_DELAY


def test_password_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROUTERNET_TEST_PW", "from-env")
    secret = tmp_path / "pw"
    secret.write_text("from-file\nsecond line\n")
    assert read_secret("env:ROUTERNET_TEST_PW", "saslPassword") == "from-env"
    assert read_secret(f"file:{secret}", "saslPassword") == "from-file"
    assert read_secret("pass:env:literally", "saslPassword") == "env:literally"
    assert read_secret("plain", "saslPassword") == "plain"
    monkeypatch.delenv("ROUTERNET_TEST_PW")
    with pytest.raises(ValueError, match="environment variable 'ROUTERNET_TEST_PW' is not set"):
        read_secret("env:ROUTERNET_TEST_PW", "saslPassword")
    with pytest.raises(ValueError, match="cannot read"):
        read_secret(f"file:{tmp_path / 'absent'}", "saslPassword")


# ----- a python-qpid-proton peer in its own process --------------------------------------------

_PEER_SCRIPT = r"""
import json, sys
from proton import Condition
from proton.handlers import MessagingHandler
from proton.reactor import Container

url, close_first = sys.argv[1], sys.argv[2] == "close-first"

class Peer(MessagingHandler):
    def __init__(self):
        super().__init__()
        self.opened = 0

    def on_start(self, event):
        event.container.listen(url)
        print("listening", flush=True)

    def on_connection_opened(self, event):
        c = event.connection
        self.opened += 1
        props = {str(k): v for k, v in (c.remote_properties or {}).items()}
        types = {k: type(v).__name__ for k, v in props.items()}
        line = {"container": c.remote_container, "hostname": c.remote_hostname,
                "properties": props, "types": types}
        print(json.dumps(line), flush=True)
        if close_first and self.opened == 1:
            c.condition = Condition("amqp:connection:forced", "the test drops the first one")
            c.close()

Container(Peer()).run()
"""


class Peer:
    """An AMQP server (a proton Container) that prints each connection's Open as JSON."""

    def __init__(self, port: int, close_first: bool = False) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _PEER_SCRIPT,
                f"127.0.0.1:{port}",
                "close-first" if close_first else "keep",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.lines: list[str] = []
        self._partial = b""
        wait_for(lambda: "listening" in self.poll(), 10, "the peer to listen")

    def poll(self) -> list[str]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while select.select([fd], [], [], 0)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            self._partial += chunk
            *done, self._partial = self._partial.split(b"\n")
            self.lines += [line.decode() for line in done]
        return self.lines

    @property
    def opens(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.poll() if line.startswith("{")]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def peer_port() -> int:
    return free_port()


# ----- a router dialling a peer that appears later ---------------------------------------------


def connector_row(world: World, router: RouterProcess) -> dict[str, Any]:
    client = world.connect(router.url)
    try:
        [row] = Management(client).query("connector")
        return row
    finally:
        client.close()


@pytest.mark.network
def test_inter_router_connector_waits_for_the_peer_router(tmp_path: Path, world: World) -> None:
    peer = RouterProcess(
        tmp_path, "R2", listeners=[{}, {"role": "inter-router"}], router={"mode": "interior"}
    )
    target = f"127.0.0.1:{peer.listeners[1]['port']}"
    dialler = RouterProcess(tmp_path, "R1", extra_args=["--mode", "interior", "--connect", target])
    with dialler:
        time.sleep(2.0)  # nothing listens there yet: the connector keeps trying
        row = connector_row(world, dialler)
        assert (row["host"], row["role"], row["cost"]) == ("127.0.0.1", "inter-router", 1)
        assert row["connectionStatus"] == FAILED
        assert "Connection refused" in row["connectionMsg"]
        with peer:
            appeared = time.monotonic()
            mgmt = Management(world.connect(dialler.url))

            def connected() -> bool:
                [row] = mgmt.query("connector")
                return row["connectionStatus"] == SUCCESS

            world.run_until(connected, timeout=MAX_DELAY + 2, what="the connector to connect")
            assert time.monotonic() - appeared <= MAX_DELAY + 2
            [row] = mgmt.query("connector")
            assert "container_id=R2" in row["connectionMsg"]
            out = [c for c in mgmt.query("connection") if c["dir"] == "out"]
            assert [(c["role"], c["container"], c["host"]) for c in out] == [
                ("inter-router", "R2", target)
            ]
            peer_mgmt = Management(world.connect(peer.url))
            inbound = [c for c in peer_mgmt.query("connection") if c["role"] == "inter-router"]
            assert [(c["dir"], c["container"]) for c in inbound] == [("in", "R1")]
        log = dialler.log()
    # Until it connected: one warning for the outage, not one per attempt (those are debug).
    log = log[: log.index("event=connector.connected")]
    assert len(re.findall(r"level=warning .*event=connector\.failed", log)) == 1, log
    assert len(re.findall(r"level=debug .*event=connector\.retry", log)) >= 3, log
    assert not re.search(rf"level=info .*event=connection\.closed .*peer={target}", log)
    assert re.search(rf"level=debug .*event=connection\.closed .*peer={target}", log)


@pytest.mark.network
def test_open_carries_dispatch_properties_and_a_dropped_connection_comes_back(
    tmp_path: Path, peer_port: int
) -> None:
    peer = Peer(peer_port, close_first=True)
    try:
        with RouterProcess(
            tmp_path,
            "R1",
            extra_args=["--mode", "interior", "--connect", f"127.0.0.1:{peer_port},cost=3"],
        ) as router:
            wait_for(lambda: len(peer.opens) >= 2, 5, "the connector to reconnect")
            first, second = peer.opens[:2]
            for opened in (first, second):
                assert opened["container"] == "R1"
                assert opened["hostname"] == "127.0.0.1"
                props = opened["properties"]
                assert props["product"] == "routernet"
                assert props["qd.inter-router-cost"] == 3
                assert props["qd.annotations-version"] == 1
                # AMQP int, the type Dispatch reads these as.
                assert {k: opened["types"][k] for k in props if k.startswith("qd.")} == {
                    "qd.conn-id": "int32",
                    "qd.inter-router-cost": "int32",
                    "qd.annotations-version": "int32",
                }
            assert first["properties"]["qd.conn-id"] != second["properties"]["qd.conn-id"]
            wait_for(lambda: "connector.disconnected" in router.log(), 5, "the log line")
        log = router.log()
        assert "the test drops the first one" in log
        assert len(re.findall(r"event=connector\.connected", log)) == 2
    finally:
        peer.close()


@pytest.mark.network
def test_connector_comes_back_when_the_peer_router_restarts(tmp_path: Path, world: World) -> None:
    peer = RouterProcess(
        tmp_path, "R2", listeners=[{}, {"role": "inter-router"}], router={"mode": "interior"}
    )
    target = f"127.0.0.1:{peer.listeners[1]['port']}"
    with (
        peer,
        RouterProcess(
            tmp_path, "R1", extra_args=["--mode", "interior", "--connect", target]
        ) as dialler,
    ):

        def peer_sees_r1(mgmt: Management) -> bool:
            return any(c["container"] == "R1" for c in mgmt.query("connection"))

        mgmt = Management(world.connect(peer.url))
        world.run_until(lambda: peer_sees_r1(mgmt), what="R1 to connect")
        peer.stop()
        peer.start()  # same ports, a new process
        mgmt = Management(world.connect(peer.url))
        world.run_until(lambda: peer_sees_r1(mgmt), timeout=8, what="R1 to reconnect")
        wait_for(lambda: "connector.disconnected" in dialler.log(), 5, "the log line")


# ----- a host name that resolves only later (in-process router, injected resolver) -----------


class LateName:
    """A resolver for which ``name`` does not exist until ``appears`` seconds from now."""

    def __init__(self, name: str, port: int, appears: float) -> None:
        self.name = name
        self.port = port
        self.appears_at = time.monotonic() + appears
        self.calls = 0

    def __call__(self, host: str, port: int) -> list[tuple[int, Any]]:
        self.calls += 1
        if host != self.name or time.monotonic() < self.appears_at:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, ("127.0.0.1", self.port))]


@pytest.fixture
def in_process_router() -> Iterator[Callable[[dict[str, Any]], Any]]:
    from router.core.engine import Router

    made: list[Router] = []

    def make(config: dict[str, Any]) -> Router:
        router = Router(validate_config(config))
        made.append(router)
        return router

    yield make
    for router in made:
        router.shutdown()
        router.sel.close()


@pytest.mark.network
def test_connector_connects_once_its_host_name_resolves(
    peer_port: int, in_process_router: Callable[[dict[str, Any]], Any]
) -> None:
    peer = Peer(peer_port)
    try:
        router = in_process_router(
            {
                "router": {"id": "R1", "mode": "interior"},
                "connectors": [
                    {"host": "peer-0.routers.example", "port": peer_port, "role": "inter-router"}
                ],
            }
        )
        resolver = LateName("peer-0.routers.example", peer_port, appears=3.0)
        router.connectors.resolver = resolver
        router.connectors.rand = lambda: 0.5
        [connector] = router.connectors.items
        seen: list[tuple[str, str]] = []

        def keep_going() -> bool:
            state = (connector.status, connector.message)
            if not seen or seen[-1] != state:
                seen.append(state)
            return connector.status != SUCCESS and time.monotonic() < deadline

        deadline = time.monotonic() + 10
        router.connectors.start()
        router.loop(keep_going)
        assert connector.status == SUCCESS, seen
        statuses = [status for status, _ in seen]
        assert statuses[0] == "CONNECTING"
        assert FAILED in statuses
        assert any("cannot resolve 'peer-0.routers.example'" in msg for _, msg in seen)
        assert resolver.calls >= 4  # resolved again on every attempt
        wait_for(lambda: peer.opens, 5, "the peer to see the Open")
        assert peer.opens[0]["container"] == "R1"
        assert peer.opens[0]["hostname"] == "peer-0.routers.example"
        [conn] = router.conns.values()
        assert (conn.inbound, conn.connector, conn.role, conn.cost) == (
            False,
            connector,
            "inter-router",
            1,
        )
        assert not conn.strip_in and not conn.strip_out  # never stripped between routers
    finally:
        peer.close()


@pytest.mark.network
def test_a_peer_that_never_speaks_amqp_is_given_up_on_and_retried(
    in_process_router: Callable[[dict[str, Any]], Any],
) -> None:
    # The kernel completes TCP handshakes into the backlog, but nobody ever reads or answers.
    with socket.create_server(("127.0.0.1", 0), backlog=16) as mute:
        port = mute.getsockname()[1]
        router = in_process_router(
            {
                "router": {"id": "R1", "mode": "interior"},
                "connectors": [
                    {
                        "host": "127.0.0.1",
                        "port": port,
                        "role": "inter-router",
                        "idleTimeoutSeconds": 1,
                    }
                ],
            }
        )
        router.connectors.rand = lambda: 0.5
        [connector] = router.connectors.items
        deadline = time.monotonic() + 5
        router.connectors.start()
        router.loop(lambda: connector.attempts < 2 and time.monotonic() < deadline)
        assert connector.status == FAILED
        assert connector.message == f"no AMQP open from the peer within 1 s (127.0.0.1:{port})"
        assert connector.attempts == 2


@pytest.mark.network
def test_plain_credentials_are_read_again_on_every_attempt(
    tmp_path: Path, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_sasl import REALM, make_sasl_dir

    sasl_dir = make_sasl_dir(tmp_path / "sasl", {"r1": "right-pw"})
    peer = RouterProcess(
        tmp_path,
        "R2",
        router={"mode": "interior", "saslConfigDir": str(sasl_dir)},
        listeners=[
            {"saslMechanisms": "ANONYMOUS"},
            {"role": "inter-router", "saslMechanisms": "PLAIN", "authenticatePeer": True},
        ],
    )
    secret = tmp_path / "r1-password"
    secret.write_text("wrong-pw\n")
    username = tmp_path / "r1-username"  # as a mounted basic-auth Secret gives it
    username.write_text(f"r1@{REALM}\n")
    dialler = RouterProcess(tmp_path, "R1", router={"mode": "interior"})
    dialler.config["connectors"] = [
        {
            "name": "to-R2",
            "host": "127.0.0.1",
            "port": peer.listeners[1]["port"],
            "role": "inter-router",
            "saslUsername": f"file:{username}",
            "saslPassword": f"file:{secret}",
        }
    ]
    with peer, dialler:
        mgmt = Management(world.connect(dialler.url))

        def connector() -> dict[str, Any]:
            [row] = mgmt.query("connector")
            return row

        world.run_until(lambda: connector()["connectionStatus"] == FAILED, what="a refusal")
        row = connector()
        assert (row["name"], row["saslMechanisms"], row["saslUsername"]) == (
            "to-R2",
            "PLAIN",
            f"file:{username}",
        )
        assert "saslPassword" not in row
        assert "unauthorized" in row["connectionMsg"] or "uthentication" in row["connectionMsg"]
        secret.write_text("right-pw\n")  # a rotated Secret: no restart needed
        world.run_until(lambda: connector()["connectionStatus"] == SUCCESS, timeout=8)
        peer_mgmt = Management(world.connect(peer.url))
        [inbound] = [c for c in peer_mgmt.query("connection") if c["role"] == "inter-router"]
        assert (inbound["container"], inbound["user"], inbound["sasl"]) == (
            "R1",
            f"r1@{REALM}",
            "PLAIN",
        )
    assert "wrong-pw" not in dialler.log() and "right-pw" not in dialler.log()


def test_a_slow_name_lookup_does_not_hold_up_the_loop(
    in_process_router: Callable[[dict[str, Any]], Any],
) -> None:
    release = threading.Event()

    def slow(host: str, port: int) -> list[tuple[int, Any]]:
        release.wait(5)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    router = in_process_router(
        {
            "router": {"id": "R1", "mode": "interior"},
            "connectors": [{"host": "slow.example", "role": "inter-router"}],
        }
    )
    router.connectors.resolver = slow
    [connector] = router.connectors.items
    router.connectors.start()
    turns = 0

    def for_half_a_second() -> bool:
        nonlocal turns
        turns += 1
        return time.monotonic() < started + 0.5

    started = time.monotonic()
    router.loop(for_half_a_second)
    assert time.monotonic() - started < 0.8
    assert turns >= 4  # housekeeping every 0.1 s went on while the lookup hung
    assert (connector.phase, connector.status) == ("resolving", "CONNECTING")
    release.set()
    deadline = time.monotonic() + 2
    router.loop(lambda: connector.status != FAILED and time.monotonic() < deadline)
    assert connector.message == (
        "cannot resolve 'slow.example': Temporary failure in name resolution"
    )
