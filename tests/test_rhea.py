"""Interoperability with rhea, the Node.js AMQP 1.0 client, through a real router process.

Each scenario is a small CommonJS script in tests/rhea/, run as a child process by
tests/rhea_scripts.py (arguments in as one JSON object, JSON lines out; every wait bounded, the
process killed on the way out). python-qpid-proton clients run in the test's own event loop (the
`world` fixture) and are pumped while the script runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from clients import ACCEPTED, REJECTED, Receiver, World
from harness import RouterProcess
from proton import Message
from rhea_scripts import SCRIPT_TIMEOUT, NodeScript, endpoint, wait_for
from test_containers import PLANT, network, wait_for_container
from test_linkroute import FakeBroker

pytestmark = pytest.mark.network


def rhea_body(i: int) -> Any:
    """The body tests/rhea/common.js bodyFor(i) sends, as describeBody() reports it."""
    if i % 2 == 0:
        return f"message {i} ünïcødé ✓ " + "x" * (i % 50)
    return {"binary": (bytes([i % 256]) * (i % 100 + 1)).hex()}


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Callable[..., NodeScript]]:
    """Starts rhea scripts; every one is killed (if still running) when the test ends."""
    started: list[NodeScript] = []

    def start(script: str, **args: Any) -> NodeScript:
        proc = NodeScript(script, tmp_path, **args)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.close()


def test_rhea_to_rhea_unsettled_bodies_intact(
    tmp_path: Path, node: Callable[..., NodeScript]
) -> None:
    count = 1000
    with RouterProcess(tmp_path) as router:
        script = node("p2p.js", **endpoint(router), address="interop.p2p", count=count)
        wait_for(script.finished, timeout=SCRIPT_TIMEOUT + 5, what="rhea p2p")
        result = script.result()
        assert router.alive()

    assert result["sent"] == count
    assert result["outcomes"] == {"accepted": count, "rejected": 0, "released": 0, "modified": 0}
    # every body, unchanged, in order
    assert result["received"] == [rhea_body(i) for i in range(count)]


def python_echo_service(answers: Any) -> Callable[[Receiver, Message, Any], None]:
    def answer(receiver: Receiver, message: Message, delivery: Any) -> None:
        answers.send(
            Message(
                address=message.reply_to,
                correlation_id=message.correlation_id,
                body=str(message.body).upper(),
            )
        )
        delivery.update(ACCEPTED)
        delivery.settle()

    return answer


def test_rhea_requests_python_service_replies_to_dynamic_address(
    tmp_path: Path, world: World, node: Callable[..., NodeScript]
) -> None:
    count = 20
    with RouterProcess(tmp_path) as router:
        service = world.connect(router.url)
        answers = service.sender(None)  # anonymous: each reply goes to its request's reply-to
        requests = service.receiver("interop.echo", credit=50)
        requests.policy = python_echo_service(answers)

        script = node("requester.js", **endpoint(router), address="interop.echo", count=count)
        world.run_until(script.finished, timeout=SCRIPT_TIMEOUT + 5, what="rhea requester")
        result = script.result()
        world.run_until(answers.all_settled, what="replies settled")
        world.close()  # before the router stops, so it need not wait out its close grace

    reply_to = result["reply_to"]
    assert reply_to.startswith("_topo/0/R1/temp.") or reply_to.startswith("amqp:/_topo/0/R1/temp.")
    assert [m.reply_to for m in requests.messages] == [reply_to] * count
    responses = sorted(result["responses"], key=lambda r: int(r["correlation_id"][4:]))
    assert [(r["correlation_id"], r["body"]) for r in responses] == [
        (f"req-{i}", f"PING {i}") for i in range(count)
    ]
    assert all(r["to"] == reply_to for r in responses)
    assert [t.state for t in answers.sent] == [ACCEPTED] * count


def test_python_requests_rhea_service_replies_to_dynamic_address(
    tmp_path: Path, world: World, node: Callable[..., NodeScript]
) -> None:
    count = 20
    with RouterProcess(tmp_path) as router:
        # The world's loop needs a connection before it is stepped, so the client comes first.
        client = world.connect(router.url)
        replies = client.receiver(None, dynamic=True, credit=50)
        assert replies.address
        script = node("responder.js", **endpoint(router), address="interop.upper", count=count)
        world.run_until(lambda: script.has_event("ready"), timeout=10, what="rhea service ready")
        requests = client.sender("interop.upper")
        world.run_until(lambda: requests.credit > 0, what="credit for the service address")
        tracked = requests.send_all(
            Message(reply_to=replies.address, correlation_id=f"c{i}", body=f"hello {i}")
            for i in range(count)
        )
        world.run_until(lambda: len(replies.messages) == count, what="all replies")
        world.run_until(requests.all_settled, what="requests settled")
        world.run_until(script.finished, timeout=SCRIPT_TIMEOUT, what="rhea service done")
        assert script.result() == {"served": count}
        world.close()  # before the router stops, so it need not wait out its close grace

    assert [t.state for t in tracked] == [ACCEPTED] * count
    got = sorted((m.correlation_id, m.body) for m in replies.messages)
    assert got == sorted((f"c{i}", f"HELLO {i}") for i in range(count))


def test_rhea_annotations_and_properties_reach_python_unchanged(
    tmp_path: Path, world: World, node: Callable[..., NodeScript]
) -> None:
    with RouterProcess(tmp_path) as router:
        consumer = world.connect(router.url).receiver("interop.props", credit=10)
        script = node("annotated.js", **endpoint(router), address="interop.props")
        world.run_until(script.finished, timeout=SCRIPT_TIMEOUT + 5, what="rhea annotated sender")
        assert script.result() == {"outcomes": ["accepted"] * 3}
        world.run_until(lambda: len(consumer.messages) == 3, what="three messages")
        world.close()  # before the router stops, so it need not wait out its close grace

    for seq, message in enumerate(consumer.messages):
        assert message.id == f"annotated-{seq}"
        assert message.subject == "interop"
        assert message.properties == {
            "seq": seq,
            "str": "héllo wörld",
            "neg": -7,
            "big": 1099511627776,
            "dbl": 1.5,
            "bool": True,
            "nothing": None,
        }
        annotations = message.annotations
        assert annotations is not None
        assert annotations["x-opt-test-annotation"] == "kept"
        assert annotations["x-opt-sequence"] == seq
    plain, data, mapped = consumer.messages
    assert plain.body == "plain string body ✓"
    assert (data.body, data.inferred) == (bytes([0, 1, 2, 253, 254, 255]), True)  # data section
    assert mapped.body == {"a": 1, "b": "two", "nested": [1, 2, 3], "flag": True}


def test_rhea_rejection_condition_reaches_python_sender(
    tmp_path: Path, world: World, node: Callable[..., NodeScript]
) -> None:
    count = 5
    with RouterProcess(tmp_path) as router:
        client = world.connect(router.url)
        script = node("rejecter.js", **endpoint(router), address="interop.reject", count=count)
        world.run_until(lambda: script.has_event("ready"), timeout=10, what="rhea receiver")
        sender = client.sender("interop.reject")
        world.run_until(lambda: sender.credit > 0, what="credit")
        tracked = sender.send_all(Message(body=f"order {i}") for i in range(count))
        world.run_until(sender.all_settled, what="outcomes from the rhea receiver")
        world.run_until(script.finished, timeout=SCRIPT_TIMEOUT, what="rhea receiver done")
        assert script.result() == {"rejected": [f"order {i}" for i in range(count)]}
        world.close()  # before the router stops, so it need not wait out its close grace

    for i, t in enumerate(tracked):
        assert t.state == REJECTED, t.outcome
        assert t.condition is not None
        assert t.condition.name == "app:rejected-by-test"
        assert t.condition.description == f"no thanks: order {i}"
        assert t.condition.info == {"reason": "interop", "seq": i + 1}


def test_rhea_sees_the_address_it_attached_to_on_routed_links(
    tmp_path: Path, world: World, node: Callable[..., NodeScript]
) -> None:
    """rhea reads what it attached to from the answering attach: the container answers in its
    own terms (`atm`), rhea gets its own address back, `(plant-b)/atm` or `()/atm` (which a
    gateway rule resolves), through an edge (E), an interior (A) and the container's own
    router (B)."""
    rules = {"rules": [{"container": PLANT, "node": {"exact": "atm"}}]}
    with network(tmp_path, world, gateway=rules) as net:
        plant = FakeBroker(world, net.b.url, container_id=PLANT)
        wait_for_container(world, net.a, PLANT)
        for router in (net.e, net.a, net.b):
            for address in (f"({PLANT})/atm", "()/atm"):
                script = node("attach.js", **endpoint(router), address=address)
                world.run_until(
                    script.finished, timeout=SCRIPT_TIMEOUT + 5, what=f"rhea on {router.id}"
                )
                assert script.result() == {"target": address, "source": address}, router.id
        assert {a for _n, a, _r in plant.attaches} == {"atm"}
        world.close()  # before the routers stop, so they need not wait out their close grace
