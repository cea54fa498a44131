"""Queues that belong elsewhere now move there, messages and all.

When an address's hosts change (a Router scaled, a live configuration change), placement.py
names a new host for some nodes (as few as it can). Links and messages then go to the new
host at once; a router still holding messages of a node it no longer hosts sends them on, as
a sender to `(new host)/node`, and lets each go only once the new host has accepted it (a
durable one after its sync there). Messages that come back (released, the link lost) stay and
go on the next try. A node that is empty and has no link here any more is dropped.

The same holds for messages that reached a host while the others' view of the hosts was
stale: wherever they landed, they end up on the node's host.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from router.log import get_logger
from router.nodes.placement import owner
from router.nodes.queue import Queue, Subscriber
from router.pn import cbytes, lib

if TYPE_CHECKING:
    from router.links import Link
    from router.nodes.hosting import Nodes

log = get_logger("router.nodes")

CHECK_SECONDS = 2.0


class Mover:
    def __init__(self, nodes: Nodes) -> None:
        self.nodes = nodes
        self.links: dict[str, Link] = {}  # node -> our link sending its messages on
        self.next_check = 0.0

    def tick(self, now: float) -> None:
        if now < self.next_check:
            return
        self.next_check = now + CHECK_SECONDS
        nodes = self.nodes
        me = nodes.router.id
        for name, node in list(nodes.nodes.items()):
            rule = nodes.lookup(name) if name not in nodes.made else None
            if rule is None or not isinstance(node, Queue):
                continue  # a topic's subscriptions stay with their subscribers
            host = owner(name, nodes.hosts(rule[1]))
            link = self.links.get(name)
            if host == me:
                if link is not None:
                    self.stop(name)
                continue
            if node.depth == 0:
                if not any(
                    att.node is node and not self.moving(att.link) for att in nodes.of(node)
                ):
                    self.stop(name)
                    nodes.forget(node)
                continue
            if link is None or link not in nodes.attached:
                self.start(node, host)

    def start(self, node: Queue, host: str) -> None:
        from router.nodes.hosting import Attachment

        nodes = self.nodes
        router = nodes.router
        network = router.network
        hop = network.next_hop(host) if network is not None else None
        if hop is None:
            return  # not reachable now: tried again at the next check
        conn = hop.conn
        p = lib.pn_sender(router.linkrouter.session(conn), cbytes(f"{router.id}.move.{node.name}"))
        lib.pn_terminus_set_address(lib.pn_link_target(p), cbytes(f"({host})/{node.name}"))
        link = router.register_link(p, conn, incoming=False)
        link.kind = "node"
        link.address = node.name
        lib.pn_link_open(p)
        self.links[node.name] = link
        nodes.add(Attachment(link, node, node, Subscriber(next(nodes.sub_keys), False, None)))
        router.fwd.touched.add(conn)
        log.info("node.moving", node=node.name, to=host, messages=node.depth)

    def stop(self, name: str) -> None:
        link = self.links.pop(name, None)
        if link is not None and link in self.nodes.attached:
            self.nodes.detached(link, closed=True)
            self.nodes.router.detach(link)

    def moving(self, link: Link) -> bool:
        return self.links.get(link.address or "") is link
