"""Telemetry rows for tests, made from the schema's FIELDS (never a field list of our own)."""

from __future__ import annotations

import uuid
from typing import Any

from router.telemetry.schema import FIELDS, LATENCY_BUCKETS, SCHEMA_VERSION, Kind, columns

HOUR_MS = 3_600_000
# 2026-11-22T07:00:00Z
BASE_MS = 1_795_330_800_000


def value(kind: Kind, name: str, type_: str, index: int, start_ms: int) -> Any:
    if name == "record_id":
        return str(uuid.uuid4())
    if name == "schema_version":
        return SCHEMA_VERSION
    if name == "window_start":
        return start_ms
    if name == "window_end":
        return start_ms + 10_000
    if type_ == "string":
        return f"{name}-{index}"
    if type_ == "int64":
        return index
    if type_ == "float64":
        return index * 1.5
    if type_ == "timestamp_ms":
        return start_ms
    if type_ == "int64_list":
        return [index % 3] * LATENCY_BUCKETS
    raise AssertionError(type_)


def make_rows(kind: Kind, count: int, start_ms: int = BASE_MS, first: int = 0) -> list[tuple]:
    """``count`` rows as tuples in ``columns(kind)`` order, each with a fresh record_id."""
    return [
        tuple(value(kind, f.name, f.type, first + i, start_ms) for f in FIELDS[kind])
        for i in range(count)
    ]


def record_id(kind: Kind, row: tuple) -> str:
    return row[columns(kind).index("record_id")]
