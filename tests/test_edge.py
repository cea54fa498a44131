"""Edge routers against real interior routers: routing through the uplink, the `_edge/<id>`
address space, multicast without duplicates, failover to a reserve uplink and back to the
preferred one, a link the interior refuses attached again with backoff. (Uplinks switched in
quick succession: tests/test_edge_flap.py.)"""

from __future__ import annotations

import contextlib
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from clients import Client, Management, Receiver, Sender, World
from harness import RouterProcess
from proton import Message

pytestmark = pytest.mark.network


def interior(
    tmp_path: Path,
    rid: str,
    *,
    connect: RouterProcess | None = None,
    addresses: list[dict[str, object]] | None = None,
) -> RouterProcess:
    args = ["--mode", "interior"]
    if connect is not None:
        args += ["--connect", f"127.0.0.1:{connect.listeners[1]['port']}"]
    return RouterProcess(
        tmp_path,
        rid,
        listeners=[{}, {"role": "inter-router"}, {"role": "edge"}],
        addresses=addresses,
        extra_args=args,
    )


def edge(
    tmp_path: Path,
    rid: str,
    uplinks: list[RouterProcess],
    addresses: list[dict[str, object]] | None = None,
) -> RouterProcess:
    args = ["--mode", "edge"]
    for up in uplinks:
        args += ["--connect", f"127.0.0.1:{up.listeners[2]['port']}"]
    return RouterProcess(tmp_path, rid, addresses=addresses, extra_args=args)


@contextlib.contextmanager
def started(*routers: RouterProcess) -> Iterator[None]:
    try:
        for r in routers:
            r.start()
        yield
    finally:
        for r in reversed(routers):
            r.stop()


def remote_keys(world: World, router: RouterProcess) -> dict[str, list[str]]:
    client = world.connect(router.url)
    try:
        rows = Management(client).query("router.address", ["key", "remoteHostRouters"])
    finally:
        client.close()
    return {row["key"]: row["remoteHostRouters"] for row in rows}


def test_edge_consumer_reached_from_another_interior(tmp_path: Path, world: World) -> None:
    a = interior(tmp_path, "A")
    b = interior(tmp_path, "B", connect=a)
    e1 = edge(tmp_path, "E1", [a])
    with started(a, b, e1):
        consumer = Receiver(world.connect(e1.url), "orders")
        world.run_until(lambda: consumer.attached)
        # B learns the edge's consumer as A's, and the edge's own space as A's too.
        world.run_until(
            lambda: remote_keys(world, b).get("M0orders") == ["A"],
            timeout=10,
            what="orders advertised by A",
        )
        assert remote_keys(world, b)["M0_edge/E1"] == ["A"]
        sender = Sender(world.connect(b.url), "orders")
        world.run_until(lambda: sender.credit > 0, what="credit at B")
        sender.send_all(Message(body=f"m{i}") for i in range(20))
        world.run_until(lambda: sender.all_settled() and len(consumer.messages) == 20)
        assert consumer.bodies == [f"m{i}" for i in range(20)]
        assert {t.outcome for t in sender.sent} == {"accepted"}


def test_an_edge_gives_its_senders_credit_once_their_address_has_a_consumer(
    tmp_path: Path, world: World
) -> None:
    """As a qdrouterd edge does: no credit while nobody consumes the address (the messages
    could only come back released), credit once a consumer attaches anywhere beyond the edge,
    and the edge's link telling the interior about the address goes with the last sender."""
    a = interior(tmp_path, "A")
    b = interior(tmp_path, "B", connect=a)
    e1 = edge(tmp_path, "E1", [a])
    with started(a, b, e1):
        sender = Sender(world.connect(e1.url), "orders")
        world.run_until(lambda: sender.attached)
        world.run_for(1.0)
        assert sender.credit == 0
        consumer = Receiver(world.connect(b.url), "orders")
        world.run_until(lambda: sender.credit > 0, timeout=10, what="credit once B consumes")
        sender.send_all(Message(body=i) for i in range(5))
        world.run_until(lambda: sender.all_settled() and len(consumer.messages) == 5)
        assert {t.outcome for t in sender.sent} == {"accepted"}
        assert consumer.bodies == list(range(5))
        # A consumer on the edge itself: its senders get credit at once.
        here = world.connect(e1.url)
        local = Receiver(here, "local.x")
        world.run_until(lambda: local.attached)
        to_local = Sender(here, "local.x")
        world.run_until(lambda: to_local.credit > 0, timeout=2, what="credit for a consumer here")
        assert any(name.startswith("edge.sends.E1.orders.") for name in link_names(world, a))
        sender.link.close()
        world.run_until(
            lambda: not any(n.startswith("edge.sends.E1.orders.") for n in link_names(world, a)),
            timeout=5,
            what="the edge's link for orders gone from A",
        )


