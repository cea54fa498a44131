"""One AMQP connection: a socket wired to a Proton transport, driven by the router's own loop.

Proton's engine does all protocol work (framing, SASL, sessions, flow); this class only moves
bytes between the socket and the transport and knows when the connection is finished. It reads
into and writes from buffers shared by the whole (single-threaded) router, so a turn of the loop
allocates nothing for I/O.
"""

from __future__ import annotations

import contextlib
import socket
from typing import TYPE_CHECKING, Any

from router.log import get_logger
from router.pn import NULL, ffi, lib, set_condition

if TYPE_CHECKING:
    from router.links import Link

IO_CHUNK = 256 * 1024

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
    """Socket + pn_transport + pn_connection + pn_collector, with the listener's settings."""

    __slots__ = (
        "closed_at",
        "closing",
        "collector",
        "conn_id",
        "dead",
        "eof",
        "fd",
        "head_closed",
        "host",
        "link_capacity",
        "links",
        "listener",
        "next_tick",
        "opened_at",
        "pn",
        "remote_container",
        "role",
        "sock",
        "strip_in",
        "strip_out",
        "transport",
        "want_write",
    )

    def __init__(
        self, sock: socket.socket, listener: Any, conn_id: int, container_id: str, now: float
    ) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.listener = listener
        self.conn_id = conn_id
        self.role: str = listener.role
        self.link_capacity: int = listener.linkCapacity
        strip = listener.stripAnnotations
        self.strip_in = strip in ("in", "both")
        self.strip_out = strip in ("out", "both")
        try:
            peer = sock.getpeername()
            self.host = f"{peer[0]}:{peer[1]}"
        except OSError:
            self.host = "?"
        self.opened_at = now
        self.remote_container: str | None = None
        self.links: set[Link] = set()
        self.want_write = False
        self.head_closed = False
        self.closed_at = 0.0
        self.eof = False
        self.closing = False
        self.dead = False
        self.next_tick = 0

        t = lib.pn_transport()
        lib.pn_transport_set_server(t)
        lib.pn_transport_set_max_frame(t, listener.maxFrameSize)
        lib.pn_transport_set_idle_timeout(t, int(listener.idleTimeoutSeconds * 1000))
        sasl = lib.pn_sasl(t)
        mechs = " ".join(listener.saslMechanisms).encode()
        lib.pn_sasl_allowed_mechs(sasl, mechs)
        lib.pn_sasl_set_allow_insecure_mechs(sasl, True)
        lib.pn_transport_require_auth(t, bool(listener.authenticatePeer))
        self.transport = t
        self.pn = lib.pn_connection()
        lib.pn_connection_set_container(self.pn, container_id.encode())
        self.collector = lib.pn_collector()
        lib.pn_connection_collect(self.pn, self.collector)
        lib.pn_transport_bind(t, self.pn)

    def read(self, bufs: IOBuffers) -> None:
        """Move what the socket has into the transport; EOF or a socket error closes the tail."""
        t = self.transport
        cap = lib.pn_transport_capacity(t)
        if cap == 0:
            return
        try:
            # Once Proton takes no more input, what still arrives is read and dropped: leaving
            # it in the socket would keep it readable and spin the loop.
            n = self.sock.recv_into(bufs.read_view[: bufs.size if cap < 0 else min(cap, bufs.size)])
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
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
        limit = self.listener.idleTimeoutSeconds
        if not limit or now - self.opened_at <= limit:
            return False
        if lib.pn_connection_state(self.pn) & (lib.PN_REMOTE_ACTIVE | lib.PN_REMOTE_CLOSED):
            return False
        if lib.pn_condition_is_set(lib.pn_transport_condition(self.transport)):
            return False  # Proton is already closing it (its own idle timeout, an error)
        self.closing = True
        log.info("connection.handshake_timeout", conn=self.conn_id, peer=self.host, seconds=limit)
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
            except OSError:
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
        lib.pn_collector_release(self.collector)
        lib.pn_collector_free(self.collector)
        self.transport = self.pn = self.collector = NULL
