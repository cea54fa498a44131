"""The data path: which consumer gets a message, credit, and outcomes travelling back.

Messages stay encoded bytes end to end. Router annotations are rewritten only for an egress
connection that keeps them (stripAnnotations off for that direction); the common client-to-client
case forwards the received bytes untouched. Every unsettled incoming delivery is tracked by a
`Forward` until an outcome (from a consumer, or the router's own release) settles it.
"""

from __future__ import annotations

import struct
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Final

from router.addressing import AddressRule, AddressTable, parse
from router.datapath import pnfast
from router.datapath.links import Forward, Link, Queued
from router.datapath.sections import EMPTY_ANNOTATIONS, RouterAnnotations, Scan, rewrite, scan
from router.datapath.stats import RouterStats
from router.telemetry.flows import FlowCounters, Flows
from router.transport.pn import copy_condition, data_get, data_put, ffi, lib, set_condition

if TYPE_CHECKING:
    from collections.abc import Callable

    from router.core.interrouter import Network
    from router.datapath.streaming import Stream
    from router.edges.uplink import Edge
    from router.transport.connection import Connection

ACCEPTED: Final = lib.PN_ACCEPTED
REJECTED: Final = lib.PN_REJECTED
RELEASED: Final = lib.PN_RELEASED
MODIFIED: Final = lib.PN_MODIFIED
TERMINAL: Final = frozenset((ACCEPTED, REJECTED, RELEASED, MODIFIED))
# Output a consumer has not read beyond which the router stops sending it more: its deliveries
# wait in the router's queues instead, where they hold back the senders' credit.
BACKED_UP_BYTES: Final = 1024 * 1024
# Deliveries from other routers a consumer may have waiting before more are released.
NETWORK_QUEUE_LIMIT: Final = 1000
# Delivery tags: Proton copies the tag into the delivery, so one scratch buffer serves every send.
_TAG_BYTES: Final = ffi.new("char[8]")
TAG: Final = ffi.new("pn_bytes_t *", {"size": 8, "start": _TAG_BYTES})
TAG_VIEW: Final = ffi.buffer(_TAG_BYTES)
pack_tag: Final = struct.Struct("<Q").pack_into
# Distribution hints in mobile address updates, as Dispatch encodes them.
HINTS: Final = {"multicast": 1, "closest": 2, "balanced": 3}
# When several consumers answer one multicast delivery, the strongest outcome wins.
PRECEDENCE: Final = {REJECTED: 4, ACCEPTED: 3, MODIFIED: 2, RELEASED: 1, 0: 0}
# Final names of a compiled module live in C statics: no lookup by name per message.
credit: Final = pnfast.credit
outcome: Final = pnfast.outcome
send: Final = pnfast.send
settle: Final = pnfast.settle


class Message:
    """A received message: its bytes, where its sections are, and its effective annotations.

    `read.present` says the bytes carry router annotations that a stripping egress must remove.
    The egress variants are computed at most once each, so a multicast rewrites once, not per
    copy, and each reuses the parse of the annotations made on arrival. `sample` is the ingress
    router's clock in ns on a message sampled for transit latency (0: not sampled), whether it
    came stamped or was stamped here; `entry` the address entry it is routed on, for the
    per-address transit count.
    """

    __slots__ = (
        "_annotated",
        "_network",
        "_plain",
        "address",
        "ann",
        "data",
        "entry",
        "read",
        "sample",
        "scan",
        "stream",
    )

    def __init__(
        self,
        data: bytes | bytearray,
        scan: Scan,
        ann: RouterAnnotations,
        read: RouterAnnotations,
        address: str,
    ) -> None:
        self.data = data
        self.scan = scan
        self.ann = ann  # the annotations routing honours (none when stripped on the way in)
        self.read = read  # what the bytes carry; rewrites reuse its parse
        self.sample: int = ann.sample or 0
        self.entry: AddressEntry | None = None
        self._plain: bytes | bytearray | None = None
        self._annotated: bytes | None = None
        self._network: tuple[str, bytes] | None = None
        # the address it is routed on (a redirect changes it); carried between routers as
        # the to-override
        self.address = address
        # set when `data` is only the head of a message still arriving
        # (router/datapath/streaming.py)
        self.stream: Stream | None = None

    def plain(self) -> bytes | bytearray:
        read = self.read
        if not read.present:
            return self.data
        if self._plain is None:
            self._plain = read.stripped(self.data, self.scan)
        return self._plain

    def annotated(self, me: str) -> bytes:
        if self._annotated is None:
            ann = self.ann
            trace = None if ann.trace is None else (*ann.trace, me)
            self._annotated = rewrite(
                self.data,
                self.scan,
                ingress=ann.ingress or me,
                trace=trace,
                to=ann.to,
                phase=ann.phase,
                sample=self.sample or None,
                origin=ann.origin,
                read=self.read,
            )
        return self._annotated

    def networked(self, me: str) -> bytes:
        """The bytes for an inter-router link: ingress set, our hop traced, the routing address
        carried as to-override so the next router routes on what we routed on."""
        cached = self._network
        if cached is None or cached[0] != self.address:
            ann = self.ann
            sample = self.sample
            if (
                ann is self.read
                and (ann.present or self.scan.ma_start == self.scan.ma_end)
                and (not sample or ann.sample == sample)
            ):
                # The usual case: the new section depends on the shared parse alone.
                data = ann.forwarded(self.data, self.scan, self.address, me)
            else:
                data = rewrite(
                    self.data,
                    self.scan,
                    ingress=ann.ingress or me,
                    trace=(*(ann.trace or ()), me),
                    to=self.address,
                    phase=ann.phase,
                    sample=sample or None,
                    origin=ann.origin,
                    read=self.read,
                )
            cached = self._network = (self.address, data)
        return cached[1]


