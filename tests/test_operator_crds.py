"""The generated CRDs: current, valid for Kubernetes, structural, and in step with the models.

The last point is the one that matters in production: every sample object below goes through an
emulation of the API server (defaults, OpenAPI validation, list keys, CEL rules) and through the
pydantic models, and both must accept or refuse it alike, refusals with the same message, and
accepted objects with the same defaults filled in.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from crd_semantics import (
    api_server_failures,
    apply_defaults,
    cel_rules,
    celpy,
    compile_rule,
    structural_problems,
)
from packaging.version import Version
from pydantic import BaseModel, ValidationError
from router_operator.resources import crds as crds_module
from router_operator.resources.crds import SchemaError, check, crds, main, render, structural, write
from router_operator.resources.models import (
    KINDS,
    Address,
    AddressSpec,
    Gateway,
    LinkRoute,
    Router,
    RouterSpec,
)

ROOT = Path(__file__).resolve().parents[1]
CRDS = crds()
needs_cel = pytest.mark.skipif(celpy is None, reason="cel-python is not installed")


def schema(kind: type[Any]) -> dict[str, Any]:
    crd = CRDS[f"{kind.plural}.routernet.io.yaml"]
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


# --- the files ---------------------------------------------------------------------------------


def test_committed_crds_are_current() -> None:
    problems = check(ROOT / "crds")
    assert not problems, "\n".join([*problems, "run `make crds`"])


def test_every_kind_has_its_file() -> None:
    assert sorted(CRDS) == [
        "addresses.routernet.io.yaml",
        "gateways.routernet.io.yaml",
        "linkroutes.routernet.io.yaml",
        "routers.routernet.io.yaml",
    ]


def test_check_reports_stale_missing_and_leftover_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--out", str(tmp_path)]) == 0
    assert main(["--check", "--out", str(tmp_path)]) == 0
    capsys.readouterr()

    stale = tmp_path / "routers.routernet.io.yaml"
    stale.write_text(stale.read_text().replace("default: 250", "default: 251"))
    (tmp_path / "addresses.routernet.io.yaml").unlink()
    (tmp_path / "gone.routernet.io.yaml").write_text("{}\n")
    assert main(["--check", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "routers.routernet.io.yaml is stale" in err
    assert "addresses.routernet.io.yaml is missing" in err
    assert "gone.routernet.io.yaml is not generated from any model" in err
    assert "run `make crds`" in err

    assert {p.name for p in write(tmp_path)} == {
        "routers.routernet.io.yaml",
        "addresses.routernet.io.yaml",
        "gone.routernet.io.yaml",
    }
    assert check(tmp_path) == []
    assert write(tmp_path) == []  # nothing rewritten when current


def test_rendering_is_stable() -> None:
    for name, document in CRDS.items():
        assert render(document) == render(crds()[name])
        assert render(document).startswith(
            "# Generated from operator/router_operator/resources/models.py"
        )


# --- Kubernetes' view of the CRDs --------------------------------------------------------------


# The chart's floor (Chart.yaml kubeVersion) and the newest schemas kubernetes-validate ships.
KUBE_VERSIONS = ["1.25.0", kubernetes_validate.latest_version()]


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("name", sorted(CRDS))
def test_crd_validates_against_kubernetes_schema(name: str, version: str) -> None:
    assert Version(KUBE_VERSIONS[-1]) >= Version("1.30")
    kubernetes_validate.validate(CRDS[name], version, strict=True)


@pytest.mark.parametrize("name", sorted(CRDS))
def test_schema_is_structural(name: str) -> None:
    openapi = CRDS[name]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert structural_problems(openapi) == []
    assert openapi["properties"]["metadata"]["type"] == "object"


def test_structural_checker_catches_what_it_should() -> None:
    bad = {
        "type": "object",
        "properties": {
            "a": {"$ref": "#/$defs/A"},
            "b": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "c": {"type": "integer", "exclusiveMinimum": 0},
            "d": {"description": "no type"},
            "e": {
                "type": "array",
                "items": {"type": "object"},
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["k"],
            },
        },
    }
    problems = "\n".join(structural_problems(bad))
    for expected in (
        ".a: $ref is not allowed",
        ".b: anyOf is only allowed",
        ".c: exclusiveMinimum must be a boolean",
        ".d: has no type",
        ".e: list-map key 'k' is neither required nor defaulted",
    ):
        assert expected in problems


def test_names_subresources_and_columns() -> None:
    router = CRDS["routers.routernet.io.yaml"]
    assert router["metadata"]["name"] == "routers.routernet.io"
    names = router["spec"]["names"]
    assert names["shortNames"] == ["rtr"] and names["categories"] == ["routernet"]
    assert router["spec"]["scope"] == "Namespaced"
    version = router["spec"]["versions"][0]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    short = {
        crd["spec"]["names"]["kind"]: crd["spec"]["names"]["shortNames"] for crd in CRDS.values()
    }
    assert short == {
        "Router": ["rtr"],
        "Address": ["raddr"],
        "LinkRoute": ["rlr"],
        "Gateway": ["rgw"],
    }
    for crd in CRDS.values():
        version = crd["spec"]["versions"][0]
        assert "status" in version["subresources"]
        columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
        assert columns["Ready"] == '.status.conditions[?(@.type=="Ready")].status'
        assert columns["Age"] == ".metadata.creationTimestamp"
        assert "Network" in columns
        # A column must point at a field the schema has, or it shows nothing for ever.
        openapi = version["schema"]["openAPIV3Schema"]
        for path in columns.values():
            if "[" in path or path.startswith(".metadata"):
                continue
            node = openapi
            for part in path.strip(".").split("."):
                node = node["properties"][part]


def test_status_has_no_defaults_and_router_spec_defaults_to_empty() -> None:
    for kind in KINDS:
        assert "default" not in repr(schema(kind)["properties"]["status"])
    assert schema(Router)["properties"]["spec"]["default"] == {}
    assert schema(Address)["required"] == ["spec"]


def test_image_is_not_defaulted_by_the_api_server() -> None:
    """Stored objects would otherwise pin the image of the operator release that created them."""
    assert "default" not in schema(Router)["properties"]["spec"]["properties"]["image"]


# --- the schema post-processor ------------------------------------------------------------------


def test_structural_inlines_refs_and_maps_optional_and_bounds() -> None:
    class Inner(BaseModel):
        """Inner thing.

        Developers' notes that users need not see."""

        x: int = 0

    class Outer(BaseModel):
        inner: Inner | None = None
        ratio: float = 0.5
        count: int = 1

    raw = Outer.model_json_schema()
    raw["properties"]["ratio"]["exclusiveMinimum"] = 0
    raw["properties"]["count"]["exclusiveMinimum"] = 0
    out = structural(raw)
    assert out["properties"]["inner"] == {
        "description": "Inner thing.",
        "type": "object",
        "properties": {"x": {"type": "integer", "default": 0}},
    }
    assert out["properties"]["ratio"]["minimum"] == 0
    assert out["properties"]["ratio"]["exclusiveMinimum"] is True
    assert out["properties"]["count"]["minimum"] == 1
    assert "exclusiveMinimum" not in out["properties"]["count"]
    assert "title" not in repr(out)


