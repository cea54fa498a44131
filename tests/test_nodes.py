"""Seed 002's queues and topics hosted by a real router, against python-qpid-proton clients:
the router takes responsibility for messages (durable ones synced before they are accepted),
queues distribute and treat outcomes as instructions, topics route to every subscription.

One standalone router hosts every node here; tests/test_nodes_network.py has the network (a
host elsewhere, kill -9 of the host).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from itertools import count
from pathlib import Path
from typing import Any

import pytest
from clients import ACCEPTED, MODIFIED, REJECTED, Client, Management, World, settle
from harness import RouterProcess
from proton import Condition, Described, Message, symbol, ulong
from proton.handlers import TransactionHandler
from proton.reactor import Copy, DurableSubscription, DynamicNodeProperties, Filter
from test_edge import started
from test_telemetry import samples, telemetry, value

DLQ = "jobs.dlq"
LINK_NAMES = count(1)
NODES = [
    {
        "prefix": "jobs",
        "node": {"type": "queue", "deadLetterAddress": DLQ, "maxDeliveryCount": 3},
    },
    {"prefix": "news", "node": {"type": "topic"}},
    {"prefix": "small", "node": {"type": "queue", "maxDepth": 5, "atLimit": "reject"}},
    {"prefix": "tight", "node": {"type": "queue", "maxDepth": 5}},
    {"prefix": "inbox", "node": {"type": "queue", "visibility": "inbound"}},
    {"prefix": "feed", "node": {"type": "queue", "visibility": "outbound"}},
    {
        "prefix": "orders",
        "node": {
            "type": "topic",
            "bindings": [{"address": "eu.orders", "subject": "eu.#"}, {"address": "audit.all"}],
        },
    },
    {
        "prefix": "inq",
        "node": {
            "type": "queue",
            "bindings": [
                {"address": "urgent.q", "selector": "urgent = TRUE", "mode": "move"},
                {"address": "audit.copy", "mode": "copy"},
            ],
        },
    },
    {"prefix": "eu", "node": {"type": "queue"}},
    {"prefix": "audit", "node": {"type": "queue"}},
    {"prefix": "urgent", "node": {"type": "queue"}},
]


def hosting(tmp_path: Path, rid: str = "R") -> RouterProcess:
    return RouterProcess(
        tmp_path, rid, addresses=NODES, sections={"store": {"path": str(tmp_path / "store")}}
    )


@pytest.fixture
def world() -> Iterator[World]:
    with World() as w:
        yield w


@pytest.fixture
def router(tmp_path: Path) -> Iterator[RouterProcess]:
    r = hosting(tmp_path)
    r.start()
    try:
        yield r
    finally:
        r.stop()


@pytest.fixture
def client(world: World, router: RouterProcess) -> Iterator[Client]:
    c = world.connect(router.url)
    yield c
    c.close()


def send(client: Client, address: str, messages: list[Message]) -> list[Any]:
    sender = client.sender(address)
    world = client.world
    tracked = []
    for message in messages:
        world.run_until(lambda: sender.credit > 0, what=f"credit to send to {address}")
        tracked.append(sender.send(message))
    world.run_until(lambda: all(t.settled for t in tracked), what=f"outcomes from {address}")
    sender.close()
    return tracked


def receive(client: Client, address: str, count: int, **kwargs: Any) -> Any:
    receiver = consumer(client, address, **kwargs)
    client.world.run_until(
        lambda: len(receiver.messages) >= count, what=f"{count} messages from {address}"
    )
    return receiver


def consumer(client: Client, address: str | None, **kwargs: Any) -> Any:
    """A receiver with a link name of its own (Proton names links by container and address,
    and two links of one name on a connection are a protocol error)."""
    kwargs.setdefault("name", f"{address}-{next(LINK_NAMES)}")
    return client.receiver(address, **kwargs)


def nodes(world: World, router: RouterProcess) -> dict[str, dict[str, Any]]:
    c = world.connect(router.url)
    try:
        return {row["name"]: row for row in Management(c).query("io.routernet.node")}
    finally:
        c.close()


def test_a_queue_keeps_messages_until_a_consumer_takes_them(
    world: World, router: RouterProcess, client: Client
) -> None:
    tracked = send(client, "jobs.a", [Message(body=i, durable=True) for i in range(50)])
    assert {t.state for t in tracked} == {ACCEPTED}  # taken on, with nobody consuming
    assert nodes(world, router)["jobs.a"]["depth"] == 50
    receiver = receive(client, "jobs.a", 50)
    assert receiver.bodies == list(range(50))
    world.run_until(lambda: nodes(world, router)["jobs.a"]["depth"] == 0, what="queue emptied")
    row = nodes(world, router)["jobs.a"]
    assert (row["enqueued"], row["dequeued"], row["nodeType"]) == (50, 50, "queue")


def test_each_message_goes_to_one_consumer(world: World, client: Client) -> None:
    first = consumer(client, "jobs.shared", credit=10)
    second = consumer(client, "jobs.shared", credit=10)
    send(client, "jobs.shared", [Message(body=i) for i in range(40)])
    world.run_until(
        lambda: len(first.messages) + len(second.messages) == 40, what="all 40 consumed"
    )
    assert sorted(first.bodies + second.bodies) == list(range(40))
    assert first.bodies and second.bodies


def test_released_goes_to_another_consumer_and_keeps_its_count(
    world: World, client: Client
) -> None:
    send(client, "jobs.r", [Message(body="once")])
    releaser = receive(client, "jobs.r", 1, policy="release")
    taker = consumer(client, "jobs.r")
    world.run_until(lambda: taker.bodies == ["once"], what="the released message redelivered")
    assert taker.messages[0].delivery_count == 0
    releaser.close()


def test_rejected_goes_to_the_dead_letter_address_with_the_reason(
    world: World, client: Client
) -> None:
    send(client, "jobs.bad", [Message(body="poison", subject="s")])

    def reject(receiver: Any, message: Message, delivery: Any) -> None:
        settle(delivery, REJECTED, condition=Condition("app:bad-input", "cannot parse"))

    receive(client, "jobs.bad", 1, policy=reject)
    dead = receive(client, DLQ, 1)
    msg = dead.messages[0]
    assert msg.body == "poison" and msg.subject == "s"
    annotations = {str(k): v for k, v in msg.annotations.items()}
    assert annotations["x-first-death-reason"] == "rejected"
    assert annotations["x-first-death-queue"] == "jobs.bad"
    assert annotations["x-opt-routernet-reject-condition"] == "app:bad-input"
    assert annotations["x-opt-routernet-reject-description"] == "cannot parse"


def test_modified_counts_failures_until_the_limit_then_dead_letters(
    world: World, client: Client
) -> None:
    send(client, "jobs.flaky", [Message(body="x")])

    def fail(receiver: Any, message: Message, delivery: Any) -> None:
        settle(delivery, MODIFIED, failed=True)

    flaky = consumer(client, "jobs.flaky", policy=fail)
    dead = receive(client, DLQ, 1)
    # maxDeliveryCount 3: delivered with counts 0, 1, 2, then dead-lettered.
    assert [m.delivery_count for m in flaky.messages] == [0, 1, 2]
    annotations = {str(k): v for k, v in dead.messages[0].annotations.items()}
    assert annotations["x-first-death-reason"] == "delivery_limit"


def test_undeliverable_here_keeps_the_message_from_that_consumer(
    world: World, client: Client
) -> None:
    send(client, "jobs.picky", [Message(body="not for you")])

    def refuse(receiver: Any, message: Message, delivery: Any) -> None:
        settle(delivery, MODIFIED, undeliverable=True)

    picky = receive(client, "jobs.picky", 1, policy=refuse)
    world.run_for(0.3)
    assert len(picky.messages) == 1  # never again to this consumer
    other = receive(client, "jobs.picky", 1)
    assert other.bodies == ["not for you"]
    assert other.messages[0].delivery_count == 0  # undeliverable-here alone is no failure


def test_higher_priority_overtakes_fifo_within_a_priority(world: World, client: Client) -> None:
    messages = [Message(body=f"p{p}-{i}", priority=p) for i in range(3) for p in (1, 4, 9)]
    send(client, "jobs.prio", messages)
    receiver = receive(client, "jobs.prio", 9)
    assert receiver.bodies == [f"p{p}-{i}" for p in (9, 4, 1) for i in range(3)]


def test_ttl_expires_to_the_dead_letter_address(world: World, client: Client) -> None:
    send(client, "jobs.ttl", [Message(body="stale", ttl=0.2), Message(body="fresh")])
    dead = receive(client, DLQ, 1)
    assert dead.bodies == ["stale"]
    annotations = {str(k): v for k, v in dead.messages[0].annotations.items()}
    assert annotations["x-first-death-reason"] == "expired"
    assert not dead.messages[0].ttl  # kept to be looked at, not to expire again
    assert receive(client, "jobs.ttl", 1).bodies == ["fresh"]


def test_expired_without_a_dead_letter_address_is_dropped_and_counted(
    world: World, router: RouterProcess, client: Client
) -> None:
    send(client, "small.x", [Message(body="stale", ttl=0.1)])
    world.run_until(lambda: nodes(world, router)["small.x"]["expired"] == 1, what="expiry counted")
    assert nodes(world, router)["small.x"]["depth"] == 0


def test_browsing_sees_everything_and_takes_nothing(
    world: World, router: RouterProcess, client: Client
) -> None:
    send(client, "jobs.browse", [Message(body=i) for i in range(5)])
    browser = receive(client, "jobs.browse", 5, options=[Copy()])
    assert browser.bodies == list(range(5))
    assert nodes(world, router)["jobs.browse"]["depth"] == 5
    assert receive(client, "jobs.browse", 5).bodies == list(range(5))


def test_a_selector_filters_what_a_consumer_gets(world: World, client: Client) -> None:
    send(
        client,
        "jobs.sel",
        [Message(body=i, properties={"colour": "red" if i % 2 else "blue"}) for i in range(6)],
    )
    selector = Filter(
        {
            symbol("selector"): Described(
                symbol("apache.org:selector-filter:string"), "colour = 'red'"
            )
        }
    )
    red = receive(client, "jobs.sel", 3, options=[selector])
    assert red.bodies == [1, 3, 5]
    applied = red.link.remote_source.filter
    applied.rewind()
    applied.next()
    assert symbol("selector") in applied.get_object()  # the attach answer lists it
    assert receive(client, "jobs.sel", 3).bodies == [0, 2, 4]


def test_a_bad_selector_is_refused_naming_the_problem(world: World, client: Client) -> None:
    selector = Filter(
        {symbol("s"): Described(symbol("apache.org:selector-filter:string"), "colour = ")}
    )
    receiver = consumer(client, "jobs.sel2", options=[selector])
    world.run_until(lambda: receiver.closed, what="refusal")
    condition = receiver.link.remote_condition
    assert condition.name == "amqp:invalid-field" and "selector" in condition.description


def test_a_topic_gives_every_subscriber_a_copy(world: World, client: Client) -> None:
    one = consumer(client, "news.sport")
    two = consumer(client, "news.sport")
    send(client, "news.sport", [Message(body=i) for i in range(3)])
    world.run_until(lambda: len(one.messages) == 3 and len(two.messages) == 3, what="copies")
    assert one.bodies == two.bodies == [0, 1, 2]


def test_a_durable_subscription_keeps_messages_while_away(
    world: World, router: RouterProcess, tmp_path: Path
) -> None:
    c = world.connect(router.url, container_id="subscriber-1")
    sub = c.receiver("news.weather", name="weather-sub", options=[DurableSubscription()])
    sub.detach()
    assert not sub.closed  # a detach is answered in kind: the subscription stays
    c.close()
    p = world.connect(router.url)
    send(p, "news.weather", [Message(body=i, durable=True) for i in range(4)])
    p.close()
    router.stop()
    router.start()  # and across a restart
    c = world.connect(router.url, container_id="subscriber-1")
    back = receive(c, "news.weather", 4, name="weather-sub", options=[DurableSubscription()])
    assert back.bodies == [0, 1, 2, 3]
    c.close()


def test_a_durable_subscriptions_selector_is_kept_while_away_and_across_a_restart(
    world: World, router: RouterProcess
) -> None:
    reds = Filter(
        {symbol("s"): Described(symbol("apache.org:selector-filter:string"), "colour = 'red'")}
    )
    options = [DurableSubscription(), reds]
    c = world.connect(router.url, container_id="subscriber-2")
    consumer(c, "news.paint", name="reds", options=options).detach()
    c.close()
    router.stop()
    router.start()
    p = world.connect(router.url)
    colours = ["red", "blue", "red", "green"]
    send(
        p, "news.paint", [Message(body=i, properties={"colour": x}) for i, x in enumerate(colours)]
    )
    p.close()
    c = world.connect(router.url, container_id="subscriber-2")
    back = receive(c, "news.paint", 2, name="reds", options=options)
    world.run_for(0.3)
    assert back.bodies == [0, 2]
    c.close()


def test_a_deep_queue_pages_and_loses_nothing_to_kill_9(world: World, tmp_path: Path) -> None:
    """Past the store's indexedMessages a queue pages (router/store/paging.py): the router
    indexes no more than that, and after kill -9 every message comes back once, in order."""
    r = RouterProcess(
        tmp_path,
        "P",
        addresses=NODES,
        sections={"store": {"path": str(tmp_path / "store"), "indexedMessages": 1000}},
    )
    total = 20_000
    with started(r):
        c = world.connect(r.url)
        tracked = send(c, "jobs.deep", [Message(body=i, durable=True) for i in range(total)])
        assert {t.state for t in tracked} == {ACCEPTED}
        row = nodes(world, r)["jobs.deep"]
        assert (row["depth"], row["paged"]) == (total, total - 1000)
        part = receive(c, "jobs.deep", 2500, credit=500, policy=None)
        for delivery in part.deliveries[:2500]:
            settle(delivery, ACCEPTED)
        world.run_until(lambda: nodes(world, r)["jobs.deep"]["depth"] == total - 2500, what="acks")
        r.stop(signal.SIGKILL)
        c.close(wait=False)
        r.start()
        c = world.connect(r.url)
        rest = receive(c, "jobs.deep", total - 2500, credit=1000)
        world.run_for(0.3)
        assert part.bodies[:2500] + rest.bodies == list(range(total))
        c.close()


def test_a_non_durable_subscriptions_paged_messages_go_with_it_after_a_crash(
    world: World, tmp_path: Path
) -> None:
    """Its messages, paged ones too, are not kept across a restart: the log they were in goes."""
    store = tmp_path / "store"
    r = RouterProcess(
        tmp_path,
        "P",
        addresses=NODES,
        sections={"store": {"path": str(store), "indexedMessages": 1000}},
    )
    with started(r):
        c = world.connect(r.url)
        consumer(c, "news.flood", credit=0)  # takes nothing: its subscription fills and pages
        send(c, "news.flood", [Message(body=i, durable=True) for i in range(1500)])
        assert nodes(world, r)["news.flood"]["paged"] == 500
        r.stop(signal.SIGKILL)
        c.close(wait=False)
        r.start()
    assert [p.name for p in store.glob("*.log")] == ["00000002.log"]  # the first one freed


def test_a_non_durable_subscription_goes_with_its_link(
    world: World, router: RouterProcess, client: Client
) -> None:
    sub = consumer(client, "news.local")
    sub.close()
    tracked = send(client, "news.local", [Message(body="nobody")])
    assert tracked[0].state == ACCEPTED
    row = nodes(world, router)["news.local"]
    assert (row["depth"], row["subscriptions"]) == (0, 0)


def test_visibility_is_enforced_at_attach_naming_the_rule(world: World, client: Client) -> None:
    receiver = consumer(client, "inbox.mine")
    world.run_until(lambda: receiver.closed, what="refusal")
    condition = receiver.link.remote_condition
    assert condition.name == "amqp:unauthorized-access"
    assert "inbox.mine" in condition.description and "visibility inbound" in condition.description
    sender = client.sender("feed.mine")
    world.run_until(lambda: sender.closed, what="refusal")
    assert "visibility outbound" in sender.link.remote_condition.description
    assert client.sender("inbox.mine").attached


def test_at_the_limit_senders_are_rejected_or_get_no_credit(world: World, client: Client) -> None:
    tracked = send(client, "small.q", [Message(body=i) for i in range(7)])
    assert [t.state for t in tracked] == [ACCEPTED] * 5 + [REJECTED] * 2
    assert tracked[5].condition.name == "amqp:resource-limit-exceeded"
    sender = client.sender("tight.q")
    world.run_until(lambda: sender.credit > 0, what="credit")
    assert sender.credit == 5
    for i in range(5):
        sender.send(Message(body=i))
    world.run_until(lambda: all(t.settled for t in sender.sent), what="five accepted")
    world.run_for(0.3)
    assert sender.credit == 0
    receive(client, "tight.q", 2)
    world.run_until(lambda: sender.credit > 0, what="credit once there is room")


def test_durable_messages_survive_a_restart(
    world: World, router: RouterProcess, tmp_path: Path
) -> None:
    c = world.connect(router.url)
    send(c, "jobs.keep", [Message(body=i, durable=True) for i in range(100)])
    c.close()
    router.stop()
    started = time.monotonic()
    router.start()
    assert time.monotonic() - started < 30
    c = world.connect(router.url)
    assert receive(c, "jobs.keep", 100).bodies == list(range(100))
    c.close()


def test_anonymous_senders_reach_a_node(
    world: World, router: RouterProcess, client: Client
) -> None:
    sender = client.sender(None)
    world.run_until(lambda: sender.credit > 0, what="credit")
    tracked = [sender.send(Message(address="jobs.anon", body=i, durable=True)) for i in range(3)]
    world.run_until(lambda: all(t.settled for t in tracked), what="outcomes")
    assert {t.state for t in tracked} == {ACCEPTED}
    assert receive(client, "jobs.anon", 3).bodies == [0, 1, 2]


def test_released_on_detach_is_redelivered(world: World, client: Client) -> None:
    send(client, "jobs.left", [Message(body="unfinished")])
    holder = receive(client, "jobs.left", 1, policy=None)
    holder.close()
    taker = receive(client, "jobs.left", 1)
    assert taker.bodies == ["unfinished"]
    assert taker.messages[0].delivery_count == 1


def test_topic_bindings_copy_what_matches_to_their_queues(
    world: World, router: RouterProcess, client: Client
) -> None:
    send(
        client,
        "orders.new",
        [Message(body=s, subject=s) for s in ("eu.fr.paris", "us.ny", "eu.de")],
    )
    assert receive(client, "eu.orders", 2).bodies == ["eu.fr.paris", "eu.de"]
    assert receive(client, "audit.all", 3).bodies == ["eu.fr.paris", "us.ny", "eu.de"]
    world.run_for(0.2)
    assert nodes(world, router)["eu.orders"]["depth"] == 0


def test_queue_bindings_move_or_copy(world: World, router: RouterProcess, client: Client) -> None:
    send(
        client,
        "inq.work",
        [Message(body=i, properties={"urgent": i % 2 == 0}) for i in range(4)],
    )
    assert receive(client, "urgent.q", 2).bodies == [0, 2]  # moved: gone from inq.work
    assert receive(client, "inq.work", 2).bodies == [1, 3]
    # The copy binding sees what stays (the move binding took the urgent ones first).
    assert receive(client, "audit.copy", 2).bodies == [1, 3]


def lifetime(code: int) -> DynamicNodeProperties:
    return DynamicNodeProperties({symbol("lifetime-policy"): Described(ulong(code), [])})


def test_a_dynamic_node_is_random_exclusive_and_goes_with_its_link(
    world: World, router: RouterProcess, client: Client
) -> None:
    temp = consumer(client, None, dynamic=True, options=[lifetime(0x2B)], policy=None)
    address = temp.address
    assert address and address.startswith("_topo/0/R/temp.") and len(address) > 30
    other = world.connect(router.url)
    send(other, address, [Message(body="reply", durable=True)])  # anyone may send to it
    world.run_until(lambda: temp.bodies == ["reply"], what="the reply")
    thief = consumer(other, address)
    world.run_until(lambda: thief.closed, what="refusal")
    assert thief.link.remote_condition.name == "amqp:resource-locked"
    assert address in nodes(world, router)
    temp.close()  # delete-on-close: the node and what it held go
    world.run_until(lambda: address not in nodes(world, router), what="the node deleted")
    other.close()


def test_delete_on_no_messages(world: World, router: RouterProcess, client: Client) -> None:
    temp = consumer(client, None, dynamic=True, options=[lifetime(0x2D)], credit=0)
    address = temp.address
    send(client, address, [Message(body=1), Message(body=2)])
    temp.flow(1)
    world.run_until(lambda: temp.bodies == [1], what="one of two")
    world.run_for(0.2)
    assert address in nodes(world, router)  # one message still in it
    temp.flow(1)
    world.run_until(lambda: address not in nodes(world, router), what="emptied, deleted")


class Transactions(TransactionHandler):
    """A client's transaction, as python-qpid-proton's TransactionHandler sees it."""

    def __init__(self, client: Client) -> None:
        super().__init__()
        self.client = client
        self.txn: Any = None
        self.outcome: str | None = None
        client.world.container.declare_transaction(client.conn, handler=self)
        client.world.run_until(lambda: self.txn is not None or self.outcome, what="declared")

    def on_transaction_declared(self, event: Any) -> None:
        self.txn = event.transaction

    def on_transaction_declare_failed(self, event: Any) -> None:
        self.outcome = "declare failed"

    def on_transaction_committed(self, event: Any) -> None:
        self.outcome = "committed"

    def on_transaction_aborted(self, event: Any) -> None:
        self.outcome = "aborted"

    def on_transaction_commit_failed(self, event: Any) -> None:
        self.outcome = "commit failed"

    def discharge(self, commit: bool) -> str | None:
        self.txn.commit() if commit else self.txn.abort()
        self.client.world.run_until(lambda: self.outcome is not None, what="discharged")
        return self.outcome


def test_transactional_sends_appear_at_commit_and_vanish_at_rollback(
    world: World, router: RouterProcess, client: Client
) -> None:
    sender = client.sender("jobs.tx")
    world.run_until(lambda: sender.credit > 0, what="credit")
    first = Transactions(client)
    for i in range(3):
        first.txn.send(sender.link, Message(body=f"c{i}", durable=True))
    world.run_for(0.3)
    assert nodes(world, router)["jobs.tx"]["depth"] == 0  # nothing visible before the commit
    assert first.discharge(commit=True) == "committed"
    assert nodes(world, router)["jobs.tx"]["depth"] == 3
    second = Transactions(client)
    second.txn.send(sender.link, Message(body="gone"))
    assert second.discharge(commit=False) == "aborted"
    assert receive(client, "jobs.tx", 3).bodies == ["c0", "c1", "c2"]
    world.run_for(0.3)
    assert nodes(world, router)["jobs.tx"]["depth"] == 0


def test_transactional_acknowledgements_apply_at_commit_and_redeliver_at_rollback(
    world: World, router: RouterProcess, client: Client
) -> None:
    send(client, "jobs.txack", [Message(body=i, durable=True) for i in range(2)])
    receiver = receive(client, "jobs.txack", 2, policy=None, credit=2)
    rolled = Transactions(client)
    for delivery in receiver.deliveries:
        rolled.txn.accept(delivery)
    assert rolled.discharge(commit=False) == "aborted"
    world.run_until(lambda: len(receiver.messages) == 4, what="redelivered after rollback")
    assert receiver.bodies == [0, 1, 0, 1]
    committed = Transactions(client)
    for delivery in receiver.deliveries[2:]:
        committed.txn.accept(delivery)
    world.run_for(0.2)
    assert nodes(world, router)["jobs.txack"]["depth"] == 2  # not before the commit
    assert committed.discharge(commit=True) == "committed"
    assert nodes(world, router)["jobs.txack"]["depth"] == 0


def test_an_unknown_transaction_is_refused(world: World, client: Client) -> None:
    sender = client.sender("jobs.txbad")
    world.run_until(lambda: sender.credit > 0, what="credit")
    delivery = sender.link.send(Message(body="x"), tag="t1")
    delivery.local.data = [b"no-such-txn"]
    delivery.update(0x34)
    world.run_until(lambda: delivery.remote_state != 0, what="refusal")
    assert delivery.remote_state == REJECTED
    assert delivery.remote.condition.name == "amqp:transaction:unknown-id"


def test_hosted_nodes_in_the_metrics(world: World, tmp_path: Path) -> None:
    router = hosting(tmp_path)
    base = telemetry(router)
    with router:
        c = world.connect(router.url)
        send(c, "jobs.metered", [Message(body=i) for i in range(5)])
        taker = receive(c, "jobs.metered", 2, credit=2, policy=None)
        for delivery in taker.deliveries[:2]:
            settle(delivery, ACCEPTED)
        world.run_until(lambda: nodes(world, router)["jobs.metered"]["depth"] == 3, what="2 taken")
        c.close()
        found = samples(base)
        labels = {"router": "R", "node": "jobs.metered", "type": "queue"}
        assert value(found, "routernet_node_depth", **labels) == 3
        assert value(found, "routernet_node_paged", **labels) == 0
        assert value(found, "routernet_node_enqueued_total", **labels) == 5
        assert value(found, "routernet_node_dequeued_total", **labels) == 2
        assert value(found, "routernet_node_dead_lettered_total", **labels) == 0
        assert value(found, "routernet_node_expired_total", **labels) == 0
