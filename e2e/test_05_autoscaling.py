"""A Router with autoscaling.mode hpa gets its HorizontalPodAutoscaler, which the cluster takes."""

from __future__ import annotations

from typing import Any

import kube
from conftest import say

HPA_ROUTER = {
    "apiVersion": "routernet.io/v1alpha1",
    "kind": "Router",
    "metadata": {"name": "scaled"},
    "spec": {
        "replicas": 1,
        "network": "scaled",
        "autoscaling": {
            "mode": "hpa",
            "minReplicas": 1,
            "maxReplicas": 3,
            "targets": {"messagesPerSecond": 1000, "connections": 500},
        },
    },
}


def test_a_router_with_hpa_autoscaling_gets_its_hpa(network: str) -> None:
    kube.apply(network, HPA_ROUTER)
    hpa = kube.wait_for(
        "HorizontalPodAutoscaler scaled",
        lambda: kube.exists(network, "hpa", "scaled") and kube.get(network, "hpa", "scaled"),
        60,
    )
    spec = hpa["spec"]
    assert spec["scaleTargetRef"] == {
        "apiVersion": "routernet.io/v1alpha1",
        "kind": "Router",
        "name": "scaled",
    }
    assert (spec["minReplicas"], spec["maxReplicas"]) == (1, 3)
    metrics = {m["pods"]["metric"]["name"] for m in spec["metrics"]}
    assert metrics == {"routernet_deliveries", "routernet_connections"}, spec["metrics"]
    owners = [ref["name"] for ref in hpa["metadata"]["ownerReferences"]]
    assert owners == ["scaled"]
    # The HPA controller finds the Router's scale subresource; without a metrics adapter it
    # has no metrics, and its conditions say so.
    kube.wait_for(
        "the HPA controller to read the Router's scale",
        lambda: (
            kube.condition(kube.get(network, "hpa", "scaled"), "AbleToScale").get("status")
            == "True"
        ),
        90,
    )

    def inactive() -> dict[str, Any] | None:
        found = kube.condition(kube.get(network, "hpa", "scaled"), "ScalingActive")
        return found if found.get("status") == "False" else None

    why = kube.wait_for("the HPA to say why it cannot scale", inactive, 90)
    assert why["reason"] == "FailedGetPodsMetric", why
    assert "custom.metrics.k8s.io" in why["message"], why
    kube.kubectl("-n", network, "delete", "rtr", "scaled", "--wait=true", timeout=120)
    kube.wait_for(
        "the HPA to go with its Router", lambda: not kube.exists(network, "hpa", "scaled"), 60
    )
    say(
        "Router scaled (autoscaling.mode hpa): its HPA made, read by the HPA controller"
        f" (ScalingActive False, {why['reason']}: {why['message'][:80]}...), gone with it"
    )
