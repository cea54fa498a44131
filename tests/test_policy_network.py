"""Dispatch's vhost policy on a real router, with real clients (python-qpid-proton) logging in
with SASL PLAIN against a Cyrus sasldb: each limit and each refusal, as the client sees it.

Every test that is parametrized with `kind` runs against ours and, where QDROUTERD names a
qdrouterd 1.19 binary, against qdrouterd given the same configuration (tests/qdrouterd.py):
both must answer the same way, condition for condition.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clients import ACCEPTED, REJECTED, Client, Management, World
from harness import RouterProcess
from proton import Endpoint, Message
from qdrouterd import KINDS, router_process
from test_sasl import REALM, make_sasl_dir
from test_telemetry import samples, telemetry

pytestmark = pytest.mark.network

ALICE, BOB, CAROL = (f"{name}@{REALM}" for name in ("alice", "bob", "carol"))
PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"}
RLE = "amqp:resource-limit-exceeded"
UNAUTHORIZED = "amqp:unauthorized-access"
CONNECTION_DENIED = (RLE, "connection disallowed by local policy")
SESSION_DENIED = (RLE, "session disallowed by local policy")
LINK_LIMIT = (RLE, "link disallowed by local policy")
LINK_DENIED = (UNAUTHORIZED, "link disallowed by local policy")
MiB = 1024 * 1024

POLICY = {"maxConnections": 40, "enableVhostPolicy": True, "defaultVhost": "fallback"}
VHOSTS: list[dict[str, Any]] = [
    {
        "hostname": "acme",
        "maxConnections": 10,
        "maxConnectionsPerUser": 3,
        "maxConnectionsPerHost": 10,
        "maxMessageSize": MiB,
        "allowUnknownUser": True,
        "groups": {
            "admins": {
                "users": ALICE,
                "remoteHosts": "*",
                "sources": "*",
                "targets": "*",
                "allowDynamicSource": True,
                "allowAnonymousSender": True,
                "maxSessions": 2,
            },
            "devs": {
                "users": BOB,
                "remoteHosts": "127.0.0.1",
                "maxConnectionsPerUser": 1,
                "maxSenders": 2,
                "maxReceivers": 2,
                "maxMessageSize": 2000,
                "allowAnonymousSender": True,
                "sourcePattern": "queue.${user}, public.#",
                "targets": "tmp-${user}*, public",
            },
            "$default": {"remoteHosts": "*", "sources": "public"},
        },
    },
    {
        "hostname": "closed",
        "groups": {"staff": {"users": CAROL, "remoteHosts": "10.1.1.1-10.1.1.9", "sources": "*"}},
    },
    {
        "hostname": "fallback",
        "allowUnknownUser": True,
        "groups": {"$default": {"remoteHosts": "*", "sources": "fallback", "targets": "fallback"}},
    },
]


def policed_router(kind: str, workdir: Path, policy: dict[str, Any], rid: str) -> RouterProcess:
    sasl_dir = make_sasl_dir(workdir / "sasl", PASSWORDS)
    return router_process(
        kind,
        workdir,
        rid,
        router={"saslConfigDir": str(sasl_dir)},
        listeners=[{"saslMechanisms": ["ANONYMOUS", "PLAIN"]}],
        sections={"policy": policy, "vhosts": VHOSTS},
    )


@pytest.fixture(scope="module", params=KINDS)
def policed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RouterProcess]:
    kind = request.param
    with policed_router(kind, tmp_path_factory.mktemp(f"policy-{kind}"), POLICY, "P1") as proc:
        yield proc


def login(user: str | None, vhost: str) -> dict[str, Any]:
    """Connection options: the Open's hostname, and PLAIN for a user (else ANONYMOUS)."""
    options: dict[str, Any] = {"virtual_host": vhost}
    if user is None:
        return {**options, "allowed_mechs": "ANONYMOUS"}
    name = user.split("@")[0]
    return {**options, "user": user, "password": PASSWORDS[name], "allowed_mechs": "PLAIN"}


def closed(client: Client) -> bool:
    """The peer closed the connection, or its socket is gone (`finished` is also true before
    the connection has a transport)."""
    return client.failed or bool(client.conn.state & Endpoint.REMOTE_CLOSED)


def connect(world: World, router: RouterProcess, user: str | None, vhost: str) -> Client:
    client = Client(world, router.url, **login(user, vhost))
    world.clients.append(client)
    world.run_until(lambda: client.opened or closed(client), what="the Open answered")
    return client


