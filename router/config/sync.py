"""Config-sync: a router pod follows its ConfigMap through the Kubernetes API, not the kubelet.

A mounted ConfigMap reaches the pod's file system a minute or more after a change; watching the
object itself brings the change within the API's watch latency. The operator's StatefulSet sets
``ROUTERNET_CONFIGMAP`` (the ConfigMap's name), ``POD_NAME`` and ``POD_NAMESPACE``; the pod's
configuration is the ConfigMap's key ``<POD_NAME>.json``.

`ConfigMapWatcher` is the only code off the router's thread: a daemon thread that lists the one
ConfigMap (field selector ``metadata.name``), then watches from the list's resourceVersion,
resuming from the last version seen when a watch ends, listing again when the API answers 410
Gone, and backing off (0.5 s doubling to 30 s, jittered) on any other error. It hands the key's
text to a callback only when it changed (None when the ConfigMap or key is absent). The list
and watch calls are injectable (`list_fn`, `watch_fn`) so the logic is tested without a cluster.

`ConfigMapSource` is the loop's side: the callback, on the watcher's thread, has the text
validated with the command line's flags over it (a child process, router/config/child.py),
stores the result and writes a byte to a socket the loop watches (as router/transport/connector.py
does for name lookups); the loop then applies the configuration (router/config/live.py).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from router.config.child import Pending, Ready, Validate
from router.config.live import offer
from router.config.records import RouterConfig
from router.config.views import ConfigError
from router.log import get_logger
from router.transport.connector import backoff_delay
from router.transport.wakeup import Wakeup

if TYPE_CHECKING:
    from router.core.engine import Router
    from router.pod import kubeapi

log = get_logger("router.configsync")

# (resourceVersion of the list, the ConfigMap as a dict or None when there is none)
ListFn = Callable[[], tuple[str | None, dict[str, Any] | None]]
# resourceVersion -> watch events {"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": {}}
WatchFn = Callable[[str | None], Iterable[dict[str, Any]]]
Deliver = Callable[[str | None], None]

INITIAL_BACKOFF = 0.5
MAX_BACKOFF = 30.0
# Server-side watch timeout (the API ends the stream, the watcher resumes where it was); the
# client gives up on a silent connection a little after that.
WATCH_SECONDS = 300
HTTP_GONE = 410


class Gone(Exception):
    """The resourceVersion being watched from is too old: list again."""


class ApiThread:
    """A daemon thread that talks to the Kubernetes API for the router: what the ConfigMap
    watch and the Pod reporter (router/pod/status.py) share. Every failed call is retried after
    a jittered pause doubling from `initial_backoff` to `max_backoff`; `stop` cuts it short."""

    def __init__(
        self,
        thread_name: str,
        rand: Callable[[], float],
        initial_backoff: float,
        max_backoff: float,
    ) -> None:
        self.thread_name = thread_name
        self.rand = rand
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.failures = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=self.thread_name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def pause_after(self, error: Exception, event: str, **fields: Any) -> None:
        """Log a failed call once and wait before the next try."""
        self.failures += 1
        delay = backoff_delay(self.failures, self.rand, self.initial_backoff, self.max_backoff)
        log.warning(event, **fields, error=describe_error(error), retry_in=round(delay, 2))
        self._stop.wait(delay)


class ConfigMapWatcher(ApiThread):
    def __init__(
        self,
        namespace: str,
        name: str,
        key: str,
        deliver: Deliver,
        *,
        list_fn: ListFn | None = None,
        watch_fn: WatchFn | None = None,
        rand: Callable[[], float] = random.random,
        initial_backoff: float = INITIAL_BACKOFF,
        max_backoff: float = MAX_BACKOFF,
    ) -> None:
        super().__init__(f"configsync {name}", rand, initial_backoff, max_backoff)
        self.namespace = namespace
        self.name = name
        self.key = key
        self.deliver = deliver
        self.list_fn = list_fn
        self.watch_fn = watch_fn
        self.resource_version: str | None = None
        self._last: object = object()  # nothing delivered yet

    def run(self) -> None:
        while not self.stopped:
            try:
                if self.list_fn is None or self.watch_fn is None:
                    self.list_fn, self.watch_fn = kube_functions(self.namespace, self.name)
                if self.resource_version is None:
                    version, obj = self.list_fn()
                    self.seen(obj)
                    self.resource_version = version
                self.watch()
            except Gone:
                log.info("configsync.relist", configmap=self.name, version=self.resource_version)
                self.resource_version = None
            except Exception as e:  # API, network, config: all retried after a pause
                if _status(e) == HTTP_GONE:
                    log.info("configsync.relist", configmap=self.name)
                    self.resource_version = None
                    continue
                self.pause_after(e, "configsync.error", configmap=self.name)

    def watch(self) -> None:
        """One watch request, until the API ends it; raises Gone for a 410."""
        assert self.watch_fn is not None
        started = time.monotonic()
        events = 0
        for event in self.watch_fn(self.resource_version):
            if self.stopped:
                return
            events += 1
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == HTTP_GONE:
                    raise Gone()
                raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
            meta = obj.get("metadata") or {}
            self.resource_version = meta.get("resourceVersion") or self.resource_version
            self.failures = 0
            if kind == "BOOKMARK" or meta.get("name") != self.name:
                continue
            self.seen(None if kind == "DELETED" else obj)
        if not events and time.monotonic() - started < 1.0 and not self.stopped:
            # A stream that ends at once, again and again, must not spin: count it a failure.
            raise RuntimeError("the watch ended at once")

    def seen(self, obj: dict[str, Any] | None) -> None:
        """The ConfigMap as it is now (None: absent): hand the key's text on if it changed."""
        data = (obj or {}).get("data") or {}
        text = data.get(self.key)
        if text != self._last:
            self._last = text
            self.deliver(text)


