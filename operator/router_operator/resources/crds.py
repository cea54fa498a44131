"""CustomResourceDefinitions generated from the models, so the API server and the operator can
never disagree about what a Router, an Address, a LinkRoute or a Gateway is.

``python -m router_operator.resources.crds`` (``make crds``) writes
``crds/<plural>.routernet.io.yaml``; ``--check`` only compares and exits 1 when a file is stale,
which a test does too.

pydantic emits JSON Schema (2020-12); the API server wants a *structural* OpenAPI v3.0 schema:
every node typed, no ``$ref``, no ``anyOf`` except the int-or-string idiom, boolean
``exclusiveMinimum``, no ``additionalProperties: false`` beside ``properties`` (pruning does that
job). :func:`structural` converts one into the other and refuses anything it does not know
rather than emitting a CRD the API server would reject at install time.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema, to_jsonable_python

from router_operator.resources.models import (
    CATEGORY,
    GROUP,
    KINDS,
    READY,
    VERSION,
    CustomResource,
    Router,
)

HEADER = (
    "# Generated from operator/router_operator/resources/models.py by `make crds`"
    " (python -m router_operator.resources.crds). Do not edit.\n"
)
DEFAULT_OUT = Path(__file__).resolve().parents[3] / "crds"

# Keys a structural schema node may carry, in the order they are written out (a readable,
# stable order: the committed files are compared byte for byte).
_KEY_ORDER = (
    "description",
    "type",
    "format",
    "enum",
    "default",
    "nullable",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "anyOf",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
)
_DROPPED = frozenset({"title", "examples", "$schema"})


class SchemaError(ValueError):
    """The models use a construct this generator cannot express structurally."""


class _WithFactoryDefaults(GenerateJsonSchema):
    """Also emits defaults that come from a ``default_factory`` (lists, nested models), which
    pydantic leaves out, so the API server fills in exactly what the models would."""

    def get_default_value(self, schema: core_schema.WithDefaultSchema) -> Any:
        factory = schema.get("default_factory")
        if factory is not None and not schema.get("default_factory_takes_data"):
            return factory()  # type: ignore[call-arg]
        return super().get_default_value(schema)

    def encode_default(self, dft: Any) -> Any:
        # None-valued optional fields are simply absent in a Kubernetes object.
        return _drop_none(to_jsonable_python(dft, exclude_none=True))


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def model_schema(model: type[BaseModel]) -> JsonSchemaValue:
    """pydantic's JSON schema of a model, input side, with factory defaults."""
    return model.model_json_schema(mode="validation", schema_generator=_WithFactoryDefaults)


def structural(schema: JsonSchemaValue) -> dict[str, Any]:
    """Converts pydantic's JSON schema into a structural OpenAPI v3 schema for a CRD."""
    defs = schema.get("$defs", {})
    root = {k: v for k, v in schema.items() if k != "$defs"}
    return _convert(root, defs, ())


def _convert(node: dict[str, Any], defs: dict[str, Any], seen: tuple[str, ...]) -> dict[str, Any]:
    node = dict(node)
    if "$ref" in node:
        name = node.pop("$ref").removeprefix("#/$defs/")
        if name in seen:
            raise SchemaError(f"recursive model {name} cannot be inlined into a CRD schema")
        target = _convert(defs[name], defs, (*seen, name))
        return _convert(_merge(target, node), defs, seen)
    if "allOf" in node:
        parts = node.pop("allOf")
        if len(parts) != 1:
            raise SchemaError(f"allOf with {len(parts)} members is not supported")
        return _convert(_merge(_convert(parts[0], defs, seen), node), defs, seen)
    if "anyOf" in node:
        node = _collapse_any_of(node, defs, seen)
        if "anyOf" not in node:
            return _convert(node, defs, seen)

    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key == "description":
            out[key] = _first_paragraph(value)
        elif key == "const":
            out["enum"] = [value]
        elif key == "default":
            if value is not None:
                out[key] = value
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            _exclusive_bound(out, key, value, node.get("type"))
        elif key == "properties":
            out[key] = {name: _convert(sub, defs, seen) for name, sub in value.items()}
        elif key == "items":
            out[key] = _convert(value, defs, seen)
        elif key == "additionalProperties":
            if value is False:
                continue  # unknown fields are pruned by the API server anyway
            if value is True:
                out["x-kubernetes-preserve-unknown-fields"] = True
            else:
                out[key] = _convert(value, defs, seen)
        elif key == "x-kubernetes-validations":
            order = ("rule", "message", "messageExpression", "reason", "fieldPath")
            out[key] = [{k: rule[k] for k in order if k in rule} for rule in value]
        elif key == "anyOf" or key in _KEY_ORDER:
            out[key] = value
        else:
            raise SchemaError(f"JSON schema keyword {key!r} has no structural equivalent")
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
    elif "type" not in out:
        raise SchemaError(f"untyped schema node {node!r}")
    return _ordered(out)


