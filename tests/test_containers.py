"""Seed 001's global addressing on one network of real routers: `(container)/node` links and
messages from any router and from an edge, `(router)/node`, `()/node` by gateway rules, `$node`
kept local, unknown and moving containers, duplicates.

The network: interiors A and B (B dials A), edge E on A. The "broker-like" container is a
python-qpid-proton peer with its own container-id that dials B like any client and accepts the
links the routers attach to it (tests/test_linkroute.py's FakeBroker).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clients import ACCEPTED, REJECTED, RELEASED, Client, Management, World, blocking_round_trip
from harness import RouterProcess
from proton import Condition, Message, SymbolList, Terminus, symbol
from proton.reactor import SenderOption
from proton.utils import BlockingConnection, LinkDetached
from test_edge import edge, interior, started
from test_linkroute import FakeBroker

PLANT = "plant-b"


@pytest.fixture
def world() -> Iterator[World]:
    with World() as w:
        yield w


class Net:
    def __init__(self, a: RouterProcess, b: RouterProcess, e: RouterProcess) -> None:
        self.a, self.b, self.e = a, b, e


@contextlib.contextmanager
def network(tmp_path: Path, world: World, **sections: Any) -> Iterator[Net]:
    a = interior(tmp_path, "A")
    b = interior(tmp_path, "B", connect=a)
    e = edge(tmp_path, "E", [a])
    for r in (a, b, e):
        r.config.update(sections)
    with started(a, b, e):
        net = Net(a, b, e)
        wait_for_container(world, a, "B")
        yield net


def containers(world: World, router: RouterProcess | str) -> dict[str, dict[str, Any]]:
    """Management's container rows of `router` (or of the router at this URL), by id."""
    client = world.connect(router if isinstance(router, str) else router.url)
    try:
        rows = Management(client).query("io.routernet.container")
    finally:
        client.close()
    return {row["containerId"]: row for row in rows}


def wait_for_container(world: World, router: RouterProcess, container: str) -> None:
    """Until `router` knows where `container` is (advertisements take a moment)."""
    world.run_until(
        lambda: (
            containers(world, router).get(container, {}).get("location", "unreachable")
            != "unreachable"
        ),
        timeout=20.0,
        what=f"{router.id} to learn container {container}",
    )


def anonymous_send(client: Client, to: str, count: int, **props: Any) -> list[Any]:
    sender = client.sender(None)
    world = client.world
    world.run_until(lambda: sender.credit > 0, what="anonymous sender credit")
    tracked = [
        sender.send(Message(address=to, body=f"m{i}", properties=props or None))
        for i in range(count)
    ]
    world.run_until(lambda: all(t.settled for t in tracked), what="outcomes")
    return [t.state for t in tracked]


def test_links_reach_a_container_on_another_router(tmp_path: Path, world: World) -> None:
    with network(tmp_path, world) as net:
        plant = FakeBroker(world, net.b.url, container_id=PLANT)
        wait_for_container(world, net.a, PLANT)
        client = world.connect(net.a.url)
        sender = client.sender(f"({PLANT})/queue1", name="to-plant")
        assert sender.attached and not sender.closed
        # The container is attached to its own node name: the container part is the network's.
        assert ("to-plant", "queue1", True) in plant.attaches
        world.run_until(lambda: sender.credit == 50, what="the container's credit")
        tracked = sender.send_all(Message(body=i) for i in range(5))
        world.run_until(lambda: all(t.settled for t in tracked), what="outcomes")
        assert [t.state for t in tracked] == [ACCEPTED] * 5
        assert [(a, m.body) for a, m in plant.received] == [("queue1", i) for i in range(5)]
        plant.outcome = REJECTED
        rejected = sender.send(Message(body="no"))
        world.run_until(lambda: rejected.settled, what="rejection")
        assert rejected.state == REJECTED
        assert rejected.condition is not None and rejected.condition.name == "amqp:not-allowed"

        receiver = client.receiver(f"({PLANT})/queue1", credit=10)
        assert receiver.attached
        plant.serve("queue1", 3)
        world.run_until(lambda: len(receiver.messages) == 3, what="messages from the container")
        assert receiver.bodies == ["m0", "m1", "m2"]
        # A detach from the client reaches the container, end to end.
        receiver.close()
        world.run_until(lambda: len(plant.detaches) == 1, what="detach at the container")
        # From an edge too: up to its interior, then on as from any router.
        on_edge = world.connect(net.e.url).sender(f"({PLANT})/queue2", name="from-edge")
        assert on_edge.attached and not on_edge.closed
        assert ("from-edge", "queue2", True) in plant.attaches


