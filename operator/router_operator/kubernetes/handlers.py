"""kopf handlers: which events make which namespace be reconciled. Thin on purpose: what a
reconcile does is in ``reconciler`` and ``adapter``, testable without kopf.

- Routers, Addresses, LinkRoutes and Gateways are indexed by namespace (``@kopf.index``): the
  reconciler plans a namespace from memory, and kopf updates an index before any handler sees
  the event that changed it, so a handler's reconcile always includes its own object.
- Creation, update and resume (operator start) of any of the four reconcile its namespace.
  Deletion is noticed from the watch events (``@kopf.on.event``), not ``@kopf.on.delete``: a
  deletion handler needs a finalizer, and none is needed here (owner references delete the
  children), so a stopped or uninstalled operator can never block a deletion.
- StatefulSets labelled as the operator's are indexed too, and their events refresh the owning
  Router's status (replicas, readyReplicas, ReplicasReady, Ready) without applying anything.
- So are the router pods (labelled as the operator's; the watch asks the API server for those
  labels alone where kopf can): each pod's report of the routers it reaches (the annotation
  ``routernet.io/reachable-routers``, router/pod/status.py) makes the network's
  ``meshConnected`` (planning/mesh.py). A pod event refreshes its namespace's Router statuses only
  when what the operator reads of it changed (the mesh report, readiness, revision; not every
  restart or IP change): a pod not Ready on an old revision may be what a rollout waits for in
  vain (kubernetes/rollout.py); a change of its store's report (``routernet.io/store``) reconciles
  the namespace, since a scale-in of a Router with a store waits for it to apply the new replicas
  (planning/handoff.py). Nothing here writes to pods: kopf keeps no state on objects it only
  indexes and watches with ``on.event``.
- No timers or daemons: kopf puts a finalizer on objects that have them. The periodic resync is
  one operator-wide task instead (``Reconciler.resync_forever``), and so is the autoscaler
  (``Scaler``, kubernetes/autoscaler.py), which reads Routers from the same indexes.
- kopf's own bookkeeping (progress, last handled state) goes to annotations under
  ``operator.routernet.io/``, never to status (whose schema prunes it) and never under
  ``routernet.io/``: kopf leaves annotations under its own prefix out of the state it compares,
  and the pause annotation ``routernet.io/paused`` must count as a change.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
from collections.abc import Mapping
from typing import Any

import kopf
from aiohttp import web

from router_operator.autoscaling.scaler import SYNC_SECONDS
from router_operator.autoscaling.scrape import fetch_metrics
from router_operator.kubernetes import kube
from router_operator.kubernetes.autoscaler import Scaler
from router_operator.kubernetes.environment import OperatorConfig
from router_operator.kubernetes.reconciler import Reconciler, Snapshot
from router_operator.planning import mesh
from router_operator.resources.models import (
    API_VERSION,
    GROUP,
    VERSION,
    Address,
    Gateway,
    LinkRoute,
    Router,
)

registry = kopf.OperatorRegistry()
"""The operator's handlers, kept out of kopf's default registry so that importing this module
has no effect on another operator in the same process (tests)."""

KOPF_PREFIX = "operator.routernet.io"
MANAGED_BY = {"app.kubernetes.io/managed-by": "routernet-operator"}
MANAGED_BY_SELECTOR = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
KINDS = (Router, Address, LinkRoute, Gateway)

log = logging.getLogger("router_operator.kubernetes.handlers")


def configure(settings: kopf.OperatorSettings, *, namespaced: bool) -> None:
    """kopf settings for this operator (see the module docstring for why)."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=KOPF_PREFIX, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{KOPF_PREFIX}/finalizer"  # unused: no handler needs one
    # Handler successes would be one Kubernetes Event per change; conditions say it better.
    settings.posting.level = logging.WARNING
    # Ask the API server to end watches now and then, and give up on silent connections:
    # a watch that hangs on a dead connection would stop the operator seeing anything.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    # In one namespace the operator has a Role, which cannot grant watching CRDs.
    settings.scanning.disabled = namespaced
    # Only router pods, filtered by the API server where kopf can ask it to
    # (settings.watching.label_selectors): a cluster's other pods are many and change often.
    # A kopf without it filters them on arrival (the handlers' labels=).
    selectors = getattr(settings.watching, "label_selectors", None)
    if selectors is not None:
        selectors["v1", "pods"] = MANAGED_BY_SELECTOR


# --- authentication ------------------------------------------------------------------------------


@kopf.on.login(registry=registry)
def login(settings: kopf.OperatorSettings, **_: Any) -> kopf.ConnectionInfo:
    """The same credentials as the reconciler's client: in-cluster, else the kubeconfig."""
    return kube.connection_info(kube.load_configuration(), trust_env=settings.networking.trust_env)


