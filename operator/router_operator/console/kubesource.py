"""Where the routers are on Kubernetes: the Routers (in one namespace, several, or all), the pods
their StatefulSets should run, and what those pods say of themselves.

A Router with N replicas should have pods ``<router>-0`` .. ``<router>-(N-1)``, N being its
StatefulSet's ``spec.replicas`` (more than the Router's while a store hands its nodes off), or
the Router's own before the operator has made the StatefulSet. Every one of them is a target,
running or not: a pod that is missing, crash-looping or not Ready is shown down with the
kubelet's one-line reason rather than left out, and is not asked over AMQP (the scraper would
only wait for its timeout). A pod that is up is asked at ``<pod IP>:<port>`` of the Router's
first plain listener for clients: the console connects as ``qdstat`` does, without TLS or a
password, so a Router whose every client listener needs TLS or SASL PLAIN has none to ask.

What was declared comes from the Address and LinkRoute resources, planned as the operator plans
them (planning/planner.py), in the shape the local backend records (``network_summary``): the
node hosts and the older Address winning a key are the operator's. Two differences: a paused
Address or LinkRoute is shown as its spec says, not as last applied, and Gateways are left out.

The lists are asked again at most every ``max_age`` seconds (the scrape interval): a round asks
for targets and declarations, and a page for a router's log, without listing again. When the
API refuses a list, the last good one is used (pod IPs rarely change) and the error is printed
once, on the console's standard error, which is its pod's log.

Pure but for ``KubernetesSource``'s requests: ``targets``, ``declared`` and ``pod_problem``
take API objects as the API returns them, so tests give them recorded JSON.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from router.pod.kubeapi import Cluster, KubeApiError
from router_operator.console.flows import FlowAnswer
from router_operator.console.kubeflows import (
    COMPONENT_SELECTOR,
    Fetch,
    collectors,
    gather,
    http_get,
)
from router_operator.console.sources import Declared, Target
from router_operator.local.backend import network_summary
from router_operator.planning import adapter
from router_operator.planning.names import INSTANCE_LABEL, selector_labels
from router_operator.planning.planner import plan_namespace
from router_operator.resources.models import (
    AMQP_PORT,
    API_VERSION,
    DEFAULT_NETWORK,
    DEFAULT_ROUTER_IMAGE,
    GROUP,
    ROUTER_CONTAINER,
    VERSION,
)

MAX_AGE = 2.0
"""Seconds a list is used before it is asked again: the scraper's default interval."""
LOG_BYTES = 64 * 1024
"""At most this much of a log's tail: a router's lines are short, a crash's traceback not."""
REASON_CHARACTERS = 200

ROUTER_POD_SELECTOR = ",".join(
    f"{k}={v}" for k, v in sorted(selector_labels("").items()) if k != INSTANCE_LABEL
)
"""Every Router's pods and StatefulSets (planning/names.py): one list for all the Routers."""


@dataclass(frozen=True)
class Snapshot:
    """The API objects of one refresh, as listed (raw JSON bodies)."""

    routers: tuple[Mapping[str, Any], ...] = ()
    pods: tuple[Mapping[str, Any], ...] = ()
    statefulsets: tuple[Mapping[str, Any], ...] = ()
    addresses: tuple[Mapping[str, Any], ...] = ()
    link_routes: tuple[Mapping[str, Any], ...] = ()
    collectors: tuple[Mapping[str, Any], ...] = ()
    """The networks' collector Services (console/kubeflows.py)."""


# --- pure: API objects in, targets and declarations out ---------------------------------------


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def management_port(router_spec: Mapping[str, Any]) -> int | None:
    """The port of the Router's first listener the console can ask: for clients (``normal``),
    without TLS, admitting ANONYMOUS. No listeners declared means the default one on 5672, as
    the planner has it."""
    for listener in router_spec.get("listeners") or [{"port": AMQP_PORT}]:
        if listener.get("role", "normal") != "normal" or listener.get("tlsSecret"):
            continue
        mechanisms = listener.get("saslMechanisms") or ["ANONYMOUS"]
        if "ANONYMOUS" in mechanisms and not listener.get("authenticatePeer"):
            port = listener.get("port")
            return port if isinstance(port, int) else None
    return None


