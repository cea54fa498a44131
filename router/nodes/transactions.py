"""Local transactions over the nodes a router hosts (AMQP part 4, seed 002 §2.7).

A client attaches a sender to the router's coordinator (a target of type coordinator), declares
a transaction (the router answers `declared` with a random id), then enlists work in it:

- messages it sends to a node here with a transactional state are held aside, answered with
  a transactional state holding `accepted`, and enter their nodes only at commit;
- outcomes it gives, with a transactional state, to messages it received from a node here are
  recorded, the messages staying with it, and applied only at commit.

`discharge` with fail false commits: every held message enters its node and every outcome is
applied, written as one record (router/store/format.py's BATCH, so that a crash keeps all of
it or none) and synced before the discharge is accepted; with fail true (or when the
coordinator link or its connection goes) the transaction rolls back: held messages are
dropped and received ones go back to their queues for redelivery. Either way the enlisted
deliveries are settled then. An unknown transaction id is `amqp:transaction:unknown-id`.

The router coordinates only the nodes it hosts itself: a client connects to the host router to
use transactions. Work sent on a link relayed to another router cannot join the transaction
and is rejected (router/linkroutes/relay.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from proton import Data, Described, Message, symbol, ulong

from router import tokens
from router.log import get_logger
from router.nodes import distribution, intake, traffic
from router.nodes.intake import UNKNOWN_ID
from router.transport.pn import lib, set_condition

if TYPE_CHECKING:
    from router.datapath.links import Link
    from router.nodes.attachment import Attachment
    from router.nodes.hosting import Node, Nodes
    from router.nodes.queue import Held

log = get_logger("router.nodes")

DECLARE = (0x31, "amqp:declare:list")
DISCHARGE = (0x32, "amqp:discharge:list")
DECLARED = 0x33
TRANSACTIONAL_STATE = 0x34
ACCEPTED_OUTCOME = 0x24


class Transaction:
    __slots__ = ("id", "link", "outcomes", "sends")

    def __init__(self, tid: bytes, link: Link) -> None:
        self.id = tid
        self.link = link  # its coordinator link
        self.sends: list[tuple[Node, bytes, Any]] = []  # (node, message, its delivery)
        self.outcomes: list[tuple[Attachment, Any, Held, int]] = []  # (consumer, d, held, state)


class Coordinator:
    def __init__(self, nodes: Nodes) -> None:
        self.nodes = nodes
        self.links: set[Link] = set()  # coordinator links attached here
        self.open: dict[bytes, Transaction] = {}

    # ----- the coordinator link -----------------------------------------------------------

    def attach(self, link: Link) -> bool:
        """A sender to the coordinator: served when this router hosts nodes."""
        p = link.pn
        if lib.pn_terminus_get_type(lib.pn_link_remote_target(p)) != lib.PN_COORDINATOR:
            return False
        router = self.nodes.router
        if self.nodes.store is None:
            router.linkrouter.refuse(
                link,
                "amqp:not-implemented",
                f"router {router.id} hosts no queue or topic: connect to a router that hosts"
                " the nodes to use transactions",
            )
            return True
        lib.pn_terminus_copy(lib.pn_link_source(p), lib.pn_link_remote_source(p))
        lib.pn_terminus_copy(lib.pn_link_target(p), lib.pn_link_remote_target(p))
        lib.pn_link_set_rcv_settle_mode(p, lib.PN_RCV_FIRST)
        link.kind = "node"  # its deliveries come to router/nodes/ (hosting.Nodes.delivery)
        self.links.add(link)
        lib.pn_link_open(p)
        lib.pn_link_flow(p, link.capacity)
        router.fwd.touched.add(link.conn)
        return True

    def control(self, link: Link, d: Any) -> None:
        """A declare or discharge on the coordinator link."""
        data = self.nodes.router.receive(link, d)
        if data is None:
            return
        try:
            request = Message()
            request.decode(bytes(data))
            body = request.body
            kind = getattr(body, "descriptor", None)
            fields = list(getattr(body, "value", None) or [])
        except Exception as err:  # what a peer sends must not end the router
            self.answer(d, lib.PN_REJECTED, ("amqp:decode-error", f"{err}"[:200]))
            return
        if kind in DECLARE:
            tid = tokens.token_bytes(8)
            self.open[tid] = Transaction(tid, link)
            state = Data(lib.pn_disposition_data(lib.pn_delivery_local(d)))
            state.clear()
            state.put_object([tid])
            self.answer(d, DECLARED, None)
        elif kind in DISCHARGE and fields:
            txn = self.open.get(bytes(fields[0]))
            if txn is None or txn.link is not link:
                self.answer(d, lib.PN_REJECTED, (UNKNOWN_ID, "no such transaction here"))
                return
            fail = bool(fields[1]) if len(fields) > 1 else False
            self.discharge(txn, fail)
            self.answer(d, lib.PN_ACCEPTED, None)
        else:
            self.answer(d, lib.PN_REJECTED, ("amqp:not-implemented", f"{kind!r} is no control"))
        lib.pn_link_flow(link.pn, 1)

    def answer(self, d: Any, state: int, error: tuple[str, str] | None) -> None:
        if error is not None:
            set_condition(lib.pn_disposition_condition(lib.pn_delivery_local(d)), *error)
        lib.pn_delivery_update(d, state)
        lib.pn_delivery_settle(d)

    def link_gone(self, link: Link) -> None:
        """Its coordinator link went: its transactions roll back."""
        self.links.discard(link)
        for txn in [t for t in self.open.values() if t.link is link]:
            self.discharge(txn, fail=True)

    # ----- enlisted work ------------------------------------------------------------------

    def enlisted(self, d: Any) -> Transaction | Literal[False] | None:
        """The transaction a delivery's transactional state names; False when it names none
        (not transactional), None when the id is unknown."""
        if lib.pn_delivery_remote_state(d) != TRANSACTIONAL_STATE:
            return False
        fields = _state(d)
        if not fields:
            return None
        return self.open.get(bytes(fields[0]))

    def send(self, txn: Transaction, node: Node, data: bytes, d: Any) -> None:
        """A message sent in `txn`: held until the discharge, answered as provisionally
        accepted."""
        txn.sends.append((node, data, d))
        state = Data(lib.pn_disposition_data(lib.pn_delivery_local(d)))
        state.clear()
        state.put_object([txn.id, Described(ulong(ACCEPTED_OUTCOME), [])])
        lib.pn_delivery_update(d, TRANSACTIONAL_STATE)

    def outcome(self, txn: Transaction, att: Attachment, d: Any, held: Held) -> None:
        """An outcome given in `txn` to a message sent from a node: applied at the discharge."""
        fields = _state(d)
        outcome = fields[1] if len(fields) > 1 else None
        code = getattr(outcome, "descriptor", ACCEPTED_OUTCOME)
        txn.outcomes.append((att, d, held, _OUTCOMES.get(code, lib.PN_ACCEPTED)))

    def discharge(self, txn: Transaction, fail: bool) -> None:
        nodes = self.nodes
        store = nodes.store
        assert store is not None  # `attach` serves a coordinator only where there is one
        del self.open[txn.id]
        with store.atomic():  # one record on disk: a crash keeps all of it or none
            self.apply(txn, fail)
        store.sync()  # what the commit did is on disk before it is acknowledged
        touched = {node for node, _, _ in txn.sends} | {a.node for a, _, _, _ in txn.outcomes}
        for node in touched:
            distribution.pump_node(nodes, node)
        log.info(
            "transaction.discharged",
            outcome="rolled back" if fail else "committed",
            sends=len(txn.sends),
            outcomes=len(txn.outcomes),
        )

    def apply(self, txn: Transaction, fail: bool) -> None:
        nodes = self.nodes
        for node, data, d in txn.sends:
            if not fail and intake.take(nodes, node, data) is None:
                log.warning("transaction.send_dropped", node=node.name, reason="node full")
            lib.pn_delivery_settle(d)
        # Last first: what goes back goes to the head of its queue, so the oldest ends first.
        for att, d, held, state in reversed(txn.outcomes):
            att.out.pop(d, None)
            queue = att.queue
            if queue is None:
                continue
            traffic.settled(nodes, att, lib.PN_RELEASED if fail else state)
            if fail or state == lib.PN_RELEASED:
                distribution.returned(nodes, queue, held, failed=False, excluded=None)
            elif state == lib.PN_ACCEPTED:
                queue.accepted(held)
            elif state == lib.PN_REJECTED:
                distribution.dead_letter(nodes, queue, held, "rejected", None)
            else:
                distribution.returned(nodes, queue, held, failed=True, excluded=None)
            lib.pn_delivery_settle(d)


_OUTCOMES = {
    0x24: lib.PN_ACCEPTED,
    0x25: lib.PN_REJECTED,
    0x26: lib.PN_RELEASED,
    0x27: lib.PN_MODIFIED,
    symbol("amqp:accepted:list"): lib.PN_ACCEPTED,
    symbol("amqp:rejected:list"): lib.PN_REJECTED,
    symbol("amqp:released:list"): lib.PN_RELEASED,
    symbol("amqp:modified:list"): lib.PN_MODIFIED,
}


def _state(d: Any) -> list[Any]:
    data = Data(lib.pn_disposition_data(lib.pn_delivery_remote(d)))
    data.rewind()
    if not data.next():
        return []
    value = data.get_object()
    return list(value) if isinstance(value, list | tuple) else []
