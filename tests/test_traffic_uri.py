"""`routernet send`, `receive` and `request` given global addresses with a host, against a real
router: a plain listener, a TLS one (the throwaway PKI of test_tls.py) and a SASL PLAIN one
(test_sasl.py's sasldb). A responder in the test answers requests on `service`, echoing what
it got."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from clients import ACCEPTED, REJECTED, Receiver, World, settle
from harness import RouterProcess
from proton import Delivery, Message
from test_linkroute import FakeBroker
from test_sasl import FULL_USER, PASSWORD, make_sasl_dir
from test_tls import SERVER_NAMES, make_ca, make_cert

pytestmark = pytest.mark.network

CLI = [sys.executable, "-m", "router_operator.cli.main"]
TIMEOUT = 30.0
PLAIN_LISTENER, TLS_LISTENER, SASL_LISTENER = range(3)


@dataclass(frozen=True)
class Pki:
    ca: Path
    other_ca: Path
    client_cert: Path
    client_key: Path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("uri-pki")
    ca, _ = make_ca(d, "ca")
    other_ca, _ = make_ca(d, "other-ca")
    make_cert(d, "server", "ca", SERVER_NAMES)
    client = make_cert(d, "client", "ca")
    return Pki(ca, other_ca, client, d / "client.key")


@pytest.fixture(scope="module")
def router(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterProcess]:
    workdir = tmp_path_factory.mktemp("uri-router")
    profile = {
        "name": "server",
        "certFile": str(pki.ca.parent / "server.pem"),
        "privateKeyFile": str(pki.ca.parent / "server.key"),
        "caCertFile": str(pki.ca),
    }
    sasl_dir = make_sasl_dir(workdir / "sasl", {FULL_USER.partition("@")[0]: PASSWORD})
    with RouterProcess(
        workdir,
        "U1",
        listeners=[
            {},
            {"sslProfile": "server"},
            {"saslMechanisms": "PLAIN", "authenticatePeer": True},
        ],
        router={"saslConfigDir": str(sasl_dir)},
        sections={
            "sslProfiles": [profile],
            "gateway": {
                "rules": [{"container": "plant", "applicationProperties": {"site": {"exact": "a"}}}]
            },
        },
    ) as r:
        yield r


def uri(router: RouterProcess, listener: int, node: str, scheme: str = "amqp") -> str:
    lst = router.listeners[listener]
    return f"{scheme}://{lst['host']}:{lst['port']}/{node}"


def start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def run(world: World, proc: subprocess.Popen[str]) -> tuple[int, list[Any], str]:
    """Steps the test's clients until ``proc`` exits: its code, stdout's JSON lines, stderr."""
    try:
        world.run_until(lambda: proc.poll() is not None, timeout=TIMEOUT, what="the command")
    finally:
        if proc.poll() is None:
            proc.kill()
        out, err = proc.communicate()
    return proc.returncode, [json.loads(line) for line in out.splitlines()], err


@pytest.fixture
def responder(router: RouterProcess, world: World) -> Iterator[Receiver]:
    """Answers every request on `service` at its reply-to, from an anonymous sender: the
    reply's body is "re: <body>", its application properties the request's plus its subject.
    A request with subject "refuse" is rejected instead."""
    client = world.connect(router.url)
    replies = client.sender(None)

    def respond(receiver: Receiver, message: Message, delivery: Delivery) -> None:
        if message.subject == "refuse":
            settle(delivery, REJECTED)
            return
        reply = Message(
            address=message.reply_to,
            correlation_id=message.id,
            body=f"re: {message.body}",
            properties={**(message.properties or {}), "subject": message.subject},
        )
        replies.send(reply)
        settle(delivery, ACCEPTED)

    service = client.receiver("service", policy=respond)
    world.run_until(lambda: service.attached and replies.attached, what="the responder")
    yield service
    client.close()


def test_send_and_receive_connect_to_a_uris_host(router: RouterProcess, world: World) -> None:
    """receive --print shows each message: the --body string, --subject, --property and
    --durable."""
    rx = start("receive", uri(router, PLAIN_LISTENER, "uri.orders"), "--count", "3", "--print")
    probe = world.connect(router.url)
    probe_sender = probe.sender("uri.orders")
    world.run_until(lambda: probe_sender.credit > 0, what="the receiver attached")
    probe.close()
    tx = start(
        "send", f"AMQP://{router.host}:{router.port}/uri.orders", "--count", "3",
        "--body", "hello", "--subject", "greeting", "--property", "region=eu", "--durable",
    )  # fmt: skip
    code, lines, err = run(world, tx)
    assert code == 0, err
    assert lines == [{**lines[0], "sent": 3, "accepted": 3, "unresolved": 0}]
    code, lines, err = run(world, rx)
    assert code == 0, err
    *messages, summary = lines
    assert summary["distinct"] == 3 and summary["duplicates"] == 0
    assert [m["body"] for m in messages] == ["hello"] * 3
    assert sorted(m["application_properties"]["seq"] for m in messages) == [0, 1, 2]
    first = messages[0]
    assert first["header"] == {"durable": True}
    assert first["application_properties"]["region"] == "eu"
    assert first["properties"]["subject"] == "greeting"
    assert first["properties"]["message_id"].endswith(
        ":" + str(first["application_properties"]["seq"])
    )


def test_request_prints_the_reply(router: RouterProcess, world: World, responder: Receiver) -> None:
    proc = start(
        "request", uri(router, PLAIN_LISTENER, "service"), "--body", "ping",
        "--subject", "hello", "--property", "k=v",
    )  # fmt: skip
    code, lines, err = run(world, proc)
    assert code == 0, err
    [reply] = lines
    assert reply["body"] == "re: ping"
    assert reply["application_properties"] == {"k": "v", "subject": "hello"}
    request = responder.messages[-1]
    assert reply["properties"]["correlation_id"] == request.id
    assert reply["properties"]["to"] == request.reply_to


def test_request_through_a_state_free_url_with_a_bare_address(
    router: RouterProcess, world: World, responder: Receiver
) -> None:
    proc = start("request", "service", "--url", router.url, "--body", "bare")
    code, lines, err = run(world, proc)
    assert code == 0, err
    assert lines[0]["body"] == "re: bare"


def test_a_request_nobody_answers_times_out(router: RouterProcess, world: World) -> None:
    proc = start("request", uri(router, PLAIN_LISTENER, "nobody"), "--timeout", "1")
    code, lines, err = run(world, proc)
    assert (code, lines) == (1, [])
    assert err == "routernet request: no credit to send to 'nobody' (no consumer?) within 1 s\n"


def test_a_rejected_request_ends_at_once(
    router: RouterProcess, world: World, responder: Receiver
) -> None:
    proc = start("request", uri(router, PLAIN_LISTENER, "service"), "--subject", "refuse")
    code, lines, err = run(world, proc)
    assert (code, lines) == (1, [])
    assert err.startswith("routernet request: the request was rejected")
    assert err.count("\n") == 1


def test_amqps_verifies_the_router_against_the_ca(
    router: RouterProcess,
    world: World,
    responder: Receiver,
    pki: Pki,
) -> None:
    address = uri(router, TLS_LISTENER, "service", scheme="amqps")
    code, lines, err = run(world, start("request", address, "--ca", str(pki.ca)))
    assert code == 0, err
    assert lines[0]["body"] == "re: None"
    # The system's CAs do not know the test CA; nor does another CA.
    for extra in ([], ["--ca", str(pki.other_ca)]):
        code, lines, err = run(world, start("request", address, "--timeout", "5", *extra))
        assert (code, lines) == (1, []), err
        assert "certificate verify failed" in err and err.count("\n") == 1


def test_amqps_send_with_a_client_certificate(
    router: RouterProcess,
    world: World,
    pki: Pki,
) -> None:
    client = world.connect(router.url)
    consumer = client.receiver("uri.tls")
    world.run_until(lambda: consumer.attached, what="the consumer")
    tx = start(
        "send", uri(router, TLS_LISTENER, "uri.tls", scheme="amqps"), "--count", "2",
        "--ca", str(pki.ca), "--cert", str(pki.client_cert), "--key", str(pki.client_key),
    )  # fmt: skip
    code, lines, err = run(world, tx)
    assert code == 0, err
    assert lines[0]["accepted"] == 2
    world.run_until(lambda: len(consumer.messages) == 2, what="both messages")
    client.close()


@pytest.mark.parametrize(
    ("user_in_uri", "env"),
    [
        (f"{FULL_USER.replace('@', '%40')}:{PASSWORD}@", {}),
        (f"{FULL_USER.replace('@', '%40')}@", {"ROUTERNET_PASSWORD": PASSWORD}),
        ("", {"ROUTERNET_USER": FULL_USER, "ROUTERNET_PASSWORD": PASSWORD}),
        (f"{FULL_USER.replace('@', '%40')}:{PASSWORD}@", {"ROUTERNET_PASSWORD": "wrong"}),
    ],
)
def test_plain_credentials_from_the_uri_or_the_environment(
    router: RouterProcess,
    world: World,
    responder: Receiver,
    user_in_uri: str,
    env: dict[str, str],
) -> None:
    lst = router.listeners[SASL_LISTENER]
    address = f"amqp://{user_in_uri}{lst['host']}:{lst['port']}/service"
    code, lines, err = run(world, start("request", address, "--body", "auth", env=env))
    assert code == 0, err
    assert lines[0]["body"] == "re: auth"


def test_a_wrong_password_is_a_one_line_failure(router: RouterProcess, world: World) -> None:
    lst = router.listeners[SASL_LISTENER]
    address = f"amqp://{lst['host']}:{lst['port']}/service"
    env = {"ROUTERNET_USER": FULL_USER, "ROUTERNET_PASSWORD": "wrong"}
    code, lines, err = run(world, start("request", address, env=env))
    assert (code, lines) == (1, [])
    assert "amqp:unauthorized-access" in err and err.count("\n") == 1


def test_send_reaches_a_containers_node_by_link_and_by_rule(
    router: RouterProcess, world: World
) -> None:
    """`(plant)/q` goes on a link routed to the container; `()/q` on the anonymous relay, so
    that the gateway rules see each message's application properties."""
    plant = FakeBroker(world, router.url, container_id="plant")
    code, _lines, err = run(
        world, start("send", uri(router, PLAIN_LISTENER, "(plant)/q"), "--count", "2")
    )
    assert code == 0, err
    code, _lines, err = run(
        world,
        start("send", uri(router, PLAIN_LISTENER, "()/q"), "--count", "1", "--property", "site=a"),
    )
    assert code == 0, err
    assert [address for address, _m in plant.received] == ["q"] * 3
    plant.close()


@pytest.mark.parametrize("command", ["send", "receive"])
def test_a_refused_link_ends_the_command_with_the_routers_error(
    router: RouterProcess, world: World, command: str
) -> None:
    code, _lines, err = run(
        world, start(command, uri(router, PLAIN_LISTENER, "(nobody)/q"), "--count", "1")
    )
    assert code == 1
    assert "amqp:not-found" in err and "nobody" in err