def test_structural_refuses_what_it_cannot_express() -> None:
    class Node(BaseModel):
        child: Node | None = None

    with pytest.raises(SchemaError, match="recursive"):
        structural(Node.model_json_schema())

    class Either(BaseModel):
        value: int | str | bool

    with pytest.raises(SchemaError, match="not structural"):
        structural(Either.model_json_schema())

    class Unique(BaseModel):
        tags: set[str]

    with pytest.raises(SchemaError, match="uniqueItems"):
        structural(Unique.model_json_schema())


# --- the models and the CRDs agree --------------------------------------------------------------


def router(spec: dict[str, Any] | None = None, name: str = "r1") -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "routernet.io/v1alpha1",
        "kind": "Router",
        "metadata": {"name": name},
    }
    if spec is not None:
        obj["spec"] = spec
    return obj


def address(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "routernet.io/v1alpha1",
        "kind": "Address",
        "metadata": {"name": "a1"},
        "spec": spec,
    }


def link_route(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "routernet.io/v1alpha1",
        "kind": "LinkRoute",
        "metadata": {"name": "l1"},
        "spec": spec,
    }


def gateway(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "routernet.io/v1alpha1",
        "kind": "Gateway",
        "metadata": {"name": "g1"},
        "spec": spec,
    }


GATEWAY_RULE = {"container": "branch-1", "subject": {"prefix": "atm."}}
GATEWAY_CONNECTOR = {"name": "megabank", "router": "hub", "host": "gw.example.com"}

