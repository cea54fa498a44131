"""Our router beside qdrouterd 1.19, through a neighbour that speaks exactly as it does on the
wire (tests/dispatch_peer.py): single-symbol link capabilities, the `opcode` key a symbol,
Dispatch's integer and list encodings, its Open properties and its annotations.

What a hostile or buggy neighbour sends (control messages our router relays with keys
python-qpid-proton will not encode, annotations of the wrong type) leaves the router running,
and whatever still raises closes only the connection it came from.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from clients import Receiver, World
from dispatch_peer import DispatchPeer, control_message, encode, section
from harness import NETWORK_TIMERS, RouterNetwork, RouterProcess, free_port
from proton import Message, symbol

from router.config import validate_config
from router.engine import Router
from router.pn import lib, text

pytestmark = pytest.mark.network

MULTICAST = [{"prefix": "mc", "distribution": "multicast"}]


def interior(tmp_path: Path, rid: str = "R") -> RouterProcess:
    router = RouterProcess(
        tmp_path / rid,
        rid,
        listeners=[{}, {"role": "inter-router"}],
        addresses=MULTICAST,
        router={"mode": "interior", **NETWORK_TIMERS},
    )
    return router


def peer_url(router: RouterProcess) -> str:
    return router.listener_url(1)


def assert_serving(world: World, router: RouterProcess, address: str = "still.up") -> None:
    """The router is alive and still routes a message end to end."""
    assert router.alive(), router.log()
    client = world.connect(router.url)
    receiver = client.receiver(address)
    sender = client.sender(address)
    world.run_until(lambda: sender.credit > 0, what="credit")
    tracked = sender.send(Message(body="ping"))
    world.run_until(lambda: tracked.settled, what="the ping's outcome")
    assert tracked.outcome == "accepted"
    assert receiver.bodies == ["ping"]
    client.close()


# ----- a neighbour's bytes must not end the router ---------------------------------------------


RA = {"id": "Q", "pv": 1, "area": "0", "instance": 1, "ls_seq": 1, "mobile_seq": 0}
MAU = {"id": "Q", "pv": 1, "area": "0", "mobile_seq": 1, "hints": [2], "add": ["M0x"], "del": []}


ODD = {
    "RA, opcode a symbol (as Dispatch sends it)": control_message(
        "amqp:/_topo/0/all/qdrouter", "RA", RA
    ),
    "MAU, opcode a symbol": control_message("_topo/0/all/qdrouter.ma", "MAU", MAU),
    "RA, string opcode and a symbol key": (
        section(0x73, encode([None, None, "amqp:/_topo/0/all/qdrouter"]))
        + section(0x74, encode({"opcode": "RA", symbol("x"): 1}))
        + section(0x77, encode(RA))
    ),
    "MAU, string opcode and an int key": (
        section(0x73, encode([None, None, "_topo/0/all/qdrouter.ma"]))
        + section(0x74, encode({"opcode": "MAU", 7: "seven"}))
        + section(0x77, encode(MAU))
    ),
    "RA with an x-opt-qd.trace that is not a list": control_message(
        "amqp:/_topo/0/all/qdrouter", "RA", RA, {symbol("x-opt-qd.trace"): 5}
    ),
    "invalid RA body, still flooded": control_message(
        "amqp:/_topo/0/all/qdrouter", "RA", {"id": 5}
    ),
}


@pytest.mark.parametrize("name", list(ODD))
def test_a_neighbours_odd_control_message_leaves_the_router_serving(
    tmp_path: Path, world: World, name: str
) -> None:
    with interior(tmp_path) as router:
        peer = DispatchPeer(world, peer_url(router), "Q", run_protocol=False)
        world.run_until(
            lambda: (peer.control_out is not None and peer.control_out.credit > 0) or peer.closed,
            what="the peer's control link",
        )
        assert not peer.closed, peer.errors
        for _ in range(3):
            peer.send_control(ODD[name])
        world.run_for(0.3)
        assert_serving(world, router)
        assert not peer.closed, f"{name}: {peer.errors}"
        assert "connection.failed" not in router.log()


def test_an_lsr_with_a_symbol_opcode_is_forwarded_toward_its_router(
    tmp_path: Path, world: World
) -> None:
    """A relays Q's LSR toward B as the bytes it got: B answers Q with its LSU."""
    with RouterNetwork(tmp_path, world, [("A", "B", 1)]) as net:
        peer = DispatchPeer(world, net["A"].listener_url(1), "Q")
        peer.run_until(lambda: "B" in peer.routes.cost, what="Q to learn B through A")
        lsr = {"id": "Q", "pv": 1, "area": "0"}
        before = sum(1 for _to, op, body in peer.received if op == "LSU" and body["id"] == "B")
        peer.send_control(control_message("amqp:/_topo/0/B/qdrouter", "LSR", lsr))
        peer.run_until(
            lambda: (
                sum(1 for _t, op, b in peer.received if op == "LSU" and b["id"] == "B") > before
            ),
            what="B's LSU in answer",
        )
        assert net["A"].alive() and net["B"].alive()
        assert "connection.failed" not in net.logs()


def test_an_exception_closes_only_that_connection(world: World) -> None:
    """Whatever still raises while handling one connection's input closes that connection with
    amqp:internal-error and a log line; the router goes on serving everyone else. Nothing a
    peer sends is known to raise any more, so a handler is made to, in a router run in-process.
    """
    port = free_port()
    router = Router(
        validate_config({"router": {"id": "R"}, "listeners": [{"host": "127.0.0.1", "port": port}]})
    )
    router.open_listeners()
    original = router.handlers[lib.PN_LINK_REMOTE_OPEN]

    def exploding(conn: Any, ev: Any) -> None:
        source = lib.pn_link_remote_source(lib.pn_event_link(ev))
        if text(lib.pn_terminus_get_address(source)) == "boom":
            raise RuntimeError("boom")
        original(conn, ev)

    router.handlers[lib.PN_LINK_REMOTE_OPEN] = exploding
    stop = threading.Event()
    loop = threading.Thread(target=router.loop, args=(lambda: not stop.is_set(),), daemon=True)
    loop.start()
    try:
        url = f"amqp://127.0.0.1:{port}"
        bystander = world.connect(url)
        bystander_rx = bystander.receiver("fine")
        victim = world.connect(url)
        Receiver(victim, "boom")
        world.run_until(lambda: victim.finished, what="the connection that raised to close")
        assert any("amqp:internal-error" in e and "RuntimeError: boom" in e for e in victim.errors)
        sender = world.connect(url).sender("fine")
        world.run_until(lambda: sender.credit > 0, what="credit")
        tracked = sender.send(Message(body="after"))
        world.run_until(lambda: tracked.settled, what="the outcome")
        assert tracked.outcome == "accepted" and bystander_rx.bodies == ["after"]
    finally:
        stop.set()
        loop.join(5)
