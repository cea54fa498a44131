"""Synthetic telemetry in the collector's layout, for tests, benchmarks and demos.

Realistic enough to exercise every analysis: interior routers `hub-<i>` and edge routers
`edge-<i>` (each edge's uplink is hub i mod hubs), Zipf-distributed address popularity, a daily
load curve, producers on a few routers per address and consumers on a few others (unevenly
shared, so balanced addresses show imbalance), about 1% undeliverable, outcomes mostly
accepted with some released, rejected and modified, multicast sensor addresses delivered
pre-settled, latency histograms centred on each path's hop count, and a small share of
records written twice (same record_id) as a collector sees after a router reconnects.

Everything is vectorized numpy/pyarrow, one hour at a time, so ten million flow rows take
seconds per hour of data and memory stays bounded. Deterministic for a seed.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.dataset import arrow_schema, partition_dir
from router.telemetry.schema import LATENCY_BOUNDS_US, LATENCY_BUCKETS, SCHEMA_VERSION

DEFAULT_START = datetime(2026, 1, 5, tzinfo=UTC)
ROWS_PER_FILE = 250_000
# Spread of a row's latency samples around its centre bucket (buckets -1 .. +3).
_SPREAD = np.array([0.15, 0.5, 0.2, 0.1, 0.05])
_BOUNDS = np.array(LATENCY_BOUNDS_US)


@dataclass(frozen=True)
class Spec:
    """What to generate. `flow_rows` is approximate (rows that would repeat an (address,
    ingress, egress) within one window are merged), duplicates excluded."""

    flow_rows: int = 100_000
    hours: int = 24
    start: datetime = DEFAULT_START
    window_seconds: int = 10
    hubs: int = 4
    edges: int = 24
    addresses: int = 5_000
    zipf: float = 1.1
    undeliverable: float = 0.01
    duplicates: float = 0.001
    seed: int = 1

    @property
    def routers(self) -> list[str]:
        return [f"hub-{i}" for i in range(self.hubs)] + [f"edge-{i}" for i in range(self.edges)]


def address_names(count: int) -> list[str]:
    """Three families of address, as examples/ declares: balanced orders, closest requests,
    multicast sensors."""
    names = []
    for i in range(count):
        family = i % 3
        if family == 0:
            names.append(f"orders.region-{i // 3}")
        elif family == 1:
            names.append(f"requests.svc-{i // 3}")
        else:
            names.append(f"sensors.s{i // 3}.temperature")
    return names


def load_curve(hours_of_day: np.ndarray) -> np.ndarray:
    """Relative load by hour of day (UTC): a night trough at 03:00 a fifth of the 15:00 peak."""
    return 0.6 - 0.4 * np.cos((hours_of_day - 3.0) / 24.0 * 2 * math.pi)


def latency_buckets(us: np.ndarray) -> np.ndarray:
    """schema.latency_bucket over an array."""
    with np.errstate(divide="ignore"):
        index = np.ceil(4 * np.log2(np.maximum(us, 1e-9) / 10.0))
    return np.clip(index, 0, LATENCY_BUCKETS - 1).astype(np.int64)


def _draw_keys(
    rng: np.random.Generator,
    n: int,
    windows: int,
    popularity: np.ndarray,
    home_in: np.ndarray,
    home_out: np.ndarray,
    n_consumers: np.ndarray,
    n_routers: int,
    undeliverable: float,
) -> np.ndarray:
    """`n` distinct (window, address, ingress, egress + 1) keys, sorted: one record per key
    per window, as a router sends them. Popular addresses repeat keys, so draw until enough
    distinct ones are there, then keep a random `n` of them."""
    n_addresses = len(popularity)
    # Which keys occur: flatter than popularity (a hot address is in every window anyway and
    # carries more deliveries per record), so drawing converges in a round or two.
    presence = np.sqrt(popularity)
    presence /= presence.sum()
    keys = np.empty(0, dtype=np.int64)
    for _ in range(8):
        m = max(1000, int((n - len(keys)) * 1.6))
        window = rng.integers(0, windows, m)
        address = rng.choice(n_addresses, m, p=presence)
        ingress = (home_in[address] + rng.integers(0, 4, m) * 7) % n_routers
        # Consumers: the address's k-th consumer router, k skewed toward the first.
        k = (rng.random(m) ** 2 * n_consumers[address]).astype(np.int64)
        egress = (home_out[address] + k * 5) % n_routers
        egress = np.where(rng.random(m) < undeliverable, -1, egress)
        drawn = ((window * n_addresses + address) * n_routers + ingress) * (n_routers + 1) + (
            egress + 1
        )
        keys = np.concatenate([keys, drawn])
        keys.sort()
        keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])]
        if len(keys) >= n:
            break
    if len(keys) > n:
        keys = np.sort(rng.choice(keys, n, replace=False))
    return keys


@dataclass(frozen=True)
class _Model:
    """The network the records describe, the same for every hour."""

    popularity: np.ndarray
    sizes: np.ndarray
    home_in: np.ndarray
    home_out: np.ndarray
    n_consumers: np.ndarray
    multicast: np.ndarray
    hour_load: np.ndarray
    rows_per_hour: np.ndarray


def generate(dataset: Path, spec: Spec = Spec(), workers: int | None = None) -> dict[str, int]:
    """Write `spec`'s records under `dataset`, hours in parallel over `workers` processes
    (default: the CPUs); returns rows written per kind (duplicates included). Each hour has
    its own random stream, so the result does not depend on `workers`."""
    rng = np.random.default_rng(spec.seed)
    ranks = np.arange(1, spec.addresses + 1)
    popularity = 1.0 / ranks**spec.zipf
    popularity /= popularity.sum()
    hour_load = load_curve((spec.start.hour + np.arange(spec.hours)) % 24)
    rows = spec.flow_rows * hour_load / hour_load.sum()
    # Whole rows per hour adding up to flow_rows.
    rows_per_hour = np.floor(rows).astype(np.int64)
    rows_per_hour[: spec.flow_rows - rows_per_hour.sum()] += 1
    model = _Model(
        popularity=popularity[rng.permutation(spec.addresses)],
        sizes=rng.integers(100, 4_000, spec.addresses),
        home_in=rng.integers(0, len(spec.routers), spec.addresses),
        home_out=rng.integers(0, len(spec.routers), spec.addresses),
        n_consumers=rng.integers(1, 7, spec.addresses),
        multicast=np.arange(spec.addresses) % 3 == 2,
        hour_load=hour_load,
        rows_per_hour=rows_per_hour,
    )
    workers = workers or min(os.cpu_count() or 1, spec.hours)
    totals = {"flow": 0, "router": 0}
    if workers <= 1:
        results = [_hour(dataset, spec, model, h) for h in range(spec.hours)]
    else:
        with ProcessPoolExecutor(workers) as pool:
            results = list(pool.map(partial(_hour, dataset, spec, model), range(spec.hours)))
    for flow_rows, router_rows in results:
        totals["flow"] += flow_rows
        totals["router"] += router_rows
    return totals


def _hour(dataset: Path, spec: Spec, model: _Model, h: int) -> tuple[int, int]:
    """One hour's flow and router records, written; rows of each (duplicates included)."""
    rng = np.random.default_rng([spec.seed, h])
    routers = spec.routers
    n_routers = len(routers)
    router_names = pa.array(routers)
    hubs = spec.hubs
    addresses = pa.array(address_names(spec.addresses))
    popularity, sizes, multicast = model.popularity, model.sizes, model.multicast
    hour_load = model.hour_load
    windows_per_hour = 3600 // spec.window_seconds
    hour = spec.start + timedelta(hours=h)
    key = _draw_keys(
        rng,
        int(model.rows_per_hour[h]),
        windows_per_hour,
        popularity,
        model.home_in,
        model.home_out,
        model.n_consumers,
        n_routers,
        spec.undeliverable,
    )
    egress = key % (n_routers + 1) - 1
    key //= n_routers + 1
    ingress = key % n_routers
    key //= n_routers
    address = key % spec.addresses
    window = key // spec.addresses
    n = len(key)
    lost = egress < 0

    rate = popularity[address] * hour_load[h] * 2_000_000 / windows_per_hour
    deliveries = 1 + rng.poisson(rate)
    presettled = np.where(multicast[address], deliveries, 0)
    settled = deliveries - presettled
    released = rng.binomial(settled, 0.01)
    rejected = rng.binomial(settled - released, 0.002)
    modified = rng.binomial(settled - released - rejected, 0.001)
    accepted = settled - released - rejected - modified
    dropped = np.where(lost & multicast[address], deliveries, 0)
    released = np.where(lost, np.where(multicast[address], 0, deliveries), released)
    zero = np.zeros(n, dtype=np.int64)
    accepted = np.where(lost, zero, accepted)
    rejected = np.where(lost, zero, rejected)
    modified = np.where(lost, zero, modified)
    presettled = np.where(lost, zero, presettled)

    # Latency: 150 µs per hop, edges reach each other through their hubs, times noise.
    is_edge_in = ingress >= hubs
    is_edge_out = egress >= hubs
    hops = np.where(ingress == egress, 0, 1 + is_edge_in.astype(int) + is_edge_out.astype(int))
    centre_us = (80 + 150 * hops) * rng.lognormal(0.0, 0.35, n)
    samples = np.where(lost, 0, np.minimum(deliveries, 1 + deliveries // 20))
    hist = np.zeros((n, LATENCY_BUCKETS), dtype=np.int64)
    centre = np.clip(latency_buckets(centre_us), 1, LATENCY_BUCKETS - 4)
    spread = np.floor(samples[:, None] * _SPREAD[None, :]).astype(np.int64)
    spread[:, 1] += samples - spread.sum(axis=1)
    rows = np.arange(n)[:, None]
    hist[rows, centre[:, None] + np.arange(-1, 4)[None, :]] = spread
    top = centre + np.where(spread[:, 4] > 0, 3, np.where(spread[:, 3] > 0, 2, 1))
    max_us = np.where(samples > 0, _BOUNDS[np.minimum(top, len(_BOUNDS) - 1)], np.nan)

    sender = np.where(lost, ingress, egress)
    window_start = np.datetime64(hour.replace(tzinfo=None), "ms") + window * np.timedelta64(
        spec.window_seconds * 1000, "ms"
    )
    window_ms = window_start.astype(np.int64)
    ids = np.arange(n)  # unique within the hour; with router and window, everywhere
    record_id = pc.binary_join_element_wise(
        pc.take(router_names, pa.array(sender)),
        pa.array(window_ms).cast(pa.string()),
        pa.array(ids).cast(pa.string()),
        "/",
    )
    hist_array = pa.ListArray.from_arrays(
        pa.array(np.arange(0, (n + 1) * LATENCY_BUCKETS, LATENCY_BUCKETS, dtype=np.int32)),
        pa.array(hist.reshape(-1)),
    )
    window_end = window_start + np.timedelta64(spec.window_seconds * 1000, "ms")
    columns = {
        "record_id": record_id,
        "schema_version": pa.array(np.full(n, SCHEMA_VERSION, dtype=np.int64)),
        "router": pc.take(router_names, pa.array(sender)),
        "window_start": pa.array(window_start),
        "window_end": pa.array(window_end),
        "address": pc.take(addresses, pa.array(address)),
        "ingress_router": pc.take(router_names, pa.array(ingress)),
        "egress_router": pc.take(router_names, pa.array(egress, mask=lost)),
        "deliveries": pa.array(deliveries),
        "bytes": pa.array(deliveries * sizes[address]),
        "accepted": pa.array(accepted),
        "released": pa.array(released),
        "rejected": pa.array(rejected),
        "modified": pa.array(modified),
        "presettled": pa.array(presettled),
        "dropped": pa.array(dropped),
        "latency_samples": pa.array(samples),
        "latency_sum_us": pa.array(samples * centre_us),
        "latency_max_us": pa.array(max_us, mask=samples == 0),
        "latency_hist": hist_array,
        "node_leg": pa.nulls(n, pa.string()),  # routed traffic only
    }
    del hist
    flow = _table("flow", columns)
    flow_rows = _write(dataset, "flow", hour, flow, rng, spec.duplicates)

    # Router rows: every router every window, its load consistent with the flows.
    cells = windows_per_hour * n_routers
    via_in = np.where(is_edge_in & (egress != ingress), ingress % hubs, -1)
    routed_in = np.bincount(window * n_routers + ingress, deliveries, cells)
    routed_out = np.bincount(window[~lost] * n_routers + egress[~lost], deliveries[~lost], cells)
    transit_sel = via_in >= 0
    transit = np.bincount(
        window[transit_sel] * n_routers + via_in[transit_sel], deliveries[transit_sel], cells
    )
    d_in = (routed_in + transit).astype(np.int64)
    d_out = (routed_out + transit).astype(np.int64)
    w = np.repeat(np.arange(windows_per_hour), n_routers)
    r = np.tile(np.arange(n_routers), windows_per_hour)
    r_start = np.datetime64(hour.replace(tzinfo=None), "ms") + w * np.timedelta64(
        spec.window_seconds * 1000, "ms"
    )
    m = len(w)
    r_ids = np.arange(n, n + m)
    router_columns = {
        "record_id": pc.binary_join_element_wise(
            pc.take(router_names, pa.array(r)),
            pa.array(r_start.astype(np.int64)).cast(pa.string()),
            pa.array(r_ids).cast(pa.string()),
            "/",
        ),
        "schema_version": pa.array(np.full(m, SCHEMA_VERSION, dtype=np.int64)),
        "router": pc.take(router_names, pa.array(r)),
        "window_start": pa.array(r_start),
        "window_end": pa.array(r_start + np.timedelta64(spec.window_seconds * 1000, "ms")),
        "mode": pa.array(np.where(r < hubs, "interior", "edge")),
        "deliveries_in": pa.array(d_in),
        "deliveries_out": pa.array(d_out),
        "deliveries_transit": pa.array(transit.astype(np.int64)),
        "connections": pa.array(rng.integers(2, 60, m)),
        "links": pa.array(rng.integers(4, 200, m)),
        "unsettled": pa.array(rng.poisson(d_in / 1000.0).astype(np.int64)),
        "credit_blocked_senders": pa.array(rng.poisson(0.05, m).astype(np.int64)),
        "records_dropped": pa.array(np.zeros(m, dtype=np.int64)),
        "cpu_seconds": pa.array(d_in * 8e-6 + 0.01),
        "rss_bytes": pa.array(rng.integers(40_000_000, 90_000_000, m)),
    }
    router_rows = _write(
        dataset, "router", hour, _table("router", router_columns), rng, spec.duplicates
    )
    return flow_rows, router_rows


def _table(kind: str, columns: dict[str, pa.Array]) -> pa.Table:
    schema = arrow_schema(kind)  # type: ignore[arg-type]
    arrays = [columns[f.name].cast(f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def _write(
    dataset: Path, kind: str, hour: datetime, table: pa.Table, rng: np.random.Generator, dup: float
) -> int:
    """The hour's rows as part files of at most ROWS_PER_FILE, plus a file repeating a random
    `dup` share of them, as a resent batch would."""
    directory = partition_dir(dataset, kind, hour)  # type: ignore[arg-type]
    directory.mkdir(parents=True, exist_ok=True)
    for i, offset in enumerate(range(0, table.num_rows, ROWS_PER_FILE)):
        pq.write_table(table.slice(offset, ROWS_PER_FILE), directory / f"part-{i:05d}.parquet")
    written = table.num_rows
    repeated = np.flatnonzero(rng.random(table.num_rows) < dup)
    if len(repeated):
        pq.write_table(table.take(pa.array(repeated)), directory / "part-resent.parquet")
        written += len(repeated)
    return written
