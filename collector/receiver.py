"""The AMQP side of the collector: one receiver on the telemetry address of one router, kept
attached for ever, each message's rows buffered and written (buffer.py, store.py).

Why it settles as it does:

- Routers send telemetry pre-settled (schema.py): there is no acknowledgment on the wire, so
  those records are as durable as the flushes make them: one at least every ``max_seconds``,
  and one on SIGTERM/SIGINT before the collector exits. A crash (SIGKILL, a lost node) loses what
  was buffered, at most ``max_seconds`` of records.
- Unsettled messages (a sender that wants to know) are accepted only after the flush that wrote
  their rows has fsynced the files; until then they are unsettled at the sender, which resends
  them if the collector goes away first. So a record acknowledged is a record on disk.
- A message the collector cannot take (wrong subject, a body decode_batch refuses, a value of
  the wrong type) is rejected with ``amqp:decode-error`` and the reason, logged in one line
  (``collector.refused``) and counted; the collector goes on. Pre-settled ones cannot be rejected
  on the wire: the log line and the count are what is left.
- Duplicates: a resend after a reconnect repeats record ids. The last ``dedup_ids`` ids are
  remembered and repeats dropped; beyond that the pipeline drops them by ``record_id``.
- The router going away (closed connection, refused link, transport error) is retried with the
  router's own backoff (router/transport/connector.py: 0.1 s doubling to 10 s, ±20% jitter), reset
  once a link stayed attached for 5 s. Buffered rows are kept across reconnects and written as
  usual; deliveries of a connection that is gone are not settled (their sender resends them).
- Stopping: credit is drained first (the router answers once it has sent what the credit
  allowed), so no message is in flight when the last flush runs; then the flush, the
  settlements, and the connection closed cleanly so they reach the router before the exit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from proton import Condition, Delivery, Endpoint, Event
from proton.handlers import MessagingHandler
from proton.reactor import Container

from collector.arrow import record_batch
from collector.buffer import Buffer, RecentIds
from collector.partitions import split
from collector.settings import Settings
from collector.store import write_flush
from router.log import get_logger
from router.telemetry.schema import (
    TELEMETRY_SUBJECT,
    TELEMETRY_SUBJECTS,
    SchemaError,
    decode_batch,
)
from router.transport.connector import STABLE_SECONDS, backoff_delay

log = get_logger("collector")

TICK_SECONDS = 0.1
DRAIN_TIMEOUT = 2.0
CLOSE_TIMEOUT = 2.0
DECODE_ERROR = "amqp:decode-error"


@dataclass
class Counters:
    messages: int = 0
    rows: int = 0
    duplicates: int = 0
    refused: int = 0
    files: int = 0
    flushes: int = 0
    connections: int = 0

    def fields(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class _Token:
    """An unsettled delivery, and the connection it came on (settled only on that one)."""

    generation: int
    delivery: Delivery


class _Call:
    """A timer callback for Container.schedule."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def on_timer_task(self, event: Event) -> None:
        self.fn()


@dataclass
class _Connection:
    generation: int
    conn: Any
    link: Any
    attached_at: float | None = None


