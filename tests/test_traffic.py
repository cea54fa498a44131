"""`routernet send` and `routernet receive` end to end, as processes of their own, through real
routers on loopback: every message arrives exactly once across two routers; a router the
sender uses is stopped with SIGTERM mid-run (it drains) and still every message is accepted
exactly once; routers that appear get connections; messages a consumer releases are sent
again and rejected ones are not.

Two of the tests find the routers through a state directory, as `routernet up` writes it: the
harness's routers run config files at <state>/config/<pod>.json and their pids are in
<state>/pids/, which is what `routernet status` and the commands look for.
"""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clients import ACCEPTED, REJECTED, RELEASED, Receiver, World, settle
from harness import RouterNetwork, RouterProcess, free_port
from proton import Delivery, Message
from router_operator.local import backend as local

pytestmark = pytest.mark.network

CLI = [sys.executable, "-m", "router_operator.cli.main"]
TIMEOUT = 30.0
ADDRESS = "orders"


class Commands:
    """The send/receive processes of a test, always stopped at its end."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()


@pytest.fixture
def commands() -> Iterator[Commands]:
    c = Commands()
    try:
        yield c
    finally:
        c.close()


def finished(proc: subprocess.Popen[str], timeout: float = TIMEOUT) -> tuple[int, Any, str]:
    """Exit code, the JSON summary (the only line on stdout) and stderr."""
    out, err = proc.communicate(timeout=timeout)
    lines = out.splitlines()
    assert len(lines) == 1, f"stdout: {out!r}\nstderr: {err}"
    return proc.returncode, json.loads(lines[0]), err


def in_state_dir(net: RouterNetwork, state: Path) -> None:
    """Make the network's routers run their config files from the state directory (before
    they start), as `routernet up`'s pods do."""
    for name, router in net.routers.items():
        router.config_path = local.config_path(state, name)
        router.log_path = local.log_path(state, name)
        router.config_path.parent.mkdir(parents=True, exist_ok=True)
        router.log_path.parent.mkdir(parents=True, exist_ok=True)


