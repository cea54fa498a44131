"""What the collector serves of its flow records (collector/window.py, collector/http.py): totals
by path that add up across collectors and survive the trip as JSON, the reader of a window's
files, and the HTTP answers, a real server on loopback over a dataset the collector's own
writer made."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from collector.arrow import record_batch
from collector.http import FlowsServer
from collector.partitions import split
from collector.store import write_partition
from collector.window import Flow, FlowReader, Totals, WindowError, parse_window
from router.telemetry.schema import FLOW_COUNTS, LATENCY_BUCKETS

NOW_MS = 1_800_000_000_000
DELIVERIES = FLOW_COUNTS.index("deliveries")


def write(dataset: Path, start_ms: int, deliveries: int, address: str = "orders") -> None:
    """One flow record, A to B, written as the collector writes its files."""
    row = {
        "record_id": f"r{start_ms}-{address}",
        "schema_version": 2,
        "router": "A",
        "window_start": start_ms,
        "window_end": start_ms + 10_000,
        "address": address,
        "ingress_router": "A",
        "egress_router": "B",
        "deliveries": deliveries,
        "bytes": 0,
        "accepted": deliveries,
        "released": 0,
        "rejected": 0,
        "modified": 0,
        "presettled": 0,
        "dropped": 0,
        "latency_samples": deliveries,
        "latency_sum_us": 0.0,
        "latency_max_us": None,
        "latency_hist": [deliveries] + [0] * (LATENCY_BUCKETS - 1),
        "node_leg": None,
    }
    for partition, part in split("flow", record_batch("flow", [row])).items():
        write_partition(dataset, partition, [part])


def flow(address: str, ingress: str, egress: str | None, deliveries: int) -> Flow:
    counts = tuple(deliveries if name == "deliveries" else 0 for name in FLOW_COUNTS)
    return Flow(0, 10_000, address, ingress, egress, None, counts, (deliveries, 0, 1))


def test_the_reader_takes_the_files_of_the_window_and_only_new_ones_again(tmp_path: Path) -> None:
    write(tmp_path, NOW_MS - 30_000, 5)
    write(tmp_path, NOW_MS - 20 * 60_000, 7)  # outside a 5-minute window
    reader = FlowReader(tmp_path)
    got = reader.read(NOW_MS - 5 * 60_000, NOW_MS)
    assert [f.counts[DELIVERIES] for f in got] == [5]
    write(tmp_path, NOW_MS - 10_000, 9)
    got = reader.read(NOW_MS - 5 * 60_000, NOW_MS)
    assert sorted(f.counts[DELIVERIES] for f in got) == [5, 9]
    assert reader.totals(NOW_MS - 5 * 60_000, NOW_MS).records == 2


def test_totals_add_up_by_path_fold_reply_addresses_and_merge() -> None:
    a = Totals().add(
        [
            flow("orders", "A", "B", 5),
            flow("orders", "A", "B", 7),
            flow("_topo/0/A/temp.xyz", "B", "A", 1),
            flow("_edge/E/temp.abc", "B", "A", 2),
            flow("lost", "A", None, 3),
        ]
    )
    assert a.records == 5
    assert a.paths[("orders", "A", "B", None)][0][DELIVERIES] == 12
    assert a.paths[("orders", "A", "B", None)][1][:3] == [12, 0, 2]
    assert a.paths[("(dynamic reply addresses)", "B", "A", None)][0][DELIVERIES] == 3
    b = Totals().add([flow("news", "C", "D", 4), flow("orders", "A", "B", 1)])
    a.merge(b)
    assert a.records == 7
    assert a.paths[("orders", "A", "B", None)][0][DELIVERIES] == 13
    assert a.paths[("news", "C", "D", None)][0][DELIVERIES] == 4


def test_totals_go_through_json_unchanged() -> None:
    totals = Totals().add([flow("orders", "A", "B", 5), flow("lost", "A", None, 3)])
    back = Totals.from_json(json.loads(json.dumps(totals.to_json())))
    assert back == totals


def test_counts_are_taken_by_name_from_another_version() -> None:
    data = Totals().add([flow("orders", "A", "B", 5)]).to_json()
    data["counts"] = ["future", *data["counts"]]
    data["paths"][0]["counts"] = [99, *data["paths"][0]["counts"]]
    assert Totals.from_json(data).paths[("orders", "A", "B", None)][0][DELIVERIES] == 5


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ([], "not a JSON object"),
        ({"records": 1}, "no 'counts' and 'paths' lists"),
        ({"records": "x", "counts": [], "paths": []}, "'records' is not a number"),
        ({"records": 1, "counts": [], "paths": [{"address": "a"}]}, "a malformed path"),
        (
            {
                "records": 1,
                "counts": [],
                "paths": [
                    {"address": 1, "ingress": "A", "egress": None, "nodeLeg": None, "counts": []}
                    | {"hist": []}
                ],
            },
            "not text",
        ),
    ],
)
def test_what_is_not_totals_is_refused_saying_why(data: Any, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        Totals.from_json(data)


@pytest.mark.parametrize(
    ("start", "end", "error"),
    [
        (None, "10", "whole numbers"),
        ("a", "10", "whole numbers"),
        ("10", "10", r"from \(10\) must be before to \(10\)"),
        ("-5", "10", "must be before"),
        ("0", str(25 * 3_600_000), "at most 1440 minutes"),
    ],
)
def test_a_bad_window_is_one_line_why(start: str | None, end: str, error: str) -> None:
    with pytest.raises(WindowError, match=error):
        parse_window(start, end, 24 * 3_600_000)
    assert parse_window("1", "2", 10) == (1, 2)


def get(url: str, method: str = "GET") -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)


def test_the_server_answers_a_windows_totals_and_refuses_bad_requests(tmp_path: Path) -> None:
    write(tmp_path, NOW_MS - 30_000, 5)
    write(tmp_path, NOW_MS - 20_000, 6, address="news")
    server = FlowsServer(("127.0.0.1", 0), tmp_path)
    server.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        status, body = get(f"{base}/flows?from={NOW_MS - 60_000}&to={NOW_MS}")
        assert status == 200
        assert (body["from"], body["to"], body["records"]) == (NOW_MS - 60_000, NOW_MS, 2)
        totals = Totals.from_json(body)
        assert totals.paths[("orders", "A", "B", None)][0][DELIVERIES] == 5
        assert totals.paths[("news", "A", "B", None)][0][DELIVERIES] == 6
        status, body = get(f"{base}/flows?from={NOW_MS - 15_000}&to={NOW_MS}")
        assert body["records"] == 1  # the first record's window ended before
        assert get(f"{base}/flows?from=x&to=1") == (
            400,
            {"error": "from and to must be whole numbers of ms since the epoch"},
        )
        assert get(f"{base}/healthz") == (200, {"status": "ok"})
        assert get(f"{base}/other")[0] == 404
        assert get(f"{base}/flows?from=1&to=2", method="DELETE") == (
            405,
            {"error": "read-only: GET and HEAD only"},
        )
    finally:
        server.stop()