# --- indexes -------------------------------------------------------------------------------------


def _copy(body: kopf.Body) -> dict[str, Any]:
    """A snapshot: kopf's bodies are views that change under the reconciler's feet."""
    return copy.deepcopy(dict(body))


@kopf.index(GROUP, VERSION, Router.plural, registry=registry)
def routers_by_namespace(namespace: str, body: kopf.Body, **_: Any) -> dict[str, Any]:
    return {namespace: _copy(body)}


@kopf.index(GROUP, VERSION, Address.plural, registry=registry)
def addresses_by_namespace(namespace: str, body: kopf.Body, **_: Any) -> dict[str, Any]:
    return {namespace: _copy(body)}


@kopf.index(GROUP, VERSION, LinkRoute.plural, registry=registry)
def linkroutes_by_namespace(namespace: str, body: kopf.Body, **_: Any) -> dict[str, Any]:
    return {namespace: _copy(body)}


@kopf.index(GROUP, VERSION, Gateway.plural, registry=registry)
def gateways_by_namespace(namespace: str, body: kopf.Body, **_: Any) -> dict[str, Any]:
    return {namespace: _copy(body)}


def router_owner(body: Mapping[str, Any]) -> str | None:
    """The uid of the Router controlling this object, if any."""
    for ref in (body.get("metadata") or {}).get("ownerReferences") or []:
        ours = ref.get("apiVersion") == API_VERSION and ref.get("kind") == Router.kind_name
        if ours and ref.get("controller") and ref.get("uid"):
            return str(ref["uid"])
    return None


@kopf.index("apps", "v1", "statefulsets", labels=MANAGED_BY, registry=registry)
def statefulsets_by_namespace(namespace: str, body: kopf.Body, **_: Any) -> dict[str, Any] | None:
    owner = router_owner(body)
    if owner is None:
        return None
    replicas = (body.get("spec") or {}).get("replicas")
    return {
        namespace: {
            "router": owner,
            "status": copy.deepcopy(dict(body.get("status") or {})),
            "replicas": replicas if isinstance(replicas, int) else 1,  # the API's default
        }
    }


@kopf.index("v1", "pods", labels=MANAGED_BY, registry=registry)
def pods_by_namespace(namespace: str, body: kopf.Body, **_: Any) -> dict[str, Any]:
    return {namespace: mesh.pod_report(body)}


def snapshot_source(indexes: Mapping[str, kopf.Index[str, Any]]) -> Any:
    """The reconciler's view of a namespace, read from the indexes (live objects)."""

    def source(namespace: str) -> Snapshot:
        def values(index: str) -> tuple[Any, ...]:
            return tuple(indexes[index].get(namespace, ()))

        entries = values("statefulsets")
        statefulsets = {entry["router"]: entry["status"] for entry in entries}
        replicas = {entry["router"]: entry["replicas"] for entry in entries}
        pods = {report.name: report for report in values("pods")}
        return Snapshot(
            namespace,
            routers=values("routers"),
            addresses=values("addresses"),
            link_routes=values("linkroutes"),
            gateways=values("gateways"),
            statefulsets=statefulsets,
            statefulset_replicas=replicas,
            pods=pods,
        )

    return source


# --- lifecycle ---------------------------------------------------------------------------------


@kopf.on.startup(registry=registry)
async def startup(
    settings: kopf.OperatorSettings,
    memo: kopf.Memo,
    routers_by_namespace: kopf.Index[str, Any],
    addresses_by_namespace: kopf.Index[str, Any],
    linkroutes_by_namespace: kopf.Index[str, Any],
    gateways_by_namespace: kopf.Index[str, Any],
    statefulsets_by_namespace: kopf.Index[str, Any],
    pods_by_namespace: kopf.Index[str, Any],
    **_: Any,
) -> None:
    """Settings, the reconciler (in ``memo``, which every handler gets), the resync task and
    the metrics endpoint. ``memo`` may bring ``config`` and ``api`` (the CLI and the tests do);
    otherwise they come from the environment."""
    configure(settings, namespaced=bool(memo.get("namespaced")))
    config = memo.get("config") or OperatorConfig.from_env(os.environ)
    api = memo.get("api") or kube.KubeClient(kube.load_configuration())
    indexes = {
        "routers": routers_by_namespace,
        "addresses": addresses_by_namespace,
        "linkroutes": linkroutes_by_namespace,
        "gateways": gateways_by_namespace,
        "statefulsets": statefulsets_by_namespace,
        "pods": pods_by_namespace,
    }

    def namespaces() -> set[str]:
        return (
            set(routers_by_namespace)
            | set(addresses_by_namespace)
            | set(linkroutes_by_namespace)
            | set(gateways_by_namespace)
        )

    reconciler = Reconciler(api, config, snapshot_source(indexes), namespaces)
    memo.reconciler = reconciler
    memo.pod_reports = {}  # (namespace, pod name) -> the mesh.PodReport pod_changed acted on
    # The autoscaler of Routers with spec.autoscaling.mode operator; tests may bring their own
    # scrapes (``fetch_metrics``) and a shorter period (``autoscale_seconds``).
    scaler = Scaler(
        api,
        config,
        snapshot_source(indexes),
        namespaces,
        reconciler.autoscaler_said,
        fetch=memo.get("fetch_metrics") or fetch_metrics,
        period=memo.get("autoscale_seconds") or SYNC_SECONDS,
    )
    memo.background = [
        asyncio.create_task(reconciler.resync_forever(), name="resync"),
        asyncio.create_task(scaler.run_forever(), name="autoscaler"),
    ]
    if config.metrics_port is not None:
        memo.metrics_runner = await serve_metrics(reconciler, config.metrics_port)


