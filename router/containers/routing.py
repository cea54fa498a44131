"""Routing to containers: `(container)/node` links and messages from any router (seed 001).

Every router is a container (its id), and so is every client, broker or service connected to
one (the container-id of its Open). A router advertises the containers connected to it (and
itself) to the network as the link-route keys of the prefix `(id)` (router/containers/table.py
says why those keys), so any router knows where each container is.

- A link attached to `(c)/node` is link-routed by container: relayed hop by hop (the link router
  of router/linkroutes/relay.py does the relaying) to the router that has `c`, which attaches the
  link to `node` on `c`. Credit, dispositions, detach and errors travel end to end; an unknown
  container is refused with `amqp:not-found`. When `c` is a router, the link ends there:
  `(R2)/$management` is R2's management, `(R2)/x` the consumers of `x` attached to R2 only.
- A message to `(c)/node` (anonymous relay) goes to `c`'s router, the routing address carried
  between routers as `_topo/0/<router>/(c)/node` (so a qdrouterd on the way routes it too), and
  is handed to `c` on a link to `node` that the router attaches once and reuses, or on one
  anonymous link when `c` offers ANONYMOUS-RELAY. Outcomes travel back as for any delivery.
- `()/node` leaves the container to the gateway rules (router/gateway/rules.py): the first
  router to see it resolves it, from the message's properties or the link's, and what goes on
  is addressed to `(container)/node`; nothing matching, a message is released and a link
  refused.
- Containers another network exports through a gateway connection (router/gateway/) are
  reached across it, the address unchanged for the other side to resolve.

An edge router knows only its own containers, which it reports to its interior (a message to
the interior's reserved node `$routernet.containers` whenever they change); the interior serves
them as its own, reaching them through the edge's `_edge/<id>` space. Anything else an edge
sends up to its interior.
"""

from __future__ import annotations

from itertools import count
from typing import TYPE_CHECKING, Any

from proton import Message as ProtonMessage

from router.addressing import Kind, parse, split_container
from router.addressing.rewrite import between
from router.config.views import ROUTER_ROLES
from router.containers.table import (
    Across,
    Below,
    ContainerTable,
    Here,
    Location,
    There,
    advertisable,
    container_of,
    keys,
)
from router.datapath.forwarder import ACCEPTED
from router.gateway.rules import link_facts, message_facts, resolve
from router.linkroutes.table import LINK_BALANCED
from router.log import get_logger
from router.management.entitytypes import CONTAINER
from router.transport.pn import cbytes, data_get, lib, text

if TYPE_CHECKING:
    from router.core.engine import Router
    from router.datapath.forwarder import Message
    from router.datapath.links import Forward, Link
    from router.transport.connection import Connection

log = get_logger("router.containers")

NOT_FOUND = "amqp:not-found"
# Where an edge router reports its containers, on its interior.
CONTAINERS_NODE = "$routernet.containers"
ANONYMOUS_RELAY = "ANONYMOUS-RELAY"


