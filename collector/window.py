"""The flow records of a time window, summed by path: what the console shows of traffic.

The collector's dataset is where the flow records are; on Kubernetes it is on the collector's
ReadWriteOnce claim, so the collector itself answers for it (collector/http.py) and the console
sums the answers of every network's collector. Totals are keyed by (address, ingress router,
egress router, node leg) and carry the FLOW_COUNTS and the latency histogram added up: two
collectors' totals merge by adding, so nothing is lost by asking each for its own, and an hour
of records travels as one row per path rather than one per ten-second window.

``FlowReader`` reads the hour partitions the window touches and keeps each file's rows: the
collector never changes a file once it is there (it renames a finished temporary file), so a
refresh reads only the files written since. The rest is pure.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipeline.dynamic_addresses import DYNAMIC, DYNAMIC_SHOWN
from router.telemetry.schema import FLOW_COUNTS, LATENCY_BUCKETS

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

PathKey = tuple[str, str, str | None, str | None]
"""address, ingress router, egress router (None: undeliverable), node leg."""


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


@dataclass
class Totals:
    """Flow records added up by path."""

    records: int = 0
    paths: dict[PathKey, tuple[list[int], list[int]]] = field(default_factory=dict)
    """Per path: FLOW_COUNTS in order, and the latency histogram (LATENCY_BUCKETS)."""

    def add(self, flows: Iterable[Flow]) -> Totals:
        for f in flows:
            self.records += 1
            # Reply addresses (a management tool's answers among them) are one each: one row
            # for all of them, as the pipeline's report shows them.
            address = DYNAMIC_SHOWN if DYNAMIC.match(f.address) else f.address
            self._add((address, f.ingress, f.egress, f.node_leg), f.counts, f.hist)
        return self

    def merge(self, other: Totals) -> Totals:
        self.records += other.records
        for key, (counts, hist) in other.paths.items():
            self._add(key, counts, hist)
        return self

    def _add(self, key: PathKey, counts: Iterable[int], hist: Iterable[int]) -> None:
        into_counts, into_hist = self.paths.setdefault(
            key, ([0] * len(FLOW_COUNTS), [0] * LATENCY_BUCKETS)
        )
        for i, value in enumerate(counts):
            into_counts[i] += value
        for i, value in enumerate(hist):
            if i < LATENCY_BUCKETS:
                into_hist[i] += value

    def to_json(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "counts": list(FLOW_COUNTS),
            "paths": [
                {
                    "address": address,
                    "ingress": ingress,
                    "egress": egress,
                    "nodeLeg": leg,
                    "counts": counts,
                    "hist": hist,
                }
                for (address, ingress, egress, leg), (counts, hist) in sorted(
                    self.paths.items(), key=lambda kv: tuple(v or "" for v in kv[0])
                )
            ],
        }

    @classmethod
    def from_json(cls, data: Any) -> Totals:
        """What ``to_json`` wrote; ValueError, saying what is wrong, for anything else (a
        collector of another version names its counts, and only those known are taken)."""
        if not isinstance(data, Mapping):
            raise ValueError("flow totals: not a JSON object")
        names = data.get("counts")
        paths = data.get("paths")
        records = data.get("records")
        if not isinstance(names, list) or not isinstance(paths, list):
            raise ValueError("flow totals: no 'counts' and 'paths' lists")
        if not isinstance(records, int):
            raise ValueError("flow totals: 'records' is not a number")
        where = [names.index(c) if c in names else None for c in FLOW_COUNTS]
        totals = cls(records=records)
        for path in paths:
            try:
                key = (path["address"], path["ingress"], path["egress"], path["nodeLeg"])
                counts = [int(path["counts"][i]) if i is not None else 0 for i in where]
                hist = [int(v) for v in path["hist"]]
            except (KeyError, IndexError, TypeError, ValueError) as err:
                raise ValueError(f"flow totals: a malformed path ({err!r})") from None
            if not all(isinstance(k, str) or k is None for k in key) or key[0] is None:
                raise ValueError("flow totals: a path's address and routers are not text")
            totals._add(key, counts, hist)  # type: ignore[arg-type]
        return totals


class WindowError(ValueError):
    """A bad window asked of a collector; the text says why in one line."""


def parse_window(start: str | None, end: str | None, max_ms: int) -> tuple[int, int]:
    """``from`` and ``to`` of a request, in ms since the epoch: whole numbers, ``from`` before
    ``to``, at most ``max_ms`` apart."""
    try:
        start_ms, end_ms = int(start or ""), int(end or "")
    except ValueError:
        raise WindowError("from and to must be whole numbers of ms since the epoch") from None
    if not 0 <= start_ms < end_ms:
        raise WindowError(f"from ({start_ms}) must be before to ({end_ms})")
    if end_ms - start_ms > max_ms:
        raise WindowError(f"a window is at most {max_ms // 60_000} minutes")
    return start_ms, end_ms


class FlowReader:
    """The flow records of a dataset, file by file, kept across refreshes; one caller at a
    time (a lock), as an HTTP server's threads are."""

    def __init__(self, dataset: Path) -> None:
        self.dataset = dataset
        self._files: dict[Path, list[Flow]] = {}
        self._lock = threading.Lock()

    def totals(self, start_ms: int, end_ms: int) -> Totals:
        return Totals().add(self.read(start_ms, end_ms))

    def read(self, start_ms: int, end_ms: int) -> list[Flow]:
        """Records whose window ends after ``start_ms`` and starts before ``end_ms``."""
        import pyarrow.parquet as pq  # loaded when asked: the console's only use of Arrow

        with self._lock:
            wanted: set[Path] = set()
            for hour in range(start_ms // MS_PER_HOUR - 1, end_ms // MS_PER_HOUR + 1):
                # A window belongs to the hour it starts in; one that started in the hour
                # before can end inside the range, hence the extra hour.
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
