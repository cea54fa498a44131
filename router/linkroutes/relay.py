"""Link routing in the engine: a client's link relayed, attach to detach, to a container.

When a client attaches a link whose address matches a link route (router/linkroutes/table.py), the
router does not answer at once. It attaches a link of the same name, termini and settlement
modes toward the container: on the container's own route-container connection when it is
connected here, else toward the interior router that advertises the route (which does the
same), else, on an edge, up to its interior. The client's attach is answered with what the
container answered, and from then on the two links are a pair:

- transfers are copied across byte for byte (no router annotations: the message is the
  container's business); pre-settled ones stay pre-settled;
- dispositions and settlement travel back, delivery for delivery;
- credit follows the receiving end: what the container grants on a client's sending link is
  what the client is granted, and a client receiver's credit (and drain) is passed on to the
  container;
- a detach or close on either side is passed on with its error; a lost connection detaches the
  other side with `qd:routed-link-lost`, as Dispatch does. A link with no route is refused with
  `qd:no-route-to-dest`.

Routes come from the configuration (`linkRoutes`), from peers that create them for their own
connection through management (router/linkroutes/scoped.py: a qdrouterd edge's brokers), and from
other routers' mobile address updates: a router routes a pattern another one advertises without
configuring it, as Dispatch's routers learn them.

The attach's link properties travel with it. Between routers they also name the client's
container and link (`ORIGIN`, `ORIGIN_LINK`): beyond the first router the link comes from a
router's connection, and a node that keys state by container and link name (a durable
subscription, router/nodes/) must see the client's. So two clients' links of one name can
share a connection between routers, where the second takes a name of its own. They name the
router the client is attached to as well (`ORIGIN_ROUTER`): a node's host counts its traffic
from and to there. Only routers are believed when they say so; a container at the end sees
none of it.

The router holds no message for longer than it takes to copy it: its deliveries exist only
while their partner does.
"""

from __future__ import annotations

from itertools import count
from typing import TYPE_CHECKING, Any, cast

from proton import symbol

from router.addressing.rewrite import Rewrite
from router.core import attach
from router.datapath.forwarder import TERMINAL, copy_disposition, new_delivery
from router.datapath.links import Link
from router.datapath.sessions import OwnSessions
from router.datapath.streaming import open_session
from router.linkroutes.scoped import (
    BAD_REQUEST,
    CREATORS,
    FORBIDDEN,
    NO_CONTENT,
    NOT_FOUND,
    RequestError,
    ScopedRoute,
    ScopedRoutes,
)
from router.linkroutes.table import (
    LINK_BALANCED,
    LINK_LOST,
    NO_ROUTE,
    LinkRouteRule,
    LinkRouteTable,
)
from router.log import get_logger
from router.nodes.transactions import TRANSACTIONAL_STATE, UNKNOWN_ID
from router.transport.pn import cbytes, copy_condition, data_get, data_put, lib, set_condition, text

if TYPE_CHECKING:
    from router.core.engine import Router
    from router.transport.connection import Connection

log = get_logger("router.linkroute")

# In the link properties of a link relayed between routers: the container id of the client
# whose link it is, and the client's name for it.
ORIGIN = symbol("x-opt-routernet-container")
ORIGIN_LINK = symbol("x-opt-routernet-link")
ORIGIN_ROUTER = symbol("x-opt-routernet-router")
# Connections whose peer is a router, trusted to say whose link it relays.
RELAYING_ROLES = frozenset({"inter-router", "edge", "gateway"})


def origin(link: Link) -> tuple[str, str]:
    """The container id and link name of the client whose link this is, however many routers
    relayed it."""
    conn = link.conn
    if conn.role in RELAYING_ROLES:
        properties = data_get(lib.pn_link_remote_properties(link.pn))
        if isinstance(properties, dict):
            container, name = properties.get(ORIGIN), properties.get(ORIGIN_LINK)
            if isinstance(container, str) and isinstance(name, str):
                return container, name
    return conn.remote_container or "", link.name


