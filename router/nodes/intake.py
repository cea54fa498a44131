"""Messages into hosted nodes: producers' transfers, their credit, and when they are accepted.

A durable message is accepted to its sender only once the store has synced it: `flush`, at the
end of each turn of the router's loop, syncs once for all that arrived in the turn (group
commit) and then accepts them; a non-durable one is accepted at once. At a node's limit a
sender gets no more credit (`atLimit: block`), or its message is rejected with
`amqp:resource-limit-exceeded` (`reject`). Each message is counted as a flow into the node
(router/nodes/traffic.py) as it is taken, with the answer it gets.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from router.datapath.forwarder import ACCEPTED, REJECTED
from router.nodes import distribution, traffic
from router.nodes.facts import facts_of
from router.nodes.message import stamp
from router.nodes.queue import Queue
from router.nodes.topic import Topic
from router.transport.pn import lib, set_condition

if TYPE_CHECKING:
    from router.datapath.links import Forward, Link
    from router.nodes.attachment import Attachment
    from router.nodes.hosting import Node, Nodes
    from router.nodes.outbox import Inbox

RESOURCE_LIMIT = "amqp:resource-limit-exceeded"


# A transfer or discharge naming a transaction the coordinator does not have (AMQP part 4).
UNKNOWN_ID = "amqp:transaction:unknown-id"


def transfer(nodes: Nodes, att: Attachment, d: Any) -> None:
    link = att.link
    p = link.pn
    if lib.pn_link_current(p) != d:
        return  # an earlier delivery the sender settled on its own: nothing to do
    data = nodes.router.receive(link, d)
    if data is None:
        return
    presettled = bool(lib.pn_delivery_settled(d))
    assert att.router is not None  # a producer's link
    txn = nodes.coordinator.enlisted(d)
    if txn is not False:
        if txn is not None:
            # Counted as its provisional outcome says, taken in or not at the discharge.
            nodes.coordinator.send(txn, att.node, bytes(data), d)
            traffic.put(nodes, att.node.name, att.router, len(data), ACCEPTED)
        else:
            settle(d, presettled, REJECTED, (UNKNOWN_ID, "no such transaction here"))
        credit(nodes, link, att.node)
        return
    outcome = ACCEPTED
    try:
        accepted: bool | None
        if att.into is not None:  # a durable subscription moving here
            accepted = take_into(att.into, bytes(data))
        elif att.inbox is not None:  # from another router's outbox
            accepted = take_once(nodes, att.inbox, att.node, bytes(data))
        else:
            accepted = take(nodes, att.node, bytes(data))
    except ValueError as err:
        outcome = REJECTED
        settle(d, presettled, REJECTED, ("amqp:decode-error", str(err)))
    else:
        if accepted is None:
            outcome = REJECTED
            settle(d, presettled, REJECTED, full_error(att.node))
        elif presettled or not accepted:
            settle(d, presettled, ACCEPTED, None)
        else:
            nodes.awaiting.append((link, d))  # the node has it: accepted once synced
    traffic.put(nodes, att.node.name, att.router, len(data), None if presettled else outcome)
    credit(nodes, link, att.node)
    distribution.pump_node(nodes, att.node)


def settle(d: Any, presettled: bool, state: int, error: tuple[str, str] | None) -> None:
    if not presettled:
        if error is not None:
            set_condition(lib.pn_disposition_condition(lib.pn_delivery_local(d)), *error)
        lib.pn_delivery_update(d, state)
    lib.pn_delivery_settle(d)


def full_error(node: Node) -> tuple[str, str]:
    s = node.settings
    return (
        RESOURCE_LIMIT,
        f"node {node.name!r} is full (maxDepth {s.maxDepth}, maxBytes {s.maxBytes})",
    )


def take(nodes: Nodes, node: Node, data: bytes) -> bool | None:
    """Keep the message in `node`: True when it is durable (accepted once synced), False
    when it may be accepted now, None when the node is full and rejects."""
    if node.full() and node.settings.atLimit == "reject":
        return None
    st = stamp(data, time.time())
    bound = nodes.bindings.get(node.name, ())
    facts = facts_of(data) if bound or isinstance(node, Topic) else None
    moved = passed = False
    for binding, filters in bound:
        # Bindings accept implicitly: the target takes responsibility (seed 002 §3.3).
        if facts is not None and filters.matches(facts):
            distribution.send_to(nodes, binding.address, data)
            passed = True
            if binding.mode == "move":
                moved = True
                break
    if isinstance(node, Topic):
        if node.subscriptions and facts is not None:
            node.publish(data, facts, st.priority, st.expiry, st.durable)
        else:
            node.enqueued += 1
            node.dropped += 0 if passed else 1
    elif not moved:
        node.put(data, st.priority, st.expiry, st.durable)
    return st.durable


def take_into(queue: Queue, data: bytes) -> bool:
    """Into one queue as it is (a subscription moved here, an outbox): durable or not, as
    `take`."""
    st = stamp(data, time.time())
    queue.put(data, st.priority, st.expiry, st.durable)
    return st.durable


def take_once(nodes: Nodes, inbox: Inbox, node: Node, data: bytes) -> bool | None:
    """A labelled message from another router's outbox (router/nodes/outbox.py): kept with
    its marker in one store record, or, already kept, accepted again at once."""
    mid, data = inbox.label(data)
    if inbox.seen(mid):
        return False
    assert nodes.store is not None
    with nodes.store.atomic():
        durable = take(nodes, node, data)
        if durable is not None:
            inbox.mark(mid)
    return durable


def credit(nodes: Nodes, link: Link, node: Node) -> None:
    """Top up a producer's credit, never past the node's room when it blocks at a limit."""
    p = link.pn
    if link.conn.closing or lib.pn_link_state(p) & lib.PN_LOCAL_CLOSED:
        return
    want = link.capacity
    s = node.settings
    if s.atLimit == "block" and s.maxDepth is not None:
        want = min(want, max(0, s.maxDepth - node.depth))
    if s.atLimit == "block" and node.full():
        want = 0
    have = lib.pn_link_credit(p)
    if want > have and (have * 2 <= want or have == 0):
        lib.pn_link_flow(p, want - have)
        nodes.router.fwd.touched.add(link.conn)


def reject(nodes: Nodes, fwd: Forward | None, error: str, why: str) -> None:
    nodes.router.fwd.reject_incoming(fwd, error, why)


def flush(nodes: Nodes) -> None:
    """End of a turn: one sync for every durable message taken in it, then accept them;
    what else was written (settlements, non-durable messages) goes to the OS."""
    store = nodes.store
    if store is None:
        return
    if not nodes.awaiting:
        store.flush()
        return
    store.sync()
    awaiting, nodes.awaiting = nodes.awaiting, []
    forwarder = nodes.router.fwd
    for item in awaiting:
        if isinstance(item, tuple):
            link, d = item
            if link in nodes.attached:
                lib.pn_delivery_update(d, ACCEPTED)
                lib.pn_delivery_settle(d)
                forwarder.touched.add(link.conn)
        else:
            forwarder.settle_incoming(item, ACCEPTED)
