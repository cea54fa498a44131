"""An edge's senders get credit once their address has a destination beyond the edge.

Without this, an edge would give its clients' senders credit as soon as it has an uplink, and
the interior would release whatever it had no route for yet: a client attaching to an address
nobody consumes would see its messages come back released instead of waiting for a consumer,
as it would on an interior. Qdrouterd's edges ask their interior instead, and so do ours, in the
same protocol (the interior's side, for qdrouterd edges and ours, is router/edges/dispatch.py):
- for each address its clients send to, the edge attaches one sender on the uplink with that
  target; it carries nothing (messages still go up the anonymous uplink), it only tells the
  interior which addresses the edge sends to;
- the edge receives from `_$qd.edge_addr_tracking`, and the interior says there, per address,
  [key, true] once it has a destination other than this edge's own consumers and [key, false]
  when it no longer has: senders get credit only while it is true (what they already hold,
  AMQP cannot take back; what is sent on it and has no route comes back released, as before).
What the router itself sends up (telemetry, answers) and addresses no client sends to keep the
old rule: the interior decides. So does everything when the interior refuses the tracking link,
and an address whose sender link the interior refused: nothing waits for an answer that cannot
come.
"""

from __future__ import annotations

from itertools import count
from typing import TYPE_CHECKING, Any

from proton import Message as ProtonMessage

from router.addressing import parse
from router.datapath.forwarder import ACCEPTED
from router.edges.dispatch import TRACKING
from router.log import get_logger
from router.transport.pn import lib

if TYPE_CHECKING:
    from router.core.engine import Router
    from router.datapath.forwarder import AddressEntry, Message
    from router.datapath.links import Forward, Link
    from router.transport.connection import Connection

log = get_logger("router")


class Tracking:
    def __init__(self, router: Router) -> None:
        self.router = router
        self.receiver: Link | None = None  # ours, from `_$qd.edge_addr_tracking`
        self.senders: dict[str, Link] = {}  # address key -> our sender telling the interior
        self.destined: set[str] = set()  # keys the interior says have destinations
        self.untracked: set[str] = set()  # keys whose sender the interior refused
        self.refused = False  # the interior refused the tracking link itself
        self.serial = count(1)
        router.fwd.local_handlers[parse(TRACKING, router.id).key] = self.on_update

    def reachable(self, entry: AddressEntry) -> bool:
        """With an uplink: may the edge's senders to `entry` get credit?"""
        key = entry.key
        if key not in self.senders or self.refused or key in self.untracked:
            return True  # the interior decides, releasing what it cannot route
        return key in self.destined

    def attach(self, conn: Connection, session: Any) -> None:
        """On the uplink `conn`: the tracking receiver and a sender per address clients send
        to, those not there yet."""
        router = self.router
        if self.receiver is None and not self.refused:
            p = lib.pn_receiver(session, f"edge.tracking.{router.id}".encode())
            lib.pn_terminus_set_address(lib.pn_link_source(p), TRACKING.encode())
            lib.pn_link_open(p)
            link = self.receiver = router.register_link(p, conn, incoming=True)
            link.kind = "edge"
            link.address = TRACKING
            router.fwd.add_sender(link, router.fwd.entry(TRACKING))
        for entry in router.fwd.entries.values():
            if any(s.kind == "endpoint" for s in entry.senders):
                self.sender_added(entry, conn, session)

    def sender_added(self, entry: AddressEntry, conn: Connection, session: Any) -> None:
        key = entry.key
        if key[0] != "M" or key in self.senders or key in self.untracked:
            return
        router = self.router
        # A name of its own each time: a link replacing one whose detach the interior has not
        # answered yet, under the same name, is the old link to the interior's Proton.
        name = f"edge.sends.{router.id}.{entry.address}.{next(self.serial)}"
        p = lib.pn_sender(session, name.encode())
        lib.pn_terminus_set_address(lib.pn_link_target(p), entry.address.encode())
        lib.pn_link_open(p)
        link = router.register_link(p, conn, incoming=False)
        link.kind = "edge"
        link.address = entry.address
        self.senders[key] = link
        router.fwd.touched.add(conn)

    def sender_removed(self, entry: AddressEntry) -> None:
        """The edge's last client sender to `entry` left."""
        link = self.senders.pop(entry.key, None)
        self.destined.discard(entry.key)
        if link is not None:
            self.router.detach(link)

    def links(self) -> list[Link]:
        """What goes when the uplink moves (then `forget`)."""
        return [*([self.receiver] if self.receiver is not None else []), *self.senders.values()]

    def forget(self) -> None:
        self.receiver = None
        self.senders.clear()
        self.destined.clear()
        self.untracked.clear()
        self.refused = False

    def link_detached(self, link: Link) -> bool:
        """The engine is detaching `link`: if the interior detached one of ours, fall back to
        letting it decide (True: it was ours)."""
        key = next((k for k, lk in self.senders.items() if lk is link), None)
        if link is self.receiver:
            self.receiver = None
            self.refused = True
            affected = list(self.senders)
        elif key is not None:
            del self.senders[key]
            self.untracked.add(key)
            affected = [key]
        else:
            return False
        fwd = self.router.fwd
        for entry in filter(None, map(fwd.entries.get, affected)):
            if fwd.reachable(entry):
                fwd.became_reachable(entry)
        log.warning("edge.tracking_refused", link=link.name, address=link.address)
        return True

    def on_update(self, msg: Message, fwd: Forward | None, origin: Link | None) -> None:
        """[key, has destinations] from the interior, for an address we send to."""
        forwarder = self.router.fwd
        if origin is None or origin is not self.receiver:
            forwarder.reject_incoming(fwd, "amqp:unauthorized-access", "only the uplink tracks")
            return
        update = ProtonMessage()
        try:
            update.decode(bytes(msg.data))
            key, destined = update.body
            if not isinstance(key, str) or not isinstance(destined, bool):
                raise ValueError("the body is not [key, bool]")
        except Exception as err:  # what a peer sends must not end the router
            log.warning("edge.tracking_undecodable", error=str(err)[:200])
            why = f"bad tracking update: {err}"[:200]
            forwarder.reject_incoming(fwd, "amqp:decode-error", why)
            return
        if fwd is not None:
            forwarder.settle_incoming(fwd, ACCEPTED)
        if destined:
            self.destined.add(key)
            entry = forwarder.entries.get(key)
            if entry is not None:
                forwarder.became_reachable(entry)
        else:
            self.destined.discard(key)
