"""One router process, real AMQP clients: settlement, outcomes, credit and endpoints going away.

The router's promise to a sender is that every unsettled delivery comes back with the outcome a
consumer gave it, or released when no consumer could take it: never lost, never left hanging.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest
from clients import (
    ACCEPTED,
    MODIFIED,
    REJECTED,
    RELEASED,
    ConsumerProcess,
    Management,
    Receiver,
    World,
    settle,
)
from harness import RouterProcess
from proton import Condition, Delivery, Endpoint, Message, symbol

pytestmark = pytest.mark.network

RID = "R1"


def bodies(n: int, tag: str = "m") -> list[str]:
    return [f"{tag}-{i}" for i in range(n)]


def send_bodies(world: World, sender: Any, items: list[str], **fields: Any) -> list[Any]:
    world.run_until(lambda: sender.credit > 0, what="sender credit")
    return sender.send_all(Message(body=b, **fields) for b in items)


# ----- outcomes --------------------------------------------------------------------------------


def by_body(rx: Receiver, message: Message, delivery: Delivery) -> None:
    """Settles each message with the outcome its body names."""
    body = message.body
    if body.startswith("accept"):
        settle(delivery, ACCEPTED)
    elif body.startswith("reject"):
        settle(delivery, REJECTED, condition=Condition("app:invalid", "order 17 has no lines"))
    elif body.startswith("release"):
        settle(delivery, RELEASED)
    elif body.startswith("modify"):
        settle(
            delivery,
            MODIFIED,
            failed=True,
            undeliverable=True,
            annotations={symbol("x-retry-after"): 5},
        )


def test_consumer_outcomes_reach_the_sender(tmp_path: Path, world: World) -> None:
    with RouterProcess(tmp_path, RID) as router, world:
        world.connect(router.url).receiver("outcomes", policy=by_body)
        tx = world.connect(router.url).sender("outcomes")
        accepted, rejected, released, modified = send_bodies(
            world, tx, ["accept", "reject", "release", "modify"]
        )
        world.run_until(tx.all_settled, what="4 outcomes")

        assert accepted.state == ACCEPTED
        assert rejected.state == REJECTED
        assert rejected.condition is not None
        assert (rejected.condition.name, rejected.condition.description) == (
            "app:invalid",
            "order 17 has no lines",
        )
        assert released.state == RELEASED
        assert modified.state == MODIFIED
        assert modified.failed and modified.undeliverable
        assert modified.annotations == {symbol("x-retry-after"): 5}

        row = Management(world.connect(router.url)).router()
        assert (
            row["rejectedDeliveries"],
            row["releasedDeliveries"],
            row["modifiedDeliveries"],
        ) == (1, 1, 1)


def test_modified_without_flags_reaches_the_sender_as_is(tmp_path: Path, world: World) -> None:
    with RouterProcess(tmp_path, RID) as router, world:
        world.connect(router.url).receiver(
            "m", policy=lambda rx, m, d: settle(d, MODIFIED, failed=True)
        )
        tx = world.connect(router.url).sender("m")
        (t,) = send_bodies(world, tx, ["x"])
        world.run_until(tx.all_settled, what="outcome")
        assert t.state == MODIFIED and t.failed and not t.undeliverable


def test_multicast_outcome_combines_the_consumers(tmp_path: Path, world: World) -> None:
    """Accepted if at least one accepted and none rejected; rejected if any rejected."""
    addresses = [{"prefix": "mc", "distribution": "multicast"}]
    # What each of three consumers does with each message, by body.
    plans = {
        "all-accept": ("accept", "accept", "accept"),
        "one-accepts": ("release", "accept", "release"),
        "one-rejects": ("accept", "reject", "accept"),
        "reject-and-release": ("release", "release", "reject"),
        "all-release": ("release", "release", "release"),
        "modify-and-release": ("modify", "release", "release"),
    }
    expected = {
        "all-accept": ACCEPTED,
        "one-accepts": ACCEPTED,
        "one-rejects": REJECTED,
        "reject-and-release": REJECTED,
        "all-release": RELEASED,
    }

    def policy(index: int) -> Any:
        def decide(rx: Receiver, message: Message, delivery: Delivery) -> None:
            by_body(rx, Message(body=plans[message.body][index]), delivery)

        return decide

    with RouterProcess(tmp_path, RID, addresses=addresses) as router, world:
        for i in range(3):
            world.connect(router.url).receiver("mc.events", policy=policy(i))
        tx = world.connect(router.url).sender("mc.events")
        sent = send_bodies(world, tx, list(plans))
        world.run_until(tx.all_settled, what="outcomes")
        got = {t.message.body: t.state for t in sent}
        assert {k: got[k] for k in expected} == expected
        # Nobody accepted, one modified: not a success, the message may be sent again.
        assert got["modify-and-release"] in (MODIFIED, RELEASED)
        rejected = next(t for t in sent if t.message.body == "one-rejects")
        assert rejected.condition is not None and rejected.condition.name == "app:invalid"


# ----- settlement modes ------------------------------------------------------------------------


def test_presettled_in_presettled_out_and_counted(tmp_path: Path, world: World) -> None:
    with RouterProcess(tmp_path, RID) as router, world:
        mgmt = Management(world.connect(router.url))
        before = mgmt.router()
        rx = world.connect(router.url).receiver("ps", policy=None)
        client = world.connect(router.url)
        tx = client.sender("ps", presettled=True)
        send_bodies(world, tx, bodies(5))
        world.run_until(lambda: len(rx.messages) == 5, what="5 messages")
        assert rx.bodies == bodies(5)
        assert all(d.settled for d in rx.deliveries)  # the consumer got them pre-settled

        nowhere = client.sender(None, presettled=True)
        send_bodies(world, nowhere, bodies(3, "lost"), address="nobody.here")

        def dropped() -> bool:
            return (
                mgmt.router()["droppedPresettledDeliveries"] - before["droppedPresettledDeliveries"]
                >= 3
            )

        world.run_until(dropped, what="3 dropped pre-settled deliveries")
        after = mgmt.router()
        assert after["presettledDeliveries"] - before["presettledDeliveries"] == 8
        assert after["droppedPresettledDeliveries"] - before["droppedPresettledDeliveries"] == 3
        # Pre-settled deliveries have no outcome: only the management requests were accepted.
        assert after["acceptedDeliveries"] - before["acceptedDeliveries"] < len(mgmt.sender.sent)
        link = next(
            r
            for r in mgmt.query("router.link")
            if r["owningAddr"] == "M0ps" and r["linkDir"] == "out"
        )
        assert link["presettledCount"] == 5 and link["unsettledCount"] == 0


def test_unsettled_in_stays_unsettled_until_the_consumer_settles(
    tmp_path: Path, world: World
) -> None:
    with RouterProcess(tmp_path, RID) as router, world:
        rx = world.connect(router.url).receiver("u", policy=None)
        tx = world.connect(router.url).sender("u")
        sent = send_bodies(world, tx, bodies(3))
        world.run_until(lambda: len(rx.messages) == 3, what="3 messages")
        assert not any(d.settled for d in rx.deliveries)
        world.run_for(0.2)
        assert not any(t.settled for t in sent)
        rx.settle_all(ACCEPTED)
        world.run_until(tx.all_settled, what="outcomes")
        assert {t.state for t in sent} == {ACCEPTED}


# ----- credit ----------------------------------------------------------------------------------


def test_targeted_sender_gets_credit_only_while_a_consumer_exists(
    tmp_path: Path, world: World
) -> None:
    listeners = [{"linkCapacity": 10}]
    with RouterProcess(tmp_path, RID, listeners=listeners) as router, world:
        tx = world.connect(router.url).sender("credit.q")
        world.run_for(0.3)
        assert tx.credit == 0
        rx = world.connect(router.url).receiver("credit.q")
        world.run_until(lambda: tx.credit > 0, what="credit after a consumer attached")
        world.run_for(0.1)
        assert 0 < tx.credit <= 10
        # A capacity of 10 still carries any number of messages, in order.
        sent = tx.send_all(Message(body=i) for i in range(35))
        world.run_until(tx.all_settled, what="35 outcomes")
        assert rx.bodies == list(range(35))
        assert {t.state for t in sent} == {ACCEPTED}
        assert tx.credit <= 10


def test_credit_is_bounded_by_link_capacity_with_a_slow_consumer(
    tmp_path: Path, world: World
) -> None:
    """A consumer granting no credit: the router takes at most linkCapacity from the sender."""
    listeners = [{"linkCapacity": 10}]
    with RouterProcess(tmp_path, RID, listeners=listeners) as router, world:
        rx = world.connect(router.url).receiver("slow", credit=0)
        tx = world.connect(router.url).sender("slow")
        world.run_until(lambda: tx.credit > 0, what="credit")
        tx.send_all(Message(body=i) for i in range(30))
        world.run_for(0.5)
        assert sum(1 for t in tx.sent if t.delivery.remote_state or t.settled) == 0
        # What the router accepted from the link is bounded by its capacity.
        mgmt = Management(world.connect(router.url))
        link = next(
            r
            for r in mgmt.query("router.link")
            if r["owningAddr"] == "M0slow" and r["linkDir"] == "out"
        )
        assert link["undeliveredCount"] <= 10
        rx.flow(100)
        world.run_until(tx.all_settled, what="30 outcomes")
        assert rx.bodies == list(range(30))


# ----- endpoints going away --------------------------------------------------------------------


@pytest.mark.parametrize("how", ["close", "detach", "end-session"])
def test_consumer_leaving_mid_stream_releases_its_unsettled_deliveries(
    tmp_path: Path, world: World, how: str
) -> None:
    with RouterProcess(tmp_path, RID) as router, world:
        client = world.connect(router.url)
        session = client.session()
        leaving = client.receiver("work", policy=None, session=session)
        staying = world.connect(router.url).receiver("work", policy=None)
        tx = world.connect(router.url).sender("work", resend=True)
        sent = send_bodies(world, tx, bodies(20))
        world.run_until(
            lambda: len(leaving.messages) + len(staying.messages) == 20, what="20 deliveries"
        )
        assert leaving.messages, "the leaving consumer should hold some deliveries"
        staying.policy = "accept"
        staying.settle_all(ACCEPTED)
        if how == "close":
            leaving.close()
        elif how == "detach":
            leaving.detach()
        else:
            session.close()
            world.run_until(lambda: session.state & Endpoint.REMOTE_CLOSED, what="session end")
        world.run_until(tx.all_settled, what="every message settled")
        released = [t for t in tx.sent if t.state == RELEASED]
        assert len(released) == len(leaving.messages)
        assert {t.final.state for t in sent} == {ACCEPTED}
        assert sorted(staying.bodies) == sorted(bodies(20))  # none lost, none twice


def test_consumer_connection_dropped_releases_its_deliveries(tmp_path: Path, world: World) -> None:
    with RouterProcess(tmp_path, RID) as router, world:
        crashing = world.connect(router.url)
        gone = crashing.receiver("work", policy=None)
        tx = world.connect(router.url).sender("work", resend=True)
        sent = send_bodies(world, tx, bodies(10))
        world.run_until(lambda: len(gone.messages) == 10, what="10 deliveries")
        staying = world.connect(router.url).receiver("work")
        crashing.drop()
        world.run_until(tx.all_settled, what="every message settled")
        assert len([t for t in tx.sent if t.state == RELEASED]) == 10
        assert {t.final.state for t in sent} == {ACCEPTED}
        assert sorted(staying.bodies) == sorted(bodies(10))


def test_killed_consumer_process_releases_its_deliveries(tmp_path: Path, world: World) -> None:
    with RouterProcess(tmp_path, RID) as router, world:
        doomed = ConsumerProcess(router.url, "work", credit=100)
        try:
            world.run_until(lambda: doomed.attached, timeout=10, what="consumer process")
            tx = world.connect(router.url).sender("work", resend=True)
            sent = send_bodies(world, tx, bodies(15))
            world.run_until(
                lambda: len(doomed.received) == 15,
                timeout=10,
                what="the consumer process to receive 15",
            )
            staying = world.connect(router.url).receiver("work")
            world.run_for(0.1)
            assert staying.messages == []
            assert not any(t.settled for t in sent)
            doomed.kill()
        finally:
            doomed.close()
        world.run_until(tx.all_settled, what="every message settled")
        assert len([t for t in tx.sent if t.state == RELEASED]) == 15
        assert {t.final.state for t in sent} == {ACCEPTED}
        assert sorted(staying.bodies) == sorted(bodies(15))


def test_sender_leaving_does_not_disturb_the_consumer(tmp_path: Path, world: World) -> None:
    with RouterProcess(tmp_path, RID) as router, world:
        rx = world.connect(router.url).receiver("q", policy=None)
        client = world.connect(router.url)
        tx = client.sender("q")
        send_bodies(world, tx, bodies(5))
        world.run_until(lambda: len(rx.messages) == 5, what="5 deliveries")
        client.close()
        rx.settle_all(ACCEPTED)  # outcomes for a sender that is gone: dropped quietly
        tx2 = world.connect(router.url).sender("q")
        send_bodies(world, tx2, ["after"])
        world.run_until(lambda: len(rx.messages) == 6, what="the next message")
        rx.settle_all(ACCEPTED)
        world.run_until(tx2.all_settled, what="outcome")
        assert tx2.sent[0].state == ACCEPTED
        assert router.alive()


# ----- undeliverable: hold, redirect, drop -----------------------------------------------------


def test_hold_keeps_the_message_for_a_consumer_that_arrives_later(
    tmp_path: Path, world: World
) -> None:
    addresses = [{"prefix": "held", "undeliverable": "hold", "holdTimeoutSeconds": 10}]
    with RouterProcess(tmp_path, RID, addresses=addresses) as router, world:
        tx = world.connect(router.url).sender(None)
        (t,) = send_bodies(world, tx, ["wait for me"], address="held.q")
        world.run_for(0.4)
        assert not t.settled
        rx = world.connect(router.url).receiver("held.q")
        world.run_until(lambda: t.settled, what="the held message's outcome")
        assert rx.bodies == ["wait for me"]
        assert t.state == ACCEPTED


def test_hold_releases_after_the_timeout(tmp_path: Path, world: World) -> None:
    addresses = [{"prefix": "held", "undeliverable": "hold", "holdTimeoutSeconds": 0.6}]
    with RouterProcess(tmp_path, RID, addresses=addresses) as router, world:
        tx = world.connect(router.url).sender(None)
        started = time.monotonic()
        (t,) = send_bodies(world, tx, ["nobody comes"], address="held.q")
        world.run_until(lambda: t.settled, what="release after the hold timeout")
        assert t.state == RELEASED
        assert time.monotonic() - started >= 0.5
        rx = world.connect(router.url).receiver("held.q")
        world.run_for(0.2)
        assert rx.messages == []


def test_redirect_sends_to_the_fallback_address(tmp_path: Path, world: World) -> None:
    addresses = [{"prefix": "primary", "undeliverable": "redirect", "fallbackAddress": "backup"}]
    with RouterProcess(tmp_path, RID, addresses=addresses) as router, world:
        backup = world.connect(router.url).receiver("backup")
        tx = world.connect(router.url).sender("primary")
        sent = send_bodies(world, tx, bodies(3))
        world.run_until(tx.all_settled, what="outcomes")
        assert backup.bodies == bodies(3)
        assert {t.state for t in sent} == {ACCEPTED}
        # A consumer of the primary address takes precedence once it is there.
        primary = world.connect(router.url).receiver("primary")
        tx.send(Message(body="direct"))
        world.run_until(tx.all_settled, what="outcome")
        assert primary.bodies == ["direct"]
        assert backup.bodies == bodies(3)
        row = Management(world.connect(router.url)).router()
        assert row["deliveriesRedirectedToFallback"] == 3
        # With neither consumer there, the message is released, not lost.
        primary.close()
        backup.close()
        anonymous = world.connect(router.url).sender(None)
        (t,) = send_bodies(world, anonymous, ["stranded"], address="primary")
        world.run_until(lambda: t.settled, what="outcome")
        assert t.state == RELEASED


def test_drop_releases_unsettled_when_nobody_consumes(tmp_path: Path, world: World) -> None:
    with RouterProcess(tmp_path, RID) as router, world:
        tx = world.connect(router.url).sender(None)
        sent = send_bodies(world, tx, bodies(3), address="void")
        world.run_until(tx.all_settled, what="outcomes")
        assert {t.state for t in sent} == {RELEASED}


# ----- shutdown --------------------------------------------------------------------------------


@pytest.mark.parametrize("held_by", ["hold", "consumer", "queued"])
def test_sigterm_releases_unsettled_deliveries_and_exits_0(
    tmp_path: Path, world: World, held_by: str
) -> None:
    """A delivery held for a consumer that never came is released as the drain starts; one a
    consumer never settles, or never gives credit for, when the drain times out (the drain
    itself: tests/test_drain.py)."""
    drain = 0.5
    addresses = [{"prefix": "held", "undeliverable": "hold", "holdTimeoutSeconds": 60}]
    router = RouterProcess(
        tmp_path, RID, addresses=addresses, router={"drainTimeoutSeconds": drain}
    ).start()
    try:
        if held_by == "consumer":
            rx = world.connect(router.url).receiver("held.q", policy=None)
        elif held_by == "queued":  # waits in the router for credit the consumer never gives
            world.connect(router.url).receiver("held.q", credit=0)
        tx = world.connect(router.url).sender(None)
        (t,) = send_bodies(world, tx, ["in flight"], address="held.q")
        if held_by == "consumer":
            world.run_until(lambda: len(rx.messages) == 1, what="delivery to the consumer")
        else:
            world.run_for(0.3)
        assert not t.settled
        assert router.proc is not None
        started = time.monotonic()
        router.proc.send_signal(signal.SIGTERM)
        world.run_until(lambda: t.settled, what="release on shutdown")
        released = time.monotonic() - started
        assert t.state == RELEASED
        if held_by == "hold":
            assert released < drain
        else:
            assert released >= drain - 0.05
        # The clients answer the router's close, so it need not wait out its grace period.
        world.run_until(lambda: router.proc.poll() is not None, what="the router to exit")
        assert router.proc.returncode == 0
        assert time.monotonic() - started < drain + 1.5
        assert all(c.conn.state & Endpoint.REMOTE_CLOSED for c in world.clients)
    finally:
        router.stop(signal.SIGKILL)


# ----- more endpoint and credit cases ----------------------------------------------------------


def test_deliveries_queued_for_a_departing_consumer_go_to_another(
    tmp_path: Path, world: World
) -> None:
    """A consumer that granted no credit leaves: what waited for it is routed again, once."""
    with RouterProcess(tmp_path, RID) as router, world:
        idle = world.connect(router.url).receiver("work", credit=0)
        busy = world.connect(router.url).receiver("work", policy=None)
        tx = world.connect(router.url).sender("work")
        sent = send_bodies(world, tx, bodies(10))
        world.run_until(lambda: len(busy.messages) == 5, what="half the messages")
        world.run_for(0.1)
        assert len(busy.messages) == 5  # balanced: the other half waits for `idle`'s credit
        idle.close()
        world.run_until(lambda: len(busy.messages) == 10, what="the rest, routed again")
        busy.settle_all(ACCEPTED)
        world.run_until(tx.all_settled, what="outcomes")
        assert {t.state for t in sent} == {ACCEPTED}
        assert sorted(busy.bodies) == sorted(bodies(10))
        assert idle.messages == []


def test_multicast_consumer_leaving_does_not_fail_the_delivery(
    tmp_path: Path, world: World
) -> None:
    addresses = [{"prefix": "mc", "distribution": "multicast"}]
    with RouterProcess(tmp_path, RID, addresses=addresses) as router, world:
        keeper = world.connect(router.url).receiver("mc.x", policy=None)
        leaver = world.connect(router.url).receiver("mc.x", policy=None)
        tx = world.connect(router.url).sender("mc.x")
        sent = send_bodies(world, tx, bodies(4))
        world.run_until(
            lambda: len(keeper.messages) == len(leaver.messages) == 4, what="4 copies each"
        )
        leaver.close()
        world.run_for(0.1)
        assert not any(t.settled for t in sent)  # keeper's copies are still outstanding
        keeper.settle_all(ACCEPTED)
        world.run_until(tx.all_settled, what="outcomes")
        assert {t.state for t in sent} == {ACCEPTED}


def test_drain_with_nothing_to_send_is_answered(tmp_path: Path, world: World) -> None:
    with RouterProcess(tmp_path, RID) as router, world:
        rx = world.connect(router.url).receiver("empty", credit=0)
        rx.link.drain(10)
        world.run_until(
            lambda: rx.link.credit == 0 and not rx.link.draining(),
            what="the router to drain the credit",
        )
        # Draining again with messages waiting delivers them and then drains the rest.
        tx = world.connect(router.url).sender("empty")
        send_bodies(world, tx, bodies(3))
        world.run_for(0.1)
        assert rx.messages == []
        rx.link.drain(10)
        world.run_until(
            lambda: len(rx.messages) == 3 and rx.link.credit == 0 and not rx.link.draining(),
            what="3 messages then drained",
        )
        world.run_until(tx.all_settled, what="outcomes")
        assert {t.state for t in tx.sent} == {ACCEPTED}


@pytest.mark.parametrize("presettled", [False, True])
def test_large_messages_cross_intact(tmp_path: Path, world: World, presettled: bool) -> None:
    """Bodies far above the frame size arrive byte for byte, in order."""
    big = [bytes([i]) * (300_000 + i) for i in range(3)]
    with RouterProcess(tmp_path, RID) as router, world:
        rx = world.connect(router.url).receiver("big")
        tx = world.connect(router.url).sender("big", presettled=presettled)
        world.run_until(lambda: tx.credit > 0, what="credit")
        sent = tx.send_all(Message(body=b) for b in big)
        world.run_until(lambda: len(rx.messages) == 3, timeout=10, what="3 large messages")
        assert rx.bodies == big
        if not presettled:
            world.run_until(tx.all_settled, what="outcomes")
            assert {t.state for t in sent} == {ACCEPTED}


def test_at_most_once_consumer_gets_settled_deliveries(tmp_path: Path, world: World) -> None:
    """A consumer attaching with snd-settle-mode settled gets pre-settled deliveries, and the
    sender's unsettled deliveries are accepted as they are sent on."""
    with RouterProcess(tmp_path, RID) as router, world:
        rx = world.connect(router.url).receiver("amo", policy=None, at_most_once=True)
        tx = world.connect(router.url).sender("amo")
        sent = send_bodies(world, tx, bodies(3))
        world.run_until(lambda: len(rx.messages) == 3 and tx.all_settled(), what="outcomes")
        assert all(d.settled for d in rx.deliveries)
        assert {t.state for t in sent} == {ACCEPTED}


