"""The layering docs/architecture.md documents, checked on the import graph of the source
(scripts/import_graph.py: runtime imports, function-level ones included, TYPE_CHECKING ones
aside): no import cycle between modules, and no import that goes down the wrong way."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

import import_graph  # noqa: E402

EDGES = import_graph.graph()


def _in(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _offending(sources: tuple[str, ...], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{m} imports {t}"
        for m, targets in EDGES.items()
        if _in(m, sources)
        for t in targets
        if _in(t, forbidden) and not _in(t, sources)
    )


def _outside_imports(module: str) -> set[str]:
    """Every module `module` imports when it runs, ours or not, by full dotted name."""
    path = import_graph.modules()[module]
    names: set[str] = set()
    for node in import_graph._runtime_imports(ast.parse(path.read_text()).body):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_no_module_imports_itself_back_through_others() -> None:
    assert import_graph.cycles(EDGES) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert import_graph.cycles(edges) == [["a", "b", "c"]]


def test_the_graph_sees_function_level_imports_and_not_type_checking_ones(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from router.core import engine\n"
        "def f():\n    from router.datapath import forwarder\n"
        "try:\n    import router.log\nexcept ImportError:\n    from router import tokens\n"
    )
    known = import_graph.modules()
    assert import_graph.imports("x.m", source, known) == {
        "router",
        "router.datapath",
        "router.datapath.forwarder",
        "router.log",
        "router.tokens",
    }


# ----- the router -------------------------------------------------------------------------


def test_no_feature_imports_the_engine() -> None:
    """The engine hands each feature what it needs at construction (the Router object, typed
    under TYPE_CHECKING); only the process around it (router.cli) and its own package import
    it."""
    assert [
        f"{m} imports router.core.engine"
        for m, targets in sorted(EDGES.items())
        if "router.core.engine" in targets and not _in(m, ("router.core", "router.cli"))
    ] == []


# The protocol and addressing logic: time passed in, sends through an injected object.
PURE_ROUTER = ("router.addressing", "router.network")
IO_MODULES = (
    "asyncio",
    "aiohttp",
    "http",
    "kopf",
    "kubernetes",
    "multiprocessing",
    "proton",
    "selectors",
    "signal",
    "socket",
    "ssl",
    "subprocess",
    "threading",
    "urllib.request",
    "urllib3",
)


PURE = (
    *PURE_ROUTER,
    "router_operator.resources",
    "router_operator.planning",
    "router_operator.autoscaling.hpa",
    "router_operator.autoscaling.load",
    "router_operator.autoscaling.predict",
    "router_operator.autoscaling.scaler",
    "router_operator.rendering",
    "router_operator.console.view",
    "router_operator.console.health",
)


@pytest.mark.parametrize("module", sorted(m for m in EDGES if _in(m, PURE)))
def test_pure_layers_import_no_io(module: str) -> None:
    """Address parsing, the inter-router protocol, planning, autoscaling arithmetic and the
    rendering of Kubernetes objects: no sockets, processes, threads or API clients, so each
    runs in a unit test as it is."""
    assert sorted(n for n in _outside_imports(module) if _in(n, IO_MODULES)) == []


def test_addressing_and_the_network_protocol_import_only_each_other() -> None:
    allowed = (*PURE_ROUTER, "router.log")
    assert [
        f"{m} imports {t}"
        for m, targets in sorted(EDGES.items())
        if _in(m, PURE_ROUTER)
        for t in sorted(targets)
        if not _in(t, allowed) and t != "router"
    ] == []


# What the operator and the validating child load: the configuration's definitions.
CONFIG_DEFINITIONS = (
    "router.config.base",
    "router.config.views",
    "router.config.records",
    "router.config.models",
    "router.config.yamlfiles",
    "router.nodes.config",
    "router.gateway.config",
    "router.telemetry.config",
)
RUNNING_ROUTER = (
    "router.core",
    "router.datapath",
    "router.transport",
    "router.edges",
    "router.linkroutes",
    "router.management",
    "router.containers",
    "router.pod",
    "router.store",
    "router.config.live",
    "router.config.sync",
    "router.config.sources",
    "router.nodes.hosting",
)


def test_the_configuration_definitions_load_without_the_running_router() -> None:
    assert _offending(CONFIG_DEFINITIONS, RUNNING_ROUTER) == []


FEATURES = (
    "router.edges",
    "router.linkroutes",
    "router.management",
    "router.nodes",
    "router.containers",
    "router.gateway",
    "router.pod",
    "router.config.live",
    "router.config.sync",
    "router.config.sources",
    "router.core",
)


def test_the_data_path_imports_no_feature() -> None:
    """The modules every message passes through (compiled with mypyc) reach features only
    through what the engine gave them."""
    assert _offending(("router.datapath",), FEATURES) == []


# ----- the operator -----------------------------------------------------------------------

# Lowest first: a package imports only those before it (and router.*, the stdlib, libraries).
OPERATOR_LAYERS = (
    ("router_operator.resources",),
    ("router_operator.planning",),
    ("router_operator.autoscaling",),
    ("router_operator.rendering",),
    ("router_operator.kubernetes", "router_operator.local"),
    ("router_operator.traffic",),
    ("router_operator.console",),
    ("router_operator.cli",),
)


@pytest.mark.parametrize("level", range(len(OPERATOR_LAYERS)))
def test_operator_packages_import_only_the_layers_below(level: int) -> None:
    below = tuple(p for layer in OPERATOR_LAYERS[:level] for p in layer)
    offending = []
    for package in OPERATOR_LAYERS[level]:
        for module, targets in sorted(EDGES.items()):
            if not _in(module, (package,)):
                continue
            for target in sorted(targets):
                ours = target.startswith("router_operator.")
                if ours and not _in(target, (package, *below)):
                    offending.append(f"{module} imports {target}")
    assert offending == []


def test_the_local_backend_runs_without_kubernetes_clients() -> None:
    """`routernet` runs in the router image, which has neither kopf nor the kubernetes
    package: nothing it loads may import them."""
    local = (
        "router_operator.local",
        "router_operator.traffic",
        "router_operator.console",
        "router_operator.cli",
    )
    assert [
        f"{m} imports {n}"
        for m in sorted(EDGES)
        if _in(m, local)
        for n in sorted(_outside_imports(m))
        if _in(n, ("kopf", "kubernetes"))
    ] == []


# ----- the picture ------------------------------------------------------------------------


def test_the_architecture_page_shows_the_current_graph() -> None:
    doc = import_graph.DOC.read_text()
    assert import_graph.render_doc(doc, EDGES) == doc, "stale: run `make architecture`"
