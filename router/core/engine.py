"""The router process: one thread, one epoll loop, Proton's C engine per connection.

Each loop turn reads every ready socket into its transport, drains the Proton events that
produced, lets the forwarder move messages between links, tops up credit once, and only then
writes each touched connection's output. Batching per turn, not per event, is what keeps the cost
per message in single-digit microseconds (see ../shared/reference/python-proton-performance.md).
"""

from __future__ import annotations

import contextlib
import selectors
import signal
import socket
import time
import traceback
from itertools import count
from typing import TYPE_CHECKING, Any, Final, cast

from proton import Message as ProtonMessage

from router import __version__
from router.addressing import CONTAINER_KEY, AddressTable, parse
from router.config.records import RouterConfig
from router.containers.routing import Containers
from router.core import attach, drain
from router.core.interrouter import Network
from router.datapath import pnfast
from router.datapath.forwarder import (
    ACCEPTED,
    REJECTED,
    RELEASED,
    AddressEntry,
    Forwarder,
    Message,
    late_delivery,
    new_delivery,
)
from router.datapath.interest import Interest
from router.datapath.links import Forward, Link
from router.datapath.pnfast import NOT_CURRENT, SLOW, UNREADABLE
from router.datapath.sections import (
    EMPTY_ANNOTATIONS,
    MessageFormatError,
    entering_network,
    get_to,
    get_user_id,
    read_annotations,
    scan,
)
from router.datapath.stats import RouterStats
from router.datapath.streaming import STREAM_THRESHOLD, open_session, take_up_behind, trim_memory
from router.datapath.streaming import start as start_stream
from router.edges.dispatch import DispatchEdges
from router.edges.uplink import Edge
from router.gateway.peering import Gateways, crossing_gateway
from router.linkroutes.relay import LinkRouter
from router.linkroutes.table import link_route_table
from router.log import get_logger
from router.network import Timers
from router.nodes.hosting import Nodes
from router.policy.admission import Policy
from router.policy.gate import Gate
from router.telemetry.emitter import Emitter
from router.telemetry.sampling import Sampler
from router.transport import sasl
from router.transport.connection import Connection, IOBuffers
from router.transport.connector import Connectors
from router.transport.pn import ffi, get_condition, lib, set_condition, text

if TYPE_CHECKING:
    from router.management.agent import Agent
    from router.telemetry.http import HttpEndpoint

log = get_logger("router")

# Housekeeping's pace: every HOUSEKEEPING_SECONDS while anything happens or a short timer runs
# (a connector's next attempt, a mobile-address batch, a connection's handshake or close,
# deliveries held for a route), and every IDLE_HOUSEKEEPING_SECONDS at rest, the pace of
# Dispatch's core timer. Each wake of an idle router costs ~0.3 ms of CPU on a 2-vCPU machine:
# ten a second were most of what a router at rest spent, and qdrouterd wakes about once.
HOUSEKEEPING_SECONDS: Final = 0.1
IDLE_HOUSEKEEPING_SECONDS: Final = 1.0
SHUTDOWN_GRACE_SECONDS: Final = 3.0
CLOSED_LINGER_SECONDS: Final = 5.0
PN_DELIVERY: Final = int(lib.PN_DELIVERY)
# Final names of a compiled module live in C statics: no lookup by name per message.
next_event: Final = pnfast.next_event
settled: Final = pnfast.settled
take: Final = pnfast.take


def network_timers(config: RouterConfig) -> Timers:
    r = config.router
    return Timers(
        helloIntervalSeconds=r.helloIntervalSeconds,
        helloMaxAgeSeconds=r.helloMaxAgeSeconds,
        raIntervalSeconds=r.raIntervalSeconds,
        raIntervalFluxSeconds=r.raIntervalFluxSeconds,
        remoteLsMaxAgeSeconds=r.remoteLsMaxAgeSeconds,
    )


