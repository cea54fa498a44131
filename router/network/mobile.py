"""Mobile-address synchronisation (Dispatch's `mobile_sync` module): which router has consumers
for which address.

Ours: the engine reports local consumers per address hash key; changes accumulate and leave in
one differential MAU per batch, each batch numbered by `mobile_seq` and followed by an RA.
We compare what we last announced with what we have now, so an address added and removed within
one batch is never announced at all, and a changed hint is re-announced.

An edge router's space (`_edge/<edge>/...`) is the mobile address `_edge/<edge>` here (key
`M0_edge/<edge>`), advertised by the interior the edge hangs off. Dispatch keys it as the edge
summary `H<edge>` and routes `_edge/<edge>/...` only on that key, so it goes between routers in
Dispatch's form both ways: a qdrouterd in the network then reaches our edges, and we its.

Theirs: a differential MAU is applied only if it is exactly the next one (`mobile_seq ==
stored + 1`); anything else means we missed one, so we ask for the whole set with a MAR, which
the owner answers with an absolute MAU. A router's addresses are only held while it is
reachable: when it becomes unreachable they are withdrawn (`{}`) and fetched again with a MAR
once it is back, rather than kept in a state nobody can route to.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from router.network.messages import (
    ALL_ROUTERS_MA_ADDRESS,
    MobileAddressRequest,
    MobileAddressSnapshot,
    MobileAddressUpdate,
    router_ma_address,
)

EDGE_SPACE = "M0_edge/"  # our key for an edge's space, followed by the edge's id
EDGE_SUMMARY = "H"  # Dispatch's

Send = Callable[[str, str, dict], None]
Publish = Callable[[str, dict[str, int], list[str]], None]


@dataclass
class _Remote:
    seq: int = 0  # mobile_seq of the addresses we hold (0: none)
    addresses: dict[str, int] = field(default_factory=dict)
    wanted: int = 0  # highest mobile_seq we know exists
    asked_at: float | None = None


class MobileSync:
    def __init__(
        self, my_id: str, send: Send, publish: Publish, interval: float, retry: float
    ) -> None:
        self.my_id = my_id
        self._send = send
        self._publish = publish
        self.interval = interval
        self.retry = retry
        self.mobile_seq = 0
        self._current: dict[str, int] = {}
        self._announced: dict[str, int] = {}
        self._last_batch = -math.inf
        self._remote: dict[str, _Remote] = {}
        self._reachable: set[str] = set()

    # ----- local addresses ---------------------------------------------------------------

    def add_local(self, hash_key: str, hint: int) -> None:
        self._current[wire_key(hash_key)] = hint

    def remove_local(self, hash_key: str) -> None:
        self._current.pop(wire_key(hash_key), None)

    def local(self) -> dict[str, int]:
        return {local_key(key): hint for key, hint in self._current.items()}

    def pending(self) -> bool:
        """Whether local changes wait for the next batch."""
        return self._current != self._announced

    def tick(self, now: float) -> bool:
        """Sends the pending changes as one differential MAU if the batch interval allows;
        True when it did (the caller then sends an RA carrying the new mobile_seq)."""
        if not self.pending() or now - self._last_batch < self.interval:
            return False
        add = sorted(k for k, h in self._current.items() if self._announced.get(k) != h)
        delete = sorted(k for k in self._announced if k not in self._current)
        self.mobile_seq += 1
        self._last_batch = now
        self._announced = dict(self._current)
        hints = tuple(self._current[k] for k in add)
        mau = MobileAddressUpdate(self.my_id, self.mobile_seq, tuple(add), tuple(delete), hints)
        self._send(ALL_ROUTERS_MA_ADDRESS, mau.OPCODE, mau.to_body())
        return True

    def on_request(self, mar: MobileAddressRequest) -> None:
        # A MAR that claims our current mobile_seq is answered too. qdrouterd, once it has
        # asked, applies the next differential MAU whatever its number and then asks with that
        # number: a qdrouterd that joined after our first MAUs would otherwise hold only the
        # later ones, for good.
        if mar.have_seq > self.mobile_seq:
            return
        # What we announced, not what we have: pending changes follow in the next differential
        # MAU, which must apply on top of exactly this snapshot.
        keys = sorted(self._announced)
        snapshot = MobileAddressSnapshot(
            self.my_id, self.mobile_seq, tuple(keys), tuple(self._announced[k] for k in keys)
        )
        self._send(router_ma_address(mar.id), snapshot.OPCODE, snapshot.to_body())

    # ----- other routers' addresses ------------------------------------------------------

    def addresses(self, router_id: str) -> dict[str, int]:
        remote = self._remote.get(router_id)
        addresses = remote.addresses if remote is not None else {}
        return {local_key(key): hint for key, hint in addresses.items()}

    def advertised(self, router_id: str, mobile_seq: int) -> None:
        """An RA told us router_id's current mobile_seq."""
        remote = self._remote.setdefault(router_id, _Remote())
        remote.wanted = max(remote.wanted, mobile_seq)

    def on_update(self, mau: MobileAddressUpdate | MobileAddressSnapshot) -> None:
        remote = self._remote.setdefault(mau.id, _Remote())
        remote.wanted = max(remote.wanted, mau.mobile_seq)
        if mau.id not in self._reachable:
            return  # fetched whole with a MAR once there is a route back
        if isinstance(mau, MobileAddressSnapshot):
            remote.asked_at = None  # our MAR is answered; still behind means ask again now
            if mau.mobile_seq < remote.seq:
                return  # overtaken by a differential MAU that arrived first
            self._store(mau.id, remote, mau.mobile_seq, mau.addresses())
            return
        if mau.mobile_seq != remote.seq + 1:
            return  # stale, or we missed one: `wanted` is ahead, so request() sends a MAR
        held = remote.addresses
        added = {k: h for k, h in mau.added().items() if held.get(k) != h}
        held.update(added)
        removed = [k for k in mau.delete if held.pop(k, None) is not None]
        for key in removed:
            added.pop(key, None)
        self._seen(remote, mau.mobile_seq)
        self._changed(mau.id, added, removed)

    def request(self, now: float) -> None:
        """MAR to every reachable router whose addresses we hold an old copy of (or none)."""
        for rid in sorted(self._reachable):
            remote = self._remote.get(rid)
            if remote is None or remote.wanted <= remote.seq:
                continue
            if remote.asked_at is not None and now - remote.asked_at < self.retry:
                continue
            remote.asked_at = now
            mar = MobileAddressRequest(self.my_id, remote.seq)
            self._send(router_ma_address(rid), mar.OPCODE, mar.to_body())

    def set_reachable(self, reachable: Iterable[str]) -> None:
        """Withdraws the addresses of routers that just became unreachable."""
        reachable = set(reachable)
        for rid in sorted(self._reachable - reachable):
            remote = self._remote.get(rid)
            if remote is not None:
                remote.wanted = max(remote.wanted, remote.seq)
                self._store(rid, remote, 0, {})
                remote.asked_at = None
        self._reachable = reachable

    def forget(self, router_id: str) -> None:
        """The router restarted (or is gone): nothing we hold about it is valid any more."""
        remote = self._remote.pop(router_id, None)
        if remote is not None:
            self._changed(router_id, {}, list(remote.addresses))

    def _store(self, rid: str, remote: _Remote, seq: int, addresses: dict[str, int]) -> None:
        """A whole set in place of what we held (a snapshot, or none when unreachable)."""
        held = remote.addresses
        added = {k: h for k, h in addresses.items() if held.get(k) != h}
        removed = [k for k in held if k not in addresses]
        remote.addresses = addresses
        self._seen(remote, seq)
        self._changed(rid, added, removed)

    def _seen(self, remote: _Remote, seq: int) -> None:
        remote.seq = seq
        if seq >= remote.wanted:
            remote.asked_at = None

    def _changed(self, rid: str, added: dict[str, int], removed: list[str]) -> None:
        if added or removed:
            self._publish(
                rid, {local_key(k): h for k, h in added.items()}, [local_key(k) for k in removed]
            )


def wire_key(key: str) -> str:
    """Our hash key as routers exchange it: an edge's space as Dispatch's edge summary."""
    if key.startswith(EDGE_SPACE) and "/" not in key[len(EDGE_SPACE) :]:
        return EDGE_SUMMARY + key[len(EDGE_SPACE) :]
    return key


def local_key(key: str) -> str:
    """A hash key another router advertised, as this router keys it."""
    if key.startswith(EDGE_SUMMARY) and len(key) > 1:
        return EDGE_SPACE + key[1:]
    return key