def test_a_sender_replacing_the_last_one_while_the_edge_was_stopped_gets_credit(
    tmp_path: Path, world: World
) -> None:
    """While the edge is stopped, its client's connection goes and the client connects again
    and attaches a new sender: the edge, running again, reads both at once, and replaces its
    link telling the interior about the address in one write, detach and attach. Attached
    under the old link's name, the new link was taken by the interior for the old one and
    never answered, and the client's sender never got credit (found by the chaos soak, seed
    29: an edge's senders starved after its SIGSTOP)."""
    a = interior(tmp_path, "A")
    e1 = edge(tmp_path, "E1", [a])
    with started(a, e1):
        Receiver(world.connect(a.url), "orders")
        for round_ in range(3):
            client = world.connect(e1.url)
            sender = Sender(client, "orders")
            world.run_until(lambda s=sender: s.credit > 0, timeout=10, what="credit")
            e1.proc.send_signal(signal.SIGSTOP)
            try:
                client.drop()
                late = Client(world, e1.url)  # answered once the edge runs again
                world.clients.append(late)
                again = Sender(late, "orders")
                world.run_for(0.5)
            finally:
                e1.proc.send_signal(signal.SIGCONT)
            world.run_until(lambda s=again: s.credit > 0, timeout=10, what="new credit")
            sent = again.send_all([Message(body=round_)])
            world.run_until(again.all_settled)
            assert [t.outcome for t in sent] == ["accepted"]


def link_names(world: World, router: RouterProcess) -> set[str]:
    client = world.connect(router.url)
    try:
        rows = Management(client).query("router.link", ["linkName"])
    finally:
        client.close()
    return {row["linkName"] for row in rows}


def test_request_response_between_edges(tmp_path: Path, world: World) -> None:
    a = interior(tmp_path, "A")
    e1 = edge(tmp_path, "E1", [a])
    e2 = edge(tmp_path, "E2", [a])
    with started(a, e1, e2):
        service_client = world.connect(e1.url)
        requests = Receiver(service_client, "service")
        answers = Sender(service_client, None)
        client = world.connect(e2.url)
        replies = Receiver(client, None, dynamic=True)
        world.run_until(lambda: requests.attached and replies.address is not None)
        assert replies.address.startswith("_edge/E2/temp.")
        ask = Sender(client, "service")
        world.run_until(lambda: ask.credit > 0, timeout=10, what="credit for service at E2")
        for i in range(5):
            ask.send(Message(body=i, reply_to=replies.address, correlation_id=i))
        world.run_until(lambda: len(requests.messages) == 5 and answers.credit > 0)
        for request in requests.messages:
            answers.send(
                Message(
                    address=request.reply_to,
                    body=request.body * 10,
                    correlation_id=request.correlation_id,
                )
            )
        world.run_until(lambda: len(replies.messages) == 5 and answers.all_settled())
        assert sorted(m.body for m in replies.messages) == [0, 10, 20, 30, 40]
        assert {t.outcome for t in answers.sent} == {"accepted"}


def test_multicast_one_copy_per_consumer_across_edges(tmp_path: Path, world: World) -> None:
    mc = [{"prefix": "news", "distribution": "multicast"}]
    a = interior(tmp_path, "A", addresses=mc)
    e1 = edge(tmp_path, "E1", [a], addresses=mc)
    e2 = edge(tmp_path, "E2", [a], addresses=mc)
    with started(a, e1, e2):
        c1, c2, ca = world.connect(e1.url), world.connect(e2.url), world.connect(a.url)
        consumers = [
            Receiver(c1, "news", name="n1"),
            Receiver(c1, "news", name="n2"),
            Receiver(c2, "news"),
            Receiver(ca, "news"),
        ]
        world.run_until(lambda: all(c.attached for c in consumers))
        # A has a news consumer of its own and one from each edge before anything is sent.
        world.run_until(lambda: news_at(world, a)[0] == 3, what="news consumers at A")
        sender = Sender(c1, "news")
        world.run_until(lambda: sender.credit > 0)
        sender.send_all(Message(body=i) for i in range(10))
        world.run_until(
            lambda: sender.all_settled() and all(len(c.messages) >= 10 for c in consumers),
            timeout=10,
        )
        world.run_for(0.5)  # a duplicate would arrive now
        for c in consumers:
            assert c.bodies == list(range(10))
        assert {t.outcome for t in sender.sent} == {"accepted"}