def put_back(terminus: Any, rewrite: Rewrite) -> None:
    """Give an answered terminus the address its client asked for. A refusal's null terminus
    has no address, so stays null, as does an answer without one."""
    answered = text(lib.pn_terminus_get_address(terminus))
    if answered is not None:
        lib.pn_terminus_set_address(terminus, cbytes(rewrite.back(answered)))


def origin_router(link: Link, me: str) -> str:
    """The router where the link entered the network: this one (`me`) for a client's link; for
    one relayed between routers, the router its first one named, else (a router's own link, or
    relayed by a router that does not say) the router at the other end of the connection."""
    conn = link.conn
    if conn.role not in RELAYING_ROLES:
        return me
    properties = data_get(lib.pn_link_remote_properties(link.pn))
    if isinstance(properties, dict):
        router = properties.get(ORIGIN_ROUTER)
        if isinstance(router, str):
            return router
    return conn.remote_container or me


def _learned(key: str) -> LinkRouteRule | None:
    """The route another router advertises as `key` (LinkRouteRule.key, reversed; `C`/`D`
    alone is the catch-all `#`); None for a pattern key without a pattern."""
    direction = "in" if key[0] in "CE" else "out"
    text = key[1:]
    if key[0] in "CD":
        if not text:
            return LinkRouteRule(direction, pattern="#", scoped=True)
        return LinkRouteRule(direction, prefix=text, scoped=True)
    return LinkRouteRule(direction, pattern=text, scoped=True) if text else None


def _scoped_rule(route: ScopedRoute) -> LinkRouteRule:
    return LinkRouteRule(route.direction, pattern=route.pattern, scoped=True)


