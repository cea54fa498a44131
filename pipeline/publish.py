"""A recommendation published where predictive autoscaling reads it: the ConfigMap
``routernet-recommendation-<network>`` (key ``recommendation.json``,
operator/router_operator/autoscaling/predict.py), written by `recommend --configmap NAME` through
the Kubernetes API; on a schedule, the network's CronJob does it
(operator/router_operator/rendering/recommend.py).

Server-side apply with its own field manager: the ConfigMap is made if it is not there and
only what this writes is this writer's. Its annotations say when it was made and, in one line,
what it found (``kubectl describe configmap`` shows both), so the CronJob's last run can be
checked without reading the JSON. The API is the pod's service account's (router/pod/kubeapi.py).
"""

from __future__ import annotations

import json
from typing import Any

from pipeline import PipelineError

CONFIG_MAP_KEY = "recommendation.json"
FIELD_MANAGER = "routernet-recommend"
MADE_AT = "routernet.io/recommended-at"
FOUND = "routernet.io/recommendation"


def summary(rec: dict[str, Any]) -> str:
    """What a recommendation found, in one line."""
    routers = [
        f"{r['name']} {r['observedReplicas']} -> {r['replicas']} (peak"
        f" {r['peakMsgsPerSecond']:,.0f} msgs/s)"
        for r in rec["routers"]
    ]
    return "; ".join(routers) or "no Router's pods in the range"


def config_map(rec: dict[str, Any], name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {MADE_AT: rec["generated"], FOUND: summary(rec)},
        },
        "data": {CONFIG_MAP_KEY: json.dumps(rec, indent=2) + "\n"},
    }


def publish(rec: dict[str, Any], name: str, namespace: str) -> None:
    """Applies the ConfigMap; PipelineError with the API server's one line when it refuses."""
    from router.pod import kubeapi

    path = f"/api/v1/namespaces/{namespace}/configmaps/{name}"
    try:
        kubeapi.connect().request(
            "PATCH",
            path,
            query={"fieldManager": FIELD_MANAGER, "force": "true"},
            body=config_map(rec, name, namespace),
            content_type="application/apply-patch+yaml",
        )
    except (kubeapi.KubeApiError, kubeapi.KubeConfigError) as err:
        raise PipelineError(f"writing ConfigMap {namespace}/{name}: {err}") from None
