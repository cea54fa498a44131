"""Whether a network's routers are connected, from what each router reports on its own Pod.

Each router pod writes the router ids it reaches to its Pod's annotation
``routernet.io/reachable-routers`` (router/pod/status.py): an interior, the other interiors its
routing table reaches; an edge, the interior of its uplink. The operator never connects to a
router: it watches the Pods it owns (kubernetes/handlers.py) and this module turns their annotations
into each Router's ``meshConnected`` and ``MeshConnected`` condition. Pure, like the adapter.

Router ids are the pod names (planning/planner.py), so the interiors a network should have are the
pods ``<router>-0 .. <router>-<replicas-1>`` of its interior Routers (spec.replicas: during a scale
the verdict waits for the new pods' reports). Per network:

- ``Unknown`` (``NotReported``) while a pod that should be there has not reported: it does not
  exist (yet), it is terminating, it still runs as another role or network (a rolling update),
  or its router has not written the annotation yet (just started, or an older router image);
- ``False`` (``NotConnected``) when some interior does not reach some other one, the message
  naming who does not see whom (shortened); ``NoInteriors`` when the network has no interior
  pods at all;
- ``True`` (``Connected``) when every interior reaches every other one (one interior alone is
  connected).

An edge Router is connected when the network's interiors are and each of its own pods has an
uplink (``NoUplink`` otherwise); ids in a report that are not interiors of the network (stale,
or another network's) count for nothing. Edges' reports never count for the interior mesh.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from router.pod.report import ANNOTATION, STORE_ANNOTATION, parse_annotation
from router_operator.planning.names import INSTANCE_LABEL, NETWORK_LABEL, REVISION_LABEL, ROLE_LABEL
from router_operator.planning.planner import RouterDecl, pod_name

Status = Literal["True", "False", "Unknown"]

CONNECTED = "Connected"
NOT_CONNECTED = "NotConnected"
NOT_REPORTED = "NotReported"
NO_INTERIORS = "NoInteriors"
NO_UPLINK = "NoUplink"

MAX_NAMES = 3
"""How many routers a message names before it says "and N more"."""


@dataclass(frozen=True)
class PodReport:
    """One router pod as the operator needs it (what the pod index keeps)."""

    name: str
    role: str | None = None
    network: str | None = None
    reachable: frozenset[str] | None = None
    """From the annotation; None: not reported."""
    terminating: bool = False
    store: str | None = None
    """Its store annotation as written (router/pod/status.py; None: none): what a scale-in of
    a Router with a store waits for (planning/handoff.py)."""
    router: str | None = None
    """The Router it runs for (its instance label); with the three below, what a rollout
    stuck on it needs (kubernetes/rollout.py)."""
    uid: str | None = None
    revision: str | None = None
    """The StatefulSet revision it was made from."""
    ready: bool = False


def pod_report(body: Mapping[str, Any]) -> PodReport:
    """A Pod (as listed or watched) reduced to what counts for the mesh (and a scale-in, and a
    rollout)."""
    meta = body.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    value = annotations.get(ANNOTATION)
    store = annotations.get(STORE_ANNOTATION)
    conditions = (body.get("status") or {}).get("conditions") or []
    return PodReport(
        name=str(meta.get("name") or ""),
        role=labels.get(ROLE_LABEL),
        network=labels.get(NETWORK_LABEL),
        reachable=parse_annotation(value) if isinstance(value, str) else None,
        terminating=bool(meta.get("deletionTimestamp")),
        store=store if isinstance(store, str) else None,
        router=labels.get(INSTANCE_LABEL),
        uid=meta.get("uid"),
        revision=labels.get(REVISION_LABEL),
        ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions),
    )


@dataclass(frozen=True)
class Verdict:
    status: Status
    reason: str
    message: str

    @property
    def connected(self) -> bool | None:
        """status.meshConnected: None while unknown."""
        return {"True": True, "False": False}.get(self.status)


def names(items: Sequence[str], limit: int = MAX_NAMES) -> str:
    """``a, b, c and 2 more``."""
    shown = ", ".join(items[:limit])
    return f"{shown} and {len(items) - limit} more" if len(items) > limit else shown


def _pods(decl: RouterDecl) -> list[str]:
    return [pod_name(decl.name, i) for i in range(max(decl.replicas, 0))]


def _unreported(
    expected: Iterable[str], role: str, network: str, pods: Mapping[str, PodReport]
) -> tuple[list[str], dict[str, frozenset[str]]]:
    """The pods among ``expected`` whose report cannot be used yet, and the others' reports."""
    missing: list[str] = []
    reports: dict[str, frozenset[str]] = {}
    for name in expected:
        pod = pods.get(name)
        if (
            pod is None
            or pod.terminating
            or pod.reachable is None
            or (pod.role is not None and pod.role != role)
            or (pod.network is not None and pod.network != network)
        ):
            missing.append(name)
        else:
            assert pod.reachable is not None
            reports[name] = pod.reachable
    return missing, reports


