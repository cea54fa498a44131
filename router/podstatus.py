"""Pod status: a router in a pod reports the routers it reaches onto its own Pod, as an annotation.

The operator shows a Router's ``meshConnected`` from these reports (operator/router_operator/
mesh.py) without ever connecting to a router: each router writes what it knows about itself to
the one object that is its own, the Pod, through the Kubernetes API, and the operator watches
the Pods it already owns.

The annotation, ``routernet.io/reachable-routers``, holds router ids, sorted and separated by
commas (empty: none):

- interior: every router its routing table has a route to (the keys of
  ``router.network.routes.cost``: the other interiors it reaches, directly or through others;
  never itself, never edges, which run no link-state protocol);
- edge: the interior of its active uplink (the container id that interior announced, which is
  its router id), empty while it has none;
- standalone: nothing is reported.

It is written when the set changes, and once at start (a router restarted in the same Pod
replaces what its previous run said). The Pod's ``POD_NAME`` and ``POD_NAMESPACE`` (set by the
operator's StatefulSet from the downward API) say which Pod; the Router's ServiceAccount may
``get`` and ``patch`` its own pods only (the Role ``<router>-config-reader``, resourceNames).

As in router/configsync.py, nothing here runs on the router's thread but a comparison:
`PodStatusSource` is the loop's side (``start``/``poll``/``stop``, registered in
``router.config_sources``; housekeeping calls ``poll(now)`` about every second), and hands a
changed value to `PodAnnotator`, a daemon thread that sends a JSON merge patch of
``metadata.annotations`` (any other annotation is left alone). The thread waits ``settle``
seconds after a change before it sends, so a mesh forming router by router costs one write
rather than one per router; it retries with backoff (0.5 s doubling to 30 s, jittered) and always
sends the latest value, never a queue of stale ones. The patch call is injectable (`patch_fn`)
so the logic is tested without a cluster.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from router.configsync import INITIAL_BACKOFF, MAX_BACKOFF, ApiThread
from router.log import get_logger

if TYPE_CHECKING:
    from router.engine import Router

log = get_logger("router.podstatus")

ANNOTATION = "routernet.io/reachable-routers"
"""On a router's Pod: the router ids it reaches, sorted, comma-separated (see the module doc)."""
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


def annotation_value(ids: frozenset[str] | set[str]) -> str:
    return ",".join(sorted(ids))


def parse_annotation(value: str | None) -> frozenset[str] | None:
    """The router ids of an annotation's value; None when there is no value (not reported)."""
    if value is None:
        return None
    return frozenset(part.strip() for part in value.split(",") if part.strip())


def annotation_patch(value: str) -> dict[str, Any]:
    return {"metadata": {"annotations": {ANNOTATION: value}}}


class PodAnnotator(ApiThread):
    """The thread that writes the annotation: `offer` the latest value from any thread (never
    blocks but for a lock held for an assignment); the thread sends it when it differs from what
    was last written."""

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
        self.written: str | None = None  # the value the Pod has, as far as we know
        self._wanted: str | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()

    def stop(self) -> None:
        super().stop()
        self._wake.set()

    def offer(self, value: str) -> None:
        """The value the annotation should have now (called on the router's thread)."""
        with self._lock:
            self._wanted = value
        self._wake.set()

    def run(self) -> None:
        while not self.stopped:
            with self._lock:
                wanted = self._wanted
                self._wake.clear()
            if wanted is None or wanted == self.written:
                self._wake.wait()
                continue
            if self.failures == 0 and self.settle > 0:
                # Let a mesh that is forming settle: the value sent is the latest after this.
                if self._stop.wait(self.settle):
                    return
                with self._lock:
                    wanted = self._wanted
                if wanted is None or wanted == self.written:
                    continue
            try:
                if self.patch_fn is None:
                    self.patch_fn = kube_patch_function(self.namespace, self.pod)
                self.patch_fn(annotation_patch(wanted))
            except Exception as e:  # API, network, config: all retried after a pause
                self.pause_after(e, "podstatus.error", pod=self.pod)
                continue
            self.failures = 0
            self.written = wanted
            log.info("podstatus.reported", pod=self.pod, reachable=wanted or "-")


def kube_patch_function(namespace: str, pod: str) -> PatchFn:
    """A merge patch of the Pod through the kubernetes client: in-cluster config (the pod's
    service account), else the local kubeconfig."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return api_patch_function(client.CoreV1Api(), namespace, pod)


def api_patch_function(api: Any, namespace: str, pod: str) -> PatchFn:
    def patch(body: dict[str, Any]) -> None:
        api.patch_namespaced_pod(
            pod,
            namespace,
            body,
            _content_type=MERGE_PATCH,
            _preload_content=False,
            _request_timeout=REQUEST_TIMEOUT,
        )

    return patch


class PodStatusSource:
    """The router loop's end: ``poll`` compares what the router reaches with what it last
    offered, and offers a change to the `PodAnnotator`. Registered with the config sources
    (``router.config_sources``) for their start/poll/stop calls; it configures nothing."""

    def __init__(self, namespace: str, pod: str, **annotator_options: Any) -> None:
        self.namespace = namespace
        self.pod = pod
        self.annotator_options = annotator_options
        self.annotator: PodAnnotator | None = None
        self.router: Router | None = None
        self.offered: frozenset[str] | None = None

    def start(self, router: Router) -> None:
        self.router = router
        self.offered = None
        self.annotator = PodAnnotator(self.namespace, self.pod, **self.annotator_options)
        log.info("podstatus.started", namespace=self.namespace, pod=self.pod, annotation=ANNOTATION)
        self.annotator.start()
        self.poll(0.0)

    def poll(self, now: float) -> None:
        router, annotator = self.router, self.annotator
        if router is None or annotator is None:
            return
        reachable = reachable_routers(router)
        if reachable is None or reachable == self.offered:
            return
        self.offered = reachable
        annotator.offer(annotation_value(reachable))

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