def _status(e: Exception) -> int | None:
    status = getattr(e, "status", None)
    return status if isinstance(status, int) else None


def describe_error(e: Exception) -> str:
    """One line: a refused request's status, reason and the API server's message
    (kubeapi.KubeApiError says all three)."""
    return " ".join(str(e).split()) or type(e).__name__


def kube_functions(namespace: str, name: str) -> tuple[ListFn, WatchFn]:
    """List and watch of one ConfigMap through the API (router/pod/kubeapi.py): the pod's service
    account, else the local kubeconfig. Imported here: http.client brings the e-mail package,
    which a router outside a pod never needs."""
    from router.pod import kubeapi

    return api_functions(kubeapi.connect(), namespace, name)


def api_functions(cluster: kubeapi.Cluster, namespace: str, name: str) -> tuple[ListFn, WatchFn]:
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    selector = {"fieldSelector": f"metadata.name={name}"}

    def list_fn() -> tuple[str | None, dict[str, Any] | None]:
        body = cluster.request("GET", path, query=selector) or {}
        items = [i for i in body.get("items") or [] if i.get("metadata", {}).get("name") == name]
        version = (body.get("metadata") or {}).get("resourceVersion")
        return version, items[0] if items else None

    def watch_fn(version: str | None) -> Iterator[dict[str, Any]]:
        query = {
            **selector,
            "timeoutSeconds": str(WATCH_SECONDS),
            "allowWatchBookmarks": "true",
        }
        if version:
            query["resourceVersion"] = version
        for event in cluster.watch(path, query=query, timeout=WATCH_SECONDS + 30):
            yield {"type": event.get("type"), "object": event.get("object")}

    return list_fn, watch_fn


class ConfigMapSource:
    """The router loop's end of the watcher: latest text in, configuration applied."""

    def __init__(
        self,
        namespace: str,
        name: str,
        key: str,
        validate: Validate,
        **watcher_options: Any,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.key = key
        self.validate = validate
        self.watcher_options = watcher_options
        self.watcher: ConfigMapWatcher | None = None
        self.router: Router | None = None
        self._lock = threading.Lock()
        # The latest only: the configuration validated (or why not), None for no ConfigMap.
        self._pending: list[tuple[Callable[[], RouterConfig] | None, float]] = []
        self._wakeup: Wakeup | None = None
        self.applied_at: float | None = None  # monotonic, for tests and logs

    def start(self, router: Router) -> None:
        self.router = router
        self._wakeup = Wakeup(router.sel, self)
        self.watcher = ConfigMapWatcher(
            self.namespace, self.name, self.key, self.deliver, **self.watcher_options
        )
        log.info("configsync.started", namespace=self.namespace, configmap=self.name, key=self.key)
        self.watcher.start()

    def deliver(self, text: str | None) -> None:
        """Called on the watcher's thread, which also waits for the validation: the loop only
        applies its result."""
        received = time.monotonic()
        load = None if text is None else _settled(self.validate(text, self.key)).result
        with self._lock:
            self._pending[:] = [(load, received)]
        wakeup = self._wakeup
        if wakeup is not None:
            wakeup.poke()

    def on_wakeup(self) -> None:
        if self._wakeup is not None:
            self._wakeup.drain()
        with self._lock:
            pending, self._pending = self._pending, []
        for load, received in pending:
            self.apply(load, received)

    def apply(self, load: Callable[[], RouterConfig] | None, received: float) -> None:
        router = self.router
        if router is None:
            return
        if load is None:
            log.warning(
                "config.missing",
                source="configmap",
                configmap=self.name,
                key=self.key,
                error="no such ConfigMap or key; the running configuration stays",
            )
            return
        changes = offer(router, "configmap", load)
        if changes:
            self.applied_at = time.monotonic()
            log.debug(
                "configsync.latency",
                ms=round((self.applied_at - received) * 1000, 1),
            )

    def poll(self, now: float) -> None:
        pass

    def busy(self) -> bool:
        return False  # its watcher's thread wakes the loop (router/transport/wakeup.py)

    def stop(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
        if self._wakeup is not None:
            self._wakeup.close()
            self._wakeup = None
        self.router = None


def _settled(pending: Pending) -> Ready:
    """Waits for the validation here, on the watcher's thread."""
    try:
        return Ready(pending.result())
    except ConfigError as err:
        return Ready(error=err)
