"""Our router beside qdrouterd 1.19, through a neighbour that speaks exactly as it does on the
wire (tests/dispatch_peer.py): single-symbol link capabilities, the `opcode` key a string or a
symbol depending on which of Dispatch's composers wrote it, its integer and list encodings, its
Open properties and its annotations.

First the peer's encodings are checked against bytes a real qdrouterd 1.19 sent
(tests/data/qdrouterd-1.19/), and those bytes are replayed to our router as they came; then
the two kinds of router form a network (HELLO, link state, mobile addresses), carry anycast,
multicast and request/response both ways with Dispatch's annotations, take the link cost from
`qd.inter-router-cost`, and show each other in `router.node` as qdstat -n reads it. Last, what
a hostile or buggy neighbour sends leaves the router running, and whatever still raises closes
only the connection it came from.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from clients import Management, Receiver, World
from dispatch_peer import DispatchPeer, control_message, data_message, encode, section
from harness import NETWORK_TIMERS, RouterNetwork, RouterProcess, free_port
from proton import Data, Delivery, Message, symbol
from proton.reactor import LinkOption

from router.config.models import validate_config
from router.core.engine import Router
from router.datapath.sections import scan
from router.transport.pn import lib, text

pytestmark = pytest.mark.network

MULTICAST = [{"prefix": "mc", "distribution": "multicast"}]


def interior(
    tmp_path: Path, rid: str = "R", dial: int | None = None, cost: int = 1
) -> RouterProcess:
    """Our interior router; with `dial`, it dials an inter-router connection to that port."""
    router = RouterProcess(
        tmp_path / rid,
        rid,
        listeners=[{}, {"role": "inter-router"}],
        addresses=MULTICAST,
        router={"mode": "interior", **NETWORK_TIMERS},
    )
    router.config["connectors"] = (
        []
        if dial is None
        else [{"host": "127.0.0.1", "port": dial, "role": "inter-router", "cost": cost}]
    )
    return router


@contextmanager
def mixed(
    tmp_path: Path, world: World, dialler: str, cost: int = 1, **peer: Any
) -> Iterator[tuple[RouterProcess, DispatchPeer]]:
    """Our router R and a Dispatch neighbour Q joined by one connection that `dialler` dials,
    its connector's cost `cost`."""
    if dialler == "Q":
        with interior(tmp_path) as router:
            yield router, DispatchPeer(world, peer_url(router), "Q", cost=cost, **peer)
        return
    port = free_port()
    q = DispatchPeer(world, f"127.0.0.1:{port}", "Q", listen=True, **peer)
    try:
        with interior(tmp_path, dial=port, cost=cost) as router:
            yield router, q
    finally:
        q.close()


def mau_keys(body: dict[Any, Any]) -> list[str]:
    """The keys a MAU's body names, added, deleted or (absolute) held; keys as they came."""
    keys: list[str] = []
    for field, value in body.items():
        if str(field) in ("add", "del", "exist") and isinstance(value, list):
            keys += [str(key) for key in value]
    return keys


class EdgeDownlink(LinkOption):
    """The capability a qdrouterd edge puts on its downlink's source."""

    def apply(self, link: Any) -> None:
        link.source.capabilities.put_symbol(symbol("qd.router-edge-downlink"))


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


# ----- what a real qdrouterd 1.19 sent ----------------------------------------------------------

CAPTURES = Path(__file__).parent / "data" / "qdrouterd-1.19"
CONTROL = json.loads((CAPTURES / "control.json").read_text())
DATA = json.loads((CAPTURES / "data.json").read_text())


@pytest.mark.parametrize(
    "captured", CONTROL, ids=[f"{c['sender']}-{c['opcode']}-{i}" for i, c in enumerate(CONTROL)]
)
def test_the_peer_encodes_control_messages_byte_for_byte_as_qdrouterd(
    captured: dict[str, Any],
) -> None:
    raw = bytes.fromhex(captured["bytes"])
    msg = Message()
    msg.decode(raw)
    ann = msg.annotations
    again = control_message(
        msg.address,
        captured["opcode"],
        dict(msg.body),
        ingress=ann["x-opt-qd.ingress"],
        trace=list(ann["x-opt-qd.trace"]),
    )
    assert again.hex() == raw.hex()


