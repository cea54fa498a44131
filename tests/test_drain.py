"""Scale-down without loss: on SIGTERM a router drains before it exits.

It stops listening, refuses new links from clients, gives their senders no more credit, keeps
forwarding what it holds and waits for it to be settled (at most router.drainTimeoutSeconds),
then releases what is left and exits 0. A second SIGTERM/SIGINT ends the wait at once.
"""

from __future__ import annotations

import re
import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from clients import ACCEPTED, RELEASED, Management, World
from harness import RouterNetwork, RouterProcess
from proton import Message

pytestmark = pytest.mark.network

RID = "R1"
REFUSED = "amqp:link:detach-forced"
_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


def logged(router: RouterProcess, event: str) -> dict[str, str] | None:
    """The fields of the last `event` line in the router's log, if any."""
    found = None
    for line in router.log().splitlines():
        if f" event={event} " in f"{line} ":
            found = {k: v.strip('"') for k, v in _FIELD.findall(line)}
    return found


def wait_logged(world: World, router: RouterProcess, event: str) -> dict[str, str]:
    world.run_until(lambda: logged(router, event), what=f"{event} in {router.id}'s log")
    fields = logged(router, event)
    assert fields is not None
    return fields


def send(world: World, sender: Any, n: int) -> list[Any]:
    world.run_until(lambda: sender.credit >= n, what="sender credit")
    return sender.send_all(Message(body=i) for i in range(n))


def signal_router(router: RouterProcess, sig: int = signal.SIGTERM) -> float:
    assert router.proc is not None
    router.proc.send_signal(sig)
    return time.monotonic()


def wait_exit(world: World, router: RouterProcess, timeout: float = 5.0) -> int:
    assert router.proc is not None
    proc = router.proc
    world.run_until(lambda: proc.poll() is not None, timeout=timeout, what="the router to exit")
    return proc.returncode


def test_a_slow_consumer_finishes_and_the_router_exits_once_it_has(
    tmp_path: Path, world: World
) -> None:
    """Deliveries with a consumer (2) and waiting for its credit (3) when SIGTERM comes: the
    consumer takes a second to settle them, every one ends accepted, and the router exits as
    soon as they are, long before its drain timeout."""
    router = RouterProcess(tmp_path, RID, router={"drainTimeoutSeconds": 10}).start()
    try:
        client = world.connect(router.url)
        rx = client.receiver("q", credit=0, policy=None)
        rx.flow(2)
        tx = client.sender("q")
        sent = send(world, tx, 5)
        world.run_until(lambda: len(rx.messages) == 2, what="two deliveries to the consumer")
        world.run_for(0.2)  # the other three wait in the router for credit
        signal_router(router)
        draining = wait_logged(world, router, "router.draining")
        assert (draining["unsettled"], draining["queued"]) == ("5", "3")
        assert draining["signal"] == "SIGTERM"
        world.run_for(1.0)  # a slow consumer
        assert router.alive() and not any(t.settled for t in sent)
        rx.settle_all(ACCEPTED)
        rx.policy = "accept"
        rx.flow(3)
        settled = time.monotonic()
        world.run_until(tx.all_settled, what="outcomes")
        assert [t.state for t in sent] == [ACCEPTED] * 5
        assert rx.bodies == list(range(5))
        assert wait_exit(world, router) == 0
        assert time.monotonic() - settled < 1.0
        drained = logged(router, "router.drained")
        assert drained is not None
        assert (drained["reason"], drained["unsettled"], drained["queued"]) == ("settled", "0", "0")
        assert float(drained["seconds"]) < 3
        assert logged(router, "router.stopped") is not None
    finally:
        router.stop(signal.SIGKILL)


def test_a_consumer_that_never_settles_gets_its_deliveries_released_at_the_timeout(
    tmp_path: Path, world: World
) -> None:
    drain = 1.5
    router = RouterProcess(tmp_path, RID, router={"drainTimeoutSeconds": drain}).start()
    try:
        client = world.connect(router.url)
        rx = client.receiver("q", policy=None)
        tx = client.sender("q")
        sent = send(world, tx, 3)
        world.run_until(lambda: len(rx.messages) == 3, what="deliveries to the consumer")
        started = signal_router(router)
        world.run_until(tx.all_settled, what="outcomes")
        released = time.monotonic() - started
        assert [t.state for t in sent] == [RELEASED] * 3
        assert drain - 0.1 <= released < drain + 1.0
        assert wait_exit(world, router) == 0
        drained = logged(router, "router.drained")
        assert drained is not None
        assert (drained["reason"], drained["unsettled"]) == ("timeout", "3")
    finally:
        router.stop(signal.SIGKILL)


