"""A Router's load, per autoscaling target, from what its routers serve on `/metrics`.

The autoscaler reads the routers themselves (router/telemetry/metrics.py), as an HPA reads
Pods metrics, so it needs neither Prometheus nor a metrics adapter:

- `messagesPerSecond`: the rate of `routernet_deliveries_total{direction="in"}` (every
  delivery a router receives, from clients and routers, is one it forwards or settles) between
  two scrapes of the same router process; a counter that went down is a restarted router,
  counted from zero.
- `connections`: `routernet_connections` of every role but `inter-router`: the mesh's own
  connections grow with the replicas, and counting them would make scaling out raise the load.
- `unsettledDeliveries`: `routernet_unsettled_deliveries`.

Pure: scrapes come in as text with the time they were taken; a router that did not answer, or
answered what cannot be parsed, counts for no target (so its replicas are not mistaken for
idle ones), and a router seen for the first time has no rate until its second scrape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from router_operator.autoscaling.hpa import Measurement


@dataclass(frozen=True)
class Reading:
    """One scrape of one router."""

    deliveries_in: float
    connections: float
    unsettled: float


class BadMetrics(ValueError):
    """A `/metrics` answer that is not a router's."""


def parse(text: str) -> Reading:
    deliveries: float | None = None
    connections = 0.0
    unsettled: float | None = None
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "routernet_deliveries_total":
                    if sample.labels.get("direction") == "in":
                        deliveries = (deliveries or 0.0) + sample.value
                elif sample.name == "routernet_connections":
                    if sample.labels.get("role") != "inter-router":
                        connections += sample.value
                elif sample.name == "routernet_unsettled_deliveries":
                    unsettled = (unsettled or 0.0) + sample.value
    except ValueError as e:
        raise BadMetrics(f"unparsable metrics: {e}") from None
    if deliveries is None or unsettled is None:
        raise BadMetrics("not a router's metrics: routernet_deliveries_total missing")
    return Reading(deliveries, connections, unsettled)


@dataclass
class LoadTracker:
    """The last reading of each router, to turn its deliveries counter into a rate."""

    last: dict[str, tuple[float, Reading]] = field(default_factory=dict)

    def measure(self, now: float, readings: Mapping[str, Reading | None]) -> dict[str, Measurement]:
        """Per target, the load summed over the routers that answered (`readings`: by pod, None
        for one that did not). Routers no longer listed are forgotten."""
        rate_total, rated = 0.0, 0
        answered = [r for r in readings.values() if r is not None]
        for pod, reading in readings.items():
            if reading is None:
                continue
            before = self.last.get(pod)
            self.last[pod] = (now, reading)
            if before is None or now <= before[0]:
                continue
            then, previous = before
            delta = reading.deliveries_in - previous.deliveries_in
            if delta < 0:  # the router restarted: its counter began again at zero
                delta = reading.deliveries_in
            rate_total += delta / (now - then)
            rated += 1
        for gone in set(self.last) - set(readings):
            del self.last[gone]
        load = {
            "connections": Measurement(sum(r.connections for r in answered), len(answered)),
            "unsettledDeliveries": Measurement(sum(r.unsettled for r in answered), len(answered)),
        }
        if rated:
            load["messagesPerSecond"] = Measurement(rate_total, rated)
        return {name: m for name, m in load.items() if m.routers}
