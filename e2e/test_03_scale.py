"""kubectl scale of a Router while reliable traffic crosses it: every message accepted, and
received, exactly once; and a rollout stuck on crash-looping pods, unstuck by the operator."""

from __future__ import annotations

import time

import kube
from conftest import say
from test_02_traffic import CORE, EDGE

COUNT = 3000
RATE = 150  # msgs/s: the scale-in happens mid-stream


def test_scaling_core_in_under_traffic_loses_and_duplicates_nothing(
    network: str, images: dict[str, str]
) -> None:
    image = images["router"]
    rx = kube.routernet(
        network, "rx-scale", image, "receive", "orders.scale", "--url", EDGE, "--count", str(COUNT)
    )
    tx = kube.routernet(
        network, "tx-scale", image, "send", "orders.scale", "--url", CORE,
        "--count", str(COUNT), "--rate", str(RATE),
    )  # fmt: skip
    kube.wait_for("the sender sending", lambda: kube.log_has(network, tx, "accepted"), 60, every=1)
    started = time.monotonic()
    kube.kubectl("-n", network, "scale", "rtr", "core", "--replicas=2")
    sent = kube.summary(kube.finish(network, tx, 180))
    received = kube.summary(kube.finish(network, rx, 180))
    assert (sent["sent"], sent["accepted"], sent["rejected"], sent["unresolved"]) == (
        COUNT, COUNT, 0, 0,
    ), sent  # fmt: skip
    assert (received["distinct"], received["duplicates"]) == (COUNT, 0), received
    kube.wait_for(
        "core Ready at 2 replicas",
        lambda: (
            kube.ready_routers(network, ["core"])
            and kube.get(network, "statefulset", "core")["status"].get("replicas") == 2
        ),
        120,
    )
    assert not kube.exists(network, "pod", "core-2")
    say(
        f"kubectl scale rtr core --replicas=2 during {COUNT} messages at {RATE}/s: all"
        f" accepted ({sent['resent']} resent), each received once; core Ready at 2 after"
        f" {time.monotonic() - started:.0f} s"
    )


CRASHING = {
    "apiVersion": "routernet.io/v1alpha1",
    "kind": "Router",
    "metadata": {"name": "crashy"},
    "spec": {
        "replicas": 3,
        "network": "crashy",
        "podTemplate": {
            "spec": {
                "containers": [
                    {
                        "name": "router",
                        "command": ["sh", "-c", "echo broken on purpose >&2; exit 1"],
                    }
                ]
            }
        },
    },
}


def restarts(network: str, pod: str) -> int:
    statuses = (kube.get(network, "pod", pod).get("status") or {}).get("containerStatuses") or []
    return int(statuses[0].get("restartCount", 0)) if statuses else 0


def test_a_rollout_stuck_on_crash_looping_pods_is_unstuck(network: str) -> None:
    """Every pod crash-loops; the template is fixed; the first new pod cannot be Ready without
    neighbors, which are the old pods the StatefulSet will not replace first: the operator
    deletes them."""
    pods = [f"crashy-{i}" for i in range(3)]
    kube.apply(network, CRASHING)
    kube.wait_for(
        "every crashy pod crash-looping",
        lambda: all(kube.exists(network, "pod", p) and restarts(network, p) >= 1 for p in pods),
        120,
    )
    fixed = time.monotonic()
    kube.kubectl("-n", network, "patch", "rtr", "crashy", "--type", "json", "-p",
                 '[{"op": "remove", "path": "/spec/podTemplate"}]')  # fmt: skip
    kube.wait_for("crashy Ready", lambda: kube.ready_routers(network, ["crashy"]), 180)
    status = kube.get(network, "statefulset", "crashy")["status"]
    assert status["currentRevision"] == status["updateRevision"], status
    operator_log = kube.kubectl("-n", "rn-e2e-system", "logs", "deploy/rn-e2e-routernet")
    unstuck = [line for line in operator_log.splitlines() if "deleted pod crashy-" in line]
    assert unstuck, "the operator deleted no stuck pod"
    say(
        f"3 crash-looping pods, template fixed: Ready {time.monotonic() - fixed:.0f} s later,"
        f" the operator deleting {len(unstuck)} stuck on the old revision"
    )
    kube.kubectl("-n", network, "delete", "rtr", "crashy", "--wait=true", timeout=120)
