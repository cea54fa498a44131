"""Reconciling one namespace: every Router, Address, LinkRoute and Gateway of it at once.

Why per namespace: each router's configuration depends on every Router (its peers), Address and
LinkRoute of its network, so a change to any of them is a change to the whole network, and the
planner answers for a whole namespace. Why not per network: a Router moving from one network to
another changes both, and a namespace holds few enough objects to plan in microseconds.

The work is split in two:

- :func:`reconcile_namespace` and :func:`refresh_router_statuses` are synchronous and take the
  listed objects (a :class:`Snapshot`) and an :class:`~router_operator.kubernetes.api.Api`: testable
  with a fake client, run in a worker thread so that kopf's event loop never waits on the network.
- :class:`Reconciler` coordinates them for kopf's handlers: one reconcile of a namespace at a time
  (an older plan must never be applied after a newer one), requests coalesced (a hundred Addresses
  applied at once make one or two reconciles, not a hundred), failures retried with backoff by the
  reconciler itself (the handler that asked may be a watch event, which kopf never retries), and a
  periodic resync that puts back children someone deleted or edited.

Children rendered exactly as this process last applied them are not sent again (:class:`Memory`),
so an Address change writes one ConfigMap per Router; the resync sends everything.

Nothing here deletes anything but a Router's autoscaler (HorizontalPodAutoscaler or KEDA
ScaledObject, rendering/autoscaler.py) that its autoscaling mode no longer wants: two of them, or
one beside the operator's own, would fight over the replicas. Every other child of a deleted
Router goes with it by garbage collection (owner references), so no finalizer is needed and none
can deadlock a deletion.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric, SummaryMetricFamily

from router.config.models import Address as RouterAddress
from router_operator.kubernetes.api import Api, ApiError
from router_operator.kubernetes.environment import OperatorConfig
from router_operator.kubernetes.internal_tls import apply_internal_tls
from router_operator.kubernetes.rollout import stuck_pods
from router_operator.planning import adapter
from router_operator.planning.adapter import Application, Parsed, RouterOutcome
from router_operator.planning.handoff import HandOff, hand_off
from router_operator.planning.mesh import PodReport, mesh_verdicts
from router_operator.planning.planner import (
    BLOCKING,
    NamespacePlan,
    NetworkPlan,
    Problem,
    RouterDecl,
    RouterPlan,
    plan_namespace,
)
from router_operator.rendering.autoscaler import (
    AUTOSCALER_KINDS,
    KEDA_KIND,
    autoscaler_name,
    controlled_by,
    render_autoscaler,
    wanted_kind,
)
from router_operator.rendering.collector import render_collector
from router_operator.rendering.recommend import is_ours, recommend_objects, render_recommend
from router_operator.rendering.router import (
    LINK_ROUTES_KEY,
    RenderError,
    config_map_name,
    render_router,
)
from router_operator.resources.autoscaling import AutoscalingSpec
from router_operator.resources.models import API_VERSION, RouterStatus

log = logging.getLogger("router_operator.kubernetes.reconciler")


@dataclass(frozen=True)
class Snapshot:
    """The objects of one namespace as the watches last saw them (raw bodies)."""

    namespace: str
    routers: tuple[Mapping[str, Any], ...] = ()
    addresses: tuple[Mapping[str, Any], ...] = ()
    link_routes: tuple[Mapping[str, Any], ...] = ()
    gateways: tuple[Mapping[str, Any], ...] = ()
    statefulsets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """StatefulSet status by the uid of the Router owning it."""
    statefulset_replicas: Mapping[str, int] = field(default_factory=dict)
    """StatefulSet spec.replicas by the uid of the Router owning it: the pods it runs."""
    pods: Mapping[str, PodReport] = field(default_factory=dict)
    """The router pods, by name, as far as the mesh goes: what each reports it reaches."""


@dataclass
class Result:
    """What one pass did, for logs, metrics and the retry decision."""

    outcomes: dict[str, RouterOutcome] = field(default_factory=dict)
    """By Router uid."""
    applied_objects: int = 0
    unchanged_objects: int = 0
    """Rendered exactly as last applied by this process: not sent again."""
    status_writes: int = 0
    deleted_objects: int = 0
    """Autoscalers removed because the Router's autoscaling mode no longer wants them."""
    failures: list[str] = field(default_factory=list)
    transient: bool = False
    """A failure worth retrying as is (connection, conflict, server error)."""


# --- the synchronous core ------------------------------------------------------------------------


