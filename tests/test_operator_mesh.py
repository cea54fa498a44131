"""meshConnected: the operator's verdict on a network from what its router pods report on their
Pods (operator/router_operator/planning/mesh.py), in a Router's status (adapter, reconciler), and
kept current by the operator watching the pods (handlers, against the kmock emulator)."""

from __future__ import annotations

from typing import Any

import pytest
from router_operator.kubernetes.environment import OperatorConfig
from router_operator.kubernetes.handlers import MANAGED_BY_SELECTOR
from router_operator.kubernetes.reconciler import (
    Snapshot,
    reconcile_namespace,
    refresh_router_statuses,
)
from router_operator.planning import adapter
from router_operator.planning.mesh import (
    CONNECTED,
    NO_INTERIORS,
    NO_UPLINK,
    NOT_CONNECTED,
    NOT_REPORTED,
    PodReport,
    Verdict,
    mesh_verdicts,
    pod_report,
)
from router_operator.planning.names import selector_labels
from router_operator.planning.planner import RouterDecl
from router_operator.resources.models import READY
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
    reconciled,
    requests_to,
)

from router.pod.report import ANNOTATION

__all__ = ["cluster"]  # the fixture, imported for the kmock tests below

pytestmark = pytest.mark.kmock(cls=Cluster)


def interior(name: str, *sees: str, network: str = "default") -> PodReport:
    return PodReport(name, "interior", network, frozenset(sees))


def full_mesh(names: list[str]) -> dict[str, PodReport]:
    return {n: interior(n, *(m for m in names if m != n)) for n in names}


# --- the verdict, pure ---------------------------------------------------------------------------


@pytest.mark.parametrize("replicas", [1, 2, 3, 4, 5])
def test_every_interior_seeing_every_other_is_connected(replicas: int) -> None:
    names = [f"hub-{i}" for i in range(replicas)]
    verdict = mesh_verdicts([RouterDecl("hub", replicas=replicas)], full_mesh(names))["hub"]
    assert (verdict.status, verdict.reason, verdict.connected) == ("True", CONNECTED, True)
    if replicas == 1:
        assert verdict.message == "network 'default' has one interior router, hub-0"
    else:
        assert verdict.message == (
            f"each of the {replicas} interior routers of network 'default' sees the other"
            f" {replicas - 1}"
        )


@pytest.mark.parametrize("replicas", [2, 3, 4, 5])
def test_one_router_not_seeing_another_is_not_connected(replicas: int) -> None:
    names = [f"hub-{i}" for i in range(replicas)]
    pods = full_mesh(names)
    last = names[-1]
    pods[last] = interior(last, *names[1:-1])  # does not see hub-0
    verdict = mesh_verdicts([RouterDecl("hub", replicas=replicas)], pods)["hub"]
    assert (verdict.status, verdict.reason, verdict.connected) == ("False", NOT_CONNECTED, False)
    assert verdict.message == f"{last} does not see hub-0"


def test_interiors_of_several_routers_make_one_mesh() -> None:
    """Split into two partitions: each names who it misses, shortened."""
    decls = [RouterDecl("a", replicas=2), RouterDecl("b", replicas=2)]
    pods = {
        "a-0": interior("a-0", "a-1"),
        "a-1": interior("a-1", "a-0"),
        "b-0": interior("b-0", "b-1"),
        "b-1": interior("b-1", "b-0"),
    }
    verdicts = mesh_verdicts(decls, pods)
    assert verdicts["a"] == verdicts["b"]
    assert verdicts["a"].message == (
        "a-0 does not see b-0, b-1; a-1 does not see b-0, b-1; b-0 does not see a-0, a-1;"
        " and 1 more"
    )
    pods = full_mesh(["a-0", "a-1", "b-0", "b-1"])
    assert mesh_verdicts(decls, pods)["b"].status == "True"


