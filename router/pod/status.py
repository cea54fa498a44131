"""Pod status: a router in a pod reports the routers it reaches (and, with a store, whether its
pod may go) onto its own Pod, as annotations.

The operator shows a Router's ``meshConnected`` from these reports
(operator/router_operator/planning/mesh.py) without ever connecting to a router: each router
writes what it knows about itself to the one object that is its own, the Pod, through the
Kubernetes API, and the operator watches the Pods it already owns.

The annotation, ``routernet.io/reachable-routers``, holds router ids, sorted and separated by
commas (empty: none):

- interior: every router its routing table has a route to (the keys of
  ``router.network.routes.cost``: the other interiors it reaches, directly or through others;
  never itself, never edges, which run no link-state protocol);
- edge: the interior of its active uplink (the container id that interior announced, which is
  its router id), empty while it has none;
- standalone: nothing is reported.

A router with a store (``store.path``: a pod of a Router with ``spec.store``) also reports
``routernet.io/store``, what the operator needs to scale its Router in without losing messages
(operator/router_operator/planning/handoff.py): ``host`` while its configuration makes it a host
of some address's nodes, else ``moving <n>`` while it still holds n nodes (router/nodes/moving.py
sends them to their hosts), else ``empty``: its pod can go. Without a store nothing is reported.

Each is written when it changes, and once at start (a router restarted in the same Pod
replaces what its previous run said); what changed together goes in one merge patch. The Pod's
``POD_NAME`` and ``POD_NAMESPACE`` (set by the operator's StatefulSet from the downward API)
say which Pod; the Router's ServiceAccount may ``get`` and ``patch`` its own pods only (the
Role ``<router>-config-reader``, resourceNames).

As in router/config/sync.py, nothing here runs on the router's thread but a comparison:
`PodStatusSource` is the loop's side (``start``/``poll``/``stop``, registered in
``router.config_sources``; housekeeping calls ``poll(now)`` about every second), and hands
changed values to `PodAnnotator`, a daemon thread that sends a JSON merge patch of
``metadata.annotations`` (any other annotation is left alone). The thread waits ``settle``
seconds after a change before it sends, so a mesh forming router by router (or a store moving
node by node) costs one write rather than one per step; it retries with backoff (0.5 s
doubling to 30 s, jittered) and always sends the latest values, never a queue of stale ones.
The patch call is injectable (`patch_fn`) so the logic is tested without a cluster.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from router.config.sync import INITIAL_BACKOFF, MAX_BACKOFF, ApiThread
from router.log import get_logger
from router.pod.report import (
    ANNOTATION,
    STORE_ANNOTATION,
    STORE_EMPTY,
    STORE_HOST,
    STORE_MOVING,
    annotation_value,
)

if TYPE_CHECKING:
    from router.core.engine import Router
    from router.pod import kubeapi

log = get_logger("router.podstatus")

MERGE_PATCH = "application/merge-patch+json"
SETTLE_SECONDS = 1.0
REQUEST_TIMEOUT = 30

# A JSON merge patch for the Pod, sent as is.
PatchFn = Callable[[dict[str, Any]], None]


def reachable_routers(router: Router) -> frozenset[str] | None:
    """What this router reports: see the module doc. None: nothing to report (standalone)."""
    network = getattr(router, "network", None)
    if network is not None:
        return frozenset(network.routes.cost)
    edge = getattr(router, "edge", None)
    if edge is not None:
        active = edge.active
        container = getattr(active, "remote_container", None) if active is not None else None
        return frozenset((container,)) if container else frozenset()
    return None


def store_state(router: Router) -> str | None:
    """The store annotation's value for this router; None when it has no store."""
    config = getattr(router, "config", None)
    if config is None or not config.store.path:
        return None
    nodes = router.nodes
    if nodes.hosting:
        return STORE_HOST
    held = nodes.held()
    return f"{STORE_MOVING} {held}" if held else STORE_EMPTY


def annotations_patch(values: Mapping[str, str]) -> dict[str, Any]:
    return {"metadata": {"annotations": dict(values)}}


_LOGGED = {ANNOTATION: "reachable", STORE_ANNOTATION: "store"}


