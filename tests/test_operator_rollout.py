"""A Router's rollout unstuck (operator/router_operator/kubernetes/rollout.py): the pods its
StatefulSet waits for in vain (not Ready, on an old revision) are deleted, by the reconciler on a
StatefulSet's or a pod's event. Seen on a real cluster: every pod of a Router crash-looped, its
template was fixed, and the first new pod waited for Ready neighbors that were the old pods the
controller would not replace first. make e2e does it on a cluster."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from router_operator.kubernetes.api import ApiError
from router_operator.kubernetes.environment import OperatorConfig
from router_operator.kubernetes.reconciler import (
    Memory,
    Snapshot,
    reconcile_namespace,
    refresh_router_statuses,
)
from router_operator.kubernetes.rollout import stuck_pods
from router_operator.planning.mesh import PodReport, pod_report
from router_operator.planning.planner import RouterDecl, plan_namespace
from router_operator.rendering.router import render_stateful_set
from router_operator.resources.models import PAUSE_ANNOTATION
from test_operator_handlers import NS, FakeApi, body

OLD, NEW = "hub-5d8f", "hub-7c6b"
ROLLING = {"currentRevision": OLD, "updateRevision": NEW}


def pod(
    name: str, revision: str, ready: bool, terminating: bool = False, router: str = "hub"
) -> PodReport:
    return PodReport(
        name,
        "interior",
        "default",
        terminating=terminating,
        router=router,
        uid=f"uid-{name}",
        revision=revision,
        ready=ready,
    )


def test_only_pods_not_ready_on_an_old_revision_are_stuck() -> None:
    pods = [
        pod("hub-0", OLD, ready=False),  # crash-looping on the old template: stuck
        pod("hub-1", OLD, ready=True),  # serving: the rolling update's to replace
        pod("hub-2", NEW, ready=False),  # the new pod, waiting for its neighbors
        pod("hub-3", OLD, ready=False, terminating=True),  # going already
        pod("edge-0", OLD, ready=False, router="edge"),  # another Router's
    ]
    assert [p.name for p in stuck_pods("hub", ROLLING, pods)] == ["hub-0"]
    # No rollout known (no StatefulSet yet, or no status): nothing is stuck.
    assert stuck_pods("hub", None, pods) == []
    assert stuck_pods("hub", {}, pods) == []
    # A pod whose revision is not known (no label yet) is left alone.
    assert stuck_pods("hub", ROLLING, [replace(pod("hub-0", OLD, False), revision=None)]) == []


def test_a_pod_as_the_api_gives_it_says_its_router_revision_and_readiness() -> None:
    report = pod_report(
        {
            "metadata": {
                "name": "hub-0",
                "uid": "u-1",
                "labels": {
                    "app.kubernetes.io/instance": "hub",
                    "controller-revision-hash": OLD,
                    "routernet.io/role": "interior",
                },
            },
            "status": {"conditions": [{"type": "Ready", "status": "False"}]},
        }
    )
    assert (report.router, report.uid, report.revision, report.ready) == ("hub", "u-1", OLD, False)
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert pod_report({"metadata": {"name": "hub-0"}, **ready}).ready is True


class DeletingApi(FakeApi):
    """FakeApi that records deletions; a pod re-created since it was seen (another uid) is
    refused as the API server refuses the precondition."""

    def __init__(self, current_uids: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.deleted: list[tuple[str, str, str | None]] = []
        self.current_uids = dict(current_uids or {})

    def delete(
        self, api_version: str, kind: str, namespace: str, name: str, *, uid: str | None = None
    ) -> bool:
        current = self.current_uids.get(name, uid)
        if uid is not None and current != uid:
            raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: {uid}")
        self.deleted.append((kind, name, uid))
        return True


def snapshot(
    pods: list[PodReport], annotations: dict[str, str] | None = None, status: Any = None
) -> Snapshot:
    router = body("Router", "hub", {"replicas": 3})
    if annotations:
        router["metadata"]["annotations"] = annotations
    return Snapshot(
        NS,
        routers=(router,),
        statefulsets={"uid-hub": ROLLING if status is None else status},
        pods={p.name: p for p in pods},
    )


def outcomes(shot: Snapshot) -> dict[str, Any]:
    return reconcile_namespace(shot, FakeApi(), OperatorConfig()).outcomes


def test_a_stuck_rollout_is_unstuck_on_the_next_event() -> None:
    pods = [pod("hub-0", OLD, False), pod("hub-1", OLD, False), pod("hub-2", NEW, False)]
    shot = snapshot(pods)
    api = DeletingApi()
    result = refresh_router_statuses(shot, api, outcomes(shot))
    assert api.deleted == [("Pod", "hub-0", "uid-hub-0"), ("Pod", "hub-1", "uid-hub-1")]
    assert result.deleted_objects == 2


def test_a_pod_is_deleted_once_though_events_come_before_the_watch_shows_it_going() -> None:
    shot = snapshot([pod("hub-0", OLD, False)])
    api, memory = DeletingApi(), Memory()
    for _ in range(3):
        refresh_router_statuses(shot, api, outcomes(shot), memory)
    assert api.deleted == [("Pod", "hub-0", "uid-hub-0")]
    going = snapshot([pod("hub-0", OLD, False, terminating=True)])
    refresh_router_statuses(going, api, outcomes(going), memory)
    assert memory.deleted_pods == set()


def test_a_pod_recreated_meanwhile_is_not_deleted_and_nothing_fails() -> None:
    shot = snapshot([pod("hub-0", OLD, False), pod("hub-1", OLD, False)])
    api = DeletingApi(current_uids={"hub-0": "uid-of-its-successor"})
    result = refresh_router_statuses(shot, api, outcomes(shot))
    assert api.deleted == [("Pod", "hub-1", "uid-hub-1")]
    assert result.failures == []


def test_a_paused_router_is_left_alone() -> None:
    shot = snapshot([pod("hub-0", OLD, False)], annotations={PAUSE_ANNOTATION: "true"})
    api = DeletingApi()
    refresh_router_statuses(shot, api, outcomes(shot))
    assert api.deleted == []


def test_the_statefulset_gives_recreated_pods_the_new_revision() -> None:
    """Partition 0, said: without rollingUpdate, the controller re-creates ordinals below
    status.currentReplicas from the old revision, and a deleted stuck pod would come back
    stuck."""
    plan = plan_namespace(NS, [RouterDecl("hub", uid="uid-hub")], [], [], [])
    sts = render_stateful_set(plan.router("hub"))
    assert sts["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"partition": 0},
    }
