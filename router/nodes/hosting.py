"""Hosted queues and topics in the engine: which node a link or message is for, and where.

An address with a `node` (router/nodes/config.py) is not routed to consumers: its messages
are stored by the one host router that placement.py names for it, and handed out from there.

- A link attached to such an address on any router is link-routed to the host, as a link to
  `(host)/node` (router/containers/ does the relaying), so the node sees each producer and
  consumer itself: their credit, filters, distribution mode, durability and outcomes, end to
  end. A node that refuses the link (visibility, a bad filter) says why.
- A message to such an address from an anonymous sender goes to the host as `(host)/node`.
- On the host, producers' messages come in through router/nodes/intake.py and go out to
  consumers through router/nodes/distribution.py; both ways are counted as flows there
  (router/nodes/traffic.py), from and to the router each client's link entered at.

At start the store's messages are taken back into their nodes before any link attaches.
"""

from __future__ import annotations

import time
from itertools import count
from pathlib import Path
from typing import TYPE_CHECKING, Any

from router import tokens
from router.addressing import parse, split_container
from router.addressing.rules import TokenTree, rule_tokens
from router.config.records import Binding, NodeSettings
from router.datapath.forwarder import ACCEPTED, MODIFIED, REJECTED, Message, flow_ingress
from router.linkroutes.relay import origin, origin_router
from router.linkroutes.table import LINK_BALANCED, NO_ROUTE, LinkRouteRule
from router.log import get_logger
from router.management.entitytypes import HOSTED_NODE
from router.nodes import distribution, intake, lifetime, traffic
from router.nodes.attachment import Attachment
from router.nodes.facts import MessageFacts, facts_of
from router.nodes.filters import (
    FilterError,
    Filters,
    binding_filters,
    from_described,
    parse_filters,
)
from router.nodes.moving import FILTERS, SUBSCRIPTION, Mover
from router.nodes.outbox import OUTBOX_LINK, Inbox, Outbox, inbox_name
from router.nodes.placement import owner
from router.nodes.queue import Queue, Subscriber
from router.nodes.topic import SEPARATOR, Subscription, Topic, subscription_name
from router.nodes.transactions import Coordinator
from router.store.store import Entry, Store
from router.telemetry.flows import router_name
from router.transport.pn import data_get, data_put, lib, set_condition, text

if TYPE_CHECKING:
    from router.config.records import RouterConfig
    from router.core.engine import Router
    from router.datapath.links import Forward, Link
    from router.transport.connection import Connection

log = get_logger("router.nodes")

Node = Queue | Topic
ROUTER_ROLES = ("inter-router", "edge")


class Made:
    """A node a client made: its lifetime policy, the connection it is exclusive to, and the
    link that made it."""

    __slots__ = ("conn", "creator", "policy")

    def __init__(self, policy: str, conn: Connection, creator: Link) -> None:
        self.policy = policy
        self.conn = conn
        self.creator = creator