def flow_ingress(ann: RouterAnnotations, me: str) -> str:
    """Where a message entered the network, for its flow row: the edge it came from (`origin`),
    else the ingress router, else this one."""
    return ann.origin or ann.ingress or me


# A path toward another router with consumers: (its id, cost, data link, next-hop router id).
Path = tuple[str, int, "Link", "str | None"]


class AddressEntry:
    """Routing-table entry for one address key: its consumers, senders and held deliveries."""

    __slots__ = (
        "address",
        "consumers",
        "dropped",
        "egress",
        "flows",
        "held",
        "held_total",
        "ingress",
        "key",
        "paths",
        "redirected",
        "remote",
        "rr",
        "rule",
        "senders",
        "transit",
    )

    def __init__(self, key: str, address: str, rule: AddressRule) -> None:
        self.key = key
        self.address = address
        self.rule = rule
        self.consumers: list[Link] = []
        self.senders: list[Link] = []
        self.held: deque[Queued] = deque()
        self.rr = 0
        # Counters for management and metrics (router/telemetry/metrics.py reads them).
        self.ingress = 0  # received for this address, from clients and routers
        self.egress = 0  # sent to this address's consumers (clients, edges' proxies)
        self.transit = 0  # received from a router and sent on to another
        self.dropped = 0  # reached no consumer: pre-settled dropped, unsettled released
        self.held_total = 0  # ever held for a consumer to come (undeliverable: hold)
        self.redirected = 0  # sent to the fallback address instead
        # ingress router ("0/R1") -> this router's flow counters as egress (telemetry on)
        self.flows: dict[str, FlowCounters] = {}
        # other routers with consumers for this address -> their distribution hint
        self.remote: dict[str, int] = {}
        # (Forwarder.epoch, priority, Forwarder.remote_paths()) as last computed
        self.paths: tuple[int, int, list[Path]] | None = None

    @property
    def idle(self) -> bool:
        return not (self.consumers or self.senders or self.held or self.remote)