def _collapse_any_of(
    node: dict[str, Any], defs: dict[str, Any], seen: tuple[str, ...]
) -> dict[str, Any]:
    """``X | None`` becomes X (absent is how Kubernetes says none); ``int | str`` becomes the
    int-or-string idiom, the one ``anyOf`` a structural schema allows."""
    members = [m for m in node["anyOf"] if m != {"type": "null"}]
    rest = {k: v for k, v in node.items() if k != "anyOf"}
    if len(members) == 1:
        if len(members) != len(node["anyOf"]) and rest.get("default") is None:
            rest.pop("default", None)
        return _merge(_convert(members[0], defs, seen), rest)
    if sorted(m.get("type", "") for m in members) == ["integer", "string"]:
        return {
            **rest,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": True,
        }
    raise SchemaError(f"anyOf {node['anyOf']!r} is not structural")


def _merge(target: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """A field's own keys (description, default, rules) win over its type's; CEL rules of
    both apply."""
    merged = {**target, **{k: v for k, v in overrides.items() if k != "x-kubernetes-validations"}}
    rules = target.get("x-kubernetes-validations", []) + overrides.get(
        "x-kubernetes-validations", []
    )
    if rules:
        merged["x-kubernetes-validations"] = rules
    return merged


def _exclusive_bound(out: dict[str, Any], key: str, bound: float, type_: str | None) -> None:
    """JSON Schema's numeric exclusive bounds are OpenAPI 3.0's booleans beside minimum and
    maximum; for integers, the next integer is the plainer statement."""
    lower = key == "exclusiveMinimum"
    plain = "minimum" if lower else "maximum"
    if type_ == "integer" and float(bound).is_integer():
        out[plain] = int(bound) + (1 if lower else -1)
    else:
        out[plain] = bound
        out[key] = True


def _first_paragraph(text: str) -> str:
    """Docstrings say why for developers after their first paragraph; users see the first."""
    return " ".join(text.strip().split("\n\n")[0].split())


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    rank = {key: index for index, key in enumerate(_KEY_ORDER)}
    return dict(sorted(node.items(), key=lambda item: rank.get(item[0], len(rank))))


def _strip_defaults(node: Any) -> Any:
    """Status is written by the operator, never defaulted by the API server."""
    if isinstance(node, dict):
        return {k: _strip_defaults(v) for k, v in node.items() if k != "default"}
    if isinstance(node, list):
        return [_strip_defaults(v) for v in node]
    return node


def _ready_column() -> list[dict[str, Any]]:
    return [
        {
            "name": "Ready",
            "type": "string",
            "jsonPath": f'.status.conditions[?(@.type=="{READY}")].status',
        }
    ]


def _tail_columns() -> list[dict[str, Any]]:
    return [
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {
            "name": "Message",
            "type": "string",
            "priority": 1,
            "jsonPath": f'.status.conditions[?(@.type=="{READY}")].message',
        },
    ]


def _column(name: str, type_: str, path: str, priority: int = 0) -> dict[str, Any]:
    column: dict[str, Any] = {"name": name, "type": type_, "jsonPath": path}
    if priority:
        column["priority"] = priority
    return column


PRINTER_COLUMNS: dict[str, list[dict[str, Any]]] = {
    "Router": [
        _column("Role", "string", ".spec.role"),
        _column("Network", "string", ".spec.network"),
        _column("Replicas", "integer", ".spec.replicas"),
        _column("Ready Replicas", "integer", ".status.readyReplicas"),
        _column("Mesh", "boolean", ".status.meshConnected"),
        _column("Image", "string", ".spec.image", priority=1),
    ],
    "Address": [
        _column("Network", "string", ".spec.network"),
        _column("Prefix", "string", ".spec.prefix"),
        _column("Pattern", "string", ".spec.pattern"),
        _column("Distribution", "string", ".spec.distribution"),
        _column("Undeliverable", "string", ".spec.undeliverable.action", priority=1),
    ],
    "LinkRoute": [
        _column("Network", "string", ".spec.network"),
        _column("Prefix", "string", ".spec.prefix"),
        _column("Pattern", "string", ".spec.pattern"),
        _column("Direction", "string", ".spec.direction"),
        _column("Container", "string", ".spec.containerId"),
        _column("Host", "string", ".spec.connection.host"),
    ],
    "Gateway": [
        _column("Network", "string", ".spec.network"),
        _column("Default", "string", ".spec.defaultContainer"),
        _column("Listener", "string", ".spec.listener.router", priority=1),
    ],
}


def _field_model(kind: type[CustomResource], field: str) -> type[BaseModel]:
    annotation = kind.model_fields[field].annotation
    assert isinstance(annotation, type) and issubclass(annotation, BaseModel), annotation
    return annotation


def _metadata_schema(kind: type[CustomResource]) -> dict[str, Any]:
    """``metadata`` as a CRD may state it: an object, whose name alone (with generateName) a
    structural schema may constrain; the API server checks the name against it and reports a
    bad one at ``metadata.name``. The kind's metadata model says whether it does."""
    name = structural(model_schema(_field_model(kind, "metadata")))["properties"]["name"]
    if name == {"type": "string"}:
        return {"type": "object"}
    return {"type": "object", "properties": {"name": name}}


def open_api_schema(kind: type[CustomResource]) -> dict[str, Any]:
    """The CRD's ``openAPIV3Schema`` for one kind. No CEL rule sits on the root: the API server
    would report it at ``<nil>`` (see :meth:`router_operator.resources.spec.Rule.cel`)."""
    spec = structural(model_schema(_field_model(kind, "spec")))
    status = _strip_defaults(structural(model_schema(_field_model(kind, "status"))))
    if not kind.spec_required:
        # Without it, a Router with no spec at all would get none of spec's defaults.
        spec = _ordered({**spec, "default": {}})
    root: dict[str, Any] = {
        "description": _first_paragraph(kind.__doc__ or kind.kind_name),
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": _metadata_schema(kind),
            "spec": spec,
            "status": status,
        },
    }
    if kind.spec_required:
        root["required"] = ["spec"]
    return _ordered(root)