@dataclass
class Memory:
    """What this process last wrote in a namespace. Lost on restart, which costs one full
    round of writes and nothing else."""

    written: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The status last written, by ``<kind>/<uid>``. The operator is the only writer of these
    statuses, and its own writes reach the watch (and so the snapshot) a little later: starting
    from what was written keeps a burst of reconciles from rewriting the same status, and a
    condition's lastTransitionTime from moving when an older snapshot shows the previous one."""
    applied: dict[str, str] = field(default_factory=dict)
    """A digest of each child as last applied, by ``<router uid>/<kind>/<name>``. Unchanged
    children are not sent again: an Address change then costs one ConfigMap write per Router
    instead of six writes. Edits made behind the operator's back are put right by the resync,
    which forgets these digests first, and when a paused Router resumes. An autoscaler kind the
    Router's mode does not want is recorded as :data:`ABSENT` once it is known to be gone, so
    that it is looked for again only after a restart, a resync or a pause, or once this process
    has applied it."""
    replicas: dict[str, int] = field(default_factory=dict)
    """The replicas of each Router's StatefulSet as last applied, by Router uid: fresher than
    the watch, and a scale-in's next step (planning/handoff.py) must not go by a stale count of
    pods."""
    autoscaler: dict[str, RouterStatus] = field(default_factory=dict)
    """What the operator's autoscaler (kubernetes/autoscaler.py) last said of each Router, by uid:
    its ``autoscaling`` and conditions, put into every status of that Router written here. So a
    Router's status has one writer: with two, each sending its conditions in a merge patch (a
    list, replaced whole), the autoscaler's conditions vanished at every reconcile and came
    back at its next pass."""
    deleted_pods: set[str] = field(default_factory=set)
    """The uids of the pods deleted to unstick a rollout (kubernetes/rollout.py): until the watch
    shows them going, a second event must not delete (and log) them again."""


ABSENT = "absent"
"""In :attr:`Memory.applied`: this child is known not to exist (never a digest: those are hex)."""


def _parse_all(
    kind: str, bodies: Iterable[Mapping[str, Any]], memory: Memory | None = None
) -> list[Parsed]:
    parsed = [p for p in (adapter.parse(kind, body) for body in bodies) if not p.deleting]
    if memory is None:
        return parsed
    result = []
    for p in parsed:
        status = memory.written.get(f"{kind}/{p.uid}")
        if status is not None:
            body = {**p.body, "status": status}
            parsed_status = adapter.STATUS_CLASSES[kind].model_validate(status)
            p = dataclasses.replace(p, body=body, status=parsed_status)
        result.append(p)
    return result


