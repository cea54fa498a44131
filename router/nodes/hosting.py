"""Hosted queues and topics in the engine: which node a link or message is for, and where.

An address with a `node` (router/nodes/config.py) is not routed to consumers: its messages
are stored by the one host router that placement.py names for it, and handed out from there.

- A link attached to such an address on any router is link-routed to the host, as a link to
  `(host)/node` (router/containers/ does the relaying), so the node sees each producer and
  consumer itself: their credit, filters, distribution mode, durability and outcomes, end to
  end. A node that refuses the link (visibility, a bad filter) says why.
- A message to such an address from an anonymous sender goes to the host as `(host)/node`.
- On the host, producers' messages come in through router/nodes/intake.py and go out to
  consumers through router/nodes/distribution.py.

At start the store's messages are taken back into their nodes before any link attaches.
"""

from __future__ import annotations

import time
from itertools import count
from typing import TYPE_CHECKING, Any

from router.addressing import split_container
from router.addressing.rules import TokenTree, rule_tokens
from router.forwarder import ACCEPTED, Message
from router.log import get_logger
from router.management import HOSTED_NODE
from router.nodes import distribution, intake
from router.nodes.config import NodeSettings
from router.nodes.facts import MessageFacts, facts_of
from router.nodes.filters import parse_filters
from router.nodes.placement import owner
from router.nodes.queue import Held, Queue, Subscriber
from router.nodes.topic import Subscription, Topic, subscription_name
from router.pn import data_get, data_put, lib, text
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
        intake.credit(self, link, node)
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
        distribution.pump(self, self.attached[link])

    def detached(self, link: Link, closed: bool) -> None:
        """A node's link went (detached, closed, or its connection lost)."""
        att = self.attached.pop(link, None)
        if att is None or att.queue is None:
            return
        queue = att.queue
        # Sent but not settled: maybe processed, maybe not. Counted as a failed attempt.
        for held in att.out.values():
            distribution.returned(self, queue, held, failed=True, excluded=None)
        att.out.clear()
        if att.sub is not None:
            queue.forget_subscriber(att.sub.key)
        if isinstance(queue, Subscription):
            queue.attached -= 1
            if not queue.durable_subscription or (closed and queue.attached == 0):
                queue.topic.unsubscribe(queue)
        distribution.pump_node(self, att.node)

    def flow(self, link: Link) -> None:
        """A consumer's credit (or drain) changed."""
        att = self.attached.get(link)
        if att is not None and att.queue is not None:
            distribution.pump(self, att)

    def connection_closed(self, conn: Connection) -> None:
        for link in [link for link in self.attached if link.conn is conn]:
            self.detached(link, closed=False)

    # ----- messages in ------------------------------------------------------------------------

    def delivery(self, link: Link, d: Any) -> None:
        att = self.attached.get(link)
        if att is None:
            return
        if link.incoming:
            intake.transfer(self, att, d)
        else:
            distribution.outcome(self, att, d)

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
            durable = intake.take(self, node, bytes(msg.plain()))
        except ValueError as err:
            intake.reject(self, fwd, "amqp:decode-error", str(err))
            return True
        if durable is None:
            intake.reject(self, fwd, *intake.full_error(node))
        elif fwd is not None:
            if durable:
                self.awaiting.append(fwd)
            else:
                forwarder.settle_incoming(fwd, ACCEPTED)
        distribution.pump_node(self, node)
        return True

    # ----- messages out -----------------------------------------------------------------------

    # ----- time and management ----------------------------------------------------------------

    def tick(self, now: float) -> None:
        """From housekeeping: expire what is past its time."""
        for node in list(self.nodes.values()):
            queues = list(node.subscriptions.values()) if isinstance(node, Topic) else [node]
            for queue in queues:
                for held in queue.expire(now):
                    queue.expired += 1
                    if queue.settings.deadLetterAddress is not None:
                        distribution.dead_letter(self, queue, held, "expired", None)
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

    def flush(self) -> None:
        """End of a turn of the loop (router/nodes/intake.py)."""
        intake.flush(self)

    def close(self) -> None:
        if self.store is not None:
            self.store.sync()
            self.store.close()