def test_blocking_clients_see_the_address_they_asked_for(tmp_path: Path, world: World) -> None:
    """The container answers in its own terms (`atm`); every client sees `(plant-b)/atm` (or
    however it spelled it, or `()/atm` that a gateway rule resolved) on the returning attach,
    on the container's router (B), on another (A) and on an edge (E)."""
    rules = {"rules": [{"container": PLANT, "node": {"exact": "atm"}}]}
    with network(tmp_path, world, gateway=rules) as net:
        plant = FakeBroker(world, net.b.url, container_id=PLANT)
        wait_for_container(world, net.a, PLANT)  # E sends what it does not know up to A
        asked = [
            (net.b, f"({PLANT})/atm"),
            (net.a, f"({PLANT})/atm"),
            (net.e, f"({PLANT})/atm"),
            (net.e, f"amqp:({PLANT})/atm"),
            (net.e, "()/atm"),
            (net.b, "()/atm"),
        ]
        for router, address in asked:
            plant.serve("atm", 1)
            answered = world.beside(
                lambda url=router.url, address=address: blocking_round_trip(url, address),
                what=f"a blocking client on {router.id} to {address}",
            )
            assert answered == (address, address, "m0")
        # The container was attached to its own node name, every time.
        assert {(a, we_receive) for _n, a, we_receive in plant.attaches} == {
            ("atm", True),
            ("atm", False),
        }
        assert [(a, m.body) for a, m in plant.received] == [("atm", "to the container")] * len(
            asked
        )


def test_a_containers_refusal_stays_a_refusal(tmp_path: Path, world: World) -> None:
    """A container that refuses answers with a null terminus: the client gets that and the
    container's error, not a terminus the router made up for it."""
    with network(tmp_path, world) as net:
        plant = FakeBroker(world, net.b.url, container_id=PLANT)
        plant.refuse["closed"] = Condition("amqp:not-found", "no such node")
        wait_for_container(world, net.a, PLANT)
        client = world.connect(net.e.url)
        sender = client.sender(f"({PLANT})/closed")
        receiver = client.receiver(f"({PLANT})/closed")
        world.run_until(lambda: sender.closed and receiver.closed, what="both refusals")
        for link in (sender.link, receiver.link):
            assert link.remote_condition.name == "amqp:not-found"
            assert link.remote_source.type == Terminus.UNSPECIFIED
            assert link.remote_target.type == Terminus.UNSPECIFIED

        def refused() -> str:
            conn = BlockingConnection(net.e.url, timeout=10)
            try:
                with pytest.raises(LinkDetached) as detached:
                    conn.create_sender(f"({PLANT})/closed")
                return str(detached.value.condition)
            finally:
                conn.close()

        assert world.beside(refused) == "amqp:not-found"


def test_anonymous_relay_messages_reach_the_container_from_a_router_and_an_edge(
    tmp_path: Path, world: World
) -> None:
    with network(tmp_path, world) as net:
        plant = FakeBroker(world, net.b.url, container_id=PLANT)
        wait_for_container(world, net.a, PLANT)
        for router in (net.a, net.e, net.b):
            client = world.connect(router.url)
            assert anonymous_send(client, f"({PLANT})/queue1", 3) == [ACCEPTED] * 3
            client.close()
        assert len(plant.received) == 9
        assert {address for address, _m in plant.received} == {"queue1"}
        # One link per node, attached once by B and reused for every message.
        assert [a for a in plant.attaches if a[1] == "queue1"] == [plant.attaches[0]]
        plant.outcome = REJECTED
        client = world.connect(net.e.url)
        assert anonymous_send(client, f"amqp:({PLANT})/queue1", 1) == [REJECTED]


def test_a_container_offering_anonymous_relay_gets_messages_on_its_anonymous_terminus(
    tmp_path: Path, world: World
) -> None:
    with network(tmp_path, world) as net:
        # A container that offers ANONYMOUS-RELAY: the router sends it everything on one link.
        relaying = FakeBroker(
            world,
            net.b.url,
            container_id="relay-plant",
            offered_capabilities=SymbolList([symbol("ANONYMOUS-RELAY")]),
        )
        wait_for_container(world, net.a, "relay-plant")
        client = world.connect(net.a.url)
        assert anonymous_send(client, "(relay-plant)/one", 1) == [ACCEPTED]
        assert anonymous_send(client, "(relay-plant)/two", 1) == [ACCEPTED]
        # One link, no target: each message says where it goes.
        assert [a[1] for a in relaying.attaches] == [None]
        assert [(a, m.address) for a, m in relaying.received] == [
            (None, "(relay-plant)/one"),
            (None, "(relay-plant)/two"),
        ]