def crd(kind: type[CustomResource]) -> dict[str, Any]:
    """The whole apiextensions.k8s.io/v1 CustomResourceDefinition of one kind."""
    subresources: dict[str, Any] = {"status": {}}
    if kind is Router:
        # An HPA targets the Router itself, not the StatefulSet the operator owns (and would
        # otherwise fight over).
        subresources["scale"] = {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{kind.plural}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "routernet"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind.kind_name,
                "listKind": f"{kind.kind_name}List",
                "plural": kind.plural,
                "singular": kind.singular,
                "shortNames": list(kind.short_names),
                "categories": [CATEGORY],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": open_api_schema(kind)},
                    "subresources": subresources,
                    "additionalPrinterColumns": _ready_column()
                    + PRINTER_COLUMNS[kind.kind_name]
                    + _tail_columns(),
                }
            ],
        },
    }


def crds() -> dict[str, dict[str, Any]]:
    """Every CRD, keyed by its file name."""
    return {f"{kind.plural}.{GROUP}.yaml": crd(kind) for kind in KINDS}


class _PlainDumper(yaml.SafeDumper):
    """Writes a value met twice (the same enum in scaleUp and scaleDown) out twice: anchors and
    aliases are valid YAML, but a CRD is read by people and by tools that do not resolve them."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render(document: dict[str, Any]) -> str:
    """The YAML text committed under crds/ (stable: the check compares it byte for byte)."""
    body = yaml.dump(document, Dumper=_PlainDumper, sort_keys=False, width=100, allow_unicode=True)
    return HEADER + body


def check(out: Path) -> list[str]:
    """Problems with the files in ``out``: missing, stale, or left over from a removed kind."""
    expected = crds()
    problems = []
    for name, document in expected.items():
        path = out / name
        if not path.is_file():
            problems.append(f"{path} is missing")
        elif path.read_text(encoding="utf-8") != render(document):
            problems.append(f"{path} is stale")
    for path in sorted(out.glob(f"*.{GROUP}.yaml")):
        if path.name not in expected:
            problems.append(f"{path} is not generated from any model (remove it)")
    return problems


def write(out: Path) -> list[Path]:
    """Writes every CRD (only files whose text changes) and removes leftovers of removed kinds."""
    out.mkdir(parents=True, exist_ok=True)
    expected = crds()
    changed = []
    for name, document in expected.items():
        path = out / name
        text = render(document)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed.append(path)
    for path in sorted(out.glob(f"*.{GROUP}.yaml")):
        if path.name not in expected:
            path.unlink()
            changed.append(path)
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m router_operator.resources.crds",
        description="Generate the Routernet CRDs from the pydantic models.",
    )
    parser.add_argument(
        "--check", action="store_true", help="only check the files are current; exit 1 if not"
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"directory (default {DEFAULT_OUT})"
    )
    args = parser.parse_args(argv)
    if args.check:
        problems = check(args.out)
        for problem in problems:
            print(f"crds: {problem}", file=sys.stderr)
        if problems:
            print("crds: the CRDs do not match the models; run `make crds`", file=sys.stderr)
            return 1
        print(f"crds: {len(KINDS)} CRDs in {args.out} are current")
        return 0
    changed = write(args.out)
    for path in changed:
        print(f"crds: wrote {path}" if path.exists() else f"crds: removed {path}")
    if not changed:
        print(f"crds: {len(KINDS)} CRDs in {args.out} were already current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
