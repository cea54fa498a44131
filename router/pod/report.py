"""What a router reports on its Pod, as text: the annotations' names and values, written by
the router (router/pod/status.py) and read by the operator (operator/router_operator/planning/
mesh.py and planning/handoff.py). Pure, so the operator reads them without the router's
Kubernetes client and threads; router/pod/status.py says what the values mean.
"""

from __future__ import annotations

from typing import NamedTuple

ANNOTATION = "routernet.io/reachable-routers"
"""On a router's Pod: the router ids it reaches, sorted, comma-separated (see the module doc)."""
STORE_ANNOTATION = "routernet.io/store"
"""On the Pod of a router with a store: ``host``, ``moving <n>`` or ``empty`` (the module doc)."""
STORE_HOST = "host"
STORE_MOVING = "moving"
STORE_EMPTY = "empty"


class StoreReport(NamedTuple):
    """A store annotation read back: ``state`` host, moving or empty, and the nodes held."""

    state: str
    held: int = 0

    @property
    def empty(self) -> bool:
        return self.state == STORE_EMPTY


def parse_store(value: str | None) -> StoreReport | None:
    """A store annotation's value; None when there is none, or it says nothing this version
    knows (a newer router's word counts as not reported rather than as empty)."""
    if value is None:
        return None
    words = value.split()
    if words == [STORE_HOST] or words == [STORE_EMPTY]:
        return StoreReport(words[0])
    if len(words) == 2 and words[0] == STORE_MOVING and words[1].isdigit():
        return StoreReport(STORE_MOVING, int(words[1]))
    return None


def annotation_value(ids: frozenset[str] | set[str]) -> str:
    return ",".join(sorted(ids))


def parse_annotation(value: str | None) -> frozenset[str] | None:
    """The router ids of an annotation's value; None when there is no value (not reported)."""
    if value is None:
        return None
    return frozenset(part.strip() for part in value.split(",") if part.strip())
