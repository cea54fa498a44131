"""The operator's kopf handlers against the kmock Kubernetes emulator: create, update, scale,
delete, pause, invalid input; status and conditions asserted. Plus the pure parts (status rules,
configuration) and the reconciler against a fake API where a failure must be staged.

kmock serves list/watch/create/merge-patch/delete over real HTTP, so kopf and the reconciler's
client run unmodified. It does not run controllers (no garbage collection, no StatefulSet
controller: the tests play it by patching the StatefulSet's status) and does not track uid,
resourceVersion or generation, nor split the status subresource from the main resource:
:class:`Cluster` adds those few API server behaviours the operator relies on.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import json
import os
import re
import signal
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import kmock
import kopf
import pytest
from harness import write_kubeconfig
from router_operator.kubernetes import handlers
from router_operator.kubernetes.api import ApiError, resource_path
from router_operator.kubernetes.cli import main as cli_main
from router_operator.kubernetes.cli import parse_args
from router_operator.kubernetes.environment import OperatorConfig
from router_operator.kubernetes.kube import KubeClient
from router_operator.kubernetes.reconciler import Memory, Reconciler, Snapshot, reconcile_namespace
from router_operator.planning import adapter, internal_tls
from router_operator.planning.names import selector
from router_operator.rendering.router import DIGEST_ANNOTATION
from router_operator.resources.autoscaling import AutoscalingStatus
from router_operator.resources.models import (
    API_VERSION,
    CATEGORY,
    GROUP,
    KINDS,
    PAUSE_ANNOTATION,
    READY,
    RECONCILIATION_PAUSED,
    RouterStatus,
)

NS = "msg"
IMAGE = "registry.example/routernet/router:test"
COLLECTOR = "registry.example/routernet/collector:test"
ROUTERS = f"{GROUP}/v1alpha1/routers"
ADDRESSES = f"{GROUP}/v1alpha1/addresses"
LINKROUTES = f"{GROUP}/v1alpha1/linkroutes"
CHILDREN = {
    "v1/serviceaccounts": "{name}",
    "v1/configmaps": "{name}-config",
    "rbac.authorization.k8s.io/v1/roles": "{name}-config-reader",
    "rbac.authorization.k8s.io/v1/rolebindings": "{name}-config-reader",
    "v1/services": "{name}-peers",
    "policy/v1/poddisruptionbudgets": "{name}",
    "apps/v1/statefulsets": "{name}",
}
T = TypeVar("T")

_versions = itertools.count(1000)


def _merge(base: Any, patch: Any) -> Any:
    """JSON merge patch (RFC 7386), to tell whether a patch changes the spec."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(base) if isinstance(base, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result


class Cluster(kmock.KubernetesEmulator):
    """kmock plus what the operator relies on from a real API server: objects get a uid,
    creationTimestamp, resourceVersion and generation (bumped when the spec changes, also
    through /scale); on custom resources, writes to the main resource ignore status and writes
    to /status change nothing else."""

    async def _handle(self, request: kmock.Request) -> Any:
        if request.resource is not None and isinstance(request.data, dict):
            self._as_api_server(request)
        return await super()._handle(request)

    def _as_api_server(self, request: kmock.Request) -> None:
        data: dict[str, Any] = request.data
        custom = request.resource.group == GROUP
        if request.action == kmock.action.CREATE:
            meta = data.setdefault("metadata", {})
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
            meta["generation"] = 1
            meta["resourceVersion"] = str(next(_versions))
            if custom:
                data.pop("status", None)
        elif request.action == kmock.action.UPDATE:
            try:
                current = self.objects[request.resource, request.namespace, request.name]
            except KeyError:
                return
            if current.deleted:
                return
            if custom and request.subresource == "status":
                status = data.get("status")
                data.clear()
                data["status"] = status
            elif custom and request.subresource is None:
                data.pop("status", None)
            meta = data.setdefault("metadata", {})
            old = current.raw
            new_spec = _merge(old.get("spec") or {}, data.get("spec") or {})
            generation = old.get("metadata", {}).get("generation", 1)
            meta["generation"] = generation + (new_spec != (old.get("spec") or {}))
            meta["resourceVersion"] = str(next(_versions))


pytestmark = pytest.mark.kmock(cls=Cluster)


# --- helpers -------------------------------------------------------------------------------------


def declare(cluster: Cluster) -> None:
    cluster.resources.load_bundled()
    for kind in KINDS:
        cluster.resources[f"{GROUP}/v1alpha1/{kind.plural}"] = kmock.ResourceInfo(
            kind=kind.kind_name,
            singular=kind.singular,
            namespaced=True,
            verbs={"list", "watch", "get", "create", "patch", "update", "delete"},
            shortnames=set(kind.short_names),
            categories={CATEGORY},
            subresources={"status", "scale"} if kind.kind_name == "Router" else {"status"},
        )


