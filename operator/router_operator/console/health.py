"""What is wrong with the network now, each problem one line with where to look. Pure: the
views of the last scrapes go in (oldest first, the current one last), problems come out.

The rules are those an operator checks by hand with ``routernet status`` and ``qdstat``: a
router down or not answering, routers that do not see each other, an edge without an uplink,
an address with senders and no consumer, a queue growing with nobody consuming it, dead letters,
an inter-router or edge link that keeps reconnecting, links stuck for want of credit. A problem
names what it is about (``subject``) so that the pages can link to it.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

View = Mapping[str, Any]

GROWING_SCRAPES = 3
"""A queue's depth must have grown over this many scrapes in a row to count as growing."""
FLAP_WINDOW_SECONDS = 120.0
FLAP_CHANGES = 2
"""A link that was re-established this many times within the window is flapping."""
SEVERITIES = ("error", "warning", "info")


def problem(severity: str, kind: str, what: str, where: str, **subject: str) -> dict[str, Any]:
    return {"severity": severity, "kind": kind, "what": what, "where": where, "subject": subject}


def problems(history: Sequence[View]) -> list[dict[str, Any]]:
    """Errors first, then warnings, then notes; within each in the order the rules run."""
    if not history:
        return []
    view = history[-1]
    found = [
        *_routers_down(view),
        *_partitions(view),
        *_edges_without_uplink(view),
        *_senders_without_consumers(view),
        *_growing_queues(history),
        *_dead_letters(history),
        *_flapping_links(history),
        *_blocked(view),
    ]
    return sorted(found, key=lambda p: SEVERITIES.index(p["severity"]))


def _routers_down(view: View) -> list[dict[str, Any]]:
    return [
        problem(
            "error",
            "router-down",
            f"router {r['id']} is down: {r['error'] or 'not answering'}",
            r["where"] or f"router {r['id']}",
            router=r["id"],
        )
        for r in view["routers"]
        if r["state"] != "up"
    ]


def _partitions(view: View) -> list[dict[str, Any]]:
    """An interior that does not reach another interior of its network that is up: the
    network is split, and addresses on one side are unreachable from the other. A network is
    its namespace's: two namespaces' networks of one name (``default``) are two networks."""
    up = [r for r in view["routers"] if r["state"] == "up" and r["mode"] == "interior"]
    found = []
    for r in up:
        mine = (r["namespace"], r["network"])
        peers = {
            o["id"] for o in up if (o["namespace"], o["network"]) == mine and o["id"] != r["id"]
        }
        missing = sorted(peers - set(r.get("knownRouters", [])))
        if missing:
            found.append(
                problem(
                    "error",
                    "partition",
                    f"router {r['id']} has no route to {', '.join(missing)}",
                    f"the inter-router links of {r['id']} (topology)",
                    router=r["id"],
                )
            )
    return found


def _edges_without_uplink(view: View) -> list[dict[str, Any]]:
    linked = {
        lk[end] for lk in view["links"] if lk["kind"] == "edge" for end in ("source", "target")
    }
    return [
        problem(
            "error",
            "edge-alone",
            f"edge {r['id']} is connected to no interior router",
            r["where"] or f"router {r['id']}",
            router=r["id"],
        )
        for r in view["routers"]
        if r["state"] == "up" and r["mode"] == "edge" and r["id"] not in linked
    ]


def _senders_without_consumers(view: View) -> list[dict[str, Any]]:
    """Senders attached to an address nobody consumes: their messages are held, released or
    dropped (as the address's `undeliverable` says). A queue or topic is a consumer itself."""
    hosted = {n["name"] for n in view["nodes"]}
    found = []
    for a in view["addresses"]:
        if a["internal"] or a["senders"] == 0 or a["consumers"] > 0 or a["address"] in hosted:
            continue
        if any(r["remoteRouters"] for r in a["routers"]):
            continue  # a consumer on a router the console does not see (another network)
        on = ", ".join(r["router"] for r in a["routers"] if r["senders"])
        found.append(
            problem(
                "warning",
                "no-consumer",
                f"address {a['address']} has {a['senders']} sender(s) on {on} and no consumer",
                f"`routernet receive {a['address']}`, or the application that should consume it",
                address=a["address"],
            )
        )
    return found


