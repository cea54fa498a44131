"""PNG plots of an analysis (matplotlib, Agg backend: no display needed).

Inputs are the analysis's small Arrow tables, already on the driver.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from router.telemetry.schema import LATENCY_BOUNDS_US

if TYPE_CHECKING:
    import pyarrow as pa

TOP_ROUTERS = 8
TOP_ADDRESSES = 5


def _pyplot():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def heat_map(paths: pa.Table, output: Path) -> Path:
    """Deliveries per (ingress, egress) router, log colour scale."""
    import numpy as np
    from matplotlib.colors import LogNorm

    plt = _pyplot()
    rows = paths.select(["ingress_router", "egress_router", "deliveries"]).to_pylist()
    routers = sorted({r["ingress_router"] for r in rows} | {r["egress_router"] for r in rows})
    index = {name: i for i, name in enumerate(routers)}
    grid = np.zeros((len(routers), len(routers)))
    for r in rows:
        grid[index[r["ingress_router"]], index[r["egress_router"]]] = r["deliveries"]
    size = max(4.0, 0.3 * len(routers) + 2)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    masked = np.ma.masked_where(grid <= 0, grid)
    image = ax.imshow(masked, norm=LogNorm() if grid.max() > 0 else None, cmap="viridis")
    ax.set_xticks(range(len(routers)), routers, rotation=90, fontsize=7)
    ax.set_yticks(range(len(routers)), routers, fontsize=7)
    ax.set_xlabel("egress router")
    ax.set_ylabel("ingress router")
    ax.set_title("Deliveries by path")
    fig.colorbar(image, ax=ax, label="deliveries")
    fig.tight_layout()
    path = output / "traffic_matrix.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def load_over_time(per_minute: pa.Table, output: Path) -> Path:
    """Messages/s in per minute for the busiest routers."""
    import pyarrow.compute as pc

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 4.5))
    routers = per_minute.group_by("router").aggregate([("in_per_s", "max")])
    routers = routers.sort_by([("in_per_s_max", "descending")])["router"].to_pylist()
    for name in routers[:TOP_ROUTERS]:
        rows = per_minute.filter(pc.equal(per_minute["router"], name)).sort_by("minute")
        ax.plot(rows["minute"].to_pylist(), rows["in_per_s"].to_pylist(), label=name, lw=1)
    ax.set_ylabel("messages/s in")
    ax.set_title(f"Load per router (busiest {min(TOP_ROUTERS, len(routers))})")
    if routers:
        ax.legend(fontsize=7, ncol=2)
    fig.autofmt_xdate()
    fig.tight_layout()
    path = output / "router_load.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def latency(stats: pa.Table, output: Path) -> Path:
    """Transit latency distribution of the hottest addresses, from their merged histograms."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 4.5))
    bounds = [*LATENCY_BOUNDS_US, LATENCY_BOUNDS_US[-1] * 2]
    for row in stats.select(["address", "latency_hist"]).slice(0, TOP_ADDRESSES).to_pylist():
        hist = row["latency_hist"] or []
        total = sum(hist)
        if not total:
            continue
        ax.step(bounds[: len(hist)], [c / total for c in hist], where="pre", label=row["address"])
    ax.set_xscale("log")
    ax.set_xlabel("network transit latency (µs, bucket upper bound)")
    ax.set_ylabel("share of samples")
    ax.set_title(f"Latency of the {TOP_ADDRESSES} hottest addresses")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = output / "latency.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
