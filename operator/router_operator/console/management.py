"""One router's ``$management``, asked as ``qdstat`` asks it, over a connection kept between
scrapes.

Kept rather than opened for every scrape: a router logs every connection it accepts, and a
console asking every two seconds would fill the log tail it shows with its own visits. A
connection that fails is closed and opened again on the next scrape.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from proton import Message
from proton.utils import BlockingConnection, BlockingReceiver, BlockingSender

from router.management.entitytypes import CONTAINER, HOSTED_NODE
from router_operator.console.view import CONSOLE

PREFIX = "org.apache.qpid.dispatch."

ENTITIES: dict[str, list[str]] = {
    "router": [
        "id",
        "mode",
        "version",
        "uptimeSeconds",
        "memoryUsage",
        "connectionCount",
        "linkCount",
        "addrCount",
        "deliveriesStuck",
        "linksBlocked",
    ],
    "connection": [
        "identity",
        "container",
        "role",
        "dir",
        "host",
        "uptimeSeconds",
        "user",
        "isEncrypted",
        "sasl",
    ],
    "router.link": [
        "identity",
        "linkType",
        "linkDir",
        "linkName",
        "owningAddr",
        "connectionId",
        "deliveryCount",
        "undeliveredCount",
        "unsettledCount",
        "creditAvailable",
    ],
    "router.address": [
        "key",
        "distribution",
        "subscriberCount",
        "remoteCount",
        "containerCount",
        "remoteHostRouters",
        "deliveriesIngress",
        "deliveriesEgress",
        "deliveriesTransit",
    ],
    "router.node": ["id", "nextHop", "cost", "linkState"],
    "router.config.linkRoute": ["prefix", "pattern", "containerId", "direction", "operStatus"],
    CONTAINER: ["containerId", "location", "places", "duplicate"],
    HOSTED_NODE: [
        "name",
        "nodeType",
        "router",
        "depth",
        "bytes",
        "consumers",
        "producers",
        "enqueued",
        "dequeued",
        "deadLettered",
        "expired",
        "durable",
    ],
}
"""What the console asks each router, by entity type (Dispatch's short names, or routernet's
own): the attributes its pages show."""

OPTIONAL = frozenset({CONTAINER, HOSTED_NODE, "router.config.linkRoute"})
"""Types a router may not know (qdrouterd in the network): it answers 400 and lists none."""


class ManagementError(Exception):
    """The router answered, but not with the rows asked for."""


class ManagementClient:
    """QUERYs to one router; not thread-safe (the scraper asks each router from one task)."""

    def __init__(self, endpoint: str, timeout: float) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self._conn: BlockingConnection | None = None
        self._requests: BlockingSender | None = None
        self._replies: BlockingReceiver | None = None
        self._reply_to = ""

    def _open(self) -> tuple[BlockingSender, BlockingReceiver]:
        if self._requests is None or self._replies is None:
            conn = BlockingConnection(
                f"amqp://{self.endpoint}", timeout=self.timeout, container_id=CONSOLE
            )
            self._conn = conn
            # Credit for every answer of a round at once: they come back to back.
            self._replies = conn.create_receiver(None, dynamic=True, credit=2 * len(ENTITIES))
            self._reply_to = self._replies.link.remote_source.address
            self._requests = conn.create_sender("$management")
        return self._requests, self._replies

    def query(
        self, entities: Mapping[str, list[str]] = ENTITIES
    ) -> dict[str, list[dict[str, Any]]]:
        """Entity type -> rows as dicts; raises on any failure, after closing the connection."""
        try:
            return self._query(entities)
        except BaseException:
            self.close()
            raise

    def _query(self, entities: Mapping[str, list[str]]) -> dict[str, list[dict[str, Any]]]:
        requests, replies = self._open()
        for number, (entity, attributes) in enumerate(entities.items()):
            requests.send(
                Message(
                    reply_to=self._reply_to,
                    correlation_id=number,
                    body={"attributeNames": attributes},
                    properties={
                        "operation": "QUERY",
                        "type": "org.amqp.management",
                        "name": "self",
                        "entityType": entity if entity.startswith("io.") else PREFIX + entity,
                    },
                )
            )
        result: dict[str, list[dict[str, Any]]] = {}
        names = list(entities)
        for _ in names:
            response = replies.receive(self.timeout)
            if replies.fetcher.unsettled:  # qdrouterd's replies are unsettled, ours pre-settled
                replies.accept()
            number = response.correlation_id
            if not isinstance(number, int) or not 0 <= number < len(names):
                raise ManagementError(f"a reply to no request of ours: {number!r}")
            entity = names[number]
            properties = response.properties or {}
            code = properties.get("statusCode")
            if code == 400 and entity in OPTIONAL:
                result[entity] = []
                continue
            if code != 200:
                why = properties.get("statusDescription")
                raise ManagementError(f"QUERY {entity}: {code} {why}")
            columns = response.body["attributeNames"]
            result[entity] = [
                dict(zip(columns, row, strict=True)) for row in response.body["results"]
            ]
        return result

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = self._requests = self._replies = None