class Containers:
    def __init__(self, router: Router) -> None:
        self.router = router
        self.table = ContainerTable()
        self.advertised: set[str] = set()
        # (container's connection, node; None for its anonymous relay) -> our sending link
        self.senders: dict[tuple[Connection, str | None], Link] = {}
        self.link_ids = count(1)
        # Containers' connections whose peer offered ANONYMOUS-RELAY (read once, at the Open).
        self.relaying: set[Connection] = set()
        # Set by refresh, acted on by tick: a thousand clients connecting at once cost one
        # pass over the table, not a thousand.
        self.stale = False
        # On an edge: our link reporting containers to the interior, and what it last said.
        self.up: Link | None = None
        self.up_sent: frozenset[str] | None = None
        router.fwd.local_handlers[parse(CONTAINERS_NODE, router.id).key] = self.on_edge_report

    # ----- which containers are where ------------------------------------------------------

    def connection_opened(self, conn: Connection) -> None:
        container = conn.remote_container
        if not container or conn.role in ROUTER_ROLES or conn.role == "gateway":
            return
        if self.table.connected(container, conn) or container == self.router.id:
            self.duplicate(container)
        if ANONYMOUS_RELAY in offered(conn):
            self.relaying.add(conn)
        self.refresh()

    def connection_closed(self, conn: Connection) -> None:
        for key in [key for key in self.senders if key[0] is conn]:
            del self.senders[key]
        self.relaying.discard(conn)
        container = conn.remote_container
        if container and conn in self.table.local.get(container, ()):
            self.table.disconnected(container, conn)
            self.refresh()
        elif conn.role == "edge" and conn.inbound:
            self.table.set_below(conn, ())
            self.refresh()

    def link_detached(self, link: Link) -> None:
        """On an interior: an edge that moved its uplink elsewhere detaches its report link
        here and keeps the connection in reserve; what it reported is no longer served here
        (else two interiors would go on advertising its containers)."""
        conn = link.conn
        reporter = conn.role == "edge" and conn.inbound
        if reporter and link.incoming and link.address == CONTAINERS_NODE:
            self.table.set_below(conn, ())
            self.refresh()

    def remote_keys(self, router_id: str, hash_keys: set[str]) -> set[str]:
        """Another router's link-route keys: those advertising containers are taken here; the
        rest (real link routes) are returned."""
        containers = {c for key in hash_keys if (c := container_of(key)) is not None}
        for container in self.table.set_remote(router_id, containers):
            self.duplicate(container)
        self.router.gateways.changed()
        return {key for key in hash_keys if container_of(key) is None}

    def duplicate(self, container: str) -> None:
        places = self.table.places(container)
        if container == self.router.id:
            places.insert(0, "this router's own id")
        log.warning(
            "container.duplicate",
            container=container,
            places=places,
            routing="to the nearest (here first, then by cost, ties to the lowest router id)",
        )

    def refresh(self) -> None:
        """The containers served here may have changed: advertised at the next tick."""
        self.stale = True

    def tick(self) -> None:
        """From housekeeping: advertise the containers served here, and only those."""
        if not self.stale:
            return
        self.stale = False
        network = self.router.network
        if network is None:
            self.report_up()
            self.router.gateways.changed()
            return
        served = self.table.served() | {self.router.id}
        for container in sorted(served - self.advertised):
            for key in keys(container):
                network.control.add_local(key, LINK_BALANCED)
        for container in sorted(self.advertised - served):
            for key in keys(container):
                network.control.remove_local(key)
        self.advertised = served
        self.router.gateways.changed()

    def report_up(self) -> None:
        """On an edge: tell the interior (again, on a new uplink) which containers are here."""
        router = self.router
        edge = router.edge
        if edge is None or edge.active is None:
            return
        conn = edge.active
        link = self.up
        if link is None or link.conn is not conn or router.links.get(link.pn) is not link:
            p = lib.pn_sender(edge.session(conn), cbytes(f"edge.containers.{router.id}"))
            lib.pn_terminus_set_address(lib.pn_link_target(p), cbytes(CONTAINERS_NODE))
            link = self.up = router.register_link(p, conn, incoming=False)
            link.kind = "control"  # pre-settled reports, never routed
            link.address = CONTAINERS_NODE
            lib.pn_link_open(p)
            self.up_sent = None
        here = frozenset(self.table.served() | {router.id})
        if here != self.up_sent:
            self.up_sent = here
            router.send_control(
                link, bytes(ProtonMessage(body={"containers": sorted(here)}).encode())
            )

    def on_edge_report(self, msg: Message, fwd: Forward | None, origin: Link | None) -> None:
        """An edge router's containers (on an interior): served here as if connected here."""
        forwarder = self.router.fwd
        conn = origin.conn if origin is not None else None
        if conn is None or conn.role != "edge" or not conn.inbound:
            forwarder.reject_incoming(
                fwd, "amqp:unauthorized-access", "only edge routers report containers"
            )
            return
        report = ProtonMessage()
        try:
            report.decode(bytes(msg.data))
            listed = report.body["containers"] if isinstance(report.body, dict) else None
            if not isinstance(listed, list) or not all(isinstance(c, str) for c in listed):
                raise ValueError("the body is not a map with a list of strings 'containers'")
        except Exception as err:  # what a peer sends must not end the router
            why = f"bad container report: {err}"[:200]
            forwarder.reject_incoming(fwd, "amqp:decode-error", why)
            return
        if fwd is not None:
            forwarder.settle_incoming(fwd, ACCEPTED)
        self.table.set_below(conn, [c for c in listed if advertisable(c)])
        self.refresh()

    def locate(self, container: str) -> Location | None:
        """Where `container` is, seen from here (not for this router's own id)."""
        network = self.router.network
        cost = network.routes.cost if network is not None else {}
        found = self.table.locate(container, cost)
        if found is None and container in cost:
            return There(container)  # a router that does not advertise itself (qdrouterd)
        if isinstance(found, Across) and getattr(found.conn, "remote_container", None) == container:
            return Here(found.conn)  # the container itself, dialled by a gateway connector
        return found

    def rows(self) -> list[dict[str, Any]]:
        """Management's view: one row per container known here."""
        table = self.table
        me = self.router.id
        rows: list[dict[str, Any]] = [
            {
                "name": me,
                "identity": me,
                "type": CONTAINER,
                "containerId": me,
                "location": "this router",
                "places": [],
                "duplicate": bool(table.places(me)),
            }
        ]
        for container in sorted({*table.local, *table.below, *table.remote, *table.imported}):
            if container == me:
                continue
            where = self.locate(container)
            rows.append(
                {
                    "name": container,
                    "identity": container,
                    "type": CONTAINER,
                    "containerId": container,
                    "location": _where(where),
                    "places": table.places(container),
                    "duplicate": table.duplicated(container),
                }
            )
        return rows

    # ----- links ---------------------------------------------------------------------------

    def attach(self, link: Link) -> bool:
        """A peer attached `link`: if its address is `(c)/node`, relay it toward `c` (or
        refuse it) and return True. When `c` is this router, `link.address` is set to what the
        link serves here and False returned: the engine attaches it as any other link."""
        p = link.pn
        terminus = lib.pn_link_remote_target(p) if link.incoming else lib.pn_link_remote_source(p)
        if lib.pn_terminus_is_dynamic(terminus):
            return False
        address = text(lib.pn_terminus_get_address(terminus))
        if not address:
            return False
        me = self.router.id
        dest = parse(address, me)
        if dest.kind is not Kind.CONTAINER:
            return False
        linkrouter = self.router.linkrouter
        link.address = address
        parts = split_container(dest.address)
        if parts is None or not parts[1]:
            linkrouter.refuse(
                link, "amqp:invalid-field", f"{address!r}: a container address needs a node"
            )
            return True
        container, node = parts
        there = None  # the address beyond this router: changed only when `()` is resolved
        if not container:
            user = text(lib.pn_transport_get_user(link.conn.transport))
            # The terminus's node properties, then the attach's link properties over them.
            properties: dict[Any, Any] = {}
            for found in (lib.pn_terminus_properties(terminus), lib.pn_link_remote_properties(p)):
                value = data_get(found)
                if isinstance(value, dict):
                    properties.update(value)
            facts = link_facts(node, properties, user)
            container = resolve(self.router.config.gateway, facts) or ""
            if not container:
                linkrouter.refuse(
                    link,
                    NOT_FOUND,
                    f"no gateway rule picks a container for {address!r} from this link's"
                    " (or its terminus's) properties, and there is no default container",
                )
                return True
            there = f"({container})/{node}"
        if not self.visible(link.conn, container):
            linkrouter.refuse(link, NOT_FOUND, f"no container {container!r} for {address!r}")
            return True
        if container == me:
            # Ends here: a receiver consumes `node` here; a sender's messages keep the
            # container form (resolved, if it was `()`), whose handler delivers to this
            # router's consumers only.
            link.address = (there or address) if link.incoming else node
            return False
        self.relay(link, container, node, there or address)
        return True

    def relay(self, link: Link, container: str, node: str, there: str) -> None:
        """Relay `link` toward `container`: to `node` on the container itself, as `there`
        (`(container)/node`) to the next router. Hosted queues and topics go to their host
        this way too (router/nodes/). The answer comes back to the peer in the address it
        attached (router/addressing/rewrite.py)."""
        linkrouter = self.router.linkrouter
        p = link.pn
        asked = text(
            lib.pn_terminus_get_address(
                lib.pn_link_remote_target(p) if link.incoming else lib.pn_link_remote_source(p)
            )
        )
        where = self.locate(container)
        conn: Any = None
        if isinstance(where, Here):
            conn, there = where.conn, node
        elif isinstance(where, Below | Across):
            conn = where.conn
        elif isinstance(where, There):
            network = self.router.network
            neighbor = network.next_hop(where.router) if network is not None else None
            if neighbor is None or neighbor.conn is link.conn:
                linkrouter.refuse(link, NOT_FOUND, f"no path to container {container!r}")
                return
            conn = neighbor.conn
        elif (uplink := self.uplink()) is not None and uplink is not link.conn:
            conn = uplink
        if conn is not None:
            back = between(asked, there, node) if asked is not None else None
            linkrouter.relay(link, conn, there, back)
        else:
            linkrouter.refuse(
                link, NOT_FOUND, f"no container {container!r} in the network (for {there!r})"
            )

    def visible(self, origin: Connection, container: str) -> bool:
        """What comes in over a gateway connection reaches only what this network exports."""
        return origin.role != "gateway" or self.router.gateways.exports(container)

    def uplink(self) -> Connection | None:
        edge = self.router.edge
        if edge is not None and edge.uplink is not None:
            return edge.uplink.conn
        return None

    # ----- messages ------------------------------------------------------------------------

    def on_message(self, msg: Message, fwd: Forward | None, origin: Link | None) -> None:
        """The forwarder's handler for every `(c)/node` address (`CONTAINER_KEY`)."""
        router = self.router
        forwarder = router.fwd
        me = router.id
        parts = split_container(parse(msg.address, me).address)
        if parts is None or not parts[1]:
            self.router.fwd.reject_incoming(
                fwd, "amqp:invalid-field", f"{msg.address!r}: no node to deliver to"
            )
            return
        container, node = parts
        if not container:
            try:
                facts = message_facts(msg.data, node)
            except ValueError as err:
                self.router.fwd.reject_incoming(fwd, "amqp:decode-error", str(err))
                return
            container = resolve(router.config.gateway, facts) or ""
            if not container:
                forwarder.drop(fwd)  # released: no rule, no default
                return
            msg.address = f"({container})/{node}"
        if origin is not None and not self.visible(origin.conn, container):
            forwarder.drop(fwd)
            return
        if container == me:
            self.deliver_here(node, msg, fwd, origin)
            return
        where = self.locate(container)
        if isinstance(where, Here):
            self.deliver_to(where.conn, node, msg, fwd, origin)  # type: ignore[arg-type]
        elif isinstance(where, Below):
            edge_id = getattr(where.conn, "remote_container", "")
            self.route(f"_edge/{edge_id}/({container})/{node}", msg, fwd, origin)
        elif isinstance(where, Across):
            msg.address = f"({container})/{node}"
            router.gateways.deliver(where.conn, msg, fwd, origin)  # type: ignore[arg-type]
        elif isinstance(where, There):
            self.route(f"_topo/0/{where.router}/({container})/{node}", msg, fwd, origin)
        elif (
            (edge := router.edge) is not None
            and edge.uplink is not None
            and (origin is None or origin.conn is not edge.uplink.conn)
        ):
            forwarder.deliver(edge.uplink, msg, fwd, origin)
        else:
            forwarder.drop(fwd)  # released: the container may be back later

    def route(self, address: str, msg: Message, fwd: Forward | None, origin: Link | None) -> None:
        """On toward the router (or edge) that has the container, routed on `address`, which
        travels as the to-override so every router on the way, qdrouterd too, routes on it."""
        forwarder = self.router.fwd
        msg.address = address
        entry = forwarder.entry(address)
        forwarder.route(msg, entry, fwd, origin)
        forwarder.forget_if_idle(entry)

    def deliver_here(
        self, node: str, msg: Message, fwd: Forward | None, origin: Link | None
    ) -> None:
        """`(this router)/node`: a queue or topic hosted here, the consumers of `node` attached
        here, or a node of the router's own ($management); never another router's."""
        if self.router.nodes.message(node, msg, fwd):
            return  # a queue or topic hosted here
        forwarder = self.router.fwd
        entry = forwarder.entry(node)
        consumers = entry.consumers
        if consumers:
            if entry.rule.distribution == "multicast":
                for link in consumers:
                    forwarder.deliver(link, msg, fwd, origin)
            else:
                best = min(consumers, key=lambda lk: lk.outstanding)
                forwarder.deliver(best, msg, fwd, origin)
        elif entry.key in forwarder.local_handlers:
            forwarder.local_handlers[entry.key](msg, fwd, origin)
        else:
            forwarder.drop(fwd)
        forwarder.forget_if_idle(entry)

    def deliver_to(
        self, conn: Connection, node: str, msg: Message, fwd: Forward | None, origin: Link | None
    ) -> None:
        """Hand the message to the container on `conn`: on our link to `node`, or on one
        anonymous link if it offers ANONYMOUS-RELAY."""
        anonymous = conn in self.relaying
        key = (conn, None if anonymous else node)
        link = self.senders.get(key)
        if link is None or self.router.links.get(link.pn) is not link:
            link = self.senders[key] = self.attach_sender(conn, None if anonymous else node)
        self.router.fwd.deliver(link, msg, fwd, origin)

    def attach_sender(self, conn: Connection, node: str | None) -> Link:
        router = self.router
        name = f"{router.id}.container.{next(self.link_ids)}"
        p = lib.pn_sender(router.linkrouter.session(conn), cbytes(name))
        if node is not None:
            lib.pn_terminus_set_address(lib.pn_link_target(p), cbytes(node))
        link = router.register_link(p, conn, incoming=False)
        link.address = node
        lib.pn_link_open(p)
        router.fwd.touched.add(conn)
        log.debug("container.link", conn=conn.conn_id, container=conn.remote_container, node=node)
        return link


def offered(conn: Connection) -> list[str]:
    """The capabilities `conn`'s peer offered in its Open."""
    value = data_get(lib.pn_connection_remote_offered_capabilities(conn.pn))
    if value is None:
        return []
    items = getattr(value, "elements", value)  # an array of symbols, or just one
    return [str(v) for v in items] if isinstance(items, list | tuple) else [str(items)]


def _where(location: Location | None) -> str:
    if isinstance(location, Here):
        return f"connection {getattr(location.conn, 'conn_id', '?')}"
    if isinstance(location, Below):
        return f"edge {getattr(location.conn, 'remote_container', '?')}"
    if isinstance(location, Across):
        return f"gateway {getattr(location.conn, 'conn_id', '?')}"
    if isinstance(location, There):
        return f"router {location.router}"
    return "unreachable"
