"""Readings of a running router's state, for the metrics endpoint and the router record.

These run on the HTTP server's thread as well as on the loop's, so they only read Python
objects the loop keeps (never a Proton object, which is not thread-safe and may be freed under
them) and copy every container before iterating it: under the GIL `list(d.values())` is one
step the loop cannot interleave with, whereas iterating `d` itself could see it change size.
"""

from __future__ import annotations

import resource
import time
from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from router.core.engine import Router
    from router.datapath.links import Link

# The loop turns at least every housekeeping interval (0.1 s): older than this, it is stuck.
LOOP_STALE_SECONDS = 5.0


def links(router: Router) -> list[Link]:
    return list(router.links.values())


def unsettled(all_links: list[Link]) -> int:
    """Deliveries received from senders and not settled yet."""
    return sum(len(link.unsettled) for link in all_links if link.incoming)


def credit_blocked(all_links: list[Link]) -> int:
    """Clients' senders the router holds back: their address has no consumer anywhere, or their
    deliveries waiting in the router fill half their link capacity (no credit is given then)."""
    blocked = 0
    for link in all_links:
        if not link.incoming or link.kind != "endpoint":
            continue
        entry = link.entry
        if link.backlog * 2 >= link.capacity or (
            entry is not None and not entry.consumers and not entry.remote
        ):
            blocked += 1
    return blocked


def links_by_kind(all_links: list[Link]) -> Counter[tuple[str, str]]:
    """(kind, "in"|"out") -> count; kinds as router/datapath/links.py names them."""
    return Counter((link.kind, "in" if link.incoming else "out") for link in all_links)


def connections_by_role(router: Router) -> Counter[str]:
    return Counter(conn.role for conn in list(router.conns.values()))


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def loop_age(router: Router) -> float:
    """Seconds since the event loop last turned."""
    return time.monotonic() - router.last_turn


def readiness(router: Router) -> tuple[bool, str]:
    """Whether the router should get traffic, and why (not).

    Listening, not draining, and part of its network: an interior with at least one two-way
    inter-router neighbor, or configured to be alone (no inter-router connectors, so it waits
    for others to dial it); an edge with an active uplink."""
    if router.fwd.draining or router.stopping:
        return False, "draining"
    if not router.listeners:
        return False, "not listening"
    network = router.network
    if network is not None:
        if network.routes.neighbors:
            return True, f"interior with {len(network.routes.neighbors)} neighbors"
        if not any(c.role == "inter-router" for c in router.config.connectors):
            return True, "interior, alone by configuration"
        return False, "interior without an inter-router neighbor yet"
    if router.edge is not None:
        if router.edge.uplink is not None:
            return True, "edge with an uplink"
        return False, "edge without an uplink yet"
    return True, "standalone"