def test_long_lists_are_shortened() -> None:
    names = [f"hub-{i}" for i in range(8)]
    pods = {n: interior(n) for n in names}  # nobody sees anybody
    verdict = mesh_verdicts([RouterDecl("hub", replicas=8)], pods)["hub"]
    assert verdict.message.startswith("hub-0 does not see hub-1, hub-2, hub-3 and 4 more;")
    assert verdict.message.endswith("; and 5 more")
    assert len(verdict.message) < 200


@pytest.mark.parametrize(
    ("hub_1", "why"),
    [
        (None, "no pod"),
        (PodReport("hub-1", "interior", "default", None), "no annotation yet"),
        (PodReport("hub-1", "interior", "default", frozenset({"hub-0"}), True), "terminating"),
        (PodReport("hub-1", "edge", "default", frozenset({"hub-0"})), "still runs as an edge"),
        (PodReport("hub-1", "interior", "other", frozenset({"hub-0"})), "still in another net"),
    ],
)
def test_a_missing_report_is_unknown(hub_1: PodReport | None, why: str) -> None:
    pods = full_mesh(["hub-0", "hub-1", "hub-2"])
    if hub_1 is None:
        del pods["hub-1"]
    else:
        pods["hub-1"] = hub_1
    pods["hub-2"] = interior("hub-2")  # sees nobody, but the verdict waits for hub-1
    verdict = mesh_verdicts([RouterDecl("hub", replicas=3)], pods)["hub"]
    assert (verdict.status, verdict.reason, verdict.connected) == ("Unknown", NOT_REPORTED, None)
    assert verdict.message == "no report yet from interior router hub-1 of network 'default'", why


def test_a_scale_up_waits_for_the_new_pods() -> None:
    pods = full_mesh(["hub-0", "hub-1"])
    assert mesh_verdicts([RouterDecl("hub", replicas=2)], pods)["hub"].status == "True"
    verdict = mesh_verdicts([RouterDecl("hub", replicas=4)], pods)["hub"]
    assert verdict.status == "Unknown" and "hub-2, hub-3" in verdict.message
    # Pods left over from a scale-down, and ids no longer in the network, count for nothing.
    pods = {**full_mesh(["hub-0", "hub-1", "hub-2"]), "hub-9": interior("hub-9")}
    assert mesh_verdicts([RouterDecl("hub", replicas=3)], pods)["hub"].status == "True"


def test_edges_are_ignored_for_the_interior_mesh_and_need_an_uplink() -> None:
    decls = [RouterDecl("hub", replicas=2), RouterDecl("leaf", replicas=2, role="edge")]
    pods = {
        **full_mesh(["hub-0", "hub-1"]),
        "leaf-0": PodReport("leaf-0", "edge", "default", frozenset({"hub-0"})),
        "leaf-1": PodReport("leaf-1", "edge", "default", frozenset()),
    }
    verdicts = mesh_verdicts(decls, pods)
    assert verdicts["hub"].status == "True"
    assert verdicts["leaf"] == Verdict("False", NO_UPLINK, "no uplink to an interior: leaf-1")

    pods["leaf-1"] = PodReport("leaf-1", "edge", "default", frozenset({"hub-1"}))
    verdicts = mesh_verdicts(decls, pods)
    assert verdicts["leaf"].status == "True"
    assert verdicts["leaf"].message == (
        "its 2 edge routers each have an uplink; each of the 2 interior routers of network"
        " 'default' sees the other 1"
    )
    # An uplink to a router that is no interior of the network is none.
    pods["leaf-1"] = PodReport("leaf-1", "edge", "default", frozenset({"elsewhere-0"}))
    assert mesh_verdicts(decls, pods)["leaf"].reason == NO_UPLINK
    # An edge that has not reported: unknown; the interiors do not wait for it.
    del pods["leaf-1"]
    verdicts = mesh_verdicts(decls, pods)
    assert verdicts["leaf"].status == "Unknown" and verdicts["hub"].status == "True"
    # The edge's own uplinks are fine, the mesh it hangs off is not: the edge says so.
    pods["leaf-1"] = PodReport("leaf-1", "edge", "default", frozenset({"hub-1"}))
    pods["hub-1"] = interior("hub-1")
    verdicts = mesh_verdicts(decls, pods)
    assert (
        verdicts["leaf"]
        == verdicts["hub"]
        == Verdict("False", NOT_CONNECTED, "hub-1 does not see hub-0")
    )