def test_held_messages_keep_their_order(tmp_path: Path, world: World) -> None:
    addresses = [{"prefix": "held", "undeliverable": "hold", "holdTimeoutSeconds": 10}]
    with RouterProcess(tmp_path, RID, addresses=addresses) as router, world:
        tx = world.connect(router.url).sender(None)
        sent = send_bodies(world, tx, bodies(5), address="held.order")
        world.run_for(0.2)
        rx = world.connect(router.url).receiver("held.order")
        world.run_until(tx.all_settled, what="outcomes")
        assert rx.bodies == bodies(5)
        assert {t.state for t in sent} == {ACCEPTED}


def test_many_messages_to_two_consumers_exactly_once(tmp_path: Path, world: World) -> None:
    with RouterProcess(tmp_path, RID) as router, world:
        one = world.connect(router.url).receiver("bulk")
        two = world.connect(router.url).receiver("bulk", credit=1)  # one message at a time
        tx = world.connect(router.url).sender("bulk")
        sent = send_bodies(world, tx, bodies(1000))
        world.run_until(tx.all_settled, timeout=20, what="1000 outcomes")
        assert {t.state for t in sent} == {ACCEPTED}
        assert sorted(one.bodies + two.bodies) == sorted(bodies(1000))
        assert two.messages, "the single-credit consumer should get some"
        # Each consumer sees its share in the order sent.
        order = {b: i for i, b in enumerate(bodies(1000))}
        for rx in (one, two):
            assert [order[b] for b in rx.bodies] == sorted(order[b] for b in rx.bodies)


def test_sender_dropped_while_its_messages_wait_for_credit(tmp_path: Path, world: World) -> None:
    with RouterProcess(tmp_path, RID) as router, world:
        rx = world.connect(router.url).receiver("waiting", credit=0)
        client = world.connect(router.url)
        tx = client.sender("waiting")
        send_bodies(world, tx, bodies(5))
        world.run_for(0.2)
        client.drop()
        world.run_for(0.1)
        rx.flow(10)
        # The messages the router took are still delivered; their outcomes go nowhere.
        world.run_until(lambda: len(rx.messages) == 5, what="5 messages")
        assert rx.bodies == bodies(5)
        mgmt = Management(world.connect(router.url))
        world.run_until(
            lambda: all(r["unsettledCount"] == 0 for r in mgmt.query("router.link")),
            what="nothing left unsettled",
        )
        assert router.alive()