def test_no_new_connections_links_or_credit_while_a_consumer_still_gets_its_deliveries(
    tmp_path: Path, world: World
) -> None:
    router = RouterProcess(
        tmp_path, RID, listeners=[{"linkCapacity": 5}], router={"drainTimeoutSeconds": 10}
    ).start()
    try:
        client = world.connect(router.url)
        mgmt = Management(world.connect(router.url))
        rx = client.receiver("q", credit=0)
        tx = client.sender("q")
        sent = send(world, tx, 5)
        world.run_for(0.2)
        assert tx.credit == 0  # all five wait in the router for the consumer's credit
        signal_router(router)
        wait_logged(world, router, "router.draining")
        # No new connections: the listener is closed.
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((router.host, router.port), timeout=1).close()
        # No new links from clients on the connections already up, whichever way they go.
        late = (
            client.sender("q", name="late-sender"),
            client.receiver("q", name="late-receiver"),
            client.receiver(None, dynamic=True),
        )
        for link in late:
            assert link.closed
            assert [e.name for e in link.errors] == [REFUSED]
            assert "shutting down" in link.errors[0].description
        refused = logged(router, "link.refused")
        assert refused is not None and refused["error"] == REFUSED
        # Management still answers on links attached before.
        assert mgmt.router()["id"] == RID
        # The consumer still gets everything that waited for it; its sender no more credit.
        rx.flow(5)
        world.run_until(tx.all_settled, what="outcomes")
        assert [t.state for t in sent] == [ACCEPTED] * 5
        assert rx.bodies == list(range(5))
        world.run_for(0.2)
        assert tx.credit == 0
        assert wait_exit(world, router) == 0
        drained = logged(router, "router.drained")
        assert drained is not None and drained["reason"] == "settled"
    finally:
        router.stop(signal.SIGKILL)


@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_second_signal_ends_the_drain_at_once(
    tmp_path: Path, world: World, second: signal.Signals
) -> None:
    router = RouterProcess(tmp_path, RID, router={"drainTimeoutSeconds": 30}).start()
    try:
        client = world.connect(router.url)
        rx = client.receiver("q", policy=None)
        tx = client.sender("q")
        (t,) = send(world, tx, 1)
        world.run_until(lambda: len(rx.messages) == 1, what="delivery to the consumer")
        signal_router(router)
        wait_logged(world, router, "router.draining")
        world.run_for(0.3)
        assert router.alive() and not t.settled
        started = signal_router(router, second)
        world.run_until(lambda: t.settled, what="release")
        assert t.state == RELEASED
        assert wait_exit(world, router) == 0
        assert time.monotonic() - started < 1.5
        drained = logged(router, "router.drained")
        assert drained is not None
        assert (drained["reason"], drained["signal"], drained["unsettled"]) == (
            "signal",
            second.name,
            "1",
        )
    finally:
        router.stop(signal.SIGKILL)


def test_a_draining_interior_withdraws_its_addresses_and_finishes_what_it_holds(
    tmp_path: Path, world: World
) -> None:
    """B drains: A stops routing new deliveries to B's consumer at once, while the one B
    already delivered is still settled through B, and B exits as soon as it is."""
    net = RouterNetwork(tmp_path, world, [("A", "B", 1)], settings={"drainTimeoutSeconds": 10})
    with net:
        rx = world.connect(net.url("B")).receiver("q", policy=None)
        net.wait_address("q", {"B"})
        tx = world.connect(net.url("A")).sender("q")
        (t,) = send(world, tx, 1)
        world.run_until(lambda: len(rx.messages) == 1, what="delivery across the network")
        signal_router(net["B"])
        draining = wait_logged(world, net["B"], "router.draining")
        assert (draining["unsettled"], draining["withdrawn_addresses"]) == ("1", "1")
        net.wait_address("q", set(), at=["A"])
        assert net["B"].alive() and not t.settled
        rx.settle_all(ACCEPTED)
        world.run_until(lambda: t.settled, what="the outcome through the draining router")
        assert t.state == ACCEPTED
        assert wait_exit(world, net["B"]) == 0
        drained = logged(net["B"], "router.drained")
        assert drained is not None and drained["reason"] == "settled"
