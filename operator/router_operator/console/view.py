"""The routers' management rows as the console's pages see the network: routers and the links
between them, clients, addresses across routers, hosted queues and topics. Pure: a scrape goes
in with the time it was taken, JSON-ready dicts come out, so every page's numbers are tested
without a router.

Rates are differences of the routers' own counters between two scrapes (deliveries per
link, per address and router), so they need no telemetry and are as fresh as the last scrape.
A counter that went down (its router restarted) gives no rate for that scrape rather than a
negative one.

The network's own addresses (``_edge/…``, ``_routernet/…``, the management and topology ones)
are marked ``internal`` rather than left out: the pages hide them unless asked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from router.addressing.rules import TokenTree, rule_tokens
from router.management.entitytypes import CONTAINER, HOSTED_NODE
from router_operator.console.sources import Declared, Target

Rows = Mapping[str, list[dict[str, Any]]]

ROUTER_ROLES = ("inter-router", "edge")
"""Connection roles that join two routers; every other connection is a client's."""
CONTROL_LINK = "router-control"
CONSOLE = "routernet-console"
"""The console's own container id (management.py): its questions are not the network's
traffic, so an idle network shows no rate and no client."""
UPLINK = "edge.uplink."
"""The name an edge gives the link its traffic leaves on (router/edges/uplink.py)."""


@dataclass(frozen=True)
class Scrape:
    """One router's answer (or why there is none) at one moment (seconds since the epoch)."""

    target: Target
    at: float
    rows: Rows | None
    error: str | None = None

    @property
    def up(self) -> bool:
        return self.rows is not None


@dataclass
class Counters:
    """Counter readings of the last scrape, by key, to take the next one's rates from."""

    readings: dict[tuple[str, ...], tuple[float, float]] = field(default_factory=dict)

    def rate(
        self, now: Counters, key: tuple[str, ...], value: float | None, at: float
    ) -> float | None:
        """Per second since this reading of ``key``; records ``value`` in ``now``."""
        if value is None:
            return None
        now.readings[key] = (float(value), at)
        before = self.readings.get(key)
        if before is None or at <= before[1] or value < before[0]:
            return None
        return (value - before[0]) / (at - before[1])


def mobile_address(key: str) -> str | None:
    """The address of a mobile key (``M0jobs`` -> ``jobs``; Dispatch's phase digit), or None
    for router, topology, local and link-route keys."""
    if len(key) >= 2 and key[0] == "M" and key[1].isdigit():
        return key[2:]
    return None


def internal(address: str) -> bool:
    """The network's own: the edges' ``_edge/<id>``, telemetry's ``_routernet/…``, ``$…``."""
    return address.startswith(("_", "$"))


