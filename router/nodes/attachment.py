"""A link attached to a node hosted here, as the node's code keeps it: whose it is, what it
takes from, and what is in flight on it.

Its own module because both the host (router/nodes/hosting.py) and the mover
(router/nodes/moving.py), which the host drives, make attachments; the mover cannot import the
host back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from router.datapath.links import Link
    from router.nodes.hosting import Node
    from router.nodes.outbox import Inbox
    from router.nodes.queue import Held, Queue, Subscriber
    from router.nodes.topic import Subscription


class Attachment:
    """A link to a node here: a producer's, or a consumer's with its standing in a queue."""

    __slots__ = ("inbox", "into", "link", "node", "out", "queue", "router", "sub")

    def __init__(
        self,
        link: Link,
        node: Node,
        queue: Queue | None,
        sub: Subscriber | None,
        router: str | None,
    ):
        self.link = link
        self.node = node
        self.queue = queue  # what a consumer takes from: the queue, or its subscription
        self.sub = sub
        # Where the client's link entered the network, for the node's flow rows; None for
        # this router's own link moving the node elsewhere (router/nodes/moving.py).
        self.router = router
        self.out: dict[Any, Held] = {}  # our unsettled deliveries on a consumer's link
        # A producer's messages go straight into this subscription: the link of another
        # router moving a durable subscription here (router/nodes/moving.py).
        self.into: Subscription | None = None
        # Or each goes in once: the link of another router's outbox (router/nodes/outbox.py).
        self.inbox: Inbox | None = None
