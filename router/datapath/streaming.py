"""Large messages are forwarded as they arrive, never held whole.

A delivery still arriving once STREAM_THRESHOLD bytes of it are in hand is routed on its first
bytes (sections.scan_head: header, annotations and properties are all routing reads) and
becomes a `Stream`. Each outgoing copy gets the rewritten head on a delivery that is not
advanced, then every further chunk as the router reads it from the incoming delivery
(pn_link_recv into one shared scratch buffer, pn_link_send straight from it); the copies are
advanced when the incoming delivery completes, and aborted when it is aborted. An outgoing link
carrying a stream starts no other delivery until it is done: what is routed to it meanwhile
queues behind it.

Back-pressure: the router stops reading a stream while any copy's session has more than
STREAM_WINDOW bytes Proton has not framed yet (its consumer grants no more session window),
or a copy's socket takes no more (its consumer reads slowly; Proton would frame all that the
window allows into an unbounded buffer of its own), or while none of its copies could start
(no credit, or another stream ahead of it on that link). What arrives meanwhile stays in
Proton's buffer for the incoming delivery, and how its sender is stopped depends on who it
is. A client's session has an unbounded window, as in Qpid Dispatch (clients send large
messages whole, and a bounded window costs their Proton time that grows with the square of
the size, see router/datapath/interest.py): once HOLD_BYTES wait unread, the router stops
reading that client's socket (router/datapath/interest.py). A router's session (inter-router,
edge) is opened with an incoming capacity (SESSION_CAPACITY bytes, where that is
SESSION_FRAMES frames or more): once that much waits unread, Proton grants the sender no more
session window, and the connection's other sessions (the control links) go on. The capacity
is set before the session's Begin and never changed, because shrinking a window the peer
already has makes Proton refuse the transfers in flight (amqp:session:window-violation): a
first version that cut it on pause stalled. A multicast copy that has to wait while others
have started is the exception: the chunks the others got are spooled for it.

What is not streamed, and is collected whole as before: messages to an address with no
consumer yet (held, or released at once), to the router's own management, on link-routed and
inter-router control links, and messages whose first STREAM_THRESHOLD bytes do not hold the
end of the properties. A streamed message's body is not checked: it is the consumer's business,
as it is for Qpid Dispatch, which streams the same way.

Small messages never come here: a delivery that arrives in one transfer (or is complete before
STREAM_THRESHOLD bytes) takes the engine's usual path.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from router.config.views import ROUTER_ROLES
from router.datapath.forwarder import Message
from router.datapath.links import Forward
from router.datapath.sections import (
    EMPTY_ANNOTATIONS,
    MessageFormatError,
    entering_network,
    read_annotations,
    scan_head,
)
from router.transport.pn import ffi, lib

if TYPE_CHECKING:
    from router.core.engine import Router
    from router.datapath.forwarder import AddressEntry, Forwarder
    from router.datapath.links import Link
    from router.transport.connection import Connection

# A delivery still arriving with this much of it in hand is streamed from then on.
STREAM_THRESHOLD = 256 * 1024
# What one pn_link_recv takes from the incoming delivery.
CHUNK = 64 * 1024
# Bytes an outgoing copy's session may hold unframed before the stream stops reading (at
# least one 4 MiB frame: a smaller window stalled a stream whose head came in one such frame).
STREAM_WINDOW = 4 * 1024 * 1024

_SCRATCH = ffi.new("char[]", CHUNK)
# Bytes Proton may hold for one incoming session of another router before it grants that
# router no more session window; only where that is at least SESSION_FRAMES frames
# (maxFrameSize up to 64 KiB), so that small messages never wait for window. Larger frames:
# no session limit. Each refill of the window costs the sender a round trip, and a Proton
# sender that holds a whole message re-reads all of it (router/datapath/interest.py): clients get no
# limit.
SESSION_CAPACITY = 16 * 1024 * 1024
SESSION_FRAMES = 256

# link.partial of an incoming link while it streams: the engine's partial path sends the
# delivery's events here rather than collecting.
STREAMING = bytearray()


class Copy:
    """One outgoing delivery of a stream. `settle`: settle it once complete (pre-settled, or an
    at-most-once consumer); `owed`: the Forward to tell ACCEPTED then (an at-most-once
    consumer of an unsettled delivery)."""

    __slots__ = ("link", "od", "owed", "settle")

    def __init__(self, link: Link, od: Any, settle: bool, owed: Forward | None) -> None:
        self.link = link
        self.od = od
        self.settle = settle
        self.owed = owed


class Stream:
    """One incoming delivery being forwarded as it arrives, and its outgoing copies."""

    __slots__ = (
        "aborted",
        "copies",
        "done",
        "forwarder",
        "fwd",
        "in_d",
        "in_link",
        "limit",
        "oversize",
        "paused",
        "presettled",
        "read",
        "settle_later",
        "spool",
        "waiting",
    )

    def __init__(self, forwarder: Forwarder, in_link: Link, in_d: Any, fwd: Forward | None) -> None:
        self.forwarder = forwarder
        self.in_link = in_link
        self.in_d = in_d
        self.fwd = fwd
        self.presettled = fwd is None
        self.copies: list[Copy] = []
        self.waiting = 0  # copies queued on a link, not started yet
        self.spool: list[bytes] | None = None  # chunks read while a copy waited
        self.read = 0  # bytes read after the head
        self.paused = False
        self.done = False  # the incoming delivery is complete or aborted
        self.aborted = False
        # the sender's delivery has its outcome (every copy finished early): settled once
        # the rest of it has arrived
        self.settle_later = False
        # with a vhost policy's maxMessageSize, the bytes after the head beyond which it is
        # refused, and who refuses it then (router/policy/gate.py); None: no limit
        self.limit = 0
        self.oversize: Callable[[Link, Any], None] | None = None

    # ----- copies --------------------------------------------------------------------------

    def started(self, link: Link, od: Any, fwd: Forward | None) -> None:
        """Forwarder.send put the head on `od`, not advanced: from now on it gets the chunks."""
        forwarder = self.forwarder
        if self.aborted:  # aborted while this copy waited: it goes no further
            lib.pn_delivery_abort(od)
            if fwd is not None:
                forwarder.copy_done(fwd, lib.PN_RELEASED, None)
            return
        if fwd is None:
            copy = Copy(link, od, True, None)
        elif link.presettle:
            copy = Copy(link, od, True, fwd)
        else:
            copy = Copy(link, od, False, None)
            link.unsettled[od] = fwd
        if self.read:
            assert self.spool is not None
            p = link.pn
            for chunk in self.spool:
                lib.pn_link_send(p, chunk, len(chunk))
        if self.done:  # it all arrived while this copy waited: complete it now
            self.complete(copy)
            return
        link.stream = self
        self.copies.append(copy)
        forwarder.resume.add(self)

    def queued(self) -> None:
        self.waiting += 1

    def unqueued(self) -> None:
        self.waiting -= 1
        if not self.waiting:
            self.spool = None
        if not self.done:
            self.forwarder.resume.add(self)

    def blocked(self) -> bool:
        """Whether reading more now would pile bytes up in the router."""
        if not self.copies:
            return self.waiting > 0  # none started: nothing may be read before they start
        for copy in self.copies:
            session = lib.pn_link_session(copy.link.pn)
            if lib.pn_session_outgoing_bytes(session) > STREAM_WINDOW:
                return True
            if copy.link.conn.want_write:
                return True
        return False

    # ----- moving bytes --------------------------------------------------------------------

    def pump(self) -> None:
        """Pass on what has arrived, as far as the copies can take it; finish when it is all
        there."""
        if self.done:
            return
        forwarder = self.forwarder
        d = self.in_d
        p = self.in_link.pn
        moved = False
        while True:
            if self.blocked():
                self.pause()
                break
            pending = lib.pn_delivery_pending(d)
            if pending > 0:
                got = lib.pn_link_recv(p, _SCRATCH, min(pending, CHUNK))
                if got <= 0:
                    break
                if self.waiting and self.spool is None:
                    self.spool = []
                if self.spool is not None:
                    self.spool.append(ffi.unpack(_SCRATCH, got))
                for copy in self.copies:
                    lib.pn_link_send(copy.link.pn, _SCRATCH, got)
                self.read += got
                if self.oversize is not None and self.read > self.limit:
                    self.refuse()
                    return
                moved = True
                continue
            if self.paused:
                self.unpause()
            if not lib.pn_delivery_partial(d):
                self.finish()
                return
            break
        if moved:
            forwarder.touched.add(self.in_link.conn)  # session window to give back
            for copy in self.copies:
                forwarder.touched.add(copy.link.conn)

    def pause(self) -> None:
        """Stop reading: what arrives stays in Proton's buffer for the delivery, until its
        connection's input is held (router/datapath/interest.py) or its session capacity
        (`open_session`) closes the sender's session window."""
        if not self.paused:
            self.paused = True
            self.forwarder.paused.add(self)

    def unpause(self) -> None:
        if self.paused:
            self.paused = False
            self.forwarder.paused.discard(self)

    # ----- ends ----------------------------------------------------------------------------

    def end(self) -> None:
        self.done = True
        if not self.waiting:
            self.spool = None
        self.unpause()
        forwarder = self.forwarder
        forwarder.streaming -= 1
        forwarder.large_done = True
        in_link = self.in_link
        if in_link.stream is self:
            in_link.stream = None
            in_link.partial = None
        forwarder.credit_dirty.add(in_link)

    def release_link(self, link: Link) -> None:
        """`link` no longer carries this stream: what queued behind it may go."""
        link.stream = None
        forwarder = self.forwarder
        forwarder.touched.add(link.conn)
        if link.queue and not link.conn.dead:
            forwarder.pump(link)

    def finish(self) -> None:
        """The whole message arrived: complete every copy and the sender's delivery."""
        forwarder = self.forwarder
        lib.pn_link_advance(self.in_link.pn)
        if self.presettled or self.settle_later:
            lib.pn_delivery_settle(self.in_d)
        copies, self.copies = self.copies, []
        self.end()
        for copy in copies:
            self.complete(copy)
        forwarder.touched.add(self.in_link.conn)

    def complete(self, copy: Copy) -> None:
        link = copy.link
        lib.pn_link_advance(link.pn)
        if copy.settle:
            lib.pn_delivery_settle(copy.od)
        if copy.owed is not None:
            self.forwarder.copy_done(copy.owed, lib.PN_ACCEPTED, None)
        if link.stream is self:
            self.release_link(link)
        else:  # a late copy, completed as it started (Forwarder.send goes on with the queue)
            self.forwarder.touched.add(link.conn)

    def abort(self) -> None:
        """The sender aborted its delivery (or its link went): abort every copy."""
        if self.done:
            return
        forwarder = self.forwarder
        fwd = self.fwd
        if fwd is not None:
            fwd.in_d = None
            self.in_link.unsettled.pop(self.in_d, None)
        copies, self.copies = self.copies, []
        self.aborted = True
        self.end()
        self.spool = None
        for copy in copies:
            link = copy.link
            link.unsettled.pop(copy.od, None)
            lib.pn_delivery_abort(copy.od)
            if fwd is not None:
                forwarder.copy_done(fwd, lib.PN_RELEASED, None)
            self.release_link(link)

    def refuse(self) -> None:
        """Over its connection's maxMessageSize: every copy aborted, and the sender's
        delivery refused as the policy words it."""
        in_link, in_d, oversize = self.in_link, self.in_d, self.oversize
        self.abort()
        assert oversize is not None
        oversize(in_link, in_d)

    def copy_gone(self, link: Link, conn_dead: bool) -> Copy | None:
        """An outgoing link of this stream detached or lost its connection: its copy is
        aborted (what the consumer got is incomplete) and the stream goes on without it."""
        for i, copy in enumerate(self.copies):
            if copy.link is link:
                del self.copies[i]
                link.stream = None
                if not conn_dead:
                    lib.pn_delivery_abort(copy.od)
                self.forwarder.resume.add(self)
                return copy
        return None

    def copy_finished(self, link: Link, od: Any) -> bool:
        """The consumer settled or gave an outcome for `od` before it was complete: if it is
        this stream's copy, abort it (the rest would go nowhere) and go on without it."""
        for i, copy in enumerate(self.copies):
            if copy.od == od:
                del self.copies[i]
                lib.pn_delivery_abort(od)
                self.release_link(link)
                self.forwarder.resume.add(self)
                return True
        return False


