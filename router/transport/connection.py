"""One AMQP connection: a socket wired to a Proton transport, driven by the router's own loop.

Proton's engine does all protocol work (framing, SASL, sessions, flow); this class only moves
bytes between the socket and the transport and knows when the connection is finished. It reads
into and writes from buffers shared by the whole (single-threaded) router, so a turn of the loop
allocates nothing for I/O.
"""

from __future__ import annotations

import contextlib
import socket
from typing import TYPE_CHECKING, Any, Final

from proton import int32, symbol

from router import __version__
from router.config.views import ROUTER_ROLES
from router.log import get_logger
from router.transport import tls
from router.transport.pn import NULL, data_get, data_put, ffi, get_condition, lib, set_condition

if TYPE_CHECKING:
    from router.datapath.links import Link
    from router.policy.admission import Connection as PolicedConnection
    from router.transport.connector import Connector

IO_CHUNK: Final = 256 * 1024
# How long a connector's attempt may take to get the peer's Open when idleTimeoutSeconds is 0.
CONNECT_TIMEOUT_SECONDS: Final = 16
# Open properties, as Qpid Dispatch sends them (server.c decorate_connection).
PRODUCT: Final = "routernet"
COST_KEY: Final = "qd.inter-router-cost"
ANNOTATIONS_VERSION: Final = 1

log = get_logger("router")


class IOBuffers:
    """Scratch buffers for socket reads and transport output, shared by all connections."""

    def __init__(self, size: int = IO_CHUNK) -> None:
        self.read = bytearray(size)
        self.read_view = memoryview(self.read)
        self.read_c = ffi.from_buffer(self.read)
        self.write = bytearray(size)
        self.write_view = memoryview(self.write)
        self.write_c = ffi.from_buffer(self.write)
        self.size = size