VALID: list[tuple[type[Any], dict[str, Any]]] = [
    (Router, router()),
    (Router, router({})),
    (Router, router({"replicas": 0})),
    (Router, router({"autoscaling": {"maxReplicas": 3, "targets": {"connections": 100}}})),
    (
        Router,
        router(
            {
                "autoscaling": {
                    "maxReplicas": 3,
                    "targets": {"connections": 100},
                    "predictive": True,
                }
            }
        ),
    ),
    (
        Router,
        router(
            {
                "autoscaling": {
                    "mode": "hpa",
                    "minReplicas": 2,
                    "maxReplicas": 2,
                    "targets": {"messagesPerSecond": 2500.5, "unsettledDeliveries": 1000},
                    "behavior": {
                        "scaleUp": {"stabilizationWindowSeconds": 0},
                        "scaleDown": {
                            "selectPolicy": "Min",
                            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
                        },
                    },
                }
            }
        ),
    ),
    (Router, router({"replicas": 3, "role": "edge", "network": "prod-eu-1"}, name="edge-a")),
    (
        Router,
        router(
            {
                "listeners": [
                    {"port": 5672},
                    {
                        "port": 5671,
                        "tlsSecret": "amqps-cert",
                        "saslMechanisms": ["PLAIN"],
                        "saslUsersSecret": "router-users",
                        "authenticatePeer": True,
                    },
                    {
                        "port": 5673,
                        "role": "route-container",
                        "saslMechanisms": ["ANONYMOUS", "PLAIN"],
                        "saslUsersSecret": "router-users",
                    },
                ]
            }
        ),
    ),
    (Router, router({"listeners": []})),
    (
        Router,
        router(
            {
                "linkCapacity": 1000,
                "image": "registry.example.com/routernet/router:1.2.3",
                "resources": {"requests": {"cpu": 1, "memory": "128Mi"}, "limits": {"cpu": "2.5"}},
                "podTemplate": {
                    "metadata": {"labels": {"team": "messaging"}, "annotations": {"a": "b"}},
                    "spec": {
                        "nodeSelector": {"disk": "ssd"},
                        "tolerations": [{"key": "k", "operator": "Exists"}],
                    },
                },
            }
        ),
    ),
    (Router, router(name="a" * 45)),
    (Router, router({"store": {}})),
    (Router, router({"store": {"size": "20Gi", "storageClassName": "fast-ssd"}})),
    (Address, address({"prefix": "orders"})),
    (Address, address({"prefix": "orders/eu.north", "distribution": "closest", "priority": 9})),
    (Address, address({"pattern": "sensors.*.temp", "distribution": "multicast"})),
    (Address, address({"pattern": "#", "network": "other"})),
    (Address, address({"prefix": "jobs", "undeliverable": {"action": "hold"}})),
    (
        Address,
        address({"prefix": "jobs", "undeliverable": {"action": "hold", "holdTimeoutSeconds": 5}}),
    ),
    (
        Address,
        address(
            {"prefix": "audit", "undeliverable": {"action": "redirect", "fallbackAddress": "a.fb"}}
        ),
    ),
    (Address, address({"prefix": "x", "undeliverable": {"action": "drop"}, "priority": -1})),
    (Address, address({"prefix": "jobs", "node": {"router": "hub"}})),
    (
        Address,
        address(
            {
                "pattern": "jobs.*",
                "node": {
                    "type": "queue",
                    "router": "hub",
                    "deadLetterAddress": "jobs.dlq",
                    "maxDeliveryCount": 5,
                    "maxDepth": 100000,
                    "maxBytes": 1048576,
                    "atLimit": "reject",
                    "visibility": "inbound",
                    "bindings": [
                        {"address": "audit", "mode": "copy", "subject": "eu.#"},
                        {"address": "jobs.eu", "mode": "move", "selector": "region = 'eu'"},
                    ],
                },
            }
        ),
    ),
    (
        Address,
        address(
            {
                "prefix": "news",
                "node": {"type": "topic", "router": "hub", "bindings": [{"address": "x"}]},
            }
        ),
    ),
    (LinkRoute, link_route({"prefix": "queue", "containerId": "broker-0"})),
    (
        LinkRoute,
        link_route(
            {
                "pattern": "topic.#",
                "direction": "in",
                "connection": {
                    "host": "broker.messaging.svc",
                    "port": 5671,
                    "tlsSecret": "broker-ca",
                    "saslSecret": "broker-login",
                },
            }
        ),
    ),
    (
        LinkRoute,
        link_route({"prefix": "q", "direction": "out", "connection": {"host": "10.0.0.7"}}),
    ),
    (LinkRoute, link_route({"prefix": "q", "connection": {"host": "fd00::7"}})),
    (Gateway, gateway({})),
    (
        Gateway,
        gateway(
            {
                "network": "east",
                "rules": [
                    GATEWAY_RULE,
                    {"container": "hq", "applicationProperties": {"k": {"pattern": "a.#"}}},
                    {
                        "container": "c" * 1000,
                        "node": {"exact": "n" * 1000},
                        "applicationProperties": {f"k{i}": {"exact": "v"} for i in range(16)},
                    },
                ],
                "defaultContainer": "hq",
                "export": [{"prefix": "branch-"}, {"exact": "hq"}],
                "containers": [{"container": "paris", "connector": "megabank"}],
                "listener": {"router": "hub", "port": 5673},
                "connectors": [GATEWAY_CONNECTOR],
            }
        ),
    ),
    (
        Gateway,
        gateway(
            {
                "listener": {"router": "hub", "tls": {"secret": "gw-tls", "caSecret": "gw-tls"}},
                "connectors": [
                    {**GATEWAY_CONNECTOR, "tls": {"secret": "gw-client", "caSecret": "bank-ca"}},
                    {**GATEWAY_CONNECTOR, "name": "public", "tls": {}},
                    {
                        **GATEWAY_CONNECTOR,
                        "name": "by-ip",
                        "host": "10.0.0.7",
                        "tls": {"caSecret": "bank-ca", "verifyHostname": False},
                    },
                ],
            }
        ),
    ),
]

