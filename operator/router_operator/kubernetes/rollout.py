"""Getting a Router's rollout unstuck: pods left on an old revision, not Ready, are deleted.

A StatefulSet's rolling update replaces one pod at a time, highest ordinal first, and waits for
each new pod to be Ready before it goes on. A router pod's readiness depends on its peers (an
interior is Ready with a two-way neighbor, an edge with an uplink). So when every pod of a
Router crash-loops (as they all once did, on a read-only root) and its template is fixed, the
first new pod waits for neighbors that are still the crashing old pods, which the controller
will not replace before the new pod is Ready: the rollout waits forever, until someone deletes
the old pods by hand. Strimzi and the RabbitMQ operator do that deletion themselves; so does
this module.

The rule: while a StatefulSet rolls out (its ``updateRevision``), a pod of it still on another
revision that is not Ready, and not already going, is deleted. It serves nothing, and the
controller would replace it anyway once it got there; deleted now, it comes back on the new
revision (the StatefulSet's partition is 0: rendering/router.py). A Ready old pod is left to the
rolling update, which keeps one router at a time out of service. Pure: the reconciler deletes what
:func:`stuck_pods` names, each with its uid as a precondition, so a pod already re-created
under the same name is never deleted in its place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from router_operator.planning.mesh import PodReport


def stuck_pods(
    router: str, status: Mapping[str, Any] | None, pods: Iterable[PodReport]
) -> list[PodReport]:
    """The pods of Router ``router`` its StatefulSet (``status``) waits for in vain."""
    update = (status or {}).get("updateRevision")
    if not update:
        return []
    return [
        pod
        for pod in pods
        if pod.router == router
        and pod.revision is not None
        and pod.revision != update
        and not pod.ready
        and not pod.terminating
    ]
