"""Messages out of hosted nodes: to consumers while they have credit, and what their outcomes
do (router/nodes/queue.py has the rules); dead letters; the router's own messages to a node.
What consumers get and their outcomes are counted as flows out of the node (traffic.py).

What comes back (released, modified) goes to the node's other consumers before the one that
returned it. Rejected messages, those delivered too often and expired ones go to the node's
dead letter address with why (router/nodes/message.py), or are dropped and counted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from router.datapath.forwarder import ACCEPTED, REJECTED, TERMINAL, Message, new_delivery
from router.datapath.sections import EMPTY_ANNOTATIONS, scan
from router.log import get_logger
from router.nodes import traffic
from router.nodes.message import dead_lettered, redelivered
from router.nodes.outbox import Outbox
from router.nodes.placement import owner
from router.nodes.queue import Held, Queue
from router.transport.pn import get_condition, lib

if TYPE_CHECKING:
    from router.nodes.attachment import Attachment
    from router.nodes.hosting import Node, Nodes

log = get_logger("router.nodes")


def pump_node(nodes: Nodes, node: Node) -> None:
    for att in nodes.of(node):
        if att.queue is not None:
            pump(nodes, att)


def pump(nodes: Nodes, att: Attachment) -> None:
    link, queue, sub = att.link, att.queue, att.sub
    assert queue is not None and sub is not None and nodes.store is not None
    p = link.pn
    sent = False
    while lib.pn_link_credit(p) > 0:
        held = queue.take(sub)
        if held is None:
            break
        send(nodes, att, held)
        sent = True
    if lib.pn_link_get_drain(p) and lib.pn_link_credit(p) > 0:
        lib.pn_link_drained(p)
        sent = True
    if sent:
        nodes.router.fwd.touched.add(link.conn)


def send(nodes: Nodes, att: Attachment, held: Held) -> None:
    assert nodes.store is not None and att.queue is not None and att.sub is not None
    link = att.link
    p = link.pn
    entry = held.entry
    data = nodes.store.body(entry)
    if entry.delivery_count:
        data = redelivered(data, entry.delivery_count)
    if isinstance(att.queue, Outbox):
        data = att.queue.labelled(data, entry)
    out = new_delivery(link)
    lib.pn_link_send(p, data, len(data))
    lib.pn_link_advance(p)
    link.delivered += 1
    traffic.sent(nodes, att, len(data), att.sub.browse or link.presettle)
    if att.sub.browse:
        lib.pn_delivery_settle(out)  # a copy: its outcome changes nothing
    elif link.presettle:
        lib.pn_delivery_settle(out)
        att.queue.accepted(held)
    else:
        att.out[out] = held


def outcome(nodes: Nodes, att: Attachment, d: Any) -> None:
    held = att.out.get(d)
    if held is None:
        if lib.pn_delivery_settled(d):
            lib.pn_delivery_settle(d)
        return
    txn = nodes.coordinator.enlisted(d)
    if txn is not False:
        if txn is not None:
            del att.out[d]  # the transaction has it now, applied at its discharge
            nodes.coordinator.outcome(txn, att, d, held)
        return
    state = lib.pn_delivery_remote_state(d)
    if state not in TERMINAL:
        if not lib.pn_delivery_settled(d):
            return
        # Settled with no outcome (Proton does so for what a detaching link had): maybe
        # processed, maybe not, so a failed attempt, as when the link goes.
        state = lib.PN_MODIFIED
    del att.out[d]
    traffic.settled(nodes, att, state)
    queue = att.queue
    assert queue is not None and att.sub is not None
    link = att.link
    if state == ACCEPTED:
        link.accepted += 1
        queue.accepted(held)
    elif state == REJECTED:
        link.rejected += 1
        disposition = lib.pn_delivery_remote(d)
        cond = get_condition(lib.pn_disposition_condition(disposition))
        dead_letter(nodes, queue, held, "rejected", cond[:2] if cond else None)
    elif state == lib.PN_RELEASED:
        link.released += 1
        returned(nodes, queue, held, failed=False, excluded=None)
    else:
        link.modified += 1
        disposition = lib.pn_delivery_remote(d)
        stated = lib.pn_delivery_remote_state(d) == lib.PN_MODIFIED
        here = stated and bool(lib.pn_disposition_is_undeliverable(disposition))
        returned(
            nodes,
            queue,
            held,
            failed=not stated or bool(lib.pn_disposition_is_failed(disposition)),
            excluded=att.sub.key if here else None,
        )
    lib.pn_delivery_settle(d)
    nodes.router.fwd.touched.add(link.conn)
    if state in (lib.PN_RELEASED, lib.PN_MODIFIED):
        # Another consumer first: what came back goes to the others before this one.
        for other in nodes.of(att.node):
            if other is not att and other.queue is queue:
                pump(nodes, other)
        if att.link in nodes.attached:
            pump(nodes, att)
    else:
        unblock(nodes, att.node)  # one fewer message: room for a blocked producer
    nodes.lifetime_check(att.node, emptied=True)


def returned(nodes: Nodes, queue: Queue, held: Held, failed: bool, excluded: int | None) -> None:
    if not queue.returned(held, failed, excluded):
        dead_letter(nodes, queue, held, "delivery_limit", None)


def unblock(nodes: Nodes, node: Node) -> None:
    """Room again in a node that blocks at its limit: its producers get credit."""
    s = node.settings
    if s.atLimit != "block" or (s.maxDepth is None and s.maxBytes is None) or node.full():
        return
    for att in nodes.of(node):
        if att.queue is None:
            nodes.credit(att.link, node)


def dead_letter(
    nodes: Nodes, queue: Queue, held: Held, reason: str, condition: tuple[str, str | None] | None
) -> None:
    """Off the queue: to its dead letter address with why, or dropped and counted. Off the
    queue and into the next one in one store record: a crash keeps it in one of them."""
    store = nodes.store
    assert store is not None
    target = queue.settings.deadLetterAddress
    if target is not None:
        data = dead_lettered(store.body(held.entry), reason, queue.name, condition)
        queue.dead_lettered += 1
        with store.atomic():
            queue.remove(held)
            send_to(nodes, target, data)
    else:
        queue.dropped += 1
        queue.remove(held)
    log.info("node.dead_letter", node=queue.name, reason=reason, to=target)


def send_to(nodes: Nodes, address: str, data: bytes) -> None:
    """A message of the router's own to `address`: into its node here, into the outbox for
    its node elsewhere (router/nodes/moving.py), or routed when the address has no node."""
    rule = nodes.lookup(address)
    if rule is not None:
        if owner(address, nodes.hosts(rule[1])) != nodes.router.id:
            nodes.mover.post(address, data)
            return
        node = nodes.node(address)
        if node is not None:
            nodes.take(node, data)
            pump_node(nodes, node)
            return
    forwarder = nodes.router.fwd
    msg = Message(data, scan(data), EMPTY_ANNOTATIONS, EMPTY_ANNOTATIONS, address)
    entry = forwarder.entry(address)
    msg.entry = entry
    forwarder.route(msg, entry, None, None)
    forwarder.forget_if_idle(entry)