class LinkProperties(SenderOption):  # type: ignore[misc]
    def __init__(self, properties: dict[str, Any], on_target: bool = False) -> None:
        self.properties = properties
        self.on_target = on_target

    def apply(self, sender: Any) -> None:
        if self.on_target:  # the target terminus's node properties
            sender.target.properties.put_dict(self.properties)
        else:
            sender.properties = self.properties


def test_unknown_container_is_not_found(tmp_path: Path, world: World) -> None:
    with network(tmp_path, world) as net:
        for router in (net.a, net.e):
            client = world.connect(router.url)
            sender = client.sender("(nobody)/queue1")
            world.run_until(lambda s=sender: s.closed, what="refusal")
            assert sender.errors and sender.errors[0] is not None
            assert sender.errors[0].name == "amqp:not-found"
            assert "nobody" in (sender.errors[0].description or "")
            # A message to it is released: the container may come later.
            assert anonymous_send(client, "(nobody)/queue1", 1) == [RELEASED]


def test_a_container_that_moves_is_found_at_its_new_router(tmp_path: Path, world: World) -> None:
    with network(tmp_path, world) as net:
        plant = FakeBroker(world, net.b.url, container_id=PLANT)
        wait_for_container(world, net.a, PLANT)
        sender_client = world.connect(net.e.url)
        assert anonymous_send(sender_client, f"({PLANT})/queue1", 1) == [ACCEPTED]
        plant.close()
        world.run_until(
            lambda: PLANT not in containers(world, net.a), what="A to forget the container"
        )
        moved = FakeBroker(world, net.a.url, container_id=PLANT)
        world.run_until(
            lambda: containers(world, net.b).get(PLANT, {}).get("location") == "router A",
            what="B to learn the new place",
        )
        client = world.connect(net.b.url)
        assert anonymous_send(client, f"({PLANT})/queue1", 2) == [ACCEPTED] * 2
        sender = client.sender(f"({PLANT})/queue1")
        assert sender.attached and not sender.closed
        assert len(moved.received) == 2


def test_a_router_is_a_container(tmp_path: Path, world: World) -> None:
    with network(tmp_path, world) as net:
        client = world.connect(net.a.url)
        # (B)/$management is B's agent, by link from A.
        assert Management(client, "(B)/$management").router()["id"] == "B"
        # (B)/x: the consumers of x attached to B, not A's.
        on_a = world.connect(net.a.url).receiver("x")
        on_b = world.connect(net.b.url).receiver("x")
        world.run_until(
            lambda: "M0x" in remote_keys(world, net.a), what="A to learn B's consumer of x"
        )
        assert anonymous_send(client, "(B)/x", 4) == [ACCEPTED] * 4
        sender = client.sender("(B)/x")
        tracked = sender.send_all(Message(body=i) for i in range(4))
        world.run_until(lambda: all(t.settled for t in tracked), what="outcomes")
        world.run_until(lambda: len(on_b.messages) == 8, what="B's consumer")
        assert on_a.messages == []


def remote_keys(world: World, router: RouterProcess) -> set[str]:
    client = world.connect(router.url)
    try:
        rows = Management(client).query("router.address", ["key", "remoteCount"])
    finally:
        client.close()
    return {row["key"] for row in rows if row["remoteCount"]}


def test_reserved_nodes_stay_local(tmp_path: Path, world: World) -> None:
    with network(tmp_path, world) as net:
        here = world.connect(net.b.url)
        receiver = here.receiver("$somewhere")
        elsewhere = world.connect(net.a.url)
        world.run_for(1.0)  # long enough for an advertisement, were there one
        assert "L$somewhere" not in remote_keys(world, net.a)
        assert anonymous_send(elsewhere, "$somewhere", 1) == [RELEASED]
        assert anonymous_send(here, "$somewhere", 2) == [ACCEPTED] * 2
        world.run_until(lambda: len(receiver.messages) == 2, what="the local consumer")


