"""One router process, real AMQP clients: where messages go and what the router tells about it.

Covers request/response over dynamic reply-to addresses, the three distributions and the
address rules that select them, anonymous routing (`to`, `x-opt-qd.to`), router annotations,
local/topological addresses, and `$management` as qdstat drives it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from clients import (
    ACCEPTED,
    QDSTAT_G,
    REJECTED,
    RELEASED,
    Management,
    Receiver,
    World,
    settle,
)
from harness import RouterProcess
from proton import Delivery, Message, symbol

pytestmark = pytest.mark.network

RID = "R1"

# What `qdstat -g` reads from the router entity (../shared/reference/qd-management.md).


def bodies(n: int, tag: str = "m") -> list[str]:
    return [f"{tag}-{i}" for i in range(n)]


def send_bodies(world: World, sender: Any, items: list[str], **fields: Any) -> list[Any]:
    world.run_until(lambda: sender.credit > 0, what="sender credit")
    return sender.send_all(Message(body=b, **fields) for b in items)


# ----- request / response ------------------------------------------------------------------


def test_request_response_with_dynamic_reply_to(tmp_path: Path, world: World) -> None:
    with RouterProcess(tmp_path, RID) as router, world:
        server = world.connect(router.url)
        replies_out = server.sender(None)

        def answer(rx: Receiver, request: Message, delivery: Delivery) -> None:
            replies_out.send(
                Message(
                    address=request.reply_to,
                    correlation_id=request.correlation_id,
                    body=request.body.upper(),
                )
            )
            settle(delivery, ACCEPTED)

        server.receiver("service.echo", policy=answer)

        client = world.connect(router.url)
        replies = client.receiver(None, dynamic=True)
        assert replies.address is not None
        assert re.fullmatch(rf"_topo/0/{RID}/temp\.[^/\s]+", replies.address), replies.address
        assert replies.link.remote_source.dynamic
        other = client.receiver(None, dynamic=True)
        assert other.address != replies.address

        requests = client.sender("service.echo")
        world.run_until(lambda: requests.credit > 0, what="credit")
        sent = [
            requests.send(Message(body=f"ping-{i}", reply_to=replies.address, correlation_id=i))
            for i in range(3)
        ]
        world.run_until(
            lambda: (
                len(replies.messages) == 3 and requests.all_settled() and replies_out.all_settled()
            ),
            what="3 replies",
        )
        assert sorted((m.correlation_id, m.body) for m in replies.messages) == [
            (0, "PING-0"),
            (1, "PING-1"),
            (2, "PING-2"),
        ]
        assert [t.outcome for t in sent] == ["accepted"] * 3
        assert all(t.outcome == "accepted" for t in replies_out.sent)
        world.run_for(0.1)
        assert other.messages == []


def test_correlation_ids_come_back(tmp_path: Path, world: World) -> None:
    with RouterProcess(tmp_path, RID) as router, world:
        server = world.connect(router.url)
        out = server.sender(None)
        server.receiver(
            "svc",
            policy=lambda rx, m, d: (
                out.send(Message(address=m.reply_to, correlation_id=m.correlation_id, body=m.body)),
                settle(d, ACCEPTED),
            ),
        )
        client = world.connect(router.url)
        replies = client.receiver(None, dynamic=True)
        requests = client.sender("svc")
        world.run_until(lambda: requests.credit > 0, what="credit")
        for i in range(5):
            requests.send(Message(body=i, reply_to=replies.address, correlation_id=f"c{i}"))
        world.run_until(lambda: len(replies.messages) == 5, what="5 replies")
        assert {(m.correlation_id, m.body) for m in replies.messages} == {
            (f"c{i}", i) for i in range(5)
        }


# ----- distribution ------------------------------------------------------------------------


def consumers(world: World, url: str, address: str, n: int, **kwargs: Any) -> list[Receiver]:
    """n consumers of `address`, each on a connection of its own."""
    return [world.connect(url).receiver(address, **kwargs) for _ in range(n)]


def test_closest_is_round_robin_among_local_consumers(tmp_path: Path, world: World) -> None:
    addresses = [{"prefix": "rr", "distribution": "closest"}]
    with RouterProcess(tmp_path, RID, addresses=addresses) as router, world:
        rxs = consumers(world, router.url, "rr.orders", 3)
        tx = world.connect(router.url).sender("rr.orders")
        sent = send_bodies(world, tx, bodies(30))
        world.run_until(
            lambda: sum(len(r.messages) for r in rxs) == 30 and tx.all_settled(),
            what="30 deliveries",
        )
        assert [len(r.messages) for r in rxs] == [10, 10, 10]
        assert sorted(b for r in rxs for b in r.bodies) == sorted(bodies(30))
        assert {t.outcome for t in sent} == {"accepted"}


def test_balanced_spreads_unsettled_deliveries_evenly(tmp_path: Path, world: World) -> None:
    addresses = [{"pattern": "bal.*", "distribution": "balanced"}]
    with RouterProcess(tmp_path, RID, addresses=addresses) as router, world:
        rxs = consumers(world, router.url, "bal.work", 3, policy=None)
        tx = world.connect(router.url).sender("bal.work")
        sent = send_bodies(world, tx, bodies(30))
        world.run_until(lambda: sum(len(r.messages) for r in rxs) == 30, what="30 deliveries")
        world.run_for(0.1)
        assert [len(r.messages) for r in rxs] == [10, 10, 10]
        assert not any(t.settled for t in sent)  # nobody settled: all still outstanding
        for r in rxs:
            r.settle_all()
        world.run_until(tx.all_settled, what="outcomes")
        assert {t.outcome for t in sent} == {"accepted"}


def test_balanced_prefers_the_consumer_that_keeps_up(tmp_path: Path, world: World) -> None:
    """A stuck consumer (never settles) gets one delivery; the fast one gets all the rest."""
    with RouterProcess(tmp_path, RID) as router, world:  # the default distribution is balanced
        fast = world.connect(router.url).receiver("work")
        stuck = world.connect(router.url).receiver("work", policy=None)
        tx = world.connect(router.url).sender("work")
        world.run_until(lambda: tx.credit > 0, what="credit")
        for i in range(20):
            t = tx.send(Message(body=i))
            # One at a time: the next goes once the last was accepted or sits at `stuck`.
            world.run_until(
                lambda t=t: t.settled or t.message.body in stuck.bodies, what=f"delivery {i}"
            )
        world.run_until(lambda: len(fast.messages) + len(stuck.messages) == 20, what="all 20")
        assert len(stuck.messages) == 1
        assert len(fast.messages) == 19


def test_multicast_gives_every_consumer_a_copy(tmp_path: Path, world: World) -> None:
    addresses = [{"pattern": "mc.#", "distribution": "multicast"}]
    with RouterProcess(tmp_path, RID, addresses=addresses) as router, world:
        rxs = consumers(world, router.url, "mc.news.sport", 3)
        tx = world.connect(router.url).sender("mc.news.sport")
        sent = send_bodies(world, tx, bodies(10))
        world.run_until(
            lambda: all(len(r.messages) == 10 for r in rxs) and tx.all_settled(),
            what="10 copies each",
        )
        world.run_for(0.1)
        for r in rxs:
            assert r.bodies == bodies(10)  # each copy once, in order
        assert {t.outcome for t in sent} == {"accepted"}


def test_address_rules_select_distribution_by_prefix_and_pattern(
    tmp_path: Path, world: World
) -> None:
    addresses = [
        {"prefix": "queue", "distribution": "closest"},
        {"pattern": "*.mc", "distribution": "multicast"},
        {"pattern": "logs.#", "distribution": "multicast"},
    ]
    expected = {
        "queue": "closest",
        "queue.a.b": "closest",
        "queuex": "balanced",  # a prefix matches whole tokens only
        "a.mc": "multicast",
        "x.y.mc": "balanced",  # '*' is exactly one token
        "logs": "multicast",  # '#' matches zero tokens too
        "logs.a.b": "multicast",
        "other": "balanced",
    }
    with RouterProcess(tmp_path, RID, addresses=addresses) as router, world:
        client = world.connect(router.url)
        for address in expected:
            client.receiver(address)
        rows = Management(client).query("router.address", ["key", "distribution"])
        got = {r["key"]: r["distribution"] for r in rows}
        assert {a: got.get("M0" + a) for a in expected} == expected

        # And the behaviour follows: two consumers of a pattern-multicast address both get it.
        second = world.connect(router.url).receiver("a.mc")
        first = next(r for r in client.links if isinstance(r, Receiver) and r.address == "a.mc")
        tx = world.connect(router.url).sender("a.mc")
        send_bodies(world, tx, ["hello"])
        world.run_until(
            lambda: first.bodies == ["hello"] and second.bodies == ["hello"], what="both copies"
        )


# ----- addresses -----------------------------------------------------------------------------


def test_local_and_topological_addresses_reach_the_same_consumer(
    tmp_path: Path, world: World
) -> None:
    with RouterProcess(tmp_path, RID) as router, world:
        rx = world.connect(router.url).receiver("_local/foo")
        client = world.connect(router.url)
        via_topo = client.sender(f"_topo/0/{RID}/foo")
        via_local = client.sender("_local/foo")
        anonymous = client.sender(None)
        send_bodies(world, via_topo, ["topo"])
        send_bodies(world, via_local, ["local"])
        send_bodies(world, anonymous, ["anon-topo"], address=f"_topo/0/{RID}/foo")
        send_bodies(world, anonymous, ["anon-amqp"], address=f"amqp:/_topo/0/{RID}/foo")
        world.run_until(lambda: len(rx.messages) == 4, what="4 messages")
        assert sorted(rx.bodies) == ["anon-amqp", "anon-topo", "local", "topo"]
        for s in (via_topo, via_local, anonymous):
            world.run_until(s.all_settled, what="outcomes")
            assert {t.outcome for t in s.sent} == {"accepted"}


def test_anonymous_sender_routes_by_to(tmp_path: Path, world: World) -> None:
    with RouterProcess(tmp_path, RID) as router, world:
        a = world.connect(router.url).receiver("dest.a")
        b = world.connect(router.url).receiver("dest.b")
        tx = world.connect(router.url).sender(None)
        assert tx.link.remote_target.address is None
        send_bodies(world, tx, ["to-a"], address="dest.a")
        send_bodies(world, tx, ["to-b"], address="dest.b")
        send_bodies(world, tx, ["to-a-2"], address="dest.a")
        world.run_until(tx.all_settled, what="outcomes")
        assert a.bodies == ["to-a", "to-a-2"]
        assert b.bodies == ["to-b"]
        assert {t.outcome for t in tx.sent} == {"accepted"}


def test_anonymous_sender_unconsumed_address_is_released(tmp_path: Path, world: World) -> None:
    with RouterProcess(tmp_path, RID) as router, world:
        tx = world.connect(router.url).sender(None)
        t = send_bodies(world, tx, ["nobody home"], address="nobody.listens")[0]
        world.run_until(lambda: t.settled, what="outcome")
        assert t.state == RELEASED
        # The link survives: a later message to a consumed address is delivered.
        rx = world.connect(router.url).receiver("somebody")
        t2 = tx.send(Message(address="somebody", body="hi"))
        world.run_until(lambda: t2.settled, what="outcome")
        assert t2.state == ACCEPTED and rx.bodies == ["hi"]


def test_anonymous_message_without_to_is_rejected(tmp_path: Path, world: World) -> None:
    with RouterProcess(tmp_path, RID) as router, world:
        client = world.connect(router.url)
        tx = client.sender(None)
        t = send_bodies(world, tx, ["where to?"])[0]
        world.run_until(lambda: t.settled, what="outcome")
        assert t.state == REJECTED
        assert t.condition is not None and t.condition.name.startswith("amqp:")
        # Neither the link nor the connection is closed for it.
        rx = client.receiver("after")
        t2 = tx.send(Message(address="after", body="ok"))
        world.run_until(lambda: t2.settled, what="outcome")
        assert t2.state == ACCEPTED and rx.bodies == ["ok"]
        assert not tx.closed


@pytest.mark.parametrize(
    ("strip", "honoured"), [("both", False), ("in", False), ("no", True), ("out", True)]
)
def test_x_opt_qd_to_overrides_to_only_where_inbound_annotations_are_kept(
    tmp_path: Path, world: World, strip: str, honoured: bool
) -> None:
    listeners = [{}, {"stripAnnotations": strip}]
    with RouterProcess(tmp_path, RID, listeners=listeners) as router, world:
        real = world.connect(router.url).receiver("real")
        decoy = world.connect(router.url).receiver("decoy")
        tx = world.connect(router.listener_url(1)).sender(None)
        send_bodies(world, tx, ["m"], address="decoy", annotations={symbol("x-opt-qd.to"): "real"})
        world.run_until(tx.all_settled, what="outcome")
        assert tx.sent[0].state == ACCEPTED
        world.run_for(0.05)
        if honoured:
            assert (real.bodies, decoy.bodies) == (["m"], [])
        else:
            assert (real.bodies, decoy.bodies) == ([], ["m"])


# ----- annotations -----------------------------------------------------------------------------


def rich_message(body: Any, annotations: dict[Any, Any]) -> Message:
    return Message(
        id="msg-1",
        user_id=b"anonymous",
        address="ann.test",
        subject="subject",
        reply_to="somewhere",
        correlation_id=42,
        content_type="text/plain",
        content_encoding="utf-8",
        creation_time=1700000000.0,
        group_id="group",
        group_sequence=7,
        reply_to_group_id="rgroup",
        durable=True,
        priority=6,
        ttl=60.0,
        properties={"key": "value", "n": 3},
        annotations=annotations,
        body=body,
    )


FIELDS = (
    "id",
    "user_id",
    "address",
    "subject",
    "reply_to",
    "correlation_id",
    "content_type",
    "content_encoding",
    "creation_time",
    "group_id",
    "group_sequence",
    "reply_to_group_id",
    "durable",
    "priority",
    "ttl",
    "properties",
    "body",
)


def same_fields(a: Message, b: Message) -> None:
    assert {f: getattr(b, f) for f in FIELDS} == {f: getattr(a, f) for f in FIELDS}


@pytest.mark.parametrize("strip", ["no", "in"])
def test_router_annotations_on_a_listener_that_keeps_them(
    tmp_path: Path, world: World, strip: str
) -> None:
    """Consumers on a listener not stripping outbound annotations (`no`, `in`) see them."""
    listeners = [{"stripAnnotations": "no"}, {"stripAnnotations": strip}]
    with RouterProcess(tmp_path, RID, listeners=listeners) as router, world:
        rx = world.connect(router.listener_url(1)).receiver("ann.test")
        tx = world.connect(router.listener_url(0)).sender("ann.test")
        traced = rich_message(
            {"nested": [1, 2, 3]},
            {symbol("x-opt-qd.trace"): ["0/Elsewhere"], symbol("user-ann"): "kept"},
        )
        plain = rich_message(b"\x00\x01binary", {symbol("user-ann"): 5})
        send_bodies(world, tx, [])
        tx.send(traced)
        tx.send(plain)
        world.run_until(lambda: len(rx.messages) == 2 and tx.all_settled(), what="2 messages")
        got_traced, got_plain = rx.messages
        assert got_traced.annotations == {
            "x-opt-qd.ingress": f"0/{RID}",
            "x-opt-qd.trace": ["0/Elsewhere", f"0/{RID}"],
            "user-ann": "kept",
        }
        assert got_plain.annotations["x-opt-qd.ingress"] == f"0/{RID}"
        assert got_plain.annotations["user-ann"] == 5
        same_fields(traced, got_traced)
        same_fields(plain, got_plain)


@pytest.mark.parametrize(
    ("consumer_strip", "sender_listener"),
    [("both", 0), ("both", 1), ("out", 1)],
)
def test_listener_stripping_outbound_removes_router_annotations(
    tmp_path: Path, world: World, consumer_strip: str, sender_listener: int
) -> None:
    """The default listener (`both`) and `out` show consumers no x-opt-qd.* annotations, even
    those a sender on an annotation-keeping listener set."""
    listeners = [{"stripAnnotations": consumer_strip}, {"stripAnnotations": "no"}]
    with RouterProcess(tmp_path, RID, listeners=listeners) as router, world:
        rx = world.connect(router.url).receiver("ann.test")
        tx = world.connect(router.listener_url(sender_listener)).sender("ann.test")
        sent = rich_message(
            "body",
            {
                symbol("x-opt-qd.trace"): ["0/Elsewhere"],
                symbol("x-opt-qd.ingress"): "0/Elsewhere",
                symbol("x-opt-qd.to"): "ann.test",
                symbol("x-opt-qd.phase"): 0,
                symbol("user-ann"): "kept",
            },
        )
        send_bodies(world, tx, [])
        tx.send(sent)
        world.run_until(lambda: len(rx.messages) == 1 and tx.all_settled(), what="message")
        got = rx.messages[0]
        assert got.annotations == {"user-ann": "kept"}
        same_fields(sent, got)


# ----- management ------------------------------------------------------------------------------


def test_management_get_mgmt_nodes_and_query_router(tmp_path: Path, world: World) -> None:
    with RouterProcess(tmp_path, RID) as router, world:
        mgmt = Management(world.connect(router.url))
        nodes = mgmt.node_request("GET-MGMT-NODES")
        assert nodes.properties["statusCode"] == 200
        assert nodes.correlation_id == "req-1"
        assert nodes.body == [f"amqp:/_topo/0/{RID}/$management"]

        response = mgmt.node_request(
            "QUERY", {"attributeNames": []}, entityType="org.apache.qpid.dispatch.router"
        )
        assert response.properties["statusCode"] == 200
        assert isinstance(response.properties["statusDescription"], str)
        names = response.body["attributeNames"]
        assert len(response.body["results"]) == 1
        row = dict(zip(names, response.body["results"][0], strict=True))
        missing = [a for a in QDSTAT_G if a not in row or row[a] is None]
        assert missing == []
        assert row["id"] == RID
        assert row["mode"] == "standalone"
        assert row["uptimeSeconds"] >= 0 and row["memoryUsage"] > 0
        assert row["connectionCount"] == 1
        assert row["linkCount"] == 2  # this client's reply receiver and request sender
        for a in QDSTAT_G[3:]:
            if a not in ("version", "area", "mode"):
                assert isinstance(row[a], int), (a, row[a])


def test_management_query_links_addresses_connections(tmp_path: Path, world: World) -> None:
    with RouterProcess(tmp_path, RID) as router, world:
        app = world.connect(router.url, container_id="the-app")
        rx = app.receiver("orders")
        tx = app.sender("orders")
        send_bodies(world, tx, bodies(3))
        world.run_until(lambda: tx.all_settled() and len(rx.messages) == 3, what="3 messages")
        mgmt = Management(world.connect(router.url))

        links = mgmt.query("router.link")
        orders = [r for r in links if r["owningAddr"] == "M0orders"]
        assert sorted(r["linkDir"] for r in orders) == ["in", "out"]
        out = next(r for r in orders if r["linkDir"] == "out")
        assert out["deliveryCount"] == 3 and out["acceptedCount"] == 3
        assert out["unsettledCount"] == 0 and out["undeliveredCount"] == 0
        assert len(links) == 4  # plus the management client's two

        addresses = {r["key"]: r for r in mgmt.query("router.address")}
        assert addresses["M0orders"]["subscriberCount"] == 1
        assert addresses["M0orders"]["deliveriesIngress"] == 3
        assert addresses["M0orders"]["deliveriesEgress"] == 3
        assert addresses["M0orders"]["distribution"] == "balanced"

        conns = mgmt.query("connection")
        assert len(conns) == 2
        assert "the-app" in {c["container"] for c in conns}
        assert all(c["dir"] == "in" and c["role"] == "normal" for c in conns)


def test_management_bad_requests_get_errors_and_service_continues(
    tmp_path: Path, world: World
) -> None:
    with RouterProcess(tmp_path, RID) as router, world:
        mgmt = Management(world.connect(router.url))
        no_operation = mgmt.request({"type": "org.amqp.management", "name": "self"}, {})
        unknown_type = mgmt.node_request(
            "QUERY", {"attributeNames": []}, entityType="org.apache.qpid.dispatch.nonsense"
        )
        not_a_map = mgmt.node_request(
            "QUERY", ["not", "a", "map"], entityType="org.apache.qpid.dispatch.router"
        )
        for response in (no_operation, unknown_type, not_a_map):
            assert response.properties["statusCode"] == 400, response.properties
            assert response.properties["statusDescription"]
        # A request with no application properties at all, and one with a non-string operation.
        assert mgmt.request({}, {}).properties["statusCode"] == 400
        assert mgmt.request({"operation": 7}, {}).properties["statusCode"] == 400
        # All requests were accepted as messages, and the agent still answers.
        assert {t.outcome for t in mgmt.sender.sent} == {"accepted"}
        assert mgmt.router()["id"] == RID
        assert router.alive()


def test_counts_return_to_zero_after_clients_leave(tmp_path: Path, world: World) -> None:
    with RouterProcess(tmp_path, RID) as router, world:
        c1 = world.connect(router.url)
        c2 = world.connect(router.url)
        rx = c1.receiver("q1")
        holder = c1.receiver("q2", policy=None)  # keeps its delivery unsettled
        tx = c2.sender("q1")
        tx2 = c2.sender("q2")
        anon = c2.sender(None)
        c2.receiver(None, dynamic=True)
        send_bodies(world, tx, bodies(5))
        send_bodies(world, tx2, ["held"])
        send_bodies(world, anon, ["x"], address="q1")
        crasher = world.connect(router.url)
        crashed = crasher.receiver("q3", policy=None)
        tx3 = crasher.sender("q3")
        send_bodies(world, tx3, ["in limbo"])
        world.run_until(
            lambda: (
                len(rx.messages) == 6 and len(holder.messages) == 1 and len(crashed.messages) == 1
            ),
            what="deliveries",
        )
        mgmt = Management(world.connect(router.url))
        assert mgmt.router()["connectionCount"] == 4
        assert any(r["unsettledCount"] == 1 for r in mgmt.query("router.link"))

        holder.close()
        c1.close()
        c2.close()
        crasher.drop()

        def settled_down() -> bool:
            row = mgmt.router()
            return row["connectionCount"] == 1 and row["linkCount"] == 2

        world.run_until(settled_down, what="counts back to the management client's own")
        links = mgmt.query("router.link")
        assert len(links) == 2
        assert [r["unsettledCount"] for r in links] == [0, 0]
        assert [r["undeliveredCount"] for r in links] == [0, 0]
        assert len(mgmt.query("connection")) == 1
        # Only the management client's addresses are left: $management and its reply address.
        reply_key = "L" + mgmt.reply_to.split("/", 3)[3]
        assert {r["key"] for r in mgmt.query("router.address")} == {"L$management", reply_key}
        row = mgmt.router()
        assert row["addrCount"] == 2


def test_management_node_is_reachable_at_its_topological_address(
    tmp_path: Path, world: World
) -> None:
    """qdstat --router/--all-routers sends to the address GET-MGMT-NODES returned."""
    with RouterProcess(tmp_path, RID) as router, world:
        client = world.connect(router.url)
        replies = client.receiver(None, dynamic=True)
        for target, to in (
            (f"amqp:/_topo/0/{RID}/$management", None),
            (None, f"amqp:/_topo/0/{RID}/$management"),
        ):
            sender = client.sender(target)
            world.run_until(lambda s=sender: s.credit > 0, what="credit")
            sender.send(
                Message(
                    address=to,
                    reply_to=replies.address,
                    correlation_id=target or to,
                    properties={
                        "operation": "QUERY",
                        "type": "org.amqp.management",
                        "name": "self",
                        "entityType": "org.apache.qpid.dispatch.router",
                    },
                    body={"attributeNames": ["id"]},
                )
            )
        world.run_until(lambda: len(replies.messages) == 2, what="2 responses")
        for response in replies.messages:
            assert response.properties["statusCode"] == 200
            assert response.body == {"attributeNames": ["id"], "results": [[RID]]}