def reconcile_namespace(
    snapshot: Snapshot, api: Api, config: OperatorConfig, memory: Memory | None = None
) -> Result:
    """Plans the namespace, applies the children of every Router that may be applied, and
    writes every object's status. Raises ApiError only when the plan itself cannot be made
    (the applied state of a paused Address or LinkRoute cannot be read); a failure to apply one
    Router is that Router's status, and the others are still applied."""
    ns = snapshot.namespace
    routers = _parse_all("Router", snapshot.routers, memory)
    addresses = _parse_all("Address", snapshot.addresses, memory)
    link_routes = _parse_all("LinkRoute", snapshot.link_routes, memory)
    gateways = _parse_all("Gateway", snapshot.gateways, memory)
    if memory is not None:  # forget objects that are gone
        live = {f"{p.kind}/{p.uid}" for p in (*routers, *addresses, *link_routes, *gateways)}
        for key in set(memory.written) - live:
            del memory.written[key]
        for uid in set(memory.replicas) - {r.uid for r in routers}:
            del memory.replicas[uid]
        for uid in set(memory.autoscaler) - {r.uid for r in routers}:
            del memory.autoscaler[uid]

    router_decls = [
        adapter.router_decl(r, config.router_image) if r.model else adapter.topology_decl(r)
        for r in routers
    ]
    router_decls, handoffs = _hand_offs(routers, router_decls, snapshot, memory)
    address_decls = []
    paused = [a for a in addresses if a.model is not None and a.paused]
    paused_routes = {lr.name for lr in link_routes if lr.model is not None and lr.paused}
    networks = {_network(a) for a in paused}
    if paused_routes:  # a paused LinkRoute may have been applied in another network
        networks |= {decl.network for decl in router_decls}
    config_maps = _config_map_data(api, ns, router_decls, networks)
    entries = _applied_address_entries(config_maps, router_decls)
    records = _applied_link_routes(config_maps, router_decls, paused_routes)
    for a in addresses:
        if a.model is None:
            continue
        if a.paused:
            entry = entries.get((_network(a), adapter.address_key(a)))
            if entry is not None:
                address_decls.append(adapter.frozen_address_decl(a, entry))
            continue
        address_decls.append(adapter.address_decl(a))
    link_route_decls = []
    for lr in link_routes:
        if lr.model is None:
            continue
        if lr.paused:
            found = records.get(lr.name)
            frozen = adapter.frozen_link_route_decl(lr, *found) if found else None
            if frozen is not None:
                link_route_decls.append(frozen)
            continue
        link_route_decls.append(adapter.link_route_decl(lr))
    plan = plan_namespace(
        ns,
        router_decls,
        address_decls,
        link_route_decls,
        [adapter.gateway_decl(g) for g in gateways if g.model is not None],
        cluster_domain=config.cluster_domain,
        internal_tls=True,
    )

    result = Result()
    # Before the StatefulSets: a pod a scale-out adds must find its certificate.
    now = datetime.datetime.now(datetime.UTC)
    for network in sorted(plan.networks.values(), key=lambda n: n.name):
        tls = apply_internal_tls(network, ns, api, memory.applied if memory else {}, now)
        result.applied_objects += tls.applied
        result.failures += tls.failures
        result.transient |= tls.transient
    statefulsets = dict(snapshot.statefulsets)
    for router in routers:
        router_plan = plan.router(router.name)
        outcome, observed = _reconcile_router(router, router_plan, api, config, result, memory)
        result.outcomes[router.uid] = outcome
        if observed is not None:
            statefulsets[router.uid] = observed
        if outcome.state == "failed":
            result.failures.append(f"Router {ns}/{router.name}: {outcome.message}")
            result.transient |= outcome.transient

    if config.collector is not None:
        for network in sorted(plan.networks.values(), key=lambda n: n.name):
            _apply_telemetry(network, ns, api, config, result, memory)
    _unstick_rollouts(routers, snapshot, api, result, memory)

    verdicts = mesh_verdicts(router_decls, snapshot.pods)
    for router in routers:
        status = adapter.router_status(
            router,
            result.outcomes[router.uid],
            statefulsets.get(router.uid),
            mesh=verdicts.get(router.name),
            handoff=handoffs.get(router.name),
            autoscaler=memory.autoscaler.get(router.uid) if memory is not None else None,
        )
        _write_status(api, router, status, result, memory)
    by_name = {r.name: result.outcomes[r.uid] for r in routers}
    for a in addresses:
        status = adapter.address_status(
            a, plan.problems_of("Address", a.name), _application(a, plan, by_name)
        )
        _write_status(api, a, status, result, memory)
    for lr in link_routes:
        status = adapter.link_route_status(
            lr, plan.problems_of("LinkRoute", lr.name), _application(lr, plan, by_name)
        )
        _write_status(api, lr, status, result, memory)
    for g in gateways:
        status = adapter.gateway_status(
            g, plan.problems_of("Gateway", g.name), _application(g, plan, by_name)
        )
        _write_status(api, g, status, result, memory)
    return result


def refresh_router_statuses(
    snapshot: Snapshot,
    api: Api,
    outcomes: Mapping[str, RouterOutcome],
    memory: Memory | None = None,
) -> Result:
    """Only the Routers' statuses, from the last reconcile's outcomes, the StatefulSets'
    current status and the pods' reports: what a StatefulSet's or a pod's event needs, without
    applying anything (re-applying on every pod readiness change would be wasteful, and against
    an API that reports every write as a change, endless). A stuck rollout's pods are deleted
    (kubernetes/rollout.py): such events are what show one."""
    result = Result(outcomes=dict(outcomes))
    routers = _parse_all("Router", snapshot.routers, memory)
    _unstick_rollouts(routers, snapshot, api, result, memory)
    decls = [adapter.router_decl(r, "") if r.model else adapter.topology_decl(r) for r in routers]
    decls, handoffs = _hand_offs(routers, decls, snapshot, memory)
    verdicts = mesh_verdicts(decls, snapshot.pods)
    for router in routers:
        outcome = outcomes.get(router.uid)
        if outcome is None:
            continue
        status = adapter.router_status(
            router,
            outcome,
            snapshot.statefulsets.get(router.uid),
            mesh=verdicts.get(router.name),
            handoff=handoffs.get(router.name),
            autoscaler=memory.autoscaler.get(router.uid) if memory is not None else None,
        )
        _write_status(api, router, status, result, memory)
    return result


