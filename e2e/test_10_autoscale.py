"""Autoscaling proven on pods: a Router with autoscaling (mode operator, 1 to 3 routers, a
messages-per-second target) scales out under load from a Job in the cluster (routernet send
--ramp against its client Service) and back in after it; an in-cluster routernet receive gets
every message exactly once; the Router's status.autoscaling and conditions tell the story."""

from __future__ import annotations

import time
from typing import Any

import kube
from conftest import say

ROUTER = "elastic"
TARGET = 200  # msgs/s per router
RAMP = "0:50,10:600,100:600,105:0"  # 3x the target for 90 s: three routers
AUTOSCALED = {
    "apiVersion": "routernet.io/v1alpha1",
    "kind": "Router",
    "metadata": {"name": ROUTER},
    "spec": {
        "replicas": 1,
        "network": "elastic",
        "autoscaling": {
            "minReplicas": 1,
            "maxReplicas": 3,
            "targets": {"messagesPerSecond": TARGET},
            # Back to one router a minute after the load, not the HPA's default five.
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}},
        },
    },
}


def load_job(network: str, image: str) -> dict[str, Any]:
    """The load generator as a Job, as an operator of the network would run one."""
    command = ["routernet", "send", "load.elastic", "--url", f"amqp://{ROUTER}:5672",
               "--ramp", RAMP, "--connections", "3"]  # fmt: skip
    pod = kube.client_pod(network, "load", image, command)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "load", "namespace": network},
        "spec": {"backoffLimit": 0, "template": {"spec": pod["spec"]}},
    }


def replicas(network: str) -> int:
    return int(kube.get(network, "router", ROUTER)["spec"].get("replicas", 0))


def test_a_router_scales_out_under_load_and_back_in_after_it(
    network: str, images: dict[str, str]
) -> None:
    image = images["router"]
    kube.apply(network, AUTOSCALED)
    kube.wait_for(f"{ROUTER} Ready", lambda: kube.ready_routers(network, [ROUTER]), 180)
    # --idle counts from its start too, and the load Job's pod may take a minute to send.
    rx = kube.routernet(
        network, "rx-elastic", image, "receive", "load.elastic", "--url", f"amqp://{ROUTER}:5672",
        "--idle", "120",
    )  # fmt: skip
    kube.wait_for(
        "the receiver attached",
        lambda: kube.log_has(network, rx, "links 1/1"),
        kube.CLIENT_ATTACH_SECONDS,
    )
    started = time.monotonic()
    kube.apply(network, load_job(network, image))
    story: list[tuple[float, int]] = [(0.0, 1)]

    def note() -> int:
        now = replicas(network)
        if now != story[-1][1]:
            story.append((time.monotonic() - started, now))
        return now

    kube.wait_for("scaling out", lambda: note() >= 2, 150, every=3)
    out_status = kube.get(network, "router", ROUTER)["status"]
    kube.wait_for(
        "the load to end",
        lambda: note() and kube.get(network, "job", "load")["status"].get("succeeded") == 1,
        240,
        every=3,
    )
    peak = max(count for _, count in story)
    kube.wait_for("scaling back in to one", lambda: note() == 1, 300, every=3)
    pods = kube.kubectl("-n", network, "get", "pods", "-l", "job-name=load", "-o", "name").split()
    sent = kube.summary(kube.kubectl("-n", network, "logs", pods[0]))
    received = kube.summary(kube.finish(network, rx, 180))
    assert (sent["rejected"], sent["unresolved"]) == (0, 0), sent
    assert sent["accepted"] == sent["sent"] > 0, sent
    assert (received["distinct"], received["duplicates"]) == (sent["accepted"], 0), received

    status = kube.get(network, "router", ROUTER)["status"]
    autoscaling = status["autoscaling"]
    assert autoscaling["mode"] == "operator"
    assert out_status["autoscaling"]["desiredReplicas"] >= 2, out_status["autoscaling"]
    assert "messagesPerSecond" in out_status["autoscaling"]["currentLoad"]
    assert autoscaling["lastScaleReason"], autoscaling
    assert kube.condition({"status": status}, "ScalingActive").get("status") == "True"
    assert kube.condition({"status": status}, "AbleToScale").get("status") == "True"
    timeline = ", ".join(f"{count} at {at:.0f} s" for at, count in story)
    say(
        f"Router {ROUTER} (1 to 3, {TARGET} msgs/s each) under --ramp {RAMP}: {timeline};"
        f" peak {peak}; {sent['accepted']} messages accepted, each received once; last"
        f" decision: {autoscaling['lastScaleReason']}"
    )
    kube.kubectl("-n", network, "delete", "rtr", ROUTER, "--wait=true", timeout=120)
