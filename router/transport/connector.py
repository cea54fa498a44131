"""Outgoing connections: Dispatch's ``connector`` entity, dialled and re-dialled for ever.

A `Connector` keeps one connection to ``host:port`` up. Every attempt resolves the host again
(on Kubernetes a peer's pod, and with it its address or even its DNS name, comes and goes),
in a short-lived daemon thread so that a slow DNS server never stalls the router's loop (nor,
being a daemon, the process's exit): the result comes back through a socket the loop watches.
The socket connect itself is non-blocking; the `Connection` is built at once and registered
with the engine like an accepted one, and Proton's output (protocol header, SASL, Open) goes
out when the socket becomes writable.

After a failure the next attempt waits `backoff_delay`: 0.1 s doubling to a 10 s cap, with
±20% jitter so that routers restarted together do not dial in lockstep. The schedule starts
over once a connection has stayed up for `STABLE_SECONDS`; a peer that accepts and drops at
once keeps being retried at the capped pace rather than hammered.

Logs: state changes once (``connector.connected``, ``connector.failed``,
``connector.disconnected``), each further failing attempt only at debug.
"""

from __future__ import annotations

import errno
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from router.config.records import Connector as ConnectorConfig
from router.config.views import read_secret
from router.log import get_logger
from router.transport.connection import Connection
from router.transport.pn import lib, text
from router.transport.wakeup import Wakeup

if TYPE_CHECKING:
    from router.core.engine import Router

log = get_logger("router.connector")

INITIAL_DELAY = 0.1
MAX_DELAY = 10.0
JITTER = 0.2
# A connection that lived this long resets the backoff schedule.
STABLE_SECONDS = 5.0

# Management's connectionStatus, as Dispatch reports it.
CONNECTING = "CONNECTING"
SUCCESS = "SUCCESS"
FAILED = "FAILED"

# (family, sockaddr) pairs, as socket.connect takes them.
Addresses = Sequence[tuple[int, Any]]
Resolver = Callable[[str, int], Addresses]


def backoff_delay(
    failures: int,
    rand: Callable[[], float] = random.random,
    initial: float = INITIAL_DELAY,
    cap: float = MAX_DELAY,
    jitter: float = JITTER,
) -> float:
    """Seconds to wait after the ``failures``-th failure in a row (1 for the first).

    ``initial * 2**(failures-1)``, capped, then moved by up to ±``jitter`` of itself (``rand``
    gives [0, 1) like random.random), and never beyond the cap."""
    base = min(cap, initial * 2 ** min(max(failures, 1) - 1, 64))
    return min(cap, base * (1.0 + jitter * (2.0 * rand() - 1.0)))