class Forwarder:
    def __init__(
        self, router_id: str, table: AddressTable, stats: RouterStats, clock: Callable[[], float]
    ) -> None:
        self.router_id = router_id
        self.me = f"0/{router_id}"
        self.table = table
        self.stats = stats
        self.clock = clock
        # The loop's time for this turn: cheaper than a clock call per delivery.
        self.now = clock()
        self.entries: dict[str, AddressEntry] = {}
        self.touched: set[Connection] = set()
        self.credit_dirty: set[Link] = set()
        self.holding: set[AddressEntry] = set()
        self.local_handlers: dict[str, Callable[[Message, Forward | None, Link | None], None]] = {}
        # Set when the router is part of a network (interior mode), or hangs off one (edge).
        self.network: Network | None = None
        self.edge: Edge | None = None
        self.remote_keys: dict[str, set[str]] = {}
        # Bumped whenever a path to another router may have changed (topology, inter-router
        # links, other routers' addresses): entries' cached paths older than this are stale.
        self.epoch = 0
        # Set when the router drains before it stops (router/core/drain.py): clients' senders get
        # no more credit and nothing is held for a consumer to come.
        self.draining = False
        # Telemetry (router/telemetry/): the flow table, None when switched off; deliveries
        # received and sent, for the router record.
        self.flows: Flows | None = None
        self.received = 0
        self.sent = 0
        # Large messages forwarded as they arrive (router/datapath/streaming.py): how many are under
        # way, those that may read more now, those waiting for their consumers, and whether
        # one finished since housekeeping last gave memory back.
        self.streaming = 0
        self.resume: set[Stream] = set()
        self.paused: set[Stream] = set()
        self.large_done = False
        # Queues and topics the network hosts (router/nodes/hosting.py): offered each message
        # that reaches no consumer here, before the address's undeliverable policy; True if it
        # took the message.
        self.hosted: Callable[[Message, Forward | None, Link | None], bool] | None = None

    # ----- routing table -------------------------------------------------------------------

    def entry_for_key(self, key: str) -> AddressEntry:
        """The entry for a mobile hash key learnt from another router (`M0orders`)."""
        entry = self.entries.get(key)
        if entry is None:
            address = key[2:]
            entry = AddressEntry(key, address, self.table.lookup(address))
            self.entries[key] = entry
        return entry

    def entry(self, address: str) -> AddressEntry:
        dest = parse(address, self.router_id)
        entry = self.entries.get(dest.key)
        if entry is None:
            entry = AddressEntry(dest.key, dest.address, self.table.lookup(dest.address))
            self.entries[dest.key] = entry
        return entry

    def forget_if_idle(self, entry: AddressEntry) -> None:
        if entry.consumers or entry.remote:
            return  # the usual answer, on the path of every message from an anonymous sender
        if entry.idle and self.entries.get(entry.key) is entry:
            del self.entries[entry.key]
            if entry.flows:
                entry.flows.clear()  # its flow rows may go once idle (telemetry/flows.py)

    def set_table(self, table: AddressTable) -> None:
        """Apply new address rules to every known address, in place."""
        self.table = table
        for entry in self.entries.values():
            entry.rule = table.lookup(entry.address)
            self.credit_dirty.update(entry.senders)

    def reachable(self, entry: AddressEntry) -> bool:
        if entry.consumers or entry.remote or entry.key in self.local_handlers:
            return True
        if self.edge is not None:
            return self.edge.reachable(entry)
        if entry.key[0] == "R":
            return self.network is not None and entry.key[1:] in self.network.routes.cost
        return self.redirected_reachably(entry)

    def redirected_reachably(self, entry: AddressEntry) -> bool:
        """An address with no destination of its own whose messages go to a fallback that
        has one."""
        rule = entry.rule
        if rule.undeliverable == "redirect" and rule.fallback:
            fallback = self.entry(rule.fallback)
            return bool(fallback.consumers or fallback.remote)
        return False

    def add_consumer(self, link: Link, entry: AddressEntry) -> None:
        link.entry = entry
        entry.consumers.append(link)
        if len(entry.consumers) == 1 and entry.key[0] == "M":
            if self.network is not None:
                self.network.control.add_local(entry.key, HINTS[entry.rule.distribution])
            elif self.edge is not None and link.kind == "endpoint":
                self.edge.add_local(entry.address)
        self.became_reachable(entry)

    def became_reachable(self, entry: AddressEntry) -> None:
        """A destination appeared: senders get credit, held deliveries go."""
        self.credit_dirty.update(entry.senders)
        if entry.held:
            held, entry.held = entry.held, deque()
            self.holding.discard(entry)
            for q in held:
                self.unblock(q)
                self.route(q.msg, entry, q.fwd, q.origin)

    def add_sender(self, link: Link, entry: AddressEntry) -> None:
        link.entry = entry
        entry.senders.append(link)
        self.credit_dirty.add(link)
        if self.edge is not None and link.kind == "endpoint":
            self.edge.sender_added(entry)

    def unregister(self, link: Link) -> None:
        """Take a departing link out of the routing table so nothing new is routed to it."""
        entry = link.entry
        self.credit_dirty.discard(link)
        if entry is None:
            return
        if link in entry.senders:
            entry.senders.remove(link)
            edge = self.edge
            if edge is not None and link.kind == "endpoint":
                edge.sender_removed(entry)
        if link in entry.consumers:
            entry.consumers.remove(link)
            if not entry.consumers and entry.key[0] == "M":
                if self.network is not None:
                    self.network.control.remove_local(entry.key)
                elif self.edge is not None:
                    self.edge.remove_local(entry.address)

    def resolve(self, link: Link, conn_dead: bool) -> None:
        """Settle what a departed link had in flight: nothing is lost silently.

        A departed sender can no longer learn outcomes, but the copies already made complete.
        A departed consumer's unsettled deliveries are released to their senders (who may send
        them again; modified with delivery-failed when the consumer was another router, which
        may have passed them on); deliveries it never received are routed again.

        An incoming link detached while its connection lasts answers every delivery first:
        Proton settles what is left when the link is freed, without an outcome, which a router
        sending on it reads as accepted (pnfast's `outcome`). Copies on their way to consumers
        are modified with delivery-failed (maybe delivered); deliveries not read yet (they
        arrived in the same read as what ended the link) are released.
        """
        entry, link.entry = link.entry, None
        stream = link.stream
        if stream is not None:
            if link.incoming:
                whole = stream.fwd
                owed = None if whole is None or conn_dead or stream.done else whole.in_d
                stream.abort()  # the sender is gone: the copies cannot be completed
                if owed is not None:
                    settle(owed, RELEASED)  # its copies aborted: delivered to nobody
            else:
                copy = stream.copy_gone(link, conn_dead)
                if copy is not None and copy.owed is not None:
                    self.copy_done(copy.owed, RELEASED, None)
        if link.incoming:
            for fwd in link.unsettled.values():
                if not conn_dead and fwd.in_d is not None:
                    lib.pn_disposition_set_failed(lib.pn_delivery_local(fwd.in_d), True)
                    settle(fwd.in_d, MODIFIED)
                fwd.in_d = None
            link.unsettled.clear()
            if not conn_dead:
                release_unread(link.pn)
        else:
            queued, link.queue = link.queue, deque()
            unsettled, link.unsettled = link.unsettled, {}
            # Sent to another router, a delivery may have reached its consumer already:
            # "modified, delivery-failed" (maybe delivered), as Dispatch answers, not released.
            lost = MODIFIED if link.conn.role in ("inter-router", "edge") else RELEASED
            endpoint = link.kind == "endpoint"
            for od, fwd in unsettled.items():
                if not conn_dead:
                    lib.pn_delivery_settle(od)
                if endpoint and fwd.flow is not None:
                    fwd.flow.released += 1  # handed over, come back: counted where it went
                self.copy_done(fwd, lost, None)
            # A multicast copy is not routed again: the other consumers have theirs already.
            reroute = entry is not None and entry.rule.distribution != "multicast"
            for q in queued:
                self.unblock(q)
                if reroute and entry is not None:
                    if q.fwd is not None:
                        q.fwd.pending -= 1
                    self.route(q.msg, entry, q.fwd, q.origin)
                elif q.fwd is not None:
                    self.copy_done(q.fwd, RELEASED, None)
        if entry is not None:
            self.forget_if_idle(entry)

    # ----- forwarding ----------------------------------------------------------------------

    def route(
        self,
        msg: Message,
        entry: AddressEntry,
        fwd: Forward | None,
        origin: Link | None,
        redirected: bool = False,
    ) -> None:
        consumers = entry.consumers
        if self.edge is not None:
            self.route_edge(msg, entry, fwd, origin, redirected)
            return
        if entry.remote or (self.network is not None and entry.key[0] == "R"):
            self.route_network(msg, entry, fwd, origin, redirected)
            return
        if not consumers:
            handler = self.local_handlers.get(entry.key)
            if handler is not None:
                handler(msg, fwd, origin)
                return
            self.undeliverable(msg, entry, fwd, origin, redirected)
            return
        dist = entry.rule.distribution
        if dist == "multicast":
            for link in consumers:
                if not back_to_edge(link, origin):
                    self.deliver(link, msg, fwd, origin)
            return
        n = len(consumers)
        i = entry.rr % n
        if dist == "balanced" and n > 1:
            best = consumers[i]
            least = best.outstanding
            for k in range(1, n):
                if least == 0:
                    break
                j = (i + k) % n
                cand = consumers[j]
                if cand.outstanding < least:
                    best, least, i = cand, cand.outstanding, j
            entry.rr = i + 1
            self.deliver(best, msg, fwd, origin)
        else:
            entry.rr = i + 1
            self.deliver(consumers[i], msg, fwd, origin)

    def route_network(
        self,
        msg: Message,
        entry: AddressEntry,
        fwd: Forward | None,
        origin: Link | None,
        redirected: bool,
    ) -> None:
        """Routing when other routers may hold destinations: by cost, never back along the
        message's trace, never more than one copy per consumer network-wide."""
        net = self.network
        assert net is not None
        routes = net.routes
        trace = msg.ann.trace
        if trace and len(trace) > routes.radius + 1:
            # The trace is longer than any loop-free path here: drop it rather than loop.
            self.drop(fwd)
            return
        excluded = msg.ann.routers
        priority = entry.rule.priority if entry.rule.priority >= 0 else 4
        consumers = entry.consumers
        if entry.key[0] == "R":
            link = net.data_link(entry.key[1:], priority)
            if link is None or net.link_router(link) in excluded:
                self.undeliverable(msg, entry, fwd, origin, redirected)
            else:
                self.deliver(link, msg, fwd, origin)
            return
        dist = entry.rule.distribution
        if dist == "multicast":
            ingress = msg.ann.ingress
            source = ingress.split("/", 1)[-1] if ingress else self.router_id
            links: dict[int, Link] = {}
            for rid in entry.remote:
                if rid in excluded:
                    continue
                if source != self.router_id and source not in routes.valid_origins.get(rid, ()):
                    continue
                link = net.data_link(rid, priority)
                if link is not None and net.link_router(link) not in excluded:
                    links[id(link)] = link
            targets = [lk for lk in consumers if not back_to_edge(lk, origin)]
            targets += links.values()
            if not targets:
                self.undeliverable(msg, entry, fwd, origin, redirected)
                return
            for link in targets:
                self.deliver(link, msg, fwd, origin)
            return
        best: Link | None = None
        best_score = 0
        if consumers:
            n = len(consumers)
            i = entry.rr % n
            entry.rr = i + 1
            if dist == "closest":
                self.deliver(consumers[i], msg, fwd, origin)
                return
            for k in range(n):
                cand = consumers[(i + k) % n]
                if best is None or cand.outstanding < best_score:
                    best, best_score = cand, cand.outstanding
        paths = entry.paths
        if paths is None or paths[0] != self.epoch or paths[1] != priority:
            paths = entry.paths = (self.epoch, priority, self.remote_paths(entry, priority))
        for rid, cost, link, via in paths[2]:
            if rid in excluded or via in excluded:
                continue
            score = cost if dist == "closest" else cost + link.outstanding
            if best is None or score < best_score:
                best, best_score = link, score
        if best is None:
            self.undeliverable(msg, entry, fwd, origin, redirected)
        else:
            self.deliver(best, msg, fwd, origin)

    def remote_paths(self, entry: AddressEntry, priority: int) -> list[Path]:
        """The routers with consumers for `entry` that have a path, in id order (so that equal
        scores go to the lowest id, as Dispatch breaks ties): (id, cost, data link, the
        neighbor it leads to). Kept per entry until `epoch` moves: the same for every
        message."""
        net = self.network
        assert net is not None
        paths = []
        for rid in sorted(entry.remote):
            cost = net.routes.cost.get(rid)
            link = net.data_link(rid, priority)
            if cost is not None and link is not None:
                paths.append((rid, cost, link, net.link_router(link)))
        return paths

    def route_edge(
        self,
        msg: Message,
        entry: AddressEntry,
        fwd: Forward | None,
        origin: Link | None,
        redirected: bool,
    ) -> None:
        """On an edge: local consumers first; otherwise (and for multicast, also) the uplink,
        unless the message came down from it."""
        assert self.edge is not None
        uplink = self.edge.uplink
        if origin is not None and uplink is not None and origin.conn is uplink.conn:
            uplink = None
        if entry.key[0] == "L":
            uplink = None
        consumers = entry.consumers
        dist = entry.rule.distribution
        if dist == "multicast" and consumers:
            for link in consumers:
                self.deliver(link, msg, fwd, origin)
            if uplink is not None:
                self.deliver(uplink, msg, fwd, origin)
        elif consumers:
            i = entry.rr % len(consumers)
            entry.rr = i + 1
            if dist == "balanced":
                best = min(consumers, key=lambda lk: lk.outstanding)
                self.deliver(best, msg, fwd, origin)
            else:
                self.deliver(consumers[i], msg, fwd, origin)
        elif entry.key in self.local_handlers:
            self.local_handlers[entry.key](msg, fwd, origin)
        elif uplink is not None:
            self.deliver(uplink, msg, fwd, origin)
        else:
            self.undeliverable(msg, entry, fwd, origin, redirected)

    def uplink_changed(self) -> None:
        """An edge's uplink came up: every address may now be reachable through it."""
        for entry in list(self.entries.values()):
            if self.reachable(entry):
                self.became_reachable(entry)

    def routes_changed(self) -> None:
        """Paths changed: destinations may have become (un)reachable."""
        self.epoch += 1
        for entry in list(self.entries.values()):
            if (entry.remote or entry.key[0] == "R") and self.reachable(entry):
                self.became_reachable(entry)

    def remote_address_changes(
        self, router_id: str, added: dict[str, int], removed: list[str]
    ) -> None:
        """What changed in another router's mobile addresses: added (or with a new hint), and
        gone (all of them when the router is)."""
        self.epoch += 1
        keys = self.remote_keys.setdefault(router_id, set())
        for key in removed:
            keys.discard(key)
            entry = self.entries.get(key)
            if entry is not None:
                entry.remote.pop(router_id, None)
                self.forget_if_idle(entry)
        for key, hint in added.items():
            entry = self.entry_for_key(key)
            entry.remote[router_id] = hint
            if key not in keys:
                keys.add(key)
                self.became_reachable(entry)
        if not keys:
            del self.remote_keys[router_id]

    def undeliverable(
        self,
        msg: Message,
        entry: AddressEntry,
        fwd: Forward | None,
        origin: Link | None,
        redirected: bool,
    ) -> None:
        hosted = self.hosted
        if hosted is not None and hosted(msg, fwd, origin):
            return
        rule = entry.rule
        action = rule.undeliverable
        if action == "redirect" and rule.fallback and not redirected:
            self.stats.deliveriesRedirectedToFallback += 1
            entry.redirected += 1
            msg.address = rule.fallback
            fallback = msg.entry = self.entry(rule.fallback)
            self.route(msg, fallback, fwd, origin, redirected=True)
            return
        if action == "hold" and not self.draining and msg.stream is None:
            held = Queued(msg, fwd, origin, self.clock() + rule.hold_timeout)
            entry.held.append(held)
            entry.held_total += 1
            self.holding.add(entry)
            self.block(held, None)
            return
        self.count_undeliverable(msg, entry, fwd)
        self.drop(fwd)

    def count_undeliverable(self, msg: Message, entry: AddressEntry, fwd: Forward | None) -> None:
        """A delivery reached no consumer here: counted per address, and in the flow row of
        its ingress router with no egress."""
        entry.dropped += 1
        flows = self.flows
        if flows is not None:
            row = flows.row(entry.address, flow_ingress(msg.ann, self.me), False)
            if fwd is None:
                row.dropped += 1
            else:
                row.released += 1

    def drop(self, fwd: Forward | None) -> None:
        """No consumer: pre-settled messages are counted as dropped, unsettled ones released."""
        if fwd is None:
            self.stats.droppedPresettledDeliveries += 1
        else:
            fwd.pending += 1
            self.copy_done(fwd, RELEASED, None)

    def block(self, q: Queued, toward: Link | None) -> None:
        """A delivery now waits in the router: it holds back its sender's credit, so waiting is
        bounded by linkCapacity per incoming link. Not so for a delivery from another router
        waiting for a client consumer: one slow consumer must not stall every address sharing
        the inter-router connection (its waiting is bounded per consumer instead, see
        deliver). Transit toward another router does hold back: back-pressure then travels
        hop by hop to the senders."""
        stream = q.msg.stream
        if stream is not None:
            stream.queued()
        origin = q.origin
        if origin is not None and (
            origin.kind == "endpoint" or (toward is not None and toward.kind != "endpoint")
        ):
            origin.backlog += 1
            q.counted = True

    def unblock(self, q: Queued) -> None:
        if q.counted:
            assert q.origin is not None
            q.origin.backlog -= 1
            self.credit_dirty.add(q.origin)
        stream = q.msg.stream
        if stream is not None:
            stream.unqueued()

    def deliver(self, link: Link, msg: Message, fwd: Forward | None, origin: Link | None) -> None:
        queue = link.queue
        if (
            len(queue) >= NETWORK_QUEUE_LIMIT
            and origin is not None
            and origin.kind != "endpoint"
            and link.kind == "endpoint"
        ):
            # A consumer this far behind gets nothing more from the network: the copy goes back
            # to its sender released (or, pre-settled, is dropped and counted).
            self.drop(fwd)
            return
        if fwd is not None:
            fwd.pending += 1
        if (
            not queue
            and link.stream is None
            and credit(link.pn) > 0
            and not (link.conn.want_write and congested(link))
        ):
            self.send(link, msg, fwd)
        else:
            # No credit, or the consumer is not reading what it has credit for:
            # wait here, where it counts against the sender's credit, not in Proton's buffers.
            q = Queued(msg, fwd, origin)
            link.queue.append(q)
            self.block(q, link)

    def send(self, link: Link, msg: Message, fwd: Forward | None) -> None:
        conn = link.conn
        stats = self.stats
        data: bytes | bytearray
        if link.kind == "endpoint":
            data = msg.plain() if conn.strip_out else msg.annotated(self.me)
            stats.deliveriesEgress += 1
            if conn.role == "route-container":
                stats.deliveriesEgressRouteContainer += 1
            if self.flows is not None and link.entry is not None:
                self.count_flow(link.entry, link, msg, fwd, len(data))
        else:
            data = msg.networked(self.me)
            if msg.ann.ingress is not None:
                stats.deliveriesTransit += 1  # came from another router, goes on to another
                if msg.entry is not None:
                    msg.entry.transit += 1
        self.sent += 1
        link.delivered += 1
        if link.entry is not None:
            link.entry.egress += 1
        link.tag += 1
        stream = msg.stream
        if stream is not None:
            # The head of a message still arriving: the rest follows, then the advance.
            od = send(link.pn, link.tag, data, False, False)
            if fwd is None or link.presettle:
                link.presettled += 1
            stream.started(link, od, fwd)
            self.touched.add(conn)
            return
        # An at-most-once consumer (presettle): sending is delivering, as far as the sender
        # can know.
        presettled = fwd is None or link.presettle
        od = send(link.pn, link.tag, data, True, presettled)
        if fwd is None:
            link.presettled += 1
        elif presettled:
            link.presettled += 1
            self.copy_done(fwd, ACCEPTED, None)
        else:
            link.unsettled[od] = fwd
        self.touched.add(conn)

    def count_flow(
        self, entry: AddressEntry, link: Link, msg: Message, fwd: Forward | None, size: int
    ) -> None:
        """This router hands a message to a consuming client: it is the egress. Its outcome,
        when one comes, is counted in the same row (`Forward.flow`)."""
        ingress = flow_ingress(msg.ann, self.me)
        row = entry.flows.get(ingress)
        if row is None:
            assert self.flows is not None
            row = self.flows.row(entry.address, ingress, True)
            row.owner, row.key = entry.flows, ingress
            entry.flows[ingress] = row
        row.deliveries += 1
        row.bytes += size
        if msg.sample:
            row.observe((time.time_ns() - msg.sample) / 1000.0)
        if fwd is None or link.presettle:
            row.presettled += 1
        else:
            fwd.flow = row

    def pump(self, link: Link) -> None:
        """Credit arrived on an outgoing link: send what waits for it, in order."""
        queue = link.queue
        p = link.pn
        if congested(link):
            return
        while queue and credit(p) > 0 and link.stream is None:
            q = queue.popleft()
            self.unblock(q)
            self.send(link, q.msg, q.fwd)
        if not queue and lib.pn_link_get_drain(p) and lib.pn_link_credit(p) > 0:
            lib.pn_link_drained(p)
            self.touched.add(link.conn)

    # ----- outcomes ------------------------------------------------------------------------

    def outgoing_update(self, link: Link, od: Any) -> None:
        """A consumer changed a delivery's state: finish it once the outcome is terminal."""
        fwd = link.unsettled.get(od)
        if fwd is None:
            return
        state = outcome(od)
        if not state:
            return
        del link.unsettled[od]
        row = fwd.flow if link.kind == "endpoint" else None
        if row is not None:
            if state == ACCEPTED:
                row.accepted += 1
            elif state == RELEASED:
                row.released += 1
            elif state == REJECTED:
                row.rejected += 1
            else:
                row.modified += 1
        stream = link.stream
        if stream is not None and stream.copy_finished(link, od):
            # An outcome before the whole message went out: counted, and the copy aborted.
            self.copy_done(fwd, state, od)
            return
        if state == ACCEPTED:
            link.accepted += 1
            if fwd.pending == 1 and not fwd.outcome:
                # The one copy, accepted: nothing to weigh against other outcomes or copy over.
                fwd.pending = 0
                self.settle_incoming(fwd, ACCEPTED)
                settle(od, 0)
                self.touched.add(link.conn)
                return
        elif state == RELEASED:
            link.released += 1
        elif state == REJECTED:
            link.rejected += 1
        else:
            link.modified += 1
        self.copy_done(fwd, state, od)
        lib.pn_delivery_settle(od)
        self.touched.add(link.conn)

    def copy_done(self, fwd: Forward, state: int, od: Any) -> None:
        """One copy of a delivery is finished; settle the sender's delivery after the last one."""
        in_d = fwd.in_d
        if in_d is not None and PRECEDENCE[state] > PRECEDENCE[fwd.outcome]:
            fwd.outcome = state
            if od is not None and state in (REJECTED, MODIFIED):
                copy_disposition(od, in_d, state)
            elif state == MODIFIED:  # the router's own: a copy lost with its link
                lib.pn_disposition_set_failed(lib.pn_delivery_local(in_d), True)
        fwd.pending -= 1
        if fwd.pending > 0 or in_d is None:
            return
        self.settle_incoming(fwd, fwd.outcome)

    def reject_incoming(self, fwd: Forward | None, error: str, why: str) -> None:
        """Refuse a message a node of this router was given, saying why in the rejection."""
        if fwd is not None and fwd.in_d is not None:
            set_condition(lib.pn_disposition_condition(lib.pn_delivery_local(fwd.in_d)), error, why)
            self.settle_incoming(fwd, REJECTED)

    def originate(self, data: bytes | bytearray, address: str) -> None:
        """Route a message this router wrote (an answer to a request, say) to `address`."""
        msg = Message(data, scan(data), EMPTY_ANNOTATIONS, EMPTY_ANNOTATIONS, address)
        entry = self.entry(address)
        self.route(msg, entry, None, None)
        self.forget_if_idle(entry)

    def settle_incoming(self, fwd: Forward, state: int) -> None:
        in_d = fwd.in_d
        if in_d is None:
            return
        fwd.in_d = None
        link = fwd.in_link
        link.unsettled.pop(in_d, None)
        stream = link.stream
        if stream is None or stream.fwd is not fwd:
            settle(in_d, state)
        else:
            lib.pn_delivery_update(in_d, state)
            stream.settle_later = True  # once the rest of it has arrived
        stats = self.stats
        age = self.now - fwd.arrived
        if age > 1.0:
            if age > 10.0:
                stats.deliveriesDelayed10Sec += 1
                link.delayed10 += 1
            else:
                stats.deliveriesDelayed1Sec += 1
                link.delayed1 += 1
        if state == ACCEPTED:
            stats.acceptedDeliveries += 1
        elif state == RELEASED:
            stats.releasedDeliveries += 1
        elif state == REJECTED:
            stats.rejectedDeliveries += 1
        else:
            stats.modifiedDeliveries += 1
        self.touched.add(link.conn)

    # ----- credit and timers ---------------------------------------------------------------

    def refresh_credit(self, link: Link) -> None:
        """Top an incoming link's credit back up to what its capacity leaves room for.

        Credit goes out in batches (when at most half the window is left) so the sender streams;
        a targeted sender gets none while its address has no consumer, and a client's sender
        none while the router drains (links from other routers keep flowing).
        """
        if link.conn.closing or lib.pn_link_state(link.pn) & lib.PN_LOCAL_CLOSED:
            return
        if link.kind == "routed":
            return  # its credit mirrors its partner's (router/linkroutes/relay.py)
        if self.draining and link.kind == "endpoint":
            return
        entry = link.entry
        if entry is not None and not self.reachable(entry):
            return
        credit = lib.pn_link_credit(link.pn)
        used = credit + link.backlog
        if used * 2 <= link.capacity:
            lib.pn_link_flow(link.pn, link.capacity - used)
            self.touched.add(link.conn)

    def expire_held(self, now: float) -> None:
        for entry in list(self.holding):
            held = entry.held
            while held and held[0].deadline <= now:
                q = held.popleft()
                self.unblock(q)
                self.count_undeliverable(q.msg, entry, q.fwd)
                self.drop(q.fwd)
            if not held:
                self.holding.discard(entry)
                self.forget_if_idle(entry)


