"""The telemetry records routers send, the collector stores and the pipeline reads: defined once.

Three kinds of record, each one row of a table:

* `flow`: per window, per (address, ingress router, egress router), what the egress router
  handed to consumers (deliveries, bytes, outcomes) and the network transit latency of a sample
  of them. Ingress is the first router the message entered (`x-opt-qd.ingress`), egress the
  router that delivered it to a consuming client, so each delivery to a consumer counts once,
  where it leaves the network. Messages that reached no consumer (dropped, released for want of
  one) are counted by their ingress router in a row whose `egress_router` is null.
  A hosted queue or topic (router/nodes/) ends one trip and starts another, so its host counts
  both, `node_leg` telling them apart: `in` from the producer's router to the host (outcome:
  the node's answer), `out` from the host to the consumer's router (outcome: the consumer's).
  Without it a producer and a consumer both on the host would share one row.
* `router`: per window, per router, its own load and resources.
* `node`: per window, per queue or topic a router hosts, its depth and what went in and out.

Latency is a histogram over fixed log-scale buckets (`LATENCY_BOUNDS_US`), not percentiles,
because histograms merge: the pipeline sums them over any time range and set of routers and
reads percentiles off the sum, which percentiles computed per window would not allow.

Records travel as AMQP messages to `TELEMETRY_ADDRESS`, pre-settled, one message per router
per window holding that window's records as lists in `columns(kind)` order (a map per row would
repeat every key). Everything here is plain Python so that a router needs no Arrow or Spark; the
collector and the pipeline turn `FIELDS` into their own schemas.

Version history: 1 — first version; 2 — `flow.node_leg` and the `node` kind. A reader refuses
records of a newer version than it knows and takes older ones, the fields they lack null
(`Field.since`: a field added later is nullable, so an old record is a valid row).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

SCHEMA_VERSION = 2

# Reserved: Address resources may not declare prefixes under `_routernet` (Dispatch reserves the
# leading underscore for router-internal addresses the same way), so no user address collides.
TELEMETRY_ADDRESS = "_routernet/telemetry"
# The message's subject says what its body is, so a reader can check before it decodes.
TELEMETRY_SUBJECT = f"routernet.telemetry.v{SCHEMA_VERSION}"
# What a reader takes: this version's subject and the older ones (routers not upgraded yet).
TELEMETRY_SUBJECTS = frozenset(f"routernet.telemetry.v{v}" for v in range(1, SCHEMA_VERSION + 1))
# Router annotation holding the ingress router's clock (ns since the epoch) on sampled
# messages; stripped toward clients like Dispatch's own x-opt-qd.* annotations.
SAMPLE_ANNOTATION = "x-opt-routernet.ingress-ns"
# Router annotation naming the edge router a message entered the network at: the interior it
# comes up to becomes its x-opt-qd.ingress (as in Dispatch), yet flow records count it from
# the edge. Stripped toward clients likewise.
ORIGIN_ANNOTATION = "x-opt-routernet.origin"

Kind = Literal["flow", "router", "node"]
Type = Literal["string", "int64", "float64", "timestamp_ms", "int64_list"]


@dataclass(frozen=True)
class Field:
    name: str
    type: Type
    nullable: bool = False
    doc: str = ""
    since: int = 1  # the schema version that added it


_COMMON = (
    Field("record_id", "string", doc="unique per record: duplicates after a reconnect share it"),
    Field("schema_version", "int64"),
    Field("router", "string", doc="the router that sent the record"),
    Field("window_start", "timestamp_ms", doc="UTC, inclusive"),
    Field("window_end", "timestamp_ms", doc="UTC, exclusive"),
)

FIELDS: dict[Kind, tuple[Field, ...]] = {
    "flow": (
        *_COMMON,
        Field("address", "string"),
        Field("ingress_router", "string"),
        Field("egress_router", "string", nullable=True, doc="null: reached no consumer"),
        Field("deliveries", "int64", doc="handed to consumers (or, egress null, undeliverable)"),
        Field("bytes", "int64", doc="encoded message bytes of those deliveries"),
        Field("accepted", "int64"),
        Field("released", "int64"),
        Field("rejected", "int64"),
        Field("modified", "int64"),
        Field("presettled", "int64", doc="delivered pre-settled: no outcome to count"),
        Field("dropped", "int64", doc="egress null: dropped for want of a consumer"),
        Field("latency_samples", "int64"),
        Field("latency_sum_us", "float64", doc="sum of the sampled transit latencies"),
        Field("latency_max_us", "float64", nullable=True),
        Field("latency_hist", "int64_list", doc="counts per LATENCY_BOUNDS_US bucket"),
        Field(
            "node_leg",
            "string",
            nullable=True,
            since=2,
            doc="`address` is a hosted node's: in (ingress -> host), out (host -> egress)",
        ),
    ),
    "router": (
        *_COMMON,
        Field("mode", "string", doc="interior, edge or standalone"),
        Field("deliveries_in", "int64", doc="received from clients and other routers"),
        Field("deliveries_out", "int64", doc="sent to clients and other routers"),
        Field("deliveries_transit", "int64", doc="received from a router, sent to a router"),
        Field("connections", "int64"),
        Field("links", "int64"),
        Field("unsettled", "int64"),
        Field("credit_blocked_senders", "int64", doc="incoming links waiting for credit"),
        Field("records_dropped", "int64", doc="telemetry dropped for want of a collector"),
        Field("cpu_seconds", "float64", doc="process CPU used in the window"),
        Field("rss_bytes", "int64"),
    ),
    # `router` is the node's host; the counts are the window's, depth and paged at its end.
    "node": (
        *_COMMON,
        Field("node", "string", doc="the queue's or topic's name (its address)"),
        Field("node_type", "string", doc="queue or topic"),
        Field("depth", "int64", doc="messages held at the window's end"),
        Field("bytes", "int64", doc="bytes of those messages"),
        Field("paged", "int64", doc="of those, messages paged out to disk"),
        Field("enqueued", "int64", doc="messages put in during the window"),
        Field("dequeued", "int64", doc="messages consumed (accepted) during the window"),
        Field("dead_lettered", "int64", doc="sent to the dead letter address"),
        Field("expired", "int64"),
    ),
}
# The version each kind came with: an older record cannot be of a newer kind.
KIND_SINCE: dict[Kind, int] = {"flow": 1, "router": 1, "node": 2}
# The node fields that add up (a window's difference of the host's counters).
NODE_COUNTS = ("enqueued", "dequeued", "dead_lettered", "expired")


# The flow fields that add up: a router reports each window's difference of them, the pipeline
# sums them over any range and set of routers.
FLOW_COUNTS = (
    "deliveries",
    "bytes",
    "accepted",
    "released",
    "rejected",
    "modified",
    "presettled",
    "dropped",
    "latency_samples",
)


def columns(kind: Kind, version: int = SCHEMA_VERSION) -> tuple[str, ...]:
    """The kind's columns in records of `version`."""
    return tuple(f.name for f in FIELDS[kind] if f.since <= version)