class LinkRouter:
    def __init__(self, router: Router, table: LinkRouteTable) -> None:
        self.router = router
        self.table = table
        # route key -> routers that advertise it (a container of theirs serves it)
        self.remote: dict[str, set[str]] = {}
        self.advertised: set[str] = set()
        self.sessions = OwnSessions()
        # A container's sending end of a routed link gets a session of its own, ended with
        # the link. RabbitMQ 3.10 may hand its queue's messages to a consumer it is cancelling
        # for our detach: they never leave it ("Delivery to non-existent consumer" in its
        # log) and stay unacknowledged on the session's channel, lost to the next consumer,
        # until that session ends and it gives them back to the queue (the chaos soak lost
        # 15 so at a stop of the router serving the consumer).
        self.own_sessions: dict[Link, Any] = {}
        self.scoped = ScopedRoutes()

    # ----- routes and containers -----------------------------------------------------------

    def set_table(self, table: LinkRouteTable) -> None:
        """New link routes (a live configuration change); links already routed stay, and so
        do the connection-scoped routes."""
        self.table = table
        for conn in self.scoped.by_conn:
            for route in self.scoped.routes(conn):
                self._sync(_scoped_rule(route))
        for key in self.remote:
            self._sync(_learned(key))
        self.containers_changed()

    def _sync(self, rule: LinkRouteRule | None) -> None:
        """Keep a table entry for an unconfigured pattern while a connection here serves it
        (scoped) or another router advertises it, as Dispatch's routers learn link-route
        patterns from each other's address updates; a configured route of the same pattern
        stands for both (its container and the others serve it alike)."""
        if rule is None:
            return
        tokens = rule.tokens()
        current = self.table.get(rule.direction, tokens)
        wanted = (rule.direction, tokens) in self.scoped.serving or rule.key in self.remote
        if current is None and wanted:
            self.table.add(rule)
        elif current is not None and current.scoped and not wanted:
            self.table.remove(current)

    # ----- connection-scoped routes (router/linkroutes/scoped.py), as management serves them ----

    def create_scoped(
        self, conn: Connection, name: str | None, attributes: object
    ) -> dict[str, Any]:
        """Management CREATE of a connection-scoped route, over `conn`: it serves links toward
        `conn` while `conn` lasts. Returns the new entity."""
        if conn.role not in CREATORS:
            raise RequestError(
                FORBIDDEN, "Connection-scoped link routes are for edge and route-container peers"
            )
        route = self.scoped.create(conn, name, attributes)
        self._sync(_scoped_rule(route))
        self.containers_changed()
        log.info(
            "linkroute.scoped_added",
            conn=conn.conn_id,
            container=conn.remote_container,
            pattern=route.pattern,
            direction=route.direction,
            name=name,
        )
        return route.row(conn.remote_container)

    def delete_scoped(self, conn: Connection, name: str | None, identity: str | None) -> int:
        if name is None and identity is None:
            raise RequestError(BAD_REQUEST, "No name or identity provided")
        route = self.scoped.find(conn, name, identity)
        if route is None:
            raise RequestError(NOT_FOUND, "No connection-scoped link route of this connection")
        self.scoped.delete(conn, route)
        self._sync(_scoped_rule(route))
        self.containers_changed()
        log.info("linkroute.scoped_removed", conn=conn.conn_id, pattern=route.pattern)
        return NO_CONTENT

    def scoped_rows(self, conn: Connection | None) -> list[dict[str, Any]]:
        """What `conn` sees of the type: its own routes only, as in Dispatch."""
        if conn is None:
            return []
        return [route.row(conn.remote_container) for route in self.scoped.routes(conn)]

    def containers_changed(self) -> None:
        """A route-container connection opened or closed, or the routes changed: advertise to
        the network the routes whose container is connected here, and only those."""
        network = self.router.network
        if network is None:
            edge = self.router.edge
            if edge is not None:  # an edge registers them on its interior instead
                edge.link_routes.sync(self.router.fwd.now)
            return
        served = {rule.key for rule in self.table.rules if self.local_container(rule) is not None}
        for key in sorted(served - self.advertised):
            network.control.add_local(key, LINK_BALANCED)
        for key in sorted(self.advertised - served):
            network.control.remove_local(key)
        self.advertised = served

    def remote_routes(self, router_id: str, keys: set[str]) -> None:
        """The link-route keys another router advertises now (none when it is gone)."""
        before = set(self.remote)
        for key in list(self.remote):
            routers = self.remote[key]
            routers.discard(router_id)
            if not routers:
                del self.remote[key]
        for key in keys:
            self.remote.setdefault(key, set()).add(router_id)
        for key in before.symmetric_difference(self.remote):
            self._sync(_learned(key))

    def local_container(self, rule: LinkRouteRule) -> Connection | None:
        """The connection here that serves `rule`: a route-container it names, else one that
        created the route for itself."""
        if not rule.scoped:
            for conn in self.router.conns.values():
                if (
                    conn.role == "route-container"
                    and conn.remote_container is not None
                    and not conn.closing
                    and rule.serves(conn.remote_container, conn.listener.name)
                ):
                    return conn
        if self.scoped.serving:
            for conn in self.scoped.serving.get((rule.direction, rule.tokens()), ()):
                if not conn.closing:
                    return cast("Connection", conn)
        return None

    def next_hop(self, rule: LinkRouteRule, origin: Connection) -> tuple[Connection, bool] | None:
        """Where to attach toward the route's container, and whether that is the container."""
        conn = self.local_container(rule)
        if conn is not None:
            # A link the container itself attached is never sent back to it.
            return (conn, True) if conn is not origin else None
        router = self.router
        if router.network is not None:
            routes = router.network.routes
            reachable = [
                (routes.cost[rid], rid)
                for rid in self.remote.get(rule.key, ())
                if rid in routes.cost
            ]
            if reachable:
                hop = cast("Connection | None", routes.next_hop.get(min(reachable)[1]))
                if hop is not None and hop is not origin:
                    return hop, False
        elif router.edge is not None and router.edge.uplink is not None:
            hop = router.edge.uplink.conn
            if hop is not origin:
                return hop, False
        return None

    # ----- attach --------------------------------------------------------------------------

    def attach(self, link: Link) -> bool:
        """A link a peer attached: if a link route matches, start relaying it; False if none
        does (the router then serves it as usual)."""
        p = link.pn
        if link.incoming:
            terminus, direction = lib.pn_link_remote_target(p), "in"
        else:
            terminus, direction = lib.pn_link_remote_source(p), "out"
        if lib.pn_terminus_is_dynamic(terminus):
            return False
        address = text(lib.pn_terminus_get_address(terminus))
        rule = self.table.lookup(address, direction)
        if rule is None:
            return False
        assert address is not None
        link.address = address
        link.kind = "routed"
        hop = self.next_hop(rule, link.conn)
        if hop is None:
            self.refuse(link, NO_ROUTE, f"no route to a container for {address!r}")
            return True
        conn, last = hop
        if last and (rule.add_prefix or rule.del_prefix):
            self.relay(link, conn, *rule.external(address))
        else:
            self.relay(link, conn)
        return True

    def relay(
        self,
        link: Link,
        conn: Connection,
        address: str | None = None,
        back: Rewrite | None = None,
    ) -> None:
        """Attach `link`'s partner on `conn` (the container, or the next router toward it),
        `address` replacing the terminus address there if given, and `back` turning the
        answer's address into the one `link`'s peer asked for; the pair then relays until
        either side detaches. Also how links to `(container)/node` travel
        (router/containers/)."""
        p = link.pn
        link.kind = "routed"
        name = link.name
        if self.taken(conn, name, link.incoming):
            if conn.role not in RELAYING_ROLES:
                self.refuse(
                    link, "amqp:resource-locked", f"a link named {name!r} is already routed there"
                )
                return
            name = next(
                n for i in count(1) if not self.taken(conn, n := f"{link.name}#{i}", link.incoming)
            )
        own = not link.incoming and conn.role not in RELAYING_ROLES
        if own:
            session = lib.pn_session(conn.pn)
            open_session(session, conn)
        else:
            session = self.session(conn)
        q = (
            lib.pn_sender(session, cbytes(name))
            if link.incoming
            else lib.pn_receiver(session, cbytes(name))
        )
        lib.pn_terminus_copy(lib.pn_link_source(q), lib.pn_link_remote_source(p))
        lib.pn_terminus_copy(lib.pn_link_target(q), lib.pn_link_remote_target(p))
        if address is not None:
            local = lib.pn_link_target(q) if link.incoming else lib.pn_link_source(q)
            lib.pn_terminus_set_address(local, cbytes(address))
        lib.pn_link_set_snd_settle_mode(q, lib.pn_link_remote_snd_settle_mode(p))
        lib.pn_link_set_rcv_settle_mode(q, lib.pn_link_remote_rcv_settle_mode(p))
        lib.pn_link_set_max_message_size(q, lib.pn_link_remote_max_message_size(p))
        properties = data_get(lib.pn_link_remote_properties(p))
        properties = dict(properties) if isinstance(properties, dict) else {}
        properties.pop(ORIGIN, None)
        properties.pop(ORIGIN_LINK, None)
        properties.pop(ORIGIN_ROUTER, None)
        if conn.role in RELAYING_ROLES:
            properties[ORIGIN], properties[ORIGIN_LINK] = origin(link)
            properties[ORIGIN_ROUTER] = origin_router(link, self.router.id)
        if properties:
            data_put(lib.pn_link_properties(q), properties)
        peer = self.router.register_link(q, conn, incoming=not link.incoming)
        if own:
            self.own_sessions[peer] = session
        peer.kind = "routed"
        peer.address = link.address
        peer.rewrite = back
        link.peer, peer.peer = peer, link
        lib.pn_link_open(q)
        self.router.fwd.touched.add(conn)
        log.info(
            "linkroute.attach",
            conn=link.conn.conn_id,
            name=link.name,
            address=link.address,
            direction="in" if link.incoming else "out",
            toward=conn.remote_container,
            via=conn.conn_id,
        )
        # A client receiver may have granted credit with its attach: pass it on now.
        self.flow(link)

    @staticmethod
    def taken(conn: Connection, name: str, incoming: bool) -> bool:
        """A link of that name and our direction is attached on `conn` already (the pair
        (name, direction) names a link between two containers)."""
        return any(other.name == name and other.incoming != incoming for other in conn.links)

    def session(self, conn: Connection) -> Any:
        """Our session on `conn` for the links we attach there (router/datapath/sessions.py)."""
        return self.sessions.get(conn)

    def answered(self, link: Link) -> None:
        """The container (or the next router) answered our attach: answer the client's with
        the termini it chose, so both ends agree on what the link is, in the client's terms:
        its address where this router attached another (`link.rewrite`)."""
        peer = link.peer
        if peer is None:
            return
        p, q = link.pn, peer.pn
        if not lib.pn_link_state(q) & lib.PN_LOCAL_UNINIT:
            return
        lib.pn_terminus_copy(lib.pn_link_source(q), lib.pn_link_remote_source(p))
        lib.pn_terminus_copy(lib.pn_link_target(q), lib.pn_link_remote_target(p))
        if link.rewrite is not None:
            put_back(
                lib.pn_link_target(q) if peer.incoming else lib.pn_link_source(q), link.rewrite
            )
        lib.pn_link_set_snd_settle_mode(q, lib.pn_link_remote_snd_settle_mode(p))
        lib.pn_link_set_rcv_settle_mode(q, lib.pn_link_remote_rcv_settle_mode(p))
        lib.pn_link_open(q)
        self.router.fwd.touched.add(peer.conn)
        self.flow(link)

    def refuse(self, link: Link, error: str, description: str) -> None:
        attach.refuse(self.router, link, error, description)

    # ----- detach --------------------------------------------------------------------------

    def detached(self, link: Link, closed: bool) -> None:
        """One side detached: detach the other the same way, with the same error."""
        peer = link.peer
        link.peer = None
        if peer is not None:
            peer.peer = None
            copy_condition(lib.pn_link_remote_condition(link.pn), lib.pn_link_condition(peer.pn))
            self.release(peer, closed)
        own = self.own_sessions.pop(link, None)
        self.router.detach(link, closed=closed, answering=True)
        if own is not None:
            lib.pn_session_close(own)

    def lost(self, link: Link) -> None:
        """`link`'s session or connection is gone (closed or lost: either way its links were
        not closed): its partner is detached with qd:routed-link-lost, as Dispatch does, and
        closed only if the terminus would not survive the disconnect (expiry-policy never, or
        a timeout), so that a durable subscription at the container stays."""
        self.own_sessions.pop(link, None)  # going with it
        peer = link.peer
        link.peer = None
        if peer is None or peer.conn.dead:
            return
        peer.peer = None
        set_condition(
            lib.pn_link_condition(peer.pn),
            LINK_LOST,
            "the connection on the other side of this routed link was lost",
        )
        p = link.pn
        terminus = lib.pn_link_remote_target(p) if link.incoming else lib.pn_link_remote_source(p)
        survives = (
            lib.pn_terminus_get_expiry_policy(terminus) == lib.PN_EXPIRE_NEVER
            or lib.pn_terminus_get_timeout(terminus) > 0
        )
        self.release(peer, closed=not survives)

    def release(self, link: Link, closed: bool) -> None:
        if lib.pn_link_state(link.pn) & lib.PN_LOCAL_UNINIT:
            lib.pn_link_open(link.pn)  # the attach must be answered before the detach
        own = self.own_sessions.pop(link, None)
        self.router.detach(link, closed=closed)
        if own is not None:
            lib.pn_session_close(own)  # after the detach: a terminus kept outlives the session

    def connection_closed(self, conn: Connection) -> None:
        self.sessions.forget(conn)
        for link in [lk for lk in self.own_sessions if lk.conn is conn]:
            del self.own_sessions[link]
        for link in list(conn.links):
            if link.peer is not None:
                self.lost(link)
        dropped = self.scoped.drop(conn) if conn in self.scoped.by_conn else []
        for route in dropped:
            self._sync(_scoped_rule(route))
        if conn.role == "route-container" or dropped:
            self.containers_changed()

    # ----- credit --------------------------------------------------------------------------

    def flow(self, link: Link) -> None:
        """Credit or drain changed on `link`: bring its partner in line."""
        peer = link.peer
        if peer is None:
            return
        if link.incoming:
            receiver, sender = link, peer
        else:
            receiver, sender = peer, link
            self.pump(sender)
        r, s = receiver.pn, sender.pn
        if lib.pn_link_state(r) & lib.PN_LOCAL_UNINIT:
            return  # credit goes to the client once its attach is answered
        draining = lib.pn_link_get_drain(s)
        if draining and lib.pn_link_get_drain(r):
            # Asked upstream already: done once its credit is used up or given back.
            if lib.pn_link_credit(r) <= 0 and not sender.waiting:
                lib.pn_link_drained(s)
                lib.pn_link_set_drain(r, False)
        else:
            want = lib.pn_link_credit(s) - len(sender.waiting)
            have = lib.pn_link_credit(r)
            if want > have:
                lib.pn_link_flow(r, want - have)
            if draining:
                lib.pn_link_drain(r, 0)  # pass the drain upstream
        self.router.fwd.touched.add(receiver.conn)
        self.router.fwd.touched.add(sender.conn)

    def pump(self, sender: Link) -> None:
        waiting = sender.waiting
        while waiting and lib.pn_link_credit(sender.pn) > 0:
            data, in_d = waiting.popleft()
            self.send(sender, data, in_d)

    # ----- transfers and dispositions ------------------------------------------------------

    def transfer(self, link: Link, d: Any, data: bytes | bytearray) -> None:
        """A whole message arrived on a routed receiving link: copy it to the partner."""
        peer = link.peer
        if peer is None:
            lib.pn_delivery_update(d, lib.PN_RELEASED)
            lib.pn_delivery_settle(d)
            return
        if lib.pn_delivery_remote_state(d) == TRANSACTIONAL_STATE:
            # Its transaction is this router's (router/nodes/transactions.py), which cannot
            # enlist work done on another: refused rather than done outside the transaction.
            set_condition(
                lib.pn_disposition_condition(lib.pn_delivery_local(d)),
                UNKNOWN_ID,
                f"{link.address!r} is served by another router: transactions here cover only"
                " the nodes this router hosts",
            )
            lib.pn_delivery_update(d, lib.PN_REJECTED)
            lib.pn_delivery_settle(d)
            return
        in_d = None if lib.pn_delivery_settled(d) else d
        if in_d is None:
            lib.pn_delivery_settle(d)
        if peer.waiting or lib.pn_link_credit(peer.pn) <= 0:
            peer.waiting.append((data, in_d))
        else:
            self.send(peer, data, in_d)
        self.router.fwd.touched.add(peer.conn)

    def send(self, sender: Link, data: bytes | bytearray, in_d: Any) -> None:
        p = sender.pn
        out = new_delivery(sender)
        lib.pn_link_send(p, bytes(data), len(data))
        lib.pn_link_advance(p)
        sender.delivered += 1
        if in_d is None:
            lib.pn_delivery_settle(out)
            sender.presettled += 1
            return
        receiver = sender.peer
        assert receiver is not None
        sender.pairs[out] = in_d
        receiver.pairs[in_d] = out

    def update(self, link: Link, d: Any) -> None:
        """The far end of `link` changed delivery `d`'s state or settled it: pass that on."""
        other = link.pairs.get(d)
        if other is None:
            if lib.pn_delivery_settled(d):
                lib.pn_delivery_settle(d)
            return
        state = lib.pn_delivery_remote_state(d)
        if state in TERMINAL and state != lib.pn_delivery_local_state(other):
            if state in (lib.PN_REJECTED, lib.PN_MODIFIED):
                copy_disposition(d, other, state)
            lib.pn_delivery_update(other, state)
        if lib.pn_delivery_settled(d):
            del link.pairs[d]
            peer = link.peer
            if peer is not None:
                peer.pairs.pop(other, None)
            lib.pn_delivery_settle(other)
            lib.pn_delivery_settle(d)
        if link.peer is not None:
            self.router.fwd.touched.add(link.peer.conn)
