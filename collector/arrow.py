"""Arrow schemas derived from the telemetry schema (router/telemetry/schema.py), and rows turned
into record batches that match them.

Pure (no I/O). The field list is the schema module's alone: adding a field there adds a column
here. Converting one message's rows at a time is also where bad values are caught, so a message
with a string where a count belongs is refused on its own instead of failing a whole flush.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

import pyarrow as pa

from router.telemetry.schema import FIELDS, SCHEMA_VERSION, Field, Kind, SchemaError

ARROW_TYPES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "int64": pa.int64(),
    "float64": pa.float64(),
    # Record times are UTC milliseconds since the epoch on the wire.
    "timestamp_ms": pa.timestamp("ms", tz="UTC"),
    "int64_list": pa.list_(pa.int64()),
}
SCHEMA_VERSION_KEY = b"routernet.schema_version"


def arrow_field(field: Field) -> pa.Field:
    return pa.field(field.name, ARROW_TYPES[field.type], nullable=field.nullable)


@cache
def arrow_schema(kind: Kind) -> pa.Schema:
    """The Arrow schema of a kind's rows, in FIELDS order, tagged with the schema version."""
    return pa.schema(
        [arrow_field(f) for f in FIELDS[kind]],
        metadata={SCHEMA_VERSION_KEY: str(SCHEMA_VERSION).encode()},
    )


def record_batch(kind: Kind, rows: Sequence[dict[str, Any]]) -> pa.RecordBatch:
    """``rows`` (decode_batch's dicts) as one record batch of ``arrow_schema(kind)``;
    SchemaError naming the column when a value has the wrong type or a required one is null."""
    arrays = []
    for field in FIELDS[kind]:
        values = [row[field.name] for row in rows]
        try:
            array = pa.array(values, type=ARROW_TYPES[field.type])
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as err:
            first = str(err).splitlines()[0][:120] if str(err) else type(err).__name__
            raise SchemaError(f"telemetry {kind} column {field.name}: {first}") from None
        if not field.nullable and array.null_count:
            raise SchemaError(f"telemetry {kind} column {field.name} is null in a row")
        arrays.append(array)
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(kind))