def _one_line(text: str) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= REASON_CHARACTERS else line[: REASON_CHARACTERS - 1] + "…"


def _condition(pod: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return dict(condition)
    return {}


def _router_container(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    named = [s for s in statuses if s.get("name") == ROUTER_CONTAINER]
    return dict((named or statuses or [{}])[0])


def pod_problem(pod: Mapping[str, Any] | None) -> str | None:
    """Why a router pod does not serve, in one line as ``kubectl describe`` would put it; None
    when it is Running and Ready."""
    if pod is None:
        return "no pod"
    if _meta(pod).get("deletionTimestamp"):
        return "pod terminating"
    status = pod.get("status") or {}
    phase = status.get("phase") or "Unknown"
    if phase in ("Failed", "Succeeded"):
        why = ": ".join(p for p in (status.get("reason"), status.get("message")) if p)
        return _one_line(f"pod {phase}" + (f": {why}" if why else ""))
    container = _router_container(pod)
    state = container.get("state") or {}
    restarts = container.get("restartCount") or 0
    if "waiting" in state:
        waiting = state["waiting"] or {}
        reason = waiting.get("reason") or "waiting"
        if reason == "CrashLoopBackOff":
            last = (container.get("lastState") or {}).get("terminated") or {}
            exited = f"exited {last['exitCode']}" if "exitCode" in last else "exited"
            if last.get("reason"):
                exited += f" ({last['reason']})"
            return _one_line(f"CrashLoopBackOff: {exited}, {restarts} restarts")
        if reason == "ContainerCreating" or not waiting.get("message"):
            return _one_line(reason if phase != "Pending" else f"Pending: {reason}")
        return _one_line(f"{reason}: {waiting['message']}")
    if "terminated" in state:
        ended = state["terminated"] or {}
        return _one_line(
            f"container terminated: {ended.get('reason') or 'exited'}"
            f" (exit {ended.get('exitCode', '?')})"
        )
    if phase == "Pending":
        scheduled = _condition(pod, "PodScheduled")
        if scheduled.get("status") == "False":
            why = ": ".join(p for p in (scheduled.get("reason"), scheduled.get("message")) if p)
            return _one_line(f"Pending: {why or 'not scheduled'}")
        return "Pending"
    if phase != "Running":
        return f"pod {phase}"
    if _condition(pod, "Ready").get("status") == "True":
        return None
    if state.get("running") is not None and not container.get("ready"):
        return "not Ready: readiness probe failing (its log says why)"
    reason = _condition(pod, "Ready").get("reason")
    return _one_line(f"not Ready: {reason}" if reason else "not Ready")


def _endpoint(pod: Mapping[str, Any] | None, port: int | None) -> str | None:
    ip = ((pod or {}).get("status") or {}).get("podIP")
    if not ip or port is None:
        return None
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def _owner_uid(obj: Mapping[str, Any]) -> str | None:
    for owner in _meta(obj).get("ownerReferences") or []:
        if owner.get("kind") == "Router" and str(owner.get("apiVersion", "")).startswith(GROUP):
            return str(owner.get("uid"))
    return None


def expected_replicas(router: Mapping[str, Any], statefulsets: Mapping[str, int]) -> int:
    """How many pods the Router should have now: its StatefulSet's replicas (it keeps the
    leaving pods of a store handing off), else the Router's own (no StatefulSet made yet)."""
    uid = str(_meta(router).get("uid") or "")
    if uid in statefulsets:
        return statefulsets[uid]
    replicas = _spec(router).get("replicas", 1)
    return replicas if isinstance(replicas, int) and replicas >= 0 else 1


def targets(snapshot: Snapshot) -> list[Target]:
    """A target per pod each Router should have, in namespace, network and name order."""
    replicas = {
        uid: int(_spec(s).get("replicas", 1) or 0)
        for s in snapshot.statefulsets
        if (uid := _owner_uid(s)) is not None
    }
    pods = {(_meta(p).get("namespace"), _meta(p).get("name")): p for p in snapshot.pods}
    found = []
    for router in snapshot.routers:
        meta, spec = _meta(router), _spec(router)
        name, namespace = str(meta.get("name")), str(meta.get("namespace"))
        network = spec.get("network") or DEFAULT_NETWORK
        mode = spec.get("role") or "interior"
        port = management_port(spec)
        made = str(meta.get("uid") or "") in replicas
        for ordinal in range(expected_replicas(router, replicas)):
            pod_name = f"{name}-{ordinal}"
            pod = pods.get((namespace, pod_name))
            if pod is not None and (_meta(pod).get("labels") or {}).get(INSTANCE_LABEL) != name:
                pod = None  # a pod of that name, but not this Router's
            down = pod_problem(pod)
            if pod is None:
                down = "no pod: " + (
                    "its StatefulSet has not made it yet"
                    if made
                    else f"no StatefulSet yet (kubectl -n {namespace} describe rtr {name})"
                )
            elif down is None and port is None:
                down = "no listener the console can ask (every client listener needs TLS or SASL)"
            found.append(
                Target(
                    id=pod_name,
                    network=str(network),
                    namespace=namespace,
                    mode=str(mode),
                    endpoint=_endpoint(pod, port),
                    down=down,
                    where=f"kubectl -n {namespace} logs pod/{pod_name}",
                )
            )
    return sorted(found, key=lambda t: (t.namespace, t.network, t.id))


def _parsed(
    objects: Iterable[Mapping[str, Any]], kind: str, namespace: str
) -> list[adapter.Parsed]:
    """A namespace's objects of a kind, validated as the operator validates them; those being
    deleted left out, as the operator leaves them out."""
    found = []
    for obj in objects:
        if _meta(obj).get("namespace") == namespace:
            parsed = adapter.parse(kind, {"apiVersion": API_VERSION, "kind": kind, **obj})
            if not parsed.deleting:
                found.append(parsed)
    return found


def declared(snapshot: Snapshot) -> Declared:
    """Addresses and link routes of every namespace, planned as the operator plans them (what
    the models refuse is not applied, so not declared)."""
    namespaces = {
        str(_meta(o).get("namespace"))
        for o in (*snapshot.routers, *snapshot.addresses, *snapshot.link_routes)
    }
    addresses: list[dict[str, Any]] = []
    link_routes: list[dict[str, Any]] = []
    for namespace in sorted(namespaces):
        routers = [
            adapter.router_decl(p, DEFAULT_ROUTER_IMAGE) if p.model else adapter.topology_decl(p)
            for p in _parsed(snapshot.routers, "Router", namespace)
        ]
        plan = plan_namespace(
            namespace,
            routers,
            [
                adapter.address_decl(p)
                for p in _parsed(snapshot.addresses, "Address", namespace)
                if p.model
            ],
            [
                adapter.link_route_decl(p)
                for p in _parsed(snapshot.link_routes, "LinkRoute", namespace)
                if p.model
            ],
        )
        for network in plan.networks.values():
            summary = network_summary(network)
            addresses += [{**a, "namespace": namespace} for a in summary["addresses"]]
            link_routes += [
                {**lr, "network": network.name, "namespace": namespace}
                for lr in summary["linkRoutes"]
            ]
    return Declared(addresses=addresses, link_routes=link_routes)


# --- the API ------------------------------------------------------------------------------------


@dataclass
class _Cache:
    at: float | None = None
    snapshot: Snapshot = field(default_factory=Snapshot)
    declared: Declared | None = None


class KubernetesSource:
    """The Routers of ``namespace`` (one, several, or None: every namespace) on ``cluster``."""

    def __init__(
        self,
        cluster: Cluster,
        namespace: str | Sequence[str] | None,
        max_age: float = MAX_AGE,
        clock: Callable[[], float] = time.monotonic,
        fetch: Fetch = http_get,
    ) -> None:
        self.cluster = cluster
        self.fetch = fetch
        if isinstance(namespace, str):
            namespace = [namespace]
        self.namespaces: tuple[str, ...] | None = (
            None if namespace is None else tuple(dict.fromkeys(namespace))
        )
        where = "every namespace" if self.namespaces is None else ", ".join(self.namespaces)
        host = cluster.server.split("://", 1)[-1]
        self.name = f"{host} ({where})"
        self.max_age = max_age
        self.clock = clock
        self.errors: dict[str, str] = {}
        """What the API last refused, by list: shown once each on standard error."""
        self._cache = _Cache()
        self._lock = threading.Lock()
        self._unanswered = False
        """The API server did not answer a list of this refresh: the others are not asked."""

    # The Source protocol.

    def targets(self) -> list[Target]:
        return targets(self._snapshot()[0])

    def declared(self) -> Declared:
        snapshot, cache = self._snapshot()
        if cache.declared is None:  # planned once per refresh (two threads: twice at worst)
            cache.declared = declared(snapshot)
        return cache.declared

    def log_tail(self, target: Target, lines: int) -> list[str]:
        """The router container's last lines; those of the one before, when the current one has
        none to give (crash-looping, waiting to start again)."""
        path = f"/api/v1/namespaces/{target.namespace}/pods/{target.id}/log"
        query = {"container": ROUTER_CONTAINER, "tailLines": str(lines)}
        query["limitBytes"] = str(LOG_BYTES)
        try:
            text = self.cluster.request_text(path, query=query, timeout=10.0)
        except KubeApiError as err:
            text, failure = "", f"{target.where}: {err}"
        else:
            failure = ""
        if not text.strip():
            try:
                previous = self.cluster.request_text(
                    path, query={**query, "previous": "true"}, timeout=10.0
                )
            except KubeApiError:
                previous = ""
            if previous.strip():
                heading = f"(the previous container's last lines: {target.where} --previous)"
                return [heading, *previous.splitlines()[-lines:]]
        if failure:
            return [failure]
        return text.splitlines()[-lines:]

    def flows(self, start_ms: int, end_ms: int) -> FlowAnswer:
        return gather(collectors(self._snapshot()[0].collectors), start_ms, end_ms, self.fetch)

    def analysis(self) -> Path | None:
        return None

    # The lists.

    def _snapshot(self) -> tuple[Snapshot, _Cache]:
        with self._lock:
            now = self.clock()
            cache = self._cache
            if cache.at is not None and now - cache.at < self.max_age:
                return cache.snapshot, cache
            old = cache.snapshot
            self._unanswered = False
            snapshot = Snapshot(
                routers=self._list("routers", f"/apis/{GROUP}/{VERSION}", "routers", old.routers),
                pods=self._list("pods", "/api/v1", "pods", old.pods, ROUTER_POD_SELECTOR),
                statefulsets=self._list(
                    "statefulsets",
                    "/apis/apps/v1",
                    "statefulsets",
                    old.statefulsets,
                    ROUTER_POD_SELECTOR,
                ),
                addresses=self._list(
                    "addresses", f"/apis/{GROUP}/{VERSION}", "addresses", old.addresses
                ),
                link_routes=self._list(
                    "linkroutes", f"/apis/{GROUP}/{VERSION}", "linkroutes", old.link_routes
                ),
                collectors=self._list(
                    "services", "/api/v1", "services", old.collectors, COMPONENT_SELECTOR
                ),
            )
            self._cache = _Cache(now, snapshot)
            return snapshot, self._cache

    def _list(
        self,
        what: str,
        prefix: str,
        plural: str,
        last: tuple[Mapping[str, Any], ...],
        selector: str | None = None,
    ) -> tuple[Mapping[str, Any], ...]:
        """Every object of a kind in the namespaces, or ``last`` when the API refuses one (or
        did not answer the lists before: each would wait for its timeout too)."""
        if self._unanswered:
            return last
        query = {"labelSelector": selector} if selector else {}
        paths = (
            [f"{prefix}/{plural}"]
            if self.namespaces is None
            else [f"{prefix}/namespaces/{ns}/{plural}" for ns in self.namespaces]
        )
        items: list[Mapping[str, Any]] = []
        try:
            for path in paths:
                answer = self.cluster.request("GET", path, query=query, timeout=10.0) or {}
                items += answer.get("items") or []
        except KubeApiError as err:
            self._unanswered = err.status == 0
            self._failed(what, f"listing {what}: {err}")
            return last
        self._failed(what, None)
        return tuple(items)

    def _failed(self, what: str, error: str | None) -> None:
        if error is None:
            if self.errors.pop(what, None) is not None:
                print(f"console: listing {what} works again", file=sys.stderr, flush=True)
        elif self.errors.get(what) != error:
            self.errors[what] = error
            print(f"console: {error} (showing the last list)", file=sys.stderr, flush=True)
