"""The telemetry record schema: latency histograms that merge, and batches a reader can trust."""

from __future__ import annotations

import pytest

from router.telemetry.schema import (
    FIELDS,
    FLOW_COUNTS,
    LATENCY_BOUNDS_US,
    LATENCY_BUCKETS,
    SCHEMA_VERSION,
    SchemaError,
    columns,
    decode_batch,
    encode_batch,
    histogram_quantile,
    latency_bucket,
)


@pytest.mark.parametrize("us", [0.0, 1.0, 10.0, 10.1, 99.9, 1234.5, 5e6, 4.1e7, 1e9])
def test_a_latency_falls_in_the_first_bucket_whose_bound_holds_it(us: float) -> None:
    index = latency_bucket(us)
    assert 0 <= index < LATENCY_BUCKETS
    if index < len(LATENCY_BOUNDS_US):
        assert us <= LATENCY_BOUNDS_US[index] * (1 + 1e-12)
    if 0 < index < len(LATENCY_BOUNDS_US):
        assert us > LATENCY_BOUNDS_US[index - 1]


def test_quantiles_read_off_merged_histograms() -> None:
    a = [0] * LATENCY_BUCKETS
    b = [0] * LATENCY_BUCKETS
    for us in [100.0] * 90:
        a[latency_bucket(us)] += 1
    for us in [10_000.0] * 10:
        b[latency_bucket(us)] += 1
    merged = [x + y for x, y in zip(a, b, strict=True)]
    p50, p99 = histogram_quantile(merged, 0.5), histogram_quantile(merged, 0.99)
    assert p50 is not None and 100 <= p50 < 100 * 1.19
    assert p99 is not None and 10_000 <= p99 < 10_000 * 1.19
    assert histogram_quantile([0] * LATENCY_BUCKETS, 0.5) is None


def test_a_batch_round_trips() -> None:
    row = tuple(range(len(columns("router"))))
    kind, rows = decode_batch(encode_batch("router", [row]))
    assert kind == "router" and rows == [dict(zip(columns("router"), row, strict=True))]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ([], "not a map"),
        ({"kind": "x"}, "unknown telemetry kind"),
        ({"kind": "flow", "version": SCHEMA_VERSION + 1}, "not supported"),
        ({"kind": "flow", "version": 1, "columns": ["a"]}, "columns do not match"),
        (
            {"kind": "flow", "version": SCHEMA_VERSION, "columns": list(columns("flow"))},
            "rows are not a list",
        ),
        (
            {
                "kind": "flow",
                "version": SCHEMA_VERSION,
                "columns": list(columns("flow")),
                "rows": [[1]],
            },
            "does not have",
        ),
        # A version 1 record has version 1's columns, not the later ones.
        ({"kind": "flow", "version": 1, "columns": list(columns("flow"))}, "columns do not match"),
        ({"kind": "node", "version": 1, "columns": list(columns("node", 1))}, "did not exist"),
    ],
)
def test_what_a_reader_cannot_take_is_refused_in_one_line(body: object, error: str) -> None:
    with pytest.raises(SchemaError, match=error):
        decode_batch(body)


def test_the_additive_counts_are_flow_integers_in_column_order() -> None:
    fields = {f.name: f for f in FIELDS["flow"]}
    assert all(fields[name].type == "int64" for name in FLOW_COUNTS)
    order = columns("flow")
    assert sorted(FLOW_COUNTS, key=order.index) == list(FLOW_COUNTS)


def test_an_older_record_reads_with_the_fields_it_lacks_null() -> None:
    """Routers not upgraded yet send version 1 flow records (no node_leg): still taken."""
    old = columns("flow", 1)
    assert "node_leg" in columns("flow") and "node_leg" not in old
    row = tuple(range(len(old)))
    body = {"kind": "flow", "version": 1, "columns": list(old), "rows": [list(row)]}
    kind, rows = decode_batch(body)
    assert kind == "flow"
    assert rows == [{**dict(zip(old, row, strict=True)), "node_leg": None}]


def test_fields_added_later_are_nullable() -> None:
    """Else an older record, which has none of them, would not be a valid row."""
    later = [f for fields in FIELDS.values() for f in fields if f.since > 1]
    assert later and all(f.nullable for f in later)