def _unstick_rollouts(
    routers: Iterable[Parsed],
    snapshot: Snapshot,
    api: Api,
    result: Result,
    memory: Memory | None,
) -> None:
    """Deletes the pods a Router's rollout waits for in vain (kubernetes/rollout.py), but a paused
    Router's. A failure is logged and retried at the next event or resync."""
    deleted = memory.deleted_pods if memory is not None else set()
    deleted &= {pod.uid for pod in snapshot.pods.values() if pod.uid and not pod.terminating}
    for router in routers:
        if router.paused:
            continue
        status = snapshot.statefulsets.get(router.uid)
        for pod in stuck_pods(router.name, status, snapshot.pods.values()):
            if pod.uid in deleted:
                continue
            update = (status or {}).get("updateRevision")
            try:
                gone = api.delete("v1", "Pod", snapshot.namespace, pod.name, uid=pod.uid)
            except ApiError as err:
                log.warning(
                    "namespace %s: deleting pod %s (stuck on revision %s) failed: %s",
                    snapshot.namespace,
                    pod.name,
                    pod.revision,
                    err,
                )
                continue
            if gone:
                if pod.uid:
                    deleted.add(pod.uid)
                result.deleted_objects += 1
                log.warning(
                    "namespace %s: deleted pod %s: not ready on revision %s while StatefulSet"
                    " %s rolls out %s (its rollout would wait for it)",
                    snapshot.namespace,
                    pod.name,
                    pod.revision,
                    router.name,
                    update,
                )


def _hand_offs(
    routers: Iterable[Parsed],
    decls: Iterable[RouterDecl],
    snapshot: Snapshot,
    memory: Memory | None,
) -> tuple[list[RouterDecl], dict[str, HandOff]]:
    """The declarations to plan with: a Router with a store scaling in keeps its leaving pods,
    hosts no more, until each says it is empty (planning/handoff.py); with its step, by Router
    name."""
    reports = {name: pod.store for name, pod in snapshot.pods.items()}
    planned: list[RouterDecl] = []
    steps: dict[str, HandOff] = {}
    for router, decl in zip(routers, decls, strict=True):
        if decl.store is None:
            planned.append(decl)
            continue
        applied = memory.replicas.get(router.uid) if memory is not None else None
        current = applied if applied is not None else snapshot.statefulset_replicas.get(router.uid)
        step = hand_off(decl.name, decl.replicas, current or 0, reports)
        steps[decl.name] = step
        planned.append(step.apply(decl))
    return planned, steps


def _network(parsed: Parsed) -> str:
    model = parsed.model
    spec = getattr(model, "spec", None)
    network = getattr(spec, "network", None)
    return network if isinstance(network, str) else str(parsed.spec.get("network", "default"))


def _config_map_data(
    api: Api, namespace: str, routers: Iterable[RouterDecl], networks: set[str]
) -> dict[str, Mapping[str, Any]]:
    """Router name -> its ConfigMap's data, read only for the Routers of ``networks`` (those of
    paused objects: usually none, so no requests)."""
    found: dict[str, Mapping[str, Any]] = {}
    for decl in sorted(routers, key=lambda d: d.name):
        if decl.network in networks:
            config_map = api.get("v1", "ConfigMap", namespace, config_map_name(decl.name)) or {}
            found[decl.name] = config_map.get("data") or {}
    return found


