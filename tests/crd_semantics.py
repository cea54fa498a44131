"""What the API server does with a CRD's schema beyond plain JSON Schema, emulated for tests.

No API server runs here, so the tests play its part: apply the schema's defaults, validate
with a JSON-schema validator (OpenAPI 3.0's keywords are Draft 4's), enforce list keys, and
evaluate the ``x-kubernetes-validations`` CEL rules with cel-python. That is enough to check that
the pydantic models accept exactly what the generated CRDs accept.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jsonschema

try:  # cel-python is a dev dependency; without it only the CEL-specific tests are skipped.
    import celpy
except ImportError:  # pragma: no cover
    celpy = None


@dataclass(frozen=True)
class Failure:
    """One reason the API server would refuse an object."""

    path: str
    message: str


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Fills in ``default``s as the API server does: absent fields get their default (itself
    defaulted in turn), recursively through objects, lists and maps."""
    value = copy.deepcopy(value)
    if isinstance(value, dict) and schema.get("type") == "object":
        for name, sub in schema.get("properties", {}).items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                value[name] = apply_defaults(sub, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in value:
                value[key] = apply_defaults(extra, value[key])
    elif isinstance(value, list) and "items" in schema:
        value = [apply_defaults(schema["items"], item) for item in value]
    return value


def schema_failures(schema: dict[str, Any], value: Any) -> list[Failure]:
    """OpenAPI v3 validation (types, enums, bounds, patterns, required) and list keys."""
    validator = jsonschema.Draft4Validator(schema)
    failures = [
        Failure(_json_path(error.absolute_path), error.message)
        for error in validator.iter_errors(value)
    ]
    return failures + list(_list_key_failures(schema, value, ""))


def _list_key_failures(schema: dict[str, Any], value: Any, path: str) -> Iterator[Failure]:
    if isinstance(value, dict):
        for name, sub in schema.get("properties", {}).items():
            if name in value:
                yield from _list_key_failures(sub, value[name], f"{path}.{name}")
    elif isinstance(value, list):
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "set":
            keys = [repr(item) for item in value]
        elif list_type == "map":
            names = schema["x-kubernetes-list-map-keys"]
            keys = [repr([item.get(k) for k in names]) for item in value]
        else:
            keys = []
        duplicates = sorted({key for key in keys if keys.count(key) > 1})
        for key in duplicates:
            yield Failure(path, f"Duplicate value: {key}")
        for index, item in enumerate(value):
            yield from _list_key_failures(schema.get("items", {}), item, f"{path}[{index}]")


def cel_rules(schema: dict[str, Any]) -> Iterator[str]:
    """Every CEL rule in a schema, wherever it sits."""
    for rule in schema.get("x-kubernetes-validations", []):
        yield rule["rule"]
    for sub in schema.get("properties", {}).values():
        yield from cel_rules(sub)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield from cel_rules(schema[key])


def compile_rule(rule: str) -> Any:
    """Parses a rule with cel-python (raises on a syntax error)."""
    assert celpy is not None
    env = celpy.Environment()
    return env.program(env.compile(rule))


def cel_failures(
    schema: dict[str, Any], value: Any, old: Any = None, path: str = ""
) -> list[Failure]:
    """Evaluates the rules on an already defaulted object; transition rules (``oldSelf``) run
    only where an old value exists, as on an update."""
    assert celpy is not None
    failures = []
    for rule in schema.get("x-kubernetes-validations", []):
        transition = "oldSelf" in rule["rule"]
        if transition and old is None:
            continue
        activation = {"self": celpy.json_to_cel(value)}
        if transition:
            activation["oldSelf"] = celpy.json_to_cel(old)
        result = compile_rule(rule["rule"]).evaluate(activation)
        if not isinstance(result, celpy.celtypes.BoolType):
            raise AssertionError(f"rule {rule['rule']!r} at {path or '.'} gave {result!r}")
        if not result:
            failures.append(Failure(path + rule.get("fieldPath", ""), rule["message"]))
    if isinstance(value, dict):
        for name, sub in schema.get("properties", {}).items():
            if name in value:
                old_sub = old.get(name) if isinstance(old, dict) else None
                failures += cel_failures(sub, value[name], old_sub, f"{path}.{name}")
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key, item in value.items():
                failures += cel_failures(extra, item, None, f"{path}.{key}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            failures += cel_failures(schema["items"], item, None, f"{path}[{index}]")
    return failures


def api_server_failures(
    schema: dict[str, Any], value: dict[str, Any], old: dict[str, Any] | None = None
) -> list[Failure]:
    """Why the API server would refuse to store ``value`` (empty: it would store it)."""
    value = apply_defaults(schema, value)
    failures = schema_failures(schema, value)
    if failures:
        return failures  # the API server runs CEL only on schema-valid objects
    if old is not None:
        old = apply_defaults(schema, old)
    return cel_failures(schema, value, old) if celpy is not None else []


def _json_path(parts: Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


# --- structural schemas ----------------------------------------------------------------------

_TYPES = {"object", "array", "string", "integer", "number", "boolean"}


def structural_problems(node: Any, path: str = "") -> list[str]:
    """Violations of Kubernetes' structural schema rules (and of this project's stricter habits:
    no ``$ref`` or ``title`` left behind), as a list of readable problems."""
    problems: list[str] = []
    if not isinstance(node, dict):
        return [f"{path or '.'}: not a schema object"]
    at = path or "."
    for key in ("$ref", "$defs", "definitions", "allOf", "oneOf", "not", "title", "const"):
        if key in node:
            problems.append(f"{at}: {key} is not allowed")
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
    idiom = [{"type": "integer"}, {"type": "string"}]
    if "anyOf" in node and (not int_or_string or node["anyOf"] != idiom):
        problems.append(f"{at}: anyOf is only allowed as the int-or-string idiom")
    if "type" in node:
        if node["type"] not in _TYPES:
            problems.append(f"{at}: type {node['type']!r} is not a single OpenAPI type")
    elif not (int_or_string or preserve):
        problems.append(f"{at}: has no type")
    for key in ("exclusiveMinimum", "exclusiveMaximum"):
        if key in node and not isinstance(node[key], bool):
            problems.append(f"{at}: {key} must be a boolean in OpenAPI v3.0")
    if "additionalProperties" in node:
        if not isinstance(node["additionalProperties"], dict):
            problems.append(f"{at}: additionalProperties must be a schema")
        if "properties" in node:
            problems.append(f"{at}: properties and additionalProperties are mutually exclusive")
    if node.get("type") == "object":
        required = set(node.get("required", []))
        unknown = required - set(node.get("properties", {}))
        if unknown:
            problems.append(f"{at}: required names unknown properties {sorted(unknown)}")
    if node.get("type") == "array":
        if not isinstance(node.get("items"), dict):
            problems.append(f"{at}: an array needs one items schema")
        if node.get("uniqueItems"):
            problems.append(f"{at}: uniqueItems is forbidden (use x-kubernetes-list-type: set)")
        if node.get("x-kubernetes-list-type") == "map":
            items = node.get("items", {})
            for key in node.get("x-kubernetes-list-map-keys", []):
                sub = items.get("properties", {}).get(key, {})
                if key not in items.get("required", []) and "default" not in sub:
                    problems.append(f"{at}: list-map key {key!r} is neither required nor defaulted")
    if "default" in node:
        try:
            jsonschema.Draft4Validator(node).validate(node["default"])
        except jsonschema.ValidationError as err:
            problems.append(f"{at}: default does not validate: {err.message}")
    for name, sub in node.get("properties", {}).items():
        problems += structural_problems(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        problems += structural_problems(node["items"], f"{path}[*]")
    if isinstance(node.get("additionalProperties"), dict):
        problems += structural_problems(node["additionalProperties"], f"{path}.*")
    return problems