def register(net: RouterNetwork, state: Path, names: list[str]) -> None:
    """state.json and pid files for the routers ``names``, all pods of Router "core"."""
    pods = {}
    for name in names:
        router = net[name]
        assert router.proc is not None
        path = local.pid_path(state, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{router.proc.pid}\n")
        pods[name] = {
            "router": "core",
            "network": "net",
            "mode": "interior",
            "host": router.host,
            "ports": [router.port],
            "clientEndpoints": [f"{router.host}:{router.port}"],
            "routeContainerEndpoints": [],
            "interRouterEndpoints": [],
            "edgeEndpoints": [],
            "httpEndpoint": None,
        }
    local.State(pods=pods).save(state)


def clients_of(net: RouterNetwork, name: str) -> Counter[str]:
    """The kinds of client (send, receive) connected to router ``name``."""
    rows = net.query(name, "connection", ["container", "role"])
    kinds: Counter[str] = Counter()
    for row in rows[1:]:
        container = str(row["container"] or "")
        for kind in ("send", "receive"):
            if container.startswith(f"routernet-{kind}-"):
                kinds[kind] += 1
    return kinds


def test_every_message_arrives_exactly_once_across_two_routers(
    tmp_path: Path, world: World, commands: Commands
) -> None:
    count = 2000
    with RouterNetwork(tmp_path, world, [("A", "B", 1)]) as net:
        urls = ["--url", net.url("A"), "--url", net.url("B")]
        rx = commands.start("receive", ADDRESS, *urls, "--count", str(count), "--duration", "25")
        net.wait_address(ADDRESS, {"A", "B"})
        summary_file = tmp_path / "send.json"
        tx = commands.start(
            "send", ADDRESS, *urls, "--count", str(count), "--summary", str(summary_file)
        )
        code, sent, err = finished(tx)
        assert code == 0, err
        assert sent["sent"] == sent["accepted"] == count
        assert (sent["rejected"], sent["unresolved"]) == (0, 0)
        assert json.loads(summary_file.read_text()) == sent
        code, received, err = finished(rx)
        assert code == 0, err
        assert received["received"] == received["distinct"] == count
        assert received["duplicates"] == 0


def test_a_router_draining_mid_run_loses_nothing_and_duplicates_nothing(
    tmp_path: Path, world: World, commands: Commands
) -> None:
    """The sender has two connections on each of A and B (found in the state directory); A
    gets SIGTERM while 2000 msgs/s flow. A drains and exits; whatever it had not taken is sent
    again on B, the sender's next look at the state directory moves all four connections to B,
    and the consumer (on B) gets every message once."""
    state = tmp_path / "state"
    net = RouterNetwork(tmp_path, world, [("A", "B", 1)])
    in_state_dir(net, state)
    with net:
        register(net, state, ["A", "B"])
        rx = commands.start("receive", ADDRESS, "--url", net.url("B"))
        net.wait_address(ADDRESS, {"B"})
        tx = commands.start(
            "send", ADDRESS, "--state-dir", str(state), "--router", "core",
            "--rate", "2000", "--connections", "4",
        )  # fmt: skip
        net.wait_until(lambda: clients_of(net, "A")["send"] == 2, 10, "the sender on A")
        world.run_for(0.3)  # traffic through A
        a = net["A"]
        proc = a.proc
        assert proc is not None and tx.poll() is None
        proc.send_signal(signal.SIGTERM)
        world.run_until(lambda: proc.poll() is not None, timeout=10, what="A to exit")
        assert proc.returncode == 0
        assert "event=router.drained" in a.log()
        net.wait_until(lambda: clients_of(net, "B")["send"] == 4, 10, "the sender all on B")
        tx.send_signal(signal.SIGINT)
        code, sent, err = finished(tx)
        assert code == 0, err
        assert sent["sent"] == sent["accepted"] > 0
        assert sent["unresolved"] == 0
        assert f"{a.url}: " in err  # it noticed A going
        rx.send_signal(signal.SIGTERM)  # the sender saw every message accepted: all arrived
        code, received, err = finished(rx)
        assert code == 0, err
        assert received["received"] == received["distinct"] == sent["sent"]
        assert received["duplicates"] == 0


def test_a_router_that_appears_gets_connections(
    tmp_path: Path, world: World, commands: Commands
) -> None:
    """Only A runs when both commands start from the state directory; B starts (and joins A)
    while they run, and each puts a connection on it within its refresh interval. SIGINT then
    ends the sender's run: it stops making messages, waits for the ones it sent, and exits."""
    state = tmp_path / "state"
    net = RouterNetwork(tmp_path, world, [("B", "A", 1)])
    in_state_dir(net, state)
    try:
        net.start(["A"])
        register(net, state, ["A"])
        rx = commands.start("receive", ADDRESS, "--state-dir", str(state))
        net.wait_address(ADDRESS, {"A"})
        tx = commands.start("send", ADDRESS, "--state-dir", str(state), "--rate", "500")
        net.start(["B"])
        register(net, state, ["A", "B"])
        net.wait_until(
            lambda: clients_of(net, "B") == Counter(send=1, receive=1), 10, "clients on B"
        )
        world.run_for(0.3)  # traffic through B too
        tx.send_signal(signal.SIGINT)
        code, sent, err = finished(tx)
        assert code == 0, err
        assert sent["sent"] == sent["accepted"] > 0 and sent["unresolved"] == 0
        rx.send_signal(signal.SIGTERM)  # the sender saw every message accepted: all arrived
        code, received, err = finished(rx)
        assert code == 0, err
        assert received["distinct"] == sent["sent"] and received["duplicates"] == 0
    finally:
        net.stop()


def test_released_messages_are_sent_again_and_rejected_ones_are_not(
    tmp_path: Path, world: World, commands: Commands
) -> None:
    """A consumer in the test releases every 5th message the first time it sees it and
    rejects every 7th (seq % 7 == 3); the sender sends the released ones again, with the same
    message-id, seq and body, and counts the rejected ones without sending them again."""
    count = 500
    seen: Counter[str] = Counter()
    outcomes: dict[str, int] = {}
    bodies: set[bytes] = set()

    def decide(receiver: Receiver, message: Message, delivery: Delivery) -> None:
        seen[message.id] += 1
        seq = message.properties["seq"]
        assert message.id.endswith(f":{seq}")
        bodies.add(bytes(message.body))
        if seq % 5 == 0 and seen[message.id] == 1:
            settle(delivery, RELEASED)
            return
        state = REJECTED if seq % 7 == 3 else ACCEPTED
        assert message.id not in outcomes, f"{message.id} delivered again after {state}"
        outcomes[message.id] = state
        settle(delivery, state)

    with RouterProcess(tmp_path, "R1") as router:
        client = world.connect(router.url)
        consumer = client.receiver(ADDRESS, policy=decide)
        assert consumer.attached
        tx = commands.start(
            "send", ADDRESS, "--url", router.url, "--count", str(count), "--body-size", "32"
        )
        world.run_until(lambda: tx.poll() is not None, timeout=TIMEOUT, what="send to finish")
        code, sent, err = finished(tx)
        client.close()  # before the router stops: it would wait for its consumer to go
    assert code == 0, err
    rejected = sum(1 for seq in range(count) if seq % 7 == 3)
    released = sum(1 for seq in range(count) if seq % 5 == 0)
    assert sent == {
        "sent": count,
        "accepted": count - rejected,
        "rejected": rejected,
        "resent": released,
        "unresolved": 0,
        "seconds": sent["seconds"],
    }
    assert len(outcomes) == count
    assert sum(seen.values()) == count + released
    assert bodies == {b"x" * 32}


def _stderr_line(proc: subprocess.Popen[str], text: str, timeout: float = TIMEOUT) -> str:
    """The first line on the command's stderr that holds ``text`` (the lines before it read)."""
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([proc.stderr], [], [], left)
        line = proc.stderr.readline() if ready else ""
        if not line:
            break
        if text in line:
            return line
    raise AssertionError(f"no {text!r} on stderr within {timeout} s")


def test_with_nothing_listening_send_and_receive_give_up_with_the_error(
    commands: Commands,
) -> None:
    """An unused loopback port: both commands end within --wait (and the close after it) with
    exit 1, the connection's error on stderr and their summary on stdout."""
    url = f"amqp://127.0.0.1:{free_port()}"
    tx = commands.start("send", "orders.eu", "--url", url, "--count", "5", "--wait", "1")
    rx = commands.start("receive", "orders.eu", "--url", url, "--count", "5", "--wait", "1")
    for proc, nothing in ((tx, "sent"), (rx, "received")):
        code, summary, err = finished(proc)
        assert code == 1, err
        assert summary[nothing] == 0
        assert summary["seconds"] < 1.5, summary  # gave up at --wait, not later
        [line] = [line for line in err.splitlines() if "no router reached" in line]
        assert f"no router reached in 1 s ({url}: " in line, err
        assert "Connection refused" in line, err


def test_a_router_that_starts_within_wait_gets_the_messages(
    tmp_path: Path, world: World, commands: Commands
) -> None:
    """send is started before its router: it keeps trying (--wait 60) and, once the router is
    up with a consumer, sends every message."""
    router = RouterProcess(tmp_path, "R1")
    tx = commands.start("send", ADDRESS, "--url", router.url, "--count", "20", "--wait", "60")
    assert "connections 0/1" in _stderr_line(tx, "connections 0/1")  # trying, and failing
    with router:
        client = world.connect(router.url)
        consumer = client.receiver(ADDRESS)
        assert consumer.attached
        world.run_until(lambda: tx.poll() is not None, timeout=TIMEOUT, what="send to finish")
        code, sent, err = finished(tx)
        client.close()
    assert code == 0, err
    assert sent["sent"] == sent["accepted"] == 20
    assert len({m.id for m in consumer.messages}) == 20