def open_session(session: Any, conn: Connection) -> None:
    """Open a session: a router's with the incoming capacity that bounds what a paused stream
    can pile up, a client's with an unbounded window (router/datapath/interest.py holds its input).

    A small message is read as soon as it arrives, so the window this leaves (at least
    SESSION_FRAMES transfers) is refreshed with every credit top-up and never holds it back."""
    if conn.role in ROUTER_ROLES:
        frame = lib.pn_transport_get_max_frame(conn.transport)
        if 0 < frame * SESSION_FRAMES <= SESSION_CAPACITY:
            lib.pn_session_set_incoming_capacity(session, SESSION_CAPACITY)
    lib.pn_session_open(session)


def start(router: Router, link: Link, d: Any, head: bytearray) -> bool:
    """Route the delivery `d` that is still arriving on `link` on its first bytes `head`, and
    stream it from here on; False when it is to be collected whole (see the module's doc)."""
    if link.kind not in ("endpoint", "data", "edge"):
        return False
    fwd = router.fwd
    try:
        s = scan_head(head)
        if s is None:
            return False
        ann = read_annotations(head, s)
        effective = EMPTY_ANNOTATIONS if link.conn.strip_in else ann
        if link.kind == "edge" and router.network is not None and ann.ingress is not None:
            effective = entering_network(ann)
        to = None
        if link.anonymous:
            from router.datapath.sections import get_to

            to = effective.to or get_to(head, s)
    except MessageFormatError:
        return False  # collected whole, then refused as any other malformed message
    entry: AddressEntry | None = link.entry
    if link.anonymous:
        if to is None:
            return False
        entry = fwd.entry(to)
    if entry is None or entry.key in fwd.local_handlers or not fwd.reachable(entry):
        if link.anonymous and entry is not None:
            fwd.forget_if_idle(entry)
        return False
    stats = router.stats
    if link.kind == "endpoint":
        stats.deliveriesIngress += 1
        if link.conn.role == "route-container":
            stats.deliveriesIngressRouteContainer += 1
    entry.ingress += 1
    if lib.pn_delivery_settled(d):
        stats.presettledDeliveries += 1
        forward = None
    else:
        forward = Forward(d, link, fwd.now)
        link.unsettled[d] = forward
    stream = Stream(fwd, link, d, forward)
    policed = link.policy
    if policed is not None and policed.max_message_size:
        stream.limit = policed.max_message_size - len(head)
        stream.oversize = router.policy.oversize
    link.stream = stream
    link.partial = STREAMING
    fwd.streaming += 1
    fwd.credit_dirty.add(link)
    address = to if to is not None else link.address or ""
    msg = Message(head, s, effective, ann, address)
    msg.stream = stream
    fwd.route(msg, entry, forward, link)
    if link.anonymous:
        fwd.forget_if_idle(entry)
    stream.pump()
    return True


def take_up_behind(router: Router, link: Link) -> None:
    """A stream ended on a turn of its own (it had paused): deliveries that arrived behind it
    on `link` had their events passed over as not current, so take them up now."""
    p = link.pn
    while not link.conn.dead and link.stream is None and link.partial is None:
        d = lib.pn_link_current(p)
        if d == ffi.NULL:
            return
        router.incoming(link, d)
        if lib.pn_link_current(p) == d:
            return  # still arriving: its next frames bring events of their own


_trim: Any = None


def trim_memory() -> None:
    """Give freed heap back to the system (glibc's malloc_trim); nothing elsewhere."""
    global _trim
    if _trim is None:
        try:
            # The process's own symbols, libc's among them: no library search (ctypes.util
            # would run ldconfig and import a dozen modules the router has no other use for).
            _trim = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):
            _trim = False
    if _trim:
        _trim(0)
