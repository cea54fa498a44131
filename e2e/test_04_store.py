"""A queue on a Router with a store keeps its messages across kubectl delete pod of its host."""

from __future__ import annotations

import re

import kube
from conftest import say
from test_02_traffic import CORE

QUEUE = "jobs.e2e"
REACHABLE = "routernet.io/reachable-routers"
COUNT = 200


def host_of(network: str, node: str) -> str | None:
    for pod in ("core-0", "core-1", "core-2"):
        if kube.exists(network, "pod", pod) and re.search(
            rf"event=node\.created node={re.escape(node)} ",
            kube.kubectl("-n", network, "logs", pod),
        ):
            return pod
    return None


def mesh_whole(network: str) -> bool:
    """Every core pod reports reaching every other."""
    pods = {
        p["metadata"]["name"]: (p["metadata"].get("annotations") or {}).get(REACHABLE, "")
        for p in kube.get(network, "pods")["items"]
        if p["metadata"]["name"].startswith("core-")
    }
    return all(set(pods) - {name} <= set(seen.split(",")) for name, seen in pods.items())


def test_a_queue_keeps_its_messages_when_its_host_pod_is_deleted(
    network: str, images: dict[str, str]
) -> None:
    image = images["router"]
    tx = kube.routernet(
        network, "tx-jobs", image, "send", QUEUE, "--url", CORE, "--count", str(COUNT), "--durable"
    )
    sent = kube.summary(kube.finish(network, tx, 120))
    assert (sent["accepted"], sent["unresolved"]) == (COUNT, 0), sent
    host = kube.wait_for(f"the host of {QUEUE}", lambda: host_of(network, QUEUE), 30)
    uid = kube.get(network, "pod", host)["metadata"]["uid"]
    kube.kubectl("-n", network, "delete", "pod", host, "--wait=true", timeout=120)
    kube.wait_for(
        f"{host} back and Ready",
        lambda: (
            kube.get(network, "pod", host)["metadata"]["uid"] != uid
            and kube.condition(kube.get(network, "pod", host), "Ready").get("status") == "True"
        ),
        180,
    )
    # Ready says it has a neighbor; a consumer on any router needs all of them to reach the
    # host again: as each router reports on its Pod (what meshConnected is made of).
    kube.wait_for(f"the mesh to reach {host} again", lambda: mesh_whole(network), 120)
    rx = kube.routernet(
        network, "rx-jobs", image, "receive", QUEUE, "--url", CORE, "--count", str(COUNT),
        "--idle", "30",
    )  # fmt: skip
    received = kube.summary(kube.finish(network, rx, 120))
    assert (received["distinct"], received["duplicates"]) == (COUNT, 0), received
    say(
        f"{COUNT} durable messages on queue {QUEUE} (hosted by {host}), kubectl delete pod"
        f" {host}: all {COUNT} received from its successor, once each"
    )
