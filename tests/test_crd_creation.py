"""What the API server checks when the CRDs are created, and the least objects its rules meet.

``kubectl apply -f crds/`` once failed against a real API server: it evaluates every CEL rule
against every ``default`` of the schema when the CRD is created, and the Router spec's rule read
``self.listeners`` from spec's default, ``{}`` ("no such key: listeners evaluating rule: ...").
No API server runs here, so these tests play its part on the committed files (what ``kubectl``
and the chart apply): each default validated as it stands, rules included; every rule evaluated
on the least value of its node and on the minimal objects of each kind, where it must give a
boolean, not an error; cel-python made to answer ``has()`` and missing keys as Kubernetes does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from crd_semantics import (
    RuleError,
    api_server_failures,
    apply_defaults,
    cel_failures,
    celpy,
    default_problems,
    evaluate_rule,
    least_value_problems,
    rule_nodes_reached,
    schema_nodes,
    structural_problems,
    unbounded_reads,
)
from router_operator.resources.models import KINDS, Address, LinkRoute, Router

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted((ROOT / "crds").glob("*.routernet.io.yaml"))
needs_cel = pytest.mark.skipif(celpy is None, reason="cel-python is not installed")


def openapi(path: Path) -> dict[str, Any]:
    crd = yaml.safe_load(path.read_text(encoding="utf-8"))
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def schema_of(kind: type[Any]) -> dict[str, Any]:
    return openapi(ROOT / "crds" / f"{kind.plural}.routernet.io.yaml")


def test_every_kind_has_its_file() -> None:
    assert [path.name for path in FILES] == sorted(f"{k.plural}.routernet.io.yaml" for k in KINDS)


# --- the defaults, as the API server checks them when the CRD is created -------------------------


@needs_cel
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_default_satisfies_its_schema_and_rules(path: Path) -> None:
    assert default_problems(openapi(path)) == []


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_committed_schema_is_structural(path: Path) -> None:
    assert structural_problems(openapi(path)) == []


def test_defaults_reach_the_rules_they_must_satisfy() -> None:
    """Not vacuous: spec's ``{}`` meets spec's rules, the default listener the listener's."""
    reached = {
        (kind.kind_name, at, node_path)
        for kind in KINDS
        for at, node in schema_nodes(schema_of(kind))
        if "default" in node
        for node_path in rule_nodes_reached(node, node["default"], at)
    }
    assert ("Router", ".spec", ".spec") in reached
    assert ("Router", ".spec.listeners", ".spec.listeners[*]") in reached
    assert ("Address", ".spec.undeliverable", ".spec.undeliverable") in reached


# --- the API server's estimate of what the rules cost -------------------------------------------


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_list_map_and_string_a_rule_reads_is_bounded(path: Path) -> None:
    """The API server refuses a CRD whose rules it estimates over budget, and estimates with
    the largest size a schema allows: without maxItems, maxProperties or maxLength, that of
    the largest request. tests/test_kube_api.py applies the CRDs to a real API server when one
    is at hand; this is what guards them where none is."""
    assert unbounded_reads(openapi(path)) == []


def test_the_bound_check_finds_what_the_api_server_refused() -> None:
    """The Gateway CRD as a real API server refused it ("estimated rule cost exceeds budget by
    factor of 45.3x"): a rule over a list's items reads every value of a map without
    maxProperties; and a rule comparing strings without maxLength."""
    match = {
        "type": "object",
        "properties": {"exact": {"type": "string", "maxLength": 10}},
    }
    rules = {
        "type": "array",
        "maxItems": 64,
        "items": {
            "type": "object",
            "properties": {
                "props": {"type": "object", "additionalProperties": match},
                "name": {"type": "string"},
            },
        },
        "x-kubernetes-validations": [
            {"rule": "self.all(r, r.props.all(k, has(r.props[k].exact)))"},
            {"rule": "self.all(r, has(r.name))"},
        ],
    }
    schema = {"type": "object", "properties": {"spec": {"type": "object", "properties": {}}}}
    schema["properties"]["spec"]["properties"]["rules"] = rules
    assert unbounded_reads(schema) == [".spec.rules[*].props: no maxProperties"]
    rules["items"]["properties"]["props"]["maxProperties"] = 16
    assert unbounded_reads(schema) == []
    rules["x-kubernetes-validations"].append({"rule": "self.all(r, r.name != 'x')"})
    assert unbounded_reads(schema) == [".spec.rules[*].name: no maxLength"]
    del rules["maxItems"]
    assert ".spec.rules: no maxItems" in unbounded_reads(schema)


# --- the least values and the minimal objects ---------------------------------------------------


@needs_cel
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_rule_evaluates_on_the_least_value_of_its_node(path: Path) -> None:
    """Only required fields, with and without defaults: a rule that reads an optional field
    without has() gives an error here, before any default or object without it can."""
    assert least_value_problems(openapi(path)) == []