# Latency buckets: upper bounds in microseconds, four per doubling from 10 µs to ~42 s, then
# one open bucket. Relative error of a percentile read off the histogram is under 19%.
LATENCY_BOUNDS_US: tuple[float, ...] = tuple(10.0 * 2 ** (i / 4) for i in range(89))
LATENCY_BUCKETS = len(LATENCY_BOUNDS_US) + 1


def latency_bucket(us: float) -> int:
    """The bucket of a latency: the first whose upper bound is at least `us`."""
    if us <= LATENCY_BOUNDS_US[0]:
        return 0
    index = math.ceil(4 * math.log2(us / 10.0))
    return min(index, LATENCY_BUCKETS - 1)


def histogram_quantile(hist: list[int], q: float) -> float | None:
    """The `q` quantile (0..1) of a latency histogram, as the upper bound of its bucket (the
    open last bucket reads as its lower bound); None for an empty histogram."""
    total = sum(hist)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for index, count in enumerate(hist):
        seen += count
        if seen >= rank and count:
            return LATENCY_BOUNDS_US[min(index, len(LATENCY_BOUNDS_US) - 1)]
    return LATENCY_BOUNDS_US[-1]


class SchemaError(ValueError):
    """A telemetry message this reader cannot take; the text says why in one line."""


def encode_batch(kind: Kind, rows: list[tuple[Any, ...]]) -> dict[str, Any]:
    """A message body: the kind, the version, the columns and the rows."""
    return {"kind": kind, "version": SCHEMA_VERSION, "columns": list(columns(kind)), "rows": rows}


def decode_batch(body: Any) -> tuple[Kind, list[dict[str, Any]]]:
    """Rows of a message body as dicts; SchemaError for anything else."""
    if not isinstance(body, dict):
        raise SchemaError(f"telemetry body is a {type(body).__name__}, not a map")
    kind = body.get("kind")
    if kind not in FIELDS:
        raise SchemaError(f"unknown telemetry kind {str(kind)[:40]!r}")
    version = body.get("version")
    if not isinstance(version, int) or version > SCHEMA_VERSION or version < 1:
        raise SchemaError(f"telemetry schema version {str(version)[:20]} is not supported")
    if version < KIND_SINCE[kind]:
        raise SchemaError(f"telemetry kind {kind} did not exist in version {version}")
    names = list(columns(kind, version))
    if body.get("columns") != names:
        raise SchemaError(f"telemetry {kind} columns do not match version {version}")
    rows = body.get("rows")
    if not isinstance(rows, list):
        raise SchemaError("telemetry rows are not a list")
    missing = {f.name: None for f in FIELDS[kind] if f.since > version}
    out = []
    for row in rows:
        if not isinstance(row, list | tuple) or len(row) != len(names):
            raise SchemaError(f"a telemetry {kind} row does not have {len(names)} values")
        out.append({**dict(zip(names, row, strict=True)), **missing})
    return kind, out