class Connection:
    """Socket + pn_transport + pn_connection + pn_collector, with its listener's or connector's
    settings.

    An accepted connection (``inbound``) is a Proton server: the router answers the peer's
    Open. A connector's connection (``connector`` set) is a Proton client: its socket may still
    be connecting when it is built, the router sends its Open at once, and Proton's output
    simply waits until the socket becomes writable.

    With an sslProfile on the listener or connector, Proton's TLS layer sits under SASL
    (router/transport/tls.py); ``ssl`` is its pn_ssl_t (NULL without TLS). A profile Proton cannot
    use any more (a file gone since the configuration was checked) ends the connection at once,
    with ``error`` saying why.

    ``role`` and ``cost`` come from the listener or connector; once the peer's Open arrived
    (``remote_opened``), ``cost`` of an inter-router connection is the larger of both ends'
    (the peer's ``qd.inter-router-cost``) and ``remote_properties`` holds the peer's open
    properties with string keys.
    """

    __slots__ = (
        "closed_at",
        "closing",
        "collector",
        "conn_id",
        "connector",
        "cost",
        "dead",
        "eof",
        "error",
        "fd",
        "handshake_timeout",
        "head_closed",
        "host",
        "inbound",
        "link_capacity",
        "links",
        "listener",
        "next_tick",
        "opened_at",
        "pn",
        "policed",
        "policy",
        "remote_container",
        "remote_properties",
        "role",
        "sock",
        "ssl",
        "strip_in",
        "strip_out",
        "transport",
        "want_write",
    )

    def __init__(
        self,
        sock: socket.socket,
        listener: Any,
        conn_id: int,
        container_id: str,
        now: float,
        *,
        connector: Connector | None = None,
        credentials: tuple[str, str] | None = None,
    ) -> None:
        """``listener`` is the Listener or, with ``connector``, the Connector settings;
        ``credentials`` the connector's saslUsername and saslPassword, already read from where
        they live."""
        self.sock = sock
        self.fd = sock.fileno()
        self.listener = listener
        self.connector = connector
        self.inbound = connector is None
        self.conn_id = conn_id
        self.role: str = listener.role
        self.cost: int = listener.cost
        self.link_capacity: int = listener.linkCapacity
        # A gateway's to-override says where a message goes in the other network.
        keep = self.role in ROUTER_ROLES or self.role == "gateway"
        strip = "no" if keep else listener.stripAnnotations
        self.strip_in = strip in ("in", "both")
        self.strip_out = strip in ("out", "both")
        if connector is not None:
            self.host = listener.address
        else:
            try:
                peer = sock.getpeername()
                self.host = f"{peer[0]}:{peer[1]}"
            except OSError:
                self.host = "?"
        self.opened_at = now
        self.remote_container: str | None = None
        self.remote_properties: dict[str, Any] = {}
        self.error: str | None = None
        self.links: set[Link] = set()
        self.want_write = False
        self.head_closed = False
        self.closed_at = 0.0
        self.eof = False
        self.closing = False
        self.dead = False
        self.next_tick = 0
        # Counted in the policy's maxConnections (accepted on a listener), and what its vhost
        # admitted it to (router/policy/): None unless a vhost policy governs it.
        self.policed = False
        self.policy: PolicedConnection | None = None
        self.handshake_timeout: int = listener.idleTimeoutSeconds
        if connector is not None and not self.handshake_timeout:
            self.handshake_timeout = CONNECT_TIMEOUT_SECONDS

        t = lib.pn_transport()
        if self.inbound:
            lib.pn_transport_set_server(t)
        lib.pn_transport_set_max_frame(t, listener.maxFrameSize)
        lib.pn_transport_set_idle_timeout(t, int(listener.idleTimeoutSeconds * 1000))
        sasl = lib.pn_sasl(t)
        mechs = " ".join(listener.saslMechanisms).encode()
        lib.pn_sasl_allowed_mechs(sasl, mechs)
        lib.pn_sasl_set_allow_insecure_mechs(sasl, True)
        if self.inbound:
            lib.pn_transport_require_auth(t, bool(listener.authenticatePeer))
        self.ssl = NULL
        tls_failed = False
        if listener.ssl is not None:
            try:
                self.ssl = tls.start(t, listener, server=self.inbound)
            except tls.TlsError as e:
                self.error = str(e)
                tls_failed = True
        self.transport = t
        c = self.pn = lib.pn_connection()
        lib.pn_connection_set_container(c, container_id.encode())
        if connector is not None:
            lib.pn_connection_set_hostname(c, listener.host.encode())
            if credentials is not None:
                # Proton reads the credentials when the transport is bound, just below.
                lib.pn_connection_set_user(c, credentials[0].encode())
                lib.pn_connection_set_password(c, credentials[1].encode())
        self.collector = lib.pn_collector()
        lib.pn_connection_collect(c, self.collector)
        lib.pn_transport_bind(t, c)
        if tls_failed:
            self.closing = True
            (log.warning if self.inbound else log.debug)(
                "connection.tls_failed", conn=conn_id, peer=self.host, error=self.error
            )
            lib.pn_transport_close_tail(t)
            lib.pn_transport_close_head(t)
        elif connector is not None:
            self.decorate()
            lib.pn_connection_open(c)

    def decorate(self) -> None:
        """Offered capabilities and open properties, as Dispatch sends them on every
        connection: product, version and qd.conn-id; qd.inter-router-cost when above 1;
        qd.annotations-version on router-to-router roles. Integers go as AMQP int, the type
        Dispatch reads (a long cost would be ignored)."""
        c = self.pn
        data_put(lib.pn_connection_offered_capabilities(c), [symbol("ANONYMOUS-RELAY")])
        properties: dict[symbol, Any] = {
            symbol("product"): PRODUCT,
            symbol("version"): __version__,
            symbol("qd.conn-id"): int32(self.conn_id & 0x7FFFFFFF),
        }
        if self.cost > 1:
            properties[symbol(COST_KEY)] = int32(self.cost)
        if self.role in ROUTER_ROLES:
            properties[symbol("qd.annotations-version")] = int32(ANNOTATIONS_VERSION)
        data_put(lib.pn_connection_properties(c), properties)

    def remote_opened(self) -> None:
        """The peer's Open arrived: read its properties, settle the cost, tell the connector."""
        found = data_get(lib.pn_connection_remote_properties(self.pn))
        if isinstance(found, dict):
            self.remote_properties = {str(key): value for key, value in found.items()}
        if self.role == "inter-router":
            remote_cost = self.remote_properties.get(COST_KEY)
            if isinstance(remote_cost, int) and not isinstance(remote_cost, bool):
                self.cost = max(self.cost, remote_cost)
        if self.connector is not None:
            self.connector.opened(self)

    def failure(self) -> str:
        """Why this connection ended (or never opened), in a few words for a connector's
        status and logs."""
        if self.error is not None:
            return self.error
        cond = get_condition(lib.pn_connection_remote_condition(self.pn))
        if cond is not None:
            return f"closed by the peer: {cond[0]}" + (f": {cond[1]}" if cond[1] else "")
        cond = get_condition(lib.pn_transport_condition(self.transport))
        if cond is not None:
            return f"{cond[0]}: {cond[1]}" if cond[1] else cond[0]
        if lib.pn_connection_state(self.pn) & lib.PN_REMOTE_CLOSED:
            return "closed by the peer"
        return "connection lost"

    def read(self, bufs: IOBuffers, most: int = IO_CHUNK) -> None:
        """Move what the socket has, up to `most` bytes, into the transport; EOF or a socket
        error closes the tail."""
        t = self.transport
        cap = lib.pn_transport_capacity(t)
        if cap == 0:
            return
        most = min(most, bufs.size)
        try:
            # Once Proton takes no more input, what still arrives is read and dropped: leaving
            # it in the socket would keep it readable and spin the loop.
            n = self.sock.recv_into(bufs.read_view[: most if cap < 0 else min(cap, most)])
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self.error = self.error or _socket_error(e)
            n = 0
        if n == 0:
            self.eof = True
            if cap > 0:
                lib.pn_transport_close_tail(t)
        elif cap > 0:
            lib.pn_transport_push(t, bufs.read_c, n)
            if lib.pn_transport_capacity(t) < 0:
                self.input_stopped()

    def input_stopped(self) -> None:
        """Proton closed its input. After a close frame or a protocol error (which Proton answers
        with a close of its own) that is expected; otherwise it silently refused a frame it
        cannot dispatch (unknown performative or frame type, bad SASL or TLS input) and would
        never answer, so the connection is ended here instead of hanging open."""
        t = self.transport
        state = lib.pn_connection_state(self.pn)
        if state & lib.PN_REMOTE_CLOSED:
            return
        if lib.pn_condition_is_set(lib.pn_transport_condition(t)):
            return
        self.closing = True
        error = "amqp:connection:framing-error"
        if state & lib.PN_REMOTE_ACTIVE:
            description = "undispatchable frame: unknown or malformed performative, or frame type"
            set_condition(lib.pn_connection_condition(self.pn), error, description)
            lib.pn_connection_close(self.pn)
        else:
            # Proton sends no close before the peer's open: just end the output as well.
            description = "input refused before the AMQP open (SASL or TLS layer)"
            lib.pn_transport_close_head(t)
        log.warning(
            "connection.error",
            conn=self.conn_id,
            peer=self.host,
            error=error,
            description=description,
        )

    def handshake_overdue(self, now: float) -> bool:
        """Cut off a peer that has not sent its open within the listener's idle timeout.

        Proton's idle timeout only runs once the AMQP layer is up, so without this a socket that
        sends nothing, half a header, or stalls in SASL would be held open for ever."""
        if self.closing or self.remote_container is not None:
            return False
        limit = self.handshake_timeout
        if not limit or now - self.opened_at <= limit:
            return False
        if lib.pn_connection_state(self.pn) & (lib.PN_REMOTE_ACTIVE | lib.PN_REMOTE_CLOSED):
            return False
        if lib.pn_condition_is_set(lib.pn_transport_condition(self.transport)):
            return False  # Proton is already closing it (its own idle timeout, an error)
        self.closing = True
        self.error = f"no AMQP open from the peer within {limit} s"
        # A connector logs its own failures (once per change, not per attempt).
        (log.info if self.inbound else log.debug)(
            "connection.handshake_timeout", conn=self.conn_id, peer=self.host, seconds=limit
        )
        lib.pn_transport_close_tail(self.transport)
        lib.pn_transport_close_head(self.transport)
        return True

    def write(self, bufs: IOBuffers) -> None:
        """Send transport output until the socket would block; remember whether more is due."""
        t = self.transport
        self.want_write = False
        wrote = False
        while True:
            pending = lib.pn_transport_pending(t)
            if pending < 0:
                if not self.head_closed:
                    self.head_closed = True
                    with contextlib.suppress(OSError):
                        self.sock.shutdown(socket.SHUT_WR)
                break
            if pending == 0:
                break
            n = lib.pn_transport_peek(t, bufs.write_c, min(pending, bufs.size))
            try:
                sent = self.sock.send(bufs.write_view[:n])
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as e:
                self.error = self.error or _socket_error(e)
                lib.pn_transport_close_head(t)
                lib.pn_transport_close_tail(t)
                self.eof = True
                continue
            if sent:
                lib.pn_transport_pop(t, sent)
                wrote = True
            if sent < n:
                self.want_write = True
                break
        if wrote and not self.eof:
            # Some layers (SASL) hold back buffered input until their output has gone out;
            # an empty push makes Proton process that input now rather than on the next read.
            lib.pn_transport_push(t, bufs.read_c, 0)

    def tick(self, now_ms: int) -> int:
        """Let Proton send heartbeats and enforce the idle timeout; returns the next deadline."""
        self.next_tick = lib.pn_transport_tick(self.transport, now_ms)
        return self.next_tick

    @property
    def finished(self) -> bool:
        """Both directions of the transport are done: nothing more to read or write."""
        return self.head_closed and (self.eof or lib.pn_transport_closed(self.transport))

    def free(self) -> None:
        """Release Proton's objects; every delivery and link pointer of this connection dies."""
        if self.dead:
            return
        self.dead = True
        with contextlib.suppress(OSError):
            self.sock.close()
        lib.pn_transport_unbind(self.transport)
        lib.pn_decref(self.transport)
        lib.pn_connection_release(self.pn)
        # pn_connection_free's other half, which the binding lacks: the release alone leaves
        # the reference pn_connection gave, and the connection, its delivery pool (with each
        # pooled delivery's buffer) and its collector were never freed.
        lib.pn_decref(self.pn)
        lib.pn_collector_release(self.collector)
        lib.pn_collector_free(self.collector)
        self.transport = self.pn = self.collector = self.ssl = NULL


def _socket_error(err: OSError) -> str:
    return err.strerror or str(err) or type(err).__name__
