"""Where a network's routers are, and what was declared for it: the console's one difference
between a network on this machine and one on Kubernetes.

A source lists every router that should be running, including those that are not: a router
that does not answer is shown as down, never left out. ``LocalSource`` reads a ``routernet up``
state directory; kubesource.py reads the Routers and their pods.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from collector.window import FlowReader
from router_operator.console.flows import FlowAnswer
from router_operator.local import backend as local
from router_operator.local.collector import DATASET_DIR


@dataclass(frozen=True)
class Target:
    """One router the network should have."""

    id: str
    """The router's id (its pod's name)."""
    network: str
    namespace: str
    mode: str
    """interior, edge or standalone, as declared."""
    endpoint: str | None
    """host:port of a listener where its ``$management`` answers clients; None: none known."""
    down: str | None = None
    """Why the source already knows it is not up (not running, pod not Ready), or None."""
    where: str = ""
    """Where to look when it is in trouble: its log file, or ``kubectl logs pod/…``."""


@dataclass(frozen=True)
class Declared:
    """What the network's resources declare, beside what the routers report."""

    addresses: list[dict[str, Any]] = field(default_factory=list)
    """Address resources as planned: key, distribution, undeliverable, node (type, hosts,
    deadLetterAddress)."""
    link_routes: list[dict[str, Any]] = field(default_factory=list)


class Source(Protocol):
    """What the scraper and the server need to know of where the network runs."""

    name: str
    """Shown in the page's title: the state directory, or the cluster."""

    def targets(self) -> list[Target]: ...

    def declared(self) -> Declared: ...

    def log_tail(self, target: Target, lines: int) -> list[str]: ...

    def flows(self, start_ms: int, end_ms: int) -> FlowAnswer:
        """The flow records of the window, summed by path (collector/window.py)."""
        ...

    def analysis(self) -> Path | None:
        """The directory ``routernet analyze`` last wrote (report.html, plots), if any."""
        ...


class LocalSource:
    """A ``routernet up`` network: its state directory says which routers there are, their
    pid files whether they run, their listeners where to ask."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir.resolve()
        self.name = local.shown_path(str(self.state_dir))
        self._reader = FlowReader(self.state_dir / DATASET_DIR)

    def _state(self) -> local.State | None:
        return local.State.load(self.state_dir) if self.state_dir.is_dir() else None

    def targets(self) -> list[Target]:
        state = self._state()
        if state is None:
            return []
        targets = []
        for name, record in sorted(state.pods.items()):
            endpoints = record["clientEndpoints"] + record["routeContainerEndpoints"]
            running = local.running_pid(self.state_dir, name) is not None
            targets.append(
                Target(
                    id=name,
                    network=record["network"],
                    namespace=state.namespace,
                    mode=record["mode"],
                    endpoint=endpoints[0] if endpoints else None,
                    down=None if running else "not running",
                    where=local.shown_path(str(local.log_path(self.state_dir, name))),
                )
            )
        return targets

    def declared(self) -> Declared:
        state = self._state()
        if state is None:
            return Declared()
        nets = state.networks.values()
        return Declared(
            addresses=[a for net in nets for a in net["addresses"]],
            link_routes=[lr for net in nets for lr in net["linkRoutes"]],
        )

    def log_tail(self, target: Target, lines: int) -> list[str]:
        path = local.log_path(self.state_dir, target.id)
        try:
            with path.open(errors="replace") as f:
                return [line.rstrip("\n") for line in deque(f, maxlen=lines)]
        except OSError as err:
            return [f"{path}: {err.strerror}"]

    def flows(self, start_ms: int, end_ms: int) -> FlowAnswer:
        if not self._reader.dataset.is_dir():
            return FlowAnswer(None, "no telemetry dataset: the network runs without a collector")
        return FlowAnswer(self._reader.totals(start_ms, end_ms))

    def analysis(self) -> Path | None:
        path = self.state_dir / "analysis"
        return path if (path / "report.html").is_file() else None