def _applied_address_entries(
    config_maps: Mapping[str, Mapping[str, Any]], routers: Iterable[RouterDecl]
) -> dict[tuple[str, str], dict[str, Any]]:
    """(network, key) → the address entry the routers of that network run now, read back from
    their ConfigMaps."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for decl in sorted(routers, key=lambda d: d.name):
        data = config_maps.get(decl.name, {})
        for key in sorted(k for k in data if k.endswith(".json")):
            try:
                entries = json.loads(data[key]).get("addresses") or []
            except (ValueError, AttributeError):
                continue
            for entry in entries:
                try:
                    address_key = RouterAddress.model_validate(entry).key
                except ValueError:
                    continue
                found.setdefault((decl.network, address_key), entry)
            break  # every pod of a network has the same addresses
    return found


def _applied_link_routes(
    config_maps: Mapping[str, Mapping[str, Any]], routers: Iterable[RouterDecl], names: set[str]
) -> dict[str, tuple[str, dict[str, Any]]]:
    """LinkRoute name → (network, its spec as applied) for ``names``, from the record that the
    ConfigMaps keep (render.LINK_ROUTES_KEY); the first Router by name that has it wins."""
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for decl in sorted(routers, key=lambda d: d.name):
        text = config_maps.get(decl.name, {}).get(LINK_ROUTES_KEY)
        if not text:
            continue
        try:
            records = json.loads(text)
        except ValueError:
            continue
        if not isinstance(records, dict):
            continue
        for name in names - found.keys():
            record = records.get(name)
            if isinstance(record, dict):
                found[name] = (decl.network, record)
    return found


def _reconcile_router(
    router: Parsed,
    plan: RouterPlan,
    api: Api,
    config: OperatorConfig,
    result: Result,
    memory: Memory | None,
) -> tuple[RouterOutcome, Mapping[str, Any] | None]:
    """Applies one Router's children in order; returns the outcome and the StatefulSet's status
    as the apply answered it (fresher than the watch)."""
    desired, endpoints, gen = len(plan.pods), plan.endpoints, router.generation
    applied = memory.applied if memory is not None else {}
    prefix = f"{router.uid}/"
    outcome = adapter.router_outcome_for_problems(router, plan.problems, desired, endpoints)
    if outcome is None:
        try:
            children = render_router(plan)
        except RenderError as err:
            outcome = RouterOutcome("blocked", "RenderFailed", str(err), gen, desired, endpoints)
    if outcome is not None:
        # Not applied now (paused, say, while someone edits the StatefulSet by hand): the next
        # pass that may apply sends every child again.
        for key in [k for k in applied if k.startswith(prefix)]:
            del applied[key]
        return outcome, None
    children = adapter.with_pull_policy(children, config.image_pull_policy, plan.decl)
    observed = None
    for child in children:
        key = f"{prefix}{child['kind']}/{child['metadata']['name']}"
        digest = hashlib.sha256(json.dumps(child, sort_keys=True).encode()).hexdigest()
        if applied.get(key) == digest:
            result.unchanged_objects += 1
            continue
        applied.pop(key, None)
        try:
            stored = api.apply(child)
        except ApiError as err:
            what = f"{child['kind']} {child['metadata']['name']}"
            log.warning("namespace %s: applying %s failed: %s", router.namespace, what, err)
            message = f"applying {what} failed: {err}"
            failed = RouterOutcome(
                "failed", "ApplyFailed", message, gen, desired, endpoints, transient=err.transient
            )
            return failed, None
        result.applied_objects += 1
        applied[key] = digest
        if child["kind"] == "StatefulSet" and memory is not None:
            memory.replicas[router.uid] = int(child["spec"]["replicas"])
        if child["kind"] == "StatefulSet" and isinstance(stored.get("status"), Mapping):
            observed = stored["status"]
    warnings = tuple(p for p in plan.problems if p.reason not in BLOCKING)
    problem = _reconcile_autoscaler(router, plan, api, config, result, applied)
    if problem is not None:
        warnings = (*warnings, problem)
    message = f"children applied for generation {gen}: {desired} router pods configured"
    outcome = RouterOutcome("applied", "Applied", message, gen, desired, endpoints, warnings)
    return outcome, observed


def _autoscaling(router: Parsed) -> AutoscalingSpec | None:
    """The Router's validated `spec.autoscaling` (None for none, or a Router the models
    refused, which is never rendered anyway)."""
    spec = getattr(router.model, "spec", None)
    autoscaling = getattr(spec, "autoscaling", None)
    return autoscaling if isinstance(autoscaling, AutoscalingSpec) else None


def _reconcile_autoscaler(
    router: Parsed,
    plan: RouterPlan,
    api: Api,
    config: OperatorConfig,
    result: Result,
    applied: dict[str, str],
) -> Problem | None:
    """Removes the autoscaler kinds the Router's mode does not want, then applies the one it
    wants (rendering/autoscaler.py), after the other children: the routers run whatever happens
    here. Removal comes first and a failed one stops here, so the Router never has two
    controllers of its replicas (KEDA's webhook would refuse a ScaledObject beside our HPA
    anyway). A failure is a problem on the Router's status (Ready False, with why) rather than
    a failed apply: its routers and their configs are in place, and Addresses must not read
    it as missing them. It is retried like any failure (the reconciler's backoff when transient,
    the resync otherwise)."""
    spec = _autoscaling(router)
    wanted = wanted_kind(spec)
    name = autoscaler_name(router.name)
    prefix = f"{router.uid}/"
    for api_version, kind in AUTOSCALER_KINDS:
        key = f"{prefix}{kind}/{name}"
        if (api_version, kind) == wanted or applied.get(key) == ABSENT:
            continue
        applied.pop(key, None)
        try:
            removed = _remove_autoscaler(api, api_version, kind, router)
        except ApiError as err:
            what = f"{kind} {name}"
            log.warning("namespace %s: removing %s failed: %s", router.namespace, what, err)
            message = (
                f"removing {what} failed (the Router's autoscaling mode no longer wants it): {err}"
            )
            return _autoscaler_failure(router, result, "AutoscalerNotRemoved", message, err)
        applied[key] = ABSENT
        result.deleted_objects += removed
    obj = render_autoscaler(plan, spec, config.prometheus_url)
    if obj is None:
        return None
    key = f"{prefix}{obj['kind']}/{name}"
    digest = hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()
    if applied.get(key) == digest:
        result.unchanged_objects += 1
        return None
    applied.pop(key, None)
    try:
        api.apply(obj)
    except ApiError as err:
        what = f"{obj['kind']} {name}"
        log.warning("namespace %s: applying %s failed: %s", router.namespace, what, err)
        if obj["kind"] == KEDA_KIND and err.not_found:
            message = (
                "KEDA is not installed: the API server has no ScaledObjects"
                f" ({obj['apiVersion']}) for autoscaling.mode keda; install KEDA, or choose"
                f" mode hpa or operator ({err})"
            )
            return _autoscaler_failure(router, result, "KEDANotInstalled", message, err)
        message = f"applying {what} failed: {err}"
        return _autoscaler_failure(router, result, "AutoscalerApplyFailed", message, err)
    result.applied_objects += 1
    applied[key] = digest
    return None


def _remove_autoscaler(api: Api, api_version: str, kind: str, router: Parsed) -> bool:
    """Deletes the Router's autoscaler of this kind if there is one and it is the Router's
    (controller reference): one a user made under the same name is not the operator's to
    delete. A kind the API server does not serve (KEDA not installed: 404) or the operator may
    not read (403; the chart grants get with create, so it cannot have made one) has none."""
    name = autoscaler_name(router.name)
    try:
        found = api.get(api_version, kind, router.namespace, name)
    except ApiError as err:
        if err.status != 403:
            raise
        log.warning("namespace %s: cannot look for %s %s: %s", router.namespace, kind, name, err)
        return False
    if found is None:
        return False
    if not controlled_by(found, router.uid):
        log.info(
            "namespace %s: %s %s is not Router %s's: left alone",
            router.namespace,
            kind,
            name,
            router.name,
        )
        return False
    uid = str((found.get("metadata") or {}).get("uid") or "") or None
    deleted = api.delete(api_version, kind, router.namespace, name, uid=uid)
    if deleted:
        log.info("namespace %s: removed %s %s (autoscaling mode)", router.namespace, kind, name)
    return deleted


def _autoscaler_failure(
    router: Parsed, result: Result, reason: str, message: str, err: ApiError
) -> Problem:
    """Counted as the pass's failure (so a transient one is retried with backoff) and returned
    as a warning for the Router's status (its children are applied; only scaling is amiss)."""
    result.failures.append(f"Router {router.namespace}/{router.name}: {message}")
    result.transient |= err.transient
    return Problem("Router", router.name, reason, message)


