"""Edge mode: a router that hangs off the network's interior instead of joining it.

An edge runs no link-state protocol. It keeps one active uplink connection to an interior (the
other edge connectors stay connected in reserve and take over if it drops) and, over it:
- an anonymous sender, the default route for everything with no consumer on the edge;
- a receiver for `_edge/<edge-id>`, so the interior (and the network) can reach addresses the
  edge alone knows, such as its dynamic reply-to addresses `_edge/<edge-id>/temp.*`;
- one proxy receiver per mobile address with consumers on the edge, so the interior treats the
  edge's consumers as its own and advertises them network-wide;
- a receiver for the interior's address tracking, and a sender per address the edge's clients
  send to, so that they get credit only once it has a destination (router/edges/tracking.py);
- a sender to the interior's `$management`, registering the link routes of containers
  connected here (router/edges/linkroutes.py).
The interior needs nothing special but the tracking, which it serves to qdrouterd edges in the
same protocol (router/edges/dispatch.py): the rest are ordinary consumers, senders and an
anonymous sender on an `edge`-role connection.

The edge connectors' order is a preference: the operator lists the uplink it planned first, so
that an interior's edges spread over the network. The edge uses the most preferred connection
that is open, and moves back to a more preferred one when it opens again (after that interior
restarted, say); otherwise edges would pile up on whichever interiors stayed up through a
rolling restart. Moving is losing the old uplink: its unsettled deliveries go back to their
senders as after a failure, to be resent, and nothing is lost.

Bookkeeping across moves, which can come within a millisecond of each other (connections that
open together at start-up, each preferred to the one before):
- Each edge connection has one session of ours, begun the first time it is the uplink and kept
  until the connection goes; moving away detaches the links, never ends the session. A session
  begun and ended before the interior answered would come back as a Begin of the interior's
  own (Proton answers a Begin whose End it has already read with a Begin that names no channel
  of ours), with our links' names attached in it: each side would take the other's answers
  for new links, refuse or take them, and answer again, thousands of times a second.
- A link detached before the interior answered its attach is kept by the engine until the
  answer and the detach come back (`Router.detach`), for the same reason.
- The interior may detach one of these links itself (refuse it, say): the edge attaches it
  again after a backoff (as a connector redials: 0.1 s doubling to 10 s, jittered; the count
  starts over once a link stayed attached `STABLE_SECONDS`), never in a tight loop.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from router.datapath.sessions import OwnSessions
from router.edges.linkroutes import LinkRouteProxies
from router.edges.tracking import Tracking
from router.log import get_logger
from router.transport.connector import STABLE_SECONDS, backoff_delay
from router.transport.pn import get_condition, lib

if TYPE_CHECKING:
    from router.core.engine import Router
    from router.datapath.forwarder import AddressEntry
    from router.datapath.links import Link
    from router.transport.connection import Connection

log = get_logger("router")

# What is attached on the uplink, as the backoff bookkeeping names it: the anonymous sender is
# UPLINK, a proxy receiver is its address.
UPLINK = None
Attachment = str | None


class Edge:
    def __init__(self, router: Router) -> None:
        self.router = router
        self.uplink: Link | None = None  # the active anonymous sender toward the interior
        self.active: Connection | None = None
        self.standby: list[Connection] = []
        self.proxies: dict[str, Link] = {}  # local mobile address -> proxy receiver
        self.sessions = OwnSessions()  # our session on each edge connection
        # Links the interior detached: consecutive times, when each was last attached, and when
        # it is attached again.
        self.refusals: dict[Attachment, int] = {}
        self.attached_at: dict[Attachment, float] = {}
        self.retry_at: dict[Attachment, float] = {}
        # Which addresses the edge's senders may get credit for (router/edges/tracking.py).
        self.tracking = Tracking(router)
        # The link routes of containers here, registered on the interior.
        self.link_routes = LinkRouteProxies(router)

    def rank(self, conn: Connection) -> int:
        """`conn`'s place among the edge connectors: lower is preferred."""
        edge_connectors = [c for c in self.router.connectors.items if c.config.role == "edge"]
        if conn.connector in edge_connectors:
            return edge_connectors.index(conn.connector)
        return len(edge_connectors)  # its connector was removed: least preferred

    def connection_opened(self, conn: Connection) -> None:
        active = self.active
        if active is None:
            self.activate(conn)
        elif self.rank(conn) < self.rank(active):
            log.info(
                "edge.uplink_preferred", conn=conn.conn_id, peer=conn.host, previous=active.host
            )
            self.deactivate()
            self.standby.append(active)
            self.activate(conn)
        else:
            self.standby.append(conn)

    def connection_closed(self, conn: Connection) -> None:
        self.sessions.forget(conn)
        if conn in self.standby:
            self.standby.remove(conn)
        if conn is not self.active:
            return
        self.forget()
        router = self.router
        (log.info if router.stopping else log.warning)(
            "edge.uplink_lost", conn=conn.conn_id, peer=conn.host, standby=len(self.standby)
        )
        if self.standby and not router.stopping:
            best = min(self.standby, key=self.rank)
            self.standby.remove(best)
            self.activate(best)

    def forget(self) -> None:
        """No uplink: its links, from here on, are none of the edge's business."""
        self.active = self.uplink = None
        self.proxies.clear()
        self.refusals.clear()
        self.attached_at.clear()
        self.retry_at.clear()
        self.tracking.forget()

    def deactivate(self) -> None:
        """Stop using the active uplink, leaving its connection (and our session on it) open in
        reserve: its links are detached, their deliveries resolved as for a lost uplink."""
        assert self.active is not None
        router = self.router
        links = [link for link in [self.uplink, *self.proxies.values()] if link is not None]
        links += self.tracking.links()
        reports = router.containers.up  # so that interior stops serving our containers
        if reports is not None and router.links.get(reports.pn) is reports:
            links.append(reports)
        router.containers.up = None
        self.forget()
        for link in links:
            router.detach(link)

    def activate(self, conn: Connection) -> None:
        """Make `conn` the uplink: attach the default route, the edge's own address, and a
        proxy for every address with consumers here."""
        self.active = conn
        self.attach()
        log.info("edge.uplink", conn=conn.conn_id, peer=conn.host, container=conn.remote_container)
        self.router.fwd.uplink_changed()
        self.router.containers.report_up()  # the containers here, for the new interior
        self.link_routes.sync(time.monotonic())  # and their link routes

    def attach(self) -> None:
        """Attach on the uplink whatever should be there and is not, unless it waits to be
        attached again after the interior detached it."""
        router = self.router
        conn = self.active
        if conn is None:
            return
        if self.uplink is None and UPLINK not in self.retry_at:
            p = lib.pn_sender(self.session(conn), f"edge.uplink.{router.id}".encode())
            lib.pn_link_open(p)
            self.uplink = router.register_link(p, conn, incoming=False)
            self.uplink.kind = "edge"
            self.attached_at[UPLINK] = time.monotonic()
        self.proxy(f"_edge/{router.id}")
        for entry in router.fwd.entries.values():
            if entry.consumers and entry.key[0] == "M":
                self.proxy(entry.address)
        self.tracking.attach(conn, self.session(conn))

    def sender_added(self, entry: AddressEntry) -> None:
        """A client's sender to `entry` attached here: the interior is to say when its address
        has a destination."""
        if self.active is not None:
            self.tracking.sender_added(entry, self.active, self.session(self.active))

    def sender_removed(self, entry: AddressEntry) -> None:
        """A client's sender to `entry` left: when it was the last, the interior need not track
        the address for us any more."""
        if not any(s.kind == "endpoint" for s in entry.senders):
            self.tracking.sender_removed(entry)

    def reachable(self, entry: AddressEntry) -> bool:
        """Whether the edge's senders to `entry`, which has no consumer or node here, may get
        credit: only with an uplink, never for `_local`, and as the interior tracks it."""
        return self.uplink is not None and entry.key[0] != "L" and self.tracking.reachable(entry)

    def session(self, conn: Connection) -> Any:
        """Our session on `conn`: the one begun before while it lasts, else a new one
        (router/datapath/sessions.py)."""
        return self.sessions.get(conn)

    def proxy(self, address: str) -> None:
        conn = self.active
        if conn is None or address in self.proxies or address in self.retry_at:
            return
        p = lib.pn_receiver(self.session(conn), f"edge.proxy.{self.router.id}.{address}".encode())
        lib.pn_terminus_set_address(lib.pn_link_source(p), address.encode())
        lib.pn_link_open(p)
        link = self.router.register_link(p, conn, incoming=True)
        link.kind = "edge"
        link.anonymous = True
        link.address = address
        self.proxies[address] = link
        self.attached_at[address] = time.monotonic()
        self.router.fwd.credit_dirty.add(link)
        self.router.fwd.touched.add(conn)

    def link_detached(self, link: Link) -> None:
        """The engine is detaching `link`. If it is still one of the uplink's (the edge forgets
        its own before detaching them), the interior detached it: attach it again, later."""
        key: Attachment
        if link is self.uplink:
            key = UPLINK
            self.uplink = None
        elif link.address is not None and self.proxies.get(link.address) is link:
            key = link.address
            del self.proxies[key]
        else:
            self.tracking.link_detached(link)
            return
        conn, p = link.conn, link.pn
        if self.router.stopping or lib.pn_connection_state(conn.pn) & lib.PN_REMOTE_CLOSED:
            return  # the connection is going (its close follows): nothing to attach again
        now = time.monotonic()
        stable = now - self.attached_at.pop(key, now) >= STABLE_SECONDS
        refusals = self.refusals[key] = 1 if stable else self.refusals.get(key, 0) + 1
        delay = backoff_delay(refusals)
        self.retry_at[key] = now + delay
        cond = get_condition(lib.pn_link_remote_condition(p))
        log.warning(
            "edge.link_detached",
            conn=conn.conn_id,
            name=link.name,
            error=cond[0] if cond else None,
            description=cond[1] if cond else None,
            refusals=refusals,
            retry_in=round(delay, 2),
        )

    def poll(self, now: float) -> None:
        """From housekeeping: attach again what the interior detached, once its wait is over;
        retry the link routes' registration."""
        self.link_routes.tick(now)
        due = [key for key, at in self.retry_at.items() if at <= now]
        if not due:
            return
        for key in due:
            del self.retry_at[key]
        had_uplink = self.uplink is not None
        self.attach()
        if self.uplink is not None and not had_uplink:
            self.router.fwd.uplink_changed()

    def add_local(self, address: str) -> None:
        self.proxy(address)

    def remove_local(self, address: str) -> None:
        link = self.proxies.pop(address, None)
        if link is not None:
            self.attached_at.pop(address, None)
            self.router.detach(link)
