"""The report and plots a user reads, from small handmade Arrow tables (no Spark): the range
the data covers when no --from/--to narrowed it, dynamic reply addresses folded in the hottest
addresses, empty cells as a dash, the latency axis fitted to the samples, per-minute load
drawn a minute wide, and a plot with nothing to show saying so."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from pipeline import plots
from pipeline.analyze import Result
from pipeline.dynamic_addresses import DYNAMIC_SHOWN
from pipeline.report import EMPTY, hottest_addresses, shown_range, write_report
from router.telemetry.schema import LATENCY_BUCKETS, histogram_quantile, latency_bucket

MINUTE = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)
HIST = pa.list_(pa.int64())


@pytest.fixture(autouse=True)
def no_warnings() -> Iterator[None]:
    """matplotlib's warnings (an empty legend among them) fail the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def _hist(*latencies_us: float) -> list[int]:
    hist = [0] * LATENCY_BUCKETS
    for us in latencies_us:
        hist[latency_bucket(us)] += 1
    return hist


def _address(name: str, deliveries: int, hist: list[int], **values: Any) -> dict[str, Any]:
    samples = sum(hist)
    row = {
        "address": name,
        "deliveries": deliveries,
        "undeliverable": 0,
        "bytes": 100 * deliveries,
        "released": 0,
        "released_rate": 0.0,
        "undeliverable_rate": 0.0,
        "imbalance": 1.0,
        "latency_samples": samples,
        "latency_hist": hist,
    }
    for q, column in ((0.5, "latency_p50_us"), (0.95, "latency_p95_us"), (0.99, "latency_p99_us")):
        row[column] = histogram_quantile(hist, q)
    row.update(values)
    return row