# (kind, object, a phrase both the models' error and the API server's must contain, or None
# when the two word it differently: OpenAPI validation has its own wording).
INVALID: list[tuple[type[Any], dict[str, Any], str | None]] = [
    (Router, router({"replicas": -1}), None),
    (Router, router({"replicas": "3"}), None),
    (Router, router({"replicas": True}), None),
    (Router, router({"role": "standalone"}), None),
    (Router, router({"network": "Prod"}), None),
    (Router, router({"network": ""}), None),
    (Router, router({"linkCapacity": 0}), None),
    (Router, router({"image": "has space"}), None),
    (Router, router({"listeners": [{"port": 0}]}), None),
    (Router, router({"listeners": [{"port": 5672}, {"port": 5672}]}), None),
    (Router, router({"listeners": [{"tlsSecret": "x"}]}), None),
    (Router, router({"listeners": [{"port": 55672}]}), "reserved"),
    (Router, router({"listeners": [{"port": 45672}]}), "reserved"),
    (
        Router,
        router({"listeners": [{"port": 5672, "saslMechanisms": ["PLAIN"]}]}),
        "PLAIN needs saslUsersSecret",
    ),
    (
        Router,
        router({"listeners": [{"port": 5672, "saslUsersSecret": "users"}]}),
        "saslUsersSecret is only used with PLAIN",
    ),
    (
        Router,
        router({"listeners": [{"port": 5672, "authenticatePeer": True}]}),
        "authenticatePeer requires a mechanism other than ANONYMOUS",
    ),
    (
        Router,
        router(
            {
                "listeners": [
                    {"port": 1, "saslMechanisms": ["PLAIN"], "saslUsersSecret": "a"},
                    {"port": 2, "saslMechanisms": ["PLAIN"], "saslUsersSecret": "b"},
                ]
            }
        ),
        "must name the same saslUsersSecret",
    ),
    (Router, router({"listeners": [{"port": 1, "saslMechanisms": []}]}), None),
    (Router, router({"listeners": [{"port": 1, "saslMechanisms": ["GSSAPI"]}]}), None),
    (Router, router({"listeners": [{"port": 1, "saslMechanisms": ["PLAIN", "PLAIN"]}]}), None),
    (Router, router({"listeners": [{"port": 1, "tlsSecret": "Not_A_Name"}]}), None),
    (Router, router({"resources": {"requests": {"memory": "lots"}}}), None),
    (Router, router({"resources": {"limits": {"cpu": 0.5}}}), None),
    (
        Router,
        router(
            {"autoscaling": {"minReplicas": 3, "maxReplicas": 2, "targets": {"connections": 9}}}
        ),
        "autoscaling.minReplicas must not exceed autoscaling.maxReplicas",
    ),
    (
        Router,
        router({"autoscaling": {"maxReplicas": 2, "targets": {}}}),
        "autoscaling.targets needs at least one of",
    ),
    (Router, router({"autoscaling": {"targets": {"connections": 9}}}), None),
    (
        Router,
        router(
            {
                "autoscaling": {
                    "mode": "keda",
                    "maxReplicas": 2,
                    "targets": {"connections": 9},
                    "predictive": True,
                }
            }
        ),
        "autoscaling.predictive needs mode operator",
    ),
    (Router, router({"autoscaling": {"maxReplicas": 2, "targets": {"connections": 0}}}), None),
    (
        Router,
        router(
            {
                "autoscaling": {
                    "maxReplicas": 2,
                    "targets": {"connections": 9},
                    "behavior": {"scaleUp": {"policies": [{"type": "Pods", "value": 0}]}},
                }
            }
        ),
        None,
    ),
    # The API server words these its own way, at metadata.name (the test below).
    (Router, router(name="a" * 46), None),
    (Router, router(name="9lives"), None),
    (Router, router(name="with.dot"), None),
    (Router, router({"store": {"size": "-1Gi"}}), None),
    (Router, router({"store": {"size": 1024}}), None),
    (Router, router({"store": {"storageClassName": "Fast_SSD"}}), None),
    (Address, address({}), "exactly one of prefix or pattern is required"),
    (Address, address({"prefix": "a", "pattern": "b"}), "exactly one of prefix or pattern"),
    (Address, address({"network": "default"}), "exactly one of prefix or pattern"),
    (Address, address({"prefix": "a.*"}), None),
    (Address, address({"prefix": "a..b"}), None),
    (Address, address({"prefix": "a b"}), None),
    (Address, address({"prefix": ""}), None),
    (Address, address({"pattern": "a.b*"}), None),
    (Address, address({"prefix": "a", "distribution": "random"}), None),
    (Address, address({"prefix": "a", "priority": 10}), None),
    (Address, address({"prefix": "a", "priority": -2}), None),
    (
        Address,
        address({"prefix": "a", "undeliverable": {"action": "redirect"}}),
        "fallbackAddress is required when action is redirect",
    ),
    (
        Address,
        address({"prefix": "a", "undeliverable": {"fallbackAddress": "b"}}),
        "fallbackAddress is only allowed when action is redirect",
    ),
    (
        Address,
        address(
            {
                "prefix": "a",
                "undeliverable": {
                    "action": "redirect",
                    "holdTimeoutSeconds": 3,
                    "fallbackAddress": "b",
                },
            }
        ),
        "holdTimeoutSeconds is only allowed when action is hold",
    ),
    (
        Address,
        address({"prefix": "a", "undeliverable": {"action": "hold", "holdTimeoutSeconds": 0}}),
        None,
    ),
    (Address, address({"prefix": "a", "undeliverable": {"action": "bounce"}}), None),
    (Address, address({"prefix": "a", "node": {}}), None),
    (Address, address({"prefix": "a", "node": {"router": "Hub"}}), None),
    (Address, address({"prefix": "a", "node": {"router": "hub", "type": "stream"}}), None),
    (Address, address({"prefix": "a", "node": {"router": "hub", "maxDepth": 0}}), None),
    (
        Address,
        address({"prefix": "a", "node": {"router": "hub", "deadLetterAddress": "a b"}}),
        None,
    ),
    (Address, address({"prefix": "a", "node": {"router": "hub", "atLimit": "drop"}}), None),
    (
        Address,
        address({"prefix": "a", "node": {"router": "hub", "bindings": [{"address": ""}]}}),
        None,
    ),
    (
        Address,
        address(
            {
                "prefix": "a",
                "node": {
                    "type": "topic",
                    "router": "hub",
                    "bindings": [{"address": "b", "mode": "move"}],
                },
            }
        ),
        "a topic routes a copy to every binding: mode move is for queues",
    ),
    (LinkRoute, link_route({"prefix": "q"}), "exactly one of containerId or connection"),
    (
        LinkRoute,
        link_route({"prefix": "q", "containerId": "b", "connection": {"host": "b"}}),
        "exactly one of containerId or connection",
    ),
    (LinkRoute, link_route({"containerId": "b"}), "exactly one of prefix or pattern"),
    (LinkRoute, link_route({"prefix": "q", "containerId": "b", "direction": "sideways"}), None),
    (LinkRoute, link_route({"prefix": "q", "connection": {"port": 5672}}), None),
    (LinkRoute, link_route({"prefix": "q", "connection": {"host": "bad host"}}), None),
    (LinkRoute, link_route({"prefix": "q", "connection": {"host": "b", "port": 70000}}), None),
    (LinkRoute, link_route({"prefix": "q", "containerId": "has space"}), None),
    (Gateway, gateway({"rules": [{"container": "c"}]}), "has no condition"),
    (
        Gateway,
        gateway({"rules": [{"container": "c", "node": {"exact": "a", "prefix": "b"}}]}),
        "exactly one of exact, prefix or pattern is required",
    ),
    (
        Gateway,
        gateway({"rules": [{"container": "c", "applicationProperties": {"k": {}}}]}),
        "exactly one of exact, prefix or pattern is required",
    ),
    (Gateway, gateway({"export": [{}]}), "exactly one of exact, prefix or pattern is required"),
    (
        Gateway,
        gateway({"containers": [{"container": "paris", "connector": "megabank"}]}),
        "every containers[].connector must name one of connectors",
    ),
    (Gateway, gateway({"defaultContainer": "a b"}), None),
    # Bounds the API server's CEL cost estimate needs (router/gateway/config.py).
    (
        Gateway,
        gateway(
            {
                "rules": [
                    {
                        "container": "c",
                        "applicationProperties": {f"k{i}": {"exact": "v"} for i in range(17)},
                    }
                ]
            }
        ),
        None,
    ),
    (Gateway, gateway({"rules": [{"container": "c", "node": {"prefix": "n" * 1001}}]}), None),
    (Gateway, gateway({"containers": [{"container": "c" * 1001, "connector": "x"}]}), None),
    (Gateway, gateway({"listener": {"router": "Hub"}}), None),
    (Gateway, gateway({"connectors": [{**GATEWAY_CONNECTOR, "port": 0}]}), None),
    (Gateway, gateway({"listener": {"router": "hub", "tls": {"caSecret": "gw-ca"}}}), None),
    (Gateway, gateway({"listener": {"router": "hub", "tls": {"secret": "Gw"}}}), None),
    (
        Gateway,
        gateway({"connectors": [{**GATEWAY_CONNECTOR, "tls": {"verifyHostname": False}}]}),
        "verifyHostname false needs caSecret",
    ),
]


