"""The console's pure parts: management rows -> view (rates, links, addresses, nodes), the
health rules, the flows summary and reader, authentication. No routers, no sockets."""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from router_operator.console import health, view
from router_operator.console.auth import AuthError, BasicAuth, TokenReviewAuth
from router_operator.console.flows import FlowsError, parse_minutes, summarize
from router_operator.console.sources import Declared, Target

from collector.window import Flow, Totals
from router.management.entitytypes import HOSTED_NODE
from router.telemetry.schema import LATENCY_BOUNDS_US, LATENCY_BUCKETS, latency_bucket

T0 = 1_800_000_000.0


def target(rid: str, mode: str = "interior", down: str | None = None) -> Target:
    return Target(rid, "net", "default", mode, f"127.0.0.9:{5672}", down, f"logs/{rid}.log")


def conn(ident: int, peer: str, role: str = "inter-router", direction: str = "out") -> dict:
    return {"identity": str(ident), "container": peer, "role": role, "dir": direction}


def link(
    ident: int,
    conn_id: int,
    direction: str,
    count: int,
    kind: str = "inter-router",
    owner: str | None = None,
    undelivered: int = 0,
) -> dict:
    return {
        "identity": str(ident),
        "linkType": kind,
        "linkDir": direction,
        "connectionId": str(conn_id),
        "deliveryCount": count,
        "owningAddr": owner,
        "undeliveredCount": undelivered,
    }


def address(key: str, consumers: int = 0, ingress: int = 0, egress: int = 0, remote=()) -> dict:
    return {
        "key": key,
        "distribution": "balanced",
        "subscriberCount": consumers,
        "containerCount": 0,
        "remoteHostRouters": list(remote),
        "deliveriesIngress": ingress,
        "deliveriesEgress": egress,
    }


def rows(
    rid: str,
    connections: list[dict] = (),  # type: ignore[assignment]
    links: list[dict] = (),  # type: ignore[assignment]
    addresses: list[dict] = (),  # type: ignore[assignment]
    known: list[str] = (),  # type: ignore[assignment]
    nodes: list[dict] = (),  # type: ignore[assignment]
    blocked: int = 0,
) -> dict[str, list[dict[str, Any]]]:
    return {
        "router": [{"id": rid, "version": "0.1.0", "uptimeSeconds": 5, "linksBlocked": blocked}],
        "connection": list(connections),
        "router.link": list(links),
        "router.address": list(addresses),
        "router.node": [{"id": rid, "nextHop": "(self)", "cost": 0}]
        + [{"id": k, "nextHop": k, "cost": 1} for k in known],
        HOSTED_NODE: list(nodes),
    }


def node(name: str, rid: str, depth: int, consumers: int = 0, dead: int = 0) -> dict:
    return {
        "name": name,
        "nodeType": "queue",
        "router": rid,
        "depth": depth,
        "consumers": consumers,
        "deadLettered": dead,
    }


def two_routers(at: float, sent_ab: int, sent_ba: int) -> list[view.Scrape]:
    a = rows(
        "A",
        [conn(1, "B"), conn(2, "app", role="normal", direction="in")],
        [
            link(1, 1, "out", sent_ab),
            link(2, 1, "out", 99, kind="router-control"),
            link(3, 2, "in", sent_ab, kind="endpoint", owner="M0orders"),
        ],
        [address("M0orders", ingress=sent_ab), address("M0_edge/e1")],
        known=["B"],
    )
    b = rows(
        "B",
        [conn(7, "A", direction="in"), conn(8, "worker", role="normal", direction="in")],
        [
            link(1, 7, "out", sent_ba),
            link(2, 8, "out", sent_ab, kind="endpoint", owner="M0orders"),
        ],
        [address("M0orders", consumers=1, egress=sent_ab, remote=["A"])],
        known=["A"],
    )
    return [view.Scrape(target("A"), at, a), view.Scrape(target("B"), at, b)]


# --- view ---------------------------------------------------------------------------------


