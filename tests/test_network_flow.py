"""Flow control across an inter-router connection: a stalled consumer must not stall the other
addresses sharing that connection, and router memory stays bounded while it is stalled."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from clients import Management, Receiver, Sender, World
from harness import RouterProcess
from proton import Message

pytestmark = pytest.mark.network


@contextlib.contextmanager
def pair(tmp_path: Path) -> Iterator[tuple[RouterProcess, RouterProcess]]:
    a = RouterProcess(
        tmp_path, "A", listeners=[{}, {"role": "inter-router"}], extra_args=["--mode", "interior"]
    )
    a.start()
    try:
        b = RouterProcess(
            tmp_path,
            "B",
            extra_args=["--mode", "interior", "--connect", f"127.0.0.1:{a.listeners[1]['port']}"],
        )
        b.start()
        try:
            yield a, b
        finally:
            b.stop()
    finally:
        a.stop()


def wait_remote(world: World, router: RouterProcess, key: str) -> None:
    client = world.connect(router.url)
    mgmt = Management(client)

    def known() -> bool:
        rows = mgmt.query("router.address", ["key", "remoteCount"])
        return any(r["key"] == key and r["remoteCount"] for r in rows)

    world.run_until(known, timeout=10, what=f"{key} known at {router.id}")
    client.close()


def test_stalled_consumer_does_not_stall_other_addresses(tmp_path: Path, world: World) -> None:
    with pair(tmp_path) as (a, b):
        cb = world.connect(b.url)
        stalled = Receiver(cb, "slow", credit=0, policy=None)  # no credit top-ups, no settling
        healthy = Receiver(cb, "fast")
        world.run_until(lambda: stalled.attached and healthy.attached)
        stalled.flow(10)
        wait_remote(world, a, "M0slow")
        wait_remote(world, a, "M0fast")
        ca = world.connect(a.url)
        flood = Sender(ca, "slow")
        other = Sender(ca, "fast")
        world.run_until(lambda: flood.credit > 0 and other.credit > 0)
        sent = 0
        for _ in range(200):  # keep the slow address's sender saturated for a while
            while flood.credit > 0 and sent < 3000:
                flood.send(Message(body=sent))
                sent += 1
            world.step()
        other.send_all(Message(body=i) for i in range(100))
        world.run_until(
            lambda: len(healthy.messages) == 100 and other.all_settled(),
            timeout=10,
            what="the other address keeps flowing",
        )
        assert healthy.bodies == list(range(100))
        assert {t.outcome for t in other.sent} == {"accepted"}
        # The stalled consumer took its 10; the rest waited at B or came back released: none is
        # accepted, none lost, and neither router grew without bound.
        assert len(stalled.messages) == 10
        assert {t.outcome for t in flood.sent} <= {None, "released"}
        assert a.rss_bytes() < 200 * 1024 * 1024 and b.rss_bytes() < 200 * 1024 * 1024
