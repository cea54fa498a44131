"""Networks of real interior routers on loopback (127.0.0.2, .3, ...): reachability, closest,
balanced and multicast across routers, request/response and management across routers, a router
killed mid-stream, a router restarted, a peer appearing late, a duplicate router id, and counts
returning to zero. Built with `harness.RouterNetwork`; clients from `clients.py`.
"""

from __future__ import annotations

import re
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from clients import ACCEPTED, RELEASED, Management, Receiver, Sender, World, settle
from harness import RouterNetwork
from proton import Delivery, Message

from router.transport.connector import MAX_DELAY

pytestmark = pytest.mark.network

LINE3 = [("A", "B", 1), ("B", "C", 1)]
TRIANGLE = [("A", "B", 1), ("B", "C", 1), ("C", "A", 1)]
MESH4 = [(a, b, 1) for i, a in enumerate("ABCD") for b in "ABCD"[i + 1 :]]
LINE4 = [("A", "B", 1), ("B", "C", 1), ("C", "D", 1)]
PAIR = [("A", "B", 1)]

MULTICAST = [{"prefix": "mc", "distribution": "multicast"}]
CLOSEST = [{"prefix": "near", "distribution": "closest"}]


def credit(world: World, *senders: Sender) -> None:
    world.run_until(lambda: all(s.credit > 0 for s in senders), what="credit for the senders")


def outcomes(sender: Sender) -> Counter[str | None]:
    return Counter(t.final.outcome for t in sender.originals)


# ----- 1. reachability -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "edges", [LINE3, TRIANGLE, MESH4], ids=["line-of-3", "triangle", "full-mesh-of-4"]
)
def test_a_client_on_any_router_reaches_consumers_on_any_other(
    tmp_path: Path, world: World, edges: list[tuple[str, str, int]]
) -> None:
    with RouterNetwork(tmp_path, world, edges) as net:
        names = net.names
        clients = {n: world.connect(net.url(n)) for n in names}
        consumers = {n: clients[n].receiver(f"to.{n}") for n in names}
        for n in names:
            net.wait_address(f"to.{n}", {n})
        senders = {(x, y): clients[x].sender(f"to.{y}") for x in names for y in names}
        credit(world, *senders.values())
        for (x, y), sender in senders.items():
            for i in range(5):
                sender.send(Message(body=f"{x}->{y} {i}"))
        world.run_until(
            lambda: all(s.all_settled() for s in senders.values()), what="every outcome"
        )
        for (x, y), sender in senders.items():
            assert outcomes(sender) == {"accepted": 5}, (x, y)
        for y, consumer in consumers.items():
            assert sorted(consumer.bodies) == sorted(
                f"{x}->{y} {i}" for x in names for i in range(5)
            )


def test_two_interiors_with_consumers_spread(tmp_path: Path, world: World) -> None:
    with RouterNetwork(tmp_path, world, PAIR) as net:
        a, b = world.connect(net.url("A")), world.connect(net.url("B"))
        consumers = [
            a.receiver("spread"),
            b.receiver("spread", name="spread-1"),
            b.receiver("spread", name="spread-2"),
        ]
        only_b = b.receiver("only-b")
        net.wait_address("spread", {"A", "B"})
        net.wait_address("only-b", {"B"})
        senders = [a.sender("spread"), b.sender("spread"), a.sender("only-b")]
        credit(world, *senders)
        for k, sender in enumerate(senders):
            sender.send_all(Message(body=f"{k}.{i}") for i in range(20))
        world.run_until(lambda: all(s.all_settled() for s in senders), what="every outcome")
        assert [outcomes(s) for s in senders] == [{"accepted": 20}] * 3
        got = Counter(body for c in consumers for body in c.bodies)
        assert got == Counter(f"{k}.{i}" for k in (0, 1) for i in range(20))
        assert sorted(only_b.bodies) == sorted(f"2.{i}" for i in range(20))


# ----- 2. closest ---------------------------------------------------------------------------


