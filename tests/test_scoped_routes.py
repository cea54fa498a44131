"""Connection-scoped link routes: a peer registers link routes for its own connection through
management, as a qdrouterd edge registers its brokers' routes on its interior
(`org.apache.qpid.dispatch.router.connection.linkRoute`). The bookkeeping and the agent's
answers here; routers relaying links to the creating connection, across a network, in
tests/test_linkroute.py."""

from __future__ import annotations

from typing import Any

import pytest
from proton import Message

from router.linkroutes.scoped import CONN_LINK_ROUTE, RequestError, ScopedRoutes
from router.management.agent import Agent

ROUTE = {"pattern": "broker.#", "direction": "out"}


def test_routes_belong_to_their_connection_and_go_with_it() -> None:
    routes = ScopedRoutes()
    a = routes.create("conn-a", "a/proxyLinkRoute/Dbroker", ROUTE)
    b = routes.create("conn-b", None, ROUTE)
    a_in = routes.create("conn-a", "in", {"pattern": "broker.#", "direction": "in"})
    assert len({a.identity, b.identity, a_in.identity}) == 3
    assert routes.serving[("out", ("broker", "#"))] == ["conn-a", "conn-b"]
    assert routes.find("conn-a", None, a.identity) == a
    assert routes.find("conn-a", "a/proxyLinkRoute/Dbroker", None) == a
    assert routes.find("conn-b", None, a.identity) is None  # not b's to see
    assert routes.drop("conn-a") == [a, a_in]
    assert routes.serving == {("out", ("broker", "#")): ["conn-b"]}
    routes.delete("conn-b", b)
    assert routes.serving == {} and routes.by_conn == {}


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ([1], "Body of request must be a map"),
        ({"direction": "in"}, "Pattern field is required (a string)"),
        ({"pattern": "./", "direction": "in"}, "Pattern must name at least one token"),
        ({"pattern": "a.#"}, "Missing value for 'direction'"),
        ({"pattern": "a.#", "direction": "both"}, "Invalid value for 'direction'"),
    ],
)
def test_bad_requests_are_refused_with_a_reason(body: object, error: str) -> None:
    with pytest.raises(RequestError) as refused:
        ScopedRoutes().create("conn", None, body)
    assert refused.value.status == 400
    assert refused.value.description.startswith(error)


def test_one_connection_cannot_reuse_a_name() -> None:
    routes = ScopedRoutes()
    routes.create("conn", "r", ROUTE)
    with pytest.raises(RequestError, match="exists already"):
        routes.create("conn", "r", {"pattern": "other", "direction": "in"})
    routes.create("other-conn", "r", ROUTE)  # another connection's names are its own


class FakeLinkRouter:
    """What the agent asks of the engine's link router, over plain ScopedRoutes."""

    def __init__(self) -> None:
        self.routes = ScopedRoutes()

    def create_scoped(self, conn: Any, name: str | None, attributes: object) -> dict[str, Any]:
        return self.routes.create(conn, name, attributes).row(f"container-of-{conn}")

    def delete_scoped(self, conn: Any, name: str | None, identity: str | None) -> int:
        route = self.routes.find(conn, name, identity)
        if route is None:
            raise RequestError(404, "No connection-scoped link route of this connection")
        self.routes.delete(conn, route)
        return 204

    def scoped_rows(self, conn: Any) -> list[dict[str, Any]]:
        return [r.row(f"container-of-{conn}") for r in self.routes.routes(conn)]


def ask(agent: Agent, conn: Any, properties: dict[str, Any], body: Any = None) -> Message:
    response = agent.handle(
        Message(reply_to="r", correlation_id=1, properties=properties, body=body), conn
    )
    assert response is not None
    return response


def test_the_agent_creates_reads_and_deletes_for_the_requesting_connection() -> None:
    agent = Agent("R", {}, lambda: [], scoped=FakeLinkRouter())
    # As a qdrouterd edge sends it (edge_router/link_route_proxy.c).
    create = {"operation": "CREATE", "type": CONN_LINK_ROUTE, "name": "E/proxyLinkRoute/Dq"}
    created = ask(agent, "edge-conn", create, {**ROUTE, "name": "E/proxyLinkRoute/Dq"})
    assert created.properties["statusCode"] == 201
    assert created.properties["statusDescription"] == "Created"
    assert created.body == {
        "name": "E/proxyLinkRoute/Dq",
        "identity": created.body["identity"],
        "type": CONN_LINK_ROUTE,
        "pattern": "broker.#",
        "direction": "out",
        "containerId": "container-of-edge-conn",
    }
    identity = created.body["identity"]

    read = {"operation": "READ", "type": "router.connection.linkRoute", "identity": identity}
    assert ask(agent, "edge-conn", read).body["pattern"] == "broker.#"
    assert ask(agent, "other-conn", read).properties["statusCode"] == 404
    query = {"operation": "QUERY", "type": "org.amqp.management", "name": "self"}
    rows = ask(agent, "edge-conn", {**query, "entityType": CONN_LINK_ROUTE}, {}).body
    assert rows["results"] == [[created.body[a] for a in rows["attributeNames"]]]
    assert (
        ask(agent, "other-conn", {**query, "entityType": CONN_LINK_ROUTE}, {}).body["results"] == []
    )

    delete = {"operation": "DELETE", "type": CONN_LINK_ROUTE, "identity": identity}
    assert ask(agent, "other-conn", delete).properties["statusCode"] == 404
    deleted = ask(agent, "edge-conn", delete)
    assert deleted.properties["statusCode"] == 204
    assert ask(agent, "edge-conn", delete).properties["statusCode"] == 404


def test_the_agent_refuses_what_it_cannot_scope_or_does_not_write() -> None:
    agent = Agent("R", {}, lambda: [], scoped=FakeLinkRouter())
    create = {"operation": "CREATE", "type": CONN_LINK_ROUTE}
    no_conn = ask(agent, None, create, ROUTE)
    assert no_conn.properties["statusCode"] == 400
    bad = ask(agent, "conn", create, {"pattern": "q"})
    assert bad.properties == {
        "statusCode": 400,
        "statusDescription": "Missing value for 'direction'",
    }
    other = ask(agent, "conn", {"operation": "CREATE", "type": "router"}, {})
    assert other.properties["statusCode"] == 501
    # Without the engine's routes (a pure agent), the type cannot be written either.
    plain = ask(Agent("R", {}, lambda: []), "conn", create, ROUTE)
    assert plain.properties["statusCode"] == 501


@pytest.mark.parametrize(
    ("fields", "pattern"),
    [
        ({"prefix": "broker"}, "broker/#"),  # as a qdrouterd edge converts a prefix
        ({"prefix": ""}, "#"),
        ({"pattern": "a.*.b"}, "a.*.b"),
    ],
)
def test_an_edge_asks_its_interior_for_the_pattern_dispatch_would(
    fields: dict[str, Any], pattern: str
) -> None:
    from router.edges.linkroutes import proxy_pattern
    from router.linkroutes.table import LinkRouteRule

    rule = LinkRouteRule("in", container_id="broker", **fields)
    assert proxy_pattern(rule) == pattern
    # The interior keys the pattern as the edge keys its route: the same address rows.
    assert LinkRouteRule("in", pattern=pattern, scoped=True).key == rule.key
