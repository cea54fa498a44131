"""What the loop waits for on each connection's socket, and holding a sender's input.

A connection is watched for writing only while Proton has output its socket would not take
(a writable socket, polled, would spin the loop), and for reading unless its input is held.

Holding input is how a large message sent whole is slowed to its consumers' pace without the
router holding it. A client's session is given an unbounded window, as Qpid Dispatch gives
it (maxSessionFrames unset): Proton's sender re-reads the rest of a delivery each time its
session window reopens (pn_buffer_bytes rotates the whole buffer), so a sender that had put a
100 MiB message on its link whole and was let through 8 MiB at a time spent 25 s on it, and
its time grew with the square of the size. With the window open, the sender frames all of it
once and what the router has not taken waits in the sender's and TCP's buffers: once a
stream that cannot move on (router/datapath/streaming.py) has HOLD_BYTES unread in Proton, the
router stops reading its connection's socket, until the stream moves again or has less than half
of that unread.

A connection is not held while the router waits for its peer to take something: an outgoing
link on it with deliveries queued (they wait for the peer's credit) or carrying a stream whose
session has more unframed bytes than its window (they wait for the peer's session window).
That credit and window arrive on the very input a hold would stop, so holding it could wait
for ever (a client that sends a large message to its own receiver). There the unread bytes
are bounded only by what its peer sends, as they are in Dispatch.

A held connection still sends its heartbeats, and reads a few bytes when it has read nothing
for half its idle timeout, so that its own idle timeout does not end it while a consumer
dawdles.

Router-to-router sessions (inter-router, edge) keep their bounded window instead
(streaming.open_session): their senders are routers, which stream, and holding their input
would stop the control messages that keep the network together.
"""

from __future__ import annotations

import selectors
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

from router.config.views import ROUTER_ROLES
from router.datapath.streaming import STREAM_WINDOW
from router.transport.pn import lib

if TYPE_CHECKING:
    from router.datapath.streaming import Stream
    from router.transport.connection import Connection, IOBuffers

EVENT_READ: Final = selectors.EVENT_READ
EVENT_WRITE: Final = selectors.EVENT_WRITE
# Unread bytes of a paused stream at which its connection's input is held.
HOLD_BYTES: Final = 4 * 1024 * 1024
# What a held connection reads to keep its idle timeout from expiring.
TRICKLE_BYTES: Final = 1024


class Interest:
    """The selector registration of every connection; `held` are those not being read."""

    __slots__ = ("events", "held", "quiet_since", "sel")

    def __init__(self, sel: selectors.BaseSelector) -> None:
        self.sel = sel
        self.events: dict[Connection, int] = {}
        self.held: set[Connection] = set()
        self.quiet_since: dict[Connection, float] = {}  # when a held connection last read

    def add(self, conn: Connection) -> None:
        self.sel.register(conn.sock, EVENT_READ, conn)
        self.events[conn] = EVENT_READ

    def remove(self, conn: Connection) -> None:
        if self.events.pop(conn, 0):
            self.sel.unregister(conn.sock)
        self.held.discard(conn)
        self.quiet_since.pop(conn, None)

    def update(self, conn: Connection) -> None:
        """Watch `conn` for what it now needs: writing if its output is blocked, reading unless
        held."""
        want = (EVENT_WRITE if conn.want_write else 0) | (0 if conn in self.held else EVENT_READ)
        have = self.events.get(conn, 0)
        if want == have:
            return
        sel = self.sel
        if not want:
            sel.unregister(conn.sock)
        elif not have:
            sel.register(conn.sock, want, conn)
        else:
            sel.modify(conn.sock, want, conn)
        self.events[conn] = want

    def hold(self, paused: Iterable[Stream], now: float) -> None:
        """Hold the input of connections whose paused streams have piled up unread, release
        those that no longer have."""
        held = self.held
        want: set[Connection] = set()
        for stream in paused:
            conn = stream.in_link.conn
            if conn.role in ROUTER_ROLES or conn.dead:
                continue
            limit = HOLD_BYTES // 2 if conn in held else HOLD_BYTES
            if lib.pn_delivery_pending(stream.in_d) >= limit and not awaits_peer(conn):
                want.add(conn)
        if want == held:
            return
        for conn in held - want:
            held.discard(conn)
            self.quiet_since.pop(conn, None)
            if not conn.dead:
                self.update(conn)
        for conn in want - held:
            held.add(conn)
            self.quiet_since[conn] = now
            self.update(conn)

    def trickle(self, now: float, bufs: IOBuffers) -> list[Connection]:
        """Read a little from held connections quiet for half their idle timeout; returns
        those that read."""
        woke = []
        for conn, since in self.quiet_since.items():
            timeout = conn.listener.idleTimeoutSeconds
            if timeout and now - since >= timeout / 2:
                conn.read(bufs, TRICKLE_BYTES)
                woke.append(conn)
        for conn in woke:
            self.quiet_since[conn] = now
        return woke


def awaits_peer(conn: Connection) -> bool:
    """Whether something the router sends on `conn` waits for its peer's credit or window."""
    for link in conn.links:
        if link.incoming:
            continue
        if link.queue:
            return True
        if link.stream is not None:
            session = lib.pn_link_session(link.pn)
            if lib.pn_session_outgoing_bytes(session) > STREAM_WINDOW:
                return True
    return False
