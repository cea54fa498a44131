"""Qdrouterd edge routers on our interiors: what a Dispatch edge expects of its interior.

A qdrouterd 1.19 edge attaches, on its uplink, besides its anonymous sender:
- a receiver whose source is its router id with the capability `qd.router-edge-downlink`: its
  interior's route to the edge's own space `_edge/<id>/...` (its clients' dynamic addresses).
  Here it is a consumer of `_edge/<id>`, as our own edges attach (router/edges/uplink.py).
- a sender to `_$qd.addr_lookup`. Before it answers a client's attach, the edge asks whether
  the address is link-routed (application properties {version: 1, opcode: 1}, body
  [address, the edge's link is a receiver]) and waits for the answer ({version, opcode,
  status}, body [is link route, has destinations]). Unanswered, every attach on the edge hangs.
- a receiver from `_$qd.edge_addr_tracking`. The edge sends to an address on a link of its own
  per address, and gives its clients credit only once the interior says, on this link,
  [address key, true]: the address has destinations other than that edge's. It is told again,
  [key, false], when they are gone.
- a sender to `_$qd.edge_heartbeat`: a message every 2 s. An interior closes the connection of
  an edge it has not heard from in 8 s (a host that vanished without a FIN).

Our own edges use the tracking too (router/edges/tracking.py), and attach their own space as a
consumer of `_edge/<id>`; the rest a peer gets only by attaching these links. Lookups and
heartbeats are taken from edge connections only; from anywhere else they are rejected (Dispatch
detaches such links).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from proton import Message as ProtonMessage
from proton import uint

from router.addressing import parse
from router.core.interrouter import capabilities
from router.datapath.forwarder import ACCEPTED
from router.log import get_logger
from router.transport.pn import lib, set_condition, text

if TYPE_CHECKING:
    from router.core.engine import Router
    from router.datapath.forwarder import AddressEntry, Forwarder, Message
    from router.datapath.links import Forward, Link
    from router.transport.connection import Connection

log = get_logger("router")

DOWNLINK = "qd.router-edge-downlink"
LOOKUP = "_$qd.addr_lookup"
TRACKING = "_$qd.edge_addr_tracking"
HEARTBEAT = "_$qd.edge_heartbeat"
# The address lookup protocol (Dispatch's address_lookup_utils.h).
VERSION = 1
OPCODE_LINK_ROUTE_LOOKUP = 1
STATUS_OK = 0
STATUS_NOT_FOUND = 3
HEARTBEAT_SECONDS = 8.0  # Dispatch's HEARTBEAT_THRESHOLD
UNAUTHORIZED = "amqp:unauthorized-access"


class BadLookup(ValueError):
    """A lookup request this interior cannot answer (Dispatch rejects those too)."""


def lookup_request(data: bytes) -> tuple[str, bool, Any, Any]:
    """A lookup request's address, whether the edge's link is a receiver, and where and under
    which correlation id to answer."""
    request = ProtonMessage()
    request.decode(data)
    props = request.properties if isinstance(request.properties, dict) else None
    if props is None or props.get("version") != VERSION:
        raise BadLookup(f"not version {VERSION} of the address lookup protocol")
    if props.get("opcode") != OPCODE_LINK_ROUTE_LOOKUP:
        raise BadLookup(f"opcode {props.get('opcode')!r} is not a link route lookup")
    body = request.body
    if not isinstance(body, list) or len(body) < 2 or not isinstance(body[0], str):
        raise BadLookup("the body is not a list [address, is-receiver]")
    if not request.reply_to or request.correlation_id is None:
        raise BadLookup("a lookup needs reply-to and correlation-id")
    return body[0], bool(body[1]), request.reply_to, request.correlation_id


def lookup_reply(reply_to: str, correlation_id: Any, link_route: bool, destinations: bool) -> bytes:
    """The answer as Dispatch's lookup server writes it."""
    status = STATUS_OK if link_route else STATUS_NOT_FOUND
    reply = ProtonMessage(
        address=reply_to,
        correlation_id=correlation_id,
        durable=False,
        properties={
            "version": uint(VERSION),
            "opcode": uint(OPCODE_LINK_ROUTE_LOOKUP),
            "status": uint(status),
        },
        body=[link_route, destinations],
    )
    return bytes(reply.encode())


def tracking_update(key: str, has_destinations: bool) -> bytes:
    return bytes(ProtonMessage(durable=False, body=[key, has_destinations]).encode())