def _stats(rows: list[dict[str, Any]]) -> pa.Table:
    floats = ("released_rate", "undeliverable_rate", "imbalance")
    schema = pa.schema(
        [
            ("address", pa.string()),
            *[(c, pa.int64()) for c in ("deliveries", "undeliverable", "bytes", "released")],
            *[(c, pa.float64()) for c in floats],
            ("latency_samples", pa.int64()),
            ("latency_hist", HIST),
            *[(f"latency_p{p}_us", pa.float64()) for p in (50, 95, 99)],
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


STATS = _stats(
    [
        _address("orders", 50, _hist(300, 400, 500)),
        _address("_topo/0/hub-0/temp.a1", 30, _hist(20_000), undeliverable=10, released=10),
        _address("_edge/edge-1/temp.b2", 30, _hist(40_000, 40_000)),
        _address("_topo/0/hub-0/not-temp", 1, [0] * LATENCY_BUCKETS, imbalance=None),
    ]
)


def test_hottest_addresses_fold_dynamic_reply_addresses() -> None:
    rows = hottest_addresses(STATS).to_pylist()
    assert [r["address"] for r in rows] == [DYNAMIC_SHOWN, "orders", "_topo/0/hub-0/not-temp"]
    folded = rows[0]
    assert (folded["deliveries"], folded["undeliverable"], folded["released"]) == (60, 10, 10)
    assert folded["latency_samples"] == 3
    assert folded["latency_hist"] == _hist(20_000, 40_000, 40_000)
    merged = _hist(20_000, 40_000, 40_000)
    assert folded["latency_p50_us"] == histogram_quantile(merged, 0.5)
    assert folded["latency_p99_us"] == histogram_quantile(merged, 0.99)
    assert folded["undeliverable_rate"] == pytest.approx(10 / 70)
    assert folded["released_rate"] == pytest.approx(10 / 70)
    assert folded["imbalance"] is None  # one address's consumers: not for a group of them
    assert rows[1] == STATS.to_pylist()[0]  # a named address as it was


def _result(stats: pa.Table, asked: dict[str, str | None]) -> Result:
    per_minute = pa.Table.from_pylist(
        [{"router": "hub-0", "minute": MINUTE, "in_per_s": 3.0}],
        schema=pa.schema(
            [("router", pa.string()), ("minute", pa.timestamp("us", "UTC")), ("in_per_s", "f8")]
        ),
    )
    paths = pa.Table.from_pylist(
        [{"ingress_router": "hub-0", "egress_router": "edge-1", "deliveries": 5, "bytes": 1}]
    )
    for column in ("latency_p50_us", "latency_p95_us"):
        paths = paths.append_column(column, pa.array([None], pa.float64()))
    rates = {f"{d}_{s}_per_s": 3.0 for d in ("in", "out") for s in ("p50", "p95", "max")}
    router_load = pa.Table.from_pylist(
        [{"router": "hub-0", "mode": "interior", "minutes": 1, **rates}]
    )
    summary = {
        "range": asked,
        "data_range": {"from": "2026-01-05T10:00:00+00:00", "to": "2026-01-05T10:01:00+00:00"},
        "flow_records": 4,
        "deliveries": 110,
        "undeliverable": 10,
        "undeliverable_rate": None,
        "released": 10,
        "released_rate": None,
        "addresses": stats.num_rows,
    }
    return Result(
        tables={
            "address_stats": stats,
            "paths": paths,
            "load_per_minute": per_minute,
            "router_load": router_load,
        },
        summary=summary,
    )


def test_the_report_shows_the_datas_range_and_folded_addresses(tmp_path: Path) -> None:
    result = _result(STATS, {"from": None, "to": None})
    *images, report = write_report(result, tmp_path)
    html = report.read_text()
    assert "2026-01-05 10:00:00 UTC .. 2026-01-05 10:01:00 UTC (all the data)" in html
    assert "start .. end" not in html
    hottest = html.split("<h2>Hottest addresses</h2>")[1].split("<h2>")[0]
    assert hottest.count(DYNAMIC_SHOWN) == 1
    assert "temp." not in hottest
    assert "None" not in html
    assert f"<td>{EMPTY}</td>" in hottest  # the folded row's imbalance
    assert [p.name for p in images] == ["traffic_matrix.png", "router_load.png", "latency.png"]


def test_the_range_is_what_was_asked_and_the_data_for_an_open_side() -> None:
    data = {"from": "2026-01-05T10:00:05+00:00", "to": "2026-01-05T12:00:10+00:00"}
    asked = {"from": "2026-01-05T11:00:00+00:00", "to": None}
    assert shown_range(asked, data) == "2026-01-05 11:00:00 UTC .. 2026-01-05 12:00:10 UTC"
    assert shown_range({"from": None, "to": None}, {"from": None, "to": None}) == (
        f"{EMPTY} .. {EMPTY} (all the data)"
    )


def test_the_latency_axis_fits_the_samples() -> None:
    fig = plots.latency_figure(hottest_addresses(_stats([_address("q", 3, _hist(300, 500))])))
    [ax] = fig.axes
    low, high = ax.get_xlim()
    assert 200 < low <= 300 and 500 <= high < 700, (low, high)
    assert ax.get_xscale() == "log"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["q"]


def test_no_latency_samples_says_so() -> None:
    quiet = _stats([_address("q", 3, [0] * LATENCY_BUCKETS)])
    fig = plots.latency_figure(hottest_addresses(quiet))
    [ax] = fig.axes
    assert [t.get_text() for t in ax.texts] == ["no latency samples"]
    assert not ax.lines and not ax.patches and ax.get_legend() is None
    assert not ax.axison


def test_load_is_drawn_a_minute_wide_per_minute() -> None:
    rows = [
        {"router": "hub-0", "minute": MINUTE, "in_per_s": 3.0},
        {"router": "hub-0", "minute": MINUTE + timedelta(minutes=1), "in_per_s": 5.0},
        {"router": "hub-0", "minute": MINUTE + timedelta(minutes=4), "in_per_s": 1.0},
    ]
    fig = plots.load_figure(pa.Table.from_pylist(rows))
    [ax] = fig.axes
    assert ax.get_xlabel()
    [line] = ax.lines
    from matplotlib.dates import num2date

    drawn = [(num2date(x), y) for x, y in line.get_xydata()]
    # Each minute's rate holds from its start to the next minute's; nothing is drawn between
    # 10:02 and 10:04, where there was no record.
    for start, rate in ((0, 3.0), (1, 5.0), (4, 1.0)):
        assert (MINUTE + timedelta(minutes=start), rate) in drawn
        assert (MINUTE + timedelta(minutes=start + 1), rate) in drawn
    gap = [x for x, y in drawn if y != y]  # NaN breaks the line
    assert gap == [MINUTE + timedelta(minutes=2)]
    low, high = ax.get_xlim()
    assert num2date(low) >= MINUTE - timedelta(minutes=1)
    assert num2date(high) <= MINUTE + timedelta(minutes=6)


def test_a_heat_map_with_no_deliveries_says_so() -> None:
    empty = pa.Table.from_pylist(
        [],
        schema=pa.schema(
            [("ingress_router", "str"), ("egress_router", "str"), ("deliveries", "i8")]
        ),
    )
    [ax] = plots.heat_map_figure(empty).axes
    assert [t.get_text() for t in ax.texts] == ["no deliveries"]


def test_the_datas_range_is_read_off_the_files(tmp_path: Path) -> None:
    """The first window start and last window end over both kinds, whether or not the writer
    kept Parquet statistics (the last hour's file here has none)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from pipeline.dataset import TimeRange, check_dataset, data_span
    from pipeline.synthetic import Spec, generate

    generate(tmp_path, Spec(flow_rows=300, hours=3, addresses=10, hubs=1, edges=2))
    for kind in ("flow", "router"):
        last = sorted((tmp_path / kind).glob("date=*/hour=*"))[-1]
        for f in last.glob("*.parquet"):
            pq.write_table(pq.read_table(f), f, write_statistics=False)
    files = sorted(tmp_path.glob("*/date=*/hour=*/*.parquet"))
    tables = [pq.read_table(f, columns=["window_start", "window_end"]) for f in files]
    expected = {
        "from": min(pc.min(t["window_start"]).as_py() for t in tables).isoformat(),
        "to": max(pc.max(t["window_end"]).as_py() for t in tables).isoformat(),
    }
    assert data_span(check_dataset(tmp_path, TimeRange())) == expected
