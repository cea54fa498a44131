"""The router's state as management rows, with Qpid Dispatch's entity and attribute names.

The agent (router/management/agent.py) pages and filters; this module only reads the live router, so
`qdstat`/`qdmanage` see the same columns they see on a Dispatch router.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from router import __version__
from router.datapath.stats import memory_usage
from router.management.entitytypes import CONTAINER, HOSTED_NODE
from router.transport.pn import lib, text
from router.transport.tls import describe

if TYPE_CHECKING:
    from router.core.engine import Router
    from router.datapath.links import Link

PREFIX = "org.apache.qpid.dispatch."


def entities(router: Router) -> dict[str, Callable[[], list[dict[str, Any]]]]:
    return {
        PREFIX + "router": lambda: [router_row(router)],
        PREFIX + "connection": lambda: connection_rows(router),
        PREFIX + "router.link": lambda: link_rows(router),
        PREFIX + "router.address": lambda: address_rows(router),
        PREFIX + "listener": lambda: listener_rows(router),
        PREFIX + "connector": lambda: connector_rows(router),
        PREFIX + "router.node": lambda: node_rows(router),
        PREFIX + "router.config.linkRoute": lambda: link_route_rows(router),
        PREFIX + "sslProfile": lambda: ssl_profile_rows(router),
        PREFIX + "policy": lambda: policy_rows(router, "policy"),
        PREFIX + "vhost": lambda: policy_rows(router, "vhost"),
        PREFIX + "vhostStats": lambda: policy_rows(router, "vhostStats"),
        CONTAINER: lambda: router.containers.rows(),
        HOSTED_NODE: lambda: router.nodes.rows(),
    }


def policy_rows(router: Router, entity: str) -> list[dict[str, Any]]:
    """Dispatch's policy (one row), vhost and vhostStats rows, named as Dispatch names them."""
    rows = router.policy.rows()[entity]
    for row in rows:
        name = f"{entity}/{row['hostname']}" if entity != "policy" else "policy/policy"
        row.setdefault("name", name)
        row.setdefault("identity", row.get("hostname", name))
        row.setdefault("type", PREFIX + entity)
    return rows


LINK_TYPES = {
    "endpoint": "endpoint",
    "edge": "endpoint",
    "control": "router-control",
    "data": "inter-router",
    "routed": "endpoint",
    "gateway": "endpoint",
    "node": "endpoint",
}


def node_rows(router: Router) -> list[dict[str, Any]]:
    """`qdstat -n`: every router this one knows, with next hop and cost (none when standalone)."""
    if router.network is None:
        return []
    rows = router.network.control.nodes(
        link_label=lambda conn: getattr(conn, "conn_id", None),
        clock_offset=time.time() - time.monotonic(),
    )
    for row in rows:
        row.setdefault("name", f"router.node/{row['id']}")
        row.setdefault("identity", row["name"])
        row.setdefault("type", PREFIX + "router.node")
    return rows


def router_row(router: Router) -> dict[str, Any]:
    return {
        "name": f"router/{router.id}",
        "identity": f"router/{router.id}",
        "type": PREFIX + "router",
        "id": router.id,
        "mode": router.config.router.mode,
        "version": __version__,
        "workerThreads": 1,
        "uptimeSeconds": int(time.time() - router.started),
        "memoryUsage": memory_usage(),
        "area": "0",
        "linkRouteCount": len(router.linkrouter.table.configured),
        "autoLinkCount": 0,
        "linkCount": len(router.links),
        "nodeCount": len(router.network.routes.cost) if router.network is not None else 0,
        "addrCount": len(router.fwd.entries),
        "connectionCount": len(router.conns),
        **router.stats.as_dict(),
        "deliveriesStuck": stuck_deliveries(router),
        "linksBlocked": blocked_links(router),
    }


def blocked_links(router: Router) -> int:
    """Outgoing links with deliveries waiting and no credit to send them (qdstat -g)."""
    return sum(
        1
        for link in router.links.values()
        if not link.incoming and link.queue and lib.pn_link_credit(link.pn) <= 0
    )