def refusal(world: World, router: RouterProcess, user: str | None, vhost: str) -> tuple[str, str]:
    """The condition the router closed the connection with, which must happen."""
    client = connect(world, router, user, vhost)
    world.run_until(lambda: closed(client), what="the connection closed")
    cond = client.conn.remote_condition
    assert cond is not None, client.errors
    return cond.name, cond.description


def admitted(world: World, router: RouterProcess, user: str | None, vhost: str) -> Client:
    client = connect(world, router, user, vhost)
    world.run_for(0.1)  # a refusal's Close follows its Open at once
    assert client.opened and not closed(client), client.conn.remote_condition
    return client


def link_refusal(link: Any) -> tuple[str, str] | None:
    """A link's refusal, as its detach carried it; None when it is attached."""
    if link.attached and not link.closed:
        return None
    cond = link.link.remote_condition
    assert cond is not None
    return cond.name, cond.description


# ----- who may connect ------------------------------------------------------------------------


def test_the_open_hostname_picks_the_vhost_and_an_unknown_one_gets_the_default(
    policed: RouterProcess, world: World
) -> None:
    client = admitted(world, policed, None, "no-such-vhost")  # defaultVhost: fallback
    assert link_refusal(client.receiver("fallback")) is None
    assert link_refusal(client.receiver("public")) == LINK_DENIED
    client = admitted(world, policed, None, "acme")  # acme's $default group
    assert link_refusal(client.receiver("public")) is None
    assert link_refusal(client.receiver("fallback")) == LINK_DENIED


def test_users_no_group_names_are_refused_where_unknown_users_are_not_allowed(
    policed: RouterProcess, world: World
) -> None:
    assert refusal(world, policed, None, "closed") == CONNECTION_DENIED
    assert refusal(world, policed, BOB, "closed") == CONNECTION_DENIED


def test_a_group_admits_only_from_its_remote_hosts(policed: RouterProcess, world: World) -> None:
    # carol's group allows 10.1.1.1-10.1.1.9; the test connects from 127.0.0.1.
    assert refusal(world, policed, CAROL, "closed") == CONNECTION_DENIED


def test_connections_per_user_follow_the_group_then_the_vhost(
    policed: RouterProcess, world: World
) -> None:
    first = admitted(world, policed, BOB, "acme")
    assert refusal(world, policed, BOB, "acme") == CONNECTION_DENIED  # devs: 1 per user
    first.close()
    admitted(world, policed, BOB, "acme").close()  # its place is free again
    alices = [admitted(world, policed, ALICE, "acme") for _ in range(3)]  # acme: 3 per user
    assert refusal(world, policed, ALICE, "acme") == CONNECTION_DENIED
    for client in alices:
        client.close()


# ----- sessions and links ---------------------------------------------------------------------


def test_the_groups_max_sessions_is_the_channel_max_offered(
    policed: RouterProcess, world: World
) -> None:
    """admins: maxSessions 2, so the router's Open says channel-max 1 (a client's Proton
    begins no session beyond it); others get the listener's."""
    alice = admitted(world, policed, ALICE, "acme")
    assert alice.conn.transport.remote_channel_max == 1
    bob = admitted(world, policed, BOB, "acme")
    assert bob.conn.transport.remote_channel_max > 1
    alice.close()
    bob.close()


def test_addresses_are_allowed_by_the_groups_lists_and_patterns(
    policed: RouterProcess, world: World
) -> None:
    bob = admitted(world, policed, BOB, "acme")
    assert link_refusal(bob.receiver(f"queue.{BOB}")) is None  # queue.${user}
    assert link_refusal(bob.receiver(f"queue.{ALICE}")) == LINK_DENIED
    bob.close()
    bob = admitted(world, policed, BOB, "acme")
    assert link_refusal(bob.receiver("public.news.eu")) is None  # public.#
    assert link_refusal(bob.receiver("publicity")) == LINK_DENIED
    assert link_refusal(bob.sender(f"tmp-{BOB}-7")) is None  # tmp-${user}*
    assert link_refusal(bob.sender("tmp-someone")) == LINK_DENIED
    bob.close()
    anonymous = admitted(world, policed, None, "acme")  # $default: receive public, send nothing
    assert link_refusal(anonymous.sender("public")) == LINK_DENIED
    assert link_refusal(anonymous.receiver(None, dynamic=True)) == LINK_DENIED
    assert link_refusal(anonymous.sender(None)) == LINK_DENIED  # no anonymous relay
    alice = admitted(world, policed, ALICE, "acme")
    assert link_refusal(alice.receiver(None, dynamic=True)) is None
    assert link_refusal(alice.sender(None)) is None
    anonymous.close()
    alice.close()


