"""A qdrouterd edge router on our interior (router/edges/dispatch.py).

The edge here is a python-qpid-proton peer that attaches, on the interior's edge listener, the
links a real qdrouterd 1.19 edge attaches (tests/data/qdrouterd-1.19/edge.json has them, and
the messages it sent, as one did against our interior): its downlink for `_edge/<id>`, the
address tracking receiver, the address lookup sender with its dynamic reply receiver, the
heartbeat sender and one sender per address its clients send to. A real qdrouterd edge did
the same against this code (docs/networks.md: mixed networks); CI has none, so this peer stands in.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clients import Client, Receiver, Sender, World
from harness import RouterProcess, free_port
from proton import Message, symbol, uint
from proton.reactor import LinkOption

from router.edges.dispatch import DOWNLINK, HEARTBEAT, LOOKUP, TRACKING, BadLookup, lookup_request

pytestmark = pytest.mark.network

EDGE_ID = "QE"
BROKER_ID = "broker-1"
ROUTES = [
    {"prefix": "queue", "direction": "in", "containerId": BROKER_ID},
    {"prefix": "queue", "direction": "out", "containerId": BROKER_ID},
]
CAPTURED = json.loads((Path(__file__).parent / "data/qdrouterd-1.19/edge.json").read_text())


class Downlink(LinkOption):
    """The capability a qdrouterd edge puts on its downlink's source (one symbol)."""

    def apply(self, link: Any) -> None:
        link.source.capabilities.put_symbol(symbol(DOWNLINK))


class DispatchEdge:
    """The links a qdrouterd edge attaches on its uplink, as it attaches them."""

    def __init__(self, world: World, url: str, edge_id: str = EDGE_ID) -> None:
        self.world = world
        self.client = world.connect(url, container_id=edge_id)
        self.downlink = Receiver(self.client, edge_id, options=[Downlink()])
        self.tracking = Receiver(self.client, TRACKING)
        self.replies = Receiver(self.client, None, dynamic=True)
        self.lookups = Sender(self.client, LOOKUP)
        self.heartbeat = Sender(self.client, HEARTBEAT, presettled=True)
        world.run_until(
            lambda: (
                all(
                    lk.attached
                    for lk in (
                        self.downlink,
                        self.tracking,
                        self.replies,
                        self.lookups,
                        self.heartbeat,
                    )
                )
                and self.replies.address is not None
            ),
            what="the edge's links",
        )
        self.asked = 0

    def lookup(self, address: str, receiver: bool) -> Message:
        """Ask as the edge's lookup client does: uint version and opcode, [address, is the
        edge's link a receiver], a string correlation id; the answer as it came."""
        self.world.run_until(lambda: self.lookups.credit > 0, what="lookup credit")
        self.asked += 1
        answered = len(self.replies.messages)
        self.lookups.send(
            Message(
                reply_to=self.replies.address,
                correlation_id=f"client-{self.asked:016x}",
                properties={"version": uint(1), "opcode": uint(1)},
                body=[address, receiver],
            )
        )
        self.world.run_until(lambda: len(self.replies.messages) > answered, what="lookup answer")
        return self.replies.messages[-1]

    def told(self) -> list[list[Any]]:
        return [m.body for m in self.tracking.messages]


@pytest.fixture
def interior(tmp_path: Path) -> Iterator[RouterProcess]:
    with RouterProcess(
        tmp_path,
        "I",
        listeners=[
            {},
            {"role": "edge", "port": free_port()},
            {"role": "route-container", "port": free_port()},
        ],
        extra_args=["--mode", "interior"],
        sections={"linkRoutes": ROUTES},
    ) as router:
        yield router


def url(router: RouterProcess, role: str) -> str:
    listener = next(lst for lst in router.listeners if lst.get("role", "normal") == role)
    return f"{listener['host']}:{listener['port']}"