@pytest.fixture
def cluster(kmock: Cluster, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    """The emulator, with the operator's kubeconfig pointing at it (kopf's login and the
    reconciler's client both read it, as on a laptop)."""
    declare(kmock)
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return kmock


@contextlib.asynccontextmanager
async def operator(
    memo_extras: Mapping[str, Any] | None = None, **overrides: Any
) -> AsyncIterator[kopf.Memo]:
    """The operator, as ``routernet-operator --namespace msg`` runs it, in the test's loop.
    ``memo_extras``: what the handlers take from the memo besides config (the autoscaler's
    scrapes and period)."""
    config = OperatorConfig(
        router_image=IMAGE, image_pull_policy="Always", retry_seconds=0.2, **overrides
    )
    memo = kopf.Memo(config=config, namespaced=True, **(memo_extras or {}))
    ready = asyncio.Event()
    task = asyncio.create_task(
        kopf.operator(
            registry=handlers.registry,
            namespaces=[NS],
            standalone=True,
            memo=memo,
            ready_flag=ready,
        )
    )
    try:
        await asyncio.wait_for(ready.wait(), 10)
        yield memo
    finally:
        # Cancelling (rather than the stop flag) skips kopf's 5 s grace for the emulator's
        # own request tasks, which kopf cannot tell from its own.
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def eventually(check: Callable[[], T], timeout: float = 10.0) -> T:
    """``check()`` once it stops raising AssertionError or KeyError."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            return check()
        except (AssertionError, KeyError):
            if asyncio.get_running_loop().time() > deadline:
                raise
        await asyncio.sleep(0.05)


async def call(cluster: Cluster, method: str, path: str, body: Any = None) -> dict[str, Any]:
    headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {}
    async with cluster.request(method, path, json=body, headers=headers) as response:
        assert response.status < 300, await response.text()
        return dict(await response.json())


def path(plural: str, name: str | None = None, sub: str | None = None) -> str:
    kinds = {kind.plural: kind.kind_name for kind in KINDS}
    return resource_path(API_VERSION, kinds[plural], NS, name, sub)


async def create(
    cluster: Cluster, plural: str, name: str, spec: dict[str, Any], **meta: Any
) -> str:
    kind = {k.plural: k.kind_name for k in KINDS}[plural]
    body = {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {"name": name, "namespace": NS, **meta},
        "spec": spec,
    }
    created = await call(cluster, "POST", path(plural), body)
    return str(created["metadata"]["uid"])


def get(cluster: Cluster, resource: str, name: str) -> dict[str, Any]:
    """The stored object; KeyError when absent or deleted (so ``eventually`` waits)."""
    obj = cluster.objects[resource, NS, name]
    if obj.deleted:
        raise KeyError(name)
    return copy.deepcopy(dict(obj.raw))


def condition(obj: Mapping[str, Any], type_: str) -> dict[str, Any]:
    for cond in obj.get("status", {}).get("conditions", []):
        if cond["type"] == type_:
            return dict(cond)
    raise KeyError(type_)


def pod_configs(cluster: Cluster, router: str) -> dict[str, dict[str, Any]]:
    data = get(cluster, "v1/configmaps", f"{router}-config")["data"]
    return {k.removesuffix(".json"): json.loads(v) for k, v in data.items() if k.endswith(".json")}


def reconciled(cluster: Cluster, plural: str, name: str, generation: int = 1) -> dict[str, Any]:
    obj = get(cluster, f"{GROUP}/v1alpha1/{plural}", name)
    assert obj.get("status", {}).get("observedGeneration") == generation, obj.get("status")
    condition(obj, READY)
    return obj


def requests_to(cluster: Cluster, resource: str, *methods: str) -> list[Any]:
    return [r for r in cluster[kmock.resource(resource)] if r.method.value in methods]


# --- create --------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_create_router_renders_children_and_status(cluster: Cluster) -> None:
    async with operator():
        uid = await create(cluster, "routers", "hub", {"replicas": 1})
        router = await eventually(lambda: reconciled(cluster, "routers", "hub"))

        reference = {
            "apiVersion": API_VERSION,
            "kind": "Router",
            "name": "hub",
            "uid": uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
        for resource, name in [*CHILDREN.items(), ("v1/services", "{name}")]:
            child = get(cluster, resource, name.format(name="hub"))
            assert child["metadata"]["ownerReferences"] == [reference], resource
        assert requests_to(cluster, "apps/v1/statefulsets", "PATCH", "POST")  # the check sees
        configs = pod_configs(cluster, "hub")
        assert list(configs) == ["hub-0"]
        assert configs["hub-0"]["router"] == {"id": "hub-0", "mode": "interior"}
        (container,) = get(cluster, "apps/v1/statefulsets", "hub")["spec"]["template"]["spec"][
            "containers"
        ]
        assert container["image"] == IMAGE and container["imagePullPolicy"] == "Always"
        # Config-sync: the pods watch their ConfigMap with the Router's ServiceAccount.
        env = {e["name"]: e for e in container["env"]}
        assert env["ROUTERNET_CONFIGMAP"]["value"] == "hub-config"
        role = get(cluster, "rbac.authorization.k8s.io/v1/roles", "hub-config-reader")
        assert role["rules"][0]["resourceNames"] == ["hub-config"]
        binding = get(cluster, "rbac.authorization.k8s.io/v1/rolebindings", "hub-config-reader")
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "hub", "namespace": NS}]

        status = router["status"]
        assert status["selector"] == selector("hub")
        assert status["endpoints"] == [f"amqp://hub.{NS}.svc.cluster.local:5672"]
        assert status["replicas"] == 0 and status["readyReplicas"] == 0
        assert condition(router, adapter.CONFIG_APPLIED)["status"] == "True"
        # No pod has reported what it reaches (tests/test_operator_mesh.py: when they do).
        assert condition(router, adapter.MESH_CONNECTED)["reason"] == "NotReported"
        assert condition(router, adapter.MESH_CONNECTED)["status"] == "Unknown"
        assert "meshConnected" not in status
        assert condition(router, READY)["status"] == "False"
        assert condition(router, READY)["reason"] == "RoutersNotReady"
        assert all(c["observedGeneration"] == 1 for c in status["conditions"])

        # The StatefulSet controller's part: the pod is ready, and the Router says so.
        sts_status = {"status": {"replicas": 1, "readyReplicas": 1}}
        await call(
            cluster, "PATCH", "/apis/apps/v1/namespaces/msg/statefulsets/hub/status", sts_status
        )

        def ready() -> dict[str, Any]:
            router = get(cluster, ROUTERS, "hub")
            assert condition(router, READY)["status"] == "True", router["status"]
            return router

        router = await eventually(ready)
        assert router["status"]["readyReplicas"] == 1 and router["status"]["replicas"] == 1
        assert condition(router, adapter.REPLICAS_READY)["message"] == "1 of 1 router pods ready"

    history = cluster.objects[ROUTERS, NS, "hub"].history
    assert not any(v and v["metadata"].get("finalizers") for v in history), "no finalizers"
    annotations = router["metadata"].get("annotations", {})
    assert all(k.startswith(f"{handlers.KOPF_PREFIX}/") for k in annotations), annotations


# --- update: an Address reaches every router config without a restart ----------------------------


@pytest.mark.asyncio
async def test_address_update_changes_configs_not_pods(cluster: Cluster) -> None:
    await create(cluster, "routers", "hub", {"replicas": 2})
    async with operator():
        await eventually(lambda: reconciled(cluster, "routers", "hub"))
        template = get(cluster, "apps/v1/statefulsets", "hub")["spec"]["template"]

        await create(
            cluster, "addresses", "orders", {"prefix": "orders", "distribution": "closest"}
        )

        def has(distribution: str) -> None:
            configs = pod_configs(cluster, "hub")
            assert set(configs) == {"hub-0", "hub-1"}
            for config in configs.values():
                assert config["addresses"] == [
                    {"prefix": "orders", "distribution": distribution}
                ], config

        await eventually(lambda: has("closest"))
        address = await eventually(lambda: reconciled(cluster, "addresses", "orders"))
        assert condition(address, READY)["status"] == "True"
        assert condition(address, READY)["reason"] == "Applied"
        sts = get(cluster, "apps/v1/statefulsets", "hub")
        assert sts["spec"]["template"] == template, "an address change must not restart pods"

        await call(
            cluster, "PATCH", path("addresses", "orders"), {"spec": {"distribution": "multicast"}}
        )
        await eventually(lambda: has("multicast"))
        await eventually(lambda: reconciled(cluster, "addresses", "orders", generation=2))
        sts = get(cluster, "apps/v1/statefulsets", "hub")
        assert sts["spec"]["template"] == template
        assert sts["spec"]["template"]["metadata"]["annotations"][DIGEST_ANNOTATION]


# --- TLS: a listener's Secret is mounted, never read ---------------------------------------------


@pytest.mark.asyncio
async def test_a_tls_listener_is_served_from_its_mounted_secret(cluster: Cluster) -> None:
    await create(cluster, "routers", "hub", {"replicas": 2})
    async with operator():
        await eventually(lambda: reconciled(cluster, "routers", "hub"))
        plain = get(cluster, "apps/v1/statefulsets", "hub")["spec"]["template"]

        listeners = [{"port": 5671, "tlsSecret": "hub-tls"}, {"port": 5672}]
        await call(cluster, "PATCH", path("routers", "hub"), {"spec": {"listeners": listeners}})
        router = await eventually(lambda: reconciled(cluster, "routers", "hub", generation=2))

        assert condition(router, adapter.CONFIG_APPLIED)["status"] == "True"
        assert router["status"]["endpoints"] == [
            f"amqps://hub.{NS}.svc.cluster.local:5671",
            f"amqp://hub.{NS}.svc.cluster.local:5672",
        ]
        for pod, config in pod_configs(cluster, "hub").items():
            assert config["sslProfiles"] == [
                {
                    "name": "listener-5671",
                    "certFile": "/etc/routernet-tls/5671/tls.crt",
                    "privateKeyFile": "/etc/routernet-tls/5671/tls.key",
                },
                internal_tls.ssl_profile(pod),  # the routers' own, beside it
            ]
            (tls,) = [lsn for lsn in config["listeners"] if lsn.get("port") == 5671]
            assert (tls["sslProfile"], tls["requireSsl"]) == ("listener-5671", True)
        template = get(cluster, "apps/v1/statefulsets", "hub")["spec"]["template"]
        assert template != plain, "a new volume: the StatefulSet rolls the pods"
        assert {"name": "tls-5671", "secret": {"secretName": "hub-tls", "optional": False}} in (
            template["spec"]["volumes"]
        )
        service = get(cluster, "v1/services", "hub")
        assert [p["name"] for p in service["spec"]["ports"]] == ["amqps", "amqp"]
    # The operator mounts the user's Secret; it never reads it. The only Secrets it asks for
    # are its own: the network's CA and the Router's certificates.
    asked = {r.name for r in requests_to(cluster, "v1/secrets", "GET", "POST", "PATCH", "PUT")}
    assert asked - {None} == {"routernet-ca-default", "hub-internal-tls"}
    assert not requests_to(cluster, "v1/secrets", "DELETE")


# --- scale ---------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_scale_up_through_the_scale_subresource_meshes_the_new_pods(cluster: Cluster) -> None:
    await create(cluster, "routers", "hub", {"replicas": 1})
    async with operator():
        await eventually(lambda: reconciled(cluster, "routers", "hub"))
        # What an HPA does; the emulator maps the Scale's spec.replicas as the API server does.
        await call(cluster, "PATCH", path("routers", "hub", "scale"), {"spec": {"replicas": 3}})

        def scaled() -> dict[str, dict[str, Any]]:
            assert get(cluster, "apps/v1/statefulsets", "hub")["spec"]["replicas"] == 3
            configs = pod_configs(cluster, "hub")
            assert set(configs) == {"hub-0", "hub-1", "hub-2"}
            return configs

        configs = await eventually(scaled)
        # Each pod may write its own Pod's report (router/pod/status.py), the new ones included.
        role = get(cluster, "rbac.authorization.k8s.io/v1/roles", "hub-config-reader")
        [pods] = [r["resourceNames"] for r in role["rules"] if r["resources"] == ["pods"]]
        assert pods == ["hub-0", "hub-1", "hub-2"]
        links = [
            (pod, c["name"].removeprefix("inter-router/"))
            for pod, config in configs.items()
            for c in config.get("connectors", [])
            if c["role"] == "inter-router"
        ]
        assert sorted(links) == [("hub-1", "hub-0"), ("hub-2", "hub-0"), ("hub-2", "hub-1")]
        router = await eventually(lambda: reconciled(cluster, "routers", "hub", generation=2))
        assert condition(router, adapter.REPLICAS_READY)["message"] == "0 of 3 router pods ready"


# --- autoscaling ---------------------------------------------------------------------------------


class Routers:
    """Stands in for the router pods' /metrics: each pod forwards `per_pod` msgs/s (a counter
    growing with the clock), has 2 client connections, and answers unless listed as `silent`."""

    def __init__(self, per_pod: float) -> None:
        self.per_pod = per_pod
        self.silent: set[str] = set()
        self.scraped: list[dict[str, str]] = []

    async def fetch(self, urls: Mapping[str, str]) -> dict[str, str | None]:
        self.scraped.append(dict(urls))
        counter = self.per_pod * asyncio.get_running_loop().time()
        return {
            pod: None
            if pod in self.silent
            else (
                f'routernet_deliveries_total{{router="{pod}",direction="in"}} {counter}\n'
                f'routernet_connections{{router="{pod}",role="normal"}} 2\n'
                f'routernet_unsettled_deliveries{{router="{pod}"}} 0\n'
            )
            for pod in urls
        }


AUTOSCALING = {
    "minReplicas": 1,
    "maxReplicas": 3,
    "targets": {"messagesPerSecond": 1000},
    "behavior": {"scaleDown": {"stabilizationWindowSeconds": 1}},
}


@pytest.mark.asyncio
async def test_the_autoscaler_scales_a_router_out_and_in_on_its_load(cluster: Cluster) -> None:
    load = Routers(per_pod=2500)
    await create(cluster, "routers", "hub", {"replicas": 1, "autoscaling": AUTOSCALING})
    extras = {"fetch_metrics": load.fetch, "autoscale_seconds": 0.1}
    async with operator(extras):
        # 2,500 msgs/s on one router against 1,000: ceil(2.5) = 3, through /scale.
        def out() -> dict[str, Any]:
            router = get(cluster, ROUTERS, "hub")
            assert router["spec"]["replicas"] == 3
            assert get(cluster, "apps/v1/statefulsets", "hub")["spec"]["replicas"] == 3
            assert condition(router, "ScalingActive")["reason"] == "ValidMetricFound"
            return router

        router = await eventually(out)
        status = router["status"]["autoscaling"]
        assert status["mode"] == "operator"
        assert status["lastScaleReason"].startswith("1 -> 3: ")
        assert re.search(r"messagesPerSecond 2[45]\d\d/router -> 3", status["lastScaleReason"])

        # The next look scrapes the three pods at their stable DNS names.
        def three_scraped() -> None:
            assert load.scraped and set(load.scraped[-1]) == {"hub-0", "hub-1", "hub-2"}

        await eventually(three_scraped)
        assert load.scraped[-1]["hub-2"] == (
            "http://hub-2.hub-peers.msg.svc.cluster.local:9090/metrics"
        )

        # The load goes: once the 1 s stabilization window passed, back to the minimum.
        load.per_pod = 10

        def back() -> None:
            router = get(cluster, ROUTERS, "hub")
            assert router["spec"]["replicas"] == 1
            assert router["status"]["autoscaling"]["lastScaleReason"].startswith("3 -> 1: ")

        await eventually(back)

        # No router answers: no decision, and the status says why.
        load.silent = {"hub-0"}

        def blind() -> None:
            router = get(cluster, ROUTERS, "hub")
            active = condition(router, "ScalingActive")
            assert (active["status"], active["reason"]) == ("False", "FailedGetPodsMetric")
            assert router["spec"]["replicas"] == 1

        await eventually(blind)

        # Autoscaling removed: its status goes, the replicas stay as they are.
        await call(cluster, "PATCH", path("routers", "hub"), {"spec": {"autoscaling": None}})

        def removed() -> None:
            router = get(cluster, ROUTERS, "hub")
            assert "autoscaling" not in router.get("status", {})
            with pytest.raises(KeyError):
                condition(router, "ScalingActive")

        await eventually(removed)


@pytest.mark.asyncio
async def test_the_autoscaler_stays_within_max_and_says_it_is_limited(cluster: Cluster) -> None:
    load = Routers(per_pod=50_000)
    spec = {**AUTOSCALING, "maxReplicas": 2}
    await create(cluster, "routers", "hub", {"replicas": 1, "autoscaling": spec})
    async with operator({"fetch_metrics": load.fetch, "autoscale_seconds": 0.1}):

        def limited() -> dict[str, Any]:
            router = get(cluster, ROUTERS, "hub")
            assert router["spec"]["replicas"] == 2
            assert condition(router, "ScalingLimited")["reason"] == "TooManyReplicas"
            return router

        router = await eventually(limited)
        assert router["status"]["autoscaling"]["recommendedReplicas"] >= 50


@pytest.mark.asyncio
async def test_a_predictive_router_keeps_what_the_recommendation_configmap_says(
    cluster: Cluster,
) -> None:
    hourly = [{"hour": h, "peakMsgsPerSecond": 1800.0, "replicas": 2} for h in range(24)]
    recommendation = {"kind": "Recommendation", "routers": [{"name": "hub", "hourly": hourly}]}
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "routernet-recommendation-default", "namespace": NS},
        "data": {"recommendation.json": json.dumps(recommendation)},
    }
    await call(cluster, "POST", resource_path("v1", "ConfigMap", NS), configmap)
    load = Routers(per_pod=10)
    spec = {**AUTOSCALING, "predictive": True}
    await create(cluster, "routers", "hub", {"replicas": 1, "autoscaling": spec})
    async with operator({"fetch_metrics": load.fetch, "autoscale_seconds": 0.1}):

        def predicted() -> None:
            router = get(cluster, ROUTERS, "hub")
            assert router["spec"]["replicas"] == 2
            assert router["status"]["autoscaling"]["predictedMinReplicas"] == 2

        await eventually(predicted)


@pytest.mark.asyncio
async def test_a_paused_router_is_not_autoscaled(cluster: Cluster) -> None:
    load = Routers(per_pod=5000)
    await create(
        cluster,
        "routers",
        "hub",
        {"replicas": 1, "autoscaling": AUTOSCALING},
        annotations={PAUSE_ANNOTATION: "true"},
    )
    async with operator({"fetch_metrics": load.fetch, "autoscale_seconds": 0.05}):
        await asyncio.sleep(0.5)
        assert load.scraped == []
        assert get(cluster, ROUTERS, "hub")["spec"]["replicas"] == 1


# --- delete --------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_delete_leaves_children_to_garbage_collection(cluster: Cluster) -> None:
    uid = await create(cluster, "routers", "alpha", {"replicas": 1})
    await create(cluster, "routers", "beta", {"replicas": 1})
    async with operator():
        await eventually(lambda: reconciled(cluster, "routers", "alpha"))
        await eventually(lambda: reconciled(cluster, "routers", "beta"))
        beta = pod_configs(cluster, "beta")["beta-0"]
        assert [c["name"] for c in beta["connectors"]] == ["inter-router/alpha-0"]

        await call(cluster, "DELETE", path("routers", "alpha"))

        def peer_dropped() -> None:
            assert "connectors" not in pod_configs(cluster, "beta")["beta-0"]

        await eventually(peer_dropped)

    assert cluster.objects[ROUTERS, NS, "alpha"].deleted, "deleted at once: nothing blocked it"
    history = cluster.objects[ROUTERS, NS, "alpha"].history
    assert not any(v and v["metadata"].get("finalizers") for v in history)
    for resource, name in CHILDREN.items():
        child = get(cluster, resource, name.format(name="alpha"))  # the collector's job
        assert child["metadata"]["ownerReferences"][0]["uid"] == uid
        assert not requests_to(cluster, resource, "DELETE"), "the operator deletes nothing"


# --- pause ---------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_pause_applies_nothing_and_says_so(cluster: Cluster) -> None:
    await create(cluster, "routers", "hub", {"replicas": 1}, annotations={PAUSE_ANNOTATION: "true"})
    async with operator():

        def paused() -> dict[str, Any]:
            router = get(cluster, ROUTERS, "hub")
            assert condition(router, RECONCILIATION_PAUSED)["status"] == "True"
            return router

        router = await eventually(paused)
        assert PAUSE_ANNOTATION in condition(router, RECONCILIATION_PAUSED)["message"]
        assert "observedGeneration" not in router["status"]
        for resource in CHILDREN:
            assert not requests_to(cluster, resource, "POST", "PATCH", "PUT"), resource

        # Resume: applied, the condition is gone.
        unpause = {"metadata": {"annotations": {PAUSE_ANNOTATION: None}}}
        await call(cluster, "PATCH", path("routers", "hub"), unpause)
        router = await eventually(lambda: reconciled(cluster, "routers", "hub"))
        assert all(c["type"] != RECONCILIATION_PAUSED for c in router["status"]["conditions"])
        assert get(cluster, "apps/v1/statefulsets", "hub")["spec"]["replicas"] == 1

        # Paused, someone edits the StatefulSet by hand; resumed, the operator puts it right
        # (although the Router's spec did not change meanwhile).
        pause = {"metadata": {"annotations": {PAUSE_ANNOTATION: "true"}}}
        await call(cluster, "PATCH", path("routers", "hub"), pause)
        await eventually(paused)
        sts_path = "/apis/apps/v1/namespaces/msg/statefulsets/hub"
        await call(cluster, "PATCH", sts_path, {"spec": {"replicas": 7}})
        await call(cluster, "PATCH", path("routers", "hub"), unpause)

        def put_right() -> None:
            assert get(cluster, "apps/v1/statefulsets", "hub")["spec"]["replicas"] == 1

        await eventually(put_right)

        # Paused and scaled: handled (kopf recorded it), but the children stay as they were.
        change = {"metadata": {"annotations": {PAUSE_ANNOTATION: "true"}}, "spec": {"replicas": 2}}
        await call(cluster, "PATCH", path("routers", "hub"), change)

        def handled() -> dict[str, Any]:
            router = paused()
            key = f"{handlers.KOPF_PREFIX}/last-handled-configuration"
            assert '"replicas":2' in router["metadata"]["annotations"][key]
            return router

        router = await eventually(handled)
        assert router["metadata"]["generation"] == 2
        assert router["status"]["observedGeneration"] == 1
        assert get(cluster, "apps/v1/statefulsets", "hub")["spec"]["replicas"] == 1
        assert set(pod_configs(cluster, "hub")) == {"hub-0"}


@pytest.mark.asyncio
async def test_paused_address_stays_as_applied(cluster: Cluster) -> None:
    await create(cluster, "routers", "hub", {"replicas": 1})
    await create(cluster, "addresses", "orders", {"prefix": "orders", "distribution": "closest"})
    async with operator():
        await eventually(lambda: reconciled(cluster, "addresses", "orders"))
        change = {
            "metadata": {"annotations": {PAUSE_ANNOTATION: "true"}},
            "spec": {"distribution": "multicast"},
        }
        await call(cluster, "PATCH", path("addresses", "orders"), change)

        def paused() -> dict[str, Any]:
            address = get(cluster, ADDRESSES, "orders")
            assert condition(address, RECONCILIATION_PAUSED)["status"] == "True"
            return address

        address = await eventually(paused)
        assert address["status"]["observedGeneration"] == 1
        # Another change to the network makes a reconcile; the paused Address stays as it was.
        await create(cluster, "addresses", "audit", {"prefix": "audit"})
        await eventually(lambda: reconciled(cluster, "addresses", "audit"))
        addresses = pod_configs(cluster, "hub")["hub-0"]["addresses"]
        assert addresses == [{"prefix": "audit"}, {"prefix": "orders", "distribution": "closest"}]

        await call(
            cluster,
            "PATCH",
            path("addresses", "orders"),
            {"metadata": {"annotations": {PAUSE_ANNOTATION: None}}},
        )

        def resumed() -> None:
            entries = pod_configs(cluster, "hub")["hub-0"]["addresses"]
            assert {"prefix": "orders", "distribution": "multicast"} in entries

        await eventually(resumed)
        await eventually(lambda: reconciled(cluster, "addresses", "orders", generation=2))


# --- link routes ---------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_link_routes_reach_every_router_and_say_so(cluster: Cluster) -> None:
    await create(cluster, "routers", "hub", {"replicas": 2})
    await create(cluster, "routers", "leaf", {"replicas": 1, "role": "edge"})
    await create(
        cluster,
        "linkroutes",
        "db",
        {"prefix": "db", "direction": "in", "connection": {"host": "broker.msg.svc"}},
    )
    async with operator():
        db = await eventually(lambda: reconciled(cluster, "linkroutes", "db"))
        ready = condition(db, READY)
        assert (ready["status"], ready["reason"], ready["observedGeneration"]) == (
            "True",
            "Applied",
            1,
        )
        assert "hub, leaf" in ready["message"]
        entry = {"prefix": "db", "direction": "in", "connection": "linkroute/db"}
        for router, pods in (("hub", ["hub-0", "hub-1"]), ("leaf", ["leaf-0"])):
            configs = pod_configs(cluster, router)
            for pod in pods:
                assert configs[pod]["linkRoutes"] == [entry]
        connector = pod_configs(cluster, "hub")["hub-0"]["connectors"][-1]
        assert connector == {
            "name": "linkroute/db",
            "host": "broker.msg.svc",
            "role": "route-container",
        }
        template = get(cluster, "apps/v1/statefulsets", "hub")["spec"]["template"]

        # Paused, a LinkRoute stays as applied whatever its spec says.
        change = {
            "metadata": {"annotations": {PAUSE_ANNOTATION: "true"}},
            "spec": {"prefix": "other", "direction": "both"},
        }
        await call(cluster, "PATCH", path("linkroutes", "db"), change)

        def paused() -> None:
            link_route = get(cluster, LINKROUTES, "db")
            assert condition(link_route, RECONCILIATION_PAUSED)["status"] == "True"

        await eventually(paused)
        # Another change to the network makes a reconcile; the paused LinkRoute stays.
        await create(cluster, "addresses", "audit", {"prefix": "audit"})
        await eventually(lambda: reconciled(cluster, "addresses", "audit"))
        assert pod_configs(cluster, "leaf")["leaf-0"]["linkRoutes"] == [entry]

        await call(
            cluster,
            "PATCH",
            path("linkroutes", "db"),
            {"metadata": {"annotations": {PAUSE_ANNOTATION: None}}},
        )
        await eventually(lambda: reconciled(cluster, "linkroutes", "db", generation=2))
        routes = pod_configs(cluster, "hub")["hub-1"]["linkRoutes"]
        assert [(r["prefix"], r["direction"]) for r in routes] == [
            ("other", "in"),
            ("other", "out"),
        ]
        # All of it live, through the ConfigMap: the pods were never rolled.
        assert get(cluster, "apps/v1/statefulsets", "hub")["spec"]["template"] == template

        await call(cluster, "DELETE", path("linkroutes", "db"))

        def removed() -> None:
            config = pod_configs(cluster, "hub")["hub-0"]
            assert "linkRoutes" not in config and "connectors" not in config

        await eventually(removed)


@pytest.mark.asyncio
async def test_a_gateway_reaches_every_router_and_its_connections_one_router(
    cluster: Cluster,
) -> None:
    await create(cluster, "routers", "hub", {"replicas": 1})
    await create(cluster, "routers", "leaf", {"replicas": 1, "role": "edge"})
    spec = {
        "rules": [{"container": "branch-1", "subject": {"prefix": "atm."}}],
        "defaultContainer": "hq",
        "export": [{"prefix": "branch-"}],
        "containers": [{"container": "paris", "connector": "megabank"}],
        "listener": {"router": "hub"},
        "connectors": [{"name": "megabank", "router": "hub", "host": "gw.example.com"}],
    }
    await create(cluster, "gateways", "to-branch", spec)
    async with operator():
        gateway = await eventually(lambda: reconciled(cluster, "gateways", "to-branch"))
        ready = condition(gateway, READY)
        assert (ready["status"], ready["reason"]) == ("True", "Applied")
        routing = {
            "rules": [{"container": "branch-1", "subject": {"prefix": "atm."}}],
            "defaultContainer": "hq",
            "export": [{"prefix": "branch-"}],
        }
        leaf = pod_configs(cluster, "leaf")["leaf-0"]
        assert leaf["gateway"] == routing
        hub = pod_configs(cluster, "hub")["hub-0"]
        assert hub["gateway"] == {
            **routing,
            "containers": [{"container": "paris", "connector": "gateway/megabank"}],
        }
        assert {"name": "gateway", "port": 5673, "role": "gateway"} in hub["listeners"]
        assert hub["connectors"][-1] == {
            "name": "gateway/megabank",
            "host": "gw.example.com",
            "port": 5673,
            "role": "gateway",
        }

        # A second Gateway in the network conflicts; the first stays applied. (Created within
        # the same second, the first is older by its name, which sorts first.)
        await create(cluster, "gateways", "zulu", {"defaultContainer": "x"})

        def conflict() -> None:
            other = condition(reconciled(cluster, "gateways", "zulu"), READY)
            assert (other["status"], other["reason"]) == ("False", "Conflict")

        await eventually(conflict)
        assert pod_configs(cluster, "leaf")["leaf-0"]["gateway"] == routing


@pytest.mark.asyncio
async def test_a_link_route_with_secrets_is_mounted_on_the_interiors_never_read(
    cluster: Cluster,
) -> None:
    await create(cluster, "routers", "hub", {"replicas": 2})
    await create(cluster, "routers", "leaf", {"replicas": 1, "role": "edge"})
    async with operator():
        await eventually(lambda: reconciled(cluster, "routers", "hub"))
        await eventually(lambda: reconciled(cluster, "routers", "leaf"))
        hub_before = get(cluster, "apps/v1/statefulsets", "hub")["spec"]["template"]
        leaf_before = get(cluster, "apps/v1/statefulsets", "leaf")["spec"]["template"]

        connection = {
            "host": "vault.msg.svc",
            "port": 5671,
            "tlsSecret": "vault-ca",
            "saslSecret": "vault-login",
        }
        await create(cluster, "linkroutes", "vault", {"prefix": "vault", "connection": connection})
        vault = await eventually(lambda: reconciled(cluster, "linkroutes", "vault"))
        ready = condition(vault, READY)
        assert (ready["status"], ready["reason"]) == ("True", "Applied")
        assert "mounted on the interior pods" in ready["message"]

        def mounted() -> dict[str, Any]:
            template = get(cluster, "apps/v1/statefulsets", "hub")["spec"]["template"]
            assert template != hub_before
            return template

        template = await eventually(mounted)
        volumes = {v["name"]: v["secret"] for v in template["spec"]["volumes"] if "secret" in v}
        assert volumes == {
            "internal-tls": {"secretName": "hub-internal-tls", "optional": False},
            "lr-tls-vault": {
                "secretName": "vault-ca",
                "items": [{"key": "ca.crt", "path": "ca.crt"}],
                "optional": False,
            },
            "lr-sasl-vault": {
                "secretName": "vault-login",
                "items": [
                    {"key": "username", "path": "username"},
                    {"key": "password", "path": "password"},
                ],
                "optional": False,
            },
        }
        mounts = template["spec"]["containers"][0]["volumeMounts"]
        assert {
            "name": "lr-tls-vault",
            "mountPath": "/etc/routernet-linkroute/vault/tls",
            "readOnly": True,
        } in mounts
        assert template["metadata"]["annotations"] == hub_before["metadata"]["annotations"]
        for pod, config in pod_configs(cluster, "hub").items():
            assert config["sslProfiles"] == [
                {
                    "name": "linkroute-vault",
                    "caCertFile": "/etc/routernet-linkroute/vault/tls/ca.crt",
                },
                internal_tls.ssl_profile(pod),
            ]
            assert config["connectors"][-1] == {
                "name": "linkroute/vault",
                "host": "vault.msg.svc",
                "port": 5671,
                "role": "route-container",
                "saslMechanisms": ["PLAIN"],
                "saslUsername": "file:/etc/routernet-linkroute/vault/sasl/username",
                "saslPassword": "file:/etc/routernet-linkroute/vault/sasl/password",
                "sslProfile": "linkroute-vault",
            }
        # The edge passes the links up: entries only, its pods unchanged.
        leaf = pod_configs(cluster, "leaf")["leaf-0"]
        assert [r["connection"] for r in leaf["linkRoutes"]] == ["linkroute/vault"] * 2
        assert leaf["sslProfiles"] == [internal_tls.ssl_profile("leaf-0")]  # to dial its uplinks
        assert get(cluster, "apps/v1/statefulsets", "leaf")["spec"]["template"] == leaf_before

        # Deleted: the mounts go with it (another roll), the configs lose it.
        await call(cluster, "DELETE", path("linkroutes", "vault"))

        def unmounted() -> None:
            template = get(cluster, "apps/v1/statefulsets", "hub")["spec"]["template"]
            assert template == hub_before
            profiles = pod_configs(cluster, "hub")["hub-0"]["sslProfiles"]
            assert profiles == [internal_tls.ssl_profile("hub-0")]

        await eventually(unmounted)
    # The operator mounts the user's Secrets; it never reads them, only its own.
    asked = {r.name for r in requests_to(cluster, "v1/secrets", "GET", "POST", "PATCH", "PUT")}
    assert asked - {None} <= {"routernet-ca-default", "hub-internal-tls", "leaf-internal-tls"}


# --- invalid input -------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_invalid_objects_are_reported_and_the_rest_reconciled(cluster: Cluster) -> None:
    await create(cluster, "routers", "broken", {"replicas": "three"})
    await create(cluster, "routers", "hub", {"replicas": 1})
    await create(cluster, "addresses", "both", {"prefix": "a", "pattern": "b.*"})
    await create(cluster, "addresses", "first", {"prefix": "orders"})
    await create(cluster, "addresses", "second", {"prefix": "orders"})
    await create(cluster, "linkroutes", "broker", {"prefix": "queue", "containerId": "broker"})
    async with operator():
        broken = await eventually(lambda: reconciled(cluster, "routers", "broken"))
        ready = condition(broken, READY)
        assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
        assert "spec.replicas" in ready["message"]
        for resource, name in CHILDREN.items():
            with pytest.raises(KeyError):
                get(cluster, resource, name.format(name="broken"))
        # The broken Router's pods keep their place in the mesh (replicas unreadable: 1).
        hub = await eventually(lambda: reconciled(cluster, "routers", "hub"))
        assert condition(hub, adapter.CONFIG_APPLIED)["status"] == "True"
        connectors = pod_configs(cluster, "hub")["hub-0"]["connectors"]
        assert [c["name"] for c in connectors] == ["inter-router/broken-0"]

        both = await eventually(lambda: reconciled(cluster, "addresses", "both"))
        assert condition(both, READY)["reason"] == "InvalidSpec"
        assert "exactly one of prefix or pattern" in condition(both, READY)["message"]
        first = await eventually(lambda: reconciled(cluster, "addresses", "first"))
        second = await eventually(lambda: reconciled(cluster, "addresses", "second"))
        assert condition(first, READY)["reason"] == "PartiallyApplied"  # not on broken
        assert "broken (invalid spec)" in condition(first, READY)["message"]
        assert condition(second, READY)["reason"] == "Conflict"
        link = await eventually(lambda: reconciled(cluster, "linkroutes", "broker"))
        assert (condition(link, READY)["status"], condition(link, READY)["reason"]) == (
            "False",
            "PartiallyApplied",  # as the Addresses: not on broken
        )
        assert "broken (invalid spec)" in condition(link, READY)["message"]


# --- without kopf: a failure staged on a fake API ------------------------------------------------


class FakeApi:
    """Records what the reconciler does; fails applies of the kinds in ``fail``."""

    def __init__(self, fail: Mapping[str, ApiError] | None = None) -> None:
        self.fail = dict(fail or {})
        self.applied: list[str] = []
        self.statuses: dict[str, dict[str, Any]] = {}

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        what = f"{obj['kind']}/{obj['metadata']['name']}"
        if what in self.fail:
            raise self.fail[what]
        self.applied.append(what)
        return dict(obj)

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: Mapping[str, Any]
    ) -> dict[str, Any]:
        self.statuses[f"{kind}/{name}"] = dict(status)
        return {}

    def delete(
        self, api_version: str, kind: str, namespace: str, name: str, *, uid: str | None = None
    ) -> bool:
        return False  # get finds nothing, so nothing is ever there to delete


def body(kind: str, name: str, spec: dict[str, Any], generation: int = 1) -> dict[str, Any]:
    meta = {"name": name, "namespace": NS, "uid": f"uid-{name}", "generation": generation}
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": meta, "spec": spec}


@pytest.mark.parametrize(("code", "transient"), [(422, False), (503, True)])
def test_a_failed_apply_is_that_routers_status_only(code: int, transient: bool) -> None:
    api = FakeApi({"StatefulSet/bad": ApiError(code, "Invalid", "spec.template: nope")})
    snapshot = Snapshot(
        NS,
        routers=(body("Router", "bad", {}), body("Router", "good", {})),
        addresses=(body("Address", "orders", {"prefix": "orders"}),),
    )
    result = reconcile_namespace(snapshot, api, OperatorConfig())
    assert result.transient is transient and len(result.failures) == 1
    assert "StatefulSet/good" in api.applied and "StatefulSet/bad" not in api.applied
    bad = api.statuses["Router/bad"]
    ready = next(c for c in bad["conditions"] if c["type"] == READY)
    assert ready["reason"] == "ApplyFailed" and "spec.template: nope" in ready["message"]
    address = api.statuses["Address/orders"]["conditions"][0]
    assert address["reason"] == "PartiallyApplied" and "bad (apply failed)" in address["message"]

    # Unchanged objects get no second status write.
    stored = [
        body("Router", n, {}) | {"status": api.statuses[f"Router/{n}"]} for n in ("bad", "good")
    ]
    again = FakeApi(api.fail)
    reconcile_namespace(Snapshot(NS, routers=tuple(stored)), again, OperatorConfig())
    assert set(again.statuses) == set(), again.statuses


def test_a_routers_status_keeps_what_its_autoscaler_said() -> None:
    """The autoscaler's word goes out with every status the reconciler writes: when both wrote
    their conditions list in a merge patch, each reconcile dropped the autoscaler's (seen on a
    cluster, make e2e) until its next pass."""
    said = RouterStatus()
    said.autoscaling = AutoscalingStatus(mode="operator", desiredReplicas=2)
    said.set_condition("ScalingActive", "True", "ValidMetricFound", "messagesPerSecond")
    said.set_condition("Ready", "False", "NotTheAutoscalers", "its own conditions only")
    memory = Memory()
    memory.autoscaler["uid-hub"] = said
    router = body("Router", "hub", {"replicas": 2})
    api = FakeApi()
    reconcile_namespace(Snapshot(NS, routers=(router,)), api, OperatorConfig(), memory)
    written = api.statuses["Router/hub"]
    conditions = {c["type"]: c for c in written["conditions"]}
    assert written["autoscaling"]["desiredReplicas"] == 2
    assert conditions["ScalingActive"]["reason"] == "ValidMetricFound"
    assert conditions["Ready"]["reason"] != "NotTheAutoscalers"  # the reconciler's, still
    assert "ConfigApplied" in conditions
    # A later word replaces the earlier: autoscaling removed from the Router, nothing of it.
    memory.autoscaler["uid-hub"] = RouterStatus()
    stored = {**router, "status": written}
    again = FakeApi()
    reconcile_namespace(Snapshot(NS, routers=(stored,)), again, OperatorConfig(), memory)
    rewritten = again.statuses["Router/hub"]
    assert rewritten.get("autoscaling") is None
    assert "ScalingActive" not in {c["type"] for c in rewritten["conditions"]}


def test_children_are_applied_in_order_rbac_before_the_statefulset() -> None:
    api = FakeApi()
    reconcile_namespace(Snapshot(NS, routers=(body("Router", "hub", {}),)), api, OperatorConfig())
    assert api.applied == [
        "Secret/routernet-ca-default",  # the certificates first: a new pod needs its own
        "Secret/hub-internal-tls",
        "ServiceAccount/hub",
        "ConfigMap/hub-config",
        "Role/hub-config-reader",
        "RoleBinding/hub-config-reader",
        "Service/hub-peers",
        "Service/hub",
        "PodDisruptionBudget/hub",
        "StatefulSet/hub",
    ]


def test_status_patch_writes_differences_and_removes_what_is_gone() -> None:
    status = RouterStatus(replicas=1, selector="a=b")
    stored = {"replicas": 1, "selector": "a=b", "endpoints": [], "conditions": []}
    assert adapter.status_patch(stored, status) is None
    patch = adapter.status_patch({"replicas": 2, "readyReplicas": 2, "kopf": {}}, status)
    assert patch == {
        "replicas": 1,
        "readyReplicas": None,
        "selector": "a=b",
        "endpoints": [],
        "conditions": [],
    }


def test_configuration_from_the_charts_environment() -> None:
    config = OperatorConfig.from_env(
        {
            "ROUTERNET_ROUTER_IMAGE": "reg/router:1.2",
            "ROUTERNET_ROUTER_IMAGE_PULL_POLICY": "Always",
            "ROUTERNET_METRICS_PORT": "9090",
        }
    )
    assert (config.router_image, config.image_pull_policy, config.metrics_port) == (
        "reg/router:1.2",
        "Always",
        9090,
    )
    assert OperatorConfig.from_env({}).router_image == "routernet/router:0.1.0"
    with pytest.raises(ValueError, match="ROUTERNET_ROUTER_IMAGE_PULL_POLICY"):
        OperatorConfig.from_env({"ROUTERNET_ROUTER_IMAGE_PULL_POLICY": "Sometimes"})


def test_cli_arguments_as_the_chart_passes_them(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = parse_args(["--liveness=http://0.0.0.0:8080/healthz", "--namespace=msg", "--verbose"])
    assert (args.liveness, args.namespace, args.verbose) == (
        "http://0.0.0.0:8080/healthz",
        ["msg"],
        True,
    )
    assert parse_args([]).namespace == []
    monkeypatch.setenv("ROUTERNET_METRICS_PORT", "port")
    assert cli_main([]) == 2
    assert "ROUTERNET_METRICS_PORT" in capsys.readouterr().err


def test_client_paths() -> None:
    assert resource_path("v1", "ConfigMap", "ns", "a") == "/api/v1/namespaces/ns/configmaps/a"
    assert (
        resource_path(API_VERSION, "Router", "ns", "r", "status")
        == "/apis/routernet.io/v1alpha1/namespaces/ns/routers/r/status"
    )
    assert KubeClient.for_url("http://127.0.0.1:1/") is not None


# --- the console script, as the chart runs it ----------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.asyncio
async def test_console_script_runs_the_operator_as_the_chart_does(
    cluster: Cluster, tmp_path: Any
) -> None:
    """``routernet-operator --liveness=... --namespace=...`` with the chart's environment: a
    kubeconfig with a token, the router image, metrics; SIGTERM stops it cleanly."""
    kubeconfig = tmp_path / "token-kubeconfig"
    config = json.loads(Path(os.environ["KUBECONFIG"]).read_text())
    config["users"] = [{"name": "kmock", "user": {"token": "operator-token"}}]
    kubeconfig.write_text(json.dumps(config))
    health, metrics = _free_port(), _free_port()
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "ROUTERNET_ROUTER_IMAGE": IMAGE,
        "ROUTERNET_ROUTER_IMAGE_PULL_POLICY": "Never",
        "ROUTERNET_COLLECTOR_IMAGE": COLLECTOR,
        "ROUTERNET_METRICS_PORT": str(metrics),
    }
    script = Path(sys.executable).parent / "routernet-operator"
    process = await asyncio.create_subprocess_exec(
        str(script),
        f"--liveness=http://127.0.0.1:{health}/healthz",
        f"--namespace={NS}",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        await create(cluster, "routers", "hub", {"replicas": 1})
        await eventually(lambda: reconciled(cluster, "routers", "hub"), timeout=20)
        sts = get(cluster, "apps/v1/statefulsets", "hub")
        (container,) = sts["spec"]["template"]["spec"]["containers"]
        assert (container["image"], container["imagePullPolicy"]) == (IMAGE, "Never")
        # The chart's default: a telemetry collector for the network, from its own image.
        collector = get(cluster, "apps/v1/deployments", "routernet-collector-default")
        assert collector["spec"]["template"]["spec"]["containers"][0]["image"] == COLLECTOR
        get(cluster, "v1/persistentvolumeclaims", "routernet-telemetry-default")
        tokens = {r.headers.get("Authorization") for r in cluster if r.headers.get("Authorization")}
        assert tokens == {"Bearer operator-token"}, "kopf and the reconciler log in alike"
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{health}/healthz") as response:
                assert response.status == 200
            async with session.get(f"http://127.0.0.1:{metrics}/metrics") as response:
                text = await response.text()
        assert 'routernet_operator_reconciles_total{result="ok"}' in text
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        output, _ = await asyncio.wait_for(process.communicate(), 20)
    assert process.returncode == 0, output.decode()


# --- coordination: coalescing and retries --------------------------------------------------------


class FlakyApi(FakeApi):
    """Fails the first ``failures`` applies with 503, then works; counts concurrent passes."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.passes = 0

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        if obj["kind"] == "ServiceAccount":
            self.passes += 1
        if self.failures:
            self.failures -= 1
            raise ApiError(503, "ServiceUnavailable", "try later")
        return super().apply(obj)