def test_edge_fails_over_to_its_reserve_uplink(tmp_path: Path, world: World) -> None:
    a = interior(tmp_path, "A")
    b = interior(tmp_path, "B", connect=a)
    e1 = edge(tmp_path, "E1", [a, b])
    with started(a, b, e1):
        consumer = Receiver(world.connect(e1.url), "orders")
        world.run_until(lambda: consumer.attached)
        world.run_until(
            lambda: "M0orders" in remote_keys(world, b) or _local(world, b),
            timeout=10,
            what="orders reachable from B",
        )
        active = "A" if remote_keys(world, b).get("M0orders") == ["A"] else "B"
        victim, survivor = (a, b) if active == "A" else (b, a)
        victim.stop(signal.SIGKILL)
        sender = Sender(world.connect(survivor.url), "orders")
        world.run_until(lambda: sender.credit > 0, timeout=10, what="route via reserve uplink")
        sender.send_all(Message(body=i) for i in range(5))
        world.run_until(lambda: sender.all_settled() and len(consumer.messages) == 5, timeout=10)
        assert {t.outcome for t in sender.sent} == {"accepted"}


def test_edge_moves_back_to_its_preferred_uplink_when_it_opens(
    tmp_path: Path, world: World
) -> None:
    """The first connector is the planned uplink: an edge that had to start on its reserve
    moves to it once it is up (as after that interior's restart), and traffic follows."""
    a = interior(tmp_path, "A")
    b = interior(tmp_path, "B", connect=a)
    e1 = edge(tmp_path, "E1", [a, b])  # A preferred, B in reserve
    with started(b, e1):
        consumer = Receiver(world.connect(e1.url), "orders")
        world.run_until(lambda: consumer.attached)
        world.run_until(lambda: _local(world, b), timeout=10, what="E1 on its reserve uplink B")
        with started(a):
            world.run_until(
                lambda: _local(world, a) and not _local(world, b),
                timeout=15,
                what="E1 back on its preferred uplink A",
            )
            assert "edge.uplink_preferred" in e1.log()
            sender = Sender(world.connect(b.url), "orders")
            world.run_until(lambda: sender.credit > 0, timeout=10, what="a route B -> A -> E1")
            sender.send_all(Message(body=i) for i in range(5))
            world.run_until(lambda: sender.all_settled() and len(consumer.messages) == 5)
            assert {t.outcome for t in sender.sent} == {"accepted"}
            assert consumer.bodies == list(range(5))


def _local(world: World, router: RouterProcess) -> bool:
    client = world.connect(router.url)
    try:
        rows = Management(client).query("router.address", ["key", "subscriberCount"])
    finally:
        client.close()
    return any(r["key"] == "M0orders" and r["subscriberCount"] for r in rows)


def news_at(world: World, router: RouterProcess) -> tuple[int, list[str]]:
    """`router`'s local news consumers (one per edge that has any) and the routers it knows
    have some."""
    client = world.connect(router.url)
    try:
        rows = Management(client).query(
            "router.address", ["key", "subscriberCount", "remoteHostRouters"]
        )
    finally:
        client.close()
    row = next((r for r in rows if r["key"] == "M0news"), None)
    return (0, []) if row is None else (row["subscriberCount"], row["remoteHostRouters"])


def test_two_interiors_with_two_edges_each(tmp_path: Path, world: World) -> None:
    mc = [{"prefix": "news", "distribution": "multicast"}]
    a = interior(tmp_path, "A", addresses=mc)
    b = interior(tmp_path, "B", connect=a, addresses=mc)
    edges = [edge(tmp_path, f"E{i}", [a if i <= 2 else b], addresses=mc) for i in range(1, 5)]
    with started(a, b, *edges):
        clients = [world.connect(e.url) for e in edges]
        news = [Receiver(c, "news") for c in clients]
        orders = Receiver(clients[3], "orders")  # on E4, behind B
        world.run_until(lambda: orders.attached and all(r.attached for r in news))
        world.run_until(
            lambda: {"M0orders", "M0news"} <= set(remote_keys(world, a)),
            what="E4's addresses advertised to A",
        )
        # Each interior has its two edges' news consumers, and knows the other one's.
        world.run_until(
            lambda: news_at(world, a) == (2, ["B"]) and news_at(world, b) == (2, ["A"]),
            what="every edge's news consumer known to both interiors",
        )
        # anycast from E1 (behind A) to E4 (behind B)
        sender = Sender(clients[0], "orders")
        world.run_until(lambda: sender.credit > 0)
        sender.send_all(Message(body=i) for i in range(10))
        # multicast from E2: one copy to each edge's consumer, none twice
        caster = Sender(clients[1], "news")
        world.run_until(lambda: caster.credit > 0)
        caster.send_all(Message(body=i) for i in range(10))
        world.run_until(
            lambda: (
                sender.all_settled()
                and caster.all_settled()
                and len(orders.messages) == 10
                and all(len(r.messages) >= 10 for r in news)
            ),
            what="every message and copy",
        )
        world.run_for(0.5)  # a duplicate would arrive now
        assert orders.bodies == list(range(10))
        for r in news:
            assert r.bodies == list(range(10))
        assert {t.outcome for t in sender.sent + caster.sent} == {"accepted"}


