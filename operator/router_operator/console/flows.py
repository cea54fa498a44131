"""Who sent what to whom in the last minutes, from the flow records the collector wrote
(router/telemetry/schema.py): a traffic matrix of ingress x egress router, the busiest paths
by address, with latency percentiles read off the summed histograms.

``FlowReader`` reads the dataset's hour partitions that the window touches and keeps each file's
rows: the collector never changes a file once it is there (it renames a finished temporary
file), so a refresh reads only the files written since. ``summarize`` is pure.

The records are as fresh as the collector's last flush (windows of ten seconds by default, a
flush at most ten seconds later): the console's live rates come from the routers, these from
what the routers measured, latency included.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.dynamic_addresses import DYNAMIC, DYNAMIC_SHOWN
from router.telemetry.schema import FLOW_COUNTS, LATENCY_BUCKETS, histogram_quantile

MS_PER_HOUR = 3_600_000
COLUMNS = (
    "window_start",
    "window_end",
    "address",
    "ingress_router",
    "egress_router",
    "node_leg",
    *FLOW_COUNTS,
    "latency_hist",
)
BUSIEST = 20
"""Paths the flows page lists."""
MAX_MINUTES = 24 * 60


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


@dataclass(frozen=True)
class Flow:
    """One flow record's fields the console uses; times in ms since the epoch."""

    window_start: int
    window_end: int
    address: str
    ingress: str
    egress: str | None
    node_leg: str | None
    counts: tuple[int, ...]
    """FLOW_COUNTS in order."""
    hist: tuple[int, ...]


class FlowReader:
    """The flow records of a dataset, file by file, kept across refreshes."""

    def __init__(self, dataset: Path) -> None:
        self.dataset = dataset
        self._files: dict[Path, list[Flow]] = {}

    def read(self, start_ms: int, end_ms: int) -> list[Flow]:
        """Records whose window ends after ``start_ms`` and starts before ``end_ms``."""
        import pyarrow.parquet as pq  # the console's only use of Arrow: loaded when asked

        wanted: set[Path] = set()
        for hour in range(start_ms // MS_PER_HOUR - 1, end_ms // MS_PER_HOUR + 1):
            # A window belongs to the hour it starts in; one that started in the hour before
            # can end inside the range, hence the extra hour.
            wanted.update(self._hour_files(hour))
        for path in sorted(wanted - self._files.keys()):
            try:
                names = pq.read_schema(path).names  # files of schema 1 have no node_leg
                table = pq.read_table(path, columns=[c for c in COLUMNS if c in names])
            except (OSError, ValueError):
                continue  # not there any more, or not a Parquet file: skipped this time
            self._files[path] = _flows(table.to_pylist())
        for gone in self._files.keys() - wanted:
            del self._files[gone]  # out of the hours asked for: no longer kept
        return [
            f
            for path in wanted
            for f in self._files.get(path, [])
            if f.window_end > start_ms and f.window_start < end_ms
        ]

    def _hour_files(self, hour: int) -> list[Path]:
        from datetime import UTC, datetime

        start = datetime.fromtimestamp(hour * 3600, tz=UTC)
        directory = self.dataset / "flow" / f"date={start:%Y-%m-%d}" / f"hour={start:%H}"
        try:
            return [p for p in directory.iterdir() if p.name.startswith("part-")]
        except OSError:
            return []


def _flows(rows: Iterable[dict[str, Any]]) -> list[Flow]:
    return [
        Flow(
            window_start=int(r["window_start"].timestamp() * 1000),
            window_end=int(r["window_end"].timestamp() * 1000),
            address=r["address"],
            ingress=r["ingress_router"],
            egress=r["egress_router"],
            node_leg=r.get("node_leg"),
            counts=tuple(int(r[c] or 0) for c in FLOW_COUNTS),
            hist=tuple(r["latency_hist"] or ()),
        )
        for r in rows
    ]


def summarize(flows: Sequence[Flow], start_ms: int, end_ms: int) -> dict[str, Any]:
    """The traffic matrix (ingress x egress, the undeliverable in a column of their own) and
    the busiest (address, ingress, egress) paths of the window, rates per second over it."""
    seconds = max((end_ms - start_ms) / 1000.0, 1.0)
    index = {name: i for i, name in enumerate(FLOW_COUNTS)}
    cells: dict[tuple[str, str | None], list[int]] = {}
    paths: dict[tuple[str, str, str | None, str | None], tuple[list[int], list[int]]] = {}
    for f in flows:
        cell = cells.setdefault((f.ingress, f.egress), [0] * len(FLOW_COUNTS))
        # Reply addresses (the console's own management answers among them) are one each: one
        # row for all of them, as the pipeline's report shows them.
        address = DYNAMIC_SHOWN if DYNAMIC.match(f.address) else f.address
        path, hist = paths.setdefault(
            (address, f.ingress, f.egress, f.node_leg),
            ([0] * len(FLOW_COUNTS), [0] * LATENCY_BUCKETS),
        )
        for i, value in enumerate(f.counts):
            cell[i] += value
            path[i] += value
        for i, value in enumerate(f.hist[:LATENCY_BUCKETS]):
            hist[i] += value
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

    busiest = sorted(paths.items(), key=lambda kv: -kv[1][0][index["deliveries"]])[:BUSIEST]
    return {
        "from": start_ms,
        "to": end_ms,
        "records": len(flows),
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
