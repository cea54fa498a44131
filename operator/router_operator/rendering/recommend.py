"""Rendering a network's recommendations: a CronJob that runs the pipeline's ``recommend
--compact`` on the collector's dataset and writes the ConfigMap
``routernet-recommendation-<network>`` that predictive autoscaling reads (autoscaling/predict.py).
Pure, like rendering/collector.py.

Choices, and why:
- Per network, beside its collector: the dataset is the collector's claim, the recommendation
  the network's, and a network without a collector gets none.
- The pipeline image, Spark in local mode in the Job's pod: once the closed hours are rolled
  up (``--compact``, in the same session), a month of telemetry is thousands of rows.
- The claim is ReadWriteOnce and the collector's pod has it: the Job's pod must run on that
  pod's node (a required pod affinity), which the volume needs anyway.
- Its own ServiceAccount, with a Role that lets it create ConfigMaps (create cannot be limited
  by name) and get, patch and update that one; nothing else.
- ``concurrencyPolicy: Forbid``: a run that takes longer than the schedule's period is not
  doubled. Each run's Job and pod stay as the CronJob's history (3 of each), which with the
  ConfigMap's annotations (publish.py: when, what it found) and the CronJob's
  ``lastSuccessfulTime`` say when it last ran and what it found.
- Owned by every Router of the network, as the collector's Deployment: it goes with the last.
- Rendered only when the chart asks (``recommend.enabled``): the pipeline image is large, and
  only predictive autoscaling reads the result.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from router_operator.autoscaling.predict import config_map_name
from router_operator.planning.planner import NetworkPlan
from router_operator.rendering.collector import (
    DATA_DIR,
    DATASET_DIR,
    RUN_AS,
    claim_name,
    owner_references,
)
from router_operator.rendering.collector import selector_labels as collector_labels

RBAC_API_VERSION = "rbac.authorization.k8s.io/v1"
CONTAINER = "recommend"
DEFAULT_SCHEDULE = "17 * * * *"
"""Hourly, past the hour: the collector has flushed the hour that just closed."""
DEADLINE_SECONDS = 1800
DEFAULT_RESOURCES: Mapping[str, Any] = {
    "requests": {"cpu": "250m", "memory": "1Gi"},
    # Spark's driver heap in local mode (2 GiB) and the Python workers beside it.
    "limits": {"memory": "3Gi"},
}


@dataclass(frozen=True)
class RecommendSettings:
    """How the operator schedules recommendations (the chart's ``recommend`` values)."""

    image: str
    image_pull_policy: str | None = None
    schedule: str = DEFAULT_SCHEDULE
    target: float | None = None
    """Messages/s one router should carry at its peak; None: the pipeline's default."""
    resources: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULT_RESOURCES))


def name(network: str) -> str:
    """The CronJob, its ServiceAccount, Role and RoleBinding."""
    return f"routernet-recommend-{network}"


def labels(network: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "routernet",
        "app.kubernetes.io/component": "recommend",
        "routernet.io/network": network,
        MANAGED[0]: MANAGED[1],
    }


MANAGED = ("app.kubernetes.io/managed-by", "routernet-operator")


def recommend_objects(network: str) -> list[tuple[str, str, str]]:
    """(apiVersion, kind, name) of what render_recommend makes for ``network``, the CronJob
    first: what goes when recommendations are turned off."""
    return [
        ("batch/v1", "CronJob", name(network)),
        (RBAC_API_VERSION, "RoleBinding", name(network)),
        (RBAC_API_VERSION, "Role", name(network)),
        ("v1", "ServiceAccount", name(network)),
    ]


def is_ours(obj: Mapping[str, Any], network: str) -> bool:
    """Whether an object found under a recommend name is the operator's for ``network`` (one a
    user made under the same name is left alone)."""
    found = (obj.get("metadata") or {}).get("labels") or {}
    return found.get(MANAGED[0]) == MANAGED[1] and found.get("routernet.io/network") == network


def render_recommend(
    network: NetworkPlan, namespace: str, settings: RecommendSettings
) -> list[dict[str, Any]]:
    """The ServiceAccount, its Role and RoleBinding, then the CronJob (apply order); nothing
    without a Router with a uid to own them."""
    owners = owner_references(network.routers)
    if not owners:
        return []

    def metadata(kind_name: str) -> dict[str, Any]:
        return {
            "name": kind_name,
            "namespace": namespace,
            "labels": labels(network.name),
            "ownerReferences": copy.deepcopy(owners),
        }

    writes = config_map_name(network.name)
    role = {
        "apiVersion": RBAC_API_VERSION,
        "kind": "Role",
        "metadata": metadata(name(network.name)),
        "rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": [writes],
                "verbs": ["get", "patch", "update"],
            },
        ],
    }
    binding = {
        "apiVersion": RBAC_API_VERSION,
        "kind": "RoleBinding",
        "metadata": metadata(name(network.name)),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": name(network.name),
        },
        "subjects": [
            {"kind": "ServiceAccount", "name": name(network.name), "namespace": namespace}
        ],
    }
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(name(network.name)),
    }
    return [account, role, binding, _cron_job(network.name, namespace, settings, metadata)]


def command(network: str, namespace: str, settings: RecommendSettings) -> list[str]:
    args = [
        "recommend", DATASET_DIR, "--compact", "--quiet",
        "--output", "/tmp/recommendation",
        "--namespace", namespace, "--configmap", config_map_name(network),
    ]  # fmt: skip
    if settings.target is not None:
        args += ["--target", f"{settings.target:g}"]
    return args


def _cron_job(
    network: str, namespace: str, settings: RecommendSettings, metadata: Any
) -> dict[str, Any]:
    container = {
        "name": CONTAINER,
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy or "IfNotPresent",
        "args": command(network, namespace, settings),
        "resources": copy.deepcopy(dict(settings.resources)),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "data", "mountPath": DATA_DIR},
            # Spark's scratch space and Matplotlib's cache: the root is read-only.
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    pod = {
        "metadata": {"labels": labels(network)},
        "spec": {
            "serviceAccountName": name(network),
            "restartPolicy": "Never",
            "enableServiceLinks": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": RUN_AS,
                "runAsGroup": RUN_AS,
                "fsGroup": RUN_AS,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "affinity": {
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": collector_labels(network)},
                            "topologyKey": "kubernetes.io/hostname",
                        }
                    ]
                }
            },
            "containers": [container],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": claim_name(network)}},
                {"name": "tmp", "emptyDir": {}},
            ],
        },
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": metadata(name(network)),
        "spec": {
            "schedule": settings.schedule,
            "concurrencyPolicy": "Forbid",
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "metadata": {"labels": labels(network)},
                "spec": {
                    "backoffLimit": 2,
                    "activeDeadlineSeconds": DEADLINE_SECONDS,
                    "template": pod,
                },
            },
        },
    }