def test_links_over_the_groups_limits_are_refused(policed: RouterProcess, world: World) -> None:
    bob = admitted(world, policed, BOB, "acme")  # devs: 2 senders, 2 receivers
    senders = [bob.sender("public", name=f"s{i}") for i in range(2)]
    assert [link_refusal(s) for s in senders] == [None, None]
    assert link_refusal(bob.sender("public", name="s2")) == LINK_LIMIT
    receivers = [bob.receiver("public.a", name=f"r{i}") for i in range(2)]
    assert [link_refusal(r) for r in receivers] == [None, None]
    assert link_refusal(bob.receiver("public.a", name="r2")) == LINK_LIMIT
    senders[0].close()
    assert link_refusal(bob.sender("public", name="s3")) is None  # room for one again
    bob.close()


# ----- messages -------------------------------------------------------------------------------


def test_a_message_over_max_message_size_is_rejected_and_its_connection_closed(
    policed: RouterProcess, world: World
) -> None:
    consumer = admitted(world, policed, ALICE, "acme")
    receiver = consumer.receiver("public")
    bob = admitted(world, policed, BOB, "acme")  # devs: 2000 bytes
    sender = bob.sender("public")
    world.run_until(lambda: sender.credit > 0, what="credit")
    small = sender.send(Message(body="x" * 1000))
    world.run_until(lambda: small.settled, what="the small message settled")
    assert small.state == ACCEPTED
    big = sender.send(Message(body="x" * 3000))
    world.run_until(lambda: closed(bob), what="the sender's connection closed")
    assert big.state == REJECTED
    assert (big.condition.name, big.condition.description) == (
        "amqp:link:message-size-exceeded",
        "Message size exceeded",
    )
    cond = bob.conn.remote_condition
    assert (cond.name, cond.description) == ("amqp:connection:forced", "Message size exceeded")
    world.run_for(0.3)
    assert [len(m.body) for m in receiver.messages] == [1000]
    consumer.close()


