"""The labels of a Router's children and pods, and the selector they make: shared by what reads
pods (planning/mesh.py sorts the reports by them, planning/adapter.py puts the selector in a
Router's status for the scale subresource) and what writes them (rendering/router.py). Here,
below both, so reading a pod's labels does not need the renderer.
"""

from __future__ import annotations

from router_operator.resources.models import GROUP

NETWORK_LABEL = f"{GROUP}/network"
ROLE_LABEL = f"{GROUP}/role"
INSTANCE_LABEL = "app.kubernetes.io/instance"
"""On every child and pod of a Router: its name (selector_labels)."""
REVISION_LABEL = "controller-revision-hash"
"""The StatefulSet controller's label on each pod: the revision it was made from
(kubernetes/rollout.py)."""


def selector_labels(name: str) -> dict[str, str]:
    """Labels that select one Router's pods. ``component`` keeps a Helm release (which labels
    the operator with ``name: routernet`` and its own ``instance``) from ever matching."""
    return {
        "app.kubernetes.io/name": "routernet",
        INSTANCE_LABEL: name,
        "app.kubernetes.io/component": "router",
    }


def selector(name: str) -> str:
    """The selector as a string, for the scale subresource's ``status.selector`` (HPA)."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector_labels(name).items()))
