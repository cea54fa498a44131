"""The `node` records: per window, per queue or topic this router hosts, its depth at the
window's end and what went in and out during it (schema.py's "node" fields).

A node keeps monotonic totals (router/nodes/queue.py, topic.py), as the flow counters do; a
window reports their difference since the last one. A node that is new, or was deleted and
made again under its name since (its totals went back), counts from zero. Pure: the emitter
passes each node's counters and the window in.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from router.telemetry.schema import SCHEMA_VERSION

# The node's counters (its `counters()` names) behind schema.NODE_COUNTS, in that order.
TOTALS = ("enqueued", "dequeued", "deadLettered", "expired")


class NodeRecords:
    def __init__(self, router_id: str, record_prefix: str) -> None:
        self.router_id = router_id
        self.record_prefix = record_prefix
        self.last: dict[str, tuple[int, ...]] = {}
        self.sequence = 0

    def rows(
        self, nodes: Iterable[tuple[str, str, dict[str, int]]], start: float, end: float
    ) -> list[tuple[Any, ...]]:
        """One row per (name, type, counters) in `nodes`, for the window [start, end)."""
        start_ms, end_ms = int(start * 1000), int(end * 1000)
        seen: dict[str, tuple[int, ...]] = {}
        records: list[tuple[Any, ...]] = []
        for name, kind, counters in nodes:
            totals = tuple(counters[k] for k in TOTALS)
            before = self.last.get(name)
            if before is None or any(a < b for a, b in zip(totals, before, strict=True)):
                before = (0,) * len(TOTALS)
            seen[name] = totals
            self.sequence += 1
            records.append(
                (
                    f"{self.record_prefix}-n{self.sequence}",
                    SCHEMA_VERSION,
                    self.router_id,
                    start_ms,
                    end_ms,
                    name,
                    kind,
                    counters["depth"],
                    counters["bytes"],
                    counters["paged"],
                    *(a - b for a, b in zip(totals, before, strict=True)),
                )
            )
        self.last = seen
        return records
