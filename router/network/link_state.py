"""The link-state protocol: our own link state, the copies we hold of everyone else's, and the
RA / LSR / LSU exchange that keeps those copies current.

Every router floods a small RA (its `ls_seq`, `mobile_seq` and `instance`); a router that holds
an older copy of the sender's link state asks for the new one with an LSR, answered with an LSU.
Only sequence numbers flood, so a change costs one RA per router plus one LSU per interested
router. Requests are remembered until answered and re-sent after `retry` seconds, so a request
lost to a routing change mid-flight is repaired without waiting for the next periodic RA.

This module also owns the table of known routers (and Dispatch's 128-router limit), since a
router becomes known through this protocol; the HELLO and mobile-address protocols key their
state by the same ids.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from router.log import get_logger
from router.network.messages import (
    ALL_ROUTERS_ADDRESS,
    LinkState,
    LinkStateRequest,
    LinkStateUpdate,
    RouterAdvertisement,
    router_address,
)

log = get_logger("router")

# Dispatch sizes its per-address router bitmasks at 128 bits; bit 0 is the router itself.
MAX_ROUTERS = 128

Send = Callable[[str, str, dict], None]


@dataclass
class RemoteRouter:
    """What we know about one other router. `ls` is None until its link state arrives (and
    again once forgotten); `index` is its Dispatch mask bit, shown by management."""

    id: str
    index: int
    heard_at: float
    instance: int | None = None
    ls: LinkState | None = None
    ls_seen_at: float = 0.0
    wanted_ls_seq: int = 0  # highest ls_seq we know exists; 0 = any copy will do
    lsr_sent_at: float | None = None

    @property
    def have_ls_seq(self) -> int:
        return self.ls.ls_seq if self.ls is not None else -1

    def forget(self) -> None:
        self.ls = None
        self.wanted_ls_seq = 0
        self.lsr_sent_at = None


class LinkStateProtocol:
    def __init__(
        self,
        my_id: str,
        instance: int,
        send: Send,
        mobile_seq: Callable[[], int],
        ra_interval: float,
        ra_flux_interval: float,
        ls_max_age: float,
        retry: float,
    ) -> None:
        self.my_id = my_id
        self.instance = instance
        self._send = send
        self._mobile_seq = mobile_seq
        self.ra_interval = ra_interval
        self.ra_flux_interval = ra_flux_interval
        self.ls_max_age = ls_max_age
        self.retry = retry
        self.ls_seq = 0
        self.peers: dict[str, int] = {}
        self._peers_changed = False
        self.routers: dict[str, RemoteRouter] = {}
        self._free_indexes = list(range(1, MAX_ROUTERS))
        self._refused: set[str] = set()
        self.last_ra = -math.inf

    # ----- the router table --------------------------------------------------------------

    def learn(self, router_id: str, now: float) -> RemoteRouter | None:
        """The record for router_id, created on first mention; None past the router limit."""
        record = self.routers.get(router_id)
        if record is not None:
            return record
        if not self._free_indexes:
            if router_id not in self._refused:
                self._refused.add(router_id)
                log.error(
                    "network.router_limit",
                    id=router_id,
                    limit=MAX_ROUTERS,
                    detail="router ignored: the network has more routers than Dispatch allows",
                )
            return None
        index = heapq.heappop(self._free_indexes)
        record = RemoteRouter(router_id, index, heard_at=now)
        self.routers[router_id] = record
        return record

    def heard(self, router_id: str, now: float) -> RemoteRouter | None:
        record = self.learn(router_id, now)
        if record is not None:
            record.heard_at = now
        return record

    def observe_instance(self, record: RemoteRouter, instance: int) -> bool:
        """True when the router restarted (a new instance): its old link state is forgotten."""
        if record.instance is None:
            record.instance = instance
            return False
        if record.instance == instance:
            return False
        log.info("network.router_restarted", id=record.id, instance=instance)
        record.instance = instance
        record.forget()
        return True

    # ----- our own link state ------------------------------------------------------------

    def set_peers(self, peers: dict[str, int]) -> None:
        if peers != self.peers:
            self.peers = dict(peers)
            self._peers_changed = True

    def commit(self, now: float) -> bool:
        """Publishes a changed neighbor set: new ls_seq and an RA at once. True if it did."""
        if not self._peers_changed:
            return False
        self._peers_changed = False
        self.ls_seq += 1
        log.debug("network.link_state", ls_seq=self.ls_seq, peers=sorted(self.peers))
        self.send_ra(now)
        return True

    def own(self) -> LinkState:
        return LinkState(self.my_id, self.ls_seq, dict(self.peers))

    # ----- RA ----------------------------------------------------------------------------

    def send_ra(self, now: float) -> None:
        self.last_ra = now
        ra = RouterAdvertisement(self.my_id, self.instance, self.ls_seq, self._mobile_seq())
        self._send(ALL_ROUTERS_ADDRESS, ra.OPCODE, ra.to_body())

    def periodic_ra(self, now: float, in_flux: bool) -> None:
        interval = self.ra_flux_interval if in_flux else self.ra_interval
        if now - self.last_ra >= interval:
            self.send_ra(now)

    def on_ra(self, record: RemoteRouter, ra: RouterAdvertisement, now: float) -> None:
        record.ls_seen_at = now
        record.wanted_ls_seq = max(record.wanted_ls_seq, ra.ls_seq)

    # ----- LSR / LSU ---------------------------------------------------------------------

    def on_lsr(self, lsr: LinkStateRequest) -> None:
        lsu = LinkStateUpdate(self.my_id, self.instance, self.own())
        self._send(router_address(lsr.id), lsu.OPCODE, lsu.to_body())

    def on_lsu(self, record: RemoteRouter, lsu: LinkStateUpdate, now: float) -> bool:
        """Stores a newer copy; True if it replaced what we had (paths need recomputing)."""
        record.ls_seen_at = now
        # Answered: if we are still behind (it changed again meanwhile), ask again right away.
        record.lsr_sent_at = None
        if record.ls is not None and lsu.ls.ls_seq <= record.ls.ls_seq:
            return False
        record.ls = lsu.ls
        record.wanted_ls_seq = max(record.wanted_ls_seq, lsu.ls.ls_seq)
        return True

    def request(self, now: float, reachable: Iterable[str]) -> None:
        """LSR to every reachable router whose link state we lack or hold an old copy of."""
        for rid in reachable:
            record = self.routers.get(rid)
            if record is None or record.wanted_ls_seq <= record.have_ls_seq:
                continue
            if record.lsr_sent_at is not None and now - record.lsr_sent_at < self.retry:
                continue
            record.lsr_sent_at = now
            lsr = LinkStateRequest(self.my_id)
            self._send(router_address(rid), lsr.OPCODE, lsr.to_body())

    # ----- ageing ------------------------------------------------------------------------

    def expire(self, now: float) -> tuple[bool, list[str]]:
        """Forgets link states not refreshed within remoteLsMaxAge, then drops routers nobody
        mentions any more. Returns (link states changed, ids of dropped routers)."""
        changed = False
        for record in self.routers.values():
            if record.ls is not None and now - record.ls_seen_at > self.ls_max_age:
                log.info("network.link_state_expired", id=record.id)
                record.forget()
                changed = True
        mentioned = set(self.peers)
        for record in self.routers.values():
            if record.ls is not None:
                mentioned.update(record.ls.peers)
        dropped = [
            rid
            for rid, record in self.routers.items()
            if rid not in mentioned
            and record.ls is None
            and now - record.heard_at > self.ls_max_age
        ]
        for rid in dropped:
            heapq.heappush(self._free_indexes, self.routers.pop(rid).index)
        if dropped:
            self._refused.clear()  # room again: a refused router may now be accepted
        return changed, dropped

    def link_states(self) -> dict[str, dict[str, int]]:
        """Every link state we hold, ours included, limited to routers within the limit."""
        known = self.routers.keys() | {self.my_id}
        states = {self.my_id: {p: c for p, c in self.peers.items() if p in known}}
        for rid, record in self.routers.items():
            if record.ls is not None:
                states[rid] = {p: c for p, c in record.ls.peers.items() if p in known}
        return states
