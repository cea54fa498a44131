"""The flow table's windows and the sampling arithmetic, without a router or a clock."""

from __future__ import annotations

import itertools
from typing import Any

from router.telemetry.flows import Flows, window_bounds
from router.telemetry.noderecords import NodeRecords
from router.telemetry.sampling import Sampler
from router.telemetry.schema import (
    LATENCY_BOUNDS_US,
    TELEMETRY_ADDRESS,
    columns,
    decode_batch,
    encode_batch,
)


def rows(records: list[tuple[Any, ...]] | None) -> list[dict[str, Any]]:
    assert records is not None
    return decode_batch(encode_batch("flow", records))[1]


def test_windows_are_aligned_so_every_router_reports_the_same_intervals() -> None:
    assert window_bounds(1234.5, 10) == (1230, 1240)
    flows = Flows("R1", "r1-x", 10, now=1234.5)
    assert (flows.start, flows.end) == (1234.5, 1240)
    assert flows.tick(1239.99) is None
    assert flows.tick(1240.01) == []  # nothing happened: no rows, but the window moved on
    assert (flows.start, flows.end) == (1240, 1250)


def test_a_window_reports_what_happened_in_it_and_nothing_twice() -> None:
    flows = Flows("B", "b-1", 10, now=100.0)
    row = flows.row("orders", "0/A", True)
    row.deliveries += 3
    row.bytes += 300
    row.accepted += 2
    row.released += 1
    row.observe(150.0)
    (first,) = rows(flows.tick(110.0))
    assert first["router"] == "B" and first["window_start"] == 100_000
    assert first["window_end"] == 110_000
    assert (first["address"], first["ingress_router"], first["egress_router"]) == (
        "orders",
        "A",
        "B",
    )
    assert (first["deliveries"], first["bytes"], first["accepted"], first["released"]) == (
        3,
        300,
        2,
        1,
    )
    assert first["latency_samples"] == 1 and first["latency_max_us"] == 150.0
    assert sum(first["latency_hist"]) == 1
    bucket = first["latency_hist"].index(1)
    assert LATENCY_BOUNDS_US[bucket - 1] < 150.0 <= LATENCY_BOUNDS_US[bucket]
    row.deliveries += 1
    row.presettled += 1
    (second,) = rows(flows.tick(120.0))
    assert (second["deliveries"], second["accepted"], second["presettled"]) == (1, 0, 1)
    assert second["latency_samples"] == 0 and second["latency_max_us"] is None
    assert sum(second["latency_hist"]) == 0
    assert second["record_id"] != first["record_id"]


def test_undeliverable_rows_have_no_egress() -> None:
    flows = Flows("A", "a-1", 10, now=0.0)
    flows.row("nobody", "0/A", False).dropped += 5
    (row,) = rows(flows.tick(10.0))
    assert row["egress_router"] is None and row["dropped"] == 5 and row["deliveries"] == 0


def test_idle_rows_leave_the_table_once_their_address_is_forgotten() -> None:
    flows = Flows("A", "a-1", 10, now=0.0)
    cache: dict[str, Any] = {}
    row = cache["0/A"] = flows.row("temp.1", "0/A", True)
    row.owner, row.key = cache, "0/A"
    row.deliveries += 1
    assert len(rows(flows.tick(10.0))) == 1
    assert rows(flows.tick(20.0)) == [] and flows.rows  # the address is still known
    cache.clear()  # the router forgot the address: the row goes once its outcome is in
    assert rows(flows.tick(30.0)) == [] and flows.rows
    row.accepted += 1
    assert rows(flows.tick(40.0))[0]["accepted"] == 1
    assert rows(flows.tick(50.0)) == []
    assert not flows.rows and not flows.last
    loose = flows.row("gone", "0/A", False)
    loose.dropped += 1
    assert len(rows(flows.tick(60.0))) == 1
    assert rows(flows.tick(70.0)) == [] and not flows.rows


def test_flush_ends_the_window_early() -> None:
    flows = Flows("A", "a-1", 10, now=0.0)
    flows.row("x", "0/A", True).deliveries += 2
    (row,) = rows(flows.flush(4.5))
    assert (row["window_start"], row["window_end"], row["deliveries"]) == (0, 4500, 2)
    assert rows(flows.tick(10.0)) == []


def test_a_stalled_loop_reports_the_time_it_covered() -> None:
    flows = Flows("A", "a-1", 10, now=0.0)
    flows.row("x", "0/A", True).deliveries += 1
    (row,) = rows(flows.tick(35.0))
    assert (row["window_start"], row["window_end"]) == (0, 35_000)
    assert (flows.start, flows.end) == (35.0, 40.0)


