"""The control plane's flood (router advertisements to `_topo/0/all/qdrouter`) as the engine
relays it: to every neighbor not in the trace, and never a copy that came farther than the
network's radius (+1), as Dispatch's router_node.c drops it. Without that rule a ring with
chords relays each RA along every loop-free path: seven copies per RA at one router of a ring
of 16, where Dispatch delivers two or three."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from proton import Message

from router.core.interrouter import Neighbor, Network
from router.network import Routes, Timers

RA = "amqp:/_topo/0/all/qdrouter"


class Conn:
    def __init__(self, conn_id: str) -> None:
        self.conn_id = conn_id
        self.dead = False


class Recorder:
    def __init__(self) -> None:
        self.received: list[tuple[str, dict[Any, Any]]] = []

    def receive(self, conn: object, opcode: str, body: dict[Any, Any], now: float) -> None:
        self.received.append((opcode, body))


def network(radius: int) -> tuple[Network, Recorder, list[tuple[str, Message]]]:
    """Router B with neighbors A and C, the farthest router `radius` hops away."""
    sent: list[tuple[str, Message]] = []

    def send_control(link: str, data: bytes) -> None:
        msg = Message()
        msg.decode(data)
        sent.append((link, msg))

    fwd = SimpleNamespace(now=0.0, routes_changed=lambda: None)
    router = SimpleNamespace(id="B", fwd=fwd, send_control=send_control)
    net = Network(cast(Any, router), Timers(), 1, 0.0)
    conns = {rid: Conn(rid) for rid in ("A", "C")}
    for rid, conn in conns.items():
        neighbor = Neighbor(cast(Any, conn))
        neighbor.control_out = cast(Any, f"to-{rid}")
        net.neighbors[cast(Any, conn)] = neighbor
    net.topology_changed(Routes(radius=radius, neighbors=cast(Any, conns)))
    recorder = Recorder()
    net.control = cast(Any, recorder)
    return net, recorder, sent


def advertisement(trace: list[str]) -> bytes:
    msg = Message(
        address=RA,
        properties={"opcode": "RA"},
        body={"id": trace[0][2:], "ls_seq": 1},
        annotations={"x-opt-qd.ingress": trace[0], "x-opt-qd.trace": trace},
    )
    return bytes(msg.encode())


def test_an_advertisement_is_received_and_relayed_to_the_neighbors_not_in_its_trace() -> None:
    net, recorder, sent = network(radius=2)
    link = SimpleNamespace(conn=SimpleNamespace(conn_id="A"))
    net.control_message(cast(Any, link), advertisement(["0/Z", "0/A"]))
    assert recorder.received == [("RA", {"id": "Z", "ls_seq": 1})]
    assert [to for to, _ in sent] == ["to-C"]
    relayed = sent[0][1]
    assert relayed.annotations["x-opt-qd.trace"] == ["0/Z", "0/A", "0/B"]
    assert relayed.annotations["x-opt-qd.ingress"] == "0/Z"


def test_a_copy_that_came_farther_than_the_radius_is_dropped_unread() -> None:
    net, recorder, sent = network(radius=1)
    link = SimpleNamespace(conn=SimpleNamespace(conn_id="A"))
    net.control_message(cast(Any, link), advertisement(["0/Z", "0/Y", "0/A"]))
    assert recorder.received == []
    assert sent == []
    # One hop fewer is within radius + 1: a path still being learned.
    net.control_message(cast(Any, link), advertisement(["0/Z", "0/A"]))
    assert [opcode for opcode, _ in recorder.received] == ["RA"]
    assert [to for to, _ in sent] == ["to-C"]


def test_this_router_floods_its_own_advertisement_to_every_neighbor() -> None:
    net, _, sent = network(radius=1)
    net.send(RA, "RA", {"id": "B", "ls_seq": 4})
    assert sorted(to for to, _ in sent) == ["to-A", "to-C"]
    assert all(msg.annotations["x-opt-qd.trace"] == ["0/B"] for _, msg in sent)
