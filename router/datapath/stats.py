"""Router-wide counters, named as Qpid Dispatch names them so `qdstat -g` reads them unchanged."""

from __future__ import annotations

import resource
from dataclasses import dataclass, fields


@dataclass(slots=True)
class RouterStats:
    """Counters the data path increments; `deliveriesStuck` is a live count, see inventory."""

    presettledDeliveries: int = 0
    droppedPresettledDeliveries: int = 0
    acceptedDeliveries: int = 0
    rejectedDeliveries: int = 0
    releasedDeliveries: int = 0
    modifiedDeliveries: int = 0
    deliveriesDelayed1Sec: int = 0
    deliveriesDelayed10Sec: int = 0
    deliveriesRedirectedToFallback: int = 0
    deliveriesIngress: int = 0
    deliveriesEgress: int = 0
    deliveriesTransit: int = 0
    deliveriesIngressRouteContainer: int = 0
    deliveriesEgressRouteContainer: int = 0

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def memory_usage() -> int:
    """Resident set size in bytes (what qdstat -g shows as memory usage)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
