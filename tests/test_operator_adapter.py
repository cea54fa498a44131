"""The adapter's statuses and the reconciler's LinkRoute handling, on a fake API. No cluster."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest
from router_operator.kubernetes.environment import OperatorConfig
from router_operator.kubernetes.reconciler import Snapshot, reconcile_namespace
from router_operator.planning import adapter, internal_tls
from router_operator.planning.adapter import Application
from router_operator.planning.planner import LinkRouteConnectionDecl, LinkRouteDecl, Problem
from router_operator.rendering.router import LINK_ROUTES_KEY
from router_operator.resources.gateway import (
    ConnectorTlsDecl,
    GatewayConnectorDecl,
    GatewayListenerDecl,
    ListenerTlsDecl,
)
from router_operator.resources.models import (
    API_VERSION,
    PAUSE_ANNOTATION,
    READY,
    RECONCILIATION_PAUSED,
)

NS = "msg"
NOW = datetime(2024, 1, 1, tzinfo=UTC)


def body(
    kind: str, name: str, spec: dict[str, Any], generation: int = 1, paused: bool = False
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "uid": f"uid-{name}",
        "generation": generation,
        "creationTimestamp": f"2024-01-01T00:00:0{generation}Z",
    }
    if paused:
        meta["annotations"] = {PAUSE_ANNOTATION: "true"}
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": meta, "spec": spec}


def ready(status: Any) -> tuple[str, str, str, int | None]:
    cond = next(c for c in status.conditions if c.type == READY)
    return cond.status, cond.reason, cond.message, cond.observedGeneration


# --- LinkRoute status ----------------------------------------------------------------------------


def test_an_applied_link_route_is_ready_with_its_generation() -> None:
    parsed = adapter.parse(
        "LinkRoute", body("LinkRoute", "db", {"prefix": "db", "containerId": "b"}, 3)
    )
    status = adapter.link_route_status(
        parsed, [], Application("default", ("core", "leaf")), now=NOW
    )
    value, reason, message, gen = ready(status)
    assert (value, reason, gen) == ("True", "Applied", 3)
    assert status.observedGeneration == 3
    assert "every router of network 'default' (Routers core, leaf)" in message


@pytest.mark.parametrize(
    ("problems", "application", "reason", "words"),
    [
        (
            [Problem("LinkRoute", "db", "Invalid", "connection.host: not a host")],
            Application("default", ("core",)),
            "Invalid",
            "not a host",
        ),
        (
            [Problem("LinkRoute", "db", "Conflict", "already declared by LinkRoute 'a'")],
            Application("default", ("core",)),
            "Conflict",
            "'a'",
        ),
        ([], Application("default"), "NoRouters", "no router has this LinkRoute"),
        (
            [],
            Application("default", ("core",), {"leaf": "paused"}),
            "PartiallyApplied",
            "not of leaf (paused)",
        ),
    ],
)
def test_a_link_route_not_everywhere_is_not_ready(
    problems: list[Problem], application: Application, reason: str, words: str
) -> None:
    parsed = adapter.parse(
        "LinkRoute", body("LinkRoute", "db", {"prefix": "db", "containerId": "b"})
    )
    value, got, message, gen = ready(adapter.link_route_status(parsed, problems, application))
    assert (value, got, gen) == ("False", reason, 1)
    assert words in message


def test_an_invalid_link_route_says_why() -> None:
    parsed = adapter.parse("LinkRoute", body("LinkRoute", "db", {"prefix": "db"}))
    value, reason, message, _ = ready(adapter.link_route_status(parsed, [], Application("default")))
    assert (value, reason) == ("False", "InvalidSpec")
    assert "exactly one of containerId or connection" in message


def test_a_paused_link_route_keeps_its_status_and_says_it_is_paused() -> None:
    stored = body("LinkRoute", "db", {"prefix": "db", "containerId": "b"}, 2, paused=True)
    stored["status"] = {"observedGeneration": 1}
    parsed = adapter.parse("LinkRoute", stored)
    status = adapter.link_route_status(parsed, [], Application("default", ("core",)))
    assert status.observedGeneration == 1
    paused = next(c for c in status.conditions if c.type == RECONCILIATION_PAUSED)
    assert paused.status == "True" and "as it was last applied" in paused.message


def test_a_frozen_link_route_is_its_record() -> None:
    parsed = adapter.parse(
        "LinkRoute", body("LinkRoute", "db", {"prefix": "new", "containerId": "x"}, paused=True)
    )
    record = {"pattern": "db.*", "direction": "out", "connection": {"host": "b", "port": 5673}}
    decl = adapter.frozen_link_route_decl(parsed, "blue", record)
    assert decl == LinkRouteDecl(
        "db",
        pattern="db.*",
        network="blue",
        direction="out",
        connection=LinkRouteConnectionDecl("b", 5673),
        creation_timestamp="2024-01-01T00:00:01Z",
        generation=1,
    )
    assert adapter.frozen_link_route_decl(parsed, "blue", {"prefix": "a", "what": 1}) is None
    # A connection's Secrets are part of what was applied: they stay mounted while paused.
    secure = {"host": "b", "port": 5671, "tlsSecret": "ca", "saslSecret": "login"}
    decl = adapter.frozen_link_route_decl(parsed, "blue", {"prefix": "s", "connection": secure})
    assert decl is not None
    assert decl.connection == LinkRouteConnectionDecl("b", 5671, "ca", "login")


def test_an_applied_link_route_with_secrets_says_where_they_are() -> None:
    spec = {"prefix": "s", "connection": {"host": "b", "tlsSecret": "ca", "saslSecret": "login"}}
    parsed = adapter.parse("LinkRoute", body("LinkRoute", "s", spec))
    status = adapter.link_route_status(parsed, [], Application("default", ("core",)), now=NOW)
    value, reason, message, _ = ready(status)
    assert (value, reason) == ("True", "Applied")
    assert message.endswith(
        "(Routers core); its Secrets 'ca', 'login' are mounted on the interior pods"
        " (which roll for them)"
    )


# --- the reconciler, on a fake API that keeps what is applied ------------------------------------


class StoreApi:
    """Keeps applied objects (get returns them) and records status patches and gets."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.statuses: dict[str, dict[str, Any]] = {}
        self.gets: list[str] = []

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        self.objects[obj["kind"], obj["metadata"]["name"]] = json.loads(json.dumps(obj))
        return dict(obj)

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.gets.append(f"{kind}/{name}")
        return self.objects.get((kind, name))

    def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: Mapping[str, Any]
    ) -> dict[str, Any]:
        self.statuses[f"{kind}/{name}"] = dict(status)
        return {}

    def delete(
        self, api_version: str, kind: str, namespace: str, name: str, *, uid: str | None = None
    ) -> bool:
        return self.objects.pop((kind, name), None) is not None

    def pod_config(self, router: str, pod: str) -> dict[str, Any]:
        data = self.objects["ConfigMap", f"{router}-config"]["data"]
        return dict(json.loads(data[f"{pod}.json"]))


