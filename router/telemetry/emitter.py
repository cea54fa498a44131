"""Sends each finished window's records as AMQP messages, routed like any message.

Thin on purpose: the window arithmetic is `flows.Flows` and `noderecords.NodeRecords`, the
readings `readings`. Every window this router sends its flow rows, one `router` row and a `node`
row per queue or topic it hosts to `schema.TELEMETRY_ADDRESS`, pre-settled,
through its own forwarder, so a collector attached to any router of the network receives every
router's records. With nobody consuming that address (or a collector so far behind that its
queue here is full) the records are dropped and counted (`records_dropped`), never queued
without bound.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from proton import Message as ProtonMessage

from router import tokens
from router.config.records import Telemetry
from router.datapath.sections import EMPTY_ANNOTATIONS, scan
from router.datapath.stats import memory_usage
from router.log import get_logger
from router.telemetry import readings
from router.telemetry.flows import Flows
from router.telemetry.noderecords import NodeRecords
from router.telemetry.sampling import Sampler
from router.telemetry.schema import (
    SCHEMA_VERSION,
    TELEMETRY_ADDRESS,
    TELEMETRY_SUBJECT,
    Kind,
    encode_batch,
)

if TYPE_CHECKING:
    from router.core.engine import Router

log = get_logger("router.telemetry")

# Rows per message: a router with a huge flow table sends several messages per window.
ROWS_PER_MESSAGE = 1000
# Messages a local collector may have waiting here before more are dropped.
MAX_QUEUED = 100


class Emitter:
    def __init__(self, router: Router, config: Telemetry, now: float) -> None:
        self.router = router
        # Record ids: this router, this boot, a sequence; a resend after a reconnect reuses one.
        prefix = f"{router.id}-{tokens.token_hex(4)}"
        self.flows = Flows(router.id, prefix, config.windowSeconds, now)
        self.nodes = NodeRecords(router.id, prefix)
        self.sampler = Sampler(config.sampleEvery)
        self.record_prefix = prefix
        self.sequence = 0
        self.records_sent = 0
        self.records_dropped = 0
        self._last = self._totals()

    def tick(self, now: float) -> None:
        """From housekeeping, with wall-clock time: send the window that just ended, if any."""
        flows = self.flows
        start = flows.start
        records = flows.tick(now)
        if records is not None:
            self.send_window(records, start, flows.start)  # where the next window starts

    def flush(self) -> None:
        """The last window, cut short: a draining router sends it before it goes."""
        now = time.time()
        start = self.flows.start
        self.send_window(self.flows.flush(now), start, now)

    def send_window(self, flow_rows: list[tuple[Any, ...]], start: float, end: float) -> None:
        self.send("flow", flow_rows)
        self.send("router", [self.router_row(start, end)])
        hosted = list(self.router.nodes.nodes.values())
        self.send(
            "node", self.nodes.rows(((n.name, n.kind, n.counters()) for n in hosted), start, end)
        )

    def _totals(self) -> tuple[int, int, int, int, float]:
        fwd = self.router.fwd
        return (
            fwd.received,
            fwd.sent,
            self.router.stats.deliveriesTransit,
            self.records_dropped,
            readings.cpu_seconds(),
        )

    def router_row(self, start: float, end: float) -> tuple[Any, ...]:
        router = self.router
        totals = self._totals()
        last = self._last
        received, sent, transit, dropped, cpu = (a - b for a, b in zip(totals, last, strict=True))
        self._last = totals
        all_links = readings.links(router)
        self.sequence += 1
        return (
            f"{self.record_prefix}-r{self.sequence}",
            SCHEMA_VERSION,
            router.id,
            int(start * 1000),
            int(end * 1000),
            router.config.router.mode,
            int(received),
            int(sent),
            int(transit),
            len(router.conns),
            len(all_links),
            readings.unsettled(all_links),
            readings.credit_blocked(all_links),
            int(dropped),
            float(cpu),
            memory_usage(),
        )

    def send(self, kind: Kind, rows: list[tuple[Any, ...]]) -> None:
        for i in range(0, len(rows), ROWS_PER_MESSAGE):
            self.send_message(kind, rows[i : i + ROWS_PER_MESSAGE])

    def send_message(self, kind: Kind, rows: list[tuple[Any, ...]]) -> None:
        fwd = self.router.fwd
        entry = fwd.entry(TELEMETRY_ADDRESS)
        backed_up = bool(entry.consumers) and all(
            len(c.queue) >= MAX_QUEUED for c in entry.consumers
        )
        if not fwd.reachable(entry) or backed_up:
            self.records_dropped += len(rows)
            fwd.forget_if_idle(entry)
            return
        body = encode_batch(kind, rows)
        body["rows"] = [list(row) for row in rows]  # AMQP lists (Proton has no tuple type)
        message = ProtonMessage(address=TELEMETRY_ADDRESS, subject=TELEMETRY_SUBJECT, body=body)
        data = message.encode()
        from router.datapath.forwarder import Message

        msg = Message(data, scan(data), EMPTY_ANNOTATIONS, EMPTY_ANNOTATIONS, TELEMETRY_ADDRESS)
        msg.entry = entry
        fwd.route(msg, entry, None, None)
        fwd.forget_if_idle(entry)
        self.records_sent += len(rows)
        log.debug("telemetry.sent", kind=kind, records=len(rows))