def test_networks_are_judged_apart() -> None:
    decls = [
        RouterDecl("a", replicas=2, network="blue"),
        RouterDecl("b", replicas=2, network="green"),
        RouterDecl("leaf", replicas=1, role="edge", network="red"),
    ]
    pods = {
        "a-0": interior("a-0", "a-1", network="blue"),
        "a-1": interior("a-1", "a-0", network="blue"),
        "b-0": interior("b-0", network="green"),
        "b-1": interior("b-1", "b-0", network="green"),
    }
    verdicts = mesh_verdicts(decls, pods)
    assert verdicts["a"].status == "True" and "network 'blue'" in verdicts["a"].message
    assert verdicts["b"] == Verdict("False", NOT_CONNECTED, "b-0 does not see b-1")
    assert verdicts["leaf"] == Verdict(
        "False", NO_INTERIORS, "network 'red' has no interior router pods"
    )


def test_a_pod_as_the_api_gives_it() -> None:
    pod = {
        "metadata": {
            "name": "hub-0",
            "labels": {"routernet.io/role": "interior", "routernet.io/network": "default"},
            "annotations": {ANNOTATION: "hub-2,hub-1", "other": "x"},
        },
        "status": {"phase": "Running"},
    }
    assert pod_report(pod) == interior("hub-0", "hub-1", "hub-2")
    pod["metadata"]["annotations"] = {}
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert pod_report(pod) == PodReport("hub-0", "interior", "default", None, True)
    assert pod_report({"metadata": {"name": "x", "annotations": {ANNOTATION: ""}}}) == (
        PodReport("x", None, None, frozenset())
    )


# --- in the status -------------------------------------------------------------------------------


def mesh_of(status: dict[str, Any]) -> tuple[Any, str, str, int | None]:
    cond = condition({"status": status}, adapter.MESH_CONNECTED)
    return status.get("meshConnected"), cond["status"], cond["reason"], cond["observedGeneration"]


def test_reconcile_and_refresh_write_the_verdict() -> None:
    routers = (body("Router", "hub", {"replicas": 2}, generation=3),)
    api = FakeApi()
    reconcile_namespace(Snapshot(NS, routers=routers), api, OperatorConfig())
    assert mesh_of(api.statuses["Router/hub"]) == (None, "Unknown", NOT_REPORTED, 3)

    pods = full_mesh(["hub-0", "hub-1"])
    api = FakeApi()
    result = reconcile_namespace(Snapshot(NS, routers=routers, pods=pods), api, OperatorConfig())
    status = api.statuses["Router/hub"]
    assert mesh_of(status) == (True, "True", CONNECTED, 3)
    assert condition({"status": status}, READY)["reason"] == "RoutersNotReady"  # apart from it

    stored = ({**routers[0], "status": status},)
    pods["hub-1"] = interior("hub-1")
    api = FakeApi()
    refresh_router_statuses(Snapshot(NS, routers=stored, pods=pods), api, result.outcomes)
    assert mesh_of(api.statuses["Router/hub"]) == (False, "False", NOT_CONNECTED, 3)
    assert api.applied == [], "a refresh applies nothing"


# --- the operator, watching pods (kmock) ---------------------------------------------------------