def ready_of(api: StoreApi, what: str) -> tuple[str, str]:
    cond = next(c for c in api.statuses[what]["conditions"] if c["type"] == READY)
    return cond["status"], cond["reason"]


ROUTERS = (
    body("Router", "core", {"replicas": 1}),
    body("Router", "leaf", {"replicas": 1, "role": "edge"}),
)


def test_link_routes_are_applied_and_conflicts_reported() -> None:
    api = StoreApi()
    first = body("LinkRoute", "first", {"prefix": "q", "containerId": "broker"}, 1)
    second = body("LinkRoute", "second", {"prefix": "q", "direction": "out", "containerId": "x"}, 2)
    login = {"prefix": "s", "connection": {"host": "broker", "saslSecret": "login"}}
    sasl = body("LinkRoute", "sasl", login)
    snapshot = Snapshot(NS, routers=ROUTERS, link_routes=(second, sasl, first))
    reconcile_namespace(snapshot, api, OperatorConfig())
    assert ready_of(api, "LinkRoute/first") == ("True", "Applied")
    assert ready_of(api, "LinkRoute/second") == ("False", "Conflict")
    assert ready_of(api, "LinkRoute/sasl") == ("True", "Applied")
    for router, pod in (("core", "core-0"), ("leaf", "leaf-0")):
        routes = api.pod_config(router, pod)["linkRoutes"]
        assert [(r["direction"], r.get("containerId")) for r in routes] == [
            ("in", "broker"),
            ("out", "broker"),
            ("in", None),
            ("out", None),
        ]
    [connector] = api.pod_config("core", "core-0")["connectors"]
    assert connector["saslPassword"] == "file:/etc/routernet-linkroute/sasl/sasl/password"
    volumes = api.objects["StatefulSet", "core"]["spec"]["template"]["spec"]["volumes"]
    assert [v["secret"]["secretName"] for v in volumes if "secret" in v] == [
        "login",
        "core-internal-tls",  # the routers' own certificates (planning/internal_tls.py)
    ]
    leaf = api.objects["StatefulSet", "leaf"]["spec"]["template"]["spec"]["volumes"]
    assert [v["name"] for v in leaf] == ["config", "internal-tls"]
    # Nobody paused: no ConfigMap was read back (only the autoscalers no mode wants were
    # looked for, once: rendering/autoscaler.py, and the routers' certificate Secrets).
    looked = ("HorizontalPodAutoscaler/", "Scaled", "Secret/")
    assert not [g for g in api.gets if not g.startswith(looked)]


