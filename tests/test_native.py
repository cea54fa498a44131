"""The router's per-message modules run compiled (mypyc, setup.py), their plain source runs on
request, and compiled modules built from other source are refused in a checkout rather than
silently run; a router running its source and compiled routers route together."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest
from clients import Sender, World
from harness import RouterNetwork, RouterProcess
from proton import Message

REPO = Path(__file__).resolve().parent.parent
COMPILED = (
    "core.engine",
    "datapath.forwarder",
    "datapath.interest",
    "datapath.links",
    "datapath.pnfast",
    "datapath.scanfast",
    "datapath.sections",
    "transport.connection",
    "telemetry.flows",
    "telemetry.sampling",
)
SHOW_FILES = (
    "import importlib; print(*(importlib.import_module('router.' + m).__file__ for m in {}))"
)


def module_files(env: dict[str, str] | None = None, path: Path = REPO) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", SHOW_FILES.format(COMPILED)],
        capture_output=True,
        text=True,
        cwd=path,
        env={**os.environ, "PYTHONPATH": str(path), **(env or {})},
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_per_message_modules_are_compiled() -> None:
    files = module_files({"ROUTERNET_PURE": ""})
    assert all(f.endswith(tuple(EXTENSION_SUFFIXES)) for f in files), (
        f"{files}: run `make native` (the router runs these compiled)"
    )


def test_routernet_pure_runs_the_source() -> None:
    files = module_files({"ROUTERNET_PURE": "1"})
    assert [Path(f).relative_to(REPO / "router").as_posix() for f in files] == [
        m.replace(".", "/") + ".py" for m in COMPILED
    ]


def built_checkout(tmp_path: Path) -> Path:
    """A copy of the router package as built here, with setup.py: a source checkout."""
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO / "router", checkout / "router", ignore=shutil.ignore_patterns("__py*"))
    shutil.copy(REPO / "setup.py", checkout)
    return checkout


def import_compiled(checkout: Path, module: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        capture_output=True,
        text=True,
        cwd=checkout,
        env={**os.environ, "PYTHONPATH": str(checkout), "ROUTERNET_PURE": ""},
        timeout=30,
    )


def test_compiled_modules_of_other_source_are_refused_in_a_checkout(tmp_path: Path) -> None:
    checkout = built_checkout(tmp_path)
    assert module_files({"ROUTERNET_PURE": ""}, checkout)  # as built: imports
    engine = checkout / "router" / "core" / "engine.py"
    engine.write_text(engine.read_text() + "\n# changed\n")
    done = import_compiled(checkout, "router.core.engine")
    assert done.returncode != 0
    assert "core/engine.py changed since compiled: run `make native`" in done.stderr
    # ... and the source itself still runs on request.
    assert (
        Path(module_files({"ROUTERNET_PURE": "1"}, checkout)[COMPILED.index("core.engine")])
        == engine
    )


def test_a_changed_c_source_is_refused_too(tmp_path: Path) -> None:
    """router/datapath/pnfast.c is built beside its Python twin: a change to the C alone is stale
    too."""
    checkout = built_checkout(tmp_path)
    c_source = checkout / "router" / "datapath" / "pnfast.c"
    c_source.write_text(c_source.read_text() + "\n/* changed */\n")
    done = import_compiled(checkout, "router.datapath.pnfast")
    assert done.returncode != 0
    assert "datapath/pnfast.py or pnfast.c changed since compiled: run `make native`" in done.stderr


def runs_compiled(router: RouterProcess) -> bool:
    assert router.proc is not None
    return "native__mypyc" in Path(f"/proc/{router.proc.pid}/maps").read_text()


@pytest.mark.network
def test_a_router_running_its_source_routes_with_compiled_ones(
    tmp_path: Path, world: World
) -> None:
    net = RouterNetwork(tmp_path, world, [("A", "B", 1), ("B", "C", 1)])
    for name in "ABC":
        net[name].env["ROUTERNET_PURE"] = "1" if name == "B" else ""
    with net:
        assert [runs_compiled(net[n]) for n in "ABC"] == [True, False, True]
        receiver = world.connect(net.url("C")).receiver("across")
        net.wait_address("across", {"C"})
        sender: Sender = world.connect(net.url("A")).sender("across")
        world.run_until(lambda: sender.credit > 0, what="credit")
        sender.send_all(Message(body=i) for i in range(200))
        world.run_until(sender.all_settled, what="every outcome")
        assert {t.outcome for t in sender.sent} == {"accepted"}
        assert receiver.bodies == list(range(200))