class PodAnnotator(ApiThread):
    """The thread that writes the annotations: `offer` the latest values from any thread (never
    blocks but for a lock held for an assignment); the thread sends, in one merge patch, those
    that differ from what was last written."""

    def __init__(
        self,
        namespace: str,
        pod: str,
        *,
        patch_fn: PatchFn | None = None,
        settle: float = SETTLE_SECONDS,
        rand: Callable[[], float] = random.random,
        initial_backoff: float = INITIAL_BACKOFF,
        max_backoff: float = MAX_BACKOFF,
    ) -> None:
        super().__init__(f"podstatus {pod}", rand, initial_backoff, max_backoff)
        self.namespace = namespace
        self.pod = pod
        self.patch_fn = patch_fn
        self.settle = settle
        self.sent: dict[str, str] = {}  # the annotations the Pod has, as far as we know
        self._wanted: dict[str, str] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()

    @property
    def written(self) -> str | None:
        """The reachable routers as the Pod has them, as far as we know (None: not written)."""
        return self.sent.get(ANNOTATION)

    def stop(self) -> None:
        super().stop()
        self._wake.set()

    def offer(self, value: str) -> None:
        """The value the reachable-routers annotation should have now."""
        self.offer_all({ANNOTATION: value})

    def offer_all(self, values: Mapping[str, str]) -> None:
        """The values these annotations should have now (called on the router's thread);
        others offered before keep theirs."""
        with self._lock:
            self._wanted = {**self._wanted, **values}
        self._wake.set()

    def _changes(self) -> dict[str, str]:
        with self._lock:
            wanted = dict(self._wanted)
        return {k: v for k, v in wanted.items() if self.sent.get(k) != v}

    def run(self) -> None:
        while not self.stopped:
            self._wake.clear()
            changes = self._changes()
            if not changes:
                self._wake.wait()
                continue
            if self.failures == 0 and self.settle > 0:
                # Let a mesh that is forming settle: the values sent are the latest after this.
                if self._stop.wait(self.settle):
                    return
                changes = self._changes()
                if not changes:
                    continue
            try:
                if self.patch_fn is None:
                    self.patch_fn = kube_patch_function(self.namespace, self.pod)
                self.patch_fn(annotations_patch(changes))
            except Exception as e:  # API, network, config: all retried after a pause
                self.pause_after(e, "podstatus.error", pod=self.pod)
                continue
            self.failures = 0
            self.sent.update(changes)
            reported = {_LOGGED.get(k, k): v or "-" for k, v in changes.items()}
            log.info("podstatus.reported", pod=self.pod, **reported)


def kube_patch_function(namespace: str, pod: str) -> PatchFn:
    """A merge patch of the Pod through the API (router/pod/kubeapi.py): the pod's service
    account, else the local kubeconfig (imported here, as router/config/sync.py does)."""
    from router.pod import kubeapi

    return api_patch_function(kubeapi.connect(), namespace, pod)


def api_patch_function(cluster: kubeapi.Cluster, namespace: str, pod: str) -> PatchFn:
    path = f"/api/v1/namespaces/{namespace}/pods/{pod}"

    def patch(body: dict[str, Any]) -> None:
        cluster.request("PATCH", path, body=body, content_type=MERGE_PATCH, timeout=REQUEST_TIMEOUT)

    return patch


class PodStatusSource:
    """The router loop's end: ``poll`` compares what the router reaches (and, with a store, the
    store's state) with what it last offered, and offers a change to the `PodAnnotator`.
    Registered with the config sources (``router.config_sources``) for their start/poll/stop
    calls; it configures nothing."""

    def __init__(self, namespace: str, pod: str, **annotator_options: Any) -> None:
        self.namespace = namespace
        self.pod = pod
        self.annotator_options = annotator_options
        self.annotator: PodAnnotator | None = None
        self.router: Router | None = None
        self.offered: dict[str, str] = {}

    def start(self, router: Router) -> None:
        self.router = router
        self.offered = {}
        self.annotator = PodAnnotator(self.namespace, self.pod, **self.annotator_options)
        log.info("podstatus.started", namespace=self.namespace, pod=self.pod, annotation=ANNOTATION)
        self.annotator.start()
        self.poll(0.0)

    def busy(self) -> bool:
        return False  # its annotations can wait for the next housekeeping, a second at most

    def poll(self, now: float) -> None:
        router, annotator = self.router, self.annotator
        if router is None or annotator is None:
            return
        wanted: dict[str, str] = {}
        reachable = reachable_routers(router)
        if reachable is not None:
            wanted[ANNOTATION] = annotation_value(reachable)
        store = store_state(router)
        if store is not None:
            wanted[STORE_ANNOTATION] = store
        if not wanted or wanted == self.offered:
            return
        self.offered = wanted
        annotator.offer_all(wanted)

    def stop(self) -> None:
        if self.annotator is not None:
            self.annotator.stop()
        self.router = None


def pod_status_sources(environ: Mapping[str, str]) -> list[PodStatusSource]:
    """The reporter for a router running in a pod (POD_NAME and POD_NAMESPACE set), else none."""
    pod = environ.get("POD_NAME")
    namespace = environ.get("POD_NAMESPACE")
    if pod and namespace:
        return [PodStatusSource(namespace, pod)]
    return []