def test_the_captured_lookup_decodes_as_the_edge_meant_it() -> None:
    for case in CAPTURED["lookups"]:
        address, receiver, reply_to, correlation_id = lookup_request(bytes.fromhex(case["hex"]))
        assert (address, receiver) == (case["address"], case["edge_link_is_receiver"])
        assert reply_to.startswith("_topo/0/I/temp.") and correlation_id.startswith("client-")


def request(version: int = 1, opcode: int = 1, body: Any = None, **fields: Any) -> bytes:
    properties = {"version": uint(version), "opcode": uint(opcode)}
    message = Message(properties=properties, body=["q", True] if body is None else body)
    message.reply_to, message.correlation_id = fields.get("reply_to", "r"), fields.get("cid", "c")
    return bytes(message.encode())


@pytest.mark.parametrize(
    "data",
    [
        request(version=2),
        request(opcode=7),
        request(body="q"),
        request(body=[1, True]),
        request(reply_to=None),
        request(cid=None),
    ],
    ids=["version", "opcode", "body", "address", "no-reply-to", "no-correlation-id"],
)
def test_a_lookup_the_interior_cannot_answer_is_named(data: bytes) -> None:
    with pytest.raises(BadLookup):
        lookup_request(data)


def test_lookups_answer_as_dispatchs_server(interior: RouterProcess, world: World) -> None:
    edge = DispatchEdge(world, url(interior, "edge"))
    plain = edge.lookup("q1", receiver=True)
    assert plain.correlation_id == f"client-{1:016x}"
    assert plain.properties == {"version": 1, "opcode": 1, "status": 3}  # not found
    assert all(isinstance(v, uint) for v in plain.properties.values())
    assert plain.body == [False, False]
    assert edge.lookup("queue.a", receiver=True).body == [True, False]  # no broker yet
    assert {t.outcome for t in edge.lookups.sent} == {"accepted"}

    Client(world, url(interior, "route-container"), container_id=BROKER_ID)
    world.run_for(0.3)
    for receiver in (True, False):
        routed = edge.lookup("queue.a", receiver=receiver)
        assert routed.properties["status"] == 0 and routed.body == [True, True]


def test_the_edge_is_told_when_its_addresses_have_consumers(
    interior: RouterProcess, world: World
) -> None:
    edge = DispatchEdge(world, url(interior, "edge"))
    outlink = Sender(edge.client, "q1")  # the edge's link for its clients' sends to q1
    world.run_until(lambda: outlink.attached)
    world.run_for(0.5)
    assert edge.told() == [] and outlink.credit == 0  # nobody consumes q1 yet

    consumer = Receiver(world.connect(interior.url), "q1")
    world.run_until(lambda: edge.told() == [["M0q1", True]], timeout=5, what="q1 reachable")
    world.run_until(lambda: outlink.credit > 0, what="credit for q1")
    outlink.send_all(Message(body=i) for i in range(5))
    world.run_until(lambda: outlink.all_settled() and len(consumer.messages) == 5)
    assert consumer.bodies == list(range(5))
    assert {t.outcome for t in outlink.sent} == {"accepted"}

    consumer.link.close()
    world.run_until(
        lambda: edge.told()[-1:] == [["M0q1", False]], timeout=5, what="q1 unreachable again"
    )
    assert len(edge.told()) == 2  # once each way, not every tick
    # The edge's own consumers (its proxy links) do not count as destinations for its sends.
    proxy = Receiver(edge.client, "q1")
    world.run_until(lambda: proxy.attached)
    world.run_for(0.5)
    assert len(edge.told()) == 2