def _growing_queues(history: Sequence[View]) -> list[dict[str, Any]]:
    recent = history[-(GROWING_SCRAPES + 1) :]
    if len(recent) < GROWING_SCRAPES + 1:
        return []
    depths = [{(n["name"], n["router"]): n for n in v["nodes"]} for v in recent]
    found = []
    for key, node in depths[-1].items():
        series = [d[key]["depth"] for d in depths if key in d]
        if len(series) < len(depths) or node["consumers"] > 0 or node["type"] != "queue":
            continue
        if all(b > a for a, b in itertools.pairwise(series)):
            found.append(
                problem(
                    "warning",
                    "queue-growing",
                    f"queue {node['name']} on {node['router']} grows ({series[0]} -> {series[-1]})"
                    " and has no consumer",
                    f"the consumers of {node['name']} (queues page)",
                    node=node["name"],
                    router=node["router"],
                )
            )
    return found


def _dead_letters(history: Sequence[View]) -> list[dict[str, Any]]:
    """Messages dead-lettered since the oldest view kept, and outboxes still holding some."""
    first = {(n["name"], n["router"]): n["deadLettered"] for n in history[0]["nodes"]}
    found = []
    for n in history[-1]["nodes"]:
        if n["outbox"]:
            if n["depth"]:
                found.append(
                    problem(
                        "info",
                        "outbox",
                        f"{n['depth']} dead letter(s) on {n['router']} on their way to"
                        f" {n['name'].removeprefix('/outbox/')}",
                        f"the host of {n['name'].removeprefix('/outbox/')} (queues page)",
                        node=n["name"],
                        router=n["router"],
                    )
                )
            continue
        new = n["deadLettered"] - first.get((n["name"], n["router"]), n["deadLettered"])
        if new > 0:
            to = n["deadLetterAddress"] or "its dead-letter address"
            found.append(
                problem(
                    "warning",
                    "dead-letters",
                    f"{new} message(s) of {n['name']} dead-lettered to {to} lately",
                    f"the consumers of {n['name']} reject them, or they exceed maxDeliveryCount",
                    node=n["name"],
                    router=n["router"],
                )
            )
    return found


def _flapping_links(history: Sequence[View]) -> list[dict[str, Any]]:
    """A link between two routers re-established ``FLAP_CHANGES`` times within
    ``FLAP_WINDOW_SECONDS``: a connection between them that the view before did not have
    (both routers up), whether the link was missing in between or came back within a scrape."""
    since = history[-1]["at"] - FLAP_WINDOW_SECONDS
    views = [v for v in history if v["at"] >= since]
    returns: dict[tuple[str, str], int] = {}
    for older, newer in itertools.pairwise(views):
        had = {(lk["source"], lk["target"]): set(lk["connectionIds"]) for lk in older["links"]}
        up_before = {r["id"] for r in older["routers"] if r["state"] == "up"}
        for lk in newer["links"]:
            pair = (lk["source"], lk["target"])
            if not set(pair) <= up_before:
                continue  # a router that was down and is back: its links are new, not flapping
            if set(lk["connectionIds"]) - had.get(pair, set()):
                returns[pair] = returns.get(pair, 0) + 1
    return [
        problem(
            "warning",
            "link-flapping",
            f"the link {a} - {b} was re-established {n} times in the last"
            f" {FLAP_WINDOW_SECONDS:g} s",
            f"the logs of {a} and {b}: connection failures, authentication, idle timeouts",
            router=a,
            peer=b,
        )
        for (a, b), n in sorted(returns.items())
        if n >= FLAP_CHANGES
    ]


def _blocked(view: View) -> list[dict[str, Any]]:
    return [
        problem(
            "info",
            "blocked",
            f"router {r['id']} has {r['linksBlocked']} sender link(s) waiting for credit",
            f"slow consumers behind {r['id']} (addresses page: held)",
            router=r["id"],
        )
        for r in view["routers"]
        if r["state"] == "up" and (r.get("linksBlocked") or 0) > 0
    ]