def test_closest_goes_to_the_cheapest_consumer_and_a_local_one_first(
    tmp_path: Path, world: World
) -> None:
    # From A: B costs 1, C costs 2 (via B; the direct link costs 5).
    edges = [("A", "B", 1), ("A", "C", 5), ("B", "C", 1)]
    with RouterNetwork(tmp_path, world, edges, addresses=CLOSEST) as net:
        assert {r["id"]: r["cost"] for r in net.query("A", "router.node")[1:]} == {
            "B": 1,
            "C": 2,
        }
        a, b, c = (world.connect(net.url(n)) for n in "ABC")
        on_b, on_c = b.receiver("near.q"), c.receiver("near.q")
        net.wait_address("near.q", {"B", "C"})
        from_a, from_c = a.sender("near.q"), c.sender("near.q")
        credit(world, from_a, from_c)
        from_a.send_all(Message(body=f"a{i}") for i in range(20))
        from_c.send_all(Message(body=f"c{i}") for i in range(20))
        world.run_until(lambda: from_a.all_settled() and from_c.all_settled(), what="outcomes")
        assert outcomes(from_a) == outcomes(from_c) == {"accepted": 20}
        assert on_b.bodies == [f"a{i}" for i in range(20)]
        assert on_c.bodies == [f"c{i}" for i in range(20)]  # its own consumer, not B's

        # A consumer on A itself beats every remote one.
        on_a = a.receiver("near.q")
        from_a.send_all(Message(body=f"local{i}") for i in range(20))
        world.run_until(from_a.all_settled, what="outcomes")
        assert on_a.bodies == [f"local{i}" for i in range(20)]
        assert len(on_b.bodies) == 20 and len(on_c.bodies) == 20


# ----- 3. balanced --------------------------------------------------------------------------


def test_balanced_spreads_unsettled_load_across_routers(tmp_path: Path, world: World) -> None:
    with RouterNetwork(tmp_path, world, TRIANGLE) as net:
        clients = {n: world.connect(net.url(n)) for n in "ABC"}
        # Consumers that never settle: their outstanding deliveries only grow.
        consumers = {n: clients[n].receiver("work", policy=None, credit=200) for n in "ABC"}
        net.wait_address("work", {"A", "B", "C"})
        sender = clients["A"].sender("work")
        credit(world, sender)
        sender.send_all(Message(body=i) for i in range(60))
        world.run_until(
            lambda: sum(len(c.messages) for c in consumers.values()) == 60, what="60 arrivals"
        )
        world.run_for(0.3)
        counts = {n: len(c.messages) for n, c in consumers.items()}
        assert sum(counts.values()) == 60
        assert all(k >= 10 for k in counts.values()), counts
        bodies = [b for c in consumers.values() for b in c.bodies]
        assert sorted(bodies) == list(range(60))
        assert not any(t.settled for t in sender.sent)  # nobody settled yet
        for c in consumers.values():
            c.settle_all()
        world.run_until(sender.all_settled, what="outcomes")
        assert outcomes(sender) == {"accepted": 60}


# ----- 4. multicast -------------------------------------------------------------------------


@pytest.mark.parametrize("edges", [MESH4, LINE4], ids=["full-mesh-of-4", "line-of-4"])
def test_multicast_gives_one_copy_to_each_consumer_across_routers(
    tmp_path: Path, world: World, edges: list[tuple[str, str, int]]
) -> None:
    with RouterNetwork(tmp_path, world, edges, addresses=MULTICAST) as net:
        clients = {n: world.connect(net.url(n)) for n in "ABCD"}
        placement = ["A", "B", "B", "C", "D"]  # five consumers on four routers
        consumers = [
            clients[n].receiver("mc.news", name=f"mc-{i}") for i, n in enumerate(placement)
        ]
        net.wait_address("mc.news", set(placement))
        batches = [
            ("A", False),  # an end of the line
            ("C", False),  # the middle
            ("A", True),
            ("C", True),
        ]
        senders = []
        expected: list[str] = []
        for k, (at, presettled) in enumerate(batches):
            sender = clients[at].sender("mc.news", presettled=presettled, name=f"tx-{k}")
            credit(world, sender)
            bodies = [f"{k}:{at}:{'pre' if presettled else 'un'}:{i}" for i in range(10)]
            sender.send_all(Message(body=b) for b in bodies)
            expected += bodies
            senders.append(sender)
        world.run_until(
            lambda: all(len(c.messages) >= len(expected) for c in consumers),
            what="a copy of every message at every consumer",
        )
        world.run_until(
            lambda: all(s.all_settled() for s in senders if not s.presettled), what="outcomes"
        )
        world.run_for(0.5)  # time for any duplicate to show up
        for consumer in consumers:
            assert Counter(consumer.bodies) == Counter(expected)
        for sender in senders:
            if not sender.presettled:
                assert outcomes(sender) == {"accepted": 10}