def test_rates_are_the_counters_difference_between_two_scrapes() -> None:
    first, counters = view.build(two_routers(T0, 100, 10), Declared(), view.Counters())
    assert first["links"][0]["rate"] == {"forward": None, "back": None, "total": None}
    second, _ = view.build(two_routers(T0 + 2, 300, 30), Declared(), counters)
    [ab] = second["links"]
    assert (ab["source"], ab["target"], ab["kind"], ab["cost"]) == ("A", "B", "inter-router", 1)
    # Control traffic (99 on A's router-control link) is not the link's message rate.
    assert ab["rate"] == {"forward": 100.0, "back": 10.0, "total": 110.0}
    a = next(r for r in second["routers"] if r["id"] == "A")
    assert a["msgsPerSecond"] == 100.0
    assert (a["clients"], a["addresses"], a["knownRouters"]) == (1, 1, ["B"])
    # An address's rates are its clients': what entered from A's sender, what left to B's worker.
    [orders] = [x for x in second["addresses"] if x["address"] == "orders"]
    assert (orders["ingressPerSecond"], orders["egressPerSecond"]) == (100.0, 100.0)


def test_a_counter_that_went_down_gives_no_rate() -> None:
    _, counters = view.build(two_routers(T0, 300, 30), Declared(), view.Counters())
    after_restart, _ = view.build(two_routers(T0 + 2, 5, 40), Declared(), counters)
    assert after_restart["links"][0]["rate"] == {"forward": None, "back": 5.0, "total": 5.0}


def test_addresses_add_up_across_routers_and_mark_the_networks_own() -> None:
    current, _ = view.build(two_routers(T0, 100, 10), Declared(), view.Counters())
    by_name = {a["address"]: a for a in current["addresses"]}
    orders = by_name["orders"]
    assert (orders["consumers"], orders["senders"], orders["internal"]) == (1, 1, False)
    assert [r["router"] for r in orders["routers"]] == ["A", "B"]
    assert by_name["_edge/e1"]["internal"] is True


def test_a_router_that_does_not_answer_is_shown_down_not_left_out() -> None:
    scrapes = [
        view.Scrape(target("A"), T0, rows("A")),
        view.Scrape(target("B", down="not running"), T0, None, "not running"),
    ]
    current, _ = view.build(scrapes, Declared(), view.Counters())
    states = {r["id"]: (r["state"], r["error"]) for r in current["routers"]}
    assert states == {"A": ("up", None), "B": ("down", "not running")}
    [problem] = [p for p in health.problems([current]) if p["kind"] == "router-down"]
    assert problem["severity"] == "error"
    assert problem["what"] == "router B is down: not running"
    assert problem["where"] == "logs/B.log"


def test_nodes_carry_their_dead_letter_address_from_the_declared_address() -> None:
    declared = Declared(
        addresses=[
            {"key": "prefix:jobs", "prefix": "jobs", "node": {"deadLetterAddress": "jobs.dlq"}}
        ]
    )
    scrapes = [view.Scrape(target("A"), T0, rows("A", nodes=[node("jobs.a", "A", 3)]))]
    current, _ = view.build(scrapes, declared, view.Counters())
    [jobs] = current["nodes"]
    assert (jobs["name"], jobs["depth"], jobs["deadLetterAddress"]) == ("jobs.a", 3, "jobs.dlq")


# --- health -------------------------------------------------------------------------------


def kinds(history: list[dict[str, Any]]) -> list[str]:
    return [p["kind"] for p in health.problems(history)]


def test_an_address_with_senders_and_no_consumer_is_named() -> None:
    a = rows(
        "A",
        [conn(2, "app", role="normal", direction="in")],
        [link(3, 2, "in", 0, kind="endpoint", owner="M0nobody")],
        [address("M0nobody")],
    )
    current, _ = view.build([view.Scrape(target("A"), T0, a)], Declared(), view.Counters())
    [problem] = health.problems([current])
    assert problem["kind"] == "no-consumer"
    assert problem["subject"] == {"address": "nobody"}
    assert "address nobody has 1 sender(s) on A and no consumer" in problem["what"]