def _ids(cases: list[tuple[Any, ...]]) -> list[str]:
    return [f"{case[0].__name__}-{index}" for index, case in enumerate(cases)]


@needs_cel
@pytest.mark.parametrize(("kind", "obj"), VALID, ids=_ids(VALID))
def test_valid_objects_are_accepted_alike_with_the_same_defaults(
    kind: type[Any], obj: dict[str, Any]
) -> None:
    openapi = schema(kind)
    assert api_server_failures(openapi, obj) == []
    model = kind.model_validate(obj)
    # What the API server stores (defaults applied) is what the model reads.
    stored = apply_defaults(openapi, obj)
    assert model.spec.model_dump(mode="json", exclude_none=True) == stored["spec"]


@needs_cel
@pytest.mark.parametrize(("kind", "obj", "phrase"), INVALID, ids=_ids(INVALID))
def test_invalid_objects_are_refused_alike(
    kind: type[Any], obj: dict[str, Any], phrase: str | None
) -> None:
    failures = api_server_failures(schema(kind), obj)
    assert failures, "the API server would accept this"
    with pytest.raises(ValidationError) as caught:
        kind.model_validate(obj)
    if phrase is not None:
        assert any(phrase in failure.message for failure in failures), failures
        assert phrase in str(caught.value)
    # Both point at the same place (one path may be more precise than the other).
    api_paths = {_dotted(failure.path) for failure in failures}
    model_paths = {_dotted(".".join(map(str, error["loc"]))) for error in caught.value.errors()}
    assert any(a.startswith(m) or m.startswith(a) for a in api_paths for m in model_paths), (
        api_paths,
        model_paths,
    )


