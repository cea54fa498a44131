"""Flow records: per window, what one router handed to consumers, per (address, ingress router).

The data path keeps monotonic counters (`FlowCounters`, one per address, ingress router and
whether this router delivered or dropped) and only ever increments them: no allocation per
message, nothing to reset under its feet, and the metrics endpoint reads the very same numbers
from another thread. A window is the difference between two readings, which `Flows.tick(now)`
takes when a window boundary has passed: the only place that knows about time, with the time
passed in, so the arithmetic runs in unit tests without a router or a clock.

A hosted queue or topic's host counts its traffic in rows of their own (`node_row`): into the
node from the producer's router, out of it to the consumer's (schema.py's `node_leg`). Those
are counted off the data path (router/nodes/traffic.py), where messages are stored anyway.

Windows are aligned to multiples of their length since the epoch, so the records of every router
cover the same intervals and the pipeline can join them without interpolating. A row that saw
nothing for a whole window is dropped from the table once the router has forgotten its address
(and its outcomes are all in), so a stream of short-lived reply addresses does not grow the
table without bound.
"""

from __future__ import annotations

import math
from typing import Any, Final

from router.telemetry.schema import (
    FLOW_COUNTS,
    LATENCY_BUCKETS,
    SCHEMA_VERSION,
    TELEMETRY_ADDRESS,
    latency_bucket,
)

DEFAULT_WINDOW_SECONDS: Final = 10.0
DEFAULT_SAMPLE_EVERY: Final = 100

# The counters a window reports as differences, in schema column order.
_COUNTS: Final = FLOW_COUNTS


class FlowCounters:
    """Monotonic counts for one (address, ingress router, egress) at this router.

    `delivered` rows count deliveries this router handed to consuming clients (egress = this
    router); the others count deliveries that reached no consumer here (egress null): `dropped`
    for pre-settled ones, `released` for unsettled ones given back to their sender.
    `owner`/`key` say where the data path caches this row (an address entry's dict): a row
    stays while it is cached there (the router still knows the address, and the metrics
    endpoint reports its totals), and goes once it is not and a window passed without news.
    """

    __slots__ = (
        "accepted",
        "address",
        "bytes",
        "delivered",
        "deliveries",
        "dropped",
        "egress",
        "hist",
        "ingress",
        "key",
        "latency_max_us",
        "latency_samples",
        "latency_sum_us",
        "leg",
        "modified",
        "owner",
        "presettled",
        "rejected",
        "released",
    )

    def __init__(
        self,
        address: str,
        ingress: str,
        delivered: bool,
        egress: str | None,
        leg: str | None = None,
    ) -> None:
        self.address = address
        self.ingress = ingress
        self.delivered = delivered
        self.egress = egress
        self.leg = leg  # a hosted node's row: "in" or "out" (schema.py's node_leg)
        self.deliveries = 0
        self.bytes = 0
        self.accepted = 0
        self.released = 0
        self.rejected = 0
        self.modified = 0
        self.presettled = 0
        self.dropped = 0
        self.latency_samples = 0
        self.latency_sum_us = 0.0
        # The largest sample since the last window: reset by Flows.tick, not monotonic.
        self.latency_max_us = 0.0
        self.hist = [0] * LATENCY_BUCKETS
        self.owner: dict[Any, FlowCounters] | None = None
        self.key: Any = None

    def observe(self, us: float) -> None:
        """One sampled transit latency, in microseconds (negative clock skew reads as 0)."""
        if us < 0.0:
            us = 0.0
        self.latency_samples += 1
        self.latency_sum_us += us
        if us > self.latency_max_us:
            self.latency_max_us = us
        self.hist[latency_bucket(us)] += 1

    def outstanding(self) -> int:
        """Deliveries handed over whose outcome has not come back yet."""
        settled = self.accepted + self.released + self.rejected + self.modified + self.presettled
        return self.deliveries - settled if self.delivered else 0

    def reading(self) -> tuple[tuple[int, ...], float, list[int]]:
        return (
            tuple(getattr(self, name) for name in _COUNTS),
            self.latency_sum_us,
            list(self.hist),
        )


def router_name(ingress: str) -> str:
    """`0/R1` (x-opt-qd.ingress, area 0) -> `R1`."""
    return ingress.split("/", 1)[-1]