def _object(kind: type[Any], spec: dict[str, Any] | None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "routernet.io/v1alpha1",
        "kind": kind.kind_name,
        "metadata": {"name": "m1"},
    }
    if spec is not None:
        obj["spec"] = spec
    return obj


# Each kind's least valid object: what the schema requires, plus what the rules require (one of
# prefix or pattern, one of containerId or connection).
MINIMAL: list[tuple[type[Any], dict[str, Any] | None]] = [
    (Router, None),
    (Address, {"prefix": "a"}),
    (LinkRoute, {"prefix": "q", "containerId": "b"}),
]


@needs_cel
@pytest.mark.parametrize(("kind", "spec"), MINIMAL, ids=[k.kind_name for k, _ in MINIMAL])
def test_minimal_objects_are_accepted_and_every_rule_holds(
    kind: type[Any], spec: dict[str, Any] | None
) -> None:
    schema, obj = schema_of(kind), _object(kind, spec)
    # As sent (no defaults) and as stored (defaults filled in): true, and no evaluation error.
    assert cel_failures(schema, obj) == []
    assert cel_failures(schema, apply_defaults(schema, obj)) == []
    # With oldSelf the same object, as on an update that changes nothing.
    stored = apply_defaults(schema, obj)
    assert cel_failures(schema, stored, old=stored) == []
    assert api_server_failures(schema, obj) == []
    kind.model_validate(obj)


@needs_cel
@pytest.mark.parametrize(("kind", "spec"), MINIMAL[1:], ids=[k.kind_name for k, _ in MINIMAL[1:]])
def test_minimal_objects_are_minimal(kind: type[Any], spec: dict[str, Any]) -> None:
    schema = schema_of(kind)
    for field in spec:
        smaller = {key: value for key, value in spec.items() if key != field}
        assert api_server_failures(schema, _object(kind, smaller)), f"{field} is not needed"
    assert api_server_failures(schema, _object(kind, None))  # spec itself is required


# --- the harness: what it catches, and that it answers as Kubernetes does ------------------------

# The Router spec's rule as it was when `kubectl apply -f crds/` failed.
_OLD_LISTENERS_RULE = {
    "rule": (
        "self.listeners.all(a, !has(a.saslUsersSecret) || self.listeners.all(b,"
        " !has(b.saslUsersSecret) || b.saslUsersSecret == a.saslUsersSecret))"
    ),
    "message": "all listeners with PLAIN must name the same saslUsersSecret",
}


def _spec_with(rule: dict[str, Any], default: Any = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "type": "object",
        "properties": {
            "listeners": {
                "type": "array",
                "default": [{"port": 5672}],
                "items": {
                    "type": "object",
                    "properties": {
                        "port": {"type": "integer"},
                        "saslUsersSecret": {"type": "string"},
                    },
                    "required": ["port"],
                },
            }
        },
        "x-kubernetes-validations": [rule],
    }
    if default is not None:
        spec["default"] = default
    return {"type": "object", "properties": {"spec": spec}}


@needs_cel
def test_the_old_listeners_rule_is_caught() -> None:
    problems = default_problems(_spec_with(_OLD_LISTENERS_RULE, default={}))
    assert problems == [
        ".spec.default: no such member in mapping: 'listeners' evaluating rule: all listeners"
        f" with PLAIN must name the same saslUsersSecret ({_OLD_LISTENERS_RULE['rule']})"
    ]
    # Even without a default that lacks listeners, the least value of spec gives it away.
    least = least_value_problems(_spec_with(_OLD_LISTENERS_RULE))
    assert len(least) == 1 and "'listeners'" in least[0]

    guarded = {
        **_OLD_LISTENERS_RULE,
        "rule": "!has(self.listeners) || " + _OLD_LISTENERS_RULE["rule"],
    }
    assert default_problems(_spec_with(guarded, default={})) == []
    assert least_value_problems(_spec_with(guarded)) == []


@needs_cel
def test_defaults_are_checked_as_they_stand() -> None:
    # The default validates against its node, nested defaults not filled in...
    schema = _spec_with({"rule": "true", "message": "m"}, default={"listeners": [{}]})
    assert any("'port' is a required property" in p for p in default_problems(schema))
    # ...and a rule that is false on it refuses the CRD too, transition rules included
    # (the API server passes the default as oldSelf as well).
    false_rule = {"rule": "has(self.listeners) && self == oldSelf", "message": "needs listeners"}
    assert default_problems(_spec_with(false_rule, default={})) == [
        ".spec.default: Invalid value: needs listeners"
    ]