def _dotted(path: str) -> str:
    return path.replace("[", ".").replace("]", "").strip(".")


def test_no_rule_sits_on_the_root() -> None:
    """A rule on the resource root is reported at ``<nil>`` ("<nil>: Invalid value: ..."):
    fieldPath could point it at a field, but needs Kubernetes 1.28, newer than the chart's
    floor. So no root has one, and the Router's name is constrained by metadata.name's schema,
    the one part of metadata a CRD may constrain."""
    for kind in KINDS:
        for rule in schema(kind).get("x-kubernetes-validations", []):
            assert rule.get("fieldPath"), f"{kind.kind_name}: {rule['rule']} names no field"
    assert schema(Router)["properties"]["metadata"] == {
        "type": "object",
        "properties": {
            "name": {
                "type": "string",
                "minLength": 1,
                "maxLength": 45,
                "pattern": "^[a-z]([-a-z0-9]*[a-z0-9])?$",
            }
        },
    }
    assert schema(Address)["properties"]["metadata"] == {"type": "object"}


@needs_cel
@pytest.mark.parametrize("name", ["a" * 46, "9lives", "with.dot", "Upper", "-a", "a-"])
def test_a_bad_router_name_is_reported_at_metadata_name(name: str) -> None:
    failures = api_server_failures(schema(Router), router(name=name))
    assert failures and {failure.path for failure in failures} == {".metadata.name"}
    with pytest.raises(ValidationError) as caught:
        Router.model_validate(router(name=name))
    (error,) = caught.value.errors()
    assert error["loc"] == ("metadata", "name")
    assert "is not a valid Router name: a DNS-1035 label" in error["msg"]
    assert "it names the StatefulSet, the pods and the Services" in error["msg"]