@kopf.on.cleanup(registry=registry)
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    for task in memo.get("background") or ():
        task.cancel()
    reconciler = memo.get("reconciler")
    if reconciler is not None:
        reconciler.close()
    runner = memo.get("metrics_runner")
    if runner is not None:
        await runner.cleanup()


async def serve_metrics(reconciler: Reconciler, port: int) -> web.AppRunner:
    """Prometheus text format on ``:port/metrics`` (the chart's metrics Service), rendered by
    prometheus-client from the reconciler's counters (reconciler.Metrics)."""

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(
            text=reconciler.metrics.render(), content_type="text/plain", charset="utf-8"
        )

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port).start()
    log.info("metrics on :%d/metrics", port)
    return runner


# --- reconciling -------------------------------------------------------------------------------


async def changed(
    namespace: str, name: str, resource: kopf.Resource, reason: str, memo: kopf.Memo, **_: Any
) -> None:
    """Any Router, Address or LinkRoute created, changed (spec, labels, annotations: the pause),
    or found at start: its namespace is reconciled."""
    cause = f"{resource.kind or resource.plural} {name} {reason}"
    await memo.reconciler.reconcile(namespace, cause)


def going(type: str | None, body: kopf.Body, **_: Any) -> bool:
    """Deleted, or marked for deletion (foreground deletion, another party's finalizer)."""
    return type == "DELETED" or bool(body.get("metadata", {}).get("deletionTimestamp"))


async def gone(
    namespace: str, name: str, resource: kopf.Resource, memo: kopf.Memo, **_: Any
) -> None:
    """Peers drop their connectors to a deleted Router's pods; routers drop a deleted Address."""
    await memo.reconciler.reconcile(namespace, f"{resource.kind or resource.plural} {name} gone")


for _kind in KINDS:
    kopf.on.resume(GROUP, VERSION, _kind.plural, id="resume", registry=registry)(changed)
    kopf.on.create(GROUP, VERSION, _kind.plural, id="create", registry=registry)(changed)
    kopf.on.update(GROUP, VERSION, _kind.plural, id="update", registry=registry)(changed)
    kopf.on.event(GROUP, VERSION, _kind.plural, id="gone", when=going, registry=registry)(gone)


@kopf.on.event("apps", "v1", "statefulsets", labels=MANAGED_BY, registry=registry)
async def statefulset_changed(namespace: str, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Router pods became (un)ready, or the StatefulSet scaled: the Router's status follows."""
    if router_owner(body) is not None:
        await memo.reconciler.refresh(namespace)


@kopf.on.event("v1", "pods", labels=MANAGED_BY, registry=registry)
async def pod_changed(
    type: str | None, namespace: str, name: str, body: kopf.Body, memo: kopf.Memo, **_: Any
) -> None:
    """A router pod came, went, or changed its report: the mesh in its Routers' status. A change
    of its store's report may be the step a scale-in waits for (planning/handoff.py): a
    reconcile."""
    key = (namespace, name)
    report = None if type == "DELETED" else mesh.pod_report(body)
    seen: dict[tuple[str, str], mesh.PodReport] = memo.setdefault("pod_reports", {})
    before = seen.get(key)
    if before == report:
        return
    if report is None:
        seen.pop(key, None)
    else:
        seen[key] = report
    store = report.store if report is not None else None
    if store != (before.store if before is not None else None):
        await memo.reconciler.reconcile(namespace, f"pod {name} store {store or '-'}")
    else:
        await memo.reconciler.refresh(namespace, f"pod {name}")
