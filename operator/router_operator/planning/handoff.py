"""Scaling a Router with a store in without losing messages: its leaving pods hand their nodes
off first.

The pods of a Router with ``spec.store`` host the nodes (queues, topics) of Addresses naming it,
each node on one pod by a stable hash over the pods (router/nodes/placement.py). Were the pods
past the new replicas removed at the moment their nodes are placed elsewhere, their messages
would stay on their volumes until the Router scaled out again. So scaling in is two steps:

1. At once, the hosts are the pods that stay (``0 .. desired-1``): every router's config says
   so, the new hosts take over, and each leaving pod, a host no more, sends what it holds on
   (router/nodes/moving.py). The StatefulSet keeps every pod it has until then.
2. Once every leaving pod says ``empty`` (the annotation ``routernet.io/store`` its router
   writes on its Pod, router/pod/status.py), the StatefulSet is given the new replicas and the
   StatefulSet controller removes them.

A leaving pod that has not reported, or says ``host`` (its router has not applied the new
config yet) or ``moving <n>``, holds the scale-in; so does one that does not run, since its
volume may hold messages that nothing can move. Scaling out, or a Router without a store, is
applied at once as before. Pure, for the reconciler and the local backend (``routernet up``)
alike: what each pod reported comes in as the annotation's values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from router.pod.report import parse_store
from router_operator.planning.mesh import names
from router_operator.planning.planner import RouterDecl, pod_name

STORE_HAND_OFF = "StoreHandOff"
"""Router (with a store): True while a scale-in waits for its leaving pods to hand their nodes
off (reason ``Moving``), False otherwise (``Idle``)."""
MOVING = "Moving"
IDLE = "Idle"


@dataclass(frozen=True)
class HandOff:
    """What to run for one Router: ``replicas`` pods (the StatefulSet's), of which the first
    ``hosts`` host its nodes, and the leaving pods still waited for, with what each said."""

    router: str
    desired: int
    replicas: int
    hosts: int
    waiting: tuple[tuple[str, str | None], ...] = ()
    """(pod, its store annotation; None: none) of each leaving pod that is not empty yet."""

    @property
    def holding(self) -> bool:
        """A scale-in waits: pods run that host nothing any more."""
        return self.replicas > self.hosts

    def apply(self, decl: RouterDecl) -> RouterDecl:
        """The declaration to plan with: every pod that runs, the first ``hosts`` as hosts."""
        if not self.holding:
            return decl
        return dataclasses.replace(decl, replicas=self.replicas, hosts=self.hosts)

    @property
    def message(self) -> str:
        """For people (the Router's status, `routernet up`)."""
        if not self.holding:
            if self.replicas == 1:
                return "no scale-in in progress: its router pod hosts the nodes"
            return f"no scale-in in progress: its {self.replicas} router pods host the nodes"
        said = [f"{pod} {_said(value)}" for pod, value in self.waiting]
        return (
            f"scaling in from {self.replicas} to {self.desired} replicas: the StatefulSet keeps"
            f" {self.replicas} pods until each leaving one has moved its nodes to the"
            f" {self.hosts} that stay; waiting for {names(said)}"
        )


def _said(value: str | None) -> str:
    report = parse_store(value)
    if value is None:
        return "(not reported)"
    if report is None:
        return f"(reports {value!r})"
    if report.state == "moving":
        return f"(moving {report.held} node{'s' if report.held != 1 else ''})"
    return "(still a host)" if report.state == "host" else "(empty)"


def hand_off(router: str, desired: int, current: int, reports: Mapping[str, str | None]) -> HandOff:
    """The step a Router with a store is at: ``desired`` replicas (spec.replicas), ``current``
    pods (the StatefulSet's replicas; 0 without one), ``reports`` the store annotation of its
    pods by name (absent or None: not reported)."""
    desired = max(desired, 0)
    if desired >= current:
        return HandOff(router, desired, desired, desired)
    leaving = [pod_name(router, i) for i in range(desired, current)]
    waiting = tuple(
        (pod, reports.get(pod))
        for pod in leaving
        if (report := parse_store(reports.get(pod))) is None or not report.empty
    )
    if not waiting:
        return HandOff(router, desired, desired, desired)
    return HandOff(router, desired, current, desired, waiting)