def pod_body(router: str, ordinal: int, role: str, reaches: str | None) -> dict[str, Any]:
    """A router pod as the StatefulSet controller makes it (its template's labels), with the
    report its router wrote (None: none yet)."""
    meta: dict[str, Any] = {
        "name": f"{router}-{ordinal}",
        "namespace": NS,
        "labels": {
            **selector_labels(router),
            "app.kubernetes.io/managed-by": "routernet-operator",
            "routernet.io/network": "default",
            "routernet.io/role": role,
        },
    }
    if reaches is not None:
        meta["annotations"] = {ANNOTATION: reaches}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta}


PODS = "/api/v1/namespaces/msg/pods"


@pytest.mark.asyncio
async def test_router_status_follows_the_pods_reports(cluster: Cluster) -> None:
    await create(cluster, "routers", "hub", {"replicas": 3})
    await create(cluster, "routers", "leaf", {"replicas": 1, "role": "edge"})
    async with operator():
        for name in ("hub", "leaf"):
            router = await eventually(lambda name=name: reconciled(cluster, "routers", name))
            assert mesh_of(router["status"])[1:3] == ("Unknown", NOT_REPORTED)

        # The pods start; hub-2 has not heard of hub-1 yet, and hub-1 has not reported.
        await call(cluster, "POST", PODS, pod_body("hub", 0, "interior", "hub-1,hub-2"))
        await call(cluster, "POST", PODS, pod_body("hub", 1, "interior", None))
        await call(cluster, "POST", PODS, pod_body("hub", 2, "interior", "hub-0"))
        await call(cluster, "POST", PODS, pod_body("leaf", 0, "edge", "hub-0"))

        def mesh(name: str, expected: str, message: str = "") -> dict[str, Any]:
            router = get(cluster, ROUTERS, name)
            cond = condition(router, adapter.MESH_CONNECTED)
            assert cond["status"] == expected and message in cond["message"], router
            return router

        hub_1 = "no report yet from interior router hub-1 of network 'default'"
        router = await eventually(lambda: mesh("hub", "Unknown", hub_1))
        assert condition(router, adapter.MESH_CONNECTED)["message"] == hub_1

        await call(cluster, "PATCH", f"{PODS}/hub-1", pod_body("hub", 1, "interior", "hub-0"))
        router = await eventually(lambda: mesh("hub", "False"))
        cond = condition(router, adapter.MESH_CONNECTED)
        assert cond["reason"] == NOT_CONNECTED and cond["observedGeneration"] == 1
        assert cond["message"] == "hub-1 does not see hub-2; hub-2 does not see hub-1"
        assert router["status"]["meshConnected"] is False
        assert mesh_of((await eventually(lambda: mesh("leaf", "False")))["status"])[0] is False

        for ordinal, reaches in ((1, "hub-0,hub-2"), (2, "hub-0,hub-1")):
            patch = pod_body("hub", ordinal, "interior", reaches)
            await call(cluster, "PATCH", f"{PODS}/hub-{ordinal}", patch)
        router = await eventually(lambda: mesh("hub", "True"))
        assert router["status"]["meshConnected"] is True
        assert condition(router, adapter.MESH_CONNECTED)["reason"] == CONNECTED
        leaf = await eventually(lambda: mesh("leaf", "True"))
        assert condition(leaf, adapter.MESH_CONNECTED)["message"].startswith("leaf-0 has an uplink")

        # A pod that goes (the StatefulSet controller will make it again): unknown until then.
        await call(cluster, "DELETE", f"{PODS}/hub-2")
        router = await eventually(lambda: mesh("hub", "Unknown"))
        assert "meshConnected" not in router["status"]

    # Only router pods were asked for (the API server filters them by label) ...
    lists = requests_to(cluster, "v1/pods", "GET")
    assert lists and all(r.params.get("labelSelector") == MANAGED_BY_SELECTOR for r in lists)
    # ... read, and never written to (kopf keeps no state on them).
    patches = requests_to(cluster, "v1/pods", "PATCH", "PUT")
    assert len(patches) == 3, [(r.name, r.data) for r in patches]  # the test's own