class DispatchEdges:
    def __init__(self, router: Router) -> None:
        self.router = router
        # Per edge connection: our tracking sender, and what it last told about each address
        # and to which of the edge's links for it.
        self.trackers: dict[Connection, Link] = {}
        self.told: dict[Connection, dict[str, tuple[bool, set[Link]]]] = {}
        # Edges with a heartbeat link attached: that link, when we last heard from each, and
        # those heard from since the last tick (the clock is tick's alone).
        self.beating: dict[Connection, Link] = {}
        self.heard: dict[Connection, float] = {}
        self.fresh: set[Connection] = set()
        lookup, heartbeat = parse(LOOKUP, router.id).key, parse(HEARTBEAT, router.id).key
        self.served = {lookup, heartbeat}  # the protocol's own addresses: never tracked
        router.fwd.local_handlers[lookup] = self.on_lookup
        router.fwd.local_handlers[heartbeat] = self.on_heartbeat

    def attach(self, link: Link) -> bool:
        """On an edge connection: the downlink becomes a consumer of the edge's space (False:
        the engine serves it); the tracking receiver gets our sender (True). Anything else is
        not ours (False)."""
        if link.incoming:
            if text(lib.pn_terminus_get_address(lib.pn_link_remote_target(link.pn))) == HEARTBEAT:
                self.beating[link.conn] = link
                self.fresh.add(link.conn)
            return False
        source = lib.pn_link_remote_source(link.pn)
        address = text(lib.pn_terminus_get_address(source))
        if address and DOWNLINK in [str(c) for c in capabilities(source)]:
            link.address = f"_edge/{address}"
            return False
        if address != TRACKING:
            return False
        p = link.pn
        lib.pn_terminus_copy(lib.pn_link_source(p), source)
        lib.pn_terminus_copy(lib.pn_link_target(p), lib.pn_link_remote_target(p))
        lib.pn_link_set_snd_settle_mode(p, lib.PN_SND_SETTLED)
        lib.pn_link_open(p)
        link.kind = "control"
        link.address = TRACKING
        self.trackers[link.conn] = link
        self.told[link.conn] = {}
        log.debug("link.attached", conn=link.conn.conn_id, link=link.identity, address=TRACKING)
        return True

    def connection_closed(self, conn: Connection) -> None:
        self.trackers.pop(conn, None)
        self.told.pop(conn, None)
        self.beating.pop(conn, None)
        self.heard.pop(conn, None)
        self.fresh.discard(conn)

    def tick(self, now: float) -> None:
        """Tell each tracking edge what changed for the addresses it sends to, and close the
        connections of edges whose heartbeats stopped."""
        router = self.router
        for conn, tracker in list(self.trackers.items()):
            if router.links.get(tracker.pn) is not tracker:
                del self.trackers[conn], self.told[conn]
                continue
            sending: dict[str, tuple[AddressEntry, set[Link]]] = {}
            for link in conn.links:
                entry = link.entry
                if not link.incoming or entry is None:
                    continue
                key = entry.key
                if key[0] == "M" and key not in self.served:  # not the protocol's own links
                    sending.setdefault(key, (entry, set()))[1].add(link)
            told = self.told[conn]
            for key, (entry, links) in sending.items():
                has = beyond(router.fwd, entry, conn)
                was, reached = told.get(key, (False, set()))
                # A link attached since is told too (Dispatch tells each link as it attaches):
                # the edge may have replaced its link between two ticks and forgotten with
                # the old one what it was told.
                if was != has or (has and not links <= reached):
                    router.send_control(tracker, tracking_update(key, has))
                told[key] = (has, links)
            for key in [key for key in told if key not in sending]:
                del told[key]  # the edge detached its link: attached again, it is told afresh
        for conn in self.fresh:
            self.heard[conn] = now
        self.fresh.clear()
        for conn, heard in list(self.heard.items()):
            beating = self.beating.get(conn)
            if beating is None or router.links.get(beating.pn) is not beating:
                del self.heard[conn]  # it detached its heartbeat link: no longer watched
                self.beating.pop(conn, None)
            elif now - heard > HEARTBEAT_SECONDS and not conn.closing:
                edge = conn.remote_container
                log.warning("edge.heartbeat_lost", conn=conn.conn_id, container=edge)
                del self.heard[conn]
                set_condition(
                    lib.pn_connection_condition(conn.pn),
                    "amqp:resource-limit-exceeded",
                    f"no heartbeat from edge {edge} in {HEARTBEAT_SECONDS:g}s",
                )
                router.close_connection(conn)

    # ----- local handlers ------------------------------------------------------------------

    def on_lookup(self, msg: Message, fwd: Forward | None, origin: Link | None) -> None:
        forwarder = self.router.fwd
        conn = edge_of(origin)
        if conn is None:
            forwarder.reject_incoming(fwd, UNAUTHORIZED, "only edge routers look up addresses")
            return
        try:
            address, receiver, reply_to, correlation_id = lookup_request(bytes(msg.data))
        except Exception as err:  # what a peer sends must not end the router
            forwarder.reject_incoming(fwd, "amqp:decode-error", f"bad address lookup: {err}"[:200])
            return
        linkrouter = self.router.linkrouter
        rule = linkrouter.table.lookup(address, "in" if receiver else "out")
        destinations = rule is not None and linkrouter.next_hop(rule, conn) is not None
        if fwd is not None:
            forwarder.settle_incoming(fwd, ACCEPTED)
        forwarder.originate(
            lookup_reply(reply_to, correlation_id, rule is not None, destinations), reply_to
        )

    def on_heartbeat(self, msg: Message, fwd: Forward | None, origin: Link | None) -> None:
        conn = edge_of(origin)
        if conn is None:
            self.router.fwd.reject_incoming(fwd, UNAUTHORIZED, "only edge routers send heartbeats")
            return
        self.fresh.add(conn)
        if fwd is not None:
            self.router.fwd.settle_incoming(fwd, ACCEPTED)
        # A qdrouterd edge sends its next heartbeat only once a flow came after the last one
        # (Dispatch's server gives each heartbeat's credit back): so do we.
        assert origin is not None
        lib.pn_link_flow(origin.pn, 1)
        self.router.fwd.touched.add(conn)


def beyond(fwd: Forwarder, entry: AddressEntry, conn: Connection) -> bool:
    """Whether `entry` has a destination other than the consumers on edge connection `conn`
    (the edge's own proxies): what the interior would give a sender here credit for."""
    if entry.remote or entry.key in fwd.local_handlers:
        return True
    return any(c.conn is not conn for c in entry.consumers) or fwd.redirected_reachably(entry)


def edge_of(origin: Link | None) -> Connection | None:
    """The edge router's connection a message came on, if it came from one."""
    conn = origin.conn if origin is not None else None
    return conn if conn is not None and conn.role == "edge" and conn.inbound else None
