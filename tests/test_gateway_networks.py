"""Two separate router networks joined by a gateway connection (seed 001), with real routers.

West: interiors R1 and R2 (R2 dials R1); R1 accepts gateway connections with mutual TLS (SASL
EXTERNAL on client certificates) and exports the containers whose ids start with `plant-`.
East: one interior, also called R1 (router ids of joined networks need not differ), which dials
west's gateway listener and exports `east-` containers. Containers are python-qpid-proton peers
(tests/test_linkroute.py's FakeBroker) attached anywhere in either network.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clients import ACCEPTED, RELEASED, Management, World
from harness import NETWORK_TIMERS, RouterProcess, free_port
from proton import Message
from test_containers import anonymous_send, containers
from test_linkroute import FakeBroker
from test_tls import Pki, build_pki, server_profile


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return build_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def world() -> Iterator[World]:
    with World() as w:
        yield w


class Joined:
    def __init__(self, west: RouterProcess, west2: RouterProcess, east: RouterProcess) -> None:
        self.west, self.west2, self.east = west, west2, east


def interior(workdir: Path, rid: str, host: str, **sections: Any) -> RouterProcess:
    router = RouterProcess(
        workdir,
        rid,
        host=host,
        listeners=[{}, {"role": "inter-router"}],
        router={"mode": "interior", **NETWORK_TIMERS},
        sections=sections,
    )
    router.config.setdefault("connectors", [])
    return router


@contextlib.contextmanager
def joined(tmp_path: Path, pki: Pki, **east_gateway: Any) -> Iterator[Joined]:
    profiles = [server_profile(pki, "gateway")]
    gateway_port = free_port("127.0.0.2")
    west = interior(
        tmp_path / "west",
        "R1",
        "127.0.0.2",
        sslProfiles=profiles,
        gateway={"export": [{"prefix": "plant-"}]},
    )
    west.config["listeners"].append(
        {
            "host": "127.0.0.2",
            "port": gateway_port,
            "role": "gateway",
            "sslProfile": "gateway",
            "saslMechanisms": ["EXTERNAL"],
        }
    )
    west2 = interior(tmp_path / "west", "R2", "127.0.0.3")
    west2.config["connectors"].append(
        {"host": west.host, "port": west.listeners[1]["port"], "role": "inter-router"}
    )
    east = interior(
        tmp_path / "east",
        "R1",
        "127.0.0.4",
        sslProfiles=profiles,
        gateway={"export": [{"prefix": "east-"}], **east_gateway},
    )
    east.config["connectors"].append(
        {
            "name": "west",
            "host": "127.0.0.2",
            "port": gateway_port,
            "role": "gateway",
            "sslProfile": "gateway",  # the server certificate serves as the client's, as in tls
            "saslMechanisms": ["EXTERNAL"],
            "verifyHostname": False,
        }
    )
    started: list[RouterProcess] = []
    try:
        for router in (west, west2, east):
            started.append(router.start())
        yield Joined(west, west2, east)
    finally:
        for router in reversed(started):
            router.stop()


def location(world: World, router: RouterProcess, container: str) -> str:
    return str(containers(world, router).get(container, {}).get("location", "unreachable"))


def test_containers_cross_a_gateway_both_ways_and_only_exported_ones(
    tmp_path: Path, pki: Pki, world: World
) -> None:
    with joined(tmp_path, pki) as net:
        plant = FakeBroker(world, net.west2.url, container_id="plant-w")
        secret = FakeBroker(world, net.west2.url, container_id="secret-w")
        app = FakeBroker(world, net.east.url, container_id="east-app")
        world.run_until(
            lambda: location(world, net.east, "plant-w").startswith("gateway"),
            timeout=20.0,
            what="east to import plant-w",
        )
        world.run_until(
            lambda: location(world, net.west2, "east-app") == "router R1",
            timeout=20.0,
            what="west's R2 to learn east-app through its R1",
        )
        assert location(world, net.east, "secret-w") == "unreachable"
        # Messages, east to west and west to east.
        client = world.connect(net.east.url)
        assert anonymous_send(client, "(plant-w)/queue1", 3) == [ACCEPTED] * 3
        assert [a for a, _m in plant.received] == ["queue1"] * 3
        back = world.connect(net.west2.url)
        assert anonymous_send(back, "(east-app)/inbox", 2) == [ACCEPTED] * 2
        assert [a for a, _m in app.received] == ["inbox"] * 2
        # Links, relayed across the gateway to the container's own node.
        sender = client.sender("(plant-w)/queue1", name="across")
        assert sender.attached and not sender.closed
        assert ("across", "queue1", True) in plant.attaches
        tracked = sender.send(Message(body="by link"))
        world.run_until(lambda: tracked.settled, what="outcome across the gateway")
        assert tracked.state == ACCEPTED
        receiver = client.receiver("(plant-w)/queue1", credit=5)
        assert receiver.attached
        plant.serve("queue1", 2)
        world.run_until(lambda: len(receiver.messages) == 2, what="messages from west")
        # What west does not export is not there for east, by name or by guess.
        refused = client.sender("(secret-w)/x")
        world.run_until(lambda: refused.closed, what="refusal")
        assert refused.errors[0] is not None and refused.errors[0].name == "amqp:not-found"
        assert anonymous_send(client, "(secret-w)/x", 1) == [RELEASED]
        assert secret.received == [] and all(a[1] != "x" for a in secret.attaches)


def test_the_gateway_connection_is_mutual_tls(tmp_path: Path, pki: Pki, world: World) -> None:
    with joined(tmp_path, pki) as net:
        # Up: a connection still in its handshake (dialled before east listened, say) is not
        # encrypted yet, and says so.
        world.run_until(
            lambda: any(r["isAuthenticated"] for r in gateway_connections(world, net.west)),
            timeout=20.0,
            what="the connection",
        )
        [row] = gateway_connections(world, net.west)
        assert row["isEncrypted"] is True
        assert row["sasl"] == "EXTERNAL" and row["isAuthenticated"] is True


def gateway_connections(world: World, router: RouterProcess) -> list[dict[str, Any]]:
    client = world.connect(router.url)
    try:
        rows = Management(client).query(
            "connection", ["role", "isEncrypted", "sasl", "isAuthenticated"]
        )
    finally:
        client.close()
    return [r for r in rows if r["role"] == "gateway"]


def test_rules_resolve_anonymous_container_addresses_across_the_gateway(
    tmp_path: Path, pki: Pki, world: World
) -> None:
    rules = {"rules": [{"container": "plant-w", "subject": {"prefix": "order."}}]}
    with joined(tmp_path, pki, **rules) as net:
        plant = FakeBroker(world, net.west.url, container_id="plant-w")
        world.run_until(
            lambda: location(world, net.east, "plant-w").startswith("gateway"),
            timeout=20.0,
            what="east to import plant-w",
        )
        client = world.connect(net.east.url)
        sender = client.sender(None)
        world.run_until(lambda: sender.credit > 0, what="credit")
        tracked = sender.send(Message(address="()/orders", subject="order.new", body="o"))
        world.run_until(lambda: tracked.settled, what="outcome")
        assert tracked.state == ACCEPTED
        assert [a for a, _m in plant.received] == ["orders"]
