"""Gateway connections: two separate router networks joined for `(container)/node` traffic.

A connection with role `gateway` (a listener or connector of that role, on any router of either
network) joins this network to another one, which need not share router ids, topology or
address space with it. Only container addresses cross it (seed 001: the gateway is the IP
endpoint in front of a network, the container names what lies behind it):

- Each side tells the other which of its network's containers it exports (the `export` rules
  of the gateway config), in a message on a link to the reserved node `$routernet.gateway`,
  sent again whenever that set changes. What one side imports it advertises into its own
  network like a container connected to it, so every router there routes toward the gateway.
  A router never exports again what it imports, so two networks cannot loop a container
  between them; with gateway connections on several routers of one network, what one imports
  the others see as the network's own, so `export` should name the network's own containers.
- The config's `containers` table names containers reached through a connector by hand (the
  seed's simple case), whatever the other side says. The other side need not be a router: a
  broker dialled by a gateway connector and named in the table by its own container-id is
  reached as a container connected here (its node, no container part); nothing but routers is
  told exports.
- Messages cross on one anonymous link each way, the routing address carried as the
  to-override (`(c)/node`, already resolved when the sender said `()/node`); router annotations
  of the other network other than that one are ignored on the way in, its router ids meaning
  nothing here. Links to `(c)/node` are relayed across as any routed link.
- What comes in over a gateway connection may reach only exported containers; anything else
  there is refused (`amqp:not-found` for containers, `amqp:not-allowed` for other addresses).

Mutual TLS is the listener's and connector's sslProfile, as for any connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from proton import Message as ProtonMessage

from router.addressing import Kind, parse
from router.containers.table import advertisable
from router.core import attach
from router.datapath.sections import RouterAnnotations
from router.gateway.rules import exported
from router.log import get_logger
from router.transport.connection import PRODUCT
from router.transport.pn import cbytes, lib, text

if TYPE_CHECKING:
    from router.core.engine import Router
    from router.datapath.forwarder import Message
    from router.datapath.links import Forward, Link
    from router.transport.connection import Connection

log = get_logger("router.gateway")

EXPORTS_NODE = "$routernet.gateway"
NOT_ALLOWED = "amqp:not-allowed"


def crossing_gateway(ann: RouterAnnotations) -> RouterAnnotations:
    """A message from another network keeps only its routing address: the rest of its router
    annotations (ingress, trace) name routers of that network."""
    crossed = RouterAnnotations()
    crossed.to = ann.to
    crossed.present = ann.present
    return crossed


class Peer:
    """One gateway connection: our links on it and what each side offers."""

    __slots__ = ("conn", "data", "exports", "imported", "sent")

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.exports: Link | None = None  # our sender to the other side's $routernet.gateway
        self.data: Link | None = None  # our anonymous sender for messages
        self.sent: frozenset[str] | None = None  # what we last told the other side
        self.imported: set[str] = set()  # what the other side told us


class Gateways:
    def __init__(self, router: Router) -> None:
        self.router = router
        self.peers: dict[Connection, Peer] = {}
        self.link_names = 0

    # ----- the connection ------------------------------------------------------------------

    def connection_opened(self, conn: Connection) -> None:
        peer = self.peers[conn] = Peer(conn)
        if conn.remote_properties.get("product") == PRODUCT:
            peer.exports = self.attach_sender(conn, EXPORTS_NODE)
            peer.data = self.attach_sender(conn, None)
        log.info(
            "gateway.connected", conn=conn.conn_id, peer=conn.host, container=conn.remote_container
        )
        self.imports_changed(peer)
        self.changed()

    def connection_closed(self, conn: Connection) -> None:
        peer = self.peers.pop(conn, None)
        if peer is not None:
            self.router.containers.table.set_imported(conn, ())
            self.router.containers.refresh()

    def attach_sender(self, conn: Connection, address: str | None) -> Link:
        router = self.router
        self.link_names += 1
        name = f"gateway.{'exports' if address else 'data'}.{router.id}.{self.link_names}"
        p = lib.pn_sender(router.linkrouter.session(conn), cbytes(name))
        if address is not None:
            lib.pn_terminus_set_address(lib.pn_link_target(p), cbytes(address))
        link = router.register_link(p, conn, incoming=False)
        link.kind = "gateway"
        link.address = address
        lib.pn_link_open(p)
        router.fwd.touched.add(conn)
        return link

    def link_attached(self, link: Link) -> bool:
        """The other side attached `link`: its exports link and its data link are ours to
        take; other links pass only to `(container)/node` (router/containers/ checks the
        container is exported). True when handled here."""
        p = link.pn
        terminus = lib.pn_link_remote_target(p) if link.incoming else lib.pn_link_remote_source(p)
        address = text(lib.pn_terminus_get_address(terminus))
        router = self.router
        if link.incoming and address == EXPORTS_NODE:
            link.kind = "control"  # its messages come to exports_message, not the forwarder
            link.address = address
            lib.pn_terminus_copy(lib.pn_link_target(p), terminus)
            lib.pn_link_open(p)
            router.fwd.credit_dirty.add(link)
            return True
        if link.incoming and address is None:
            link.kind = "gateway"  # the other side's messages; only their to-override counts
            return False
        if address is not None and parse(address, router.id).kind is Kind.CONTAINER:
            return False
        attach.refuse(
            router,
            link,
            NOT_ALLOWED,
            f"only (container)/node addresses cross a gateway, not {address!r}",
        )
        return True

    # ----- what each side offers -----------------------------------------------------------

    def exports(self, container: str) -> bool:
        return exported(self.router.config.gateway, container)

    def changed(self) -> None:
        """The containers of this network (or the export rules) may have changed: tell every
        gateway peer what it may reach now, if that differs from what it was told."""
        if not self.peers:
            return
        native = self.router.containers.table.native() | {self.router.id}
        offer = frozenset(c for c in native if advertisable(c) and self.exports(c))
        for peer in self.peers.values():
            link = peer.exports
            if offer == peer.sent or not self.live(link):
                continue
            assert link is not None
            peer.sent = offer
            message = ProtonMessage(body={"containers": sorted(offer)})
            self.router.send_control(link, bytes(message.encode()))
            log.info("gateway.exports", conn=peer.conn.conn_id, containers=len(offer))

    def exports_message(self, link: Link, data: bytes | bytearray) -> None:
        """The other side's exports: what this network reaches through that connection."""
        peer = self.peers.get(link.conn)
        if peer is None:
            return
        message = ProtonMessage()
        try:
            message.decode(bytes(data))
            body = message.body
            offered = body["containers"] if isinstance(body, dict) else None
            if not isinstance(offered, list) or not all(isinstance(c, str) for c in offered):
                raise ValueError("the body is not a map with a list of strings 'containers'")
        except Exception as err:  # what another network sends must not end the router
            log.warning("gateway.bad_exports", conn=link.conn.conn_id, error=str(err)[:200])
            return
        peer.imported = {c for c in offered if advertisable(c)}
        log.info("gateway.imports", conn=link.conn.conn_id, containers=len(peer.imported))
        self.imports_changed(peer)

    def imports_changed(self, peer: Peer) -> None:
        config = self.router.config.gateway
        name = peer.conn.listener.name if not peer.conn.inbound else None
        by_hand = {route.container for route in config.containers if route.connector == name}
        containers = self.router.containers
        containers.table.set_imported(peer.conn, peer.imported | by_hand)
        containers.refresh()

    def config_changed(self) -> None:
        """New gateway rules: re-read the hand-made table and the exports."""
        for peer in self.peers.values():
            self.imports_changed(peer)
        self.changed()

    # ----- messages ------------------------------------------------------------------------

    def deliver(self, conn: Connection, msg: Message, fwd: Forward | None, origin: Any) -> None:
        """Send `msg` (its address `(c)/node`) across gateway connection `conn`."""
        peer = self.peers.get(conn)
        forwarder = self.router.fwd
        link = peer.data if peer is not None else None
        if link is None or not self.live(link) or (origin is not None and origin.conn is conn):
            forwarder.drop(fwd)
            return
        forwarder.deliver(link, msg, fwd, origin)

    def live(self, link: Link | None) -> bool:
        """Whether our link is still attached: the other side may have detached it (a
        draining router refuses new links), after which Proton has freed it."""
        return link is not None and self.router.links.get(link.pn) is link
