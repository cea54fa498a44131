"""rhea, the Node.js AMQP 1.0 client, as producer and consumer of the queues and topics a router
hosts (seed 002): what a rhea application relies on, through rhea's own API for outcomes
(`delivery.reject(error)`, `delivery.modified({delivery_failed})`, `delivery.release()`),
durable subscriptions (`source: {durable: 2, expiry_policy: 'never'}`) and selector filters
(`rhea.filter.selector`). The scripts are tests/rhea/send.js and tests/rhea/consume.js.

One router hosts every node of the module; each test uses addresses of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from clients import Management, World
from harness import RouterProcess
from rhea_scripts import SCRIPT_TIMEOUT, NodeScript, endpoint, wait_for

pytestmark = pytest.mark.network

DLQ = "jobs.dlq"
NODES = [
    {
        "prefix": "jobs",
        "node": {"type": "queue", "deadLetterAddress": DLQ, "maxDeliveryCount": 5},
    },
    {"prefix": "news", "node": {"type": "topic"}},
]

Rhea = Callable[..., dict[str, Any]]


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterProcess]:
    workdir = tmp_path_factory.mktemp("rhea-nodes")
    r = RouterProcess(
        workdir, "R", addresses=NODES, sections={"store": {"path": str(workdir / "store")}}
    )
    r.start()
    try:
        yield r
    finally:
        r.stop()


@pytest.fixture
def rhea(tmp_path: Path, router: RouterProcess) -> Iterator[Rhea]:
    """Runs one rhea script against the router to its end and returns its result; every
    script started is killed (if still running) when the test ends."""
    started: list[NodeScript] = []

    def run(script: str, **args: Any) -> dict[str, Any]:
        proc = NodeScript(script, tmp_path, **endpoint(router), **args)
        started.append(proc)
        wait_for(proc.finished, timeout=SCRIPT_TIMEOUT + 5, what=f"rhea {script}")
        return proc.result()

    yield run
    for proc in started:
        proc.close()


def node_row(router: RouterProcess, name: str) -> dict[str, Any]:
    """The router's management row for the node `name` (io.routernet.node)."""
    with World() as world:
        client = world.connect(router.url)
        rows = {row["name"]: row for row in Management(client).query("io.routernet.node")}
    return rows[name]


def sent(bodies: list[str], **fields: Any) -> list[dict[str, Any]]:
    """send.js's `messages` argument: one message per body, each with `fields`."""
    return [{"body": body, **fields} for body in bodies]


def bodies(result: dict[str, Any]) -> list[Any]:
    return [m["body"] for m in result["received"]]


def test_durable_messages_wait_in_a_queue_then_reach_rhea_in_order(
    router: RouterProcess, rhea: Rhea
) -> None:
    orders = [f"order {i}" for i in range(20)]
    produced = rhea("send.js", address="jobs.rhea-keep", messages=sent(orders, durable=True))
    assert produced["outcomes"] == ["accepted"] * 20  # taken on with nobody consuming
    assert node_row(router, "jobs.rhea-keep")["depth"] == 20

    consumed = rhea("consume.js", address="jobs.rhea-keep", count=20)
    assert bodies(consumed) == orders
    assert [m["delivery_count"] for m in consumed["received"]] == [0] * 20
    assert node_row(router, "jobs.rhea-keep")["depth"] == 0  # the accepts removed them


def test_a_rhea_reject_dead_letters_with_the_reason(router: RouterProcess, rhea: Rhea) -> None:
    message = {"body": "poison", "subject": "s", "properties": {"kind": "bad"}}
    assert rhea("send.js", address="jobs.rhea-bad", messages=[message])["outcomes"] == ["accepted"]
    rejected = rhea(
        "consume.js",
        address="jobs.rhea-bad",
        count=1,
        actions=["reject"],
        reject={"condition": "app:bad-input", "description": "cannot parse"},
    )
    assert bodies(rejected) == ["poison"]

    dead = rhea("consume.js", address=DLQ, count=1)["received"][0]
    assert (dead["body"], dead["properties"]) == ("poison", {"kind": "bad"})
    annotations = dead["annotations"]
    assert annotations["x-first-death-reason"] == "rejected"
    assert annotations["x-first-death-queue"] == "jobs.rhea-bad"
    assert annotations["x-last-death-reason"] == "rejected"
    assert annotations["x-opt-routernet-reject-condition"] == "app:bad-input"
    assert annotations["x-opt-routernet-reject-description"] == "cannot parse"
    assert node_row(router, "jobs.rhea-bad")["depth"] == 0