@pytest.mark.parametrize("captured", DATA, ids=[f"{d['to']}-{i}" for i, d in enumerate(DATA)])
def test_the_peer_annotates_data_as_qdrouterd(captured: dict[str, Any]) -> None:
    raw = bytes.fromhex(captured["bytes"])
    msg = Message()
    msg.decode(raw)
    ann = msg.annotations
    # The client's sections around the router's annotations pass through as they came.
    sections = scan(raw)
    client = raw[: sections.ma_start] + raw[sections.ma_end :]
    assert data_message(client, ann["x-opt-qd.ingress"], list(ann["x-opt-qd.trace"])) == raw


FRAMES = json.loads((CAPTURES / "frames.json").read_text())


def performatives(stream: bytes) -> list[Any]:
    """The AMQP performatives in one direction of a connection, SASL frames skipped."""
    out, i = [], 0
    while i < len(stream):
        if stream.startswith(b"AMQP", i):
            i += 8
            continue
        size, doff, kind = int.from_bytes(stream[i : i + 4]), stream[i + 4], stream[i + 5]
        body = stream[i + 4 * doff : i + size]
        i += size
        if kind == 0 and body:
            data = Data()
            data.decode(body)
            data.rewind()
            data.next()
            out.append(data.get_object())
    return out


def captured_performative(sender: str, index: int) -> Any:
    [performative] = performatives(bytes.fromhex(FRAMES[index]["bytes"]))
    assert FRAMES[index]["sender"] == sender
    return performative


def test_the_peer_opens_and_attaches_as_qdrouterd(tmp_path: Path, world: World) -> None:
    """What the peer puts on the wire, recorded between it and our router, has the fields of
    qdrouterd 1.19's dialling side (Q2 in the capture): Open capabilities and properties with
    their types, control links' capabilities a single symbol, settle modes."""
    with interior(tmp_path) as router, Recorder(router.host, router.listeners[1]["port"]) as rec:
        peer = DispatchPeer(world, f"127.0.0.1:{rec.port}", "Q2", cost=3, run_protocol=False)
        world.run_until(
            lambda: peer.control_out is not None and peer.control_out.credit > 0,
            what="the peer's control link",
        )
        sent = performatives(rec.sent())
    opened = next(p for p in sent if p.descriptor == 0x10).value
    want = captured_performative("Q2", 3).value
    # container-id, then offered and desired capabilities, then the properties and their types
    assert opened[0] == want[0] == "Q2"
    assert opened[7:9] == want[7:9]
    assert {k: (type(v), v) for k, v in opened[9].items() if k != "qd.conn-id"} == {
        k: (type(v), v) for k, v in want[9].items() if k != "qd.conn-id"
    }
    assert type(opened[9][symbol("qd.conn-id")]) is type(want[9][symbol("qd.conn-id")])
    attaches = [p.value for p in sent if p.descriptor == 0x12][:2]
    for ours, theirs in zip(
        attaches, [captured_performative("Q2", i).value for i in (4, 5)], strict=True
    ):
        assert ours[2:5] == theirs[2:5]  # role, snd-settle-mode, rcv-settle-mode
        assert ours[5].value[10] == theirs[5].value[10] == symbol("qd.router")  # source caps
        assert ours[6].value[6] == theirs[6].value[6] == symbol("qd.router")  # target caps