def interior_verdict(
    network: str, interiors: Sequence[str], pods: Mapping[str, PodReport]
) -> Verdict:
    """The interior mesh of one network: ``interiors`` are the pod names it should have."""
    if not interiors:
        return Verdict("False", NO_INTERIORS, f"network {network!r} has no interior router pods")
    missing, reports = _unreported(interiors, "interior", network, pods)
    if missing:
        return Verdict(
            "Unknown",
            NOT_REPORTED,
            f"no report yet from interior router {names(missing)} of network {network!r}",
        )
    members = set(interiors)
    blind = []
    for name in interiors:
        unseen = sorted(members - reports[name] - {name})
        if unseen:
            blind.append(f"{name} does not see {names(unseen)}")
    if blind:
        more = f"; and {len(blind) - MAX_NAMES} more" if len(blind) > MAX_NAMES else ""
        return Verdict("False", NOT_CONNECTED, "; ".join(blind[:MAX_NAMES]) + more)
    if len(interiors) == 1:
        message = f"network {network!r} has one interior router, {interiors[0]}"
    else:
        message = (
            f"each of the {len(interiors)} interior routers of network {network!r} sees the"
            f" other {len(interiors) - 1}"
        )
    return Verdict("True", CONNECTED, message)


def edge_verdict(
    decl: RouterDecl, interiors: Sequence[str], mesh: Verdict, pods: Mapping[str, PodReport]
) -> Verdict:
    """An edge Router: its pods' uplinks, then the interior mesh they hang off."""
    own = _pods(decl)
    missing, reports = _unreported(own, "edge", decl.network, pods)
    members = set(interiors)
    lost = [name for name, reached in reports.items() if not reached & members]
    if not members:
        return mesh  # NoInteriors: nothing to have an uplink to
    if missing:
        return Verdict("Unknown", NOT_REPORTED, f"no report yet from edge router {names(missing)}")
    if mesh.status != "True" or not own:
        return mesh
    if lost:
        return Verdict("False", NO_UPLINK, f"no uplink to an interior: {names(lost)}")
    pods_of = f"its {len(own)} edge routers each have" if len(own) > 1 else f"{own[0]} has"
    return Verdict("True", CONNECTED, f"{pods_of} an uplink; {mesh.message}")


def mesh_verdicts(
    routers: Iterable[RouterDecl], pods: Mapping[str, PodReport]
) -> dict[str, Verdict]:
    """Router name -> its verdict, for every Router given (all those of a namespace: a
    network's interiors may belong to several Routers). ``pods``: by pod name."""
    routers = list(routers)
    networks: dict[str, list[str]] = {}
    for decl in sorted(routers, key=lambda d: d.name):
        members = networks.setdefault(decl.network, [])
        if decl.role == "interior":
            members.extend(_pods(decl))
    meshes = {net: interior_verdict(net, interiors, pods) for net, interiors in networks.items()}
    result: dict[str, Verdict] = {}
    for decl in routers:
        mesh = meshes[decl.network]
        if decl.role == "interior":
            result[decl.name] = mesh
        else:
            result[decl.name] = edge_verdict(decl, networks[decl.network], mesh, pods)
    return result