@needs_cel
@pytest.mark.parametrize(
    ("rule", "value", "expected"),
    [
        ("has(self.a)", {}, False),
        ("has(self.a)", {"a": 1}, True),
        ("self.a == 1", {}, "no such member"),
        # has() tests the last field only: the one before it must be there (no such key).
        ("has(self.a.b)", {}, "no such member"),
        ("has(self.a.b)", {"a": {}}, False),
        ("!has(self.a) || has(self.a.b)", {}, True),
        # CEL's || and && absorb an error when the other side decides, as in Kubernetes.
        ("self.a == 1 || true", {}, True),
        ("true || self.a == 1", {}, True),
        ("self.a == 1 && false", {}, False),
        ("self.a == 1 || false", {}, "no such member"),
        ("self.l.all(x, x > 0)", {}, "no such member"),
        ("self.l.all(x, x > 0)", {"l": []}, True),
        ("'P' in self.l", {"l": ["P"]}, True),
    ],
)
def test_rules_evaluate_as_in_kubernetes(rule: str, value: Any, expected: bool | str) -> None:
    entry = {"rule": rule, "message": "m"}
    if isinstance(expected, bool):
        assert evaluate_rule(entry, value) is expected
    else:
        with pytest.raises(RuleError, match=expected):
            evaluate_rule(entry, value)


def test_structural_checker_catches_what_the_api_server_refuses() -> None:
    bad: dict[str, Any] = {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "properties": {
            "apiVersion": {"type": "integer"},
            "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}},
            "kind": {"type": "string", "default": "Router"},
            "a": {"type": "object", "patternProperties": {}, "definitions": {}},
            "b": {"type": "array", "items": [{"type": "string"}]},
            "c": {
                "type": "array",
                "items": {"type": "object"},
                "x-kubernetes-list-type": "set",
            },
            "d": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"k": {"type": "object"}},
                    "required": ["k"],
                    "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "m"}],
                },
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["k"],
            },
            "e": {"type": "string", "x-kubernetes-preserve-unknown-fields": False},
            "f": {
                "type": "object",
                "properties": {"x": {"type": "string"}},
                "default": {"x": "1", "y": 2},
            },
            "g": {"type": "integer", "default": "3"},
            "h": {
                "type": "object",
                "properties": {"x": {"type": "string"}},
                "x-kubernetes-validations": [
                    {"rule": "true", "message": "two\nlines"},
                    {"rule": "true", "reason": "Whatever"},
                    {"rule": "true", "fieldPath": ".y"},
                    {"rule": " "},
                ],
            },
            "i": {
                "type": "array",
                "items": {
                    "type": "integer",
                    "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "m"}],
                },
            },
        },
    }
    problems = "\n".join(structural_problems(bad))
    for expected in (
        ".: additionalProperties must not be used at the root",
        ".: properties and additionalProperties are mutually exclusive",
        ".: apiVersion must be of type string",
        ".metadata: must not specify anything other than name and generateName",
        ".kind: default must not be set in the root's apiVersion, kind or metadata",
        ".a: patternProperties is not allowed",
        ".a: definitions is not allowed",
        ".b: an array needs one items schema",
        ".c: objects in a set list must be x-kubernetes-map-type atomic",
        ".d: list-map key 'k' must be a scalar",
        ".e: x-kubernetes-preserve-unknown-fields must be true or undefined",
        ".f: default must not have unknown fields",
        ".g: default does not validate",
        ".h rule 0: message must be non-empty and on one line",
        ".h rule 1: reason 'Whatever' is not one of",
        ".h rule 2: fieldPath '.y' is not a field of this schema",
        ".h rule 3: rule is not specified",
        ".i[*] rule 0: oldSelf cannot be used on the uncorrelatable portion of the schema",
    ):
        assert expected in problems, expected
    # A map list's items are correlated by key: oldSelf is fine there.
    assert ".d[*] rule 0" not in problems


def test_metadata_may_constrain_name_and_generate_name_only() -> None:
    def root(metadata: dict[str, Any]) -> dict[str, Any]:
        return {"type": "object", "properties": {"metadata": metadata}}

    name = {"type": "string", "maxLength": 45, "pattern": "^[a-z]+$"}
    assert structural_problems(root({"type": "object"})) == []
    assert structural_problems(root({"type": "object", "properties": {"name": name}})) == []
    both = {"name": name, "generateName": {"type": "string", "maxLength": 40}}
    assert structural_problems(root({"type": "object", "properties": both})) == []
    for metadata in (
        {"type": "object", "description": "not even this"},
        {"type": "object", "properties": {"name": name}, "required": ["name"]},
        {"type": "object", "x-kubernetes-validations": [{"rule": "true", "message": "m"}]},
        {"type": "object", "properties": {"namespace": {"type": "string"}}},
    ):
        assert structural_problems(root(metadata)), metadata
