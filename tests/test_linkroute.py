"""Link routes end to end: clients' links relayed by real router processes to a container.

The container here is a python-qpid-proton peer that dials the router's route-container
listener under a known container-id and plays the broker: it records what it is attached,
sent and told, answers with the outcomes and credit a test chooses, and serves messages to
receivers. tests/test_linkroute_broker.py does the same against a real broker.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clients import (
    ACCEPTED,
    REJECTED,
    RELEASED,
    Client,
    Management,
    Sender,
    World,
    blocking_round_trip,
    settle,
)
from harness import RouterNetwork, RouterProcess, free_port
from proton import Condition, Endpoint, Message, Terminus
from proton.reactor import DurableSubscription

BROKER_ID = "broker-1"
ROUTES = [
    {"prefix": "queue", "direction": "in", "containerId": BROKER_ID},
    {"prefix": "queue", "direction": "out", "containerId": BROKER_ID},
]


class FakeBroker(Client):
    """A container reached through link routes: what it gets, it records; what it serves comes
    from `queues`; `outcome` settles each message it receives; `refuse` lists addresses whose
    attach it refuses with that condition."""

    def __init__(
        self,
        world: World,
        url: str,
        credit: int = 50,
        container_id: str = BROKER_ID,
        **connect: Any,
    ) -> None:
        self.credit = credit
        self.outcome = ACCEPTED
        self.queues: dict[str, list[Message]] = {}
        self.refuse: dict[str, Condition] = {}
        self.attaches: list[tuple[str, str | None, bool]] = []  # (name, address, we receive)
        self.received: list[tuple[str | None, Message]] = []
        self.detaches: list[tuple[str, str, Condition | None]] = []  # (name, kind, condition)
        self.settled: list[int] = []
        self.by_name: dict[str, Any] = {}
        super().__init__(world, url, auto_accept=False, container_id=container_id, **connect)
        world.clients.append(self)
        world.run_until(lambda: self.opened, what="broker connection")

    def on_link_remote_open(self, event: Any) -> None:
        # Handled here rather than in on_link_opening, after which proton's handler would open
        # the link again, undoing a refusal.
        link = event.link
        if not link.state & Endpoint.LOCAL_UNINIT:
            return
        receiving = link.is_receiver
        terminus = link.remote_target if receiving else link.remote_source
        address = terminus.address
        self.attaches.append((link.name, address, receiving))
        self.by_name[link.name] = link
        condition = self.refuse.get(address or "")
        if condition is not None:
            # A refusal as AMQP words it: null source and target (Proton's defaults are empty
            # termini, which a client may take for an attached link), then the detach.
            link.source.type = Terminus.UNSPECIFIED
            link.target.type = Terminus.UNSPECIFIED
            link.open()
            link.condition = condition
            link.close()
            return
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        link.open()
        if receiving and self.credit:
            link.flow(self.credit)

    def on_message(self, event: Any) -> None:
        self.received.append((event.link.target.address, event.message))
        if self.outcome == REJECTED:
            settle(event.delivery, REJECTED, condition=Condition("amqp:not-allowed", "no"))
        else:
            settle(event.delivery, self.outcome)

    def on_sendable(self, event: Any) -> None:
        link = event.link
        queue = self.queues.get(link.source.address, [])
        while queue and link.credit > 0:
            link.send(queue.pop(0))
        if link.drain_mode and not queue:
            link.drained()

    def on_settled(self, event: Any) -> None:
        self.settled.append(event.delivery.remote_state)

    def on_link_remote_close(self, event: Any) -> None:
        self.detaches.append((event.link.name, "close", event.link.remote_condition))

    def on_link_remote_detach(self, event: Any) -> None:
        self.detaches.append((event.link.name, "detach", event.link.remote_condition))

    def on_link_error(self, event: Any) -> None:
        pass  # recorded above; a broker keeps its connection when one link goes with an error

    def serve(self, address: str, count: int) -> None:
        self.queues.setdefault(address, []).extend(
            Message(body=f"m{i}", address=address) for i in range(count)
        )
        link = next(
            (lk for lk in self.by_name.values() if lk.is_sender and lk.source.address == address),
            None,
        )
        if link is not None and link.credit > 0:
            while self.queues[address] and link.credit > 0:
                link.send(self.queues[address].pop(0))


def router_with_container_listener(tmp_path: Path, **kwargs: Any) -> RouterProcess:
    return RouterProcess(
        tmp_path,
        listeners=[{}, {"role": "route-container", "port": free_port()}],
        sections={"linkRoutes": ROUTES},
        **kwargs,
    )


@pytest.fixture
def world() -> Iterator[World]:
    with World() as w:
        yield w


@pytest.fixture
def router(tmp_path: Path) -> Iterator[RouterProcess]:
    with router_with_container_listener(tmp_path) as r:
        yield r


def body_list(messages: list[tuple[str | None, Message]]) -> list[Any]:
    return [m.body for _address, m in messages]


def send_through(world: World, sender: Any, broker: FakeBroker, count: int) -> None:
    """`count` messages on a routed sender: all accepted, by the container, in order."""
    sent = sender.send_all(Message(body=i) for i in range(count))
    world.run_until(sender.all_settled, what="outcomes from the container")
    assert {t.outcome for t in sent} == {"accepted"}
    assert body_list(broker.received) == list(range(count))


def test_a_client_sender_is_routed_to_the_container_with_its_outcomes(
    router: RouterProcess, world: World
) -> None:
    broker = FakeBroker(world, router.listener_url(1))
    client = world.connect(router.url)
    sender = client.sender("queue.orders", name="orders-in")
    assert sender.attached and not sender.closed
    assert broker.attaches == [("orders-in", "queue.orders", True)]
    # The container's credit, not the router's linkCapacity, is what the client gets.
    world.run_until(lambda: sender.credit == 50, what="the container's credit")
    sent = sender.send_all(
        Message(body=i, properties={"n": i}, annotations={"x-opt-user": "u"}) for i in range(20)
    )
    world.run_until(sender.all_settled, what="outcomes")
    assert {t.outcome for t in sent} == {"accepted"}
    assert body_list(broker.received) == list(range(20))
    # Untouched on the way: the container sees the client's annotations and no router's.
    assert broker.received[3][1].properties == {"n": 3}
    assert broker.received[3][1].annotations == {"x-opt-user": "u"}

    broker.outcome = REJECTED
    rejected = sender.send(Message(body="bad"))
    world.run_until(lambda: rejected.settled)
    assert rejected.outcome == "rejected"
    assert rejected.condition is not None and rejected.condition.name == "amqp:not-allowed"
    broker.outcome = RELEASED
    released = sender.send(Message(body="later"))
    world.run_until(lambda: released.settled)
    assert released.outcome == "released"


def test_a_client_receiver_gets_what_the_container_serves(
    router: RouterProcess, world: World
) -> None:
    broker = FakeBroker(world, router.listener_url(1))
    client = world.connect(router.url)
    receiver = client.receiver("queue.jobs", credit=5)
    assert receiver.attached
    broker.serve("queue.jobs", 12)
    world.run_until(lambda: len(receiver.messages) == 12, what="12 messages")
    assert receiver.bodies == [f"m{i}" for i in range(12)]
    # Each accept travels back to the container and settles its delivery there.
    world.run_until(lambda: len(broker.settled) == 12, what="outcomes at the container")
    assert set(broker.settled) == {ACCEPTED}


def test_credit_follows_the_client_receiver(router: RouterProcess, world: World) -> None:
    broker = FakeBroker(world, router.listener_url(1))
    client = world.connect(router.url)
    receiver = client.receiver("queue.slow", credit=0)
    broker.serve("queue.slow", 10)
    world.run_for(0.3)
    assert receiver.messages == []  # no credit from the client, none for the container
    receiver.flow(3)
    world.run_until(lambda: len(receiver.messages) == 3, what="3 messages")
    world.run_for(0.3)
    assert len(receiver.messages) == 3
    assert len(broker.queues["queue.slow"]) == 7


def test_a_drain_reaches_the_container_and_comes_back(router: RouterProcess, world: World) -> None:
    broker = FakeBroker(world, router.listener_url(1))
    client = world.connect(router.url)
    receiver = client.receiver("queue.drain", credit=0)
    broker.serve("queue.drain", 2)
    receiver.link.drain(10)
    world.run_until(
        lambda: len(receiver.messages) == 2 and receiver.link.credit == 0, what="drained"
    )
    assert not receiver.link.drain_mode or receiver.link.credit == 0


def test_without_a_container_the_attach_is_refused_no_route(
    router: RouterProcess, world: World
) -> None:
    client = world.connect(router.url)
    sender = client.sender("queue.orders")
    world.run_until(lambda: sender.closed, what="refusal")
    condition = sender.link.remote_condition
    assert condition is not None and condition.name == "qd:no-route-to-dest"
    # Addresses without a link route are still message-routed as before.
    receiver = client.receiver("plain")
    assert receiver.attached and not receiver.closed


def test_the_containers_refusal_reaches_the_client(router: RouterProcess, world: World) -> None:
    broker = FakeBroker(world, router.listener_url(1))
    broker.refuse["queue.missing"] = Condition("amqp:not-found", "no such queue")
    client = world.connect(router.url)
    receiver = client.receiver("queue.missing")
    world.run_until(lambda: receiver.closed, what="refusal")
    condition = receiver.link.remote_condition
    assert (condition.name, condition.description) == ("amqp:not-found", "no such queue")


def test_detach_and_close_are_passed_on_as_such(router: RouterProcess, world: World) -> None:
    broker = FakeBroker(world, router.listener_url(1))
    client = world.connect(router.url)
    durable = client.receiver("queue.sub", name="sub-1")
    closing = client.sender("queue.in", name="in-1")
    durable.link.detach()  # closed=false: a durable subscription the client means to resume
    closing.link.close()
    world.run_until(lambda: len(broker.detaches) == 2, what="both detaches at the container")
    assert sorted((name, kind) for name, kind, _ in broker.detaches) == [
        ("in-1", "close"),
        ("sub-1", "detach"),
    ]


class SendsAfterDetach(Sender):
    """A client sender that goes on sending on its link after the router closed it, with the
    credit it had, before it answers the close: it had not read the close yet."""

    def __init__(self, client: Client, target: str, late: int) -> None:
        self.late = late
        super().__init__(client, target, name="late-sender")

    def on_link_remote_close(self, event: Any) -> None:
        if self.link.credit > 0:
            self.send_all(Message(body=f"late-{i}") for i in range(self.late))
        self.link.close()


def test_what_a_peer_sends_after_the_routers_close_is_released(
    router: RouterProcess, world: World
) -> None:
    """The container closes its end of a routed link; the router closes the client's, which,
    not having read that yet, sends on it: each of those is released (the client may send
    it again), not left without an answer. Freed at once, the link took with it Proton's
    record of them when the client's answering detach came, and the router never answered
    them."""
    broker = FakeBroker(world, router.listener_url(1))
    client = world.connect(router.url)
    sender = SendsAfterDetach(client, "queue.in", late=6)
    client.links.append(sender)
    world.run_until(lambda: sender.credit > 0, what="the container's credit")
    broker.by_name["late-sender"].close()
    world.run_until(lambda: sender.closed and len(sender.sent) == 6, what="the late sends")
    world.run_until(sender.all_settled, what="the late ones answered")
    assert [t.outcome for t in sender.sent] == ["released"] * 6
    assert broker.received == [] and router.alive()


def test_what_a_container_sends_goes_on_a_session_of_its_own_ended_with_the_link(
    router: RouterProcess, world: World
) -> None:
    """Each routed link the container sends on has a session of its own, which the router
    ends once the link is closed: RabbitMQ 3.10 can strand messages on the session of a
    consumer it is cancelling, and gives them back to its queue when that session ends.
    Links the container receives on share one session, as before."""
    broker = FakeBroker(world, router.listener_url(1))
    client = world.connect(router.url)
    client.receiver("queue.a", name="ra", credit=1)
    rb = client.receiver("queue.b", name="rb", credit=1)
    client.sender("queue.c", name="sc")
    client.sender("queue.d", name="sd")
    ends = broker.by_name
    world.run_until(lambda: {"ra", "rb", "sc", "sd"} <= ends.keys(), what="all at the container")
    sessions = {name: ends[name].session for name in ("ra", "rb", "sc", "sd")}
    assert sessions["ra"] != sessions["rb"]
    assert sessions["sc"] == sessions["sd"] and sessions["sc"] not in (
        sessions["ra"],
        sessions["rb"],
    )

    client.links[0].close()
    world.run_until(
        lambda: bool(sessions["ra"].state & Endpoint.REMOTE_CLOSED), what="ra's session ended"
    )
    assert not sessions["rb"].state & Endpoint.REMOTE_CLOSED
    broker.serve("queue.b", 1)
    world.run_until(lambda: rb.bodies == ["m0"], what="rb served on")


def test_a_clients_connection_closing_detaches_its_routed_links_at_the_container(
    router: RouterProcess, world: World
) -> None:
    """A client that closes its connection, not its links: the container's ends are detached
    with qd:routed-link-lost, as Dispatch does; closed, but for a terminus that outlives a
    disconnect (expiry-policy never: a durable subscription), which is only detached."""
    broker = FakeBroker(world, router.listener_url(1))
    client = world.connect(router.url, container_id="leaving-client")
    client.receiver("queue.sub", name="durable-1", options=[DurableSubscription()])
    client.sender("queue.in", name="in-1")
    client.close()
    world.run_until(lambda: len(broker.detaches) == 2, what="both detached at the container")
    assert sorted((name, kind, c.name) for name, kind, c in broker.detaches) == [
        ("durable-1", "detach", "qd:routed-link-lost"),
        ("in-1", "close", "qd:routed-link-lost"),
    ]


def test_losing_the_container_detaches_the_client_routed_link_lost(
    router: RouterProcess, world: World
) -> None:
    broker = FakeBroker(world, router.listener_url(1))
    client = world.connect(router.url)
    receiver = client.receiver("queue.jobs")
    assert receiver.attached
    broker.drop()
    world.run_until(lambda: receiver.closed, what="the client's link detached")
    assert receiver.link.remote_condition.name == "qd:routed-link-lost"
    assert client.conn.state & Endpoint.REMOTE_ACTIVE  # the connection itself stays


def test_management_lists_link_routes_and_their_state(router: RouterProcess, world: World) -> None:
    mgmt = Management(world.connect(router.url))
    rows = mgmt.query("router.config.linkRoute")
    assert [(r["prefix"], r["direction"], r["operStatus"]) for r in rows] == [
        ("queue", "in", "inactive"),
        ("queue", "out", "inactive"),
    ]
    FakeBroker(world, router.listener_url(1))
    rows = mgmt.query("router.config.linkRoute")
    assert {r["operStatus"] for r in rows} == {"active"}
    router_row = mgmt.query("router")[0]
    assert router_row["linkRouteCount"] == 2
    keys = {r["key"]: r for r in mgmt.query("router.address")}
    assert keys["Cqueue"]["containerCount"] == 1
    assert keys["Dqueue"]["distribution"] == "linkBalanced"


def test_links_are_routed_across_the_network_to_the_containers_router(
    tmp_path: Path, world: World
) -> None:
    """Broker on A; clients on C, two hops away: the attach goes A-ward hop by hop."""
    net = RouterNetwork(tmp_path, world, [("B", "A", 1), ("C", "B", 1)])
    for name in ("A", "B", "C"):
        net[name].config["linkRoutes"] = ROUTES
    net["A"].listeners.append(
        {"host": net["A"].host, "port": free_port(net["A"].host), "role": "route-container"}
    )
    with net:
        broker = FakeBroker(world, net["A"].listener_url(2))
        client = world.connect(net.url("C"))

        def sender_attaches() -> bool:
            sender = client.sender("queue.far")
            ok = sender.attached and not sender.closed
            if not ok:
                world.run_for(0.2)  # the route reaches C with the next mobile address update
            return ok

        net.wait_until(sender_attaches, 10, "a routed attach from C")
        send_through(world, client.links[-1], broker, 30)

        receiver = client.receiver("queue.back", credit=4)
        broker.serve("queue.back", 9)
        world.run_until(lambda: len(receiver.messages) == 9, what="9 messages via B")
        world.run_until(lambda: len(broker.settled) == 9, what="accepts back at A")


CONN_LINK_ROUTE = "org.apache.qpid.dispatch.router.connection.linkRoute"


def test_a_connection_scoped_route_serves_links_from_across_the_network(
    tmp_path: Path, world: World
) -> None:
    """A container on B creates link routes for its own connection through B's management, as
    a qdrouterd edge registers its broker's routes on its interior; clients on A reach it, and
    the routes go when it deletes them or its connection closes. A plain client may not."""
    net = RouterNetwork(tmp_path, world, [("B", "A", 1)])
    net["B"].listeners.append(
        {"host": net["B"].host, "port": free_port(net["B"].host), "role": "route-container"}
    )
    # The broker does not authenticate: B lets clients that do not change it.
    net["B"].config["router"]["managementWriters"] = ["anonymous"]
    with net:
        broker = FakeBroker(world, net["B"].listener_url(2), container_id="edge-with-broker")
        mgmt = Management(broker)
        created = {}
        for direction in ("in", "out"):
            name = f"QE/proxyLinkRoute/{direction}"
            response = mgmt.request(
                {"operation": "CREATE", "type": CONN_LINK_ROUTE, "name": name},
                {"type": CONN_LINK_ROUTE, "pattern": "broker.#", "direction": direction},
            )
            assert response.properties["statusCode"] == 201, response.properties
            assert response.body["containerId"] == "edge-with-broker"
            created[direction] = response.body["identity"]
        client = world.connect(net.url("A"))
        tries = itertools.count()

        def attaches(address: str, receive: bool) -> bool:
            """A link attached through to the peer on B (not one A message-routes itself,
            before the route reaches it with the next mobile address update)."""
            name = f"{address}-{next(tries)}"
            link = (
                client.receiver(address, name=name)
                if receive
                else client.sender(address, name=name)
            )
            if link.attached and not link.closed and name in broker.by_name:
                return True
            link.link.close()
            world.run_for(0.2)
            return False

        net.wait_until(lambda: attaches("broker.orders", False), 10, "a routed attach from A")
        send_through(world, client.links[-1], broker, 10)
        receiver = client.receiver("broker.jobs", credit=5)
        broker.serve("broker.jobs", 3)
        world.run_until(lambda: len(receiver.messages) == 3, what="3 messages from B's peer")
        # A learned the routes from B's address updates, as qdstat -a shows them.
        on_a = {row["key"]: row for row in Management(client).query("router.address")}
        assert on_a["Cbroker"]["remoteHostRouters"] == on_a["Dbroker"]["remoteHostRouters"] == ["B"]

        # Another connection neither sees nor deletes them, and a client may not make any.
        other = Management(world.connect(net.url("B")))
        delete = {"operation": "DELETE", "type": CONN_LINK_ROUTE, "identity": created["in"]}
        assert other.request(delete).properties["statusCode"] == 404
        refused = other.request(
            {"operation": "CREATE", "type": CONN_LINK_ROUTE, "name": "mine"},
            {"pattern": "#", "direction": "in"},
        )
        assert refused.properties["statusCode"] == 403
        assert mgmt.request(delete).properties["statusCode"] == 204

        def message_routed(address: str, receive: bool) -> bool:
            """Without the route the address is an ordinary one again: A serves the link
            itself, and the peer on B sees no attach."""
            name = f"{address}-{next(tries)}"
            link = (
                client.receiver(address, name=name)
                if receive
                else client.sender(address, name=name)
            )
            world.run_for(0.1)
            served_here = link.attached and not link.closed and name not in broker.by_name
            link.link.close()
            if not served_here:
                world.run_for(0.2)
            return served_here

        net.wait_until(lambda: message_routed("broker.orders", False), 10, "the route gone")
        assert attaches("broker.more-jobs", True)  # the "out" route stays
        broker.conn.close()
        net.wait_until(lambda: message_routed("broker.jobs", True), 10, "the last route gone")
        # B sees the peer's routes no more, and neither the rest of the network.
        keys = {row["key"] for row in other.query("router.address")}
        assert not keys & {"Cbroker", "Dbroker"}


def wait_applied(router: RouterProcess, world: World, count: int) -> str:
    """The router's `count`-th applied change, waited for with the world stepping so that the
    connections already open stay answered."""
    marker = "event=config.applied source=file"

    def lines() -> list[str]:
        return [line for line in router.log().splitlines() if marker in line]

    world.run_until(lambda: len(lines()) >= count, timeout=3.0, what=f"config change {count}")
    return lines()[count - 1]


def test_link_routes_added_and_removed_by_a_config_file_change(
    tmp_path: Path, world: World
) -> None:
    # The world closes its connections first, so that the router need not wait on them to stop.
    with RouterProcess(tmp_path, listeners=[{}, {"role": "route-container"}]) as router, world:
        assert router.proc is not None
        pid = router.proc.pid
        broker = FakeBroker(world, router.listener_url(1))
        client = world.connect(router.url)

        router.config["linkRoutes"] = ROUTES
        router.rewrite_config()
        applied = wait_applied(router, world, 1)
        assert "linkRoute +prefix:queue direction:in" in applied
        assert "linkRoute +prefix:queue direction:out" in applied
        sender = client.sender("queue.live", name="live-in")
        assert sender.attached and not sender.closed
        assert broker.attaches == [("live-in", "queue.live", True)]
        first = sender.send(Message(body="routed"))
        world.run_until(lambda: first.settled, what="the container's outcome")
        assert first.outcome == "accepted"
        assert body_list(broker.received) == ["routed"]

        router.config["linkRoutes"] = []
        router.rewrite_config()
        applied = wait_applied(router, world, 2)
        assert "linkRoute -prefix:queue direction:in" in applied
        # New links are the router's own again: a receiver attaches here, and a sender to it
        # gets its messages through the router, not the container.
        receiver = client.receiver("queue.live", name="live-out")
        assert receiver.attached and not receiver.closed
        local = client.sender("queue.live", name="live-in-2")
        world.run_until(lambda: local.credit > 0, what="the router's credit")
        local.send(Message(body="message-routed"))
        world.run_until(lambda: receiver.bodies == ["message-routed"], what="the message")
        # The link routed before the change stays routed.
        second = sender.send(Message(body="still routed"))
        world.run_until(lambda: second.settled, what="the container's outcome")
        assert body_list(broker.received) == ["routed", "still routed"]
        assert [name for name, _address, _receiving in broker.attaches] == ["live-in"]
        assert router.alive() and router.proc.pid == pid
        assert "config.restart_required" not in router.log()


def test_a_client_on_an_edge_is_routed_through_its_interior(tmp_path: Path, world: World) -> None:
    interior = RouterProcess(
        tmp_path,
        "A",
        listeners=[{}, {"role": "edge"}, {"role": "route-container"}],
        sections={"linkRoutes": ROUTES},
        extra_args=["--mode", "interior"],
    )
    edge = RouterProcess(
        tmp_path,
        "E1",
        sections={"linkRoutes": ROUTES},
        extra_args=["--mode", "edge", "--connect", f"127.0.0.1:{interior.listeners[1]['port']}"],
    )
    with interior, edge, world:
        broker = FakeBroker(world, interior.listener_url(2))
        world.run_until(lambda: "event=edge.uplink " in edge.log(), what="the edge's uplink")
        client = world.connect(edge.url)

        sender = client.sender("queue.from-edge", name="edge-in")
        assert sender.attached and not sender.closed
        assert broker.attaches == [("edge-in", "queue.from-edge", True)]
        world.run_until(lambda: sender.credit > 0, what="the container's credit")
        sent = sender.send_all(Message(body=i) for i in range(10))
        world.run_until(sender.all_settled, what="outcomes from the container")
        assert {t.outcome for t in sent} == {"accepted"}
        assert body_list(broker.received) == list(range(10))

        receiver = client.receiver("queue.to-edge", name="edge-out", credit=3)
        assert receiver.attached and not receiver.closed
        broker.serve("queue.to-edge", 7)
        world.run_until(lambda: len(receiver.messages) == 7, what="7 messages via A")
        assert receiver.bodies == [f"m{i}" for i in range(7)]
        world.run_until(lambda: len(broker.settled) == 7, what="accepts back at the container")
        assert set(broker.settled) == {ACCEPTED}


# Routes whose container names its nodes otherwise: (client's address, the container's).
EXTERNAL = [("queue.atm", "ext/atm"), ("del.atm", "atm"), ("add.atm", "ext/add.atm")]
EXTERNAL_ROUTES = [
    {"prefix": prefix, "direction": d, "containerId": BROKER_ID, **prefixes}
    for prefix, prefixes in (
        ("queue", {"delExternalPrefix": "queue.", "addExternalPrefix": "ext/"}),
        ("del", {"delExternalPrefix": "del."}),
        ("add", {"addExternalPrefix": "ext/"}),
    )
    for d in ("in", "out")
]


def test_external_prefixes_are_put_back_on_the_answer_to_the_client(
    tmp_path: Path, world: World
) -> None:
    """The container sees the address with delExternalPrefix off and addExternalPrefix on,
    and answers in those terms; clients, on the container's router or on an edge, see their own
    address on the returning attach, which proton.utils checks (LinkException otherwise)."""
    interior = RouterProcess(
        tmp_path,
        "A",
        listeners=[{}, {"role": "edge"}, {"role": "route-container"}],
        sections={"linkRoutes": EXTERNAL_ROUTES},
        extra_args=["--mode", "interior"],
    )
    edge = RouterProcess(
        tmp_path,
        "E1",
        sections={"linkRoutes": EXTERNAL_ROUTES},
        extra_args=["--mode", "edge", "--connect", f"127.0.0.1:{interior.listeners[1]['port']}"],
    )
    with interior, edge, world:
        broker = FakeBroker(world, interior.listener_url(2))
        world.run_until(lambda: "event=edge.uplink " in edge.log(), what="the edge's uplink")
        for router in (interior, edge):
            for address, external in EXTERNAL:
                broker.serve(external, 1)
                answered = world.beside(
                    lambda url=router.url, address=address: blocking_round_trip(url, address),
                    what=f"a blocking client on {router.id} to {address}",
                )
                assert answered == (address, address, "m0")
        assert {(a, receiving) for _n, a, receiving in broker.attaches} == {
            (external, receiving) for _a, external in EXTERNAL for receiving in (True, False)
        }
        assert body_list(broker.received) == ["to the container"] * 6


def test_a_container_on_an_edge_is_reached_from_the_interior(tmp_path: Path, world: World) -> None:
    """The edge registers its container's routes on its interior, as a qdrouterd edge does
    (connection-scoped link routes): clients on the interior, which has no link routes
    configured, reach the broker on the edge, until the broker leaves."""
    interior = RouterProcess(
        tmp_path, "A", listeners=[{}, {"role": "edge"}], extra_args=["--mode", "interior"]
    )
    edge = RouterProcess(
        tmp_path,
        "E1",
        listeners=[{}, {"role": "route-container", "port": free_port()}],
        sections={"linkRoutes": ROUTES},
        extra_args=["--mode", "edge", "--connect", f"127.0.0.1:{interior.listeners[1]['port']}"],
    )
    with interior, edge, world:
        world.run_until(lambda: "event=edge.uplink " in edge.log(), what="the edge's uplink")
        broker = FakeBroker(world, edge.listener_url(1))
        world.run_until(
            lambda: edge.log().count("event=linkroute.proxy_created") == 2,
            what="both routes registered on the interior",
        )
        client = world.connect(interior.url)
        sender = client.sender("queue.from-interior", name="interior-in")
        assert sender.attached and not sender.closed
        assert broker.attaches == [("interior-in", "queue.from-interior", True)]
        world.run_until(lambda: sender.credit > 0, what="the container's credit")
        send_through(world, sender, broker, 10)
        receiver = client.receiver("queue.to-interior", name="interior-out", credit=3)
        broker.serve("queue.to-interior", 4)
        world.run_until(lambda: len(receiver.messages) == 4, what="4 messages from the edge")

        broker.conn.close()
        world.run_until(
            lambda: edge.log().count("event=linkroute.proxy_deleted") == 2,
            what="both routes deleted on the interior",
        )
        later = client.sender("queue.from-interior", name="interior-later")
        world.run_for(0.2)
        assert later.attached and "interior-later" not in broker.by_name  # message-routed now


def test_a_link_the_container_attaches_is_not_routed_back_to_it(
    router: RouterProcess, world: World
) -> None:
    broker = FakeBroker(world, router.listener_url(1))
    sender = broker.sender("queue.loop")
    world.run_until(lambda: sender.closed, what="refusal")
    assert sender.link.remote_condition.name == "qd:no-route-to-dest"
    assert broker.attaches == []  # nothing came back to it
