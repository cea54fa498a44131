"""PNG plots of an analysis (matplotlib, Agg backend: no display needed).

Inputs are the analysis's small Arrow tables, already on the driver. Each plot is a function
from a table to a matplotlib Figure (what tests look at: axes, limits, lines) and one that
saves it; a plot with nothing to draw says so in words rather than showing empty axes.
"""

from __future__ import annotations

from datetime import UTC, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from router.telemetry.schema import LATENCY_BOUNDS_US

if TYPE_CHECKING:
    import pyarrow as pa
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

TOP_ROUTERS = 8
TOP_ADDRESSES = 5
MINUTE = timedelta(minutes=1)
# Bucket i of a latency histogram holds (EDGES[i], EDGES[i + 1]]: the first is closed below
# at a bucket's width under LATENCY_BOUNDS_US[0], the last (open above) drawn as wide again.
_RATIO = LATENCY_BOUNDS_US[1] / LATENCY_BOUNDS_US[0]
EDGES = (LATENCY_BOUNDS_US[0] / _RATIO, *LATENCY_BOUNDS_US, LATENCY_BOUNDS_US[-1] * _RATIO)


def _pyplot():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    _pyplot().close(fig)
    return path


def _nothing(ax: Axes, text: str) -> None:
    """A plot with no data: the sentence in place of axes."""
    ax.set_axis_off()
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=14, transform=ax.transAxes)


def heat_map_figure(paths: pa.Table) -> Figure:
    """Deliveries per (ingress, egress) router, log colour scale."""
    import numpy as np
    from matplotlib.colors import LogNorm

    plt = _pyplot()
    rows = paths.select(["ingress_router", "egress_router", "deliveries"]).to_pylist()
    routers = sorted({r["ingress_router"] for r in rows} | {r["egress_router"] for r in rows})
    size = max(4.0, 0.3 * len(routers) + 2)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    ax.set_title("Deliveries by path")
    if not any(r["deliveries"] for r in rows):
        _nothing(ax, "no deliveries")
        return fig
    index = {name: i for i, name in enumerate(routers)}
    grid = np.zeros((len(routers), len(routers)))
    for r in rows:
        grid[index[r["ingress_router"]], index[r["egress_router"]]] = r["deliveries"]
    masked = np.ma.masked_where(grid <= 0, grid)
    image = ax.imshow(masked, norm=LogNorm(), cmap="viridis")
    ax.set_xticks(range(len(routers)), routers, rotation=90, fontsize=7)
    ax.set_yticks(range(len(routers)), routers, fontsize=7)
    ax.set_xlabel("egress router")
    ax.set_ylabel("ingress router")
    fig.colorbar(image, ax=ax, label="deliveries")
    return fig


def heat_map(paths: pa.Table, output: Path) -> Path:
    return _save(heat_map_figure(paths), output / "traffic_matrix.png")


def load_figure(per_minute: pa.Table) -> Figure:
    """Messages/s in per minute for the busiest routers, as steps a minute wide: each value
    is that minute's average, so nothing is drawn between minutes, and a minute with no
    record is a gap rather than a slope."""
    import pyarrow.compute as pc
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 4.5))
    routers = per_minute.group_by("router").aggregate([("in_per_s", "max")])
    routers = routers.sort_by([("in_per_s_max", "descending")])["router"].to_pylist()
    ax.set_title(f"Load per router (busiest {min(TOP_ROUTERS, len(routers))})")
    if not routers:
        _nothing(ax, "no router records")
        return fig
    for name in routers[:TOP_ROUTERS]:
        rows = per_minute.filter(pc.equal(per_minute["router"], name)).sort_by("minute")
        xs: list[object] = []
        ys: list[float] = []
        for minute, rate in zip(
            rows["minute"].to_pylist(), rows["in_per_s"].to_pylist(), strict=True
        ):
            if xs and xs[-1] != minute:
                xs.append(xs[-1])  # a gap: the last minute ends, nothing until this one
                ys.append(float("nan"))
            xs += [minute, minute + MINUTE]
            ys += [rate, rate]
        ax.plot(xs, ys, label=name, lw=1.2, drawstyle="steps-post")
    locator = AutoDateLocator(tz=UTC)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(ConciseDateFormatter(locator, tz=UTC))
    ax.set_xlabel("time (UTC), per minute")
    ax.set_ylabel("messages/s in")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, ncol=2)
    return fig


def load_over_time(per_minute: pa.Table, output: Path) -> Path:
    return _save(load_figure(per_minute), output / "router_load.png")


def latency_figure(hottest: pa.Table) -> Figure:
    """Transit latency distribution of the hottest addresses, from their merged histograms,
    over the buckets that hold samples (and one either side)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 4.5))
    rows = hottest.select(["address", "latency_hist"]).slice(0, TOP_ADDRESSES).to_pylist()
    rows = [r for r in rows if sum(r["latency_hist"] or [])]
    ax.set_title(f"Latency of the {TOP_ADDRESSES} hottest addresses")
    if not rows:
        _nothing(ax, "no latency samples")
        return fig
    used = [i for r in rows for i, count in enumerate(r["latency_hist"]) if count]
    first, last = max(min(used) - 1, 0), min(max(used) + 1, len(EDGES) - 2)
    for row in rows:
        hist = row["latency_hist"]
        total = sum(hist)
        shares = [(hist[i] if i < len(hist) else 0) / total for i in range(first, last + 1)]
        ax.stairs(shares, EDGES[first : last + 2], label=row["address"])
    ax.set_xscale("log")
    ax.set_xlim(EDGES[first], EDGES[last + 1])
    # Plain numbers (300, 1,000, 20,000), those between powers of ten too on a short axis:
    # the samples often all lie between two of them.
    plain = FuncFormatter(lambda value, _: f"{value:,.0f}")
    ax.xaxis.set_major_formatter(plain)
    ax.xaxis.set_minor_formatter(plain if EDGES[last + 1] / EDGES[first] < 30 else NullFormatter())
    ax.set_ylim(bottom=0)
    ax.set_xlabel("network transit latency (µs)")
    ax.set_ylabel("share of samples")
    ax.legend(fontsize=7)
    return fig


def latency(hottest: pa.Table, output: Path) -> Path:
    return _save(latency_figure(hottest), output / "latency.png")