def stuck_deliveries(router: Router) -> int:
    """Unsettled deliveries that have waited more than 10 s for an outcome, right now."""
    limit = time.monotonic() - 10.0
    return sum(
        1
        for link in router.links.values()
        if link.incoming
        for f in link.unsettled.values()
        if f.arrived < limit
    )


def connection_rows(router: Router) -> list[dict[str, Any]]:
    now = time.monotonic()
    rows = []
    for conn in router.conns.values():
        t = conn.transport
        sasl = lib.pn_sasl(t)
        encrypted = bool(lib.pn_transport_is_encrypted(t))
        ssl_proto, ssl_cipher = describe(conn.ssl) if encrypted else (None, None)
        rows.append(
            {
                "name": f"connection/{conn.host}",
                "identity": str(conn.conn_id),
                "type": PREFIX + "connection",
                "container": conn.remote_container,
                "opened": bool(lib.pn_connection_state(conn.pn) & lib.PN_LOCAL_ACTIVE),
                "host": conn.host,
                "dir": "in" if conn.inbound else "out",
                "role": conn.role,
                "protocol": "amqp",
                "isAuthenticated": bool(lib.pn_transport_is_authenticated(t)),
                "isEncrypted": encrypted,
                "ssl": encrypted,
                "sslProto": ssl_proto,
                "sslCipher": ssl_cipher,
                "sasl": text(lib.pn_sasl_get_mech(sasl)),
                "user": text(lib.pn_transport_get_user(t)),
                "uptimeSeconds": int(now - conn.opened_at),
                "active": True,
                "adminStatus": "enabled",
                "operStatus": "up",
            }
        )
    return rows


def link_rows(router: Router) -> list[dict[str, Any]]:
    rows = []
    for link in sorted(router.links.values(), key=lambda lk: lk.identity):
        rows.append(link_row(link))
    return rows


def link_row(link: Link) -> dict[str, Any]:
    return {
        "name": link.name,
        "identity": str(link.identity),
        "type": PREFIX + "router.link",
        "linkType": LINK_TYPES[link.kind],
        "linkDir": "in" if link.incoming else "out",
        "linkName": link.name,
        "owningAddr": link.entry.key if link.entry is not None else None,
        "capacity": link.capacity,
        "peer": None,
        "undeliveredCount": len(link.queue),
        "unsettledCount": len(link.unsettled),
        "deliveryCount": link.delivered,
        "presettledCount": link.presettled,
        "droppedPresettledCount": 0,
        "acceptedCount": link.accepted,
        "rejectedCount": link.rejected,
        "releasedCount": link.released,
        "modifiedCount": link.modified,
        "creditAvailable": lib.pn_link_credit(link.pn),
        "deliveriesDelayed1Sec": link.delayed1,
        "deliveriesDelayed10Sec": link.delayed10,
        "settleRate": 0,
        "zeroCreditSeconds": 0,
        "adminStatus": "enabled",
        "operStatus": "up",
        "connectionId": str(link.conn.conn_id),
        "priority": link.priority,
    }


def address_rows(router: Router) -> list[dict[str, Any]]:
    """Mobile, local and router addresses, and the link routes' C/D/E/F keys, by key."""
    local = router.fwd.local_handlers
    rows = [
        _address_row(
            key,
            entry.rule.distribution,
            sorted(entry.remote),
            inProcess=1 if key in local else 0,
            subscriberCount=len(entry.consumers),
            deliveriesIngress=entry.ingress,
            deliveriesEgress=entry.egress,
            priority=entry.rule.priority,
        )
        for key, entry in router.fwd.entries.items()
    ]
    linkrouter = router.linkrouter
    rows += [
        _address_row(
            rule.key,
            "linkBalanced",
            sorted(linkrouter.remote.get(rule.key, ())),
            containerCount=1 if linkrouter.local_container(rule) else 0,
        )
        for rule in linkrouter.table.rules
    ]
    return sorted(rows, key=lambda row: row["key"])


