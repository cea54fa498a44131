"""Who may change a router through ``$management`` (router/management/authorization.py): the users
``router.managementWriters`` names and the network's own routers; everybody else gets 403, for
whatever entity, and still reads. Real routers, real clients authenticating with SASL PLAIN
against a Cyrus sasldb, requests as qdmanage sends them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clients import Client, Management, World
from harness import RouterNetwork, RouterProcess
from proton import Message
from test_sasl import PASSWORD, REALM, USER, make_sasl_dir, plain
from test_tls import build_pki, client_domain, server_profile

pytestmark = pytest.mark.network

ALICE = f"{USER}@{REALM}"
BOB = f"bob@{REALM}"
DISPATCH = "org.apache.qpid.dispatch."
CONN_LINK_ROUTE = f"{DISPATCH}router.connection.linkRoute"
ADDRESS = f"{DISPATCH}router.config.address"
# qdmanage create --type=address prefix=foo distribution=closest, and the like
WRITES = [
    ({"operation": "CREATE", "type": ADDRESS, "name": "foo"}, {"prefix": "foo"}),
    ({"operation": "UPDATE", "type": f"{DISPATCH}router.link", "identity": "1"}, {"x": 1}),
    ({"operation": "DELETE", "type": f"{DISPATCH}listener", "name": "amqp"}, None),
]
ROUTE = {"pattern": "broker.#", "direction": "in"}


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterProcess]:
    workdir = tmp_path_factory.mktemp("writes")
    sasl_dir = make_sasl_dir(workdir / "sasl", {USER: PASSWORD, "bob": "bobs-pw"})
    proc = RouterProcess(
        workdir,
        "RW",
        router={"saslConfigDir": str(sasl_dir), "managementWriters": [ALICE]},
        listeners=[
            {"saslMechanisms": "ANONYMOUS"},
            # A broker's connection, which registers link routes for itself.
            {"saslMechanisms": "PLAIN", "authenticatePeer": True, "role": "route-container"},
        ],
    )
    with proc:
        yield proc


def status(response: Message) -> tuple[int, str]:
    properties = response.properties
    return properties["statusCode"], properties["statusDescription"]


def connect(world: World, url: str, **kwargs: Any) -> Client:
    client = Client(world, url, **kwargs)
    world.clients.append(client)
    world.run_until(lambda: client.opened or client.failed, what=f"connecting to {url}")
    assert client.opened, client.errors
    return client


@pytest.mark.parametrize(("properties", "body"), WRITES)
def test_an_anonymous_client_reads_but_may_not_write(
    world: World, router: RouterProcess, properties: dict[str, Any], body: Any
) -> None:
    mgmt = Management(connect(world, router.url))
    assert [row["id"] for row in mgmt.query("router")] == ["RW"]
    code, why = status(mgmt.request(properties, body))
    assert code == 403
    assert why == "user 'anonymous' may not change this router: not in router.managementWriters"


def test_only_the_named_user_writes(world: World, router: RouterProcess) -> None:
    url = router.listener_url(1)
    alice = Management(connect(world, url, **plain()))
    bob = Management(connect(world, url, **plain(BOB, "bobs-pw")))
    create = {"operation": "CREATE", "type": CONN_LINK_ROUTE, "name": "broker-in"}
    code, why = status(bob.request(create, ROUTE))
    assert (code, why) == (
        403,
        f"user {BOB!r} may not change this router: not in router.managementWriters",
    )
    created = alice.request(create, ROUTE)
    assert status(created)[0] == 201, status(created)
    # Allowed through, the entities Routernet does not write answer as before: not implemented
    # (501), or no such type (400) for what it has no schema of.
    for properties, body in WRITES:
        code, why = status(alice.request(properties, body))
        assert code in (400, 501) and "may not change" not in why, (properties, code, why)
    delete = {"operation": "DELETE", "type": CONN_LINK_ROUTE, "identity": created.body["identity"]}
    assert status(bob.request(delete))[0] == 403
    assert status(alice.request(delete))[0] == 204


def test_a_change_to_the_writers_applies_live(world: World, tmp_path: Path) -> None:
    sasl_dir = make_sasl_dir(tmp_path / "sasl", {"bob": "bobs-pw"})
    with RouterProcess(
        tmp_path,
        "RL",
        router={"saslConfigDir": str(sasl_dir)},
        listeners=[
            {"saslMechanisms": "PLAIN", "authenticatePeer": True, "role": "route-container"}
        ],
    ) as proc:
        bob = Management(connect(world, proc.url, **plain(BOB, "bobs-pw")))
        create = {"operation": "CREATE", "type": CONN_LINK_ROUTE, "name": "r"}
        assert status(bob.request(create, ROUTE))[0] == 403  # nobody by default
        proc.config["router"]["managementWriters"] = [BOB]
        proc.rewrite_config()
        proc.wait_log(r"config\.applied .*router\.managementWriters")
        assert status(bob.request(create, ROUTE))[0] == 201


def test_writes_from_across_the_network_are_refused_even_to_writers(
    world: World, tmp_path: Path
) -> None:
    """A request to another router's agent crosses on the routers' shared links, which carry
    any client's messages: B cannot tell who wrote it, so it reads and does not write."""
    net = RouterNetwork(tmp_path, world, [("A", "B", 1)])
    net["B"].config["router"]["managementWriters"] = ["anonymous"]
    with net:
        remote = Management(world.connect(net.url("A")), "_topo/0/B/$management")
        assert [row["id"] for row in remote.query("router")] == ["B"]
        code, why = status(remote.request(*WRITES[0]))
        assert code == 403
        assert "not accepted from across the network" in why
        # On a connection to B itself the same client may.
        local = Management(world.connect(net.url("B")))
        assert status(local.request(*WRITES[1]))[0] == 501


def test_a_writer_may_be_named_by_its_client_certificates_subject(
    world: World, tmp_path: Path
) -> None:
    """A client authenticating with its TLS certificate (SASL EXTERNAL) is the certificate's
    subject: listed, it writes; another certificate of the same CA is refused."""
    (tmp_path / "pki").mkdir()
    pki = build_pki(tmp_path / "pki")
    with RouterProcess(
        tmp_path,
        "RT",
        router={"managementWriters": ["CN=client,O=Routernet"]},
        listeners=[
            {
                "saslMechanisms": "EXTERNAL",
                "authenticatePeer": True,
                "sslProfile": "server",
                "role": "route-container",
            }
        ],
        sections={"sslProfiles": [server_profile(pki)]},
    ) as proc:
        url = proc.url.replace("amqp://", "amqps://", 1)
        create = {"operation": "CREATE", "type": CONN_LINK_ROUTE, "name": "r"}
        writer = connect(
            world,
            url,
            ssl_domain=client_domain(pki.ca, pki.client_cert, pki.client_key, verify=False),
            allowed_mechs="EXTERNAL",
        )
        assert status(Management(writer).request(create, ROUTE))[0] == 201
        stranger = connect(
            world,
            url,
            ssl_domain=client_domain(pki.ca, pki.stranger_cert, pki.stranger_key, verify=False),
            allowed_mechs="EXTERNAL",
        )
        code, why = status(Management(stranger).request(create, ROUTE))
        assert code == 403 and "CN=stranger" in why, why
