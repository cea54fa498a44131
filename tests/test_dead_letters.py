"""Dead letters reach their dead letter address, each exactly once, wherever it is hosted.

A dead letter for a node on another router waits in an outbox on the queue's host
(router/nodes/moving.py) until that router takes it; this holds while earlier ones are still
on their way, and across `kill -9` of either router.

The network: interiors A and B (B dials A), each with a store; the queue `jobs.work` lives on
B, its dead letter address on A (`dead.jobs`) or on B itself (`jobs.dead`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from clients import ACCEPTED, REJECTED, World, settle
from proton import Message
from test_edge import started
from test_nodes import consumer, receive, send
from test_nodes_network import stored_pair, wait_for_router

ELSEWHERE = [
    {"prefix": "jobs", "node": {"type": "queue", "hosts": ["B"], "deadLetterAddress": "dead.jobs"}},
    {"prefix": "dead", "node": {"type": "queue", "hosts": ["A"]}},
]
TOTAL, EVERY = 400, 20  # every 20th rejected: 20 dead letters among 400


def rejecting(receiver, message, delivery) -> None:  # type: ignore[no-untyped-def]
    settle(delivery, REJECTED if message.body % EVERY == 0 else ACCEPTED)


@pytest.fixture
def world():  # type: ignore[no-untyped-def]
    with World() as w:
        yield w


def test_dead_letters_produced_while_others_move_all_arrive_once(
    world: World, tmp_path: Path
) -> None:
    """A consumer rejects every 20th message as they come: each dead letter goes to the outbox
    while earlier ones are on their way to A, and every one reaches A, once."""
    a, b = stored_pair(tmp_path, ELSEWHERE)
    with started(a, b):
        wait_for_router(world, b, "A")
        on_b, on_a = world.connect(b.url), world.connect(a.url)
        tracked = send(on_b, "jobs.work", [Message(body=i, durable=True) for i in range(TOTAL)])
        assert {t.state for t in tracked} == {ACCEPTED}
        worker = consumer(on_a, "jobs.work", credit=TOTAL, policy=None)
        world.run_until(lambda: len(worker.messages) == TOTAL, what="every job")
        for message, delivery in zip(worker.messages, worker.deliveries, strict=True):
            settle(delivery, REJECTED if message.body % EVERY == 0 else ACCEPTED)
            world.run_for(0.01)
        expected = list(range(0, TOTAL, EVERY))
        dead = receive(on_a, "dead.jobs", len(expected))
        world.run_for(1.0)
        assert sorted(dead.bodies) == expected
        on_a.close()
        on_b.close()