@needs_cel
def test_a_reserved_port_is_reported_at_the_port() -> None:
    """A rule about one field sits on that field: the API server names the port."""
    obj = router({"listeners": [{"port": 5672}, {"port": 55672}]})
    failures = api_server_failures(schema(Router), obj)
    assert [(f.path, f.message.split(" are ")[0]) for f in failures] == [
        (".spec.listeners[1].port", "ports 55672, 45672 and 9090")
    ]
    with pytest.raises(ValidationError) as caught:
        Router.model_validate(obj)
    (error,) = caught.value.errors()
    assert error["loc"] == ("spec", "listeners", 1, "port")


@needs_cel
def test_every_cel_rule_compiles() -> None:
    rules = [rule for kind in KINDS for rule in cel_rules(schema(kind))]
    assert len(rules) >= 12
    for rule in rules:
        compile_rule(rule)


@needs_cel
@pytest.mark.parametrize(
    ("old", "new", "phrase"),
    [
        ({"prefix": "a"}, {"prefix": "a", "distribution": "closest"}, None),
        ({"prefix": "a"}, {"prefix": "a", "network": "other", "priority": 3}, None),
        ({"prefix": "a"}, {"prefix": "b"}, "prefix is immutable"),
        ({"pattern": "a.*"}, {"pattern": "a.#"}, "pattern is immutable"),
        ({"prefix": "a"}, {"pattern": "a.#"}, "prefix is immutable"),
        ({"pattern": "a.#"}, {"prefix": "a"}, "pattern is immutable"),
    ],
)
def test_prefix_and_pattern_are_immutable(
    old: dict[str, Any], new: dict[str, Any], phrase: str | None
) -> None:
    failures = api_server_failures(schema(Address), address(new), old=address(old))
    old_spec, new_spec = AddressSpec.model_validate(old), AddressSpec.model_validate(new)
    if phrase is None:
        assert failures == []
        new_spec.check_update(old_spec)
    else:
        assert phrase in [f.message.split(":")[0] for f in failures]
        with pytest.raises(ValueError, match=phrase):
            new_spec.check_update(old_spec)


