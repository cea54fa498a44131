"""Rendering a network's telemetry collector: a Deployment running ``routernet-collector``
against the network's client Service, writing to a PersistentVolumeClaim. Pure, like
rendering/router.py.

Choices, and why:
- One collector per network: a router sends its telemetry to ``_routernet/telemetry`` in its own
  network, and any router of it routes there, so one receiver on any router hears them all.
  It connects to the client Service of the network's first interior Router (by name) that has
  a plain listener (no TLS, ANONYMOUS allowed); else an edge Router's. A network with neither
  gets no collector.
- The router image runs it (``routernet-collector`` is installed there, pyarrow with it); the
  chart may name another image.
- ``Recreate`` and one replica: the volume is ReadWriteOnce, and two collectors would each get
  half the records (the address is balanced between consumers) with nothing gained.
- On SIGTERM the collector drains its link, writes and fsyncs what it holds, and exits well
  within the grace period (it needs a few seconds at most).
- The Deployment is owned by every Router of its network (none as controller), so Kubernetes
  deletes it when the last of them goes, and not before. The PVC has no owner: the telemetry
  outlives the network (delete ``routernet-telemetry-<network>`` to drop it); a network that
  comes back with the same name writes into it again.
- It answers ``GET /flows`` with the flow totals of a window (collector/http.py) on port
  FLOWS_PORT, behind a Service of the Deployment's name: the network console cannot mount the
  ReadWriteOnce volume, so it asks. The same endpoint is the pod's readiness probe.
- Names: ``routernet-collector-<network>`` (Deployment and Service) and
  ``routernet-telemetry-<network>`` (a network name is a DNS label, so both are valid names);
  labels select by network, not by name.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from router_operator.planning.planner import NetworkPlan, RouterPlan, effective_listeners

API_GROUP = "routernet.io"
API_VERSION = f"{API_GROUP}/v1alpha1"
CONTAINER = "collector"
DATA_DIR = "/var/lib/routernet"
DATASET_DIR = f"{DATA_DIR}/telemetry"
RUN_AS = 10001
TERMINATION_GRACE_SECONDS = 30
FLOWS_PORT = 8080
FLOWS_PORT_NAME = "flows"
DEFAULT_STORAGE_SIZE = "10Gi"
DEFAULT_RESOURCES: Mapping[str, Any] = {
    "requests": {"cpu": "50m", "memory": "128Mi"},
    # A flush buffers up to 100,000 rows (about 1 KiB each in Arrow for flow records).
    "limits": {"memory": "512Mi"},
}


@dataclass(frozen=True)
class CollectorSettings:
    """How the operator runs collectors (the chart's ``collector`` values)."""

    image: str
    image_pull_policy: str | None = None
    storage_class: str | None = None
    """None: the cluster's default StorageClass."""
    storage_size: str = DEFAULT_STORAGE_SIZE
    resources: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULT_RESOURCES))


def deployment_name(network: str) -> str:
    return f"routernet-collector-{network}"


def claim_name(network: str) -> str:
    return f"routernet-telemetry-{network}"


def selector_labels(network: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "routernet",
        "app.kubernetes.io/component": "collector",
        f"{API_GROUP}/network": network,
    }


def labels(network: str) -> dict[str, str]:
    return {**selector_labels(network), "app.kubernetes.io/managed-by": "routernet-operator"}


def source_url(network: NetworkPlan, namespace: str, cluster_domain: str) -> str | None:
    """The client Service URL the collector receives from, or None when the network has no
    Router with a plain listener that is running or meant to."""
    for mode in ("interior", "edge"):
        for router in sorted(network.routers, key=lambda r: r.name):
            if router.mode != mode or not router.ok or not router.pods:
                continue
            port = _plain_port(router)
            if port is not None:
                host = f"{router.name}.{namespace}.svc.{cluster_domain}"
                return f"amqp://{host}:{port}"
    return None


def _plain_port(router: RouterPlan) -> int | None:
    for lsn in effective_listeners(router.decl):
        mechanisms = lsn.sasl_mechanisms
        anonymous = mechanisms is None or "ANONYMOUS" in mechanisms
        if lsn.role == "normal" and lsn.tls_secret is None and anonymous:
            return lsn.port
    return None


def owner_references(routers: Sequence[RouterPlan]) -> list[dict[str, Any]]:
    return [
        {"apiVersion": API_VERSION, "kind": "Router", "name": r.name, "uid": r.decl.uid}
        for r in sorted(routers, key=lambda r: r.name)
        if r.decl.uid
    ]


def render_collector(
    network: NetworkPlan, namespace: str, settings: CollectorSettings, cluster_domain: str
) -> list[dict[str, Any]]:
    """The PVC, the Deployment and its Service (apply order), or nothing when the network has
    no Router the collector could receive from, or no Router with a uid to own them."""
    url = source_url(network, namespace, cluster_domain)
    owners = owner_references(network.routers)
    if url is None or not owners:
        return []
    return [
        render_claim(network.name, namespace, settings),
        render_deployment(network.name, namespace, settings, url, owners),
        render_service(network.name, namespace, owners),
    ]


def render_claim(network: str, namespace: str, settings: CollectorSettings) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": settings.storage_size}},
    }
    if settings.storage_class:
        spec["storageClassName"] = settings.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": claim_name(network),
            "namespace": namespace,
            "labels": labels(network),
        },
        "spec": spec,
    }


def render_deployment(
    network: str,
    namespace: str,
    settings: CollectorSettings,
    url: str,
    owners: list[dict[str, Any]],
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy or "IfNotPresent",
        "command": [
            "routernet-collector",
            "--url",
            url,
            "--dataset",
            DATASET_DIR,
            "--id",
            deployment_name(network),
            "--http",
            f"0.0.0.0:{FLOWS_PORT}",
        ],
        "ports": [{"name": FLOWS_PORT_NAME, "containerPort": FLOWS_PORT, "protocol": "TCP"}],
        "readinessProbe": {
            "httpGet": {"path": "/healthz", "port": FLOWS_PORT_NAME},
            "periodSeconds": 10,
        },
        "resources": copy.deepcopy(dict(settings.resources)),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "data", "mountPath": DATA_DIR}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": deployment_name(network),
            "namespace": namespace,
            "labels": labels(network),
            "ownerReferences": owners,
        },
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector_labels(network)},
            "template": {
                # Not labelled managed-by: the operator watches pods so labelled as router pods.
                "metadata": {"labels": selector_labels(network)},
                "spec": {
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": RUN_AS,
                        "runAsGroup": RUN_AS,
                        # The volume's files belong to the collector's group.
                        "fsGroup": RUN_AS,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [container],
                    "volumes": [
                        {
                            "name": "data",
                            "persistentVolumeClaim": {"claimName": claim_name(network)},
                        }
                    ],
                },
            },
        },
    }


def render_service(network: str, namespace: str, owners: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": deployment_name(network),
            "namespace": namespace,
            "labels": labels(network),
            "ownerReferences": owners,
        },
        "spec": {
            "selector": selector_labels(network),
            "ports": [
                {
                    "name": FLOWS_PORT_NAME,
                    "port": FLOWS_PORT,
                    "targetPort": FLOWS_PORT_NAME,
                    "protocol": "TCP",
                }
            ],
        },
    }