# ----- 5. request / response ----------------------------------------------------------------


def test_request_response_across_routers_with_a_dynamic_reply_address(
    tmp_path: Path, world: World
) -> None:
    with RouterNetwork(tmp_path, world, LINE3) as net:
        server = world.connect(net.url("C"))
        replies = server.sender(None)  # anonymous: each reply goes to its request's reply-to

        def respond(receiver: Receiver, message: Message, delivery: Delivery) -> None:
            replies.send(
                Message(
                    address=message.reply_to,
                    correlation_id=message.correlation_id,
                    body=str(message.body).upper(),
                )
            )
            settle(delivery, ACCEPTED)

        server.receiver("service", policy=respond)
        credit(world, replies)
        net.wait_address("service", {"C"})
        client = world.connect(net.url("A"))
        inbox = client.receiver(None, dynamic=True)
        assert inbox.address is not None and inbox.address.startswith("_topo/0/A/temp.")
        requests = client.sender("service")
        credit(world, requests)
        for i in range(10):
            requests.send(Message(reply_to=inbox.address, correlation_id=i, body=f"ping {i}"))
        world.run_until(lambda: len(inbox.messages) == 10, what="10 replies")
        world.run_until(lambda: requests.all_settled() and replies.all_settled(), what="outcomes")
        assert sorted((m.correlation_id, m.body) for m in inbox.messages) == [
            (i, f"PING {i}") for i in range(10)
        ]
        assert outcomes(requests) == outcomes(replies) == {"accepted": 10}


# ----- 6. management across routers ---------------------------------------------------------


def test_management_of_another_router_and_the_list_of_management_nodes(
    tmp_path: Path, world: World
) -> None:
    with RouterNetwork(tmp_path, world, LINE3) as net:
        client = world.connect(net.url("A"))
        for rid in "ABC":
            mgmt = Management(client, f"_topo/0/{rid}/$management")
            assert mgmt.router()["id"] == rid
            assert mgmt.router()["nodeCount"] == 2
            nodes = mgmt.query("router.node", ["id", "nextHop", "cost"])
            assert nodes[0] == {"id": rid, "nextHop": "(self)", "cost": None}
            assert {n["id"] for n in nodes} == {"A", "B", "C"}
            answer = mgmt.node_request("GET-MGMT-NODES")
            assert answer.properties["statusCode"] == 200
            assert sorted(answer.body) == [f"amqp:/_topo/0/{r}/$management" for r in "ABC"]


# ----- 11. counts back to zero --------------------------------------------------------------


def test_counts_return_to_zero_after_clients_leave(tmp_path: Path, world: World) -> None:
    with RouterNetwork(tmp_path, world, TRIANGLE) as net:
        a, b, c = (world.connect(net.url(n)) for n in "ABC")
        slow = b.receiver("jobs", policy=None)  # holds what it gets, then leaves
        fast = c.receiver("jobs")
        net.wait_address("jobs", {"B", "C"})
        sender = a.sender("jobs")
        credit(world, sender)
        sender.send_all(Message(body=i) for i in range(40))
        world.run_until(lambda: len(slow.messages) + len(fast.messages) == 40, what="arrivals")
        assert slow.messages, "balanced gave the slow consumer nothing"
        assert not sender.all_settled()
        slow.close()  # its unsettled deliveries are released back to A's sender
        world.run_until(sender.all_settled, what="outcomes")
        got = outcomes(sender)
        assert got == {"accepted": len(fast.messages), "released": len(slow.messages)}
        for client in (a, b, c):
            client.close()

        def quiet(name: str) -> bool:
            links = net.query(name, "router.link")
            addresses = {r["key"] for r in net.query(name, "router.address")}
            return (
                all(lk["unsettledCount"] == 0 and lk["undeliveredCount"] == 0 for lk in links)
                and "M0jobs" not in addresses
                and net.management(name).router()["deliveriesStuck"] == 0
            )

        net.wait_until(lambda: all(quiet(n) for n in "ABC"), 10, "counts back to zero")
        for name in "ABC":
            kinds = Counter(lk["linkType"] for lk in net.query(name, "router.link"))
            # 2 control + 20 data links per neighbor, and the management client's 2 links
            assert kinds == {"router-control": 4, "inter-router": 40, "endpoint": 2}, kinds