class Recorder:
    """A TCP relay in front of our router that keeps what the client side sent."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.data = bytearray()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.relay, daemon=True)

    def __enter__(self) -> Recorder:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)
        self.server.close()

    def sent(self) -> bytes:
        time.sleep(0.2)
        return bytes(self.data)

    def relay(self) -> None:
        self.server.settimeout(5)
        client, _ = self.server.accept()
        upstream = socket.create_connection(self.target)
        with client, upstream:
            ends = {client: upstream, upstream: client}
            while not self.stop.is_set():
                ready, _, _ = select.select(list(ends), [], [], 0.05)
                for sock in ready:
                    chunk = sock.recv(65536)
                    if not chunk:
                        return
                    if sock is client:
                        self.data += chunk
                    ends[sock].sendall(chunk)


def test_qdrouterds_own_bytes_replayed_make_it_a_neighbour(tmp_path: Path, world: World) -> None:
    """Q2's control messages of the capture, as they came, to our router in Q1's place: it
    takes Q2 as a neighbour at the captured link cost (3, from Q2's Open) and learns Q2's
    addresses with their treatments from its MAU (C-composed: symbol keys, smalllong)."""
    with interior(tmp_path, "Q1") as router:
        peer = DispatchPeer(world, peer_url(router), "Q2", cost=3, run_protocol=False)
        world.run_until(
            lambda: (peer.control_out is not None and peer.control_out.credit > 0) or peer.closed,
            what="the peer's control link",
        )
        replay = [c for c in CONTROL if c["sender"] == "Q2" and c["connection"] == 1]
        # The last HELLO captured: by then Q2 had heard Q1 (`seen`), so the link is two-way.
        hello = [bytes.fromhex(c["bytes"]) for c in replay if c["opcode"] == "HELLO"][-1]
        for captured in replay:
            peer.send_control(bytes.fromhex(captured["bytes"]))
            world.run_for(0.02)
        mgmt = Management(world.connect(router.url))

        def learned() -> bool:
            peer.send_control(hello)  # HELLOs keep coming, as from a live Q2
            world.run_for(0.1)
            nodes = {r["id"]: r for r in mgmt.query("router.node", ["id", "cost", "linkState"])[1:]}
            addrs = {
                r["key"]: r for r in mgmt.query("router.address", ["key", "remoteHostRouters"])
            }
            return (
                nodes.get("Q2", {}).get("cost") == 3
                and addrs.get("M0foo", {}).get("remoteHostRouters") == ["Q2"]
                and addrs.get("M0mc/x", {}).get("remoteHostRouters") == ["Q2"]
            )

        world.run_until(learned, timeout=10, what="Q1 (ours) to take Q2 and its addresses")
        assert "control.invalid" not in router.log() and "control.malformed" not in router.log()


# ----- a network of both kinds ---------------------------------------------------------------


def joined(world: World, router: RouterProcess, peer: DispatchPeer) -> Management:
    mgmt = Management(world.connect(router.url))
    rid = router.config["router"]["id"]

    def both_ways() -> bool:
        peer.run_for(0.1)
        nodes = {r["id"] for r in mgmt.query("router.node", ["id", "cost"])[1:] if r["cost"]}
        return peer.rid in nodes and rid in peer.routes.cost

    peer.run_until(both_ways, timeout=15, what=f"{rid} and {peer.rid} to route to each other")
    return mgmt


@pytest.mark.parametrize("dialler", ["Q", "R"])
def test_anycast_and_multicast_both_ways_with_dispatchs_annotations(
    tmp_path: Path, world: World, dialler: str
) -> None:
    with mixed(tmp_path, world, dialler, addresses={"M0fromR": 3, "M0mc.all": 1}) as (router, peer):
        joined(world, router, peer)
        client = world.connect(router.url)
        # Ours -> Q: a client sender on R reaches Q's consumer of fromR (Q's MAU made it known),
        # annotated as Dispatch expects: ingress R, trace [R], to-override absent (a targeted
        # sender's address is the message's own `to`... which the router sets as x-opt-qd.to).
        to_q = client.sender("fromR")
        peer.run_until(lambda: to_q.credit > 0, what="credit for a consumer on Q")
        tracked = to_q.send(Message(body="to Q"))
        peer.run_until(lambda: peer.data, what="the message at Q")
        msg, delivery = peer.data[0]
        assert msg.body == "to Q"
        assert msg.annotations["x-opt-qd.ingress"] == "0/R"
        assert msg.annotations["x-opt-qd.trace"] == ["0/R"]
        delivery.update(Delivery.ACCEPTED)
        delivery.settle()
        peer.run_until(lambda: tracked.settled, what="Q's outcome back at the sender")
        assert tracked.outcome == "accepted"
        # Q -> ours: Q's data message for a consumer on R, with Dispatch's annotations, which
        # are stripped toward the client; the outcome goes back to Q.
        consumer = client.receiver("fromQ")
        peer.run_until(lambda: "M0fromQ" in peer.mobile.get("R", {}), what="R's MAU for fromQ")
        tail = encode_client_message("fromQ", "from Q")
        sent = peer.send_data(data_message(tail, "0/Q", ["0/Q"]))
        peer.run_until(lambda: consumer.bodies == ["from Q"], what="Q's message at R's consumer")
        assert consumer.messages[0].annotations in (None, {})
        peer.run_until(lambda: sent.remote_state == Delivery.ACCEPTED, what="the outcome at Q")
        # Multicast from Q: R's two consumers get one copy each.
        subs = [world.connect(router.url).receiver("mc.all") for _ in range(2)]
        peer.run_until(lambda: "M0mc.all" in peer.mobile.get("R", {}), what="R's MAU for mc.all")
        peer.send_data(
            data_message(encode_client_message("mc.all", "reading"), "0/Q", ["0/Q"]), settled=True
        )
        peer.run_until(lambda: all(s.bodies == ["reading"] for s in subs), what="both copies")
        peer.run_for(0.3)
        assert [s.bodies for s in subs] == [["reading"], ["reading"]]


def test_a_reply_to_a_topo_address_crosses_back(tmp_path: Path, world: World) -> None:
    """A client on R with a dynamic reply-to (_topo/0/R/temp.*) asks a service behind Q; Q
    routes the reply by that address to R (topological, not advertised) and it arrives."""
    with interior(tmp_path) as router:
        peer = DispatchPeer(world, peer_url(router), "Q", addresses={"M0svc": 2})
        joined(world, router, peer)
        client = world.connect(router.url)
        replies = client.receiver(None, dynamic=True)
        assert replies.address.startswith("_topo/0/R/temp.")
        request = client.sender("svc")
        peer.run_until(lambda: request.credit > 0, what="credit for svc")
        request.send(Message(body="question", reply_to=replies.address))
        peer.run_until(lambda: peer.data, what="the request at Q")
        asked, delivery = peer.data[0]
        delivery.update(Delivery.ACCEPTED)
        delivery.settle()
        peer.send_data(
            data_message(encode_client_message(asked.reply_to, "answer"), "0/Q", ["0/Q"])
        )
        peer.run_until(lambda: replies.bodies == ["answer"], what="the reply at R")


def test_edge_spaces_travel_as_dispatchs_edge_summaries(tmp_path: Path, world: World) -> None:
    """Dispatch routes `_edge/<edge>/...` only on the edge summary `H<edge>`: Q's edge QE is
    reached from R by its reply address, and R's edge E is advertised to Q as `HE`."""
    router = interior(tmp_path)
    router.listeners.append({"host": "127.0.0.1", "port": free_port(), "role": "edge"})
    with router:
        peer = DispatchPeer(world, peer_url(router), "Q", addresses={"HQE": 1})
        joined(world, router, peer)
        client = world.connect(router.url)
        anonymous = client.sender(None)
        peer.run_until(lambda: anonymous.credit > 0, what="credit")
        tracked = anonymous.send(Message(address="_edge/QE/temp.abc", body="to QE"))
        peer.run_until(lambda: peer.data, what="the message at Q, toward its edge")
        msg, delivery = peer.data[0]
        assert (msg.address, msg.body) == ("_edge/QE/temp.abc", "to QE")
        delivery.update(Delivery.ACCEPTED)
        delivery.settle()
        peer.run_until(lambda: tracked.settled, what="Q's outcome back at the sender")
        assert tracked.outcome == "accepted"
        # An edge E on R (its downlink, as a qdrouterd edge attaches it): Q learns `HE`.
        edge = world.connect(router.listener_url(2), container_id="E")
        downlink = Receiver(edge, "E", options=[EdgeDownlink()])
        peer.run_until(lambda: downlink.attached, what="E's downlink")
        peer.run_until(lambda: "M0_edge/E" in peer.mobile.get("R", {}), what="R's MAU for E")
        maus = [body for _, opcode, body in peer.received if opcode == "MAU"]
        sent = [key for body in maus for key in mau_keys(body)]
        assert "HE" in sent and not any(key.startswith("M0_edge/") for key in sent)


def test_containers_travel_as_dispatch_link_route_keys(tmp_path: Path, world: World) -> None:
    """Containers (seed 001) are advertised in Dispatch's documented classes only: `C`/`D`
    link-route keys of the prefix `(id)`, hint link-balanced, which a qdrouterd keeps as link
    routes toward us. Dispatch's own link-route keys stay link routes here, not containers."""
    with interior(tmp_path) as router:
        peer = DispatchPeer(world, peer_url(router), "Q", addresses={"Cqueue": 4, "Dqueue": 4})
        mgmt = joined(world, router, peer)
        plant = world.connect(router.url, container_id="plant-r")
        inbox = plant.receiver(None, dynamic=True)  # any link will do; the container matters
        assert inbox.attached
        peer.run_until(lambda: "C(plant-r)" in peer.mobile.get("R", {}), what="R's MAU for plant-r")
        advertised = peer.mobile["R"]
        assert {k: advertised[k] for k in ("C(plant-r)", "D(plant-r)", "C(R)", "D(R)")} == {
            "C(plant-r)": 4,
            "D(plant-r)": 4,
            "C(R)": 4,
            "D(R)": 4,
        }
        assert all(key[0] in "MCDEF" for key in advertised), advertised
        rows = mgmt.query("io.routernet.container", ["containerId", "location"])
        assert {r["containerId"] for r in rows} >= {"plant-r", "R"}
        assert "queue" not in {r["containerId"] for r in rows}
        plant.close()
        peer.run_until(
            lambda: "C(plant-r)" not in peer.mobile.get("R", {}), what="plant-r withdrawn"
        )


@pytest.mark.parametrize(("dialler", "cost"), [("Q", 1), ("Q", 4), ("R", 1), ("R", 3)])
def test_router_node_shows_the_dispatch_neighbour_at_its_cost(
    tmp_path: Path, world: World, dialler: str, cost: int
) -> None:
    """qdstat -n's view on our router, and Q's: a neighbour (its link in routerLink, no
    nextHop) at the dialling side's cost, announced in its Open (qd.inter-router-cost)."""
    with mixed(tmp_path, world, dialler, cost) as (router, peer):
        mgmt = joined(world, router, peer)
        rows = mgmt.query("router.node", ["id", "cost", "nextHop", "routerLink"])
        q = next(r for r in rows if r["id"] == "Q")
        assert q["cost"] == cost and q["nextHop"] is None and q["routerLink"] is not None
        # qdstat -l: the data links toward Q by priority; -c: the protocol.
        links = mgmt.query("router.link", ["linkType", "linkDir", "priority"])
        data_out = [
            r["priority"]
            for r in links
            if r["linkType"] == "inter-router" and r["linkDir"] == "out"
        ]
        assert sorted(data_out) == list(range(10))
        assert {c["protocol"] for c in mgmt.query("connection", ["protocol"])} == {"amqp"}
        assert peer.routes.cost["R"] == cost


def encode_client_message(to: str, body: str) -> bytes:
    """A client's message after the router annotations: properties with `to`, an amqp-value."""
    return section(0x73, encode([None, None, to])) + section(0x77, encode(body))


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