@needs_cel
@pytest.mark.parametrize(
    ("old", "new", "phrase"),
    [
        ({"prefix": "a"}, {"prefix": "a", "node": {"router": "hub"}}, None),
        ({"prefix": "a", "node": {"router": "hub"}}, {"prefix": "a"}, None),
        (
            {"prefix": "a", "node": {"router": "hub"}},
            {"prefix": "a", "node": {"router": "other", "maxDepth": 9}},
            None,
        ),
        (
            {"prefix": "a", "node": {"router": "hub"}},
            {"prefix": "a", "node": {"router": "hub", "type": "queue"}},
            None,
        ),
        (
            {"prefix": "a", "node": {"router": "hub"}},
            {"prefix": "a", "node": {"router": "hub", "type": "topic"}},
            "node.type is immutable",
        ),
        (
            {"prefix": "a", "node": {"type": "topic", "router": "hub"}},
            {"prefix": "a", "node": {"router": "hub"}},
            "node.type is immutable",
        ),
    ],
)
def test_a_nodes_type_is_immutable_its_router_is_not(
    old: dict[str, Any], new: dict[str, Any], phrase: str | None
) -> None:
    failures = api_server_failures(schema(Address), address(new), old=address(old))
    old_spec, new_spec = AddressSpec.model_validate(old), AddressSpec.model_validate(new)
    if phrase is None:
        assert failures == []
        new_spec.check_update(old_spec)
    else:
        assert phrase in [f.message.split(":")[0] for f in failures]
        with pytest.raises(ValueError, match=phrase):
            new_spec.check_update(old_spec)


@needs_cel
@pytest.mark.parametrize(
    ("old", "new", "allowed"),
    [
        ({}, {"replicas": 3}, True),
        ({"store": {}}, {"store": {"size": "1Gi"}, "replicas": 2}, True),
        ({}, {"store": {}}, False),
        ({"store": {}}, {}, False),
        ({"store": {"size": "1Gi"}}, {"store": {"size": "2Gi"}}, False),
        ({"store": {}}, {"store": {"storageClassName": "fast"}}, False),
    ],
)
def test_a_routers_store_is_immutable(
    old: dict[str, Any], new: dict[str, Any], allowed: bool
) -> None:
    """A StatefulSet's volumeClaimTemplates cannot change, so neither can what renders them."""
    failures = api_server_failures(schema(Router), router(new), old=router(old))
    old_spec, new_spec = RouterSpec.model_validate(old), RouterSpec.model_validate(new)
    if allowed:
        assert failures == []
        new_spec.check_update(old_spec)
    else:
        assert "store is immutable" in [f.message.split(" (")[0] for f in failures]
        with pytest.raises(ValueError, match="store is immutable"):
            new_spec.check_update(old_spec)


def test_unknown_fields_are_refused_by_the_models() -> None:
    """The API server prunes unknown fields (kubectl's strict field validation refuses them);
    the models refuse them, so a typo in a file for ``routernet up`` is not silently lost."""
    with pytest.raises(ValidationError, match="replicaz"):
        Router.model_validate(router({"replicaz": 3}))
    with pytest.raises(ValidationError, match=r"undeliverable\.actoin"):
        Address.model_validate(address({"prefix": "a", "undeliverable": {"actoin": "hold"}}))


def test_models_default_like_the_crd_with_nothing_set() -> None:
    spec = RouterSpec()
    assert spec.replicas == 1 and spec.role == "interior" and spec.network == "default"
    assert [listener.port for listener in spec.listeners] == [5672]
    assert spec.linkCapacity == 250 and spec.image is None
    assert spec.resources.limits == {"memory": "256Mi"}


def test_module_runs_as_a_script() -> None:
    assert crds_module.DEFAULT_OUT == ROOT / "crds"
    done = subprocess.run(
        [sys.executable, "-m", "router_operator.resources.crds", "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "are current" in done.stdout