# ----- 7. a router on the cheapest path killed mid-stream -----------------------------------

# A square whose cheap side runs through B: A-B-C costs 2, A-D-C costs 4.
SQUARE = [("A", "B", 1), ("B", "C", 1), ("C", "D", 2), ("D", "A", 2)]


def test_killing_the_router_on_the_cheapest_path_loses_nothing(
    tmp_path: Path, world: World
) -> None:
    """What "exactly once" can mean when a router dies holding deliveries.

    When B dies, A holds every delivery it had sent over its link to B unsettled, and cannot
    know which of them reached C. Those still inside B never did; those C had passed to the
    consumer did, and their outcome died with B. A therefore answers each one "modified,
    delivery-failed" (Dispatch's rule: maybe delivered), never "released", which a sender may
    read as "certainly not delivered". A sender that resends them (at-least-once) gets every
    message to the consumer, and the only bodies the consumer sees twice are those it had
    already received before the kill. Deliveries A had not yet sent to B are rerouted (via D)
    without the sender noticing.
    """
    with RouterNetwork(tmp_path, world, SQUARE) as net:
        route = {r["id"]: (r["nextHop"], r["cost"]) for r in net.query("A", "router.node")[1:]}
        assert route["C"] == ("B", 2)
        a, c = world.connect(net.url("A")), world.connect(net.url("C"))
        consumer = c.receiver("orders", policy=None, credit=500)
        net.wait_address("orders", {"C"})
        sender = a.sender("orders", resend=True)
        credit(world, sender)

        def send(label: str, n: int) -> list[str]:
            bodies = [f"{label} {i}" for i in range(n)]
            sender.send_all(Message(body=b) for b in bodies)
            return bodies

        # Delivered and settled end to end before anything happens.
        settled = send("settled", 50)
        world.run_until(lambda: len(consumer.messages) == 50, what="50 arrivals")
        consumer.settle_all()
        world.run_until(sender.all_settled, what="outcomes")
        # Delivered to the consumer, whose outcome has not left C when B dies.
        delivered = send("delivered", 20)
        world.run_until(lambda: len(consumer.messages) == 70, what="70 arrivals")
        # Inside B (frozen: it reads nothing) when it dies.
        net["B"].proc.send_signal(signal.SIGSTOP)
        inside = send("inside-B", 20)
        world.run_for(0.3)
        assert len(consumer.messages) == 70
        killed = time.monotonic()
        net.kill("B")
        # A learns of it from its socket, at once; a message sent before A has read that goes
        # onto the link to B and comes back modified, rightly, but the "after" batch is about
        # what A sends knowing B is gone.
        world.run_until(lambda: "B" not in net.reachable("A"), timeout=3, what="A to drop B")
        consumer.policy = "accept"
        consumer.settle_all()  # these outcomes have no way back to A any more
        after = send("after", 50)
        world.run_until(lambda: len(consumer.messages) > 70, timeout=3, what="traffic to resume")
        resumed = time.monotonic() - killed
        world.run_until(sender.all_settled, timeout=10, what="every message to be settled")
        assert resumed < 3.0

        everything = settled + delivered + inside + after
        received = Counter(consumer.bodies)
        assert set(received) == set(everything)  # nothing lost
        assert outcomes(sender) == {"accepted": len(everything)}
        # Only what had reached the consumer before the kill arrives twice.
        assert {b for b, n in received.items() if n > 1} == set(delivered)
        assert max(received.values()) == 2
        first = {t.message.body: t for t in sender.originals}
        for body in delivered + inside:
            attempt = first[body]
            assert (attempt.outcome, attempt.failed) == ("modified", True), body
            assert attempt.resent is not None and attempt.resent.outcome == "accepted"
        for body in settled + after:
            assert first[body].resent is None and first[body].outcome == "accepted"
        assert not any(t.state == RELEASED for t in sender.sent)

        net.wait_converged(["A", "C", "D"])
        route = {r["id"]: (r["nextHop"], r["cost"]) for r in net.query("A", "router.node")[1:]}
        assert route["C"] == ("D", 4)


