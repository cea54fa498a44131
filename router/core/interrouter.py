"""Inter-router connections: their links, and the control plane's view of the network.

Speaks Qpid Dispatch's inter-router protocol version 1. The connector side of an inter-router
connection attaches the links: one control link each way (capability `qd.router`) and one data
link each way per priority 0..9 (capability `qd.router-data`), each priority in its own session;
the listener side recognises them by capability and takes data links' priorities in the order
they arrive, which is the order the connector creates them. Capabilities go out as a single
symbol, as Dispatch 1.19 sends them and the only form it accepts; any form is taken in, matched
exactly (`qd.router` is a prefix of `qd.router-data`).

Control messages (HELLO, RA, LSR, LSU, MAR, MAU) are small, rare and pre-settled, so they are
decoded with `proton.Message` to be read, but relayed as the bytes that arrived with only the
router annotations rewritten: Dispatch encodes the `opcode` application-property key as a
symbol, which python-qpid-proton will not encode again. The routing itself lives in
`router/network/` (pure) and the forwarder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from proton import Array, symbol
from proton import Message as ProtonMessage

from router.datapath.links import Link
from router.datapath.sections import MessageFormatError, read_annotations, rewrite, scan
from router.datapath.streaming import open_session
from router.log import get_logger
from router.network import ControlPlane, ProtocolError, Routes, Timers
from router.transport.pn import data_get, data_put, lib

if TYPE_CHECKING:
    from router.core.engine import Router
    from router.transport.connection import Connection

log = get_logger("router")

CONTROL = symbol("qd.router")
DATA = symbol("qd.router-data")
PRIORITIES = 10
HELLO_ADDRESS = "amqp:/_local/qdhello"
# The key classes of containers and link routes (router/addressing/dispatch.py).
ROUTE_CLASSES = ("C", "D", "E", "F")


class Neighbor:
    """One inter-router connection and its links; `router_id` is known once HELLOs flow."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.control_in: Link | None = None
        self.control_out: Link | None = None
        self.data_out: list[Link | None] = [None] * PRIORITIES
        self.next_in = 0
        self.next_out = 0
        self.up = False

    @property
    def ready(self) -> bool:
        return self.control_in is not None and self.control_out is not None