class Collector(MessagingHandler):  # type: ignore[misc]
    """Run it with ``run()``; ``request_stop()`` (from a signal handler) makes it flush and
    exit. ``exit_code`` is 0 after a clean stop, 1 when a write failed."""

    def __init__(self, settings: Settings, clock: Any = time.monotonic) -> None:
        super().__init__(prefetch=0, auto_accept=False)
        self.settings = settings
        self.clock = clock
        self.buffer: Buffer[_Token | None] = Buffer(settings.max_rows, settings.max_seconds)
        self.ids = RecentIds(settings.dedup_ids)
        self.counters = Counters()
        self.exit_code = 0
        self._container: Any = None
        self._current: _Connection | None = None
        self._generation = 0
        self._failures = 0
        self._stop_requested = False
        self._phase = "running"  # running -> draining -> closing
        self._phase_deadline = 0.0

    # --- lifecycle ------------------------------------------------------------------------------

    def run(self) -> int:
        container = Container(self)
        container.container_id = self.settings.container_id
        container.run()
        return self.exit_code

    def request_stop(self) -> None:
        """Safe in a signal handler: only sets a flag, which the next tick acts on."""
        self._stop_requested = True

    def on_start(self, event: Event) -> None:
        self._container = event.container
        self.settings.dataset.mkdir(parents=True, exist_ok=True)
        log.info(
            "collector.started",
            url=self.settings.url,
            address=self.settings.address,
            dataset=str(self.settings.dataset),
            max_rows=self.settings.max_rows,
            max_seconds=self.settings.max_seconds,
        )
        self._connect()
        self._schedule(TICK_SECONDS, self._tick)

    def _schedule(self, delay: float, fn: Any) -> None:
        self._container.schedule(delay, _Call(fn))

    def _tick(self) -> None:
        now = self.clock()
        if self._phase == "running":
            if self._stop_requested:
                self._begin_stop()
            elif self.buffer.due(now):
                self._flush()
        elif now >= self._phase_deadline:
            if self._phase == "draining":
                log.warning("collector.drain_timeout", seconds=DRAIN_TIMEOUT)
                self._finish()
            else:
                self._container.stop()
                return
        if self._phase != "stopped":
            self._schedule(TICK_SECONDS, self._tick)

    # --- connecting -----------------------------------------------------------------------------

    def _connect(self) -> None:
        self._generation += 1
        conn = self._container.connect(self.settings.url, reconnect=False)
        link = self._container.create_receiver(
            conn, self.settings.address, name=f"{self.settings.container_id}-telemetry"
        )
        self._current = _Connection(self._generation, conn, link)
        self.counters.connections += 1

    def _lost(self, reason: str) -> None:
        current = self._current
        if current is None:
            return
        self._current = None
        if current.conn.state & Endpoint.LOCAL_ACTIVE:
            current.conn.close()
        if self._phase != "running":
            log.info("collector.disconnected", reason=reason, stopping=True)
            if self._phase == "draining":
                self._finish()
            else:
                self._container.stop()
            return
        stable = current.attached_at is not None and (
            self.clock() - current.attached_at >= STABLE_SECONDS
        )
        self._failures = 1 if stable else self._failures + 1
        delay = backoff_delay(self._failures)
        log.warning(
            "collector.disconnected",
            reason=reason,
            retry_seconds=round(delay, 3),
            buffered_rows=self.buffer.rows,
        )
        self._schedule(delay, self._reconnect)

    def _reconnect(self) -> None:
        if self._phase == "running" and self._current is None and not self._stop_requested:
            self._connect()

    def _ours(self, event: Event) -> bool:
        current = self._current
        return current is not None and event.connection == current.conn

    def on_link_opened(self, event: Event) -> None:
        current = self._current
        if current is None or event.link != current.link:
            return
        current.attached_at = self.clock()
        log.info("collector.attached", url=self.settings.url, address=self.settings.address)
        event.link.flow(self.settings.credit)

    def on_link_closing(self, event: Event) -> None:
        if self._ours(event):
            self._lost("link detached by the router")

    def on_link_error(self, event: Event) -> None:
        if self._ours(event):
            cond = event.link.remote_condition
            why = f"{cond.name}: {cond.description}" if cond else "link closed by the router"
            self._lost(f"link detached: {why}")

    def on_connection_closing(self, event: Event) -> None:
        if self._ours(event):
            self._lost("connection closed by the router")

    def on_connection_error(self, event: Event) -> None:
        if self._ours(event):
            cond = event.connection.remote_condition
            self._lost(f"connection closed: {cond.name}: {cond.description}")

    def on_connection_closed(self, event: Event) -> None:
        if self._phase == "closing" and event.connection == self._closing:
            self._container.stop()
        elif self._ours(event):
            self._lost("connection closed by the router")

    def on_transport_error(self, event: Event) -> None:
        cond = event.transport.condition
        if self._ours(event):
            self._lost(f"{cond.name}: {cond.description}" if cond else "transport error")

    def on_disconnected(self, event: Event) -> None:
        if self._ours(event):
            cond = event.transport.condition if event.transport else None
            self._lost(f"{cond.name}: {cond.description}" if cond else "connection lost")
        elif self._phase == "closing" and event.connection == self._closing:
            self._container.stop()

    # --- receiving ------------------------------------------------------------------------------

    def on_message(self, event: Event) -> None:
        delivery = event.delivery
        current = self._current
        presettled = bool(delivery.settled)
        token = None if presettled or current is None else _Token(current.generation, delivery)
        if presettled:
            delivery.settle()  # frees it; there is no outcome to send
        self.counters.messages += 1
        message = event.message
        try:
            if message.subject not in TELEMETRY_SUBJECTS:  # this version's or an older one
                raise SchemaError(
                    f"subject {str(message.subject)[:60]!r} is not {TELEMETRY_SUBJECT!r}"
                )
            kind, rows = decode_batch(message.body)
            batch = record_batch(kind, rows)
        except SchemaError as err:
            self._refuse(delivery, presettled, str(err))
            return
        fresh = self.ids.fresh(batch.column("record_id").to_pylist())
        if not all(fresh):
            self.counters.duplicates += fresh.count(False)
            batch = batch.filter(pa.array(fresh))
        self.counters.rows += batch.num_rows
        self.buffer.add(split(kind, batch), token, self.clock())
        if current is not None and self._phase == "running":
            link = event.link
            if link.credit <= self.settings.credit // 2:
                link.flow(self.settings.credit - link.credit)
        if self.buffer.rows >= self.buffer.max_rows:
            self._flush()

    def _refuse(self, delivery: Delivery, presettled: bool, reason: str) -> None:
        self.counters.refused += 1
        log.warning(
            "collector.refused",
            reason=reason,
            presettled=presettled,
            refused=self.counters.refused,
        )
        if not presettled:
            delivery.local.condition = Condition(DECODE_ERROR, reason)
            delivery.update(Delivery.REJECTED)
            delivery.settle()

    def _flush(self) -> None:
        flush = self.buffer.take()
        started = time.perf_counter()
        try:
            files = write_flush(self.settings.dataset, flush)
        except OSError as err:
            # Crash-only: what is unsettled goes back to its senders when the connection closes.
            log.error("collector.write_failed", error=str(err), rows=flush.rows)
            self.exit_code = 1
            self._phase = "stopped"
            self._container.stop()
            return
        current = self._current
        settled = 0
        for token in flush.tokens:
            if token is None or current is None or token.generation != current.generation:
                continue
            token.delivery.update(Delivery.ACCEPTED)
            token.delivery.settle()
            settled += 1
        self.counters.flushes += 1
        self.counters.files += len(files)
        if files or settled:
            log.info(
                "collector.flushed",
                files=len(files),
                rows=flush.rows,
                messages=len(flush.tokens),
                settled=settled,
                ms=round((time.perf_counter() - started) * 1000, 1),
            )

    # --- stopping -------------------------------------------------------------------------------

    _closing: Any = None

    def _begin_stop(self) -> None:
        current = self._current
        log.info("collector.stopping", buffered_rows=self.buffer.rows)
        if current is None or current.attached_at is None:
            self._finish()
            return
        self._phase = "draining"
        self._phase_deadline = self.clock() + DRAIN_TIMEOUT
        if current.link.credit == 0:
            self._finish()
        else:
            current.link.drain(0)

    def on_link_flow(self, event: Event) -> None:
        current = self._current
        ours = current is not None and event.link == current.link
        if self._phase == "draining" and ours and event.link.credit == 0:
            self._finish()

    def _finish(self) -> None:
        """The last flush, then a clean close (its settlements go out before the close)."""
        self._flush()
        if self._phase == "stopped":
            return
        log.info("collector.stopped", **self.counters.fields())
        current, self._current = self._current, None
        self._phase = "closing"
        self._phase_deadline = self.clock() + CLOSE_TIMEOUT
        if current is not None and current.conn.state & Endpoint.LOCAL_ACTIVE:
            self._closing = current.conn
            current.link.close()
            current.conn.close()
        else:
            self._container.stop()
