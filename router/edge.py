"""Edge mode: a router that hangs off the network's interior instead of joining it.

An edge runs no link-state protocol. It keeps one active uplink connection to an interior (the
other edge connectors stay connected in reserve and take over if it drops) and, over it:
- an anonymous sender, the default route for everything with no consumer on the edge;
- a receiver for `_edge/<edge-id>`, so the interior (and the network) can reach addresses the
  edge alone knows, such as its dynamic reply-to addresses `_edge/<edge-id>/temp.*`;
- one proxy receiver per mobile address with consumers on the edge, so the interior treats the
  edge's consumers as its own and advertises them network-wide.
The interior needs nothing special: those links are ordinary consumers and an anonymous sender
on an `edge`-role connection.

The edge connectors' order is a preference: the operator lists the uplink it planned first, so
that an interior's edges spread over the network. The edge uses the most preferred connection
that is open, and moves back to a more preferred one when it opens again (after that interior
restarted, say); otherwise edges would pile up on whichever interiors stayed up through a
rolling restart. Moving is losing the old uplink: its unsettled deliveries go back to their
senders as after a failure, to be resent, and nothing is lost.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from router.log import get_logger
from router.pn import lib
from router.streaming import open_session

if TYPE_CHECKING:
    from router.connection import Connection
    from router.engine import Router
    from router.links import Link

log = get_logger("router")


class Edge:
    def __init__(self, router: Router) -> None:
        self.router = router
        self.uplink: Link | None = None  # the active anonymous sender toward the interior
        self.active: Connection | None = None
        self.session: object = None
        self.standby: list[Connection] = []
        self.proxies: dict[str, Link] = {}  # local mobile address -> proxy receiver

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
        if conn in self.standby:
            self.standby.remove(conn)
        if conn is not self.active:
            return
        self.active = self.uplink = self.session = None
        self.proxies.clear()
        (log.info if self.router.stopping else log.warning)(
            "edge.uplink_lost", conn=conn.conn_id, peer=conn.host, standby=len(self.standby)
        )
        if self.standby:
            best = min(self.standby, key=self.rank)
            self.standby.remove(best)
            self.activate(best)

    def deactivate(self) -> None:
        """Stop using the active uplink, leaving its connection open in reserve: its links are
        detached, their deliveries resolved as for a lost uplink."""
        assert self.active is not None and self.uplink is not None
        router = self.router
        for link in [self.uplink, *self.proxies.values()]:
            router.detach(link)
        lib.pn_session_close(self.session)
        self.active = self.uplink = self.session = None
        self.proxies.clear()

    def activate(self, conn: Connection) -> None:
        """Make `conn` the uplink: attach the default route, the edge's own address, and a
        proxy for every address with consumers here."""
        self.active = conn
        session = self.session = lib.pn_session(conn.pn)
        open_session(session, conn)
        router = self.router
        p = lib.pn_sender(session, f"edge.uplink.{router.id}".encode())
        lib.pn_link_open(p)
        self.uplink = router.register_link(p, conn, incoming=False)
        self.uplink.kind = "edge"
        self.proxy(f"_edge/{router.id}")
        for entry in router.fwd.entries.values():
            if entry.consumers and entry.key[0] == "M":
                self.proxy(entry.address)
        log.info("edge.uplink", conn=conn.conn_id, peer=conn.host, container=conn.remote_container)
        router.fwd.uplink_changed()

    def proxy(self, address: str) -> None:
        conn = self.active
        if conn is None or address in self.proxies:
            return
        p = lib.pn_receiver(self.session, f"edge.proxy.{self.router.id}.{address}".encode())
        lib.pn_terminus_set_address(lib.pn_link_source(p), address.encode())
        lib.pn_link_open(p)
        link = self.router.register_link(p, conn, incoming=True)
        link.kind = "edge"
        link.anonymous = True
        link.address = address
        self.proxies[address] = link
        self.router.fwd.credit_dirty.add(link)
        self.router.fwd.touched.add(conn)

    def add_local(self, address: str) -> None:
        self.proxy(address)

    def remove_local(self, address: str) -> None:
        link = self.proxies.pop(address, None)
        if link is not None:
            self.router.detach(link)
