"""report.html: the summary, the top of each table and the plots in one self-contained file
(PNGs embedded as base64), to mail or open anywhere."""

from __future__ import annotations

import base64
import html
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline import plots
from pipeline.dynamic_addresses import DYNAMIC_SHOWN, fold_dynamic
from router.telemetry.schema import histogram_quantile

if TYPE_CHECKING:
    import pyarrow as pa

    from pipeline.analyze import Result

ROWS = 15
EMPTY = "\N{EN DASH}"  # a cell with no value (no samples, no traffic)
ADDRESS_COLUMNS = (
    "address",
    "deliveries",
    "undeliverable",
    "bytes",
    "released",
    "released_rate",
    "undeliverable_rate",
    "imbalance",
    "latency_p50_us",
    "latency_p95_us",
    "latency_p99_us",
    "latency_samples",
    "latency_hist",
)
ADDRESS_SUMS = (
    "deliveries",
    "undeliverable",
    "bytes",
    "released",
    "latency_samples",
    "latency_hist",
)
PERCENTILES = ((0.5, "latency_p50_us"), (0.95, "latency_p95_us"), (0.99, "latency_p99_us"))


def write_report(result: Result, output: Path) -> list[Path]:
    """plots/*.png and report.html under `output`; the paths written."""
    directory = output / "plots"
    directory.mkdir(parents=True, exist_ok=True)
    t = result.tables
    hottest = hottest_addresses(t["address_stats"])
    images = [
        plots.heat_map(t["paths"], directory),
        plots.load_over_time(t["load_per_minute"], directory),
        plots.latency(hottest, directory),
    ]
    report = output / "report.html"
    report.write_text(render(result, images, hottest))
    return [*images, report]


def hottest_addresses(stats: pa.Table) -> pa.Table:
    """address_stats as a reader wants it, busiest first: dynamic reply addresses folded into
    one row, whose rates and latency percentiles come from its summed counts and histogram
    (and with no imbalance: that compares the consumers of one address)."""
    import pyarrow as pa

    table = stats.select(list(ADDRESS_COLUMNS))
    rows = fold_dynamic(table.to_pylist(), per=(), sums=ADDRESS_SUMS)
    for row in rows:
        if row["address"] != DYNAMIC_SHOWN:
            continue
        total = row["deliveries"] + row["undeliverable"]
        row["undeliverable_rate"] = row["undeliverable"] / total if total else None
        row["released_rate"] = row["released"] / total if total else None
        row["imbalance"] = None
        for q, column in PERCENTILES:
            row[column] = histogram_quantile(row["latency_hist"], q)
    rows.sort(key=lambda r: (-r["deliveries"], r["address"]))
    return pa.Table.from_pylist(rows, schema=table.schema)


def shown_range(asked: dict[str, str | None], data: dict[str, str | None]) -> str:
    """The range as --from/--to set it, the data's first window start and last window end
    for a side they left open."""
    start, end = asked["from"] or data["from"], asked["to"] or data["to"]
    text = f"{_when(start)} .. {_when(end)}"
    if not asked["from"] and not asked["to"]:
        return f"{text} (all the data)"
    return text


def _when(iso: str | None) -> str:
    if iso is None:
        return EMPTY
    return datetime.fromisoformat(iso).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _fmt(value: Any) -> str:
    if value is None:
        return EMPTY
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return html.escape(str(value))


def _with_rate(count: int, rate: float | None) -> str:
    return EMPTY if rate is None else f"{_fmt(count)} ({rate:.2%})"


def _table(table: pa.Table, columns: list[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{_fmt(row[c])}</td>" for c in columns) + "</tr>"
        for row in table.select(columns).slice(0, ROWS).to_pylist()
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def render(result: Result, images: list[Path], hottest: pa.Table) -> str:
    s, t = result.summary, result.tables
    rate = s["undeliverable_rate"]
    released = s["released_rate"]
    facts = [
        ("range", shown_range(s["range"], s["data_range"])),
        ("flow records", _fmt(s["flow_records"])),
        ("deliveries", _fmt(s["deliveries"])),
        ("undeliverable", _with_rate(s["undeliverable"], rate)),
        ("released", _with_rate(s["released"], released)),
        ("addresses", _fmt(s["addresses"])),
        ("read from", ", ".join(f"{k} {v}" for k, v in s.get("sources", {}).items())),
    ]
    pngs = "".join(
        f'<figure><img alt="{p.stem}" src="data:image/png;base64,'
        f'{base64.b64encode(p.read_bytes()).decode()}"></figure>'
        for p in images
    )
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Routernet traffic report</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}img{{max-width:100%}}</style>
</head><body><h1>Routernet traffic report</h1>
<table>{"".join(f"<tr><th>{k}</th><td>{html.escape(v)}</td></tr>" for k, v in facts)}</table>
{pngs}
<h2>Hottest addresses</h2>
{
        _table(
            hottest,
            [
                "address",
                "deliveries",
                "bytes",
                "released_rate",
                "undeliverable_rate",
                "imbalance",
                "latency_p50_us",
                "latency_p95_us",
                "latency_p99_us",
            ],
        )
    }
<h2>Hottest paths</h2>
{
        _table(
            t["paths"],
            [
                "ingress_router",
                "egress_router",
                "deliveries",
                "bytes",
                "latency_p50_us",
                "latency_p95_us",
            ],
        )
    }
<h2>Router load (messages/s)</h2>
{
        _table(
            t["router_load"],
            [
                "router",
                "mode",
                "minutes",
                "in_p50_per_s",
                "in_p95_per_s",
                "in_max_per_s",
                "out_p50_per_s",
                "out_p95_per_s",
                "out_max_per_s",
            ],
        )
    }
{_nodes(t)}
</body></html>
"""


def _nodes(t: dict[str, pa.Table]) -> str:
    """The hosted queues and topics, if the range has any."""
    nodes = t.get("node_stats")
    if nodes is None or not nodes.num_rows:
        return ""
    columns = ["node", "router", "node_type", "enqueued", "dequeued", "dead_lettered", "expired"]
    columns += ["depth", "depth_max", "paged"]
    return f"<h2>Hosted queues and topics</h2>\n{_table(nodes, columns)}"