def test_a_paused_link_route_stays_as_applied_and_one_never_applied_stays_out() -> None:
    api = StoreApi()
    spec = {"prefix": "q", "connection": {"host": "broker", "port": 5673}}
    reconcile_namespace(
        Snapshot(NS, routers=ROUTERS, link_routes=(body("LinkRoute", "q", spec),)),
        api,
        OperatorConfig(),
    )
    assert ready_of(api, "LinkRoute/q") == ("True", "Applied")
    before = api.pod_config("core", "core-0")
    record = json.loads(api.objects["ConfigMap", "core-config"]["data"][LINK_ROUTES_KEY])
    assert record == {"q": {"prefix": "q", "direction": "both", "connection": spec["connection"]}}

    changed = body("LinkRoute", "q", {"prefix": "z", "containerId": "c"}, 2, paused=True)
    changed["status"] = api.statuses["LinkRoute/q"]
    never = body("LinkRoute", "never", {"prefix": "n", "containerId": "c"}, paused=True)
    snapshot = Snapshot(NS, routers=ROUTERS, link_routes=(changed, never))
    reconcile_namespace(snapshot, api, OperatorConfig())
    assert api.pod_config("core", "core-0") == before
    assert "ConfigMap/core-config" in api.gets
    paused = api.statuses["LinkRoute/q"]  # the patch: the generation observed stays
    assert "observedGeneration" not in paused
    assert any(c["type"] == RECONCILIATION_PAUSED for c in paused["conditions"])

    # Resumed: the new spec is applied, the connector goes with the old one.
    resumed = body("LinkRoute", "q", {"prefix": "z", "containerId": "c"}, 2)
    reconcile_namespace(
        Snapshot(NS, routers=ROUTERS, link_routes=(resumed,)), api, OperatorConfig()
    )
    config = api.pod_config("core", "core-0")
    assert [r["prefix"] for r in config["linkRoutes"]] == ["z", "z"]
    assert "connectors" not in config
    assert ready_of(api, "LinkRoute/q") == ("True", "Applied")


def test_a_paused_link_route_keeps_its_secrets_mounted() -> None:
    """Its record names its Secrets: folded again from it, the pods keep their mounts (no
    roll while paused, whatever the spec now says)."""
    api = StoreApi()
    spec = {"prefix": "q", "connection": {"host": "b", "tlsSecret": "ca", "saslSecret": "login"}}
    reconcile_namespace(
        Snapshot(NS, routers=ROUTERS, link_routes=(body("LinkRoute", "q", spec),)),
        api,
        OperatorConfig(),
    )
    assert ready_of(api, "LinkRoute/q") == ("True", "Applied")
    template = api.objects["StatefulSet", "core"]["spec"]["template"]
    assert [v["name"] for v in template["spec"]["volumes"]] == [
        "config",
        "lr-tls-q",
        "lr-sasl-q",
        "internal-tls",
    ]
    config = api.pod_config("core", "core-0")

    changed = body("LinkRoute", "q", {"prefix": "q", "connection": {"host": "b"}}, 2, paused=True)
    changed["status"] = api.statuses["LinkRoute/q"]
    reconcile_namespace(
        Snapshot(NS, routers=ROUTERS, link_routes=(changed,)), api, OperatorConfig()
    )
    assert api.objects["StatefulSet", "core"]["spec"]["template"] == template
    assert api.pod_config("core", "core-0") == config


def test_a_gateways_tls_reaches_the_planner() -> None:
    spec = {
        "listener": {"router": "hub", "tls": {"secret": "hub-tls", "caSecret": "peers-ca"}},
        "connectors": [
            {"name": "bank", "router": "hub", "host": "gw.bank", "tls": {"caSecret": "b-ca"}},
            {"name": "plain", "router": "hub", "host": "gw.plain"},
        ],
    }
    decl = adapter.gateway_decl(adapter.parse("Gateway", body("Gateway", "gw", spec)))
    assert decl.listener == GatewayListenerDecl("hub", 5673, ListenerTlsDecl("hub-tls", "peers-ca"))
    assert decl.connectors == (
        GatewayConnectorDecl("bank", "hub", "gw.bank", 5673, ConnectorTlsDecl(None, "b-ca", True)),
        GatewayConnectorDecl("plain", "hub", "gw.plain", 5673, None),
    )


def test_a_routers_cert_manager_issuer_reaches_the_planner() -> None:
    issuer = {"name": "corp-ca", "kind": "ClusterIssuer"}
    decl = adapter.router_decl(
        adapter.parse("Router", body("Router", "core", {"interRouterIssuer": issuer})), "img"
    )
    assert decl.tls_issuer == internal_tls.Issuer("corp-ca", "ClusterIssuer", "cert-manager.io")
    plain = adapter.router_decl(adapter.parse("Router", body("Router", "core", {})), "img")
    assert plain.tls_issuer is None
    bad = adapter.parse("Router", body("Router", "core", {"interRouterIssuer": {"name": "A_b"}}))
    assert bad.model is None and "interRouterIssuer.name" in (bad.error or "")