def _apply_telemetry(
    network: NetworkPlan,
    namespace: str,
    api: Api,
    config: OperatorConfig,
    result: Result,
    memory: Memory | None,
) -> None:
    """The network's collector (rendering/collector.py) and, when the chart asks, the CronJob of
    its recommendations on the collector's dataset (rendering/recommend.py). A failure is logged
    and retried like any other; the Routers' statuses do not depend on them."""
    assert config.collector is not None
    children = render_collector(network, namespace, config.collector, config.cluster_domain)
    applied = memory.applied if memory is not None else {}
    if children and config.recommend is not None:
        children += render_recommend(network, namespace, config.recommend)
        applied.pop(f"network/{network.name}/recommend", None)
    elif not _remove_recommend(network.name, namespace, api, result, applied):
        return
    for child in children:
        key = f"network/{network.name}/{child['kind']}/{child['metadata']['name']}"
        digest = hashlib.sha256(json.dumps(child, sort_keys=True).encode()).hexdigest()
        if applied.get(key) == digest:
            result.unchanged_objects += 1
            continue
        applied.pop(key, None)
        try:
            api.apply(child)
        except ApiError as err:
            what = f"{child['kind']} {child['metadata']['name']}"
            log.warning("namespace %s: applying %s failed: %s", namespace, what, err)
            result.failures.append(f"telemetry of network {network.name}: applying {what}: {err}")
            result.transient |= err.transient
            return
        result.applied_objects += 1
        applied[key] = digest