def test_a_queue_growing_without_consumers_is_named_and_one_with_consumers_is_not() -> None:
    def at(i: int, consumers: int) -> dict[str, Any]:
        r = rows("A", nodes=[node("jobs", "A", depth=10 * i, consumers=consumers)])
        return view.build([view.Scrape(target("A"), T0 + i, r)], Declared(), view.Counters())[0]

    growing = [at(i, 0) for i in range(health.GROWING_SCRAPES + 1)]
    assert kinds(growing) == ["queue-growing"]
    assert kinds(growing[1:]) == []  # not yet enough scrapes
    assert kinds([at(i, 1) for i in range(health.GROWING_SCRAPES + 1)]) == []


def test_a_split_network_and_an_edge_without_uplink_are_errors() -> None:
    scrapes = [
        view.Scrape(target("A"), T0, rows("A")),
        view.Scrape(target("B"), T0, rows("B")),
        view.Scrape(target("E", mode="edge"), T0, rows("E")),
    ]
    current, _ = view.build(scrapes, Declared(), view.Counters())
    found = health.problems([current])
    assert sorted(p["kind"] for p in found) == ["edge-alone", "partition", "partition"]
    assert {p["severity"] for p in found} == {"error"}


def test_networks_of_one_name_in_two_namespaces_are_two_networks() -> None:
    """`default` in namespace east and in namespace west: neither is split for not reaching
    the other's routers."""
    scrapes = [
        view.Scrape(dataclasses.replace(target("A"), namespace="east"), T0, rows("A")),
        view.Scrape(dataclasses.replace(target("B"), namespace="west"), T0, rows("B")),
    ]
    current, _ = view.build(scrapes, Declared(), view.Counters())
    assert health.problems([current]) == []


def test_a_link_re_established_twice_within_two_minutes_is_flapping() -> None:
    def at(i: int, ident: int) -> dict[str, Any]:
        scrapes = [
            view.Scrape(target("A"), T0 + i, rows("A", [conn(ident, "B")], known=["B"])),
            view.Scrape(target("B"), T0 + i, rows("B", known=["A"])),
        ]
        return view.build(scrapes, Declared(), view.Counters())[0]

    steady = [at(i, 1) for i in range(5)]
    assert "link-flapping" not in kinds(steady)
    flapping = [at(0, 1), at(2, 2), at(4, 2), at(6, 3)]
    [problem] = [p for p in health.problems(flapping) if p["kind"] == "link-flapping"]
    assert problem["what"].startswith("the link A - B was re-established 2 times")


def test_dead_letters_since_the_oldest_view_and_an_outbox_holding_some() -> None:
    declared = Declared(
        addresses=[
            {"key": "prefix:jobs", "prefix": "jobs", "node": {"deadLetterAddress": "jobs.dlq"}}
        ]
    )

    def at(i: int, dead: int, outbox: int) -> dict[str, Any]:
        nodes = [node("jobs", "A", 0, consumers=1, dead=dead)]
        if outbox:
            nodes.append(node("/outbox/jobs.dlq", "A", outbox))
        r = rows("A", nodes=nodes)
        return view.build([view.Scrape(target("A"), T0 + i, r)], declared, view.Counters())[0]

    found = health.problems([at(0, 2, 0), at(1, 5, 4)])
    assert [(p["kind"], p["severity"]) for p in found] == [
        ("dead-letters", "warning"),
        ("outbox", "info"),
    ]
    assert found[0]["what"] == "3 message(s) of jobs dead-lettered to jobs.dlq lately"


# --- flows --------------------------------------------------------------------------------


def flow(address: str, ingress: str, egress: str | None, deliveries: int, us: float) -> Flow:
    hist = [0] * LATENCY_BUCKETS
    hist[latency_bucket(us)] = deliveries
    counts = (deliveries, deliveries * 100, deliveries, 0, 0, 0, 0, 0, deliveries)
    if egress is None:
        counts = (deliveries, 0, 0, 0, 0, 0, 0, deliveries, 0)
        hist = [0] * LATENCY_BUCKETS
    return Flow(0, 10_000, address, ingress, egress, None, counts, tuple(hist))


