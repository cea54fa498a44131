"""Dead letters reach their dead letter address, each exactly once, wherever it is hosted.

A dead letter for a node on another router waits in an outbox on the queue's host
(router/nodes/moving.py, router/nodes/outbox.py) until that router takes it; this holds while
earlier ones are still on their way, and across `kill -9` of either router. Management lists
the outbox (`/outbox/<node>`, type `outbox`) while it holds anything.

The network: interiors A and B (B dials A), each with a store; the queue `jobs.work` lives on
B, its dead letter address on A (`dead.jobs`) or on B itself (`jobs.dead`).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from clients import ACCEPTED, REJECTED, Client, World, settle
from harness import RouterProcess
from proton import Message
from router_operator.local import backend as local
from test_edge import started
from test_nodes import consumer, send
from test_nodes_network import depth, rows, stored_pair, wait_for_router

pytestmark = pytest.mark.network


def addresses(dead_letters: str) -> list[dict[str, object]]:
    jobs = {"type": "queue", "hosts": ["B"], "deadLetterAddress": dead_letters}
    return [
        {"prefix": "jobs", "node": jobs},
        {"prefix": "dead", "node": {"type": "queue", "hosts": ["A"]}},
    ]


ELSEWHERE = "dead.jobs"  # on A
HERE = "jobs.dead"  # on B, with the queue
OUTBOX = f"/outbox/{ELSEWHERE}"


@pytest.fixture
def world() -> Iterator[World]:
    with World() as w:
        yield w


def jobs(client: Client, count: int, size: int = 0) -> None:
    pad = "x" * size
    messages = [Message(body=f"{i:05d}{pad}", durable=True) for i in range(count)]
    assert {t.state for t in send(client, "jobs.work", messages)} == {ACCEPTED}


def reject_one_by_one(world: World, client: Client, total: int, every: int) -> list[str]:
    """Takes the jobs, then settles them one at a time, rejecting every `every`th: each dead
    letter comes while the earlier ones are still on their way. The rejected ones' bodies."""
    worker = consumer(client, "jobs.work", credit=total, policy=None)
    world.run_until(lambda: len(worker.messages) == total, what="every job")
    rejected = []
    for i, (message, delivery) in enumerate(zip(worker.messages, worker.deliveries, strict=True)):
        if i % every == 0:
            rejected.append(message.body)
            settle(delivery, REJECTED)
        else:
            settle(delivery, ACCEPTED)
        world.run_for(0.01)
    return rejected


def dead_letters(world: World, router: RouterProcess, address: str, count: int) -> list[str]:
    """The dead letters a consumer gets, waiting a while for any beyond `count`."""
    c = world.connect(router.url)
    receiver = consumer(c, address, credit=count + 10)
    world.run_until(
        lambda: len(receiver.messages) >= count, timeout=30.0, what=f"{count} dead letters"
    )
    world.run_for(1.0)  # any more would come now
    bodies = [str(m.body) for m in receiver.messages]
    c.close()
    return bodies


def test_dead_letters_produced_while_others_move_all_arrive_once(
    world: World, tmp_path: Path
) -> None:
    """A consumer rejects every 20th of 400 jobs as they come: each dead letter goes into the
    outbox while earlier ones are on their way to A (they used to wait there for credit that
    never came), and every one reaches A, once."""
    a, b = stored_pair(tmp_path, addresses(ELSEWHERE))
    with started(a, b):
        wait_for_router(world, b, "A")
        on_b, on_a = world.connect(b.url), world.connect(a.url)
        jobs(on_b, 400)
        rejected = reject_one_by_one(world, on_a, 400, 20)
        assert len(rejected) == 20
        assert sorted(dead_letters(world, a, ELSEWHERE, 20)) == sorted(rejected)
        world.run_until(lambda: OUTBOX not in {r["name"] for r in rows(world, b)}, what="empty")
        on_a.close()
        on_b.close()


def test_dead_letters_to_a_queue_on_the_same_router_arrive_once(
    world: World, tmp_path: Path
) -> None:
    a, b = stored_pair(tmp_path, addresses(HERE))
    with started(a, b):
        wait_for_router(world, b, "A")
        on_b, on_a = world.connect(b.url), world.connect(a.url)
        jobs(on_b, 400)
        rejected = reject_one_by_one(world, on_a, 400, 20)
        assert sorted(dead_letters(world, a, HERE, 20)) == sorted(rejected)
        assert not [r for r in rows(world, b) if r["name"].startswith("/outbox/")]
        on_a.close()
        on_b.close()


def reject_all(world: World, router: RouterProcess, count: int) -> None:
    c = world.connect(router.url)
    worker = consumer(c, "jobs.work", credit=200, policy="reject")
    world.run_until(lambda: len(worker.messages) == count, timeout=30.0, what="every job")
    world.run_until(lambda: depth(world, router, "jobs.work") == 0, what="all rejected")
    c.close()


def outbox_depth(world: World, router: RouterProcess) -> int:
    return depth(world, router, OUTBOX)


