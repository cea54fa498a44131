"""A Router's load read from its routers' /metrics: rates from counters between scrapes,
connections without the mesh's own, restarts and silent routers."""

from __future__ import annotations

import pytest
from router_operator.autoscaling.hpa import Measurement
from router_operator.autoscaling.load import BadMetrics, LoadTracker, Reading, parse


def metrics(deliveries_in: float, clients: int = 3, mesh: int = 2, unsettled: int = 7) -> str:
    return f"""\
# HELP routernet_deliveries Deliveries received (in) and sent (out).
# TYPE routernet_deliveries counter
routernet_deliveries_total{{router="r-0",direction="in"}} {deliveries_in}
routernet_deliveries_total{{router="r-0",direction="out"}} {deliveries_in * 2}
# HELP routernet_connections Open connections by role.
# TYPE routernet_connections gauge
routernet_connections{{router="r-0",role="normal"}} {clients}
routernet_connections{{router="r-0",role="inter-router"}} {mesh}
routernet_connections{{router="r-0",role="edge"}} 1
# HELP routernet_unsettled_deliveries Deliveries received from senders and not settled yet.
# TYPE routernet_unsettled_deliveries gauge
routernet_unsettled_deliveries{{router="r-0"}} {unsettled}
"""


def test_a_scrape_reads_deliveries_connections_but_the_meshs_and_unsettled() -> None:
    assert parse(metrics(1000)) == Reading(1000, 4, 7)


@pytest.mark.parametrize("text", ["", "# just a comment\n", "routernet_connections{ 3\n"])
def test_what_is_not_a_routers_metrics_is_an_error(text: str) -> None:
    with pytest.raises(BadMetrics):
        parse(text)


def test_message_rate_comes_from_two_scrapes_of_each_router() -> None:
    tracker = LoadTracker()
    first = tracker.measure(0.0, {"r-0": parse(metrics(1000)), "r-1": parse(metrics(0))})
    assert "messagesPerSecond" not in first  # no rate from one scrape
    assert first["connections"] == Measurement(8, 2)
    assert first["unsettledDeliveries"] == Measurement(14, 2)
    later = tracker.measure(10.0, {"r-0": parse(metrics(6000)), "r-1": parse(metrics(3000))})
    assert later["messagesPerSecond"] == Measurement(800.0, 2)


def test_a_restarted_router_counts_from_zero_and_a_silent_one_not_at_all() -> None:
    tracker = LoadTracker()
    tracker.measure(0.0, {"r-0": parse(metrics(9000)), "r-1": parse(metrics(100))})
    load = tracker.measure(5.0, {"r-0": parse(metrics(500)), "r-1": None})
    assert load["messagesPerSecond"] == Measurement(100.0, 1)
    assert load["connections"] == Measurement(4, 1)
    assert tracker.measure(6.0, {}) == {}
    assert tracker.last == {}