@pytest.mark.asyncio
async def test_reconciles_are_coalesced_and_failures_retried() -> None:
    api = FlakyApi(failures=1)
    snapshot = Snapshot(NS, routers=(body("Router", "hub", {}),))
    reconciler = Reconciler(
        api, OperatorConfig(retry_seconds=0.05), lambda ns: snapshot, lambda: [NS]
    )
    try:
        results = await asyncio.gather(*(reconciler.reconcile(NS, "test") for _ in range(20)))
        assert sum(r is not None for r in results) <= 2, "twenty requests, one or two passes"
        assert results[0] is not None and results[0].transient  # the first pass failed

        def applied() -> None:
            assert "StatefulSet/hub" in api.applied

        await eventually(applied, timeout=5)  # retried by the reconciler itself
        ready = await eventually(lambda: condition({"status": api.statuses["Router/hub"]}, READY))
        assert ready["reason"] == "RoutersNotReady"

        # Unchanged children are not sent again, except by the resync.
        count = len(api.applied)
        result = await reconciler.reconcile(NS, "again")
        children = 8  # ServiceAccount, ConfigMap, Role, RoleBinding, 2 Services, PDB, StatefulSet
        assert result is not None and result.unchanged_objects == children
        assert len(api.applied) == count
        result = await reconciler.reconcile(NS, "resync", reapply=True)
        # and the CA and certificate Secrets, looked at again (this fake API keeps nothing)
        assert result is not None and result.applied_objects == children + 2
    finally:
        reconciler.close()
