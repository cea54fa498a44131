"""Hosted queues and topics in the engine: links and messages to and from the nodes.

An address with a `node` (router/nodes/config.py) is not routed to consumers: its messages
are stored by the one host router that placement.py names for it, and handed out from there.

- A link attached to such an address on any router is link-routed to the host, as a link to
  `(host)/node` (router/containers/ does the relaying), so the node sees each producer and
  consumer itself: their credit, filters, distribution mode, durability and outcomes, end to
  end. A node that refuses the link (visibility, exclusivity, a bad filter) says why.
- A message to such an address from an anonymous sender goes to the host as `(host)/node`.
- On the host, a durable message is accepted only once the store has synced it (`flush`, at
  the end of each turn of the loop: one fsync for all that arrived together); a non-durable
  one at once. At the node's limit a sender gets no more credit (`atLimit: block`), or its
  message is rejected with `amqp:resource-limit-exceeded` (`reject`).
- Consumers are sent what the queue (or their topic subscription) gives them while they have
  credit; their outcomes are the queue's instructions (router/nodes/queue.py).
- Rejected messages, those delivered too often and expired ones go to the dead letter address
  when the node has one (the reason in their annotations), else are dropped and counted.

At start the store's messages are taken back into their nodes before any link attaches.
"""

from __future__ import annotations

import time
from itertools import count
from typing import TYPE_CHECKING, Any

from router.addressing import split_container
from router.addressing.rules import TokenTree, rule_tokens
from router.forwarder import ACCEPTED, REJECTED, TERMINAL, Message, new_delivery
from router.log import get_logger
from router.management import HOSTED_NODE
from router.nodes.config import NodeSettings
from router.nodes.facts import MessageFacts, facts_of
from router.nodes.filters import parse_filters
from router.nodes.message import dead_lettered, redelivered, stamp
from router.nodes.placement import owner
from router.nodes.queue import Held, Queue, Subscriber
from router.nodes.topic import Subscription, Topic, subscription_name
from router.pn import data_get, data_put, get_condition, lib, set_condition, text
from router.sections import EMPTY_ANNOTATIONS, scan
from router.store.store import Entry, Store

if TYPE_CHECKING:
    from router.config import RouterConfig
    from router.connection import Connection
    from router.engine import Router
    from router.links import Forward, Link

log = get_logger("router.nodes")

Node = Queue | Topic
ROUTER_ROLES = ("inter-router", "edge")
RESOURCE_LIMIT = "amqp:resource-limit-exceeded"


class Attachment:
    """A link to a node here: a producer's, or a consumer's with its standing in a queue."""

    __slots__ = ("link", "node", "out", "queue", "sub")

    def __init__(self, link: Link, node: Node, queue: Queue | None, sub: Subscriber | None):
        self.link = link
        self.node = node
        self.queue = queue  # what a consumer takes from: the queue, or its subscription
        self.sub = sub
        self.out: dict[Any, Held] = {}  # our unsettled deliveries on a consumer's link