# ----- 8. a killed router restarted ---------------------------------------------------------


def test_a_killed_router_restarted_rejoins(tmp_path: Path, world: World) -> None:
    with RouterNetwork(tmp_path, world, LINE3) as net:
        a, c = world.connect(net.url("A")), world.connect(net.url("C"))
        beyond = c.receiver("beyond")
        net.wait_address("beyond", {"C"})
        to_c = a.sender("beyond")
        credit(world, to_c)
        to_c.send_all(Message(body=f"before {i}") for i in range(10))
        world.run_until(to_c.all_settled, what="outcomes")

        def instance() -> int:
            return next(r["instance"] for r in net.query("A", "router.node") if r["id"] == "B")

        old = instance()
        net.kill("B")
        net.wait_until(lambda: not net.reachable("A") and not net.reachable("C"), 5, "B to be gone")
        restarted = time.monotonic()
        net.restart("B")
        net.wait_converged(timeout=10)
        net.wait_address("beyond", {"C"}, timeout=5)
        assert instance() != old
        b = world.connect(net.url("B"))
        at_b = b.receiver("at-b")
        net.wait_address("at-b", {"B"})
        to_b = a.sender("at-b")
        credit(world, to_b)
        to_c.send_all(Message(body=f"after {i}") for i in range(10))
        to_b.send_all(Message(body=f"to B {i}") for i in range(10))
        world.run_until(lambda: to_c.all_settled() and to_b.all_settled(), what="outcomes")
        rejoined = time.monotonic() - restarted
        assert outcomes(to_c) == {"accepted": 20}
        assert outcomes(to_b) == {"accepted": 10}
        assert beyond.bodies == [f"before {i}" for i in range(10)] + [
            f"after {i}" for i in range(10)
        ]
        assert at_b.bodies == [f"to B {i}" for i in range(10)]
        assert rejoined < 8.0, rejoined


# ----- 9. a peer that appears late ----------------------------------------------------------


def test_a_connector_to_a_router_that_appears_10s_later_connects(
    tmp_path: Path, world: World
) -> None:
    net = RouterNetwork(tmp_path, world, PAIR)  # A dials B
    try:
        net.start(["A"])
        started = time.monotonic()
        net.wait_until(
            lambda: net.query("A", "connector")[0]["connectionStatus"] == "FAILED",
            5,
            "the connector to report its failure",
        )
        world.run_for(10.0 - (time.monotonic() - started))
        assert net.reachable("A") == set()
        net.start(["B"])
        appeared = time.monotonic()
        net.wait_converged(timeout=MAX_DELAY + 3)
        assert time.monotonic() - appeared <= MAX_DELAY + 2
        [row] = net.query("A", "connector")
        assert row["connectionStatus"] == "SUCCESS" and "container_id=B" in row["connectionMsg"]
        consumer = world.connect(net.url("B")).receiver("late")
        net.wait_address("late", {"B"})
        sender = world.connect(net.url("A")).sender("late")
        credit(world, sender)
        sender.send_all(Message(body=i) for i in range(10))
        world.run_until(sender.all_settled, what="outcomes")
        assert outcomes(sender) == {"accepted": 10}
        assert consumer.bodies == list(range(10))
    finally:
        net.stop()


# ----- 10. two routers with one id ----------------------------------------------------------


def test_a_duplicate_router_id_is_logged_loudly(tmp_path: Path, world: World) -> None:
    # A and A2 both call themselves "A"; they meet only through B.
    net = RouterNetwork(tmp_path, world, [("A", "B", 1), ("A2", "B", 1)], ids={"A2": "A"})
    try:
        net.start()
        pattern = re.compile(r"level=error .*event=network\.duplicate_router_id .*id=A\b")

        def logged() -> bool:
            return any(pattern.search(net[n].log()) for n in ("A", "A2"))

        net.wait_until(logged, 10, "a duplicate_router_id error in A's or A2's log")
        assert all(net[n].alive() for n in net.names)
    finally:
        net.stop()