def test_a_rhea_delivery_failed_is_redelivered_counted(router: RouterProcess, rhea: Rhea) -> None:
    rhea("send.js", address="jobs.rhea-flaky", messages=sent(["flaky"]))
    consumed = rhea("consume.js", address="jobs.rhea-flaky", count=3, actions=["fail", "fail"])
    assert bodies(consumed) == ["flaky"] * 3
    assert [m["delivery_count"] for m in consumed["received"]] == [0, 1, 2]
    assert node_row(router, "jobs.rhea-flaky")["depth"] == 0


def test_a_rhea_release_is_redelivered_uncounted(router: RouterProcess, rhea: Rhea) -> None:
    rhea("send.js", address="jobs.rhea-later", messages=sent(["later"]))
    consumed = rhea("consume.js", address="jobs.rhea-later", count=2, actions=["release"])
    assert bodies(consumed) == ["later", "later"]
    # A release is no failed attempt: the count stays 0.
    assert [m["delivery_count"] for m in consumed["received"]] == [0, 0]
    assert node_row(router, "jobs.rhea-later")["depth"] == 0


def test_a_rhea_durable_subscription_keeps_messages_while_away(
    router: RouterProcess, rhea: Rhea
) -> None:
    subscription = {"durable": True, "container_id": "rhea-subscriber", "name": "weather-sub"}
    topic = "news.rhea-weather"
    rhea("consume.js", address=topic, count=0, **subscription)  # subscribes, then detaches
    assert node_row(router, topic)["subscriptions"] == 1  # kept, with its link detached
    reports = [f"report {i}" for i in range(4)]
    assert (
        rhea("send.js", address=topic, messages=sent(reports, durable=True))["outcomes"]
        == ["accepted"] * 4
    )

    back = rhea("consume.js", address=topic, count=4, **subscription)
    assert bodies(back) == reports
    # Still subscribed after it detached again; what it accepted is gone.
    rhea("send.js", address=topic, messages=sent(["report 4"], durable=True))
    assert bodies(rhea("consume.js", address=topic, count=1, **subscription)) == ["report 4"]
    assert node_row(router, topic)["depth"] == 0


def test_a_rhea_selector_filters_what_it_gets(router: RouterProcess, rhea: Rhea) -> None:
    colours = ["red" if i % 2 else "blue" for i in range(6)]
    messages = [{"body": f"m{i}", "properties": {"colour": c}} for i, c in enumerate(colours)]
    rhea("send.js", address="jobs.rhea-sel", messages=messages)

    red = rhea("consume.js", address="jobs.rhea-sel", count=3, selector="colour = 'red'")
    assert bodies(red) == ["m1", "m3", "m5"]
    assert [m["properties"] for m in red["received"]] == [{"colour": "red"}] * 3
    assert bodies(rhea("consume.js", address="jobs.rhea-sel", count=3)) == ["m0", "m2", "m4"]


def test_a_rhea_selector_is_listed_in_the_attach_answer(
    tmp_path: Path, router: RouterProcess
) -> None:
    script = NodeScript(
        "consume.js",
        tmp_path,
        **endpoint(router),
        address="jobs.rhea-sel2",
        count=0,
        selector="colour = 'red'",
    )
    try:
        wait_for(lambda: script.has_event("ready"), timeout=SCRIPT_TIMEOUT, what="rhea attach")
        ready = next(line for line in script.lines if line.get("event") == "ready")
        assert ready["filter"] == ["jms-selector"]  # the filter applied, under rhea's key
        wait_for(script.finished, timeout=SCRIPT_TIMEOUT, what="rhea consume.js")
    finally:
        script.close()