def test_a_link_the_interior_refuses_is_attached_again_with_backoff(
    tmp_path: Path, world: World
) -> None:
    """The interior refuses the edge's proxy for an address it link-routes to a container that
    is not there (the edge has no such link route: to it, a consumer like any other). The edge
    attaches it again after 0.1 s, 0.2 s, 0.4 s, ... (as a connector redials), never in a tight
    loop, and the rest of its uplink works meanwhile."""
    routes = [{"prefix": "queue", "direction": "out", "containerId": "broker"}]
    a = RouterProcess(
        tmp_path,
        "A",
        listeners=[{}, {"role": "inter-router"}, {"role": "edge"}],
        sections={"linkRoutes": routes},
        extra_args=["--mode", "interior"],
    )
    e1 = edge(tmp_path, "E1", [a])
    with started(a, e1):
        client = world.connect(e1.url)
        refused = Receiver(client, "queue.x")
        orders = Receiver(client, "orders")
        world.run_until(lambda: refused.attached and orders.attached)
        world.run_for(3.0)
        name = "name=edge.proxy.E1.queue.x "
        refusals = [line for line in a.log().splitlines() if "event=link.refused" in line]
        assert refusals and all(name in line for line in refusals), a.log()
        assert "error=qd:no-route-to-dest" in refusals[0]
        # Attached at 0, then about 0.1, 0.3, 0.7, 1.5 s: a handful in 3 s, not thousands.
        assert 3 <= len(refusals) <= 7, refusals
        waits = [
            float(w)
            for w in re.findall(rf"event=edge\.link_detached .*{name}.*retry_in=(\S+)", e1.log())
        ]
        assert len(waits) == len(refusals), e1.log()
        assert waits == sorted(waits) and waits[0] < 0.2 and waits[-1] > 0.5, waits
        # The uplink meanwhile: a message from the interior reaches the edge's consumer.
        sender = Sender(world.connect(a.url), "orders")
        world.run_until(lambda: sender.credit > 0, timeout=10, what="a route A -> E1")
        sender.send(Message(body="still up"))
        world.run_until(lambda: sender.all_settled() and orders.bodies == ["still up"])
        assert {t.outcome for t in sender.sent} == {"accepted"}


def test_what_reaches_a_stopped_edge_after_its_consumer_went_is_not_accepted(
    tmp_path: Path, world: World
) -> None:
    """The edge's only consumer is cut off while the edge is stopped (SIGSTOP), and messages
    reach its socket meanwhile: once it runs again, it reads the consumer's end and the
    messages in one go, and drops its link for the address on the uplink with them unread.
    Each goes back to its sender released; the freed link settled them without an outcome,
    which the interior took for accepted (found by the chaos soak: accepted, never received)."""
    a = interior(tmp_path, "A")
    e1 = edge(tmp_path, "E1", [a])
    with started(a, e1):
        client = world.connect(e1.url)
        consumer = Receiver(client, "orders.stopped")
        world.run_until(lambda: consumer.attached)
        sender = Sender(world.connect(a.url), "orders.stopped")
        world.run_until(lambda: sender.credit > 0, what="credit at A")
        assert e1.proc is not None
        e1.proc.send_signal(signal.SIGSTOP)
        try:
            client.drop()
            sender.send_all(Message(body=f"m{i}") for i in range(20))
            world.run_for(0.5)  # A has written them to the edge's socket
        finally:
            e1.proc.send_signal(signal.SIGCONT)
        world.run_until(sender.all_settled, what="every outcome")
        assert consumer.messages == []
        assert {t.outcome for t in sender.sent} <= {"released", "modified"}, sender.sent
