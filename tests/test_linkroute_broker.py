"""Link routes to a real broker (RabbitMQ's AMQP 1.0 plugin, see tests/broker.py): the router
dials it on a route-container connector, and clients reach its queues through the router."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from broker import Broker
from clients import Management, World
from harness import RouterProcess
from proton import Message
from proton.utils import BlockingConnection


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    with Broker(tmp_path / "broker", host="127.0.0.9") as b:
        yield b


def routed_to(broker: Broker, tmp_path: Path) -> RouterProcess:
    """A router dialling the broker on a route-container connector, `rabbit/...` routed to
    its queues in both directions (the prefix deleted on the way)."""
    routes = [
        {"prefix": "rabbit", "direction": d, "connection": "rabbit", "delExternalPrefix": "rabbit/"}
        for d in ("in", "out")
    ]
    connector = {"name": "rabbit", "host": broker.host, "port": broker.port}
    return RouterProcess(
        tmp_path / "router",
        sections={"connectors": [{**connector, "role": "route-container"}], "linkRoutes": routes},
    )


def wait_for_routes(world: World, router: RouterProcess) -> None:
    """Until the router has the broker connection and its link routes are active."""
    mgmt = Management(world.connect(router.url))
    world.run_until(
        lambda: {r["operStatus"] for r in mgmt.query("router.config.linkRoute")} == {"active"},
        timeout=15,
        what="the broker connection",
    )


def test_messages_reach_a_broker_queue_and_come_back_through_the_router(
    tmp_path: Path, broker: Broker
) -> None:
    router = routed_to(broker, tmp_path)
    with router, World() as world:
        wait_for_routes(world, router)
        client = world.connect(router.url)
        sender = client.sender("rabbit/orders")
        assert sender.attached and not sender.closed
        world.run_until(lambda: sender.credit > 0, what="the broker's credit")
        sent = sender.send_all(Message(body=f"order-{i}", durable=True) for i in range(20))
        world.run_until(sender.all_settled, what="the broker's outcomes")
        assert {t.outcome for t in sent} == {"accepted"}

        # The broker holds them, in its queue named without the route's prefix.
        receiver = client.receiver("rabbit/orders", credit=5)
        world.run_until(lambda: len(receiver.messages) == 20, what="20 messages from the queue")
        assert receiver.bodies == [f"order-{i}" for i in range(20)]

        # The accepts went back to the broker: a direct consumer finds the queue empty.
        direct = world.connect(broker.url)
        leftover = direct.receiver("orders", credit=10)
        world.run_for(0.5)
        assert leftover.messages == []


def test_blocking_clients_attach_to_broker_queues_under_their_own_addresses(
    tmp_path: Path, broker: Broker
) -> None:
    """RabbitMQ answers an attach with its own name for the queue (`atm`): through the link
    route (delExternalPrefix `rabbit/`) and as `(its container id)/atm`, the client is given
    back the address it asked for, which proton.utils checks (LinkException otherwise)."""
    router = routed_to(broker, tmp_path)
    with router, World() as world:
        wait_for_routes(world, router)
        world.close()
        for address in ("rabbit/atm", f"({broker.container_id})/atm"):
            conn = BlockingConnection(router.url, timeout=10)
            try:
                sender = conn.create_sender(address)
                receiver = conn.create_receiver(address)
                assert sender.link.remote_target.address == address
                assert receiver.link.remote_source.address == address
                sender.send(Message(body=address, durable=True))
                assert receiver.receive(timeout=10).body == address
                receiver.accept()
            finally:
                conn.close()


def test_links_routed_after_the_broker_ended_the_routers_session_get_a_new_one(
    tmp_path: Path, broker: Broker
) -> None:
    """RabbitMQ ends the whole session for an address it does not take (a missing
    `/amq/queue/` queue), and the engine frees it: the links routed there next must go on a
    new session (router/datapath/sessions.py). Attaching one on the freed session crashed the
    router (found by the chaos soak's link-routed traffic)."""
    router = routed_to(broker, tmp_path)
    with router, World() as world:
        wait_for_routes(world, router)
        client = world.connect(router.url)
        missing = client.receiver("rabbit//amq/queue/missing", credit=1)
        world.run_until(lambda: missing.closed, what="the broker to end its session")
        for round_ in range(2):  # on the new session, and again on that one
            sender = client.sender(f"rabbit/after-{round_}")
            world.run_until(lambda s=sender: s.credit > 0, what="the broker's credit")
            sent = sender.send_all([Message(body=f"after-{round_}", durable=True)])
            world.run_until(sender.all_settled, what="the broker's outcome")
            assert [t.outcome for t in sent] == ["accepted"]
            receiver = client.receiver(f"rabbit/after-{round_}", credit=1)
            world.run_until(lambda r=receiver: len(r.messages) == 1, what="the message back")
            assert receiver.bodies == [f"after-{round_}"]
        assert router.alive()