def test_gateway_rules_pick_the_container_from_application_properties(
    tmp_path: Path, world: World
) -> None:
    rules = {
        "rules": [
            {"container": "plant-a", "applicationProperties": {"site": {"exact": "a"}}},
            {"container": "plant-b", "applicationProperties": {"site": {"prefix": "b"}}},
            {"container": "B", "applicationProperties": {"site": {"exact": "router"}}},
        ]
    }
    with network(tmp_path, world, gateway=rules) as net:
        plant_a = FakeBroker(world, net.a.url, container_id="plant-a")
        plant_b = FakeBroker(world, net.b.url, container_id="plant-b")
        wait_for_container(world, net.a, "plant-b")
        client = world.connect(net.e.url)
        assert anonymous_send(client, "()/control", 2, site="a") == [ACCEPTED] * 2
        assert anonymous_send(client, "()/control", 3, site="b-north") == [ACCEPTED] * 3
        assert anonymous_send(client, "()/control", 1, site="z") == [RELEASED]
        assert [a for a, _m in plant_a.received] == ["control"] * 2
        assert [a for a, _m in plant_b.received] == ["control"] * 3
        # A link to ()/node has no message to look at: its link properties decide, else refused.
        sender = client.sender("()/control")
        world.run_until(lambda: sender.closed, what="refusal")
        assert sender.errors[0] is not None and sender.errors[0].name == "amqp:not-found"
        link = world.container.create_sender(
            client.conn, "()/control", name="by-props", options=LinkProperties({"site": "a"})
        )
        world.run_until(lambda: link.state & link.REMOTE_ACTIVE, what="the attach answered")
        assert ("by-props", "control", True) in plant_a.attaches
        assert not link.state & link.REMOTE_CLOSED
        on_target = world.container.create_sender(
            client.conn,
            "()/control",
            name="by-target",
            options=LinkProperties({"site": "b-south"}, on_target=True),
        )
        world.run_until(lambda: on_target.state & on_target.REMOTE_ACTIVE, what="the attach")
        assert ("by-target", "control", True) in plant_b.attaches
        # Resolved to the router the client is on: the link ends there, its messages for that
        # router's consumers of the node.
        on_b = world.connect(net.b.url)
        consumer = on_b.receiver("control")
        here = world.container.create_sender(
            on_b.conn, "()/control", name="to-b", options=LinkProperties({"site": "router"})
        )
        world.run_until(lambda: here.credit > 0, what="credit for the local consumer")
        here.send(Message(body="local"))
        world.run_until(lambda: consumer.bodies == ["local"], what="the local consumer")


def test_replies_find_the_requester_by_its_container(tmp_path: Path, world: World) -> None:
    with network(tmp_path, world) as net:
        requester = FakeBroker(world, net.e.url, container_id="requester")
        service = FakeBroker(world, net.b.url, container_id="service")
        wait_for_container(world, net.a, "service")
        wait_for_container(world, net.b, "requester")
        client = world.connect(net.e.url, container_id="requester-app")
        request = Message(address="(service)/requests", reply_to="(requester)/replies", body="q")
        sender = client.sender(None)
        world.run_until(lambda: sender.credit > 0, what="credit")
        sender.send(request)
        world.run_until(lambda: len(service.received) == 1, what="the request")
        asked = service.received[0][1]
        responder = world.connect(net.b.url)
        assert anonymous_send(responder, asked.reply_to, 1) == [ACCEPTED]
        assert [a for a, _m in requester.received] == ["replies"]


def test_a_duplicate_container_id_is_reported_and_routed_to_the_nearest(
    tmp_path: Path, world: World
) -> None:
    with network(tmp_path, world) as net:
        on_b = FakeBroker(world, net.b.url, container_id="twin")
        wait_for_container(world, net.a, "twin")
        on_a = FakeBroker(world, net.a.url, container_id="twin")
        net.a.wait_log("container.duplicate")
        world.run_until(lambda: containers(world, net.a)["twin"]["duplicate"], what="duplicate")
        row = containers(world, net.a)["twin"]
        assert row["location"].startswith("connection")
        assert any(p == "router B" for p in row["places"])
        client = world.connect(net.a.url)
        assert anonymous_send(client, "(twin)/q", 2) == [ACCEPTED] * 2
        client = world.connect(net.b.url)
        assert anonymous_send(client, "(twin)/q", 3) == [ACCEPTED] * 3
        assert (len(on_a.received), len(on_b.received)) == (2, 3)
