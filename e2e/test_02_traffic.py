"""Traffic through the examples/ network from clients in the cluster, through the client
Services and the routers' stable names: core to edge, request/response across the edges,
multicast; and an Address changed while it runs, applied in the pods without a restart."""

from __future__ import annotations

import json

import kube
from conftest import say

CORE = "amqp://core:5672"
EDGE = "amqp://edge:5672"


def pod_url(pod: str) -> str:
    router = pod.rsplit("-", 1)[0]
    return f"amqp://{pod}.{router}-peers:5672"


def test_messages_from_core_reach_a_consumer_on_an_edge(
    network: str, images: dict[str, str]
) -> None:
    image = images["router"]
    rx = kube.routernet(
        network, "rx-orders", image, "receive", "orders.e2e", "--url", EDGE, "--count", "100"
    )
    tx = kube.routernet(
        network, "tx-orders", image, "send", "orders.e2e", "--url", CORE, "--count", "100"
    )
    sent = kube.summary(kube.finish(network, tx, 120))
    received = kube.summary(kube.finish(network, rx, 120))
    assert (sent["accepted"], sent["rejected"], sent["unresolved"]) == (100, 0, 0), sent
    assert (received["distinct"], received["duplicates"]) == (100, 0), received
    say("core -> edge through the client Services: 100 sent, 100 accepted, each received once")


def test_a_request_from_one_edge_is_answered_by_a_service_on_the_other(
    network: str, images: dict[str, str], clients: str
) -> None:
    image = images["router"]
    service = kube.peer(
        network, "echo", image, clients, "echo", pod_url("edge-0"), "requests.echo", "90"
    )
    kube.wait_for("the service attached", lambda: kube.log_has(network, service, "serving"), 60)
    try:
        request = kube.routernet(
            network,
            "request",
            image,
            "request",
            "requests.echo",
            "--url",
            pod_url("edge-1"),
            "--body",
            "ping",
        )
        reply = kube.summary(kube.finish(network, request, 60))
    finally:
        kube.kubectl("-n", network, "delete", "pod", service, "--wait=false")
    assert reply["body"] == "PING", reply
    say("edge-1 -> edge-0 request/response: sent 'ping', got 'PING'")


def test_a_reading_reaches_every_subscriber_of_a_multicast_address(
    network: str, images: dict[str, str]
) -> None:
    image = images["router"]
    address = "sensors.kitchen.temperature"
    places = {"core": CORE, "edge-0": pod_url("edge-0"), "edge-1": pod_url("edge-1")}
    subscribers = {
        where: kube.routernet(
            network,
            f"sub-{where}",
            image,
            "receive",
            address,
            "--url",
            url,
            "--count",
            "1",
            "--print",
        )
        for where, url in places.items()
    }
    for pod in subscribers.values():
        kube.wait_for(
            f"{pod} attached",
            lambda pod=pod: kube.log_has(network, pod, "links 1/1"),
            kube.CLIENT_ATTACH_SECONDS,
        )
    tx = kube.routernet(
        network,
        "publish",
        image,
        "send",
        address,
        "--url",
        CORE,
        "--count",
        "1",
        "--body",
        "21.5 C",
    )
    sent = kube.summary(kube.finish(network, tx, 60))
    assert sent["accepted"] == 1, sent
    for where, pod in subscribers.items():
        log = kube.finish(network, pod, 60)
        lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
        assert lines[0]["body"] == "21.5 C" and lines[-1]["distinct"] == 1, (where, lines)
    say(
        f"multicast {address}: one reading published on core, a copy on each of {', '.join(places)}"
    )


def copies(network: str, image: str, address: str, places: dict[str, str]) -> dict[str, int]:
    """One message sent from core to ``address`` while a consumer waits at each place: how
    many each got (each consumer stops 20 s after its last message, or after 20 s of none)."""
    consumers = {
        where: kube.routernet(
            network, f"rx-{where}", image, "receive", address, "--url", url, "--idle", "20"
        )
        for where, url in places.items()
    }
    for pod in consumers.values():
        kube.wait_for(
            f"{pod} attached",
            lambda pod=pod: kube.log_has(network, pod, "links 1/1"),
            kube.CLIENT_ATTACH_SECONDS,
        )
    tx = kube.routernet(network, "tx-copies", image, "send", address, "--url", CORE, "--count", "1")
    assert kube.summary(kube.finish(network, tx, 60))["accepted"] == 1
    return {
        where: kube.summary(kube.finish(network, pod, 60))["distinct"]
        for where, pod in consumers.items()
    }


def test_an_address_changed_is_applied_in_the_running_pods(
    network: str, images: dict[str, str]
) -> None:
    """requests, closest, made multicast: the routers apply it from their ConfigMap, and a
    request then reaches every consumer, where it reached one."""
    image = images["router"]
    routers = [
        p for p in kube.get(network, "pods", None)["items"]
        if p["metadata"]["name"].startswith(("core-", "edge-"))
    ]  # fmt: skip

    def identities() -> dict[str, tuple[str, int]]:
        return {
            p["metadata"]["name"]: (
                p["metadata"]["uid"],
                p["status"]["containerStatuses"][0]["restartCount"],
            )
            for p in kube.get(network, "pods", None)["items"]
            if p["metadata"]["name"] in {r["metadata"]["name"] for r in routers}
        }

    before = identities()
    places = {"edge-0": pod_url("edge-0"), "edge-1": pod_url("edge-1")}
    assert sorted(copies(network, image, "requests.fanout", places).values()) == [0, 1]
    kube.kubectl(
        "-n", network, "patch", "address", "requests", "--type", "merge",
        "-p", '{"spec": {"distribution": "multicast"}}',
    )  # fmt: skip
    change = 'changes="address ~prefix:requests multicast"'
    for pod in before:
        kube.wait_for(
            f"{pod} to apply the change",
            lambda pod=pod: kube.log_has(network, pod, change),
            60,
            every=1,
        )
    assert copies(network, image, "requests.fanout", places) == {"edge-0": 1, "edge-1": 1}
    assert identities() == before, "no pod restarted or was replaced"
    address = kube.get(network, "address", "requests")
    assert kube.condition(address, "Ready").get("status") == "True"
    say(
        "Address requests closest -> multicast: applied by every router from its ConfigMap,"
        " no pod restarted; a request then reached both consumers, where it reached one"
    )