def congested(link: Link) -> bool:
    """The consumer has credit but is not reading: its socket is full and Proton already holds
    more than BACKED_UP_BYTES for its session."""
    return bool(link.conn.want_write) and (
        lib.pn_session_outgoing_bytes(lib.pn_link_session(link.pn)) > BACKED_UP_BYTES
    )


def back_to_edge(link: Link, origin: Link | None) -> bool:
    """A multicast copy must not go back down to the edge it came up from: that edge has
    already delivered to its own consumers."""
    return origin is not None and origin.kind == "edge" and link.conn is origin.conn


def release_unread(p: Any) -> None:
    """Release the deliveries of incoming link `p` not read yet (settling the current one
    advances to the next); one the sender settled needs no outcome."""
    d = lib.pn_link_current(p)
    while d != ffi.NULL:
        if not lib.pn_delivery_settled(d):
            lib.pn_delivery_update(d, RELEASED)
        lib.pn_delivery_settle(d)
        after = lib.pn_link_current(p)
        if after == d:
            break  # settled before, so not advanced past: nothing more to answer
        d = after


DISCARD_BYTES: Final = 65536
_DISCARD: Final = ffi.new("char[]", DISCARD_BYTES)


def late_delivery(p: Any, d: Any) -> None:
    """A delivery on link `p`, which the router detached and the peer has not answered yet.

    A sender that has not read the detach keeps sending on the link: RabbitMQ 3.10 goes on
    giving a closed receiving link's credit to its consumer, and holds what it sent there
    unacknowledged until the session ends, so a message left unanswered here is gone for the
    link's next consumer. Released, it goes back to the queue. On a link of ours that sent,
    the peer settling a delivery is the end of it."""
    if lib.pn_link_is_receiver(p):
        if lib.pn_link_current(p) == d:  # read and dropped: unread, it fills the session window
            while lib.pn_link_recv(p, _DISCARD, DISCARD_BYTES) > 0:
                pass
        if lib.pn_delivery_partial(d):
            return  # answered once whole
        if not lib.pn_delivery_settled(d):
            lib.pn_delivery_update(d, RELEASED)
        lib.pn_delivery_settle(d)
    elif lib.pn_delivery_settled(d):
        lib.pn_delivery_settle(d)


def new_delivery(link: Link) -> Any:
    link.tag += 1
    pack_tag(TAG_VIEW, 0, link.tag)
    return lib.pn_delivery(link.pn, TAG[0])


def copy_disposition(src_d: Any, dst_d: Any, state: int) -> None:
    """Carry a rejected error or a modified outcome's fields to the sender's delivery."""
    remote = lib.pn_delivery_remote(src_d)
    local = lib.pn_delivery_local(dst_d)
    if state == REJECTED:
        copy_condition(lib.pn_disposition_condition(remote), lib.pn_disposition_condition(local))
    else:
        lib.pn_disposition_set_failed(local, lib.pn_disposition_is_failed(remote))
        lib.pn_disposition_set_undeliverable(local, lib.pn_disposition_is_undeliverable(remote))
        annotations = data_get(lib.pn_disposition_annotations(remote))
        if annotations is not None:
            data_put(lib.pn_disposition_annotations(local), annotations)