def resolve(host: str, port: int) -> Addresses:
    """The addresses to try for host:port, in the resolver's order (runs in a worker)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [(family, sockaddr) for family, _type, _proto, _name, sockaddr in infos]


def _sockaddr_text(sockaddr: Any) -> str:
    host, port = sockaddr[0], sockaddr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Connector:
    """One configured connector: its schedule, its current attempt or connection, its status.

    Phases: ``waiting`` (until ``next_try``), ``resolving`` (a worker runs the resolver),
    ``connecting`` (a Connection exists, the peer's Open has not arrived), ``open``, and
    ``stopped`` once the router shuts down.
    """

    def __init__(self, config: ConnectorConfig, manager: Connectors) -> None:
        self.config = config
        self.manager = manager
        self.phase = "waiting"
        self.status = CONNECTING
        self.message = ""
        self.next_try = 0.0
        self.failures = 0
        self.attempts = 0
        self.addr_index = 0
        self.future: Future[Addresses] | None = None
        self.conn: Connection | None = None
        self.peer: str | None = None
        self.opened_at = 0.0
        self.last_error: str | None = None

    @property
    def name(self) -> str:
        return self.config.name

    def _fields(self) -> dict[str, object]:
        return {"name": self.name, "host": self.config.address, "role": self.config.role}

    # ----- driven by the manager ------------------------------------------------------------

    def poll(self, now: float) -> None:
        if self.phase == "waiting" and now >= self.next_try:
            self.attempts += 1
            self.phase = "resolving"
            log.debug("connector.attempt", **self._fields(), attempt=self.attempts)
            self.future = self.manager.resolve_later(self.config.host, self.config.port)
        elif self.phase == "resolving" and self.future is not None and self.future.done():
            future, self.future = self.future, None
            try:
                addresses = future.result()
            except Exception as e:  # gaierror, or whatever an injected resolver raises
                reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
                self.failed(now, f"cannot resolve {self.config.host!r}: {reason}")
                return
            if not addresses:
                self.failed(now, f"cannot resolve {self.config.host!r}: no addresses")
                return
            self.dial(addresses[self.addr_index % len(addresses)], now)

    def dial(self, address: tuple[int, Any], now: float) -> None:
        family, sockaddr = address
        self.peer = _sockaddr_text(sockaddr)
        cfg = self.config
        credentials = None
        try:
            if cfg.saslUsername is not None and cfg.saslPassword is not None:
                credentials = (
                    read_secret(cfg.saslUsername, "saslUsername"),
                    read_secret(cfg.saslPassword, "saslPassword"),
                )
        except ValueError as e:
            self.failed(now, str(e))
            return
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError as e:
            self.failed(now, f"cannot create a socket: {e.strerror or e}")
            return
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            err = sock.connect_ex(sockaddr)
        except OSError as e:
            err = e.errno or errno.EINVAL
        if err not in (0, errno.EINPROGRESS, errno.EAGAIN, errno.EWOULDBLOCK):
            sock.close()
            self.failed(now, f"{os.strerror(err)} ({self.peer})", next_address=True)
            return
        router = self.manager.router
        conn = Connection(
            sock,
            cfg,
            next(router.conn_ids),
            router.id,
            now,
            connector=self,
            credentials=credentials,
        )
        self.conn = conn
        self.phase = "connecting"
        router.register(conn)
        log.debug("connector.dialling", **self._fields(), peer=self.peer, conn=conn.conn_id)

    # ----- called by the Connection and the engine ------------------------------------------

    def opened(self, conn: Connection) -> None:
        """The peer's Open arrived on our connection."""
        if conn is not self.conn:
            return
        self.phase = "open"
        self.status = SUCCESS
        self.opened_at = time.monotonic()
        self.last_error = None
        sasl = lib.pn_sasl(conn.transport)
        user = text(lib.pn_transport_get_user(conn.transport))
        self.message = (
            f"Connection Opened: dir=out host={conn.host}"
            f" encrypted={'yes' if lib.pn_transport_is_encrypted(conn.transport) else 'no'}"
            f" auth={text(lib.pn_sasl_get_mech(sasl)) or 'none'} user={user or 'anonymous'}"
            f" container_id={conn.remote_container}"
        )
        log.info(
            "connector.connected",
            **self._fields(),
            peer=self.peer,
            conn=conn.conn_id,
            container=conn.remote_container,
            cost=conn.cost,
            attempts=self.attempts,
        )
        self.attempts = 0

    def closed(self, conn: Connection) -> None:
        """The engine is tearing ``conn`` down: schedule the next attempt."""
        if conn is not self.conn:
            return
        self.conn = None
        now = time.monotonic()
        was_open = self.phase == "open"
        if was_open and now - self.opened_at >= STABLE_SECONDS:
            self.failures = 0
        if self.manager.stopped or self.phase == "stopped":
            self.phase = "stopped"  # the router is shutting down, or this connector was removed
            return
        reason = conn.failure()
        if not was_open and conn.error is not None and self.peer is not None:
            reason = f"{reason} ({self.peer})"
        self.failed(now, reason, was_open=was_open, next_address=not was_open)

    def failed(
        self, now: float, reason: str, was_open: bool = False, next_address: bool = False
    ) -> None:
        """An attempt failed or a connection ended: log it once, wait, try again."""
        self.failures += 1
        if next_address:
            self.addr_index += 1
        delay = backoff_delay(self.failures, self.manager.rand)
        self.next_try = now + delay
        self.phase = "waiting"
        fields = {**self._fields(), "error": reason, "retry_in": round(delay, 2)}
        if was_open:
            log.warning("connector.disconnected", **fields)
        elif self.status != FAILED or reason != self.last_error:
            log.warning("connector.failed", **fields, attempt=self.attempts)
        else:
            log.debug("connector.retry", **fields, attempt=self.attempts)
        self.status = FAILED
        self.message = reason
        self.last_error = reason

    def stop(self) -> None:
        self.phase = "stopped"
        if self.future is not None:
            self.future.cancel()
            self.future = None


class Connectors:
    """All of a router's connectors, their name resolution and the loop's wakeup for them.

    The engine calls `start` once its listeners are up, `poll` from housekeeping, `on_wakeup`
    when its wakeup (router/transport/wakeup.py) is poked by a name lookup, and `stop`
    when it shuts down. ``resolver`` and ``rand`` are replaceable for tests.
    """

    def __init__(
        self,
        router: Router,
        resolver: Resolver = resolve,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.router = router
        self.resolver = resolver
        self.rand = rand
        self.items = [Connector(cfg, self) for cfg in router.config.connectors]
        self.started = False
        self.stopped = False
        self._wakeup: Wakeup | None = None

    def start(self) -> None:
        self.started = True
        if not self.items:
            return
        self._open_wakeup()
        for connector in self.items:
            log.info("connector.started", **connector._fields(), cost=connector.config.cost)
        self.poll(time.monotonic())

    def _open_wakeup(self) -> None:
        if self._wakeup is None:
            self._wakeup = Wakeup(self.router.sel, self)

    def add(self, config: ConnectorConfig, index: int | None = None) -> Connector:
        """A connector added while running (a live configuration change): first attempt now."""
        connector = Connector(config, self)
        self.items.insert(len(self.items) if index is None else index, connector)
        if self.started and not self.stopped:
            self._open_wakeup()
            log.info("connector.started", **connector._fields(), cost=config.cost)
            connector.poll(time.monotonic())
        return connector

    def remove(self, connector: Connector) -> None:
        """A connector removed while running: no more attempts, its connection closed (its
        deliveries resolved as when the peer goes)."""
        self.items.remove(connector)
        connector.stop()
        conn = connector.conn
        log.info("connector.stopped", **connector._fields())
        if conn is not None:
            self.router.close_connection(conn)

    def resolve_later(self, host: str, port: int) -> Future[Addresses]:
        """Runs the resolver in a thread of its own; a connector has at most one running."""
        future: Future[Addresses] = Future()

        def work() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(self.resolver(host, port))
            except BaseException as e:  # handed to the loop, which reports it
                future.set_exception(e)
            wakeup = self._wakeup
            if wakeup is not None:
                wakeup.poke()

        threading.Thread(target=work, name=f"resolve {host}", daemon=True).start()
        return future

    def on_wakeup(self) -> None:
        if self._wakeup is not None:
            self._wakeup.drain()
        self.poll(time.monotonic())

    def poll(self, now: float) -> None:
        if self.stopped:
            return
        for connector in self.items:
            connector.poll(now)

    def busy(self) -> bool:
        """Whether a connector is between attempts or in one: its next step is due soon."""
        return not self.stopped and any(
            c.phase in ("waiting", "resolving", "connecting") for c in self.items
        )

    def stop(self) -> None:
        """No more attempts; connections already up are closed by the engine's shutdown."""
        if self.stopped:
            return
        self.stopped = True
        for connector in self.items:
            connector.stop()
        if self._wakeup is not None:
            self._wakeup.close()
            self._wakeup = None
