"""A topic the router hosts: every subscription gets its own copy of each message.

A subscription is a queue of its own (router/nodes/queue.py) fed by the topic, so what a
subscriber does with its copy (accept, release, modify) concerns it alone; only accepted
means done, for that subscriber. A subscription is named by its receiver's container id and
link name:

- durable (the source's `durable` is not none and its `expiry-policy` is never): it stays, with
  its messages, while the subscriber is away, and the same container and link name resume it;
  it is recorded in the store so it survives a restart;
- otherwise it goes with its link, and what it held with it.

Messages published while no subscription matches reach nobody: dropped and counted, as a
topic routes and does not keep.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from router.config.records import NodeSettings
from router.nodes.filters import described
from router.nodes.queue import Queue

if TYPE_CHECKING:
    from router.nodes.facts import MessageFacts
    from router.nodes.filters import Filters
    from router.store.store import Entry, Store

SEPARATOR = "\x00"  # in store names: no address contains it


def subscription_name(topic: str, container: str, link: str) -> str:
    return f"{topic}{SEPARATOR}{container}{SEPARATOR}{link}"


class Subscription(Queue):
    kind = "subscription"

    def __init__(
        self,
        topic: Topic,
        name: str,
        durable: bool,
        filters: Filters | None,
    ) -> None:
        super().__init__(topic.name, topic.settings, topic.store, topic.facts, store_name=name)
        self.topic = topic
        self.durable_subscription = durable
        self.filters = filters
        self.attached = 0  # links consuming it now


class Topic:
    kind = "topic"

    def __init__(
        self,
        name: str,
        settings: NodeSettings,
        store: Store,
        facts: Callable[[Entry], MessageFacts],
    ) -> None:
        self.name = name
        self.settings = settings
        self.store = store
        self.facts = facts
        self.subscriptions: dict[str, Subscription] = {}
        self.enqueued = 0
        self.dropped = 0
        # What the subscriptions that ended counted: the topic's totals never go back (metrics
        # counters, telemetry's per-window differences).
        self.ended = {"dequeued": 0, "deadLettered": 0, "expired": 0}

    def subscribe(self, name: str, durable: bool, filters: Filters | None) -> Subscription:
        """The subscription `name`, made if new. A durable one is kept in the store's nodes
        with its filters, so that what is published while its subscriber is away, across a
        restart too, is filtered as the subscriber asked."""
        sub = self.subscriptions.get(name)
        if sub is None:
            sub = self.subscriptions[name] = Subscription(self, name, durable, filters)
        elif filters is None or described(filters) == described(sub.filters):
            return sub
        else:
            sub.filters = filters
        if durable:
            props = {"topic": self.name, "subscription": True, "filters": described(sub.filters)}
            if self.store.node(name) != props:
                self.store.put_node(name, props)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """The subscription ends: its messages go with it."""
        self.subscriptions.pop(sub.store_name, None)
        ended = self.ended
        ended["dequeued"] += sub.dequeued
        ended["deadLettered"] += sub.dead_lettered
        ended["expired"] += sub.expired
        sub.clear()
        if sub.durable_subscription:
            self.store.drop_node(sub.store_name)

    def publish(
        self, data: bytes, facts: MessageFacts, priority: int, expiry: float | None, durable: bool
    ) -> int:
        """A copy for each subscription whose filter takes it; how many took one."""
        self.enqueued += 1
        taken = 0
        for sub in self.subscriptions.values():
            if sub.filters is None or sub.filters.matches(facts):
                sub.put(data, priority, expiry, durable)
                taken += 1
        if not taken:
            self.dropped += 1
        return taken

    @property
    def depth(self) -> int:
        return sum(sub.depth for sub in self.subscriptions.values())

    @property
    def bytes(self) -> int:
        return sum(sub.total_bytes for sub in self.subscriptions.values())

    def full(self) -> bool:
        return any(sub.full() for sub in self.subscriptions.values())

    def counters(self) -> dict[str, int]:
        subs = list(self.subscriptions.values())
        each = [s.counters() for s in subs]
        return {
            "depth": sum(c["depth"] for c in each),
            "bytes": sum(c["bytes"] for c in each),
            "durable": sum(c["durable"] for c in each),
            "paged": sum(c["paged"] for c in each),
            "enqueued": self.enqueued,
            "dequeued": self.ended["dequeued"] + sum(s.dequeued for s in subs),
            "deadLettered": self.ended["deadLettered"] + sum(s.dead_lettered for s in subs),
            "expired": self.ended["expired"] + sum(s.expired for s in subs),
            "subscriptions": len(subs),
        }
