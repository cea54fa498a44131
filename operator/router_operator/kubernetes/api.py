"""The Kubernetes API as the reconciler and the autoscaler use it: the :class:`Api` protocol,
its error and the REST paths of the kinds the operator touches.

Apart from the client (kubernetes/kube.py) so that what only needs these (the autoscaler, which
``routernet up`` runs on this machine too, and the reconciler) imports neither kopf nor the
kubernetes package: the router image's ``routernet`` commands have neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from router_operator.resources import models

PLURALS: dict[tuple[str, str], str] = {
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "Service"): "services",
    ("v1", "ServiceAccount"): "serviceaccounts",
    ("v1", "Secret"): "secrets",
    ("v1", "PersistentVolumeClaim"): "persistentvolumeclaims",
    ("v1", "Pod"): "pods",
    ("apps/v1", "StatefulSet"): "statefulsets",
    ("apps/v1", "Deployment"): "deployments",
    ("batch/v1", "CronJob"): "cronjobs",
    ("policy/v1", "PodDisruptionBudget"): "poddisruptionbudgets",
    ("rbac.authorization.k8s.io/v1", "Role"): "roles",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "rolebindings",
    ("autoscaling/v2", "HorizontalPodAutoscaler"): "horizontalpodautoscalers",
    ("keda.sh/v1alpha1", "ScaledObject"): "scaledobjects",
    ("cert-manager.io/v1", "Certificate"): "certificates",
    **{(models.API_VERSION, kind.kind_name): kind.plural for kind in models.KINDS},
}
"""Every kind the operator reads or writes. A table rather than API discovery: discovery costs
requests and a cache, and the set of kinds is fixed by the code that renders them."""


class ApiError(Exception):
    """A failed API request, with what a status condition needs to explain it."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}" if status else f"{reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def transient(self) -> bool:
        """Worth retrying as is: connection failures (status 0), conflicts, throttling and
        server errors. Anything else (422 invalid, 403 forbidden, ...) needs a change first."""
        return self.status == 0 or self.status in (409, 429) or self.status >= 500

    @property
    def not_found(self) -> bool:
        return self.status == 404


class Api(Protocol):
    """What the reconciler does to the cluster; nothing else."""

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply of a whole object; returns the object as stored."""
        ...

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        ...

    def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: Mapping[str, Any]
    ) -> dict[str, Any]:
        """A JSON merge patch of ``status`` through the status subresource."""
        ...

    def patch_scale(
        self, api_version: str, kind: str, namespace: str, name: str, replicas: int
    ) -> dict[str, Any]:
        """Sets the replicas through the scale subresource, as an HPA does."""
        ...

    def delete(
        self, api_version: str, kind: str, namespace: str, name: str, *, uid: str | None = None
    ) -> bool:
        """Deletes the object, only if its uid is still ``uid`` when given (else 409); False
        when it does not exist."""
        ...


def resource_path(
    api_version: str,
    kind: str,
    namespace: str | None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """The REST path of a namespaced collection, object or subresource."""
    try:
        plural = PLURALS[(api_version, kind)]
    except KeyError:
        raise ValueError(f"unknown kind {kind} in {api_version}: add it to api.PLURALS") from None
    root = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    path = f"{root}/namespaces/{namespace}/{plural}" if namespace else f"{root}/{plural}"
    if name:
        path += f"/{name}"
        if subresource:
            path += f"/{subresource}"
    return path