def window_bounds(now: float, seconds: float) -> tuple[float, float]:
    """The aligned window holding `now` (seconds since the epoch)."""
    start = math.floor(now / seconds) * seconds
    return start, start + seconds


class Flows:
    """The flow table of one router and its windows.

    `row(...)` gives the data path the counters to increment; `tick(now)` returns the finished
    window's rows (schema "flow" tuples) once `now` is past its end, else None; `flush(now)`
    ends the current window early (a draining router's last one). `now` is wall-clock seconds
    since the epoch: window bounds are timestamps the collector stores.
    """

    def __init__(self, router_id: str, record_prefix: str, window_seconds: float, now: float):
        self.router_id = router_id
        self.record_prefix = record_prefix
        self.window = window_seconds
        # The first window starts when the router does and ends at the next boundary.
        self.start, self.end = now, window_bounds(now, window_seconds)[1]
        self.rows: dict[tuple[str, str, bool], FlowCounters] = {}
        # Hosted nodes' rows, by (node, ingress router, egress router, leg).
        self.node_rows: dict[tuple[str, str, str, str], FlowCounters] = {}
        self.last: dict[tuple[Any, ...], tuple[tuple[int, ...], float, list[int]]] = {}
        self.sequence = 0

    def row(self, address: str, ingress: str, delivered: bool) -> FlowCounters:
        key = (address, ingress, delivered)
        row = self.rows.get(key)
        if row is None:
            egress = self.router_id if delivered else None
            row = self.rows[key] = FlowCounters(address, ingress, delivered, egress)
        return row

    def node_row(self, node: str, ingress: str, egress: str, leg: str) -> FlowCounters:
        """The row of a hosted node's traffic (this router its host): `leg` "in" from the
        producer's router `ingress` to here, "out" from here to the consumer's `egress`."""
        key = (node, ingress, egress, leg)
        row = self.node_rows.get(key)
        if row is None:
            row = self.node_rows[key] = FlowCounters(node, ingress, True, egress, leg)
        return row

    def tick(self, now: float) -> list[tuple[Any, ...]] | None:
        if now < self.end:
            return None
        # Counted up to now, so the window is reported as ending now if the loop was late; the
        # next one ends at the next boundary (a clock jump or a stall skips empty windows).
        end = max(now, self.end)
        records = self._close(self.end if now - self.end < self.window else end)
        self.start = self.end if now - self.end < self.window else end
        self.end = window_bounds(now, self.window)[1]
        return records

    def flush(self, now: float) -> list[tuple[Any, ...]]:
        """The current window's rows up to `now`, and a new window from there."""
        records = self._close(max(now, self.start))
        self.start = max(now, self.start)
        return records

    def _close(self, end: float) -> list[tuple[Any, ...]]:
        start_ms, end_ms = int(self.start * 1000), int(end * 1000)
        me = self.router_id
        records: list[tuple[Any, ...]] = []
        idle: list[tuple[Any, ...]] = []
        rows: list[tuple[tuple[Any, ...], FlowCounters]] = list(self.rows.items())
        rows += list(self.node_rows.items())
        for key, row in rows:
            if key[0] == TELEMETRY_ADDRESS:
                continue  # records about records: every window would report the last one's
            counts, sum_us, hist = now_reading = row.reading()
            before = self.last.get(key)
            if before is not None:
                counts = tuple(a - b for a, b in zip(counts, before[0], strict=True))
                sum_us -= before[1]
                hist = [a - b for a, b in zip(hist, before[2], strict=True)]
            self.last[key] = now_reading
            if not any(counts):
                if row.outstanding() == 0 and (
                    row.owner is None or row.owner.get(row.key) is not row
                ):
                    idle.append(key)
                continue
            self.sequence += 1
            samples = counts[-1]
            records.append(
                (
                    f"{self.record_prefix}-{self.sequence}",
                    SCHEMA_VERSION,
                    me,
                    start_ms,
                    end_ms,
                    row.address,
                    router_name(row.ingress),
                    row.egress,
                    *counts[:-1],
                    samples,
                    sum_us,
                    row.latency_max_us if samples else None,
                    hist,
                    row.leg,
                )
            )
            row.latency_max_us = 0.0
        for key in idle:
            table: dict[Any, FlowCounters] = self.rows if len(key) == 3 else self.node_rows
            del table[key]
            del self.last[key]
        return records