def test_a_streamed_message_over_the_limit_is_aborted_for_its_consumer(
    policed: RouterProcess, world: World
) -> None:
    """alice's limit is acme's, 1 MiB; a 3 MiB message is forwarded as it arrives (ours
    streams it from 256 KiB on), so what its consumer got is aborted."""
    consumer = admitted(world, policed, ALICE, "acme")
    receiver = consumer.receiver("big")
    alice = admitted(world, policed, ALICE, "acme")
    sender = alice.sender("big")
    world.run_until(lambda: sender.credit > 0, what="credit")
    big = sender.send(Message(body=b"y" * (3 * MiB)))
    world.run_until(lambda: closed(alice), what="the sender's connection closed", timeout=60)
    assert big.state == REJECTED
    assert big.condition.name == "amqp:link:message-size-exceeded"
    world.run_for(0.5)
    assert receiver.messages == []
    # The consumer's link and connection are fine: a message within the limit still arrives.
    again = admitted(world, policed, ALICE, "acme")
    ok = again.sender("big")
    world.run_until(lambda: ok.credit > 0, what="credit")
    fine = ok.send(Message(body=b"z" * (MiB // 2)))
    world.run_until(lambda: fine.settled, what="the message within the limit", timeout=60)
    assert fine.state == ACCEPTED
    world.run_until(lambda: receiver.messages, what="it arrived")
    assert len(receiver.messages[0].body) == MiB // 2
    consumer.close()
    again.close()


def test_an_anonymous_senders_messages_go_only_to_its_targets(
    policed: RouterProcess, world: World
) -> None:
    consumer = admitted(world, policed, ALICE, "acme")
    consumer.receiver("public")
    bob = admitted(world, policed, BOB, "acme")
    relay = bob.sender(None)
    world.run_until(lambda: relay.credit > 0, what="credit")
    allowed = relay.send(Message(address="public", body="fine"))
    denied = relay.send(Message(address="secret", body="no"))
    world.run_until(lambda: allowed.settled and denied.settled, what="both settled")
    assert allowed.state == ACCEPTED
    assert denied.state == REJECTED
    assert (denied.condition.name, denied.condition.description) == (
        UNAUTHORIZED,
        "policy violation on target",
    )
    assert relay.attached and not relay.closed  # the link stays
    bob.close()
    consumer.close()


def test_a_message_may_not_carry_another_users_id(policed: RouterProcess, world: World) -> None:
    consumer = admitted(world, policed, ALICE, "acme")
    consumer.receiver("public")
    bob = admitted(world, policed, BOB, "acme")  # allowUserIdProxy false (the default)
    sender = bob.sender("public")
    world.run_until(lambda: sender.credit > 0, what="credit")
    own = sender.send(Message(body="mine", user_id=BOB.encode()))
    other = sender.send(Message(body="forged", user_id=ALICE.encode()))
    world.run_until(lambda: own.settled and other.settled, what="both settled")
    assert own.state == ACCEPTED
    assert other.state == REJECTED
    assert (other.condition.name, other.condition.description) == (
        UNAUTHORIZED,
        "user_id proxy violation",
    )
    bob.close()
    consumer.close()


# ----- the router-wide limit ------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_sockets_over_max_connections_are_closed_before_any_amqp(
    kind: str, tmp_path: Path, world: World
) -> None:
    policy = {"maxConnections": 2, "enableVhostPolicy": False}
    with policed_router(kind, tmp_path, policy, "P2") as router:
        first = admitted(world, router, None, "acme")
        second = admitted(world, router, None, "acme")
        third = Client(world, router.url)
        world.clients.append(third)
        world.run_until(lambda: closed(third), what="the third connection closed")
        assert not third.opened
        assert third.conn.remote_condition is None  # closed without an AMQP Close
        second.close()
        world.run_until(
            lambda: admitted_or_none(world, router) is not None,
            what="room again once one closed",
            timeout=60,
        )
        first.close()


def admitted_or_none(world: World, router: RouterProcess) -> Client | None:
    client = connect(world, router, None, "acme")
    world.run_for(0.1)
    if client.opened and not closed(client):
        client.close()
        return client
    return None


# ----- what management and /metrics show, and live changes (ours) --------------------------


def test_management_and_metrics_count_what_the_policy_did(tmp_path: Path, world: World) -> None:
    """The policy, vhost and vhostStats entities qdstat --policy, --vhosts and --vhoststats
    read, and the same counts in /metrics; a vhost changed in the file applies to the next
    connections, and the admitted ones keep their place."""
    router = policed_router("routernet", tmp_path, POLICY, "P3")
    base = telemetry(router)
    with router:
        alice = admitted(world, router, ALICE, "acme")
        assert refusal(world, router, CAROL, "closed") == CONNECTION_DENIED
        assert link_refusal(alice.sender("x")) is None
        bob = admitted(world, router, BOB, "acme")
        assert link_refusal(bob.sender("secret")) == LINK_DENIED
        management = Management(admitted(world, router, ALICE, "acme"))
        [policy] = management.query("policy")
        assert policy["enableVhostPolicy"] is True and policy["maxConnections"] == 40
        assert policy["linksDenied"] == 1 and policy["connectionsCurrent"] == 3
        vhosts = {v["hostname"]: v for v in management.query("vhost")}
        assert set(vhosts) == {"acme", "closed", "fallback"}
        assert vhosts["acme"]["groups"]["devs"]["maxSenders"] == 2
        stats = {v["hostname"]: v for v in management.query("vhostStats")}
        acme, closed_ = stats["acme"], stats["closed"]
        assert (acme["connectionsApproved"], acme["connectionsCurrent"]) == (3, 3)
        assert (acme["senderDenied"], closed_["connectionsDenied"]) == (1, 1)
        users = acme["perUserState"]
        assert set(users) == {ALICE, BOB} and (len(users[ALICE]), len(users[BOB])) == (2, 1)
        got = samples(base)
        assert (
            got[("routernet_vhost_connections", frozenset({("router", "P3"), ("vhost", "acme")}))]
            == 3
        )
        assert (
            got[
                (
                    "routernet_vhost_denials_total",
                    frozenset({("router", "P3"), ("vhost", "acme"), ("kind", "sender")}),
                )
            ]
            == 1
        )
        assert (
            got[("routernet_policy_denials_total", frozenset({("router", "P3"), ("kind", "link")}))]
            == 1
        )

        # Live: acme takes no more connections; those it has stay.
        router.config["vhosts"] = [{**VHOSTS[0], "maxConnections": 0}, *VHOSTS[1:]]
        router.rewrite_config()
        router.wait_log("config.applied.*vhost ~acme", timeout=60)
        assert refusal(world, router, None, "acme") == CONNECTION_DENIED
        assert not closed(alice) and not closed(bob)