class Nodes:
    def __init__(self, router: Router) -> None:
        self.router = router
        self.rules: TokenTree[tuple[str, NodeSettings]] = TokenTree()
        self.store: Store | None = None
        self.nodes: dict[str, Node] = {}
        self.made: dict[str, Made] = {}  # nodes clients made (dynamic), by name
        # A node's bindings (its address's), each with its compiled filters.
        self.bindings: dict[str, list[tuple[Binding, Filters]]] = {}
        self.attached: dict[Link, Attachment] = {}
        # The same, by node: what a message in or out of a node has to look at.
        self.links_of: dict[Node, list[Attachment]] = {}
        # Durable messages stored but not yet synced: accepted by `flush`.
        self.awaiting: list[tuple[Link, Any] | Forward] = []
        self.sub_keys = count(1)
        # Link-route keys for the addresses hosted here, and those advertised (`advertise`).
        self.served: set[str] = set()
        self.advertised: set[str] = set()
        self.hosting = False  # a host of some address's nodes under the configuration
        self.coordinator = Coordinator(self)
        self.mover = Mover(self)
        self.inboxes: dict[str, Inbox] = {}  # by store name
        self.configure(router.config)
        router.fwd.hosted = self.route

    def add(self, att: Attachment) -> Attachment:
        self.attached[att.link] = att
        self.links_of.setdefault(att.node, []).append(att)
        return att

    def remove(self, link: Link) -> Attachment | None:
        att = self.attached.pop(link, None)
        if att is not None:
            others = self.links_of[att.node]
            others.remove(att)
            if not others:
                del self.links_of[att.node]
        return att

    def of(self, node: Node) -> list[Attachment]:
        """The links to `node` here (a copy: what is done with them may change them)."""
        return list(self.links_of.get(node, ()))

    # What router/nodes/distribution.py calls to put a message into a node and to give its
    # producers credit: intake calls distribution (to pump what came in), so distribution
    # reaches intake through here rather than importing it back.

    def take(self, node: Node, data: bytes) -> bool | None:
        return intake.take(self, node, data)

    def credit(self, link: Link, node: Node) -> None:
        intake.credit(self, link, node)

    # ----- configuration and recovery ---------------------------------------------------------

    def configure(self, config: RouterConfig) -> None:
        rules: TokenTree[tuple[str, NodeSettings]] = TokenTree()
        hosting = False
        me = self.router.id
        self.served = set()
        for address in config.addresses:
            node = address.node
            if node is None:
                continue
            rules.add(rule_tokens(address.prefix, address.pattern), (address.key, node))
            if self.hosts(node) == [me] or me in node.hosts:
                hosting = True
                for direction in ("in", "out"):
                    route = LinkRouteRule(direction, address.prefix, address.pattern, me)
                    self.served.add(route.key)
        self.rules = rules
        self.hosting = hosting
        for name, hosted in self.nodes.items():
            rule = rules.find(name) if name not in self.made else None
            if rule is not None:  # live changes of limits, dead letter address, bindings
                hosted.settings = rule[1]
                self.bindings[name] = [(b, binding_filters(b)) for b in rule[1].bindings]
        path = config.store.path
        if self.store is None and path and (hosting or _holds_anything(Path(path))):
            # A store that is no host's any more is opened too: what it holds moves on.
            self.open_store(config)

    def open_store(self, config: RouterConfig) -> None:
        started = time.monotonic()
        store = self.store = Store.open(
            Path(config.store.path or ""),
            memory_bytes=config.store.memoryBytes,
            indexed=config.store.indexedMessages,
        )
        described = store.nodes()
        for name, props in described.items():
            if props.get("outbox"):
                self.mover.outbox(str(props["outbox"]))
            elif props.get("inbox"):
                inbox = Inbox(store, str(props["origin"]), str(props["inbox"]), props["token"])
                self.inboxes[name] = inbox
            elif props.get("subscription"):
                topic = self.node(str(props["topic"]))
                if isinstance(topic, Topic):
                    topic.subscribe(name, durable=True, filters=stored_filters(props, name))
            else:
                self.node(name)
        messages = 0
        for name, entries in store.recovered().items():
            found = described.get(name)
            queue = self.stored_queue(name, found)
            if name in self.inboxes:
                self.inboxes[name].restore(entries)
            elif queue is not None:
                if isinstance(queue, Outbox):
                    entries.sort(key=lambda e: e.id)  # its floor is its first (outbox.py)
                for entry in entries:
                    queue.restore(entry)
                messages += len(entries)
            elif found is None:
                for entry in entries:
                    store.settle(entry)  # a non-durable subscription's: gone with its link
            else:
                # No address hosts it here now: kept on disk, served again if one does.
                log.warning("store.unserved", node=name, messages=len(entries))
        for name in store.paged_nodes():
            if name not in described:
                store.drop_pages(name)  # a non-durable subscription's: gone with its link
        paged = sum(p.count for name in described if (p := store.paged(name)) is not None)
        log.info(
            "store.recovered",
            path=config.store.path,
            nodes=len(self.nodes),
            messages=messages + paged,
            paged=paged,
            seconds=round(time.monotonic() - started, 3),
        )

    def stored_queue(self, name: str, props: dict[str, Any] | None) -> Queue | None:
        """The queue (or durable subscription) the store keeps messages of under `name`."""
        if props is None:
            return None
        if props.get("outbox"):
            return self.mover.outboxes.get(str(props["outbox"]))
        if props.get("subscription"):
            topic = self.nodes.get(str(props["topic"]))
            return topic.subscriptions.get(name) if isinstance(topic, Topic) else None
        node = self.nodes.get(name)
        return node if isinstance(node, Queue) else None

    def held(self) -> int:
        """The queues and topics this router holds that some address still names (not the
        ones clients made, nor those whose address went: nowhere to move them), and its
        outboxes with messages: a router that is no host (`hosting`) and holds none has
        nothing to move, and its store can go."""
        nodes = sum(1 for name in self.nodes if name not in self.made and self.lookup(name))
        return nodes + self.outboxes_holding()

    def outboxes_holding(self) -> int:
        """Outboxes with messages their nodes' hosts have not taken yet."""
        return sum(1 for box in self.mover.outboxes.values() if box.depth)

    def inbox(self, origin: str, node: str, token: str) -> Inbox:
        """What this host took from `origin`'s outbox for `node` (router/nodes/outbox.py)."""
        found = self.inboxes.get(inbox_name(origin, node))
        if found is not None:
            found.renew(token)
            return found
        store = self.store
        assert store is not None
        inbox = self.inboxes[inbox_name(origin, node)] = Inbox(store, origin, node, token)
        store.put_node(inbox.name, inbox.props())
        return inbox

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
        self.bindings[name] = [(b, binding_filters(b)) for b in settings.bindings]
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
        if link.incoming and self.coordinator.attach(link):
            return True
        terminus = lib.pn_link_remote_target(p) if link.incoming else lib.pn_link_remote_source(p)
        if lib.pn_terminus_is_dynamic(terminus):
            return not link.incoming and self.make(link, terminus)
        address = text(lib.pn_terminus_get_address(terminus))
        if not address:
            return False
        made = self.made.get(address)
        if made is not None:
            return self.serve_made(link, address, made)
        if not self.rules:
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
            if router.containers.locate(host) is None and router.edge is None:
                router.linkrouter.refuse(
                    link,
                    NO_ROUTE,
                    f"node {name!r} lives on router {host}, which this router ({router.id})"
                    " cannot reach now",
                )
            else:
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

    def make(self, link: Link, terminus: Any) -> bool:
        """A dynamic receiver that asks for a node (router/nodes/lifetime.py): made here, if
        this router has a store. False leaves it a plain dynamic reply address."""
        store = self.store
        if store is None:
            return False
        wanted = lifetime.requested(
            data_get(lib.pn_terminus_properties(terminus)),
            data_get(lib.pn_terminus_capabilities(terminus)),
        )
        if wanted is None:
            return False
        kind, policy = wanted
        router = self.router
        name = f"_topo/0/{router.id}/temp.{tokens.token_urlsafe(16)}"
        settings = NodeSettings(type=kind)
        node: Node = (
            Topic(name, settings, store, self.facts)
            if kind == "topic"
            else Queue(name, settings, store, self.facts)
        )
        self.nodes[name] = node
        self.made[name] = Made(policy, link.conn, link)

        def deliver(msg: Message, fwd: Forward | None, _origin: Link | None) -> None:
            self.message(name, msg, fwd)  # replies to it, routed here from anywhere

        router.fwd.local_handlers[parse(name, router.id).key] = deliver
        link.address = name
        self.serve_consumer(link, node)
        log.info("node.made", node=name, type=kind, lifetime=policy, conn=link.conn.conn_id)
        return True

    def serve_made(self, link: Link, name: str, made: Made) -> bool:
        """A link to a node a client made: anyone may send to it, only its connection consume."""
        node = self.nodes[name]
        link.address = name
        if link.incoming:
            self.serve_producer(link, node)
        elif link.conn is not made.conn:
            self.router.linkrouter.refuse(
                link,
                "amqp:resource-locked",
                f"node {name!r} is exclusive to the connection that made it",
            )
        else:
            self.serve_consumer(link, node)
        return True

    def lifetime_check(self, node: Node, emptied: bool = False) -> None:
        """A link to a made node went, or a message left it: does it go now?"""
        made = self.made.get(node.name)
        if made is None:
            return
        links = len(self.links_of.get(node, ()))
        creator = made.creator in self.attached
        if lifetime.ended(made.policy, creator, links, emptied and node.depth == 0):
            self.delete(node)

    def delete(self, node: Node) -> None:
        """A made node goes, with its messages; links still attached are detached."""
        router = self.router
        del self.made[node.name]
        self.nodes.pop(node.name, None)
        router.fwd.local_handlers.pop(parse(node.name, router.id).key, None)
        for att in self.of(node):
            self.remove(att.link)
            for _ in att.out:
                traffic.settled(self, att, MODIFIED)  # gone with the node: maybe processed
            set_condition(
                lib.pn_link_condition(att.link.pn),
                "amqp:resource-deleted",
                f"node {node.name!r} was deleted (its lifetime policy)",
            )
            router.detach(att.link)
        queues = list(node.subscriptions.values()) if isinstance(node, Topic) else [node]
        for queue in queues:
            queue.clear()
        log.info("node.deleted", node=node.name)

    def serve_producer(self, link: Link, node: Node) -> None:
        p = link.pn
        lib.pn_terminus_copy(lib.pn_link_source(p), lib.pn_link_remote_source(p))
        lib.pn_terminus_copy(lib.pn_link_target(p), lib.pn_link_remote_target(p))
        lib.pn_link_set_rcv_settle_mode(p, lib.PN_RCV_FIRST)
        link.kind = "node"
        lib.pn_link_open(p)
        att = self.add(Attachment(link, node, None, None, origin_router(link, self.router.id)))
        if link.conn.role in ROUTER_ROLES:
            properties = data_get(lib.pn_link_remote_properties(p))
            if not isinstance(properties, dict):
                properties = {}
            moved = properties.get(SUBSCRIPTION)
            outbox = properties.get(OUTBOX_LINK)
            if isinstance(node, Topic) and isinstance(moved, str) and SEPARATOR in moved:
                name = f"{node.name}{SEPARATOR}{moved}"
                filters = stored_filters({"filters": properties.get(FILTERS)}, name)
                att.into = node.subscribe(name, durable=True, filters=filters)
            elif isinstance(outbox, list) and len(outbox) == 2:
                att.inbox = self.inbox(str(outbox[0]), node.name, str(outbox[1]))
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
        if lib.pn_terminus_is_dynamic(remote):
            lib.pn_terminus_set_address(source, node.name.encode())  # the node made for it
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
            name = subscription_name(node.name, *origin(link))
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
        att = self.add(Attachment(link, node, queue, sub, origin_router(link, self.router.id)))
        log.info(
            "node.consumer",
            node=node.name,
            conn=link.conn.conn_id,
            link=link.name,
            browse=browse,
            filters=bool(filters.applied),
        )
        distribution.pump(self, att)

    def detached(self, link: Link, closed: bool) -> None:
        """A node's link went (detached, closed, or its connection lost)."""
        if link in self.coordinator.links:
            self.coordinator.link_gone(link)
            return
        att = self.remove(link)
        if att is None:
            return
        if att.queue is not None:
            self.consumer_gone(att, closed)
        self.lifetime_check(att.node)

    def consumer_gone(self, att: Attachment, closed: bool) -> None:
        queue = att.queue
        assert queue is not None
        moving = self.mover.moving(att.link)  # our own link, moving the node elsewhere
        # Maybe processed, maybe not: a failed attempt (not so for a move that did not finish).
        failed = not moving
        # Last first: each goes back to the head of its queue, so the oldest ends first.
        for held in reversed(list(att.out.values())):
            traffic.settled(self, att, MODIFIED)
            distribution.returned(self, queue, held, failed=failed, excluded=None)
        att.out.clear()
        if att.sub is not None:
            queue.forget_subscriber(att.sub.key)
        if isinstance(queue, Subscription) and not moving:
            queue.attached -= 1
            if not queue.durable_subscription or (closed and queue.attached == 0):
                if queue.durable_subscription:  # its subscriber closed it: ended on purpose
                    log.info(
                        "node.unsubscribed",
                        node=queue.name,
                        subscription=queue.store_name.split(SEPARATOR, 1)[-1],
                        conn=att.link.conn.conn_id,
                        link=att.link.name,
                        messages=queue.depth,
                    )
                queue.topic.unsubscribe(queue)
        distribution.pump_node(self, att.node)

    def flow(self, link: Link) -> None:
        """A consumer's credit (or drain) changed."""
        att = self.attached.get(link)
        if att is not None and att.queue is not None:
            distribution.pump(self, att)

    def connection_closed(self, conn: Connection) -> None:
        for link in [
            link for link in (*self.attached, *self.coordinator.links) if link.conn is conn
        ]:
            self.detached(link, closed=False)

    # ----- messages in ------------------------------------------------------------------------

    def delivery(self, link: Link, d: Any) -> None:
        att = self.attached.get(link)
        if att is None:
            if link in self.coordinator.links:
                self.coordinator.control(link, d)
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
        node = self.nodes.get(name) if name in self.made else None
        if node is None:
            if self.lookup(name) is None:
                return False
            node = self.node(name)
        forwarder = self.router.fwd
        if node is None:
            forwarder.drop(fwd)
            return True
        data = bytes(msg.plain())
        ingress = router_name(flow_ingress(msg.ann, forwarder.me))
        try:
            durable = intake.take(self, node, data)
        except ValueError as err:
            intake.reject(self, fwd, "amqp:decode-error", str(err))
            durable = None
        else:
            if durable is None:
                intake.reject(self, fwd, *intake.full_error(node))
            elif fwd is not None:
                if durable:
                    self.awaiting.append(fwd)
                else:
                    forwarder.settle_incoming(fwd, ACCEPTED)
        outcome = None if fwd is None else ACCEPTED if durable is not None else REJECTED
        traffic.put(self, name, ingress, len(data), outcome, msg.sample)
        distribution.pump_node(self, node)
        return True

    # ----- messages out -----------------------------------------------------------------------

    # ----- time and management ----------------------------------------------------------------

    def forget(self, node: Node) -> None:
        """A node that lives elsewhere now, emptied here: no trace of it stays."""
        self.nodes.pop(node.name, None)
        self.bindings.pop(node.name, None)
        if self.store is not None:
            self.store.drop_node(node.name)
        log.info("node.moved", node=node.name)

    def advertise(self) -> None:
        """A host advertises its nodes' addresses as link routes toward it, as Dispatch keys
        them (`C`/`D` + prefix), so that a qdrouterd in the network link-routes its clients'
        links there (a host that is not a node's own relays the link on to it). Our routers
        need none of it: they place nodes themselves."""
        network = self.router.network
        if network is None or self.served == self.advertised:
            return
        for key in sorted(self.served - self.advertised):
            network.control.add_local(key, LINK_BALANCED)
        for key in sorted(self.advertised - self.served):
            network.control.remove_local(key)
        self.advertised = set(self.served)

    def tick(self, now: float) -> None:
        """From housekeeping: expire what is past its time, move what belongs elsewhere."""
        self.advertise()
        self.mover.tick(now)
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
        """Management's view (`io.routernet.node`): one row per node hosted here, and one per
        outbox while it holds anything (`/outbox/<node>`, of type `outbox`): messages this
        router passed on to a node elsewhere that its host has not taken yet."""
        rows = []
        boxes = [(f"/outbox/{a}", box) for a, box in self.mover.outboxes.items() if box.depth]
        for name, node in sorted([*self.nodes.items(), *boxes], key=lambda item: item[0]):
            links = self.of(node)
            producers = sum(1 for att in links if att.queue is None)
            consumers = len(links) - producers
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


def stored_filters(props: dict[str, Any], name: str) -> Filters | None:
    """A durable subscription's filters as kept; ones that no longer compile are dropped with
    a warning: the subscription then takes every message rather than lose one."""
    try:
        return from_described(props.get("filters"))
    except FilterError as err:
        log.warning(
            "subscription.filters_dropped",
            subscription=name.replace(SEPARATOR, "/"),
            error=str(err),
        )
        return None


def _holds_anything(path: Path) -> bool:
    try:
        return any(p.name != "lock" for p in path.iterdir())
    except OSError:
        return False
