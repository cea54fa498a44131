"""Scaling in a Router with a store without losing messages
(operator/router_operator/planning/handoff.py): the hosts shrink at once, the StatefulSet only
once every leaving pod reports its store empty (router/pod/status.py's ``routernet.io/store``).
Pure, through the reconciler against a fake API, and the kopf handlers against the kmock emulator
watching the pods' reports."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from router_operator.kubernetes.environment import OperatorConfig
from router_operator.kubernetes.reconciler import Memory, Snapshot, reconcile_namespace
from router_operator.planning import adapter
from router_operator.planning.handoff import IDLE, MOVING, STORE_HAND_OFF, HandOff, hand_off
from router_operator.planning.mesh import PodReport, pod_report
from router_operator.planning.names import selector_labels
from router_operator.planning.planner import AddressDecl, RouterDecl, plan_namespace
from router_operator.resources.nodes import NodeDecl, StoreDecl
from test_operator_handlers import (
    NS,
    ROUTERS,
    Cluster,
    FakeApi,
    body,
    call,
    cluster,
    condition,
    create,
    eventually,
    get,
    operator,
    path,
    pod_configs,
    reconciled,
)

from router.nodes.config import NodeSettings
from router.pod.report import ANNOTATION, STORE_ANNOTATION

__all__ = ["cluster"]  # the fixture, imported for the kmock tests below

pytestmark = pytest.mark.kmock(cls=Cluster)


# --- the step, pure ------------------------------------------------------------------------------


@pytest.mark.parametrize(("desired", "current"), [(3, 3), (3, 1), (2, 0), (0, 0)])
def test_scaling_out_or_holding_still_is_applied_at_once(desired: int, current: int) -> None:
    step = hand_off("hub", desired, current, {})
    assert (step.replicas, step.hosts, step.waiting, step.holding) == (desired, desired, (), False)
    decl = RouterDecl("hub", replicas=desired, store=StoreDecl())
    assert step.apply(decl) is decl


def test_a_scale_in_keeps_the_leaving_pods_until_each_is_empty() -> None:
    step = hand_off("hub", 1, 3, {})
    assert (step.replicas, step.hosts, step.holding) == (3, 1, True)
    assert step.waiting == (("hub-1", None), ("hub-2", None))
    decl = step.apply(RouterDecl("hub", replicas=1, store=StoreDecl()))
    assert (decl.replicas, decl.hosts) == (3, 1)

    reports: dict[str, str | None] = {"hub-0": "host", "hub-1": "empty", "hub-2": "moving 3"}
    step = hand_off("hub", 1, 3, reports)
    assert step.waiting == (("hub-2", "moving 3"),)
    assert step.message == (
        "scaling in from 3 to 1 replicas: the StatefulSet keeps 3 pods until each leaving one"
        " has moved its nodes to the 1 that stay; waiting for hub-2 (moving 3 nodes)"
    )
    # Still a host (the new config not applied yet), or a word it does not know: it waits.
    for value in ("host", "moving 1", "gone", None):
        assert hand_off("hub", 1, 3, {**reports, "hub-2": value}).holding, value
    said = hand_off("hub", 2, 3, {"hub-2": "host"}).message
    assert said.endswith("waiting for hub-2 (still a host)"), said

    step = hand_off("hub", 1, 3, {**reports, "hub-2": "empty"})
    assert (step.replicas, step.hosts, step.holding) == (1, 1, False)
    assert step.message == "no scale-in in progress: its router pod hosts the nodes"
    assert hand_off("hub", 3, 3, {}).message.endswith("its 3 router pods host the nodes")


def test_the_planner_keeps_every_pod_but_hosts_on_the_first() -> None:
    node = NodeDecl("hub", NodeSettings())
    jobs = AddressDecl("jobs", prefix="jobs", node=node, creation_timestamp="2026-01-01T00:00:00Z")
    hub = RouterDecl("hub", replicas=3, hosts=1, store=StoreDecl())
    plan = plan_namespace(NS, [hub, RouterDecl("core")], [jobs])
    pods = plan.pods()
    assert sorted(pods) == ["core-0", "hub-0", "hub-1", "hub-2"]
    for name, pod in pods.items():
        assert pod.config is not None
        [address] = pod.config.addresses
        assert address.node is not None and address.node.hosts == ["hub-0"], name
    # The leaving pods stay in the mesh (what they hold travels through it) with their store.
    connectors = {c.name for c in pods["hub-2"].config.connectors} if pods["hub-2"].config else ()
    assert {"inter-router/hub-0", "inter-router/hub-1"} <= set(connectors)
    assert pods["hub-2"].config is not None and pods["hub-2"].config.store.path


# --- the reconciler ------------------------------------------------------------------------------


class ObjectsApi(FakeApi):
    """A fake API that keeps the objects applied, by kind/name."""

    def __init__(self) -> None:
        super().__init__()
        self.objects: dict[str, dict[str, Any]] = {}

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        self.objects[f"{obj['kind']}/{obj['metadata']['name']}"] = dict(obj)
        return super().apply(obj)

    def replicas(self) -> int:
        return int(self.objects["StatefulSet/hub"]["spec"]["replicas"])

    def hosts(self) -> dict[str, list[str]]:
        data = self.objects["ConfigMap/hub-config"]["data"]
        return {
            key.removesuffix(".json"): json.loads(text)["addresses"][0]["node"]["hosts"]
            for key, text in data.items()
            if key.endswith(".json")
        }

    def handoff(self) -> dict[str, Any]:
        return condition({"status": self.statuses["Router/hub"]}, STORE_HAND_OFF)


HUB = {"replicas": 1, "store": {"size": "1Gi"}}
JOBS = body("Address", "jobs", {"prefix": "jobs", "node": {"router": "hub"}})


def stores(**values: str) -> dict[str, PodReport]:
    """Pods by name (hub_0: hub-0) with their store reports."""
    names = {key: key.replace("_", "-") for key in values}
    return {names[key]: PodReport(names[key], store=v) for key, v in values.items()}


def test_reconcile_holds_the_statefulset_until_the_leaving_pods_are_empty() -> None:
    routers = (body("Router", "hub", HUB),)
    uid = "uid-hub"
    api = ObjectsApi()
    snapshot = Snapshot(NS, routers=routers, addresses=(JOBS,), statefulset_replicas={uid: 3})
    reconcile_namespace(snapshot, api, OperatorConfig())
    assert api.replicas() == 3
    assert api.hosts() == {f"hub-{i}": ["hub-0"] for i in range(3)}
    # The leaving pods may still write their reports onto their Pods.
    role = api.objects["Role/hub-config-reader"]
    [pods] = [r["resourceNames"] for r in role["rules"] if r["resources"] == ["pods"]]
    assert pods == ["hub-0", "hub-1", "hub-2"]
    handoff = api.handoff()
    assert (handoff["status"], handoff["reason"]) == ("True", MOVING)
    assert "hub-1 (not reported), hub-2 (not reported)" in handoff["message"]

    pods = stores(hub_0="host", hub_1="empty", hub_2="moving 2")
    api = ObjectsApi()
    snapshot = Snapshot(
        NS, routers=routers, addresses=(JOBS,), statefulset_replicas={uid: 3}, pods=pods
    )
    reconcile_namespace(snapshot, api, OperatorConfig())
    assert api.replicas() == 3
    assert api.handoff()["message"].endswith("waiting for hub-2 (moving 2 nodes)")

    pods = stores(hub_0="host", hub_1="empty", hub_2="empty")
    api = ObjectsApi()
    snapshot = Snapshot(
        NS, routers=routers, addresses=(JOBS,), statefulset_replicas={uid: 3}, pods=pods
    )
    reconcile_namespace(snapshot, api, OperatorConfig())
    assert api.replicas() == 1 and api.hosts() == {"hub-0": ["hub-0"]}
    handoff = api.handoff()
    assert (handoff["status"], handoff["reason"]) == ("False", IDLE)


def test_a_router_without_store_scales_in_at_once() -> None:
    api = ObjectsApi()
    routers = (body("Router", "hub", {"replicas": 1}),)
    snapshot = Snapshot(NS, routers=routers, statefulset_replicas={"uid-hub": 3})
    reconcile_namespace(snapshot, api, OperatorConfig())
    assert api.replicas() == 1
    with pytest.raises(KeyError):
        api.handoff()


def test_the_replicas_last_applied_count_over_a_stale_watch() -> None:
    """Scaled out to 3 and, before the watch shows it, back to 1: the pods just made may
    already host nodes, so they hand off like any others."""
    memory = Memory()
    api = ObjectsApi()
    out = {**HUB, "replicas": 3}
    stale = {"uid-hub": 1}
    routers = (body("Router", "hub", out),)
    snapshot = Snapshot(NS, routers=routers, addresses=(JOBS,), statefulset_replicas=stale)
    reconcile_namespace(snapshot, api, OperatorConfig(), memory)
    assert api.replicas() == 3 and memory.replicas == {"uid-hub": 3}
    routers = (body("Router", "hub", HUB, generation=3),)
    snapshot = Snapshot(NS, routers=routers, addresses=(JOBS,), statefulset_replicas=stale)
    reconcile_namespace(snapshot, api, OperatorConfig(), memory)
    assert api.replicas() == 3 and api.hosts()["hub-2"] == ["hub-0"]


def test_status_says_why_the_pods_are_kept() -> None:
    parsed = adapter.parse("Router", body("Router", "hub", HUB))
    outcome = adapter.RouterOutcome("applied", "Applied", "ok", 1, 3)
    step = HandOff("hub", 1, 3, 1, (("hub-1", "moving 1"), ("hub-2", None)))
    status = adapter.router_status(parsed, outcome, None, handoff=step)
    cond = condition({"status": status.model_dump(mode="json")}, STORE_HAND_OFF)
    assert (cond["status"], cond["reason"]) == ("True", MOVING)
    assert cond["message"].endswith("waiting for hub-1 (moving 1 node), hub-2 (not reported)")
    status = adapter.router_status(parsed, outcome, None)
    assert STORE_HAND_OFF not in {c.type for c in status.conditions}


# --- the operator, watching the pods' reports (kmock) --------------------------------------------

PODS = "/api/v1/namespaces/msg/pods"


def pod_body(ordinal: int, store: str | None) -> dict[str, Any]:
    """A pod of hub as its StatefulSet makes it, with the reports its router wrote."""
    annotations = {ANNOTATION: ",".join(f"hub-{i}" for i in range(3) if i != ordinal)}
    if store is not None:
        annotations[STORE_ANNOTATION] = store
    meta = {
        "name": f"hub-{ordinal}",
        "namespace": NS,
        "labels": {
            **selector_labels("hub"),
            "app.kubernetes.io/managed-by": "routernet-operator",
            "routernet.io/network": "default",
            "routernet.io/role": "interior",
        },
        "annotations": annotations,
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta}


@pytest.mark.asyncio
async def test_a_scale_in_completes_once_the_leaving_pods_report_empty(cluster: Cluster) -> None:
    await create(cluster, "routers", "hub", {**HUB, "replicas": 3})
    await create(cluster, "addresses", "jobs", {"prefix": "jobs", "node": {"router": "hub"}})
    async with operator():
        await eventually(lambda: reconciled(cluster, "routers", "hub"))
        for i in range(3):
            await call(cluster, "POST", PODS, pod_body(i, "host"))
            assert pod_report(pod_body(i, "host")).store == "host"

        # What an HPA does: the hosts shrink at once, the pods stay.
        await call(cluster, "PATCH", path("routers", "hub", "scale"), {"spec": {"replicas": 1}})

        def holding(message: str) -> dict[str, Any]:
            router = get(cluster, ROUTERS, "hub")
            cond = condition(router, STORE_HAND_OFF)
            assert (cond["status"], cond["reason"]) == ("True", MOVING), cond
            assert cond["message"].endswith(message), cond
            assert get(cluster, "apps/v1/statefulsets", "hub")["spec"]["replicas"] == 3
            configs = pod_configs(cluster, "hub")
            assert set(configs) == {"hub-0", "hub-1", "hub-2"}
            for config in configs.values():
                assert config["addresses"][0]["node"]["hosts"] == ["hub-0"]
            return router

        router = await eventually(lambda: holding("hub-1 (still a host), hub-2 (still a host)"))
        assert condition(router, adapter.CONFIG_APPLIED)["observedGeneration"] == 2

        # The leaving routers apply their configs and move their nodes: each report reconciles.
        await call(cluster, "PATCH", f"{PODS}/hub-1", pod_body(1, "moving 2"))
        await call(cluster, "PATCH", f"{PODS}/hub-2", pod_body(2, "empty"))
        await eventually(lambda: holding("waiting for hub-1 (moving 2 nodes)"))
        await call(cluster, "PATCH", f"{PODS}/hub-1", pod_body(1, "empty"))

        def scaled_in() -> dict[str, Any]:
            assert get(cluster, "apps/v1/statefulsets", "hub")["spec"]["replicas"] == 1
            # (The ConfigMap keeps the others' keys here: kmock merges what a real server-side
            # apply replaces; the Role's list is replaced either way.)
            role = get(cluster, "rbac.authorization.k8s.io/v1/roles", "hub-config-reader")
            [pods] = [r["resourceNames"] for r in role["rules"] if r["resources"] == ["pods"]]
            assert pods == ["hub-0"]
            router = get(cluster, ROUTERS, "hub")
            cond = condition(router, STORE_HAND_OFF)
            assert (cond["status"], cond["reason"]) == ("False", IDLE), cond
            return router

        await eventually(scaled_in)
