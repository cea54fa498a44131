"""An edge's link routes, registered on its interior as Dispatch's edges register theirs.

A client elsewhere in the network reaches a broker on an edge only if the interior knows to
send its link down to that edge. So while a configured link route's container is connected
here, the edge creates a connection-scoped link route for the route's pattern on its interior
(management CREATE of `org.apache.qpid.dispatch.router.connection.linkRoute` named
`<edge-id>/proxyLinkRoute/<key>`, sent to `$management` over the uplink: Dispatch's
edge_router/link_route_proxy.c does the same, and both kinds of interior serve it,
router/linkroutes/scoped.py on ours), and deletes it when the container goes. A new uplink starts
over: the interior dropped the routes with the old connection. Replies come down the edge's own
address, `_edge/<edge-id>/...`.

A request left unanswered for REQUEST_TIMEOUT is given up and made again at the next sync; one
the interior refuses (an interior that does not serve the type) is made again after
RETRY_SECONDS, each refusal logged.
"""

from __future__ import annotations

from itertools import count
from typing import TYPE_CHECKING, Any

from proton import Message as ProtonMessage

from router.addressing import parse
from router.datapath.forwarder import ACCEPTED
from router.linkroutes.scoped import CONN_LINK_ROUTE, CREATED, NO_CONTENT, NOT_FOUND
from router.log import get_logger
from router.transport.pn import cbytes, lib

if TYPE_CHECKING:
    from router.core.engine import Router
    from router.datapath.forwarder import Forward, Message
    from router.datapath.links import Link
    from router.linkroutes.table import LinkRouteRule
    from router.transport.connection import Connection

log = get_logger("router.linkroute")

REQUEST_TIMEOUT = 10.0  # seconds, as Dispatch's edge waits for its interior's answer
RETRY_SECONDS = 30.0


def proxy_pattern(rule: LinkRouteRule) -> str:
    """The pattern an interior is asked to route: a prefix `p` is the pattern `p/#`, as
    Dispatch's edge sends it (connection-scoped routes take patterns only)."""
    if rule.prefix is not None:
        return f"{rule.prefix}/#" if rule.prefix else "#"
    return rule.pattern or ""


class LinkRouteProxies:
    def __init__(self, router: Router) -> None:
        self.router = router
        self.reply_to = f"_edge/{router.id}/routernet.linkroutes"
        router.fwd.local_handlers[parse(self.reply_to, router.id).key] = self.on_reply
        self.uplink: Connection | None = None  # the connection the routes below were made on
        self.link: Link | None = None  # our sender to the interior's $management
        self.created: set[str] = set()  # route keys registered on the interior
        # correlation id -> (operation, route key, when sent)
        self.pending: dict[str, tuple[str, str, float]] = {}
        self.retry_at: dict[str, float] = {}  # route key -> when to ask again after a refusal
        self.ids = count(1)

    def sync(self, now: float) -> None:
        """Make the interior's routes for this edge what the containers here serve."""
        router = self.router
        edge = router.edge
        conn = edge.active if edge is not None and edge.uplink is not None else None
        if conn is None:
            return
        if conn is not self.uplink:
            self.uplink, self.link = conn, None
            self.created.clear()
            self.pending.clear()
            self.retry_at.clear()
        for corr, (operation, key, sent) in list(self.pending.items()):
            if now - sent > REQUEST_TIMEOUT:
                del self.pending[corr]
                log.warning("linkroute.proxy_unanswered", operation=operation, key=key)
        linkrouter = router.linkrouter
        wanted = {
            rule.key: rule
            for rule in linkrouter.table.configured
            if linkrouter.local_container(rule) is not None
        }
        busy = {key for _, key, _ in self.pending.values()}
        busy |= {key for key, at in self.retry_at.items() if at > now}
        for key, rule in wanted.items():
            if key not in self.created and key not in busy:
                self.request(
                    conn,
                    "CREATE",
                    key,
                    {"pattern": proxy_pattern(rule), "direction": rule.direction},
                    now,
                )
        for key in sorted(self.created - wanted.keys() - busy):
            self.request(conn, "DELETE", key, {}, now)

    def tick(self, now: float) -> None:
        """From housekeeping: sync again once a request timed out or a refusal's wait ended
        (the containers' comings and goings sync at once)."""
        if any(now - sent > REQUEST_TIMEOUT for _, _, sent in self.pending.values()) or any(
            at <= now for at in self.retry_at.values()
        ):
            self.retry_at = {key: at for key, at in self.retry_at.items() if at > now}
            self.sync(now)

    def request(
        self, conn: Connection, operation: str, key: str, body: dict[str, Any], now: float
    ) -> None:
        router = self.router
        link = self.link
        if link is None or router.links.get(link.pn) is not link:
            session = router.edge.session(conn) if router.edge is not None else None
            p = lib.pn_sender(session, cbytes(f"edge.linkroutes.{router.id}"))
            lib.pn_terminus_set_address(lib.pn_link_target(p), b"$management")
            link = self.link = router.register_link(p, conn, incoming=False)
            link.kind = "control"  # our own requests, never routed
            link.address = "$management"
            lib.pn_link_open(p)
        corr = f"linkroutes-{next(self.ids)}"
        name = f"{router.id}/proxyLinkRoute/{key}"
        request = ProtonMessage(
            address="$management",
            reply_to=self.reply_to,
            correlation_id=corr,
            properties={"operation": operation, "type": CONN_LINK_ROUTE, "name": name},
            body=body,
        )
        self.pending[corr] = (operation, key, now)
        router.send_control(link, bytes(request.encode()))

    def on_reply(self, msg: Message, fwd: Forward | None, origin: Link | None) -> None:
        """The interior's answer to a CREATE or DELETE."""
        if fwd is not None:
            self.router.fwd.settle_incoming(fwd, ACCEPTED)
        reply = ProtonMessage()
        try:
            reply.decode(bytes(msg.data))
            pending = self.pending.pop(str(reply.correlation_id), None)
            status = (reply.properties or {}).get("statusCode")
        except Exception as e:  # an answer we cannot read is no answer: the timeout retries
            log.warning("linkroute.proxy_bad_reply", error=str(e)[:200])
            return
        if pending is None:
            return  # for an uplink since left, or given up
        operation, key, _ = pending
        if operation == "CREATE" and status == CREATED:
            self.created.add(key)
            log.info("linkroute.proxy_created", key=key)
        elif operation == "DELETE" and status in (NO_CONTENT, NOT_FOUND):
            self.created.discard(key)
            log.info("linkroute.proxy_deleted", key=key)
        else:
            self.retry_at[key] = self.router.fwd.now + RETRY_SECONDS
            description = (reply.properties or {}).get("statusDescription")
            log.warning(
                "linkroute.proxy_refused",
                operation=operation,
                key=key,
                status=status,
                description=str(description)[:200],
            )