def _sum(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def build(
    scrapes: Sequence[Scrape], declared: Declared, before: Counters
) -> tuple[dict[str, Any], Counters]:
    """The view of one round of scrapes, and the counters the next round's rates start from."""
    now = Counters()
    routers = [_router(s, before, now) for s in scrapes]
    links = _links(scrapes, before, now)
    clients = _clients(scrapes, before, now)
    addresses = _addresses(scrapes, declared, before, now)
    nodes = _nodes(scrapes, declared)
    link_routes = _link_routes(scrapes, declared)
    containers = _containers(scrapes)
    at = max((s.at for s in scrapes), default=0.0)
    view = {
        "at": at,
        "networks": sorted({s.target.network for s in scrapes}),
        "routers": routers,
        "links": links,
        "clients": clients,
        "addresses": addresses,
        "nodes": nodes,
        "linkRoutes": link_routes,
        "containers": containers,
    }
    return view, now


def _router(s: Scrape, before: Counters, now: Counters) -> dict[str, Any]:
    t = s.target
    entry: dict[str, Any] = {
        "id": t.id,
        "network": t.network,
        "namespace": t.namespace,
        "mode": t.mode,
        "endpoint": t.endpoint,
        "where": t.where,
        "state": "up" if s.up else "down",
        "error": s.error,
    }
    if s.rows is None:
        return entry
    row = (s.rows.get("router") or [{}])[0]
    ours = _console_connections(s.rows)
    links = s.rows.get("router.link", [])
    out = sum(
        lk["deliveryCount"] or 0
        for lk in links
        if _data_out(lk) and str(lk["connectionId"]) not in ours
    )
    known = [n for n in s.rows.get("router.node", []) if n.get("cost") is not None]
    entry.update(
        {
            "version": row.get("version"),
            "uptimeSeconds": row.get("uptimeSeconds"),
            "memoryBytes": row.get("memoryUsage"),
            "connections": row.get("connectionCount"),
            "links": row.get("linkCount"),
            "clients": sum(
                1 for c in s.rows.get("connection", []) if c["role"] not in ROUTER_ROLES
            ),
            "addresses": sum(
                1
                for a in s.rows.get("router.address", [])
                if (m := mobile_address(a["key"])) is not None and not internal(m)
            ),
            "deliveriesStuck": row.get("deliveriesStuck"),
            "linksBlocked": row.get("linksBlocked"),
            "knownRouters": sorted(n["id"] for n in known if n.get("nextHop") != "(self)"),
            "uplink": _uplink(s.rows) if t.mode == "edge" else None,
            "msgsPerSecond": before.rate(now, ("router", t.id), out, s.at),
        }
    )
    return entry


def _console_connections(rows: Rows) -> set[str]:
    return {str(c["identity"]) for c in rows.get("connection", []) if c.get("container") == CONSOLE}


def _uplink(rows: Rows) -> str | None:
    """The interior an edge routes through (the topology draws the edge beside it): the peer
    of its edge connection that carries the sender ``edge.uplink.<edge-id>``, as
    ``local.backend.edge_uplink`` reads it. None while it has none."""
    peers = {
        str(c["identity"]): c.get("container")
        for c in rows.get("connection", [])
        if c["role"] == "edge" and c["dir"] == "out"
    }
    for lk in rows.get("router.link", []):
        if lk["linkDir"] == "out" and (lk.get("linkName") or "").startswith(UPLINK):
            peer = peers.get(str(lk["connectionId"]))
            if peer:
                return str(peer)
    return None


def _data_out(link: Mapping[str, Any]) -> bool:
    """An outgoing link that carries messages (not the routers' control traffic)."""
    return link["linkDir"] == "out" and link["linkType"] != CONTROL_LINK


def _per_connection(rows: Rows) -> dict[str, dict[str, int]]:
    """connection identity -> deliveries sent and received over its (non-control) links."""
    totals: dict[str, dict[str, int]] = {}
    for lk in rows.get("router.link", []):
        if lk["linkType"] == CONTROL_LINK:
            continue
        t = totals.setdefault(str(lk["connectionId"]), {"out": 0, "in": 0, "links": 0})
        t["out" if lk["linkDir"] == "out" else "in"] += lk["deliveryCount"] or 0
        t["links"] += 1
    return totals


def _links(scrapes: Sequence[Scrape], before: Counters, now: Counters) -> list[dict[str, Any]]:
    """One entry per pair of routers joined by a connection, seen from either end: the rate
    each way is the sender's count, so each direction is measured where it leaves."""
    known = {s.target.id for s in scrapes}
    pairs: dict[tuple[str, str], dict[str, Any]] = {}
    for s in scrapes:
        if s.rows is None:
            continue
        costs = {n["id"]: n.get("cost") for n in s.rows.get("router.node", [])}
        totals = _per_connection(s.rows)
        uplinks = {
            str(lk["connectionId"])
            for lk in s.rows.get("router.link", [])
            if lk["linkDir"] == "out" and str(lk.get("linkName") or "").startswith(UPLINK)
        }
        for c in s.rows.get("connection", []):
            peer = c.get("container")
            if c["role"] not in ROUTER_ROLES or not peer:
                continue
            a, b = sorted((s.target.id, peer))
            link = pairs.setdefault(
                (a, b),
                {
                    "source": a,
                    "target": b,
                    "kind": c["role"],
                    "cost": None,
                    "msgsPerSecond": {a: None, b: None},
                    "connectionIds": [],
                    "peerKnown": b in known and a in known,
                    "connector": None,
                    "uplink": False,
                },
            )
            if str(c["identity"]) in uplinks:
                link["uplink"] = True  # the edge's own word: its traffic leaves this way
            link["connectionIds"].append(f"{s.target.id}/{c['identity']}")
            if c["dir"] == "out":
                link["connector"] = s.target.id  # who dialled: the side whose config has it
            cost = costs.get(peer)
            if cost is not None:
                link["cost"] = cost if link["cost"] is None else min(link["cost"], cost)
            sent = totals.get(str(c["identity"]), {}).get("out", 0)
            rate = before.rate(now, ("link", s.target.id, str(c["identity"])), sent, s.at)
            rates = link["msgsPerSecond"]
            rates[s.target.id] = _sum([rates[s.target.id], rate])
    result = []
    for link in pairs.values():
        rates = link.pop("msgsPerSecond")
        link["connectionIds"].sort()
        link["rate"] = {
            "forward": rates[link["source"]],  # source -> target
            "back": rates[link["target"]],
            "total": _sum(rates.values()),
        }
        result.append(link)
    return sorted(result, key=lambda lk: (lk["source"], lk["target"]))


def _clients(scrapes: Sequence[Scrape], before: Counters, now: Counters) -> list[dict[str, Any]]:
    result = []
    for s in scrapes:
        if s.rows is None:
            continue
        totals = _per_connection(s.rows)
        for c in s.rows.get("connection", []):
            if c["role"] in ROUTER_ROLES or c.get("container") == CONSOLE:
                continue
            ident = str(c["identity"])
            t = totals.get(ident, {"out": 0, "in": 0, "links": 0})
            key = (s.target.id, ident)
            result.append(
                {
                    "router": s.target.id,
                    "container": c.get("container"),
                    "host": c.get("host"),
                    "role": c["role"],
                    "dir": c["dir"],
                    "user": c.get("user"),
                    "encrypted": bool(c.get("isEncrypted")),
                    "uptimeSeconds": c.get("uptimeSeconds"),
                    "links": t["links"],
                    "sentPerSecond": before.rate(now, ("client-in", *key), t["in"], s.at),
                    "receivedPerSecond": before.rate(now, ("client-out", *key), t["out"], s.at),
                }
            )
    return sorted(result, key=lambda c: (c["router"], c["container"] or ""))


def _addresses(
    scrapes: Sequence[Scrape], declared: Declared, before: Counters, now: Counters
) -> list[dict[str, Any]]:
    """Each address with its routers' counts, and totals counted where messages enter and
    leave the network: at clients' links. A router's own counters count a message again on
    every router it passes through an edge (the interior sees the edge's sender and consumer
    as local ones), so 30 msgs/s sent from one edge to a consumer on another added up to
    120 in and 60 out, with two senders and two consumers."""
    rules = _rule_tree(declared.addresses)
    found: dict[str, dict[str, Any]] = {}
    for s in scrapes:
        if s.rows is None:
            continue
        ends = _client_ends(s.rows)
        for a in s.rows.get("router.address", []):
            address = mobile_address(a["key"])
            if address is None:
                continue
            entry = found.setdefault(
                address,
                {
                    "address": address,
                    "internal": internal(address),
                    "distribution": a["distribution"],
                    "declared": rules.find(address),
                    "routers": [],
                },
            )
            key = (s.target.id, address)
            end = ends.get(a["key"], {})
            entry["routers"].append(
                {
                    "router": s.target.id,
                    "consumers": a.get("subscriberCount") or 0,
                    "clientConsumers": end.get("consumers", 0),
                    "containers": a.get("containerCount") or 0,
                    "senders": end.get("senders", 0),
                    "held": end.get("held", 0),
                    "remoteRouters": a.get("remoteHostRouters") or [],
                    "ingress": a.get("deliveriesIngress") or 0,
                    "egress": a.get("deliveriesEgress") or 0,
                    "ingressPerSecond": before.rate(
                        now, ("addr-in", *key), a.get("deliveriesIngress"), s.at
                    ),
                    "egressPerSecond": before.rate(
                        now, ("addr-out", *key), a.get("deliveriesEgress"), s.at
                    ),
                    "fromClientsPerSecond": before.rate(
                        now, ("addr-from-clients", *key), end.get("sent", 0), s.at
                    ),
                    "toClientsPerSecond": before.rate(
                        now, ("addr-to-clients", *key), end.get("received", 0), s.at
                    ),
                }
            )
    for entry in found.values():
        per = entry["routers"]
        entry["consumers"] = sum(r["clientConsumers"] + r["containers"] for r in per)
        entry["senders"] = sum(r["senders"] for r in per)
        entry["held"] = sum(r["held"] for r in per)
        entry["ingressPerSecond"] = _sum(r["fromClientsPerSecond"] for r in per)
        entry["egressPerSecond"] = _sum(r["toClientsPerSecond"] for r in per)
        per.sort(key=lambda r: r["router"])
    return sorted(found.values(), key=lambda a: a["address"])


def _client_ends(rows: Rows) -> dict[str, dict[str, int]]:
    """Address key -> its clients' sender and consumer links on this router and the
    deliveries over them, and what its incoming links hold (wherever they come from: a held
    message waits in one place only)."""
    clients = {
        str(c["identity"])
        for c in rows.get("connection", [])
        if c["role"] not in ROUTER_ROLES and c.get("container") != CONSOLE
    }
    ends: dict[str, dict[str, int]] = {}
    for lk in rows.get("router.link", []):
        owner = lk.get("owningAddr")
        if lk["linkType"] != "endpoint" or not owner:
            continue
        end = ends.setdefault(
            owner, {"senders": 0, "consumers": 0, "sent": 0, "received": 0, "held": 0}
        )
        incoming = lk["linkDir"] == "in"
        if incoming:
            end["held"] += lk.get("undeliveredCount") or 0
        if str(lk["connectionId"]) not in clients:
            continue  # an edge's link: the edge counts its client there
        end["senders" if incoming else "consumers"] += 1
        end["sent" if incoming else "received"] += lk.get("deliveryCount") or 0
    return ends


def _rule_tree(rules: Iterable[dict[str, Any]]) -> TokenTree[dict[str, Any]]:
    """The declared Addresses by their prefix or pattern, to find the one that governs an
    address as the routers do (their ``key`` is ``prefix:jobs``, not an address)."""
    tree: TokenTree[dict[str, Any]] = TokenTree()
    for rule in rules:
        tree.add(rule_tokens(rule.get("prefix"), rule.get("pattern")), rule)
    return tree


def _nodes(scrapes: Sequence[Scrape], declared: Declared) -> list[dict[str, Any]]:
    """Queues and topics with their host's counts; an outbox (``/outbox/<dlq>``) holds dead
    letters on their way to another router's node."""
    rules = _rule_tree(a for a in declared.addresses if a.get("node"))
    result = []
    for s in scrapes:
        if s.rows is None:
            continue
        for n in s.rows.get(HOSTED_NODE, []):
            name = n["name"]
            outbox = name.startswith("/outbox/")
            rule = None if outbox else rules.find(name)  # an outbox's letters are dead already
            result.append(
                {
                    "name": name,
                    "type": n.get("nodeType"),
                    "router": n.get("router") or s.target.id,
                    "outbox": outbox,
                    "depth": n.get("depth") or 0,
                    "bytes": n.get("bytes") or 0,
                    "consumers": n.get("consumers") or 0,
                    "producers": n.get("producers") or 0,
                    "enqueued": n.get("enqueued") or 0,
                    "dequeued": n.get("dequeued") or 0,
                    "deadLettered": n.get("deadLettered") or 0,
                    "expired": n.get("expired") or 0,
                    "durable": n.get("durable"),
                    "deadLetterAddress": rule["node"].get("deadLetterAddress") if rule else None,
                }
            )
    return sorted(result, key=lambda n: (n["name"], n["router"]))


def _link_routes(scrapes: Sequence[Scrape], declared: Declared) -> list[dict[str, Any]]:
    """Each declared link route with the routers where its container is connected now (their
    ``linkRoute`` rows active)."""
    active: dict[tuple[str | None, str | None], set[str]] = {}
    for s in scrapes:
        for lr in (s.rows or {}).get("router.config.linkRoute", []):
            if lr.get("operStatus") == "active":
                key = (lr.get("prefix"), lr.get("pattern"))
                active.setdefault(key, set()).add(s.target.id)
    return [
        {**lr, "activeOn": sorted(active.get(_prefix_or_pattern(lr["key"]), set()))}
        for lr in declared.link_routes
    ]


def _prefix_or_pattern(key: str) -> tuple[str | None, str | None]:
    """A declared key (``prefix:db``, ``pattern:db.*``) as a linkRoute row has it."""
    kind, _, text = key.partition(":")
    return (text, None) if kind == "prefix" else (None, text)


def _containers(scrapes: Sequence[Scrape]) -> list[dict[str, Any]]:
    """Containers connected to the routers themselves (``(container)/node`` addressing):
    each one once, where it is attached."""
    return sorted(
        (
            {"container": c["containerId"], "router": s.target.id}
            for s in scrapes
            if s.rows is not None
            for c in s.rows.get(CONTAINER, [])
            if str(c.get("location", "")).startswith("connection ") and c["containerId"] != CONSOLE
        ),
        key=lambda c: (c["container"], c["router"]),
    )