def test_an_edge_whose_link_for_an_address_came_again_is_told_again(
    interior: RouterProcess, world: World
) -> None:
    """The edge ends its link for q1 and attaches another in the same breath (its last client
    sender went and a new one came, as after the edge was stopped for a while): the interior
    reads both between two of its ticks. The new link is told afresh that q1 has consumers, as
    Dispatch tells each link once attached; told per address only, the edge, which forgot it
    with the old link, waited for an answer that never came and its senders got no credit
    (found by the chaos soak, seed 29: an edge's senders starved after its SIGSTOP)."""
    edge = DispatchEdge(world, url(interior, "edge"))
    Receiver(world.connect(interior.url), "q1")
    outlink = Sender(edge.client, "q1", name="edge.sends.q1.1")
    world.run_until(lambda: edge.told() == [["M0q1", True]], timeout=5, what="q1 reachable")

    outlink.link.close()
    again = Sender(
        edge.client, "q1", name="edge.sends.q1.2"
    )  # no turn of the event loop between the two
    world.run_until(lambda: again.attached, what="the new link")
    world.run_until(lambda: edge.told() == [["M0q1", True]] * 2, timeout=5, what="q1 told again")
    world.run_for(0.5)
    assert edge.told() == [["M0q1", True]] * 2  # once for the new link, not every tick


def test_the_edges_space_is_reached_through_its_downlink(
    interior: RouterProcess, world: World
) -> None:
    edge = DispatchEdge(world, url(interior, "edge"))
    reply_to = f"_edge/{EDGE_ID}/temp.abc"  # what the edge gives its clients' dynamic links
    sender = Sender(world.connect(interior.url), None)
    world.run_until(lambda: sender.credit > 0)
    sender.send(Message(address=reply_to, body="answer"))
    world.run_until(lambda: len(edge.downlink.messages) == 1 and sender.all_settled())
    assert edge.downlink.messages[0].address == reply_to
    assert {t.outcome for t in sender.sent} == {"accepted"}


def test_heartbeats_are_flowed_back_and_their_absence_closes_the_edge(
    interior: RouterProcess, world: World
) -> None:
    edge = DispatchEdge(world, url(interior, "edge"))
    world.run_until(lambda: edge.heartbeat.credit > 0)
    window = edge.heartbeat.credit
    for beat in range(3):
        edge.heartbeat.send(Message(body=beat))
        # The edge sends its next heartbeat only after a flow: each one is given back.
        world.run_until(lambda: edge.heartbeat.credit == window, what="the heartbeat's credit")
    # Another edge takes its heartbeat link away: it is no longer watched.
    other = DispatchEdge(world, url(interior, "edge"), edge_id="QF")
    other.heartbeat.link.close()
    started = time.monotonic()
    world.run_until(lambda: edge.client.finished, timeout=15, what="the silent edge closed")
    assert time.monotonic() - started >= 7.0
    assert interior.log().count("edge.heartbeat_lost") == 1
    world.run_for(1.5)
    assert not other.client.finished


def test_only_edges_look_up_or_beat(interior: RouterProcess, world: World) -> None:
    client = world.connect(interior.url)
    replies = Receiver(client, None, dynamic=True)
    lookups = Sender(client, LOOKUP)
    beats = Sender(client, HEARTBEAT)
    world.run_until(lambda: lookups.credit > 0 and beats.credit > 0 and replies.address)
    lookups.send(
        Message(
            reply_to=replies.address,
            correlation_id="c1",
            properties={"version": uint(1), "opcode": uint(1)},
            body=["q1", True],
        )
    )
    beats.send(Message(body=0))
    world.run_until(lambda: lookups.all_settled() and beats.all_settled())
    assert [t.outcome for t in lookups.sent + beats.sent] == ["rejected", "rejected"]
    assert replies.messages == []


def test_a_malformed_lookup_is_rejected_and_the_edge_served_on(
    interior: RouterProcess, world: World
) -> None:
    edge = DispatchEdge(world, url(interior, "edge"))
    edge.lookups.send(Message(properties={"version": uint(1), "opcode": uint(1)}, body=b"\x00"))
    world.run_until(lambda: edge.lookups.all_settled())
    assert edge.lookups.sent[0].outcome == "rejected"
    assert edge.lookup("q1", receiver=False).body == [False, False]
