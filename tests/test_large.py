"""Big messages and a slow consumer: the router streams what it cannot hold and holds little.

Large bodies cross the router in hundreds of frames and must arrive bit for bit (compared by
hash). A consumer that stops taking messages must push back on the sender through credit, so
the router's memory stays bounded however hard the sender pushes, and nothing sent is lost once
the consumer resumes.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest
from clients import ACCEPTED, Management, World, run_while_moving
from harness import RouterProcess
from proton import Message

pytestmark = pytest.mark.network

MiB = 1024 * 1024


def body_of(size: int, seed: int) -> bytes:
    """Incompressible, reproducible bytes: a corrupted or reordered frame cannot go unnoticed."""
    block = hashlib.sha256(f"seed-{seed}".encode()).digest() * 128  # 4 KiB
    chunk = os.urandom(1024)  # plus some randomness so equal sizes never share a hash
    data = (block * (size // len(block) + 1))[: size - len(chunk)] + chunk
    assert len(data) == size
    return data


@pytest.mark.parametrize(
    ("size", "max_frame", "client_max_frame"),
    [
        pytest.param(1 * MiB, None, None, id="1MiB"),
        pytest.param(10 * MiB, None, None, id="10MiB"),
        pytest.param(10 * MiB, 16384, 16384, id="10MiB-16KiB-frames"),
        pytest.param(10 * MiB, 4 * MiB, None, id="10MiB-4MiB-frames"),
    ],
)
def test_large_body_arrives_intact(
    tmp_path: Path, world: World, size: int, max_frame: int | None, client_max_frame: int | None
) -> None:
    listener = {} if max_frame is None else {"maxFrameSize": max_frame}
    client_options = {} if client_max_frame is None else {"max_frame_size": client_max_frame}
    bodies = [body_of(size, 1), body_of(size // 2, 2)]
    with RouterProcess(tmp_path, listeners=[listener]) as router:
        rx_client = world.connect(router.url, **client_options)
        receiver = rx_client.receiver("large", credit=10)
        tx_client = world.connect(router.url, **client_options)
        sender = tx_client.sender("large")
        world.run_until(lambda: sender.credit > 0, what="credit")

        tracked = sender.send_all(
            Message(body=b, properties={"n": i}) for i, b in enumerate(bodies)
        )
        world.run_until(
            lambda: len(receiver.messages) == len(bodies), timeout=30, what="the large messages"
        )
        world.run_until(sender.all_settled, timeout=10, what="outcomes")
        frames_out = tx_client.conn.transport.frames_output
        frames_in = rx_client.conn.transport.frames_input
        world.close()
        assert router.alive()

    assert [t.state for t in tracked] == [ACCEPTED] * len(bodies)
    got = [
        (m.properties["n"], len(m.body), hashlib.sha256(m.body).hexdigest())
        for m in receiver.messages
    ]
    assert got == [(i, len(b), hashlib.sha256(b).hexdigest()) for i, b in enumerate(bodies)]
    if max_frame == client_max_frame == 16384:
        # Both hops really were cut into frames of at most 16 KiB.
        least = sum(len(b) for b in bodies) // 16384
        assert frames_out >= least, frames_out
        assert frames_in >= least, frames_in


@pytest.mark.parametrize("how", ["abort", "disconnect"])
def test_large_delivery_cut_short_is_dropped_and_others_flow(
    tmp_path: Path, world: World, how: str
) -> None:
    """A sender aborts a large delivery half way, or its connection drops half way: the consumer
    never sees a partial message and the router carries on."""
    with RouterProcess(tmp_path) as router:
        receiver = world.connect(router.url).receiver("cut", credit=10)
        client = world.connect(router.url)
        sender = client.sender("cut")
        world.run_until(lambda: sender.credit > 0, what="credit")
        data = Message(body=body_of(4 * MiB, 3)).encode()
        partial = sender.link.delivery("partial")
        sender.link.send(data[: 2 * MiB])  # not advanced: the delivery stays open
        world.run_until(
            lambda: client.conn.transport.frames_output > 100, what="the first half to go out"
        )
        world.run_for(0.2)
        if how == "abort":
            partial.abort()
        else:
            client.drop()
            client = world.connect(router.url)
            sender = client.sender("cut")
        world.run_until(lambda: sender.credit > 0, what="credit after the cut")
        tracked = sender.send(Message(body=b"after the cut"))
        world.run_until(lambda: tracked.settled, what="the next message's outcome")
        world.run_for(0.2)
        world.close()
        assert router.alive()

    assert tracked.state == ACCEPTED
    assert receiver.bodies == [b"after the cut"]


LINK_CAPACITY = 250
CONSUMER_CREDIT = 10
TOTAL = 100_000
BODY_SIZE = 4096
PUSH_SECONDS = 4.0
SETTLE_SECONDS = 0.5
BURST = 8
RSS_HEADROOM = 50 * MiB


def numbered(i: int, to: str | None) -> Message:
    return Message(address=to, body=f"{i:08d}".encode() + b"x" * (BODY_SIZE - 8))


@pytest.mark.parametrize(
    ("presettled", "anonymous"),
    [(False, False), (True, False), (False, True)],
    ids=["unsettled", "presettled", "anonymous-unsettled"],
)
def test_stalled_consumer_pushes_back_and_memory_stays_bounded(
    tmp_path: Path, world: World, presettled: bool, anonymous: bool
) -> None:
    address = "stalled"
    to = address if anonymous else None
    with RouterProcess(tmp_path, listeners=[{"linkCapacity": LINK_CAPACITY}]) as router:
        consumer = world.connect(router.url).receiver(address, credit=0, policy=None)
        consumer.flow(CONSUMER_CREDIT)  # and then it neither settles nor grants more
        producer = world.connect(router.url).sender(
            None if anonymous else address, presettled=presettled
        )
        world.run_until(lambda: producer.credit > 0, what="credit for the producer")
        idle_rss = peak_rss = router.rss_bytes()

        # The producer sends whenever it has credit (in bursts, so its I/O keeps up), for a
        # while, aiming at TOTAL messages; then its last bytes get time to reach the router.
        start = time.monotonic()
        next_sample = 0.0
        while (now := time.monotonic()) < start + PUSH_SECONDS + SETTLE_SECONDS:
            burst = 0
            while (
                now < start + PUSH_SECONDS
                and producer.credit > 0
                and len(producer.sent) < TOTAL
                and burst < BURST
            ):
                producer.send(numbered(len(producer.sent), to))
                burst += 1
            world.step()
            # proton's reactor does socket I/O only in a step that starts with no new events,
            # and sending makes events: without this second step nothing would be written.
            world.step()
            if now >= next_sample:
                peak_rss = max(peak_rss, router.rss_bytes())
                next_sample = now + 0.05
        peak_rss = max(peak_rss, router.rss_bytes())
        sent = len(producer.sent)
        stalled_received = len(consumer.messages)
        stalled_settled = sum(1 for t in producer.sent if t.settled)

        # The consumer resumes: settles what it holds, takes the rest.
        consumer.policy = "accept"
        consumer.settle_all(ACCEPTED)
        consumer.flow(sent)
        world.run_until(lambda: len(consumer.messages) >= sent, timeout=15, what="the backlog")
        if not presettled:
            world.run_until(producer.all_settled, timeout=10, what="the producer's outcomes")
        world.run_for(0.2)  # anything extra would show up now
        world.close()
        assert router.alive()

    # Back-pressure: the router let through its link capacity plus the consumer's credit.
    assert stalled_received == CONSUMER_CREDIT
    assert LINK_CAPACITY <= sent <= LINK_CAPACITY + CONSUMER_CREDIT, sent
    if not presettled:
        assert stalled_settled == 0  # the consumer settled nothing, so neither did the router
    assert peak_rss - idle_rss < RSS_HEADROOM, (idle_rss, peak_rss)
    # Everything sent arrived, once and in order.
    assert [m.body[:8] for m in consumer.messages] == [f"{i:08d}".encode() for i in range(sent)]
    if not presettled:
        assert [t.state for t in producer.sent] == [ACCEPTED] * sent


def test_consumer_that_stops_reading_its_socket_does_not_grow_the_router(
    tmp_path: Path, world: World
) -> None:
    """A consumer grants plenty of credit, then its process stops reading the socket (its
    event loop is never run again), as a hung or overloaded client would."""
    address = "slow-reader"
    stuck = World()  # the consumer's own loop, stepped only to attach and at the end
    try:
        with RouterProcess(tmp_path, listeners=[{"linkCapacity": LINK_CAPACITY}]) as router:
            consumer = stuck.connect(router.url).receiver(address, credit=0, policy="accept")
            consumer.flow(TOTAL)
            client = world.connect(router.url)
            # The credit has reached the router; from here on nothing is read.
            links = Management(client)
            stuck.run_until(
                lambda: links.consumer_credit(address) == TOTAL, what="the consumer's credit"
            )
            producer = client.sender(address, presettled=True)
            world.run_until(lambda: producer.credit > 0, what="credit for the producer")
            idle_rss = peak_rss = router.rss_bytes()

            deadline = time.monotonic() + PUSH_SECONDS
            while time.monotonic() < deadline and peak_rss - idle_rss < RSS_HEADROOM:
                for _ in range(BURST):
                    if producer.credit > 0 and len(producer.sent) < TOTAL:
                        producer.send(numbered(len(producer.sent), None))
                world.step()
                world.step()  # see the stalled-consumer test: lets the reactor write
                peak_rss = max(peak_rss, router.rss_bytes())
            sent = len(producer.sent)
            assert peak_rss - idle_rss < RSS_HEADROOM, (sent, idle_rss, peak_rss)

            # The consumer's process recovers: every message sent reaches it, in order.
            run_while_moving(
                stuck.step,
                lambda: len(consumer.messages) >= sent,
                lambda: len(consumer.messages),
                "the messages once the consumer reads again",
            )
            assert [m.body[:8] for m in consumer.messages] == [
                f"{i:08d}".encode() for i in range(sent)
            ]
            world.close()
            stuck.close()
            assert router.alive()
    finally:
        stuck.close()


WHOLE_SMALL = 16 * MiB
WHOLE_LARGE = 64 * MiB
# Four times the bytes may take at most this many times the sender's CPU: linear is 4, and the
# re-reading of the whole message each time the router reopened the session window made it
# about 10.
WHOLE_CPU_RATIO = 6.0
WHOLE_RSS_HEADROOM = 64 * MiB
WHOLE_TIMEOUT = 120.0


def test_message_sent_whole_costs_its_sender_linear_time(tmp_path: Path, world: World) -> None:
    """A client puts each message on its link whole, as Proton, JMS and rhea applications do,
    and its consumer has a window of one: 64 MiB must cost the sender about four times what
    16 MiB does, and the router must not hold the message.

    Timed in CPU seconds of this process (the sender's and receiver's Proton), not wall time,
    so that a loaded machine does not decide the ratio."""
    with RouterProcess(tmp_path) as router:
        receiver = world.connect(router.url).receiver("whole", credit=1)
        sender = world.connect(router.url).sender("whole")
        world.run_until(lambda: sender.credit > 0, what="credit")
        idle_rss = peak_rss = router.rss_bytes()
        cpu: dict[int, float] = {}
        for i, size in enumerate((WHOLE_SMALL, WHOLE_LARGE)):
            body = body_of(size, 10 + i)
            start = time.process_time()
            tracked = sender.send(Message(body=body))
            deadline = time.monotonic() + WHOLE_TIMEOUT
            next_sample = 0.0
            while not tracked.settled:
                assert time.monotonic() < deadline, f"{size:,} bytes not through in time"
                world.step()
                if time.monotonic() >= next_sample:
                    peak_rss = max(peak_rss, router.rss_bytes())
                    next_sample = time.monotonic() + 0.05
            cpu[size] = time.process_time() - start
            assert tracked.state == ACCEPTED
            got = receiver.messages[-1].body
            assert (len(got), hashlib.sha256(got).digest()) == (size, hashlib.sha256(body).digest())
            del body, got
            receiver.messages.clear()
            receiver.flow(1)
        world.close()
        assert router.alive()

    ratio = cpu[WHOLE_LARGE] / cpu[WHOLE_SMALL]
    assert ratio <= WHOLE_CPU_RATIO, cpu
    assert peak_rss - idle_rss < WHOLE_RSS_HEADROOM, (idle_rss, peak_rss)