class Router:
    def __init__(self, config: RouterConfig) -> None:
        self.config = config
        self.id = config.router.id
        self.started = time.time()
        self.stats = RouterStats()
        self.fwd = Forwarder(
            self.id, AddressTable(config.address_rules()), self.stats, time.monotonic
        )
        self.network: Network | None = None
        if config.router.mode == "interior":
            instance = int(self.started * 1000)  # unique per boot, so peers see a restart
            self.network = Network(self, network_timers(config), instance, time.monotonic())
            self.fwd.network = self.network
        self.edge: Edge | None = None
        if config.router.mode == "edge":
            self.edge = self.fwd.edge = Edge(self)
        # The management agent and its tables, made on the first request: an idle router need
        # not hold them (0.4 MiB).
        self.agent: Agent | None = None
        self.fwd.local_handlers[parse("$management", self.id).key] = self.on_management
        self.linkrouter = LinkRouter(self, link_route_table(config))
        # Seed 001's global addressing: `(container)/node` from any router (router/containers/),
        # and gateway connections joining this network to others (router/gateway/).
        self.gateways = Gateways(self)
        self.containers = Containers(self)
        self.fwd.local_handlers[CONTAINER_KEY] = self.containers.on_message
        # What qdrouterd edges expect of an interior (router/edges/dispatch.py).
        self.dispatch_edges = DispatchEdges(self) if self.network is not None else None
        # Seed 002: queues and topics this network stores (router/nodes/).
        self.nodes = Nodes(self)
        self.containers.refresh()  # this router is a container too: advertised at once
        self.containers.tick()
        self.sel = selectors.DefaultSelector()
        self.bufs = IOBuffers()
        self.msgbuf = bytearray(64 * 1024)
        self.msgbuf_c = ffi.from_buffer(self.msgbuf)
        self.listeners: list[tuple[socket.socket, Any]] = []
        self.conns: dict[int, Connection] = {}
        self.links: dict[Any, Link] = {}
        # Links we detached before the peer answered (our attach, or our detach): Proton keeps
        # each until the peer's detach comes back (`answered_late`), or its answering attach
        # would make a new link here, or what it sent meanwhile would go unanswered (`detach`).
        self.unanswered: dict[Any, Connection] = {}
        # Answered ones, freed after this turn's output (but with a connection gone: with it).
        self.answered: list[tuple[Any, Connection]] = []
        self.dirty: set[Connection] = set()
        self.interest = Interest(self.sel)  # what each connection's socket is watched for
        self.conn_ids = count(1)
        self.link_ids = count(1)
        self.stopping = False  # shutting down: the drain is over
        self.stop_signals: list[str] = []  # SIGTERM/SIGINT received: one drains, two stop
        self.connectors = Connectors(self)  # outgoing connections (router/transport/connector.py)
        # Where new configurations come from while running (router/config/sources.py): each has
        # start(router), poll(now) from housekeeping, stop(), and may have a Wakeup
        # (router/transport/wakeup.py) whose pokes call source.on_wakeup() from the loop.
        self.config_sources: list[Any] = []
        self.handlers = {
            lib.PN_CONNECTION_REMOTE_OPEN: self.on_connection_open,
            lib.PN_CONNECTION_REMOTE_CLOSE: self.on_connection_close,
            lib.PN_SESSION_REMOTE_OPEN: self.on_session_open,
            lib.PN_SESSION_REMOTE_CLOSE: self.on_session_close,
            lib.PN_LINK_REMOTE_OPEN: self.on_link_open,
            lib.PN_LINK_REMOTE_CLOSE: self.on_link_close,
            lib.PN_LINK_REMOTE_DETACH: self.on_link_detach,
            lib.PN_LINK_FLOW: self.on_link_flow,
            lib.PN_TRANSPORT_ERROR: self.on_transport_error,
        }
        # Telemetry (router/telemetry/): flow records, and metrics and probes over HTTP.
        self.last_turn = time.monotonic()  # /healthz: the loop is alive while this moves
        self.telemetry: Emitter | None = None
        # The emitter's sampler, held here so the ingress path calls it compiled to compiled.
        self.sampler: Sampler | None = None
        if config.telemetry.enabled:
            self.telemetry = Emitter(self, config.telemetry, time.time())
            self.fwd.flows = self.telemetry.flows
            self.sampler = self.telemetry.sampler
        self.http: HttpEndpoint | None = None
        # Dispatch's policy (router/policy/): maxConnections always, vhosts when enabled.
        self.policy = Gate(
            Policy(config.policy, config.vhosts),
            refuse_link=lambda link, error, why: attach.refuse(self, link, error, why),
            detach=self.detach,
            refuse_message=self.refuse_message,
            close_connection=self.close_connection,
        )

    # ----- lifecycle -----------------------------------------------------------------------

    def open_listeners(self) -> None:
        for cfg in self.config.listeners:
            self.open_listener(cfg)

    def open_listener(self, cfg: Any) -> None:
        """Bind and watch one listener; raises OSError (address in use, say)."""
        host = cfg.host
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, cfg.port), family=family, backlog=512)
        sock.setblocking(False)
        self.sel.register(sock, selectors.EVENT_READ, ("listener", cfg))
        self.listeners.append((sock, cfg))
        port = sock.getsockname()[1]
        log.info("listener.started", host=host, port=port, role=cfg.role)

    def close_listener(self, sock: socket.socket) -> None:
        """Stop accepting on one listener; connections it accepted stay up."""
        for i, (lsock, cfg) in enumerate(self.listeners):
            if lsock is sock:
                del self.listeners[i]
                self.sel.unregister(sock)
                sock.close()
                log.info("listener.stopped", host=cfg.host, port=cfg.port, role=cfg.role)
                return

    def update_listener(self, sock: socket.socket, cfg: Any) -> None:
        """New settings for a listener on the same address: connections it accepts from now on
        get them; the socket stays bound."""
        for i, (lsock, _old) in enumerate(self.listeners):
            if lsock is sock:
                self.listeners[i] = (sock, cfg)
                self.sel.modify(sock, selectors.EVENT_READ, ("listener", cfg))
                return

    def reconfigure(self, new: RouterConfig, source: str = "api") -> list[str]:
        """Apply ``new`` in place (addresses, listeners, connectors); returns what changed.

        Refused, with the old configuration kept, when it changes something only a restart
        can (router id, mode, timers, SASL setup). See router/config/live.py."""
        from router.config.live import apply_config

        return apply_config(self, new, source)

    def run(self) -> int:
        offered = {m for cfg in self.config.listeners for m in cfg.saslMechanisms}
        problem = sasl.configure(self.config.router, offered)
        if problem is not None:
            log.error("sasl.unavailable", error=problem)
            return 1
        try:
            http = self.config.telemetry.http  # bound first: listening on AMQP means ready
            if http is not None:
                # Imported only here: prometheus-client and the HTTP, e-mail and ssl modules it
                # brings take 3.4 MiB, and a router without /metrics needs none of them.
                from router.telemetry.http import HttpEndpoint

                self.http = HttpEndpoint(self, http.host, http.port)
            self.open_listeners()
        except OSError as e:
            log.error("listener.failed", error=str(e))
            return 1
        if self.http is not None:
            self.http.start()
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        self.sel.register(wake_r, selectors.EVENT_READ, ("wakeup", None))
        old_fd = signal.set_wakeup_fd(wake_w.fileno())
        previous = {s: signal.signal(s, self.request_stop) for s in (signal.SIGTERM, signal.SIGINT)}
        log.info("router.started", id=self.id, version=__version__)
        trim_memory()  # what importing and setting up freed (~1 MiB) goes back to the system
        try:
            self.connectors.start()
            for config_source in self.config_sources:
                config_source.start(self)
            self.loop(lambda: not self.stop_signals)
            if self.telemetry is not None:
                # The window so far goes out while the network is whole: when every router
                # stops at once (`routernet down`, a deleted namespace), a flush after the drain
                # would find the routers between this one and the collector gone.
                self.telemetry.flush()
            drain.run(self)  # router/core/drain.py: no new links or credit, held deliveries settle
            if self.telemetry is not None:
                self.telemetry.flush()  # what the drain forwarded, with the connections' close
            self.stopping = True
            self.shutdown()
        finally:
            if self.http is not None:
                self.http.stop()
            signal.set_wakeup_fd(old_fd)
            for s, h in previous.items():
                signal.signal(s, h)
            for sock in (wake_r, wake_w):
                sock.close()
        log.info("router.stopped", id=self.id)
        return 0

    def request_stop(self, signum: int, _frame: Any) -> None:
        """The first SIGTERM/SIGINT starts a drain, a second ends it; the loop acts on them."""
        self.stop_signals.append(signal.Signals(signum).name)

    def shutdown(self) -> None:
        """Close cleanly: stop accepting, release every unsettled delivery, close connections."""
        for config_source in self.config_sources:
            config_source.stop()
        self.connectors.stop()
        for sock, _cfg in self.listeners:
            self.sel.unregister(sock)
            sock.close()
        self.listeners.clear()
        fwd = self.fwd
        for entry in list(fwd.holding):
            while entry.held:
                fwd.drop(entry.held.popleft().fwd)
        fwd.holding.clear()
        self.nodes.flush()
        for link in list(self.links.values()):
            if link.incoming:
                for f in list(link.unsettled.values()):
                    fwd.settle_incoming(f, RELEASED)
                # What arrives from now on is not forwarded: its outcome could not come back
                # before the connections close, so its sender would send it again elsewhere
                # after a consumer here had it (a duplicate). Unanswered, it is simply resent.
                del self.links[link.pn]
        for conn in self.conns.values():
            conn.closing = True
            lib.pn_connection_close(conn.pn)
            self.dirty.add(conn)
        deadline = time.monotonic() + SHUTDOWN_GRACE_SECONDS
        self.loop(lambda: bool(self.conns) and time.monotonic() < deadline)
        for conn in list(self.conns.values()):
            self.teardown(conn)
        self.nodes.close()

    # ----- the loop ------------------------------------------------------------------------

    def loop(self, keep_going: Any) -> None:
        select = self.sel.select
        bufs = self.bufs
        fwd = self.fwd
        next_housekeeping = last_housekeeping = 0.0
        while keep_going():
            now = time.monotonic()
            fwd.now = now
            self.last_turn = now
            if now >= next_housekeeping:
                next_housekeeping = now + self.housekeeping(now)
                last_housekeeping = now
            # Housekeeping's own output (an attach retried, credit, a stream resumed) goes now,
            # not after the next wait.
            if self.dirty or fwd.touched or fwd.credit_dirty or fwd.resume:
                timeout = 0.0
            else:
                timeout = max(0.0, next_housekeeping - now)
            ready = select(timeout)
            if ready:
                # What arrived may have started a short timer: the next look comes soon.
                soon = last_housekeeping + HOUSEKEEPING_SECONDS
                if soon < next_housekeeping:
                    next_housekeeping = soon
            for key, mask in ready:
                kind = key.data
                if isinstance(kind, Connection):
                    if kind.dead:
                        continue  # torn down earlier in this turn (a connector removed, say)
                    if mask & selectors.EVENT_READ:
                        kind.read(bufs)
                    self.dirty.add(kind)
                elif kind[0] == "listener":
                    self.accept(cast(socket.socket, key.fileobj), kind[1])
                elif kind[0] == "wakeup-handler":  # router/transport/wakeup.py
                    kind[1].on_wakeup()
                else:
                    with contextlib.suppress(OSError):
                        cast(socket.socket, key.fileobj).recv(512)
            self.work()

    def work(self) -> None:
        """Drain events until quiet, top up credit, then write every touched connection.

        Writing can make Proton process input it held back, so the turn ends only when no
        connection has events left.
        """
        fwd = self.fwd
        bufs = self.bufs
        interest = self.interest
        while self.dirty or fwd.touched or fwd.credit_dirty or fwd.resume:
            touched: set[Connection] = set()
            while self.dirty or fwd.touched or fwd.credit_dirty or fwd.resume:
                dirty = self.dirty
                dirty |= fwd.touched
                fwd.touched = set()
                self.dirty = set()
                for conn in dirty:
                    if not conn.dead:
                        self.process(conn)
                touched |= dirty
                if fwd.credit_dirty:
                    links, fwd.credit_dirty = fwd.credit_dirty, set()
                    for link in links:
                        if not link.conn.dead:
                            fwd.refresh_credit(link)
                if fwd.resume:  # large messages that may move again (router/datapath/streaming.py)
                    streams, fwd.resume = fwd.resume, set()
                    for stream in streams:
                        stream.pump()
                        if stream.done:
                            take_up_behind(self, stream.in_link)
            if self.nodes.store is not None:
                self.nodes.flush()  # one fsync for this turn's durable messages, then accepted
            for conn in touched:
                if conn.dead:
                    continue
                blocked = conn.want_write
                conn.write(bufs)
                if blocked and not conn.want_write:
                    # Its socket drained: what waited for that can go now.
                    for link in list(conn.links):
                        if link.queue:
                            fwd.pump(link)
                if conn.finished:
                    self.teardown(conn)
                    continue
                if lib.pn_collector_peek(conn.collector):
                    self.dirty.add(conn)
                interest.update(conn)
            if self.answered:
                for p, conn in self.answered:
                    if not conn.dead:
                        lib.pn_link_free(p)
                self.answered.clear()
            if fwd.paused:  # output went out: streams waiting for it may read more
                for stream in fwd.paused:
                    if not stream.blocked():
                        fwd.resume.add(stream)
            if fwd.paused or interest.held:
                interest.hold(fwd.paused, fwd.now)

    def process(self, conn: Connection) -> None:
        coll = conn.collector
        handlers = self.handlers
        event = next_event(coll, False)
        try:
            while event is not None:
                kind, pn, d = event
                if kind == PN_DELIVERY:  # mostly these
                    self.on_delivery(pn, d)
                else:
                    handler = handlers.get(kind)
                    if handler is not None:
                        handler(conn, pn)
                if conn.dead:
                    return
                event = next_event(coll, True)
        except Exception as e:  # what one peer sent must not end the router
            lib.pn_collector_pop(coll)
            self.peer_failed(conn, e)

    def peer_failed(self, conn: Connection, error: Exception) -> None:
        """Handling what `conn` sent raised: close that connection with amqp:internal-error and
        keep serving everyone else. The traceback goes to the log: it is a bug to fix."""
        what = f"{type(error).__name__}: {error}"[:200]
        log.error(
            "connection.failed",
            conn=conn.conn_id,
            peer=conn.host,
            container=conn.remote_container,
            error=what,
            traceback="".join(traceback.format_exception(error)),
        )
        if conn.dead:
            return
        set_condition(
            lib.pn_connection_condition(conn.pn),
            "amqp:internal-error",
            f"router {self.id} could not handle what this connection sent ({what})",
        )
        try:
            self.close_connection(conn)
        except Exception:  # its state is suspect: drop it outright
            self.teardown(conn)

    def housekeeping(self, now: float) -> float:
        """The timers of everything the loop drives; returns the seconds until the next call
        (HOUSEKEEPING_SECONDS says why it varies)."""
        if self.network is not None:
            self.network.tick(now)
        now_ms = int(now * 1000)
        settling = False
        next_tick_ms = 0
        for conn in list(self.conns.values()):
            if conn.next_tick == 0 or conn.next_tick <= now_ms:
                conn.tick(now_ms)
                self.dirty.add(conn)
            if conn.next_tick and (not next_tick_ms or conn.next_tick < next_tick_ms):
                next_tick_ms = conn.next_tick
            if conn.closing or conn.remote_container is None:
                settling = True  # a handshake or a close under way
            if conn.handshake_overdue(now):
                self.dirty.add(conn)
            if conn.head_closed:
                # Our close went out; give the peer a moment to close its side, then let go.
                if not conn.closed_at:
                    conn.closed_at = now
                elif now - conn.closed_at > CLOSED_LINGER_SECONDS:
                    self.teardown(conn)
        if self.fwd.holding:
            self.fwd.expire_held(now)
        if self.interest.held:
            self.dirty.update(self.interest.trickle(now, self.bufs))
        if self.telemetry is not None:
            self.telemetry.tick(time.time())
        if self.fwd.large_done and not self.fwd.streaming:
            # A burst of large messages is over: hand the freed heap back to the system.
            self.fwd.large_done = False
            trim_memory()
        self.connectors.poll(now)
        self.containers.tick()
        self.nodes.tick(time.time())
        if self.dispatch_edges is not None:
            self.dispatch_edges.tick(now)
        if self.edge is not None:
            self.edge.poll(now)
        for config_source in self.config_sources:
            config_source.poll(now)
        busy = (
            settling
            or bool(self.fwd.holding)
            or bool(self.interest.held)
            or self.fwd.large_done
            or self.connectors.busy()
            or (self.network is not None and self.network.control.busy())
            or (self.edge is not None and bool(self.edge.retry_at))
            or any(source.busy() for source in self.config_sources)
        )
        pace = HOUSEKEEPING_SECONDS if busy else IDLE_HOUSEKEEPING_SECONDS
        if self.telemetry is not None:  # a window's records leave as it ends
            pace = min(pace, max(0.0, self.telemetry.flows.end - time.time()))
        if next_tick_ms:
            pace = min(pace, max(0.0, next_tick_ms / 1000 - now))
        return pace

    def accept(self, lsock: socket.socket, cfg: Any) -> None:
        while True:
            try:
                sock, _addr = lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                log.warning("listener.accept_failed", error=str(e))
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Connection(sock, cfg, next(self.conn_ids), self.id, time.monotonic())
            if not self.policy.accepted(conn):  # over policy.maxConnections: no AMQP at all
                conn.free()
                continue
            self.register(conn)
            log.debug("connection.accepted", conn=conn.conn_id, peer=conn.host)

    def register(self, conn: Connection) -> None:
        """Watch a new connection's socket, accepted or dialled by a connector."""
        self.conns[conn.fd] = conn
        self.interest.add(conn)
        self.dirty.add(conn)

    def teardown(self, conn: Connection) -> None:
        """The transport is finished: resolve its links' deliveries, then free Proton's objects."""
        if conn.dead:
            return
        # First, so that what the links had queued is not routed back onto them.
        self.uplink_closed(conn)
        conn.closing = True
        self.connection_gone(conn)
        links = list(conn.links)
        for link in links:
            self.links.pop(link.pn, None)
            self.fwd.unregister(link)
        for link in links:
            self.fwd.resolve(link, conn_dead=True)
        conn.links.clear()
        for p in [p for p, owner in self.unanswered.items() if owner is conn]:
            del self.unanswered[p]  # freed with the connection
        self.interest.remove(conn)
        self.conns.pop(conn.fd, None)
        self.dirty.discard(conn)
        self.fwd.touched.discard(conn)
        mech = sasl.failed_mechanism(conn.transport) if conn.inbound else None
        if mech is not None:
            log.warning("connection.unauthenticated", conn=conn.conn_id, peer=conn.host, mech=mech)
        if conn.connector is not None:
            conn.connector.closed(conn)  # schedules the next attempt, logs failures once
        self.policy.closed(conn)
        conn.free()
        # A connection that never opened AMQP is not news at info: a connector's failed attempt
        # logs its own failure, and TCP probes (Kubernetes, load balancers) come and go.
        quiet = conn.remote_container is None
        (log.debug if quiet else log.info)("connection.closed", conn=conn.conn_id, peer=conn.host)

    # ----- Proton events -------------------------------------------------------------------

    def on_connection_open(self, conn: Connection, ev: Any) -> None:
        c = conn.pn
        conn.remote_container = text(lib.pn_connection_remote_container(c))
        if lib.pn_connection_state(c) & lib.PN_LOCAL_UNINIT:
            if not self.policy.opening(conn):  # its vhost refused it: answered and closed
                self.dirty.add(conn)
                return
            conn.decorate()  # Dispatch's open properties (a connector's went out with its Open)
            lib.pn_connection_open(c)
        conn.remote_opened()  # peer's properties, inter-router cost, connector status
        log.info(
            "connection.opened",
            conn=conn.conn_id,
            peer=conn.host,
            dir="in" if conn.inbound else "out",
            container=conn.remote_container,
            role=conn.role,
            user=text(lib.pn_transport_get_user(conn.transport)),
        )
        self.on_connection_opened(conn)

    def on_connection_opened(self, conn: Connection) -> None:
        """Both ends' Opens are done: an inter-router connection starts its protocol here, and
        a route-container's link routes become available."""
        if conn.role == "route-container":
            self.linkrouter.containers_changed()
        if conn.role == "gateway":
            self.gateways.connection_opened(conn)
        else:
            self.containers.connection_opened(conn)
        if self.network is not None and conn.role == "inter-router":
            self.network.connection_opened(conn)
            self.fwd.touched.add(conn)
        elif self.edge is not None and conn.role == "edge" and not conn.inbound:
            self.edge.connection_opened(conn)
            self.fwd.touched.add(conn)

    def close_connection(self, conn: Connection) -> None:
        """Close a connection from this side (its connector was removed by a live change).

        As when the peer closes: stop routing onto it, resolve its links' deliveries, then send
        our Close. A connection that never opened AMQP has nobody to tell and just goes."""
        if conn.dead:
            return
        if conn.remote_container is None:
            self.teardown(conn)
            return
        self.uplink_closed(conn)
        self.links_ended(list(conn.links))
        conn.closing = True
        self.connection_gone(conn)
        lib.pn_connection_close(conn.pn)
        self.dirty.add(conn)

    def connection_gone(self, conn: Connection) -> None:
        """Whatever the connection served is no longer there: its routed links, its container,
        what a gateway connection imported."""
        self.linkrouter.connection_closed(conn)
        self.nodes.connection_closed(conn)
        self.containers.connection_closed(conn)
        self.gateways.connection_closed(conn)
        if self.dispatch_edges is not None:
            self.dispatch_edges.connection_closed(conn)

    def uplink_closed(self, conn: Connection) -> None:
        """An inter-router or edge connection is going: stop routing onto it."""
        if self.network is not None:
            self.network.connection_closed(conn)
        elif self.edge is not None:
            self.edge.connection_closed(conn)

    def register_link(self, p: Any, conn: Connection, incoming: bool) -> Link:
        link = Link(p, conn, incoming, next(self.link_ids))
        link.name = text(lib.pn_link_name(p)) or ""
        self.links[p] = link
        conn.links.add(link)
        return link

    def mgmt_nodes(self) -> list[str]:
        if self.network is not None:
            return self.network.mgmt_nodes()
        return [f"amqp:/_topo/0/{self.id}/$management"]

    def send_control(self, link: Link, data: bytes) -> None:
        """Control messages go pre-settled, ahead of any credit accounting (they are few)."""
        p = link.pn
        d = new_delivery(link)
        lib.pn_link_send(p, data, len(data))
        lib.pn_link_advance(p)
        lib.pn_delivery_settle(d)
        link.delivered += 1
        self.fwd.touched.add(link.conn)

    def on_connection_close(self, conn: Connection, ev: Any) -> None:
        c = conn.pn
        cond = get_condition(lib.pn_connection_remote_condition(c))
        if cond is not None:
            log.info(
                "connection.remote_error", conn=conn.conn_id, error=cond[0], description=cond[1]
            )
        self.uplink_closed(conn)
        self.links_ended(list(conn.links))
        conn.closing = True
        self.connection_gone(conn)
        lib.pn_connection_close(c)

    def links_ended(self, links: list[Link]) -> None:
        """Links going with their session or connection are detached, not closed: an End or a
        Close detaches its links and keeps their termini, as a link lost does. Closed, a link
        relayed to a router still reading as it shuts down would end what it keeps for the
        client beyond this router (a durable subscription on its way to the host's store)."""
        for link in links:
            self.detach(link, closed=False)

    def on_session_open(self, conn: Connection, ev: Any) -> None:
        s = lib.pn_event_session(ev)
        if lib.pn_session_state(s) & lib.PN_LOCAL_UNINIT and self.policy.session(conn, s):
            open_session(s, conn)

    def on_session_close(self, conn: Connection, ev: Any) -> None:
        s = lib.pn_event_session(ev)
        self.links_ended([link for link in conn.links if lib.pn_link_session(link.pn) == s])
        for p in [p for p in self.unanswered if lib.pn_link_session(p) == s]:
            del self.unanswered[p]  # freed with the session
        self.answered = [(p, c) for p, c in self.answered if lib.pn_link_session(p) != s]
        self.policy.session_ended(s)
        lib.pn_session_close(s)
        lib.pn_session_free(s)

    def on_link_open(self, conn: Connection, ev: Any) -> None:
        p = lib.pn_event_link(ev)
        if not lib.pn_link_state(p) & lib.PN_LOCAL_UNINIT:
            # Our attach went first: a link we opened, such as a routed link's far half.
            link = self.links.get(p)
            if link is not None and link.kind == "routed":
                self.linkrouter.answered(link)
            return
        attach.attached(self, conn, p)

    def refuse(self, link: Link, error: str, description: str) -> None:
        set_condition(lib.pn_link_condition(link.pn), error, description)
        log.info(
            "link.refused",
            conn=link.conn.conn_id,
            name=link.name,
            error=error,
            description=description,
        )
        self.detach(link)

    def on_link_close(self, conn: Connection, ev: Any) -> None:
        link = self.links.get(lib.pn_event_link(ev))
        if link is None:
            self.answered_late(lib.pn_event_link(ev))
            return
        if link.kind == "routed":
            self.linkrouter.detached(link, closed=True)
        else:
            if link.kind == "node":
                self.nodes.detached(link, closed=True)
            self.detach(link, answering=True)

    def on_link_detach(self, conn: Connection, ev: Any) -> None:
        """A detach that keeps the link's state at the peer (a durable subscription, say):
        passed on as such on a routed link, and otherwise the same as a close here but for the
        answer, which is a detach too (a close would end the state the peer means to keep)."""
        link = self.links.get(lib.pn_event_link(ev))
        if link is None:
            self.answered_late(lib.pn_event_link(ev))
            return
        if link.kind == "routed":
            self.linkrouter.detached(link, closed=False)
        else:
            if link.kind == "node":
                self.nodes.detached(link, closed=False)
            self.detach(link, closed=False, answering=True)

    def detach(self, link: Link, closed: bool = True, answering: bool = False) -> None:
        """Resolve the link's deliveries, detach the link (`answering`: the peer's detach),
        and let Proton free it once the peer has detached too."""
        if link.peer is not None:
            # A routed link going with its session or connection: its partner is told now,
            # while both exist (router/linkroutes/relay.py), not left pointing at a freed link.
            self.linkrouter.lost(link)
        self.links.pop(link.pn, None)
        link.conn.links.discard(link)
        if self.network is not None and link.kind != "endpoint":
            self.network.forget_link(link)
        elif self.edge is not None and link.kind == "edge":
            self.edge.link_detached(link)
        self.containers.link_detached(link)
        self.policy.detached(link)
        self.fwd.unregister(link)
        self.fwd.resolve(link, conn_dead=False)
        p = link.pn
        state = lib.pn_link_state(p)
        if not state & lib.PN_LOCAL_CLOSED:
            if closed:
                lib.pn_link_close(p)
            else:
                lib.pn_link_detach(p)
        if state & lib.PN_REMOTE_UNINIT or (
            closed and not answering and not state & lib.PN_REMOTE_CLOSED
        ):
            # Kept until the peer detaches too. Freed before our attach is answered, the link
            # would leave Proton's session and the peer's answering attach would arrive as a
            # new link from the peer, which we would answer in turn, and so on for ever. Freed
            # before our close is answered, what the peer sent meanwhile would be forgotten by
            # Proton with the peer's detach, unanswered (`late_delivery` answers it). Not so a
            # detach that keeps the terminus: peers need not answer it (python-qpid-proton
            # does not) before they attach the link again under its name, which a link still
            # here would take.
            self.unanswered[p] = link.conn
        else:
            lib.pn_link_free(p)
        self.fwd.touched.add(link.conn)
        log.debug("link.detached", conn=link.conn.conn_id, link=link.identity)

    def answered_late(self, p: Any) -> None:
        """The peer's detach of a link we detached before it answered: the link goes once
        this turn's output is written. Freed now, Proton would drop with it the answers to
        what the peer sent just before its detach (`late_delivery`)."""
        conn = self.unanswered.pop(p, None)
        if conn is not None:
            self.answered.append((p, conn))
            self.fwd.touched.add(conn)

    def on_link_flow(self, conn: Connection, ev: Any) -> None:
        link = self.links.get(lib.pn_event_link(ev))
        if link is None:
            return
        if link.kind == "routed":
            self.linkrouter.flow(link)
        elif link.kind == "node":
            self.nodes.flow(link)
        elif not link.incoming:
            self.fwd.pump(link)

    def on_delivery(self, pn: Any, d: Any) -> None:
        link = self.links.get(pn)
        if link is None:
            conn = self.unanswered.get(pn)
            if conn is not None:  # detached by us, the peer not told yet
                late_delivery(pn, d)
                self.fwd.touched.add(conn)
            return
        if link.kind == "routed":
            self.routed_delivery(link, d)
        elif link.kind == "node":
            self.nodes.delivery(link, d)
        elif link.incoming:
            self.incoming(link, d)
        else:
            self.fwd.outgoing_update(link, d)

    def routed_delivery(self, link: Link, d: Any) -> None:
        if link.incoming and lib.pn_link_current(link.pn) == d:
            data = self.receive(link, d)
            if data is not None:
                self.linkrouter.transfer(link, d, data)
        else:
            self.linkrouter.update(link, d)

    def on_transport_error(self, conn: Connection, ev: Any) -> None:
        cond = get_condition(lib.pn_transport_condition(conn.transport))
        conn.closing = True
        if cond is None:
            return
        if lib.pn_transport_get_frames_input(conn.transport) == 0 and conn.eof:
            # A TCP probe (health check, port scan) that never spoke AMQP: not worth a warning.
            log.debug("connection.probe", conn=conn.conn_id, peer=conn.host)
        elif not lib.pn_connection_state(conn.pn) & lib.PN_REMOTE_CLOSED:
            log.warning(
                "connection.error",
                conn=conn.conn_id,
                peer=conn.host,
                error=cond[0],
                description=cond[1],
            )

    # ----- the incoming data path ----------------------------------------------------------

    def incoming(self, link: Link, d: Any) -> None:
        if link.partial is None and link.stream is None:
            got = take(link.pn, d)  # the whole message, as almost all are
        elif lib.pn_link_current(link.pn) != d:
            got = NOT_CURRENT
        else:
            got = SLOW  # more of a message in several frames
        if got == NOT_CURRENT:
            # An earlier delivery of this link changed: the sender settled it on its own.
            forward = link.unsettled.get(d)
            if forward is not None and settled(d):
                del link.unsettled[d]
                forward.in_d = None
                lib.pn_delivery_settle(d)
            return
        if isinstance(got, bytes):
            data: bytes | bytearray = got
        elif got == UNREADABLE or (received := self.receive(link, d)) is None:
            return
        else:
            data = received
        fwd = self.fwd
        fwd.credit_dirty.add(link)
        fwd.received += 1
        link.delivered += 1
        presettled = settled(d)
        if link.kind == "control":
            if not presettled:
                lib.pn_delivery_update(d, ACCEPTED)
            lib.pn_delivery_settle(d)
            if link.conn.role == "gateway":
                self.gateways.exports_message(link, data)
            else:
                assert self.network is not None
                self.network.control_message(link, data)
            return
        stats = self.stats
        try:
            s = scan(data)
            ann = read_annotations(data, s)
            effective = EMPTY_ANNOTATIONS if link.conn.strip_in else ann
            if link.kind != "endpoint":
                if link.kind == "edge" and self.network is not None and ann.ingress is not None:
                    effective = entering_network(ann)
                elif link.kind == "gateway":
                    effective = crossing_gateway(ann)
            to = effective.to or get_to(data, s) if link.anonymous else None
            # A link a vhost policy admitted: what it may send (router/policy/gate.py).
            policed = link.policy is not None
            user_id = get_user_id(data, s) if policed else None
        except MessageFormatError as e:
            self.refuse_message(link, d, presettled, "amqp:decode-error", str(e))
            return
        if policed and not self.policy.message(link, d, len(data), to, user_id, presettled):
            return
        if link.anonymous:
            if to is None:
                self.refuse_message(
                    link,
                    d,
                    presettled,
                    "amqp:invalid-field",
                    "a message sent on an anonymous link needs a 'to' address",
                )
                return
            entry: AddressEntry | None = fwd.entry(to)
            if link.kind == "gateway" and entry is not None and entry.key != CONTAINER_KEY:
                fwd.forget_if_idle(entry)
                self.refuse_message(
                    link, d, presettled, "amqp:not-allowed", "only (container)/node crosses"
                )
                return
        else:
            entry = link.entry
        if link.kind == "endpoint":
            stats.deliveriesIngress += 1
            if link.conn.role == "route-container":
                stats.deliveriesIngressRouteContainer += 1
        assert entry is not None
        entry.ingress += 1
        if presettled:
            lib.pn_delivery_settle(d)
            stats.presettledDeliveries += 1
            forward = None
        else:
            forward = Forward(d, link, fwd.now)
            link.unsettled[d] = forward
        address = to if to is not None else link.address or ""
        msg = Message(data, s, effective, ann, address)
        msg.entry = entry
        sampler = self.sampler
        if sampler is not None and link.kind == "endpoint" and sampler.due():
            msg.sample = time.time_ns()  # entering the network here: timed to its consumer
        fwd.route(msg, entry, forward, link)
        if link.anonymous:
            fwd.forget_if_idle(entry)

    def receive(self, link: Link, d: Any) -> bytes | bytearray | None:
        """The message of `link`'s current delivery once all of it is there, the delivery
        advanced past; None until then, and for an aborted one (settled and forgotten)."""
        p = link.pn
        if lib.pn_delivery_aborted(d):
            if link.stream is not None:
                link.stream.abort()
            link.partial = None
            lib.pn_link_advance(p)
            lib.pn_delivery_settle(d)
            self.fwd.credit_dirty.add(link)  # its credit is used: top it up
            return None
        if not lib.pn_delivery_readable(d):
            return None
        pending = lib.pn_delivery_pending(d)
        if lib.pn_delivery_partial(d) or link.partial is not None:
            if link.stream is not None:  # a large message forwarded as it arrives
                link.stream.pump()
                return None
            # A message in several frames: collect it so Proton's buffer stays small, and
            # once it is large, stream it (router/datapath/streaming.py).
            buf = link.partial
            if buf is None:
                buf = link.partial = bytearray()
            start = len(buf)
            buf.extend(bytes(pending))
            got = lib.pn_link_recv(p, ffi.from_buffer(buf) + start, pending)
            del buf[start + max(got, 0) :]
            policed = link.policy
            if policed is not None and 0 < policed.max_message_size < len(buf):
                link.partial = None
                self.policy.oversize(link, d)
                return None
            if lib.pn_delivery_partial(d):
                if len(buf) >= STREAM_THRESHOLD and link.kind != "node":
                    start_stream(self, link, d, buf)
                return None
            link.partial = None
            if len(buf) >= STREAM_THRESHOLD:
                self.fwd.large_done = True  # collected whole: give the memory back after
            data: bytes | bytearray = buf
        else:
            if pending > len(self.msgbuf):
                self.msgbuf = bytearray(pending)
                self.msgbuf_c = ffi.from_buffer(self.msgbuf)
            got = lib.pn_link_recv(p, self.msgbuf_c, pending)
            # An empty transfer reads as PN_EOS (-1): zero bytes, rejected below as no message.
            data = ffi.unpack(self.msgbuf_c, max(got, 0))
        lib.pn_link_advance(p)
        return data

    def refuse_message(self, link: Link, d: Any, presettled: bool, error: str, why: str) -> None:
        """A message the router cannot route is rejected (or dropped if pre-settled); the link
        stays up."""
        log.warning(
            "delivery.rejected",
            conn=link.conn.conn_id,
            link=link.identity,
            error=error,
            description=why,
        )
        if presettled:
            self.stats.droppedPresettledDeliveries += 1
        else:
            set_condition(lib.pn_disposition_condition(lib.pn_delivery_local(d)), error, why)
            lib.pn_delivery_update(d, REJECTED)
            self.stats.rejectedDeliveries += 1
        lib.pn_delivery_settle(d)
        self.fwd.touched.add(link.conn)

    def on_management(self, msg: Message, forward: Forward | None, origin: Link | None) -> None:
        request = ProtonMessage()
        try:
            request.decode(bytes(msg.data))
        except Exception as e:  # proton raises its own error types for undecodable input
            why = f"management request does not decode: {e}"[:200]
            self.fwd.reject_incoming(forward, "amqp:decode-error", why)
            log.warning("management.undecodable", error=str(e)[:200])
            return
        # Accepted on arrival, as Dispatch's in-process delivery does: the request is not left
        # unsettled in the counts its own answer reports (qdstat -l would show it).
        if forward is not None:
            self.fwd.settle_incoming(forward, ACCEPTED)
        agent = self.agent
        if agent is None:
            from router.management import inventory
            from router.management.agent import Agent
            from router.management.authorization import WriteAuthorization

            writes = WriteAuthorization(lambda: self.config.router.managementWriters)
            agent = self.agent = Agent(
                self.id,
                inventory.entities(self),
                self.mgmt_nodes,
                scoped=self.linkrouter,
                may_write=writes.refusal,
            )
        response = agent.handle(request, None if origin is None else origin.conn, origin)
        if response is None or not response.address:
            return
        self.fwd.originate(response.encode(), response.address)


def serve(config: RouterConfig, config_sources: Any = ()) -> int:
    """Run a router until SIGTERM/SIGINT; ``config_sources`` deliver live changes (see
    router/config/sources.py: the config file, the pod's ConfigMap)."""
    router = Router(config)
    router.config_sources = list(config_sources)
    return router.run()
