"""Who sent what to whom in the last minutes, from the flow records the collector wrote
(router/telemetry/schema.py): a traffic matrix of ingress x egress router, the busiest paths
by address, with latency percentiles read off the summed histograms.

The records come summed by path (collector/window.py): read from the dataset where the console
can (a network on this machine), asked of each network's collector where it cannot (on
Kubernetes the dataset is on the collector's volume). ``summarize`` is pure.

The records are as fresh as the collector's last flush (windows of ten seconds by default, a
flush at most ten seconds later): the console's live rates come from the routers, these from
what the routers measured, latency included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from collector.window import Totals
from router.telemetry.schema import FLOW_COUNTS, histogram_quantile

BUSIEST = 20
"""Paths the flows page lists."""
MAX_MINUTES = 24 * 60


@dataclass(frozen=True)
class FlowAnswer:
    """What a source has of a window's flows."""

    totals: Totals | None
    """None: no collector to ask (the network runs without one), ``reason`` says so."""
    reason: str = ""
    unanswered: tuple[str, ...] = ()
    """Collectors that were asked and did not answer, one line each: the totals lack them."""


class FlowsError(ValueError):
    """A bad request for flows (minutes out of range); the text says why in one line."""


def parse_minutes(text: str | None, default: int = 5) -> int:
    if text is None or text == "":
        return default
    try:
        minutes = int(text)
    except ValueError:
        raise FlowsError(f"minutes must be a whole number, not {text!r}") from None
    if not 1 <= minutes <= MAX_MINUTES:
        raise FlowsError(f"minutes must be between 1 and {MAX_MINUTES}, not {minutes}")
    return minutes


def summarize(totals: Totals, start_ms: int, end_ms: int) -> dict[str, Any]:
    """The traffic matrix (ingress x egress, the undeliverable in a column of their own) and
    the busiest (address, ingress, egress) paths of the window, rates per second over it."""
    seconds = max((end_ms - start_ms) / 1000.0, 1.0)
    index = {name: i for i, name in enumerate(FLOW_COUNTS)}
    cells: dict[tuple[str, str | None], list[int]] = {}
    for (_, ingress, egress, _), (values, _) in totals.paths.items():
        cell = cells.setdefault((ingress, egress), [0] * len(FLOW_COUNTS))
        for i, value in enumerate(values):
            cell[i] += value
    routers = sorted({r for key in cells for r in key if r is not None})

    def counts(values: list[int]) -> dict[str, Any]:
        deliveries = values[index["deliveries"]]
        return {
            "deliveries": deliveries,
            "perSecond": deliveries / seconds,
            "bytes": values[index["bytes"]],
            "dropped": values[index["dropped"]],
            "rejected": values[index["rejected"]],
            "released": values[index["released"]],
        }

    busiest = sorted(
        totals.paths.items(),
        key=lambda kv: (-kv[1][0][index["deliveries"]], tuple(v or "" for v in kv[0])),
    )[:BUSIEST]
    return {
        "from": start_ms,
        "to": end_ms,
        "records": totals.records,
        "routers": routers,
        "matrix": [
            {"ingress": ingress, "egress": egress, **counts(values)}
            for (ingress, egress), values in sorted(
                cells.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")
            )
        ],
        "paths": [
            {
                "address": address,
                "ingress": ingress,
                "egress": egress,
                "nodeLeg": leg,
                **counts(values),
                "latencyUs": {
                    "samples": sum(hist),
                    "p50": histogram_quantile(hist, 0.5),
                    "p90": histogram_quantile(hist, 0.9),
                    "p99": histogram_quantile(hist, 0.99),
                },
            }
            for (address, ingress, egress, leg), (values, hist) in busiest
        ],
    }
