"""The local backend's input: Router, Address, LinkRoute and Gateway files, as ``kubectl apply
-f`` takes them, read, validated and planned exactly as the operator does it with the API's
objects (the CRD models through planning/adapter.py, then planning/planner.py).

Everything is checked before anything runs, and every problem is one line naming the file, the
object and the field (`InvalidInput`). On top of the models' rules:

- the API server's update rules: what the last ``up`` applied is kept in the state, so changing
  an Address's prefix is refused here as ``kubectl apply`` would refuse it;
- conflicts (two Addresses claiming one prefix): the planner lets the older object win, as on
  Kubernetes; here an object is as old as the first ``up`` that applied it, so a newcomer never
  changes what running routers do, and is reported rather than silently left out;
- what only Kubernetes provides: Secrets (a listener's PLAIN users and TLS certificate, a
  LinkRoute connection's CA and credentials, a Gateway's certificates and CAs) are refused,
  never replaced by clear text or anonymous connections: the pods of a cluster mount them,
  local routers have nothing to read.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from router.config.yamlfiles import UniqueKeyLoader
from router_operator.planning import adapter
from router_operator.planning.handoff import HandOff, hand_off
from router_operator.planning.planner import NamespacePlan, RouterDecl, plan_namespace
from router_operator.resources.models import DEFAULT_ROUTER_IMAGE, KINDS, Gateway, LinkRoute, Router

DEFAULT_NAMESPACE = "default"
RESOURCE_SUFFIXES = (".yaml", ".yml", ".json")
WARNINGS = frozenset({"NoInteriorRouters"})
"""Planner problems that still let the network run (edges without interiors wait unconnected)."""
KIND_NAMES = tuple(cls.kind_name for cls in KINDS)


class InvalidInput(Exception):
    """The files cannot be run: one line per problem. Nothing was changed."""

    def __init__(self, lines: Sequence[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = list(lines)


@dataclass(frozen=True)
class Declared:
    """One valid object from a file; ``origin`` names the file as the user wrote it."""

    parsed: adapter.Parsed
    origin: str

    @property
    def kind(self) -> str:
        return self.parsed.kind

    @property
    def name(self) -> str:
        return self.parsed.name

    @property
    def namespace(self) -> str | None:
        return self.parsed.metadata.get("namespace") or None

    @property
    def label(self) -> str:
        return f"{self.kind} {self.name!r}"

    def created(self, timestamp: str) -> Declared:
        """The same object created at ``timestamp`` (RFC 3339), which decides conflicts."""
        body = dict(self.parsed.body)
        body["metadata"] = {**self.parsed.metadata, "creationTimestamp": timestamp}
        return dataclasses.replace(self, parsed=dataclasses.replace(self.parsed, body=body))

    def stored(self) -> dict[str, Any]:
        """The object as the state keeps it (for update rules and creation times)."""
        assert self.parsed.model is not None
        return {
            "file": self.origin,
            "created": self.parsed.creation_timestamp,
            "object": self.parsed.model.model_dump(mode="json", exclude={"status"}),
        }


def resource_files(args: Sequence[str]) -> list[tuple[Path, str]]:
    """(path, name shown in messages) of every file the arguments name: a file as is, a
    directory's *.yaml, *.yml and *.json files (not recursive, sorted, hidden files skipped), as
    ``kubectl apply -f DIR`` reads them. A file named twice counts once."""
    files: list[tuple[Path, str]] = []
    problems: list[str] = []
    seen: set[Path] = set()
    for arg in args:
        path = Path(arg)
        if path.is_dir():
            found = [(p, str(Path(arg) / p.name)) for p in listing(path)]
            if not found:
                problems.append(f"{arg}: no *.yaml, *.yml or *.json files in this directory")
        elif path.is_file():
            found = [(path, arg)]
        else:
            problems.append(f"{arg}: no such file or directory")
            continue
        for file, shown in found:
            if file.resolve() not in seen:
                seen.add(file.resolve())
                files.append((file, shown))
    if problems:
        raise InvalidInput(problems)
    return files


def listing(directory: Path) -> list[Path]:
    """The resource files of a directory."""
    return sorted(
        p
        for p in directory.iterdir()
        if p.suffix.lower() in RESOURCE_SUFFIXES and not p.name.startswith(".") and p.is_file()
    )


def file_signature(args: Sequence[str]) -> tuple[Any, ...]:
    """Changes when a file the arguments name, or a directory's listing, changes: what
    ``up --watch`` polls."""
    signature: list[Any] = []
    for arg in args:
        path = Path(arg)
        for entry in listing(path) if path.is_dir() else [path]:
            try:
                st = entry.stat()
                signature.append((str(entry), st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                signature.append((str(entry), None))
    return tuple(signature)


def load_resources(args: Sequence[str]) -> tuple[str, list[Declared]]:
    """Every object in the files, validated with the CRD models: (namespace, objects).

    Objects without a namespace are in ``default``; all must be in one namespace (one state
    directory runs one namespace's networks). Raises InvalidInput listing every problem."""
    problems: list[str] = []
    declared: list[Declared] = []
    for path, shown in resource_files(args):
        for index, doc in _documents(path, shown, problems):
            item = _validate(doc, shown, index, problems)
            if item is not None:
                declared.append(item)
    seen: dict[tuple[str, str], Declared] = {}
    for item in declared:
        other = seen.setdefault((item.kind, item.name), item)
        if other is not item:
            problems.append(f"{item.origin}: {item.label}: also declared in {other.origin}")
    namespaces = {item.namespace for item in declared} - {None}
    if len(namespaces) > 1:
        where = ", ".join(
            f"{item.label} in {item.namespace!r} ({item.origin})"
            for item in declared
            if item.namespace
        )
        problems.append(f"objects in more than one namespace: {where}; use one state dir each")
    if not declared and not problems:
        problems.append(f"{' '.join(args)}: declares no {', '.join(KIND_NAMES)}")
    if problems:
        raise InvalidInput(problems)
    namespace = next(iter(namespaces)) if namespaces else DEFAULT_NAMESPACE
    return namespace or DEFAULT_NAMESPACE, declared


def _documents(path: Path, shown: str, problems: list[str]) -> Iterator[tuple[int, Any]]:
    """(document number, parsed document) of a file; a ``kind: List`` is expanded."""
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix.lower() == ".json":
            docs = [json.loads(text)]
        else:
            docs = list(yaml.load_all(text, Loader=UniqueKeyLoader))
    except (OSError, UnicodeDecodeError) as err:
        problems.append(f"{shown}: cannot read: {getattr(err, 'strerror', None) or err}")
        return
    except json.JSONDecodeError as err:
        problems.append(f"{shown}:{err.lineno}:{err.colno}: invalid JSON: {err.msg}")
        return
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        reason = getattr(err, "problem", None) or " ".join(str(err).split())
        problems.append(f"{shown}: invalid YAML: {where}{reason}")
        return
    for number, doc in enumerate(docs, 1):
        if isinstance(doc, dict) and doc.get("kind") == "List" and "items" in doc:
            items = doc["items"] if isinstance(doc["items"], list) else [doc["items"]]
            for item in items:
                yield number, item
        elif doc is not None:
            yield number, doc


def _validate(doc: Any, shown: str, index: int, problems: list[str]) -> Declared | None:
    where = f"{shown}: document {index}"
    if not isinstance(doc, dict):
        problems.append(f"{where}: not a Kubernetes object (a mapping), but {type(doc).__name__}")
        return None
    kind = doc.get("kind")
    if kind not in KIND_NAMES:
        known = ", ".join(KIND_NAMES)
        problems.append(f"{where}: kind {kind!r} is not a Routernet resource ({known})")
        return None
    metadata = doc.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    label = f"{kind} {name!r}" if isinstance(name, str) else f"{kind} (document {index})"
    parsed = adapter.parse(kind, doc)
    if parsed.model is None:
        problems.append(f"{shown}: {label}: {parsed.error}")
        return None
    return Declared(parsed, shown)


def check_local(declared: Sequence[Declared]) -> list[str]:
    """What the files ask for that only Kubernetes provides (Secrets): one line each."""
    problems: list[str] = []
    for item in declared:
        model = item.parsed.model
        if isinstance(model, Router):
            for index, lsn in enumerate(model.spec.listeners):
                if lsn.saslUsersSecret is not None:
                    problems.append(
                        f"{item.origin}: {item.label}: spec.listeners[{index}].saslUsersSecret:"
                        f" Secret {lsn.saslUsersSecret!r} is not available to local routers"
                        " (no Kubernetes here); use ANONYMOUS listeners locally"
                    )
                if lsn.tlsSecret is not None:
                    problems.append(
                        f"{item.origin}: {item.label}: spec.listeners[{index}].tlsSecret:"
                        f" Secret {lsn.tlsSecret!r} is not available to local routers"
                        " (no Kubernetes here), and the listener is not served in clear text"
                        " instead; leave tlsSecret out locally"
                    )
        if isinstance(model, LinkRoute) and model.spec.connection is not None:
            connection = model.spec.connection
            target = f"{connection.host}:{connection.port}"
            if connection.tlsSecret is not None:
                problems.append(
                    f"{item.origin}: {item.label}: spec.connection.tlsSecret: Secret"
                    f" {connection.tlsSecret!r} is not available to local routers (no"
                    f" Kubernetes here), and {target} is not dialled in clear text instead;"
                    " leave tlsSecret out locally (or reach the broker by containerId)"
                )
            if connection.saslSecret is not None:
                problems.append(
                    f"{item.origin}: {item.label}: spec.connection.saslSecret: Secret"
                    f" {connection.saslSecret!r} is not available to local routers (no"
                    f" Kubernetes here), and {target} is not dialled anonymously instead;"
                    " leave saslSecret out locally"
                )
        if isinstance(model, Gateway):
            problems += _gateway_secrets(item, model)
    return problems


def _gateway_secrets(item: Declared, gateway: Gateway) -> list[str]:
    """A Gateway's TLS Secrets, refused as a listener's tlsSecret is: never replaced by clear
    text. TLS without Secrets (a connector trusting the system's CAs) runs as on Kubernetes."""
    named: list[tuple[str, str | None]] = []
    listener = gateway.spec.listener
    if listener is not None and listener.tls is not None:
        named += [("spec.listener.tls.secret", listener.tls.secret)]
        named += [("spec.listener.tls.caSecret", listener.tls.caSecret)]
    for index, connector in enumerate(gateway.spec.connectors):
        if connector.tls is not None:
            named += [(f"spec.connectors[{index}].tls.secret", connector.tls.secret)]
            named += [(f"spec.connectors[{index}].tls.caSecret", connector.tls.caSecret)]
    return [
        f"{item.origin}: {item.label}: {where}: Secret {secret!r} is not available to local"
        " routers (no Kubernetes here), and the gateway connection is not made in clear text"
        " instead; leave it out locally"
        for where, secret in named
        if secret is not None
    ]


def check_updates(declared: Sequence[Declared], applied: Mapping[str, Any]) -> list[str]:
    """The API server's update rules (an Address's prefix is immutable, say), against what the
    last ``up`` applied (``applied``: kind -> name -> Declared.stored())."""
    problems: list[str] = []
    for item in declared:
        old = applied.get(item.kind, {}).get(item.name)
        new = item.parsed.model
        if old is None or new is None:
            continue
        previous = adapter.parse(item.kind, old.get("object") or {}).model
        if previous is None:
            continue  # stored by another version: nothing to compare with
        try:
            new.spec.check_update(previous.spec)  # type: ignore[attr-defined]
        except ValueError as err:
            problems.append(f"{item.origin}: {item.label}: spec: {err}")
    return problems


@dataclass(frozen=True)
class Planned:
    """The files, validated and planned: what ``up`` runs."""

    namespace: str
    declared: tuple[Declared, ...]
    plan: NamespacePlan
    warnings: tuple[str, ...]
    handoffs: tuple[HandOff, ...] = ()
    """Routers with a store that run more pods than they declare now (planning/handoff.py)."""
    interim: NamespacePlan | None = None
    """With ``handoffs``: what runs first, every pod of theirs kept but only the declared ones
    hosting, until the others have moved their nodes there; ``plan`` is what runs after."""


def _scaled(parsed: adapter.Parsed, autoscaled: Mapping[str, int]) -> adapter.Parsed:
    router = parsed.model
    replicas = autoscaled.get(parsed.name)
    if replicas is None or not isinstance(router, Router) or router.spec.autoscaling is None:
        return parsed
    if router.spec.autoscaling.mode != "operator":
        return parsed
    spec = router.spec.model_copy(update={"replicas": replicas})
    return dataclasses.replace(parsed, model=router.model_copy(update={"spec": spec}))


def plan_files(
    args: Sequence[str],
    applied: Mapping[str, Any] | None = None,
    autoscaled: Mapping[str, int] | None = None,
    running: Mapping[str, int] | None = None,
) -> Planned:
    """Reads, validates and plans; raises InvalidInput with every problem. ``applied`` is what
    the last ``up`` applied (its objects keep their creation time: the older wins conflicts).
    ``autoscaled``: replicas the local autoscaler set (local/scaler.py), by Router name; they
    replace the file's for Routers the operator autoscales, as /scale does on Kubernetes.
    ``running``: the pods each Router has now (the StatefulSet's replicas, as it were): a
    Router with a store that has more than it declares is scaled in by hand-off (``interim``
    first, planning/handoff.py)."""
    applied = applied or {}
    namespace, declared = load_resources(args)
    problems = check_local(declared) + check_updates(declared, applied)
    if problems:
        raise InvalidInput(problems)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    declared = [
        d.created(applied.get(d.kind, {}).get(d.name, {}).get("created") or now) for d in declared
    ]
    parsed = {kind: [d.parsed for d in declared if d.kind == kind] for kind in KIND_NAMES}
    parsed["Router"] = [_scaled(p, autoscaled or {}) for p in parsed["Router"]]
    routers = [adapter.router_decl(p, DEFAULT_ROUTER_IMAGE) for p in parsed["Router"]]

    def plan_with(routers: list[RouterDecl]) -> NamespacePlan:
        return plan_namespace(
            namespace,
            routers,
            [adapter.address_decl(p) for p in parsed["Address"]],
            [adapter.link_route_decl(p) for p in parsed["LinkRoute"]],
            [adapter.gateway_decl(p) for p in parsed["Gateway"]],
        )

    plan = plan_with(routers)
    # No pod has reported anything yet: a Router running more pods than it declares holds them.
    steps = {
        r.name: hand_off(r.name, r.replicas, (running or {}).get(r.name, 0), {})
        for r in routers
        if r.store is not None
    }
    handoffs = tuple(step for step in steps.values() if step.holding)
    interim = None
    if handoffs:
        interim = plan_with([steps[r.name].apply(r) if r.name in steps else r for r in routers])
    origin = {(d.kind, d.name): d.origin for d in declared}
    warnings: list[str] = []
    for problem in plan.problems:
        line = f"{origin[problem.kind, problem.name]}: {problem.kind} {problem.name!r}: "
        (warnings if problem.reason in WARNINGS else problems).append(line + problem.message)
    if problems:
        raise InvalidInput(problems)
    return Planned(namespace, tuple(declared), plan, tuple(warnings), handoffs, interim)