def test_the_flows_summary_is_a_matrix_and_the_busiest_paths_with_latency() -> None:
    flows = [
        flow("orders", "A", "B", 600, 800),
        flow("orders", "A", "B", 600, 800),
        flow("news", "B", "A", 60, 20_000),
        flow("lost", "A", None, 6, 0),
    ]
    summary = summarize(Totals().add(flows), 0, 60_000)
    cells = {(c["ingress"], c["egress"]): c for c in summary["matrix"]}
    assert cells[("A", "B")]["deliveries"] == 1200
    assert cells[("A", "B")]["perSecond"] == 20.0
    assert cells[("A", None)]["dropped"] == 6
    top = summary["paths"][0]
    assert (top["address"], top["ingress"], top["egress"], top["deliveries"]) == (
        "orders",
        "A",
        "B",
        1200,
    )
    bound = LATENCY_BOUNDS_US[latency_bucket(800)]
    assert top["latencyUs"] == {"samples": 1200, "p50": bound, "p90": bound, "p99": bound}
    assert summary["routers"] == ["A", "B"]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("x", "minutes must be a whole number, not 'x'"),
        ("0", "minutes must be between 1 and 1440, not 0"),
        ("100000", "minutes must be between 1 and 1440, not 100000"),
    ],
)
def test_bad_minutes_get_a_one_line_error(text: str, error: str) -> None:
    with pytest.raises(FlowsError, match=error):
        parse_minutes(text)
    assert parse_minutes(None) == 5


# --- auth ---------------------------------------------------------------------------------


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_basic_auth_takes_the_users_of_its_file(tmp_path: Path) -> None:
    path = tmp_path / "auth"
    path.write_text("# who may look\nops:s3cret:with-colon\n")
    auth = BasicAuth.from_file(path)
    assert auth.user(basic("ops", "s3cret:with-colon")) == "ops"
    assert auth.user(basic("ops", "wrong")) is None
    assert auth.user(basic("nobody", "s3cret:with-colon")) is None
    assert auth.user("Basic !!!") is None
    assert auth.user(None) is None
    path.write_text("no-colon\n")
    with pytest.raises(AuthError, match=r"auth:1: expected user:password"):
        BasicAuth.from_file(path)
    with pytest.raises(AuthError, match="missing: No such file"):
        BasicAuth.from_file(tmp_path / "missing")


class FakeCluster:
    def __init__(self, authenticated: bool, allowed: bool) -> None:
        self.authenticated = authenticated
        self.allowed = allowed
        self.requests: list[tuple[str, dict[str, Any]]] = []

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> Any:
        self.requests.append((path, body))
        if path.endswith("/tokenreviews"):
            user = {"username": "alice", "groups": ["ops"]}
            return {"status": {"authenticated": self.authenticated, "user": user}}
        return {"status": {"allowed": self.allowed}}


def test_token_review_asks_who_the_token_is_then_whether_they_may_list_routers() -> None:
    cluster = FakeCluster(authenticated=True, allowed=True)
    clock = [0.0]
    auth = TokenReviewAuth(cluster, "shop", clock=lambda: clock[0])  # type: ignore[arg-type]
    assert auth.user("Bearer tok") == "alice"
    review, access = cluster.requests
    assert review[1]["spec"] == {"token": "tok"}
    attributes = access[1]["spec"]["resourceAttributes"]
    assert attributes == {
        "verb": "list",
        "group": "routernet.io",
        "resource": "routers",
        "namespace": "shop",
    }
    assert auth.user("Bearer tok") == "alice"
    assert len(cluster.requests) == 2  # kept for a minute
    clock[0] = 61.0
    auth.user("Bearer tok")
    assert len(cluster.requests) == 4
    assert auth.user("Basic x") is None
    denied = TokenReviewAuth(FakeCluster(True, allowed=False), None)  # type: ignore[arg-type]
    assert denied.user("Bearer tok") is None
    unknown = TokenReviewAuth(FakeCluster(False, allowed=True), None)  # type: ignore[arg-type]
    assert unknown.user("Bearer tok") is None