def test_the_outbox_is_in_management_while_it_holds_anything(world: World, tmp_path: Path) -> None:
    """A is down: B keeps the dead letters for it in an outbox, listed with its depth, and
    kept across B's `kill -9`; once A is back they move, and the outbox goes from the list."""
    a, b = stored_pair(tmp_path, addresses(ELSEWHERE))
    with started(a, b):
        wait_for_router(world, b, "A")
        a.stop()
        on_b = world.connect(b.url)
        jobs(on_b, 30)
        on_b.close()
        reject_all(world, b, 30)
        # What `routernet status` asks each router, and lists.
        asked = local.management_query(
            f"{b.host}:{b.port}", {local.NODE_ENTITY: local.HOSTED_NODE_ATTRIBUTES}
        )
        listed = [(n["name"], n["type"], n["depth"]) for n in local.hosted_nodes("B", asked)]
        assert (OUTBOX, "outbox", 30) in listed
        b.stop(signal.SIGKILL)
        b.start()
        assert outbox_depth(world, b) == 30
        a.start()
        bodies = dead_letters(world, a, ELSEWHERE, 30)
        assert sorted(bodies) == [f"{i:05d}" for i in range(30)]
        world.run_until(lambda: outbox_depth(world, b) == 0, what="the outbox emptied")
        assert OUTBOX not in {r["name"] for r in rows(world, b)}


DEAD = 1500
SIZE = 16 * 1024  # large enough that moving them takes a while


@pytest.mark.parametrize("killed", ["B", "A"], ids=["outbox-host", "dead-letter-host"])
def test_kill_9_of_either_router_while_dead_letters_move_keeps_each_once(
    world: World, tmp_path: Path, killed: str
) -> None:
    """1,500 dead letters moving from B's outbox to A; the outbox's host (B) or the dead letter
    queue's (A) is killed with SIGKILL midway and restarted: each reaches A exactly once,
    those A had taken before too (a transfer whose outcome the kill lost is sent again, and A
    knows it has it)."""
    a, b = stored_pair(tmp_path, addresses(ELSEWHERE))
    with started(a, b):
        wait_for_router(world, b, "A")
        on_b = world.connect(b.url)
        jobs(on_b, DEAD, SIZE)
        on_b.close()
        reject_all(world, b, DEAD)
        world.run_until(lambda: depth(world, a, ELSEWHERE) > 0, what="some moved")
        # A paused at once, so that what B has not moved yet stays in its outbox while the test
        # looks (on a loaded machine the rest moved before B answered).
        assert a.proc is not None
        a.proc.send_signal(signal.SIGSTOP)
        left = outbox_depth(world, b)
        victim = b if killed == "B" else a
        victim.stop(signal.SIGKILL)
        if victim is b:
            a.proc.send_signal(signal.SIGCONT)
        assert 0 < left < DEAD  # killed midway
        victim.start()
        wait_for_router(world, b, "A")
        bodies = dead_letters(world, a, ELSEWHERE, DEAD)
        assert len(bodies) == DEAD
        assert sorted(b[:5] for b in bodies) == [f"{i:05d}" for i in range(DEAD)]
        world.run_until(lambda: outbox_depth(world, b) == 0, what="the outbox emptied")


def test_a_draining_host_waits_for_its_outbox(world: World, tmp_path: Path) -> None:
    """B holds dead letters for A, which is down: B's drain counts the outbox, waits for it
    (to its timeout), and keeps it in its store for its next start."""
    a, b = stored_pair(tmp_path, addresses(ELSEWHERE))
    with started(a, b):
        wait_for_router(world, b, "A")
        a.stop()
        on_b = world.connect(b.url)
        jobs(on_b, 5)
        on_b.close()
        reject_all(world, b, 5)
        b.stop()
        assert re.search(r"event=router\.draining .*moving_nodes=1", b.log())
        assert re.search(r"event=router\.drained .*reason=timeout .*moving_nodes=1", b.log())
        b.start()
        a.start()
        assert sorted(dead_letters(world, a, ELSEWHERE, 5)) == [f"{i:05d}" for i in range(5)]


def test_an_outbox_whose_node_comes_here_empties_into_it(world: World, tmp_path: Path) -> None:
    """The dead letter queue's hosts change to B while B holds dead letters for it: they go
    into the node on B, each once."""
    a, b = stored_pair(tmp_path, addresses(ELSEWHERE))
    with started(a, b):
        wait_for_router(world, b, "A")
        a.stop()
        on_b = world.connect(b.url)
        jobs(on_b, 5)
        on_b.close()
        reject_all(world, b, 5)
        assert outbox_depth(world, b) == 5
        for router in (a, b):
            router.config["addresses"][1]["node"]["hosts"] = ["B"]
            router.rewrite_config()
        world.run_until(lambda: depth(world, b, ELSEWHERE) == 5, what="into the node on B")
        assert outbox_depth(world, b) == 0
        assert sorted(dead_letters(world, b, ELSEWHERE, 5)) == [f"{i:05d}" for i in range(5)]