class Network:
    """Glue between the engine, the forwarder and the control plane (its `Container`)."""

    def __init__(self, router: Router, timers: Timers, instance: int, now: float) -> None:
        self.router = router
        self.me = router.id
        self.neighbors: dict[Connection, Neighbor] = {}
        self.routes = Routes.empty()
        self.ids: dict[Connection, str] = {}
        self.silent: list[Connection] = []
        # Each router's container and link-route keys, as the container table last had them.
        self.route_keys: dict[str, set[str]] = {}
        self.control = ControlPlane(router.id, instance, self, timers, now)

    # ----- engine hooks --------------------------------------------------------------------

    def connection_opened(self, conn: Connection) -> None:
        neighbor = Neighbor(conn)
        self.neighbors[conn] = neighbor
        if conn.inbound:
            return
        # The connector side attaches every inter-router link.
        session = lib.pn_session(conn.pn)
        open_session(session, conn)
        self.attach(neighbor, session, CONTROL, incoming=True, priority=None)
        self.attach(neighbor, session, CONTROL, incoming=False, priority=None)
        for priority in range(PRIORITIES):
            session = lib.pn_session(conn.pn)
            open_session(session, conn)
            self.attach(neighbor, session, DATA, incoming=True, priority=priority)
            self.attach(neighbor, session, DATA, incoming=False, priority=priority)

    def attach(
        self,
        neighbor: Neighbor,
        session: Any,
        capability: symbol,
        incoming: bool,
        priority: int | None,
    ) -> None:
        kind = "control" if capability == CONTROL else "data"
        direction = "in" if incoming else "out"
        suffix = "" if priority is None else f".{priority}"
        name = f"qd{kind}.{direction}{suffix}.{self.me}".encode()
        p = lib.pn_receiver(session, name) if incoming else lib.pn_sender(session, name)
        for terminus in (lib.pn_link_source(p), lib.pn_link_target(p)):
            data_put(lib.pn_terminus_capabilities(terminus), capability)
        lib.pn_link_set_snd_settle_mode(p, lib.PN_SND_MIXED)
        link = self.router.register_link(p, neighbor.conn, incoming)
        self.adopt(neighbor, link, capability, priority)
        lib.pn_link_open(p)

    def link_attached(self, link: Link) -> bool:
        """A peer attached a link on an inter-router connection; True if it is ours to handle."""
        neighbor = self.neighbors.get(link.conn)
        if neighbor is None:
            return False
        p = link.pn
        caps = capabilities(lib.pn_link_remote_source(p)) + capabilities(
            lib.pn_link_remote_target(p)
        )
        if CONTROL in caps:
            capability = CONTROL
        elif DATA in caps:
            capability = DATA
        else:
            return False
        lib.pn_terminus_copy(lib.pn_link_source(p), lib.pn_link_remote_source(p))
        lib.pn_terminus_copy(lib.pn_link_target(p), lib.pn_link_remote_target(p))
        priority = None
        if capability == DATA:
            if link.incoming:
                priority, neighbor.next_in = neighbor.next_in, neighbor.next_in + 1
            else:
                priority, neighbor.next_out = neighbor.next_out, neighbor.next_out + 1
            priority = min(priority, PRIORITIES - 1)
        self.adopt(neighbor, link, capability, priority)
        lib.pn_link_open(p)
        return True

    def adopt(
        self, neighbor: Neighbor, link: Link, capability: symbol, priority: int | None
    ) -> None:
        link.kind = "control" if capability == CONTROL else "data"
        link.priority = 4 if priority is None else priority
        if link.incoming:
            link.anonymous = True
            if capability == CONTROL:
                neighbor.control_in = link
            self.router.fwd.credit_dirty.add(link)
        elif capability == CONTROL:
            neighbor.control_out = link
        elif priority is not None:
            neighbor.data_out[priority] = link
            self.router.fwd.epoch += 1
        if neighbor.ready and not neighbor.up:
            neighbor.up = True
            self.control.link_up(neighbor.conn, self.cost(neighbor.conn), self.router.fwd.now)

    def cost(self, conn: Connection) -> int:
        props = data_get(lib.pn_connection_remote_properties(conn.pn)) or {}
        remote = props.get(symbol("qd.inter-router-cost"), 1)
        try:
            remote = int(remote)
        except (TypeError, ValueError):
            remote = 1
        return max(conn.cost, remote, 1)

    def forget_link(self, link: Link) -> None:
        """An inter-router link went away: nothing may be routed onto it any more."""
        neighbor = self.neighbors.get(link.conn)
        if neighbor is None:
            return
        if link is neighbor.control_in or link is neighbor.control_out:
            self.connection_closed(link.conn)
            return
        neighbor.data_out = [None if lk is link else lk for lk in neighbor.data_out]
        self.router.fwd.epoch += 1

    def connection_closed(self, conn: Connection) -> None:
        neighbor = self.neighbors.pop(conn, None)
        self.router.fwd.epoch += 1
        if neighbor is not None and neighbor.up:
            self.control.link_down(conn, self.router.fwd.now)

    def tick(self, now: float) -> None:
        self.control.tick(now)
        silent, self.silent = self.silent, []
        for conn in silent:
            if conn in self.neighbors and not conn.dead:
                log.warning("network.neighbor_silent", conn=conn.conn_id, peer=conn.host)
                self.router.close_connection(conn)

    # ----- control messages in -------------------------------------------------------------

    def control_message(self, link: Link, data: bytes | bytearray) -> None:
        msg = ProtonMessage()
        try:
            msg.decode(bytes(data))
            props = msg.properties or {}
            opcode = props.get("opcode")
            if not isinstance(opcode, str) or not isinstance(msg.body, dict):
                raise ProtocolError("control message without opcode or map body")
            to = msg.address or ""
            if not isinstance(to, str):
                raise ProtocolError("control message 'to' is not a string")
        except Exception as e:  # undecodable input from a peer: log it, keep the connection
            log.warning("control.malformed", conn=link.conn.conn_id, error=str(e))
            return
        now = self.router.fwd.now
        if to == HELLO_ADDRESS:
            self.receive(link.conn, opcode, msg.body, now)
            return
        target = topo_router(to)
        if target == "all":
            relayed = self.relayed(data)
            if relayed is None:
                return
            out, exclude, hops = relayed
            if hops > self.routes.radius + 1:
                # A flood copy follows every loop-free path; one longer than the radius (+1 for
                # a radius that is still growing) is a duplicate a shorter path already brought.
                # Dropped, as Dispatch drops it: relayed, the copies grow with every chord.
                log.debug("control.long_path", opcode=opcode, hops=hops)
                return
            self.receive(link.conn, opcode, msg.body, now)
            self.flood(out, exclude)
        elif target == self.me or target is None:
            self.receive(link.conn, opcode, msg.body, now)
        else:
            self.forward(data, target)

    def receive(self, conn: Connection, opcode: str, body: dict[Any, Any], now: float) -> None:
        try:
            self.control.receive(conn, opcode, body, now)
        except ProtocolError as e:
            log.warning("control.invalid", conn=conn.conn_id, opcode=opcode, error=str(e))

    # ----- the control plane's Container ---------------------------------------------------

    def send_hello(self, link: Any, body: dict[str, Any]) -> None:
        neighbor = self.neighbors.get(link)
        if neighbor is not None and neighbor.control_out is not None:
            self.emit(neighbor.control_out, self.message(HELLO_ADDRESS, "HELLO", body))

    def send(self, address: str, opcode: str, body: dict[str, Any]) -> None:
        data = self.message(address, opcode, body)
        target = topo_router(address)
        if target == "all":
            relayed = self.relayed(data)
            if relayed is not None:
                self.flood(relayed[0], relayed[1])
        elif target is not None:
            self.forward(data, target)

    def topology_changed(self, routes: Routes) -> None:
        previous = self.ids
        self.routes = routes
        # The link-state code (router/network/) keys neighbors by our connections.
        self.ids = {cast("Connection", conn): rid for rid, conn in routes.neighbors.items()}
        # A neighbor that stopped answering HELLOs while its connection stays up (frozen, or a
        # network partition without a reset) would keep what is queued for it stuck: close the
        # connection, so that is routed again and the in-doubt deliveries are answered. Done
        # from tick(): the control plane must not be re-entered from its own callback.
        self.silent += [c for c in previous if c not in self.ids and c in self.neighbors]
        self.router.fwd.routes_changed()
        log.info("network.topology", routers=sorted(routes.cost), radius=routes.radius)

    def mobile_changed(self, router_id: str, added: dict[str, int], removed: list[str]) -> None:
        """What changed in a router's advertised keys: mobile addresses (`M`) go to the
        forwarder, containers and link routes (`C`/`D`/`E`/`F`, a few) to the container table
        and the link router, whole; other classes are not routed by key."""
        log.debug("network.addresses", router=router_id, added=len(added), removed=len(removed))
        self.router.fwd.remote_address_changes(
            router_id,
            {key: hint for key, hint in added.items() if key[:1] == "M"},
            [key for key in removed if key[:1] == "M"],
        )
        held = self.route_keys.get(router_id, set())
        routes = (held | {k for k in added if k[:1] in ROUTE_CLASSES}) - set(removed)
        if routes == held:
            return
        if routes:
            self.route_keys[router_id] = routes
        else:
            self.route_keys.pop(router_id, None)
        # Containers travel as link-route keys too (router/containers/table.py).
        routes = self.router.containers.remote_keys(router_id, set(routes))
        self.router.linkrouter.remote_routes(router_id, routes)

    def duplicate_router(self, router_id: str, detail: str) -> None:
        log.error("network.duplicate_router_id", id=router_id, detail=detail)

    # ----- sending -------------------------------------------------------------------------

    def message(self, address: str, opcode: str, body: dict[str, Any]) -> bytes:
        msg = ProtonMessage(address=address, properties={"opcode": opcode}, body=body)
        return bytes(msg.encode())

    def flood(self, out: bytes, exclude: frozenset[str]) -> None:
        """To every neighbor not among the routers `exclude` (the message's trace)."""
        for neighbor in self.neighbors.values():
            rid = self.ids.get(neighbor.conn)
            if neighbor.control_out is not None and (rid is None or rid not in exclude):
                self.emit(neighbor.control_out, out)

    def forward(self, data: bytes | bytearray, router_id: str) -> None:
        neighbor = self.next_hop(router_id)
        relayed = self.relayed(data)
        if neighbor is None or neighbor.control_out is None or relayed is None:
            log.debug("control.unroutable", to=router_id)
            return
        self.emit(neighbor.control_out, relayed[0])

    def relayed(self, data: bytes | bytearray) -> tuple[bytes, frozenset[str], int] | None:
        """The message as it leaves this router (ingress set if absent, this router appended to
        the trace, every other byte as it came), the routers already in its trace and the hops
        it has come (the trace's length); None, and a log line, if its annotations do not
        parse. A trace that is not a list reads as none, as on the data path."""
        try:
            s = scan(data)
            ann = read_annotations(data, s)
            out = rewrite(
                data,
                s,
                ingress=ann.ingress or f"0/{self.me}",
                trace=[*(ann.trace or ()), f"0/{self.me}"],
                to=ann.to,
                phase=ann.phase,
                read=ann,
            )
        except MessageFormatError as e:
            log.warning("control.malformed", error=str(e))
            return None
        return out, ann.routers, len(ann.trace or ())

    def emit(self, link: Link, data: bytes) -> None:
        self.router.send_control(link, data)

    # ----- views ---------------------------------------------------------------------------

    def next_hop(self, router_id: str) -> Neighbor | None:
        """The neighbor on the shortest path to `router_id`, if there is a path."""
        conn = self.routes.next_hop.get(router_id)
        return self.neighbors.get(cast("Connection", conn)) if conn is not None else None

    def data_link(self, router_id: str, priority: int) -> Link | None:
        """The data link toward `router_id`'s next hop for this priority, if there is a path."""
        neighbor = self.next_hop(router_id)
        if neighbor is None:
            return None
        return neighbor.data_out[priority] or next(
            (lk for lk in neighbor.data_out if lk is not None), None
        )

    def link_router(self, link: Link) -> str | None:
        """The neighbor router at the other end of an inter-router link."""
        return self.ids.get(link.conn)

    def mgmt_nodes(self) -> list[str]:
        return [f"amqp:/_topo/0/{rid}/$management" for rid in [self.me, *sorted(self.routes.cost)]]


def topo_router(address: str) -> str | None:
    """The router segment of a `_topo/0/<router>/...` address (with or without `amqp:/`)."""
    path = address.removeprefix("amqp:").lstrip("/")
    parts = path.split("/", 3)
    if len(parts) >= 4 and parts[0] == "_topo":
        return parts[2]
    return None


def capabilities(terminus: Any) -> list[Any]:
    """A terminus's capabilities in whatever form they came: one symbol, a list or an array."""
    caps = data_get(lib.pn_terminus_capabilities(terminus))
    if isinstance(caps, Array):
        return list(caps.elements)
    if isinstance(caps, list | tuple):
        return list(caps)
    return [] if caps is None else [caps]
