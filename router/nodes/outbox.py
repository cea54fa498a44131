"""What a router sends of its own accord to a node on another router, and how that router
takes each message exactly once.

An outbox (router/nodes/moving.py sends it on) lets a message go only once the node's host
accepted it; if the link or either router goes before that outcome arrives, the message is
sent again, and the host may have it already. So each transfer is labelled, in its delivery
annotations (which relaying routers pass on as they are), with the message's id in the
sender's store and the outbox's floor (the lowest id it still holds); the attach of the link
names the outbox (`OUTBOX_LINK`: router id, token). The host (`Inbox`) keeps a marker per id
it took, written with the message as one store record, so that a crash keeps both or neither:
an id it has a marker for is accepted again and not kept twice. Ids below the floor will not
come again, so their markers go; a new token (a new outbox: the old one emptied, or a store
started afresh, whose ids start again) ends every marker of the old one. The few markers of
the last transfers stay until the outbox's next message.

Store ids grow with every message, across restarts; an outbox's messages are in id order
(at start `restore` is given them sorted), so its floor is its first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from proton import ulong

from router.config.records import NodeSettings
from router.log import get_logger
from router.nodes.message import with_delivery_annotation, without_delivery_annotation
from router.nodes.queue import Queue
from router.nodes.topic import SEPARATOR

if TYPE_CHECKING:
    from router.nodes.facts import MessageFacts
    from router.store.store import Entry, Store

log = get_logger("router.nodes")

# In the attach of an outbox's link: [router id, the outbox's token].
OUTBOX_LINK = "x-opt-routernet-outbox"
# In each transfer's delivery annotations: [its id, the outbox's floor].
LABEL = "x-opt-routernet-outbox-id"
# Store names: no node's name starts with the separator.
OUTBOX = f"{SEPARATOR}outbox{SEPARATOR}"
INBOX = f"{SEPARATOR}inbox{SEPARATOR}"


class Outbox(Queue):
    """Messages for node `name` on another router, kept until its host accepted them."""

    kind = "outbox"

    def __init__(
        self, name: str, store: Store, facts: Callable[[Entry], MessageFacts], token: str
    ) -> None:
        super().__init__(name, NodeSettings(), store, facts, store_name=f"{OUTBOX}{name}")
        self.token = token

    def labelled(self, data: bytes, entry: Entry) -> bytes:
        floor = next(iter(self.messages))  # `entry`'s own, or a lower one still held
        return with_delivery_annotation(data, LABEL, [ulong(entry.id), ulong(floor)])


class Inbox:
    """On a node's host: the ids it took from one router's outbox for that node."""

    def __init__(self, store: Store, origin: str, node: str, token: str) -> None:
        self.store = store
        self.name = inbox_name(origin, node)
        self.origin = origin
        self.node = node
        self.token = token
        self.markers: dict[int, Entry] = {}  # in arrival order: ids mostly ascending

    def props(self) -> dict[str, Any]:
        return {"inbox": self.node, "origin": self.origin, "token": self.token}

    def restore(self, entries: list[Entry]) -> None:
        for entry in sorted(entries, key=lambda e: e.id):
            self.markers[int(self.store.body(entry))] = entry

    def renew(self, token: str) -> None:
        """Another outbox of the same router for the same node: the old one's ids are over."""
        if token == self.token:
            return
        for entry in self.markers.values():
            self.store.settle(entry)
        self.markers.clear()
        self.token = token
        self.store.put_node(self.name, self.props())

    def label(self, data: bytes) -> tuple[int, bytes]:
        """The transfer's id, and the message as its sender had it; ValueError (one line) if
        it has no label. Markers below its floor go."""
        value, data = without_delivery_annotation(data, LABEL)
        if (
            not isinstance(value, list)
            or len(value) != 2
            or not all(isinstance(v, int) for v in value)
        ):
            raise ValueError(f"a transfer from an outbox has no valid {LABEL}: {value!r}")
        mid, floor = int(value[0]), int(value[1])
        markers = self.markers
        while markers:
            first = next(iter(markers))
            if first >= floor:
                break
            self.store.settle(markers.pop(first))
        return mid, data

    def seen(self, mid: int) -> bool:
        if mid not in self.markers:
            return False
        log.info("node.duplicate", node=self.node, origin=self.origin, id=mid)
        return True

    def mark(self, mid: int) -> None:
        """Taken: to be written in the same store record as the message (`Store.atomic`)."""
        self.markers[mid] = self.store.append(
            self.name, str(mid).encode(), priority=0, expiry=None, durable=True
        )


def inbox_name(origin: str, node: str) -> str:
    """The store name of what a host took from `origin`'s outbox for its `node`."""
    return f"{INBOX}{origin}{SEPARATOR}{node}"
