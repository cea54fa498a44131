"""Queues that belong elsewhere now move there, messages and all.

When an address's hosts change (a Router scaled, a live configuration change), placement.py
names a new host for some nodes (as few as it can). Links and messages then go to the new
host at once; a router still holding messages of a node it no longer hosts sends them on, as
a sender to `(new host)/node`, and lets each go only once the new host has accepted it (a
durable one after its sync there). Messages that come back (released, the link lost) stay and
go on the next try. A node that is empty and has no link here any more is dropped.

Clients' links to such a node here are detached with `amqp:link:detach-forced`, so that they
attach again and reach the node on its new host (for a topic, once its durable subscriptions
are made there). A topic's durable subscriptions move like a queue's messages, each into the
subscription of the same name on the new host; non-durable ones go with their links. The same
holds for messages that reached a host while the others' view of the hosts was stale: wherever
they landed, they end up on the node's host.

Messages this router sends to a node on another router of its own accord (dead letters, a
binding's copies) travel the same way: they are taken into an outbox for that node here, in the
store, and let go once its host accepted them, which takes each once (router/nodes/outbox.py).
A binding accepts for its target, so what it passes on must not depend on the target's host
being reachable at that moment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from proton import symbol

from router import tokens
from router.log import get_logger
from router.nodes import distribution, intake
from router.nodes.attachment import Attachment
from router.nodes.filters import described
from router.nodes.outbox import OUTBOX, OUTBOX_LINK, Outbox
from router.nodes.placement import owner
from router.nodes.queue import Queue, Subscriber
from router.nodes.topic import SEPARATOR, Subscription, Topic
from router.transport.pn import cbytes, data_put, lib, set_condition

if TYPE_CHECKING:
    from router.datapath.links import Link
    from router.nodes.hosting import Node, Nodes

log = get_logger("router.nodes")

CHECK_SECONDS = 2.0
# In the attach of a link moving a durable subscription: "<container>\x00<link name>", and
# its filters (router/nodes/filters.py's `described`).
SUBSCRIPTION = "x-opt-routernet-subscription"
FILTERS = "x-opt-routernet-filters"
DETACH_FORCED = "amqp:link:detach-forced"


class Mover:
    def __init__(self, nodes: Nodes) -> None:
        self.nodes = nodes
        self.links: dict[str, Link] = {}  # node -> our link sending its messages on
        self.outboxes: dict[str, Outbox] = {}  # by the address of the node they are for
        self.next_check = 0.0

    def outbox(self, address: str) -> Outbox:
        """The outbox for node `address`, hosted elsewhere (kept in the store's nodes)."""
        box = self.outboxes.get(address)
        if box is None:
            nodes = self.nodes
            store = nodes.store
            assert store is not None
            name = f"{OUTBOX}{address}"
            props = store.node(name)
            token = props.get("token") if props is not None else None
            if not isinstance(token, str):
                token = tokens.token_urlsafe(12)
                store.put_node(name, {"outbox": address, "token": token})
            box = Outbox(address, store, nodes.facts, token)
            self.outboxes[address] = box
        return box

    def post(self, address: str, data: bytes) -> None:
        """A message of this router's own for node `address`, whose host is another router."""
        box = self.outbox(address)
        intake.take_into(box, data)
        # On our link now, if it has credit: it may have had all it will get (a host tops
        # credit up only as it runs low), and the next tick only starts a link that is gone.
        distribution.pump_node(self.nodes, box)
        self.next_check = 0.0  # a link started at the next tick, not in two seconds

    def tick(self, now: float) -> None:
        if now < self.next_check:
            return
        self.next_check = now + CHECK_SECONDS
        nodes = self.nodes
        me = nodes.router.id
        for address, box in list(self.outboxes.items()):
            self.send_outbox(address, box, me)
        for name, node in list(nodes.nodes.items()):
            rule = nodes.lookup(name) if name not in nodes.made else None
            if rule is None:
                continue
            host = owner(name, nodes.hosts(rule[1]))
            if host == me:
                for key in [k for k in self.links if k.split(SEPARATOR, 1)[0] == name]:
                    self.stop(key)
                continue
            if isinstance(node, Topic):
                if self.move_subscriptions(node, host):
                    self.redirect(node, host)
                if not node.subscriptions and not self.in_use(node):
                    nodes.forget(node)
                continue
            self.redirect(node, host)
            if node.depth:
                self.keep_moving(name, node, node, host, None)
            elif not self.in_use(node):
                self.stop(name)
                nodes.forget(node)

    def move_subscriptions(self, topic: Topic, host: str) -> bool:
        """A topic's durable subscriptions go to its new host, each as itself: made there by
        the attach of our link (so that what is published there from then on is kept for it),
        then their messages. True once every one is made there: only then are the topic's
        links here sent away (`redirect`), or what their producers publish at the new host
        would miss them. A subscriber still attached here shares its messages with our link
        meanwhile: it finds the rest there. A non-durable subscription goes with its link."""
        ready = True
        for name, sub in list(topic.subscriptions.items()):
            if sub.durable_subscription:
                if sub.depth or sub.attached or not self.made_there(name):
                    _, container, link_name = name.split(SEPARATOR, 2)
                    subscription = f"{container}{SEPARATOR}{link_name}"
                    self.keep_moving(name, topic, sub, host, subscription)
                    ready = ready and self.made_there(name)
                    continue
            elif sub.attached:
                continue
            self.stop(name)
            topic.unsubscribe(sub)
        return ready

    def redirect(self, node: Node, host: str) -> None:
        """Clients' links to a node that lives elsewhere now are detached, so that they attach
        again and reach it there; left alone, a consumer here would never see what producers
        send there. What a producer sent is accepted first (its sync), what a consumer had
        comes back (a failed attempt: maybe processed). A durable subscriber's link is detached,
        not closed, or its subscription would end."""
        nodes = self.nodes
        links = [att for att in nodes.of(node) if not self.moving(att.link)]
        if not links:
            return
        intake.flush(nodes)
        router = nodes.router
        for att in links:
            queue = att.queue
            closed = not (isinstance(queue, Subscription) and queue.durable_subscription)
            set_condition(
                lib.pn_link_condition(att.link.pn),
                DETACH_FORCED,
                f"node {node.name!r} now lives on router {host}: attach again to reach it",
            )
            nodes.detached(att.link, closed=closed)
            router.detach(att.link, closed=closed)
        log.info("node.redirected", node=node.name, to=host, links=len(links))

    def made_there(self, key: str) -> bool:
        link = self.links.get(key)
        return (
            link is not None
            and link in self.nodes.attached
            and bool(lib.pn_link_state(link.pn) & lib.PN_REMOTE_ACTIVE)
        )

    def send_outbox(self, address: str, box: Outbox, me: str) -> None:
        nodes = self.nodes
        store = box.store
        key = box.store_name
        rule = nodes.lookup(address)
        if not box.depth:
            if not self.in_use(box):
                self.stop(key)
                del self.outboxes[address]
                store.drop_node(key)
            return
        if rule is None:
            return  # no node at that address now: kept, sent if one comes back
        host = owner(address, nodes.hosts(rule[1]))
        if host != me:
            self.keep_moving(key, box, box, host, None)
            return
        self.stop(key)
        node = nodes.node(address)  # the node came here meanwhile: the messages go in
        if node is not None:
            box.refill()  # the rest of a paged outbox at the next ticks
            for held in list(box.messages.values()):
                if held.acquired:
                    continue
                with store.atomic():  # out of the outbox and into the node: a crash keeps one
                    if intake.take(nodes, node, store.body(held.entry)) is not None:
                        box.accepted(held)  # else the node is full: tried again later
            distribution.pump_node(nodes, node)

    def in_use(self, node: Node) -> bool:
        return any(not self.moving(att.link) for att in self.nodes.of(node))

    def keep_moving(
        self, key: str, node: Node, queue: Queue, host: str, subscription: str | None
    ) -> None:
        link = self.links.get(key)
        if link is None or link not in self.nodes.attached:
            self.start(key, node, queue, host, subscription)

    def start(
        self, key: str, node: Node, queue: Queue, host: str, subscription: str | None
    ) -> None:
        """Our sender to `(host)/node`; for a subscription, its attach names it (`SUBSCRIPTION`
        in the link properties) so that the new host puts what comes into that subscription."""
        nodes = self.nodes
        router = nodes.router
        network = router.network
        hop = network.next_hop(host) if network is not None else None
        if hop is None:
            return  # not reachable now: tried again at the next check
        conn = hop.conn
        # A link name is a C string: the separator (a NUL) would cut it short.
        name = f"{router.id}.move.{key.replace(SEPARATOR, '/')}"
        p = lib.pn_sender(router.linkrouter.session(conn), cbytes(name))
        lib.pn_terminus_set_address(lib.pn_link_target(p), cbytes(f"({host})/{node.name}"))
        if subscription is not None:
            filters = described(queue.filters) if isinstance(queue, Subscription) else []
            data_put(
                lib.pn_link_properties(p),
                {symbol(SUBSCRIPTION): subscription, symbol(FILTERS): filters},
            )
        elif isinstance(queue, Outbox):
            data_put(lib.pn_link_properties(p), {symbol(OUTBOX_LINK): [router.id, queue.token]})
        link = router.register_link(p, conn, incoming=False)
        link.kind = "node"
        link.address = key
        lib.pn_link_open(p)
        self.links[key] = link
        sub = Subscriber(next(nodes.sub_keys), False, None)
        nodes.add(Attachment(link, node, queue, sub, None))  # not a consumer's: no flow rows
        router.fwd.touched.add(conn)
        log.info("node.moving", node=key.replace(SEPARATOR, "/"), to=host, messages=queue.depth)

    def stop(self, name: str) -> None:
        link = self.links.get(name)
        if link is None:
            return
        if link in self.nodes.attached:
            self.nodes.detached(link, closed=True)  # still ours: what it had is no failure
            self.nodes.router.detach(link)
        del self.links[name]

    def moving(self, link: Link) -> bool:
        return self.links.get(link.address or "") is link