def test_records_have_the_schema_columns() -> None:
    flows = Flows("A", "a-1", 10, now=0.0)
    flows.row("x", "0/A", True).deliveries += 1
    (record,) = flows.tick(10.0) or []
    assert len(record) == len(columns("flow"))


def test_one_message_in_n_is_sampled() -> None:
    sampler = Sampler(100)
    picks = [i for i in range(1000) if sampler.due()]
    assert len(picks) == 10
    assert all(b - a == 100 for a, b in itertools.pairwise(picks))
    every = Sampler(1)
    assert all(every.due() for _ in range(5))
    never = Sampler(0)
    assert not any(never.due() for _ in range(500))


def test_records_about_records_are_not_reported() -> None:
    """Telemetry reaching the collector is traffic too; reported, every window would carry
    a row about the last one's records, and an idle network would never go quiet."""
    flows = Flows("R", "r-1", 10, now=1000.0)
    flows.row(TELEMETRY_ADDRESS, "R", True).deliveries += 3
    flows.row("orders", "R", True).deliveries += 2
    records = flows.flush(1005.0)
    assert [r[columns("flow").index("address")] for r in records] == ["orders"]


def test_a_hosted_nodes_legs_are_rows_of_their_own() -> None:
    """Host H: producers on A and on H put into `jobs`, consumers on C and on H take from it.
    Into and out of the node are separate rows, even when both ends are the host."""
    flows = Flows("H", "h-1", 10, now=0.0)
    flows.row("jobs", "0/A", True).deliveries += 7  # a routed address of the same name
    into = flows.node_row("jobs", "A", "H", "in")
    into.deliveries, into.bytes, into.accepted = 3, 300, 3
    local_in = flows.node_row("jobs", "H", "H", "in")
    local_in.deliveries, local_in.rejected = 2, 2
    out = flows.node_row("jobs", "H", "C", "out")
    out.deliveries, out.accepted = 2, 1  # one outcome still to come
    local_out = flows.node_row("jobs", "H", "H", "out")
    local_out.deliveries, local_out.presettled = 1, 1
    got = {
        (r["ingress_router"], r["egress_router"], r["node_leg"]): r for r in rows(flows.tick(10.0))
    }
    assert set(got) == {
        ("A", "H", None),
        ("A", "H", "in"),
        ("H", "H", "in"),
        ("H", "C", "out"),
        ("H", "H", "out"),
    }
    assert all(r["address"] == "jobs" and r["router"] == "H" for r in got.values())
    assert (got[("A", "H", "in")]["deliveries"], got[("A", "H", "in")]["bytes"]) == (3, 300)
    assert got[("H", "H", "in")]["rejected"] == 2
    assert (got[("H", "C", "out")]["deliveries"], got[("H", "C", "out")]["accepted"]) == (2, 1)
    assert got[("H", "H", "out")]["presettled"] == 1
    # Quiet rows go, but not one whose outcome is still to come; that one is counted later.
    assert rows(flows.tick(20.0)) == []
    assert list(flows.node_rows) == [("jobs", "H", "C", "out")]
    out.released += 1
    (late,) = rows(flows.tick(30.0))
    assert (late["node_leg"], late["deliveries"], late["released"]) == ("out", 0, 1)
    assert rows(flows.tick(40.0)) == [] and not flows.node_rows


def test_node_records_count_each_window_and_a_node_made_again_from_zero() -> None:
    records = NodeRecords("H", "h-1")
    queue = {"depth": 5, "bytes": 500, "paged": 0, "enqueued": 8, "dequeued": 3}
    queue |= {"deadLettered": 0, "expired": 0}
    (first,) = node_rows(records.rows([("jobs", "queue", queue)], 0.0, 10.0))
    assert (first["node"], first["node_type"], first["router"]) == ("jobs", "queue", "H")
    assert (first["window_start"], first["window_end"]) == (0, 10_000)
    assert (first["depth"], first["bytes"], first["enqueued"], first["dequeued"]) == (5, 500, 8, 3)
    later = {**queue, "depth": 1, "paged": 1, "dequeued": 7, "expired": 1}
    (second,) = node_rows(records.rows([("jobs", "queue", later)], 10.0, 20.0))
    assert (second["depth"], second["paged"], second["enqueued"]) == (1, 1, 0)
    assert (second["dequeued"], second["expired"]) == (4, 1)
    assert second["record_id"] != first["record_id"]
    again = {**queue, "enqueued": 2, "dequeued": 0}  # deleted, made again: its totals restart
    (third,) = node_rows(records.rows([("jobs", "queue", again)], 20.0, 30.0))
    assert (third["enqueued"], third["dequeued"]) == (2, 0)
    assert records.rows([], 30.0, 40.0) == [] and not records.last


def node_rows(records: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    return decode_batch(encode_batch("node", records))[1]