def _remove_recommend(
    network: str, namespace: str, api: Api, result: Result, applied: dict[str, str]
) -> bool:
    """Recommendations are off (recommend.enabled false, or no collector): the network's
    CronJob and its account go, if the operator made them, once per process (then recorded
    as ABSENT). False when the API server refused: counted, retried with the pass."""
    key = f"network/{network}/recommend"
    if applied.get(key) == ABSENT:
        return True
    for api_version, kind, name in recommend_objects(network):
        try:
            found = api.get(api_version, kind, namespace, name)
            if found is not None and is_ours(found, network):
                uid = str((found.get("metadata") or {}).get("uid") or "") or None
                if api.delete(api_version, kind, namespace, name, uid=uid):
                    log.info("namespace %s: removed %s %s (recommend off)", namespace, kind, name)
        except ApiError as err:
            log.warning("namespace %s: removing %s %s failed: %s", namespace, kind, name, err)
            result.failures.append(f"telemetry of network {network}: removing {kind} {name}: {err}")
            result.transient |= err.transient
            return False
    applied[key] = ABSENT
    return True


def _application(
    parsed: Parsed, plan: NamespacePlan, outcomes: Mapping[str, RouterOutcome]
) -> Application:
    """Which Routers of the object's network (an Address's, a LinkRoute's) have it applied."""
    network = _network(parsed)
    net_plan = plan.networks.get(network)
    names = [r.name for r in net_plan.routers] if net_plan else []
    applied = tuple(n for n in names if outcomes[n].applied)
    missing = {n: outcomes[n].why_not_applied() for n in names if not outcomes[n].applied}
    return Application(network, applied, missing)


def _write_status(
    api: Api,
    parsed: Parsed,
    status: adapter.AnyStatus,
    result: Result,
    memory: Memory | None,
) -> None:
    patch = adapter.status_patch(parsed.body.get("status"), status)
    if patch is None:
        return
    try:
        api.patch_status(API_VERSION, parsed.kind, parsed.namespace, parsed.name, patch)
    except ApiError as err:
        if err.not_found:  # deleted since it was listed: nothing to report on
            return
        result.failures.append(f"status of {parsed.kind} {parsed.namespace}/{parsed.name}: {err}")
        result.transient |= err.transient
        log.warning(
            "writing the status of %s %s/%s failed: %s",
            parsed.kind,
            parsed.namespace,
            parsed.name,
            err,
        )
        return
    result.status_writes += 1
    if memory is not None:
        key = f"{parsed.kind}/{parsed.uid}"
        memory.written[key] = status.model_dump(mode="json", exclude_none=True)


# --- coordination for kopf ----------------------------------------------------------------------