class Nodes:
    def __init__(self, router: Router) -> None:
        self.router = router
        self.rules: TokenTree[tuple[str, NodeSettings]] = TokenTree()
        self.store: Store | None = None
        self.nodes: dict[str, Node] = {}
        self.attached: dict[Link, Attachment] = {}
        # Durable messages stored but not yet synced: accepted by `flush`.
        self.awaiting: list[tuple[Link, Any] | Forward] = []
        self.sub_keys = count(1)
        self.configure(router.config)
        router.fwd.hosted = self.route

    # ----- configuration and recovery ---------------------------------------------------------

    def configure(self, config: RouterConfig) -> None:
        rules: TokenTree[tuple[str, NodeSettings]] = TokenTree()
        hosting = False
        for address in config.addresses:
            node = address.node
            if node is None:
                continue
            rules.add(rule_tokens(address.prefix, address.pattern), (address.key, node))
            hosting = (
                hosting or self.hosts(node) == [self.router.id] or self.router.id in node.hosts
            )
        self.rules = rules
        if hosting and self.store is None and config.store.path:
            self.open_store(config)

    def open_store(self, config: RouterConfig) -> None:
        from pathlib import Path

        started = time.monotonic()
        store = self.store = Store.open(
            Path(config.store.path or ""), memory_bytes=config.store.memoryBytes
        )
        described = store.nodes()
        for name, props in described.items():
            if props.get("subscription"):
                topic = self.node(str(props["topic"]))
                if isinstance(topic, Topic):
                    topic.subscribe(name, durable=True, filters=None)
            else:
                self.node(name)
        messages = 0
        for name, entries in store.recovered().items():
            found = described.get(name)
            queue = self.stored_queue(name, found)
            if queue is not None:
                for entry in entries:
                    queue.restore(entry)
                messages += len(entries)
            elif found is None:
                for entry in entries:
                    store.settle(entry)  # a non-durable subscription's: gone with its link
            else:
                # No address hosts it here now: kept on disk, served again if one does.
                log.warning("store.unserved", node=name, messages=len(entries))
        log.info(
            "store.recovered",
            path=config.store.path,
            nodes=len(self.nodes),
            messages=messages,
            seconds=round(time.monotonic() - started, 3),
        )

    def stored_queue(self, name: str, props: dict[str, Any] | None) -> Queue | None:
        """The queue (or durable subscription) the store keeps messages of under `name`."""
        if props is None:
            return None
        if props.get("subscription"):
            topic = self.nodes.get(str(props["topic"]))
            return topic.subscriptions.get(name) if isinstance(topic, Topic) else None
        node = self.nodes.get(name)
        return node if isinstance(node, Queue) else None

    def hosts(self, settings: NodeSettings) -> list[str]:
        return settings.hosts or [self.router.id]

    def lookup(self, name: str) -> tuple[str, NodeSettings] | None:
        return self.rules.find(name)

    def node(self, name: str) -> Node | None:
        """The node `name` hosted here, made on first use."""
        found = self.nodes.get(name)
        if found is not None:
            return found
        rule = self.lookup(name)
        store = self.store
        if rule is None or store is None:
            return None
        settings = rule[1]
        made: Node
        if settings.type == "topic":
            made = Topic(name, settings, store, self.facts)
        else:
            made = Queue(name, settings, store, self.facts)
        self.nodes[name] = made
        if name not in store.nodes():
            store.put_node(name, {"type": settings.type})
        log.info("node.created", node=name, type=settings.type)
        return made

    def facts(self, entry: Entry) -> MessageFacts:
        assert self.store is not None
        return facts_of(self.store.body(entry))

    # ----- links ------------------------------------------------------------------------------

    def attach(self, link: Link) -> bool:
        """A peer attached `link`: True if it is for a hosted node (served here, relayed to its
        host, or refused), False to leave it to the rest of the router."""
        p = link.pn
        terminus = lib.pn_link_remote_target(p) if link.incoming else lib.pn_link_remote_source(p)
        if lib.pn_terminus_is_dynamic(terminus) or not self.rules:
            return False
        address = text(lib.pn_terminus_get_address(terminus))
        if not address:
            return False
        router = self.router
        relayed = False
        parts = split_container(address)
        if parts is not None:
            if parts[0] != router.id or not parts[1]:
                return False
            name, relayed = parts[1], True
        else:
            name = address
        rule = self.lookup(name)
        if rule is None:
            return False
        key, settings = rule
        link.address = name
        if settings.visibility != "both" and (settings.visibility == "inbound") != link.incoming:
            takes = "senders" if settings.visibility == "inbound" else "receivers"
            router.linkrouter.refuse(
                link,
                "amqp:unauthorized-access",
                f"node {name!r} (address {key}, visibility {settings.visibility}) takes {takes}"
                " only",
            )
            return True
        host = owner(name, self.hosts(settings))
        if host != router.id and not (relayed and link.conn.role in ROUTER_ROLES):
            router.containers.relay(link, host, name, f"({host})/{name}")
            return True
        node = self.node(name)
        if node is None:
            router.linkrouter.refuse(
                link, "amqp:internal-error", f"router {router.id} has no store for node {name!r}"
            )
            return True
        if link.incoming:
            self.serve_producer(link, node)
        else:
            self.serve_consumer(link, node)
        return True

    def serve_producer(self, link: Link, node: Node) -> None:
        p = link.pn
        lib.pn_terminus_copy(lib.pn_link_source(p), lib.pn_link_remote_source(p))
        lib.pn_terminus_copy(lib.pn_link_target(p), lib.pn_link_remote_target(p))
        lib.pn_terminus_set_address(lib.pn_link_target(p), node.name.encode())
        lib.pn_link_set_rcv_settle_mode(p, lib.PN_RCV_FIRST)
        link.kind = "node"
        lib.pn_link_open(p)
        self.attached[link] = Attachment(link, node, None, None)
        self.credit(link, node)
        log.info("node.producer", node=node.name, conn=link.conn.conn_id, link=link.name)

    def serve_consumer(self, link: Link, node: Node) -> None:
        p = link.pn
        remote = lib.pn_link_remote_source(p)
        try:
            filters = parse_filters(data_get(lib.pn_terminus_filter(remote)))
        except ValueError as err:
            self.router.linkrouter.refuse(link, "amqp:invalid-field", str(err))
            return
        browse = lib.pn_terminus_get_distribution_mode(remote) == lib.PN_DIST_MODE_COPY
        lib.pn_terminus_copy(lib.pn_link_source(p), remote)
        lib.pn_terminus_copy(lib.pn_link_target(p), lib.pn_link_remote_target(p))
        source = lib.pn_link_source(p)
        lib.pn_terminus_set_address(source, node.name.encode())
        data_put(lib.pn_terminus_filter(source), filters.applied or None)
        mode = lib.pn_link_remote_snd_settle_mode(p)
        lib.pn_link_set_snd_settle_mode(p, mode)
        link.presettle = mode == lib.PN_SND_SETTLED
        active = filters if filters.applied else None
        queue: Queue
        if isinstance(node, Topic):
            durable = lib.pn_terminus_get_durability(
                remote
            ) != lib.PN_NONDURABLE and lib.pn_terminus_get_expiry_policy(remote) == (
                lib.PN_EXPIRE_NEVER
            )
            container = link.conn.remote_container or ""
            name = subscription_name(node.name, container, link.name)
            if not durable:
                name = f"{name}\x00{link.identity}"
            queue = node.subscribe(name, durable, active)
            active = None  # the topic filters what enters the subscription
        else:
            queue = node
        link.kind = "node"
        lib.pn_link_open(p)
        sub = Subscriber(next(self.sub_keys), browse, active)
        if isinstance(queue, Subscription):
            queue.attached += 1
        self.attached[link] = Attachment(link, node, queue, sub)
        log.info(
            "node.consumer",
            node=node.name,
            conn=link.conn.conn_id,
            link=link.name,
            browse=browse,
            filters=bool(filters.applied),
        )
        self.pump(self.attached[link])

    def detached(self, link: Link, closed: bool) -> None:
        """A node's link went (detached, closed, or its connection lost)."""
        att = self.attached.pop(link, None)
        if att is None or att.queue is None:
            return
        queue = att.queue
        # Sent but not settled: maybe processed, maybe not. Counted as a failed attempt.
        for held in att.out.values():
            self.returned(queue, held, failed=True, excluded=None)
        att.out.clear()
        if att.sub is not None:
            queue.forget_subscriber(att.sub.key)
        if isinstance(queue, Subscription):
            queue.attached -= 1
            if not queue.durable_subscription or (closed and queue.attached == 0):
                queue.topic.unsubscribe(queue)
        self.pump_node(att.node)

    def flow(self, link: Link) -> None:
        """A consumer's credit (or drain) changed."""
        att = self.attached.get(link)
        if att is not None and att.queue is not None:
            self.pump(att)

    def connection_closed(self, conn: Connection) -> None:
        for link in [link for link in self.attached if link.conn is conn]:
            self.detached(link, closed=False)

    # ----- messages in ------------------------------------------------------------------------

    def delivery(self, link: Link, d: Any) -> None:
        att = self.attached.get(link)
        if att is None:
            return
        if link.incoming:
            self.transfer(att, d)
        else:
            self.outcome(att, d)

    def transfer(self, att: Attachment, d: Any) -> None:
        link = att.link
        p = link.pn
        if lib.pn_link_current(p) != d:
            return  # an earlier delivery the sender settled on its own: nothing to do
        data = self.router.receive(link, d)
        if data is None:
            return
        presettled = bool(lib.pn_delivery_settled(d))
        try:
            accepted = self.take(att.node, bytes(data))
        except ValueError as err:
            self.settle(d, presettled, REJECTED, ("amqp:decode-error", str(err)))
        else:
            if accepted is None:
                self.settle(d, presettled, REJECTED, self.full_error(att.node))
            elif presettled or not accepted:
                self.settle(d, presettled, ACCEPTED, None)
            else:
                self.awaiting.append((link, d))
        self.credit(link, att.node)
        self.pump_node(att.node)

    def settle(self, d: Any, presettled: bool, state: int, error: tuple[str, str] | None) -> None:
        if not presettled:
            if error is not None:
                set_condition(lib.pn_disposition_condition(lib.pn_delivery_local(d)), *error)
            lib.pn_delivery_update(d, state)
        lib.pn_delivery_settle(d)

    def full_error(self, node: Node) -> tuple[str, str]:
        s = node.settings
        return (
            RESOURCE_LIMIT,
            f"node {node.name!r} is full (maxDepth {s.maxDepth}, maxBytes {s.maxBytes})",
        )

    def take(self, node: Node, data: bytes) -> bool | None:
        """Keep the message in `node`: True when it is durable (accepted once synced), False
        when it may be accepted now, None when the node is full and rejects."""
        if node.full() and node.settings.atLimit == "reject":
            return None
        st = stamp(data, time.time())
        if isinstance(node, Topic):
            if node.subscriptions:
                node.publish(data, facts_of(data), st.priority, st.expiry, st.durable)
            else:
                node.enqueued += 1
                node.dropped += 1
        else:
            node.put(data, st.priority, st.expiry, st.durable)
        return st.durable

    def credit(self, link: Link, node: Node) -> None:
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
            self.router.fwd.touched.add(link.conn)

    def route(self, msg: Message, fwd: Forward | None, origin: Link | None) -> bool:
        """The forwarder's hook for a message nobody consumes here: False unless its address
        is a hosted node's, which it goes to (here, or at its host)."""
        name = msg.address
        rule = self.lookup(name) if self.rules else None
        if rule is None:
            return False
        host = owner(name, self.hosts(rule[1]))
        if host == self.router.id:
            return self.message(name, msg, fwd)
        address = f"({host})/{name}"
        msg.address = address
        forwarder = self.router.fwd
        entry = forwarder.entry(address)
        forwarder.route(msg, entry, fwd, origin)
        forwarder.forget_if_idle(entry)
        return True

    def message(self, name: str, msg: Message, fwd: Forward | None) -> bool:
        """A routed message for node `name` here (`(this router)/name` too): False if there is
        no such node here."""
        if self.lookup(name) is None:
            return False
        node = self.node(name)
        forwarder = self.router.fwd
        if node is None:
            forwarder.drop(fwd)
            return True
        try:
            durable = self.take(node, bytes(msg.plain()))
        except ValueError as err:
            self.reject(fwd, "amqp:decode-error", str(err))
            return True
        if durable is None:
            self.reject(fwd, *self.full_error(node))
        elif fwd is not None:
            if durable:
                self.awaiting.append(fwd)
            else:
                forwarder.settle_incoming(fwd, ACCEPTED)
        self.pump_node(node)
        return True

    def reject(self, fwd: Forward | None, error: str, why: str) -> None:
        if fwd is not None and fwd.in_d is not None:
            set_condition(lib.pn_disposition_condition(lib.pn_delivery_local(fwd.in_d)), error, why)
            self.router.fwd.settle_incoming(fwd, REJECTED)

    def flush(self) -> None:
        """End of a turn: one sync for every durable message taken in it, then accept them;
        what else was written (settlements, non-durable messages) goes to the OS."""
        store = self.store
        if store is None:
            return
        if not self.awaiting:
            store.flush()
            return
        store.sync()
        awaiting, self.awaiting = self.awaiting, []
        forwarder = self.router.fwd
        for item in awaiting:
            if isinstance(item, tuple):
                link, d = item
                if link in self.attached:
                    lib.pn_delivery_update(d, ACCEPTED)
                    lib.pn_delivery_settle(d)
                    forwarder.touched.add(link.conn)
            else:
                forwarder.settle_incoming(item, ACCEPTED)

    # ----- messages out -----------------------------------------------------------------------

    def pump_node(self, node: Node) -> None:
        for att in list(self.attached.values()):
            if att.node is node and att.queue is not None:
                self.pump(att)

    def pump(self, att: Attachment) -> None:
        link, queue, sub = att.link, att.queue, att.sub
        assert queue is not None and sub is not None and self.store is not None
        p = link.pn
        sent = False
        while lib.pn_link_credit(p) > 0:
            held = queue.take(sub)
            if held is None:
                break
            self.send(att, held)
            sent = True
        if lib.pn_link_get_drain(p) and lib.pn_link_credit(p) > 0:
            lib.pn_link_drained(p)
            sent = True
        if sent:
            self.router.fwd.touched.add(link.conn)

    def send(self, att: Attachment, held: Held) -> None:
        assert self.store is not None and att.queue is not None and att.sub is not None
        link = att.link
        p = link.pn
        entry = held.entry
        data = self.store.body(entry)
        if entry.delivery_count:
            data = redelivered(data, entry.delivery_count)
        out = new_delivery(link)
        lib.pn_link_send(p, data, len(data))
        lib.pn_link_advance(p)
        link.delivered += 1
        if att.sub.browse:
            lib.pn_delivery_settle(out)  # a copy: its outcome changes nothing
        elif link.presettle:
            lib.pn_delivery_settle(out)
            att.queue.accepted(held)
        else:
            att.out[out] = held

    def outcome(self, att: Attachment, d: Any) -> None:
        held = att.out.get(d)
        if held is None:
            if lib.pn_delivery_settled(d):
                lib.pn_delivery_settle(d)
            return
        state = lib.pn_delivery_remote_state(d)
        if state not in TERMINAL:
            if not lib.pn_delivery_settled(d):
                return
            # Settled with no outcome (Proton does so for what a detaching link had): maybe
            # processed, maybe not, so a failed attempt, as when the link goes.
            state = lib.PN_MODIFIED
        del att.out[d]
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
            self.dead_letter(queue, held, "rejected", cond[:2] if cond else None)
        elif state == lib.PN_RELEASED:
            link.released += 1
            self.returned(queue, held, failed=False, excluded=None)
        else:
            link.modified += 1
            disposition = lib.pn_delivery_remote(d)
            stated = lib.pn_delivery_remote_state(d) == lib.PN_MODIFIED
            here = stated and bool(lib.pn_disposition_is_undeliverable(disposition))
            self.returned(
                queue,
                held,
                failed=not stated or bool(lib.pn_disposition_is_failed(disposition)),
                excluded=att.sub.key if here else None,
            )
        lib.pn_delivery_settle(d)
        self.router.fwd.touched.add(link.conn)
        # Another consumer first: what came back goes to the others before this one.
        for other in list(self.attached.values()):
            if other is not att and other.queue is queue:
                self.pump(other)
        if att.link in self.attached:
            self.pump(att)
        if isinstance(att.node, Queue) or isinstance(queue, Subscription):
            self.unblock(att.node)

    def returned(self, queue: Queue, held: Held, failed: bool, excluded: int | None) -> None:
        if not queue.returned(held, failed, excluded):
            self.dead_letter(queue, held, "delivery_limit", None)

    def unblock(self, node: Node) -> None:
        """Room again in a node that blocks at its limit: its producers get credit."""
        if node.settings.atLimit != "block" or node.full():
            return
        for att in self.attached.values():
            if att.node is node and att.queue is None:
                self.credit(att.link, node)

    def dead_letter(
        self, queue: Queue, held: Held, reason: str, condition: tuple[str, str | None] | None
    ) -> None:
        """Off the queue: to its dead letter address with why, or dropped and counted."""
        assert self.store is not None
        target = queue.settings.deadLetterAddress
        if target is not None:
            data = dead_lettered(self.store.body(held.entry), reason, queue.name, condition)
            queue.dead_lettered += 1
            queue.remove(held)
            self.send_to(target, data)
        else:
            queue.dropped += 1
            queue.remove(held)
        log.info("node.dead_letter", node=queue.name, reason=reason, to=target)

    def send_to(self, address: str, data: bytes) -> None:
        """A message of the router's own to `address`: into a node here, or routed."""
        rule = self.lookup(address)
        if rule is not None and owner(address, self.hosts(rule[1])) == self.router.id:
            node = self.node(address)
            if node is not None:
                self.take(node, data)
                self.pump_node(node)
                return
        forwarder = self.router.fwd
        msg = Message(data, scan(data), EMPTY_ANNOTATIONS, EMPTY_ANNOTATIONS, address)
        entry = forwarder.entry(address)
        msg.entry = entry
        forwarder.route(msg, entry, None, None)
        forwarder.forget_if_idle(entry)

    # ----- time and management ----------------------------------------------------------------

    def tick(self, now: float) -> None:
        """From housekeeping: expire what is past its time."""
        for node in list(self.nodes.values()):
            queues = list(node.subscriptions.values()) if isinstance(node, Topic) else [node]
            for queue in queues:
                for held in queue.expire(now):
                    queue.expired += 1
                    if queue.settings.deadLetterAddress is not None:
                        self.dead_letter(queue, held, "expired", None)
                        queue.dead_lettered -= 1  # counted as expired
                    else:
                        queue.remove(held)

    def rows(self) -> list[dict[str, Any]]:
        """Management's view (`io.routernet.node`): one row per node hosted here."""
        rows = []
        for name, node in sorted(self.nodes.items()):
            consumers = producers = 0
            for att in self.attached.values():
                if att.node is node:
                    if att.queue is None:
                        producers += 1
                    else:
                        consumers += 1
            rows.append(
                {
                    "name": name,
                    "identity": name,
                    "type": HOSTED_NODE,
                    "nodeType": node.kind,
                    "router": self.router.id,
                    "consumers": consumers,
                    "producers": producers,
                    **node.counters(),
                }
            )
        return rows

    def close(self) -> None:
        if self.store is not None:
            self.store.sync()
            self.store.close()
