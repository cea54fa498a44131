"""What the API server does with a CRD's schema beyond plain JSON Schema, emulated for tests.

No API server runs here, so the tests play its part: apply the schema's defaults, validate
with a JSON-schema validator (OpenAPI 3.0's keywords are Draft 4's), enforce list keys, and
evaluate the ``x-kubernetes-validations`` CEL rules with cel-python (its ``has()`` made to
answer as Kubernetes' does). That is enough to check that the pydantic models accept exactly
what the generated CRDs accept. For the CRD itself, as the API server checks it on creation:
:func:`structural_problems` (structural schema and v1 schema rules) and :func:`default_problems`
(every default against its node, CEL rules included); :func:`least_value_problems` evaluates
every rule on the least value of its node, which must give a boolean, not an error.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jsonschema

try:  # cel-python is a dev dependency; without it only the CEL-specific tests are skipped.
    import celpy
    import lark
    from celpy.evaluation import CELEvalError, Evaluator
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


class RuleError(AssertionError):
    """A rule that did not evaluate to a boolean, e.g. it read a field that is not there. The API
    server refuses the object ("no such key: listeners evaluating rule: <message>"), or the CRD
    when that happens on a default; our rules never do it, so a test fails."""


if celpy is not None:

    class _KubernetesEvaluator(Evaluator):
        """cel-python with Kubernetes' ``has()``: ``has(e.f)`` evaluates ``e``, and an error
        there (``e`` itself missing) is an error, not false; only ``f`` may be absent. Plain
        cel-python answers false for any member expression that fails, which would hide a
        missing ``has()`` on the outer field."""

        def macro_has_eval(self, exprlist: lark.Tree) -> Any:
            node: Any = exprlist.children[0]
            while isinstance(node, lark.Tree) and node.data != "member_dot":
                if len(node.children) != 1:
                    return CELEvalError("has() needs a field selection", TypeError, None)
                node = node.children[0]
            if not isinstance(node, lark.Tree):
                return CELEvalError("has() needs a field selection", TypeError, None)
            operand_tree, name = node.children
            operand = self.visit(operand_tree)
            if isinstance(operand, CELEvalError):
                return operand
            if not isinstance(operand, celpy.celtypes.MapType):
                return CELEvalError(f"has() on a {type(operand).__name__}", TypeError, None)
            return celpy.celtypes.BoolType(celpy.celtypes.StringType(name.value) in operand)

    class _KubernetesRunner(celpy.InterpretedRunner):
        def evaluate(self, context: Any) -> Any:
            return _KubernetesEvaluator(ast=self.ast, activation=self.new_activation()).evaluate(
                context
            )


@functools.cache
def compile_rule(rule: str) -> Any:
    """Parses a rule with cel-python (raises on a syntax error); evaluates as Kubernetes does."""
    assert celpy is not None
    env = celpy.Environment(runner_class=_KubernetesRunner)
    return env.program(env.compile(rule))


def evaluate_rule(rule: dict[str, Any], value: Any, old: Any = None, path: str = "") -> bool:
    """Whether one ``x-kubernetes-validations`` entry holds for ``value`` (``self``), with
    ``old`` as ``oldSelf``; :class:`RuleError` when it does not evaluate to a boolean."""
    assert celpy is not None
    activation = {"self": celpy.json_to_cel(value)}
    if old is not None:
        activation["oldSelf"] = celpy.json_to_cel(old)
    try:
        result = compile_rule(rule["rule"]).evaluate(activation)
    except CELEvalError as err:
        result = err
    if isinstance(result, CELEvalError):
        detail = result.args[0] if result.args else repr(result)
        raise RuleError(
            f"{path or '.'}: {detail} evaluating rule: {rule.get('message', rule['rule'])}"
            f" ({rule['rule']})"
        )
    if not isinstance(result, celpy.celtypes.BoolType):
        raise RuleError(f"{path or '.'}: rule {rule['rule']!r} gave {result!r}, not a boolean")
    return bool(result)


def is_transition(rule: dict[str, Any]) -> bool:
    """A transition rule reads ``oldSelf``; the API server runs it on updates only."""
    return re.search(r"\boldSelf\b", rule["rule"]) is not None


def cel_failures(
    schema: dict[str, Any], value: Any, old: Any = None, path: str = ""
) -> list[Failure]:
    """Evaluates the rules at this node and at every node below it that ``value`` reaches, on
    ``value`` as given (:func:`api_server_failures` fills in the defaults first, as the API
    server does with objects); transition rules (``oldSelf``) run only where an old value
    exists, as on an update. Raises :class:`RuleError` when a rule does not evaluate."""
    assert celpy is not None
    failures = []
    for rule in schema.get("x-kubernetes-validations", []):
        transition = is_transition(rule)
        if transition and old is None:
            continue
        if not evaluate_rule(rule, value, old if transition else None, path):
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


# --- what the API server's CEL cost estimate needs --------------------------------------------

# A reference in a rule: self, oldSelf or a macro's variable, then fields and indexes (a name
# followed by "(" is a method or macro, not a field).
_CHAIN = r"\b(self|oldSelf|[a-z]\w*)((?:\.\w+(?!\w*\()|\[\w+\])*)"
_REFERENCE = re.compile(_CHAIN)
_MACRO = re.compile(_CHAIN + r"\.(?:all|exists|exists_one|map|filter)\(\s*(\w+)\s*,")
_HAS = re.compile(r"\bhas\(\s*([^()]*?)\s*\)")
_STEP = re.compile(r"\.(\w+)|\[(\w+)\]")

Trail = list[tuple[str, dict[str, Any]]]
"""The schema nodes a reference passes through, with their paths, the last where it ends."""


def _unbounded(node: dict[str, Any]) -> str | None:
    """The bound a node lacks for the estimate, if it has a size."""
    kind = node.get("type")
    if kind == "array" and "maxItems" not in node:
        return "maxItems"
    is_map = kind == "object" and isinstance(node.get("additionalProperties"), dict)
    if is_map and "maxProperties" not in node:
        return "maxProperties"
    if kind == "string" and "maxLength" not in node and "enum" not in node:
        return "maxLength"
    return None


def _inner(node: dict[str, Any], field: str | None) -> dict[str, Any] | None:
    """A field of an object, else an item of an array or a value of a map."""
    if field is not None and field in node.get("properties", {}):
        return node["properties"][field]
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            return node[key]
    return None


def _follow(trail: Trail, steps: str) -> Trail:
    """``trail`` extended by the steps of a reference, as far as the schema goes."""
    trail = list(trail)
    for field, index in _STEP.findall(steps):
        at, node = trail[-1]
        inner = _inner(node, field or None)
        if inner is None:
            break
        trail.append((f"{at}.{field}" if field else f"{at}[{index}]", inner))
    return trail


def unbounded_reads(schema: dict[str, Any]) -> list[str]:
    """Where the API server's cost estimate of a CEL rule has no bound to go by: a list, map or
    string that a rule reads, or that holds a node with rules (each element multiplies them),
    without maxItems, maxProperties or maxLength. The estimate then assumes the largest
    request the server takes, and a CRD that passes every other check is refused ("estimated
    rule cost exceeds budget"). A value compared or used whole counts with everything in it,
    one a macro iterates for its size, one only tested with has() for the path to it."""
    found: set[str] = set()

    def need(trail: Trail, whole: bool = False) -> None:
        nodes = schema_nodes(trail[-1][1], trail[-1][0]) if whole else iter(())
        for at, node in [*trail, *nodes]:
            missing = _unbounded(node)
            if missing:
                found.add(f"{at}: no {missing}")

    def check(rule: str, trail: Trail) -> None:
        scopes = {"self": trail, "oldSelf": trail}
        for name, steps, var in _MACRO.findall(rule):
            if name in scopes:
                iterated = _follow(scopes[name], steps)
                need(iterated)
                item = _inner(iterated[-1][1], None)
                if item is not None:
                    scopes[var] = [*iterated, (f"{iterated[-1][0]}[*]", item)]
        for chain in _HAS.findall(rule):
            reference = _REFERENCE.match(chain)
            if reference and reference.group(1) in scopes:
                need(_follow(scopes[reference.group(1)], reference.group(2))[:-1])
        rest = _MACRO.sub("true.all(_,", _HAS.sub("true", rule))
        for name, steps in _REFERENCE.findall(rest):
            if name in scopes:
                need(_follow(scopes[name], steps), whole=True)

    def visit(node: dict[str, Any], path: str, ancestors: Trail) -> None:
        for entry in node.get("x-kubernetes-validations", []):
            need(ancestors)
            check(entry["rule"], [(path, node)])
        here = [*ancestors, (path, node)]
        for name, sub in node.get("properties", {}).items():
            visit(sub, f"{path}.{name}", here)
        for key, mark in (("items", "[*]"), ("additionalProperties", ".*")):
            if isinstance(node.get(key), dict):
                visit(node[key], f"{path}{mark}", here)

    visit(schema, "", [])
    return sorted(found)


# --- the schema's nodes, defaults and least values -------------------------------------------


def schema_nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every node of a schema with its path: ``.spec.listeners[*]`` for items, ``.x.*`` for the
    values of a map (additionalProperties)."""
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from schema_nodes(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from schema_nodes(schema["items"], f"{path}[*]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from schema_nodes(schema["additionalProperties"], f"{path}.*")


def prune(schema: dict[str, Any], value: Any) -> Any:
    """What the API server keeps of a value: fields the schema does not declare are dropped,
    unless ``x-kubernetes-preserve-unknown-fields`` keeps them."""
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
        out = {}
        for key, item in value.items():
            if key in properties:
                out[key] = prune(properties[key], item)
            elif isinstance(extra, dict):
                out[key] = prune(extra, item)
            elif preserve:
                out[key] = copy.deepcopy(item)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune(schema["items"], item) for item in value]
    return copy.deepcopy(value)


def default_problems(schema: dict[str, Any]) -> list[str]:
    """Why the API server would refuse to create a CRD with this schema because of a
    ``default``. It checks each default as it stands (the defaults nested in it are not filled
    in): against its node's schema, then with every CEL rule at its node and below that the
    value reaches, ``oldSelf`` being the default too. An error evaluating a rule refuses the
    CRD as a false rule does: "no such key: listeners evaluating rule: ..."."""
    problems = []
    for path, node in schema_nodes(schema):
        if "default" not in node:
            continue
        value, at = node["default"], f"{path}.default"
        errors = [e.message for e in jsonschema.Draft4Validator(node).iter_errors(value)]
        problems += [f"{at}: {message}" for message in errors]
        if errors or celpy is None:
            continue  # the API server runs the rules only on a default that validates
        try:
            failures = cel_failures(node, value, old=value, path=at)
        except RuleError as err:
            problems.append(str(err))
        else:
            problems += [f"{f.path}: Invalid value: {f.message}" for f in failures]
    return problems


def rule_nodes_reached(schema: dict[str, Any], value: Any, path: str = "") -> Iterator[str]:
    """The paths of the nodes with rules that a value reaches (that evaluating it runs)."""
    if schema.get("x-kubernetes-validations"):
        yield path
    if isinstance(value, dict):
        for name, sub in schema.get("properties", {}).items():
            if name in value:
                yield from rule_nodes_reached(sub, value[name], f"{path}.{name}")
        if isinstance(schema.get("additionalProperties"), dict):
            for item in value.values():
                yield from rule_nodes_reached(schema["additionalProperties"], item, f"{path}.*")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            yield from rule_nodes_reached(schema["items"], item, f"{path}[*]")


def skeleton(schema: dict[str, Any], resource_root: bool = False) -> Any:
    """The least value a node admits: an object with its required fields only (each the least
    in turn), no defaults filled in; the shortest list and string, the lowest number. The
    resource root also has what every stored object has: apiVersion, kind, metadata.name."""
    if "enum" in schema:
        return copy.deepcopy(schema["enum"][0])
    if schema.get("x-kubernetes-int-or-string"):
        return 0
    kind = schema.get("type", "object")
    if kind == "object":
        properties = schema.get("properties", {})
        value = {name: skeleton(properties[name]) for name in schema.get("required", [])}
        if resource_root:
            value = {"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "x"}, **value}
        return value
    if kind == "array":
        return [skeleton(schema["items"]) for _ in range(schema.get("minItems", 0))]
    if kind == "string":
        return "a" * schema.get("minLength", 0)
    if kind in ("integer", "number"):
        low = schema.get("minimum", 0)
        if "maximum" in schema:
            low = min(low, schema["maximum"])
        return low + (1 if schema.get("exclusiveMinimum") else 0)
    if kind == "boolean":
        return False
    raise AssertionError(f"no least value for {schema!r}")


def least_value_problems(schema: dict[str, Any]) -> list[str]:
    """Rules that do not evaluate (an error, not false) on the least value of their own node,
    as it is and with its defaults filled in: a rule that reads an optional field without
    ``has()``, which breaks the day a default (or an object) without that field reaches it."""
    problems = []
    for path, node in schema_nodes(schema):
        rules = node.get("x-kubernetes-validations", [])
        if not rules:
            continue
        least = skeleton(node, resource_root=path == "")
        for value in (least, apply_defaults(node, least)):
            for rule in rules:
                old = value if is_transition(rule) else None
                try:
                    evaluate_rule(rule, value, old, path)
                except RuleError as err:
                    problems.append(f"{err} on {value!r}")
    return problems


# --- structural schemas ----------------------------------------------------------------------

_TYPES = {"object", "array", "string", "integer", "number", "boolean"}
_SCALARS = {"string", "integer", "number", "boolean"}
# Refused by apiextensions.k8s.io/v1, or by structural schemas.
_UNSUPPORTED = ("$ref", "$schema", "id", "definitions", "dependencies", "patternProperties")
_UNSUPPORTED += ("additionalItems",)
# Allowed by the API server as pure value validations, but never emitted here (resources/crds.py
# inlines $defs and turns const into enum), so their presence means the generator went wrong.
_NOT_EMITTED = ("$defs", "allOf", "oneOf", "not", "title", "const")
# With the status subresource only these may sit at the root of the schema.
_ROOT_KEYS = {
    "description",
    "type",
    "format",
    "title",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "multipleOf",
    "required",
    "items",
    "properties",
    "externalDocs",
    "example",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
}
_REASONS = {"FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired", "FieldValueDuplicate"}
_RESOURCE_META = ("apiVersion", "kind", "metadata")


@dataclass(frozen=True)
class _Context:
    root: bool = True
    in_meta: bool = False  # below the root's apiVersion, kind or metadata: no defaults
    uncorrelatable: str | None = None  # where oldSelf cannot be matched up (atomic lists...)


def structural_problems(node: Any, path: str = "") -> list[str]:
    """What the API server refuses in a CRD's schema (structural schema rules, the v1 schema
    rules, defaults, CEL rule entries), and this project's stricter habits (no ``title``, no
    ``allOf``...), as a list of readable problems. ``path`` "" is the resource root."""
    return _problems(node, path, _Context(root=path == ""))


def _problems(node: Any, path: str, ctx: _Context) -> list[str]:
    at = path or "."
    if not isinstance(node, dict):
        return [f"{at}: not a schema object"]
    problems: list[str] = []
    for key in (*_UNSUPPORTED, *_NOT_EMITTED):
        if key in node:
            problems.append(f"{at}: {key} is not allowed")
    problems += _type_problems(node, at, ctx)
    problems += _extension_problems(node, at)
    if node.get("type") == "array":
        problems += _list_problems(node, at)
    if "pattern" in node:
        try:
            re.compile(node["pattern"])
        except re.error as err:
            problems.append(f"{at}: pattern does not compile: {err}")
    if "default" in node:
        problems += _default_problems(node, at, ctx)
    for index, rule in enumerate(node.get("x-kubernetes-validations", [])):
        problems += _rule_entry_problems(node, rule, f"{at} rule {index}", ctx)
    if ctx.root:
        problems += _root_problems(node, at)

    child = _Context(root=False, in_meta=ctx.in_meta, uncorrelatable=ctx.uncorrelatable)
    for name, sub in node.get("properties", {}).items():
        sub_ctx = child
        if ctx.root and name in _RESOURCE_META:
            sub_ctx = _Context(root=False, in_meta=True, uncorrelatable=ctx.uncorrelatable)
        if node.get("x-kubernetes-map-type") == "atomic" and sub_ctx.uncorrelatable is None:
            sub_ctx = _Context(root=False, in_meta=sub_ctx.in_meta, uncorrelatable=at)
        problems += _problems(sub, f"{path}.{name}", sub_ctx)
    if isinstance(node.get("items"), dict):
        items_ctx = child
        if node.get("x-kubernetes-list-type") != "map" and child.uncorrelatable is None:
            items_ctx = _Context(root=False, in_meta=child.in_meta, uncorrelatable=at)
        problems += _problems(node["items"], f"{path}[*]", items_ctx)
    if isinstance(node.get("additionalProperties"), dict):
        problems += _problems(node["additionalProperties"], f"{path}.*", child)
    return problems


def _type_problems(node: dict[str, Any], at: str, ctx: _Context) -> list[str]:
    problems = []
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
        if ctx.root:
            problems.append(f"{at}: additionalProperties must not be used at the root")
    if node.get("type") == "object":
        required = set(node.get("required", []))
        unknown = required - set(node.get("properties", {}))
        if unknown:
            problems.append(f"{at}: required names unknown properties {sorted(unknown)}")
    if ctx.root and node.get("nullable"):
        problems.append(f"{at}: nullable cannot be true at the root")
    return problems


def _extension_problems(node: dict[str, Any], at: str) -> list[str]:
    problems = []
    if node.get("x-kubernetes-preserve-unknown-fields", True) is not True:
        problems.append(f"{at}: x-kubernetes-preserve-unknown-fields must be true or undefined")
    if node.get("x-kubernetes-int-or-string"):
        for key in ("x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource"):
            if node.get(key):
                problems.append(f"{at}: {key} must be false with x-kubernetes-int-or-string")
    if node.get("x-kubernetes-embedded-resource") and node.get("type") != "object":
        problems.append(f"{at}: x-kubernetes-embedded-resource needs type object")
    if "x-kubernetes-map-type" in node:
        if node["x-kubernetes-map-type"] not in ("atomic", "granular"):
            problems.append(f"{at}: x-kubernetes-map-type must be atomic or granular")
        if node.get("type") != "object":
            problems.append(f"{at}: x-kubernetes-map-type needs type object")
    if "x-kubernetes-list-type" in node and node.get("type") != "array":
        problems.append(f"{at}: x-kubernetes-list-type needs type array")
    if node.get("x-kubernetes-list-map-keys") and node.get("x-kubernetes-list-type") != "map":
        problems.append(f"{at}: x-kubernetes-list-map-keys needs x-kubernetes-list-type map")
    return problems


def _list_problems(node: dict[str, Any], at: str) -> list[str]:
    problems = []
    items = node.get("items")
    if not isinstance(items, dict):
        return [f"{at}: an array needs one items schema"]
    if node.get("uniqueItems"):
        problems.append(f"{at}: uniqueItems is forbidden (use x-kubernetes-list-type: set)")
    list_type = node.get("x-kubernetes-list-type", "atomic")
    if list_type not in ("atomic", "set", "map"):
        problems.append(f"{at}: x-kubernetes-list-type must be atomic, set or map")
    if list_type in ("set", "map") and items.get("nullable"):
        problems.append(f"{at}: items of a {list_type} list cannot be nullable")
    if list_type == "set":
        if items.get("type") == "object" and items.get("x-kubernetes-map-type") != "atomic":
            problems.append(f"{at}: objects in a set list must be x-kubernetes-map-type atomic")
        if items.get("type") == "array" and items.get("x-kubernetes-list-type", "atomic") != (
            "atomic"
        ):
            problems.append(f"{at}: lists in a set list must be atomic")
    if list_type == "map":
        keys = node.get("x-kubernetes-list-map-keys", [])
        if not keys:
            problems.append(f"{at}: a map list needs x-kubernetes-list-map-keys")
        if len(set(keys)) != len(keys):
            problems.append(f"{at}: x-kubernetes-list-map-keys has duplicates")
        if items.get("type") != "object":
            problems.append(f"{at}: items of a map list must be objects")
        for key in keys:
            sub = items.get("properties", {}).get(key)
            if sub is None:
                problems.append(f"{at}: list-map key {key!r} is not a property of the items")
                sub = {"type": "string"}
            if sub.get("type") not in _SCALARS and not sub.get("x-kubernetes-int-or-string"):
                problems.append(f"{at}: list-map key {key!r} must be a scalar")
            if key not in items.get("required", []) and "default" not in sub:
                problems.append(f"{at}: list-map key {key!r} is neither required nor defaulted")
            if sub.get("nullable"):
                problems.append(f"{at}: list-map key {key!r} cannot be nullable")
    return problems


def _default_problems(node: dict[str, Any], at: str, ctx: _Context) -> list[str]:
    """A default must validate against its node and be pruned (no field the API server would
    drop); none may sit in the root's apiVersion, kind or metadata. The CEL rules it must
    satisfy too are :func:`default_problems`' business."""
    value = node["default"]
    if ctx.in_meta:
        return [f"{at}: default must not be set in the root's apiVersion, kind or metadata"]
    if value is None and not node.get("nullable"):
        return [f"{at}: default is null but the node is not nullable"]
    problems = []
    try:
        jsonschema.Draft4Validator(node).validate(value)
    except jsonschema.ValidationError as err:
        problems.append(f"{at}: default does not validate: {err.message}")
    if prune(node, value) != value:
        problems.append(f"{at}: default must not have unknown fields (they would be pruned)")
    return problems


def _rule_entry_problems(
    node: dict[str, Any], rule: dict[str, Any], at: str, ctx: _Context
) -> list[str]:
    problems = []
    text, message = rule.get("rule", ""), rule.get("message")
    if not text.strip():
        problems.append(f"{at}: rule is not specified")
    if message is not None and (not message.strip() or re.search(r"[\n\r]", message.strip())):
        problems.append(f"{at}: message must be non-empty and on one line")
    if message is None and re.search(r"[\n\r]", text.strip()):
        problems.append(f"{at}: a rule with line breaks needs a message")
    if "reason" in rule and rule["reason"] not in _REASONS:
        problems.append(f"{at}: reason {rule['reason']!r} is not one of {sorted(_REASONS)}")
    if "fieldPath" in rule and field_path_target(node, rule["fieldPath"]) is None:
        problems.append(f"{at}: fieldPath {rule['fieldPath']!r} is not a field of this schema")
    if text and is_transition(rule) and ctx.uncorrelatable is not None:
        problems.append(
            f"{at}: oldSelf cannot be used on the uncorrelatable portion of the schema"
            f" within {ctx.uncorrelatable}"
        )
    unknown = set(rule) - {"rule", "message", "messageExpression", "reason", "fieldPath"}
    unknown -= {"optionalOldSelf"}
    if unknown:
        problems.append(f"{at}: unknown keys {sorted(unknown)}")
    return problems


_PATH_STEP = re.compile(r"\.([A-Za-z_][\w-]*)|\['([^']*)'\]|\[(\d+)\]")


def field_path_target(node: dict[str, Any], field_path: str) -> dict[str, Any] | None:
    """The schema a rule's ``fieldPath`` points at, as the API server resolves it (``.a.b``,
    ``['key']`` for map keys, ``[0]`` for items), or None when it names no declared field."""
    position = 0
    while position < len(field_path):
        step = _PATH_STEP.match(field_path, position)
        if step is None:
            return None
        name, key, _ = step.groups()
        if name is not None:
            node = node.get("properties", {}).get(name)
        elif key is not None:
            extra = node.get("additionalProperties")
            node = extra if isinstance(extra, dict) else node.get("properties", {}).get(key)
        else:
            node = node.get("items")
        if not isinstance(node, dict):
            return None
        position = step.end()
    return node if field_path else None


def _root_problems(node: dict[str, Any], at: str) -> list[str]:
    """The resource root: an object; with the status subresource only a few keywords; string
    apiVersion and kind; metadata, if stated, an object that may constrain only name and
    generateName (nothing else of metadata: no description, default or rules)."""
    problems = []
    if node.get("type") != "object":
        problems.append(f"{at}: the root must be of type object")
    extra = sorted(set(node) - _ROOT_KEYS)
    if extra:
        problems.append(f"{at}: not allowed at the root with the status subresource: {extra}")
    properties = node.get("properties", {})
    for name in ("apiVersion", "kind"):
        if name in properties and properties[name].get("type") != "string":
            problems.append(f"{at}: {name} must be of type string")
    if "metadata" in properties:
        metadata = properties["metadata"]
        allowed = {"type": "object"}
        names = set(metadata.get("properties", {}))
        if names and names <= {"name", "generateName"}:
            allowed = {**allowed, "properties": metadata["properties"]}
        if metadata != allowed:
            problems.append(
                ".metadata: must not specify anything other than name and generateName"
                " (type object, properties name and generateName only)"
            )
    return problems