def _address_row(key: str, distribution: str, remote: list[str], **values: int) -> dict[str, Any]:
    row: dict[str, Any] = {
        "name": key,
        "identity": key,
        "type": PREFIX + "router.address",
        "key": key,
        "distribution": distribution,
        "inProcess": 0,
        "subscriberCount": 0,
        "remoteCount": len(remote),
        "containerCount": 0,
        "remoteHostRouters": remote,
        "deliveriesIngress": 0,
        "deliveriesEgress": 0,
        "deliveriesTransit": 0,
        "deliveriesToContainer": 0,
        "deliveriesFromContainer": 0,
        "priority": -1,
    }
    row.update(values)
    return row


def link_route_rows(router: Router) -> list[dict[str, Any]]:
    """Link routes as `qdmanage query --type linkRoute` lists them; operStatus is active while
    the route's container is connected here."""
    rows = []
    linkrouter = router.linkrouter
    for index, rule in enumerate(linkrouter.table.configured):
        name = f"linkRoute/{index}"
        rows.append(
            {
                "name": name,
                "identity": name,
                "type": PREFIX + "router.config.linkRoute",
                "prefix": rule.prefix,
                "pattern": rule.pattern,
                "addExternalPrefix": rule.add_prefix,
                "delExternalPrefix": rule.del_prefix,
                "containerId": rule.container_id,
                "connection": rule.connection,
                "distribution": "linkBalanced",
                "direction": rule.direction,
                "operStatus": "active" if linkrouter.local_container(rule) else "inactive",
            }
        )
    return rows


def listener_rows(router: Router) -> list[dict[str, Any]]:
    rows = []
    for sock, cfg in router.listeners:
        port = sock.getsockname()[1]
        name = cfg.name or f"listener/{cfg.host}:{port}"
        rows.append(
            {
                "name": name,
                "identity": name,
                "type": PREFIX + "listener",
                "host": cfg.host,
                "port": str(port),
                "role": cfg.role,
                "cost": cfg.cost,
                "linkCapacity": cfg.linkCapacity,
                "saslMechanisms": " ".join(cfg.saslMechanisms),
                "authenticatePeer": cfg.authenticatePeer,
                "idleTimeoutSeconds": cfg.idleTimeoutSeconds,
                "maxFrameSize": cfg.maxFrameSize,
                "stripAnnotations": cfg.stripAnnotations,
                "sslProfile": cfg.sslProfile,
                "requireSsl": cfg.requireSsl,
            }
        )
    return rows


def ssl_profile_rows(router: Router) -> list[dict[str, Any]]:
    """The sslProfiles, as Dispatch lists them; the password is never shown."""
    rows = []
    for profile in router.config.sslProfiles:
        rows.append(
            {
                "name": profile.name,
                "identity": profile.name,
                "type": PREFIX + "sslProfile",
                "certFile": profile.certFile,
                "privateKeyFile": profile.privateKeyFile,
                "caCertFile": profile.caCertFile,
                "ciphers": profile.ciphers,
                "protocols": profile.protocols,
            }
        )
    return rows


def connector_rows(router: Router) -> list[dict[str, Any]]:
    """Connectors with their live status: connectionStatus CONNECTING (first attempt under
    way), SUCCESS (open) or FAILED (waiting to retry; connectionMsg says why)."""
    rows = []
    for connector in router.connectors.items:
        cfg = connector.config
        rows.append(
            {
                "name": cfg.name,
                "identity": cfg.name,
                "type": PREFIX + "connector",
                "host": cfg.host,
                "port": str(cfg.port),
                "role": cfg.role,
                "cost": cfg.cost,
                "saslMechanisms": " ".join(cfg.saslMechanisms),
                "saslUsername": cfg.saslUsername,
                "maxFrameSize": cfg.maxFrameSize,
                "idleTimeoutSeconds": cfg.idleTimeoutSeconds,
                "stripAnnotations": cfg.stripAnnotations,
                "linkCapacity": cfg.linkCapacity,
                "sslProfile": cfg.sslProfile,
                "verifyHostname": cfg.verifyHostname,
                "connectionStatus": connector.status,
                "connectionMsg": connector.message,
            }
        )
    return rows
