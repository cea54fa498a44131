"""The control plane as the engine sees it: one object per router fed with link events, control
messages and the time, answering with messages to send and routing tables.

`ControlPlane` wires the protocol modules together and decides when paths are recomputed; the
protocols themselves live in `hello`, `link_state`, `mobile` and `path`. Nothing here reads a
clock or touches a socket, so whole networks of these run in unit tests.

Every entry point finishes with `_settle`, which applies what the call changed in one pass:
our neighbor set into our link state (new ls_seq and an RA at once), paths recomputed and handed
to the engine, addresses of routers that became unreachable withdrawn, and link-state and
mobile-address requests sent to routers that are now reachable.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from router.log import get_logger
from router.network.contract import Container, Routes, Timers
from router.network.hello import HelloProtocol
from router.network.link_state import LinkStateProtocol, RemoteRouter
from router.network.messages import (
    PROTOCOL_VERSION,
    Hello,
    LinkStateRequest,
    LinkStateUpdate,
    Message,
    MobileAddressRequest,
    MobileAddressSnapshot,
    MobileAddressUpdate,
    RouterAdvertisement,
    from_body,
)
from router.network.mobile import MobileSync
from router.network.path import compute_paths, symmetric_graph

log = get_logger("router")


def _default_link_label(link: Hashable) -> object:
    return link if isinstance(link, int | str) else str(link)


class ControlPlane:
    """Dispatch's router engine (HELLO, link state, paths, mobile-address sync) for one router.

    Call order expected from the engine (single-threaded; none of these re-enter):

    * `link_up(link, cost, now)` once an inter-router connection's control links are attached
      both ways; `link` is any hashable handle the engine will recognise again (its connection);
    * `receive(link, opcode, body, now)` for each control message addressed to us or flooded
      to all routers (after the engine forwarded any flood onward), `link` being the connection
      it arrived on; raises `ProtocolError` for a malformed body, which the engine logs and
      drops;
    * `link_down(link, now)` when that connection closes;
    * `add_local(key, hint)` / `remove_local(key)` when an address gains its first / loses its
      last local consumer;
    * `tick(now)` every `timers.tick_seconds` or so.

    `now` is seconds on any clock that does not jump (monotonic is best); only differences are
    used, except `lastTopoChange` in `nodes()`, which takes the offset to wall-clock time.
    """

    def __init__(
        self,
        router_id: str,
        instance: int,
        container: Container,
        timers: Timers,
        now: float,
    ) -> None:
        self.id = router_id
        self.instance = instance
        self.container = container
        self.timers = timers
        retry = timers.helloIntervalSeconds
        self.hello = HelloProtocol(
            router_id,
            instance,
            container.send_hello,
            timers.helloIntervalSeconds,
            timers.helloMaxAgeSeconds,
        )
        self.mobile = MobileSync(
            router_id,
            container.send,
            container.mobile_changed,
            timers.mobileSyncIntervalSeconds,
            retry,
        )
        self.ls = LinkStateProtocol(
            router_id,
            instance,
            container.send,
            lambda: self.mobile.mobile_seq,
            timers.raIntervalSeconds,
            timers.raIntervalFluxSeconds,
            timers.remoteLsMaxAgeSeconds,
            retry,
        )
        self.routes = Routes.empty()
        self.last_topology_change = now
        self._neighbor_links: dict[str, Hashable] = {}
        self._recompute = False
        self._duplicates_reported: set[tuple[str, int]] = set()

    # ----- engine entry points -----------------------------------------------------------

    def tick(self, now: float) -> None:
        """Timers: HELLOs, neighbor and link-state expiry, mobile batches, periodic RAs."""
        self.hello.tick(now)
        changed, dropped = self.ls.expire(now)
        for rid in dropped:
            self.mobile.forget(rid)
        self._recompute |= changed
        self._settle(now)
        if self.mobile.tick(now):
            self.ls.send_ra(now)  # after the MAU, so nobody asks for what is on its way
        self.ls.periodic_ra(now, self.in_flux(now))

    def busy(self) -> bool:
        """Whether a timer shorter than the HELLO interval runs: local address changes wait
        for their batch (mobileSyncIntervalSeconds)."""
        return self.mobile.pending()

    def in_flux(self, now: float) -> bool:
        """Whether RAs go at the flux interval: for two flux intervals after the topology last
        changed, as Dispatch's node tracker decides (`flux_interval`). Longer, and every router
        of a settled network keeps flooding RAs every few seconds (each RA reaching every
        router over every loop-free path) long after there is anything new to say."""
        return now - self.last_topology_change <= 2 * self.timers.raIntervalFluxSeconds

    def link_up(self, link: Hashable, cost: int, now: float) -> None:
        """A control link to some (not yet known) neighbor is up; `cost` is the larger of both
        sides' configured inter-router costs. Starts the HELLO exchange on it at once."""
        self.hello.link_up(link, cost, now)

    def link_down(self, link: Hashable, now: float) -> None:
        """That link is gone: its neighbor leaves our link state immediately."""
        self.hello.link_down(link)
        self._settle(now)

    def receive(self, link: Hashable, opcode: str, body: Any, now: float) -> None:
        """One control message; raises ProtocolError if its body is malformed."""
        msg = from_body(opcode, body)
        if msg is None:
            log.debug("network.newer_protocol_ignored", opcode=opcode)
            return
        if msg.id == self.id:
            self._check_duplicate(msg)
            return
        match msg:
            case Hello():
                self._on_hello(link, msg, now)
            case RouterAdvertisement():
                record = self._heard(msg.id, now, msg.instance)
                if record is not None:
                    self.ls.on_ra(record, msg, now)
                    self.mobile.advertised(msg.id, msg.mobile_seq)
            case LinkStateRequest():
                if self._heard(msg.id, now) is not None:
                    self.ls.on_lsr(msg)
            case LinkStateUpdate():
                record = self._heard(msg.id, now, msg.instance)
                if record is not None and self.ls.on_lsu(record, msg, now):
                    for peer in msg.ls.peers:
                        if peer != self.id:
                            self.ls.learn(peer, now)
                    self._recompute = True
            case MobileAddressRequest():
                if self._heard(msg.id, now) is not None:
                    self.mobile.on_request(msg)
            case MobileAddressUpdate() | MobileAddressSnapshot():
                if self._heard(msg.id, now) is not None:
                    self.mobile.on_update(msg)
        self._settle(now)

    def add_local(self, hash_key: str, hint: int) -> None:
        """`hash_key` (e.g. "M0orders") has local consumers; `hint` is its treatment (1
        multicast, 2 closest, 3 balanced...). Announced at the next mobile batch; idempotent."""
        self.mobile.add_local(hash_key, hint)

    def remove_local(self, hash_key: str) -> None:
        """`hash_key` has no local consumer any more; idempotent."""
        self.mobile.remove_local(hash_key)

    # ----- management --------------------------------------------------------------------

    def nodes(
        self,
        link_label: Callable[[Hashable], object] = _default_link_label,
        clock_offset: float = 0.0,
    ) -> list[dict[str, Any]]:
        """Rows of `org.apache.qpid.dispatch.router.node`, this router first, as Dispatch's
        agent fills them (qdstat -n shows `nextHop`, else `routerLink`; -v adds the rest).

        A neighbor reached over its own link has `nextHop` None and its link in `routerLink`;
        a router reached through another has that router's id; unreachable ones have neither.
        `link_label` turns the engine's link handles into something encodable (Dispatch shows
        a link number); `clock_offset` converts `now` values to wall-clock seconds.
        """
        rows: list[dict[str, Any]] = [
            {
                "id": self.id,
                "index": 0,
                "protocolVersion": PROTOCOL_VERSION,
                "instance": self.instance,
                "linkState": sorted(self.ls.peers),
                "nextHop": "(self)",
                "validOrigins": [],
                "address": f"amqp:/_topo/0/{self.id}",
                "routerLink": None,
                "cost": None,
                "lastTopoChange": round(self.last_topology_change + clock_offset),
            }
        ]
        for rid in sorted(self.ls.routers):
            record = self.ls.routers[rid]
            via = self.routes.via.get(rid)
            neighbor_link = self.routes.neighbors.get(rid)
            rows.append(
                {
                    "id": rid,
                    "index": record.index,
                    "protocolVersion": PROTOCOL_VERSION,
                    "instance": record.instance,
                    "linkState": sorted(record.ls.peers) if record.ls is not None else [],
                    "nextHop": via if via is not None and via != rid else None,
                    "validOrigins": sorted(self.routes.valid_origins.get(rid, ())),
                    "address": f"amqp:/_topo/0/{rid}",
                    "routerLink": link_label(neighbor_link) if neighbor_link is not None else None,
                    "cost": self.routes.cost.get(rid),
                    "lastTopoChange": None,
                }
            )
        return rows

    # ----- internals ---------------------------------------------------------------------

    def _on_hello(self, link: Hashable, hello: Hello, now: float) -> None:
        if not self.hello.has_link(link):
            log.debug("network.hello_on_unknown_link", id=hello.id)
            return
        self.hello.receive(link, hello, now)
        if hello.id in self.ls.routers or hello.id in self.hello.neighbors():
            self._heard(hello.id, now, hello.instance)

    def _heard(
        self, router_id: str, now: float, instance: int | None = None
    ) -> RemoteRouter | None:
        """The record of a router a message came from; handles its restart (new instance)."""
        record = self.ls.heard(router_id, now)
        if record is None or instance is None:
            return record
        if record.instance is not None and instance < record.instance:
            # A restart brings a later boot time, never an earlier one: two routers answer to
            # this id. Follow the newer and ignore the older, rather than flap between them.
            self._report_duplicate(
                (router_id, instance),
                router_id,
                f"messages from two routers with id {router_id!r} (instances {instance} and"
                f" {record.instance}); routing to it is unreliable until one is renamed",
            )
            return None
        if self.ls.observe_instance(record, instance):
            self.mobile.forget(router_id)
            self._recompute = True
        return record

    def _check_duplicate(self, msg: Message) -> None:
        instance = getattr(msg, "instance", None)
        if instance is None or instance == self.instance:
            return  # our own message come back: harmless
        self._report_duplicate(
            (self.id, instance),
            self.id,
            f"{msg.OPCODE} from another router using our id {self.id!r} (its instance {instance}, "
            f"ours {self.instance}); routing is unreliable until one is renamed",
        )

    def _report_duplicate(self, key: tuple[str, int], router_id: str, detail: str) -> None:
        """Once per offending instance, not on every message it sends."""
        if key in self._duplicates_reported:
            return
        self._duplicates_reported.add(key)
        self.container.duplicate_router(router_id, detail)

    def _settle(self, now: float) -> None:
        neighbors = self.hello.neighbors()
        peers: dict[str, int] = {}
        links: dict[str, Hashable] = {}
        for rid, (link, cost) in neighbors.items():
            if self.ls.learn(rid, now) is not None:
                peers[rid] = cost
                links[rid] = link
        self.ls.set_peers(peers)
        if links != self._neighbor_links:
            self._neighbor_links = links
            self._recompute = True
        if self.ls.commit(now):
            self._recompute = True
        if self._recompute:
            self._recompute = False
            self.last_topology_change = now
            self._compute_routes()
        reachable = list(self.routes.cost)
        self.ls.request(now, reachable)
        self.mobile.request(now)

    def _compute_routes(self) -> None:
        graph = symmetric_graph(self.ls.link_states(), local=self.id)
        paths = compute_paths(graph, self.id)
        via = {d: h for d, h in paths.next_hop.items() if h in self._neighbor_links}
        routes = Routes(
            next_hop={d: self._neighbor_links[h] for d, h in via.items()},
            via=via,
            cost={d: paths.cost[d] for d in via},
            valid_origins={d: paths.valid_origins[d] for d in via},
            radius=paths.radius,
            neighbors=dict(self._neighbor_links),
        )
        # Withdraw the addresses of routers that left before the engine drops their routes,
        # so it never holds an address pointing at a router it no longer knows.
        self.mobile.set_reachable(routes.cost)
        if routes != self.routes:
            self.routes = routes
            log.debug("network.routes", routers=sorted(routes.cost), radius=routes.radius)
            self.container.topology_changed(routes)