@dataclass(eq=False)  # hashable by identity: a prometheus-client registry keys on collectors
class Metrics:
    """Counters for the metrics endpoint (see handlers), rendered by prometheus-client: the
    reconciler increments plain numbers, a Collector reads them when Prometheus scrapes."""

    reconciles: dict[str, int] = field(default_factory=lambda: {"ok": 0, "failed": 0})
    reconcile_seconds_sum: float = 0.0
    reconcile_seconds_count: int = 0
    applied_objects: int = 0
    status_writes: int = 0

    def collect(self) -> Iterator[Metric]:
        reconciles = CounterMetricFamily(
            "routernet_operator_reconciles", "Namespace reconciles, by result.", labels=["result"]
        )
        for result, n in sorted(self.reconciles.items()):
            reconciles.add_metric([result], n)
        yield reconciles
        yield SummaryMetricFamily(
            "routernet_operator_reconcile_seconds",
            "Time spent reconciling a namespace.",
            count_value=self.reconcile_seconds_count,
            sum_value=self.reconcile_seconds_sum,
        )
        yield CounterMetricFamily(
            "routernet_operator_applied_objects",
            "Child objects applied.",
            value=self.applied_objects,
        )
        yield CounterMetricFamily(
            "routernet_operator_status_writes",
            "Status subresource patches.",
            value=self.status_writes,
        )

    def render(self) -> str:
        """Prometheus text format."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        return generate_latest(registry).decode()


@dataclass
class _NamespaceState:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    requested: int = 0
    started: int = 0
    outcomes: dict[str, RouterOutcome] = field(default_factory=dict)
    memory: Memory = field(default_factory=Memory)
    reapply: bool = False
    """The next pass sends every child, changed or not (resync)."""
    last_full: float = float("-inf")
    failures: int = 0
    retry: asyncio.Task[None] | None = None


class Reconciler:
    """One reconcile per namespace at a time, requests coalesced, failures retried.

    ``source`` gives the current snapshot of a namespace (kopf's indexes: in memory, updated
    before any handler sees the event that changed them), ``namespaces`` those that have any
    Routernet object (for the resync).
    """

    def __init__(
        self,
        api: Api,
        config: OperatorConfig,
        source: Callable[[str], Snapshot],
        namespaces: Callable[[], Iterable[str]],
    ) -> None:
        self.api = api
        self.config = config
        self.metrics = Metrics()
        self._source = source
        self._namespaces = namespaces
        self._states: dict[str, _NamespaceState] = {}

    def _state(self, namespace: str) -> _NamespaceState:
        return self._states.setdefault(namespace, _NamespaceState())

    async def reconcile(
        self, namespace: str, cause: str, *, reapply: bool = False
    ) -> Result | None:
        """Reconciles the namespace unless a reconcile that began after this call did (or is
        about to); None then. ``reapply``: send every child even if unchanged since this
        process last applied it (puts back what others edited or deleted)."""
        state = self._state(namespace)
        state.reapply |= reapply
        state.requested += 1
        ticket = state.requested
        async with state.lock:
            if state.started >= ticket:
                return None  # a later pass saw this request's state
            state.started = state.requested
            if state.reapply:
                state.memory.applied.clear()
                state.reapply = False
            snapshot = self._source(namespace)
            started = time.monotonic()
            try:
                result = await asyncio.to_thread(
                    reconcile_namespace, snapshot, self.api, self.config, state.memory
                )
            except ApiError as err:
                log.warning("namespace %s (%s): cannot plan: %s", namespace, cause, err)
                result = Result(failures=[str(err)], transient=True)
            except Exception:
                log.exception("namespace %s (%s): reconcile failed", namespace, cause)
                result = Result(failures=["unexpected error"], transient=True)
            else:
                state.outcomes = result.outcomes
                state.last_full = time.monotonic()
            self._account(result, time.monotonic() - started)
            log.log(
                logging.WARNING if result.failures else logging.INFO,
                "namespace %s reconciled (%s): %d routers, %d objects applied (%d unchanged),"
                " %d statuses written%s",
                namespace,
                cause,
                len(result.outcomes),
                result.applied_objects,
                result.unchanged_objects,
                result.status_writes,
                f"; failures: {'; '.join(result.failures)}" if result.failures else "",
            )
            self._schedule_retry(namespace, state, result)
            return result

    async def refresh(self, namespace: str, cause: str = "statefulset") -> None:
        """Router statuses only (a StatefulSet or a router pod changed); a full reconcile when
        some Router has not been reconciled by this process yet."""
        state = self._state(namespace)
        async with state.lock:
            snapshot = self._source(namespace)
            live = [adapter.parse("Router", b) for b in snapshot.routers]
            if all(r.uid in state.outcomes for r in live if not r.deleting):
                result = await asyncio.to_thread(
                    refresh_router_statuses, snapshot, self.api, state.outcomes, state.memory
                )
                self.metrics.status_writes += result.status_writes
                if result.transient:
                    self._schedule_retry(namespace, state, result)
                return
        await self.reconcile(namespace, cause)

    async def autoscaler_said(self, namespace: str, uid: str, status: RouterStatus) -> None:
        """The operator's autoscaler's word on a Router (its ``autoscaling`` and conditions in
        ``status``), written with the rest of the Router's status (Memory.autoscaler)."""
        self._state(namespace).memory.autoscaler[uid] = status
        await self.refresh(namespace, "autoscaler")

    async def resync_forever(self) -> None:
        """Reconciles every namespace that was not reconciled for ``resync_seconds``."""
        period = self.config.resync_seconds
        while True:
            await asyncio.sleep(min(period, 60.0))
            for namespace in sorted(set(self._namespaces())):
                if time.monotonic() - self._state(namespace).last_full >= period:
                    await self.reconcile(namespace, "resync", reapply=True)

    def _account(self, result: Result, seconds: float) -> None:
        self.metrics.reconciles["failed" if result.failures else "ok"] += 1
        self.metrics.reconcile_seconds_sum += seconds
        self.metrics.reconcile_seconds_count += 1
        self.metrics.applied_objects += result.applied_objects
        self.metrics.status_writes += result.status_writes

    def _schedule_retry(self, namespace: str, state: _NamespaceState, result: Result) -> None:
        """Transient failures are retried here, with backoff, whoever asked for the pass;
        permanent ones (an invalid object the API refuses) wait for a change or the resync."""
        if not result.transient:
            state.failures = 0
            return
        state.failures += 1
        if state.retry is not None and not state.retry.done():
            return
        delay = min(
            self.config.retry_seconds * 2 ** (state.failures - 1), self.config.resync_seconds
        )
        log.info("namespace %s: retrying in %.0f s", namespace, delay)
        state.retry = asyncio.create_task(self._retry(namespace, delay))

    async def _retry(self, namespace: str, delay: float) -> None:
        await asyncio.sleep(delay)
        self._state(namespace).retry = None  # this pass may schedule the next one
        await self.reconcile(namespace, "retry")

    def close(self) -> None:
        for state in self._states.values():
            if state.retry is not None:
                state.retry.cancel()
