"""Networks of interior routers for the benchmarks: a topology's routers started, converged and
stopped, and their management queried.

The network suite (network.py) and the scenarios it runs (large.py, whole.py), and the hosted
nodes' suite (nodes.py), all start their routers here, so the scenarios need nothing from the
suite that runs them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.clients import HOST, BenchError, free_ports, running, wait_for_port
from bench.one_router import REPO_DIR, START_TIMEOUT_S

# A qdrouterd binary: `network(..., qdrouterd=True)` runs it instead of our routers.
QDROUTERD_BINARY = os.environ.get("QDROUTERD")
# Bounds, as START_TIMEOUT_S. Convergence: qdrouterd's ring of 16 takes 17 s, and its time
# grows with the network (the scale suite's rings of 64).
CONVERGE_TIMEOUT_S = 240.0
POLL_S = 0.05
MGMT_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class Spec:
    """A router of a topology and the routers it dials, with each connection's cost."""

    id: str
    connect: tuple[tuple[str, int], ...] = ()


# A-B-C in a line; C dials B, B dials A.
LINE = (Spec("A"), Spec("B", (("A", 1),)), Spec("C", (("B", 1),)))


@dataclass(frozen=True, slots=True)
class Router:
    """A running router: its client port, inter-router port and process."""

    id: str
    port: int
    inter_router_port: int
    proc: subprocess.Popen[bytes]


class Management:
    """QUERY requests to one router's `$management`, as qdstat sends them.

    A blocking connection answers the router's heartbeats only while it waits on it: one
    left unused past the router's idle timeout (16 s, as Dispatch's) is closed by the router,
    as happens while a network of 64 is polled one router after another. A query on such a
    connection is sent again once, on a new one."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._open()

    def _open(self) -> None:
        from proton.utils import BlockingConnection

        port = self.port
        try:
            self.conn = BlockingConnection(f"amqp://{HOST}:{port}", timeout=MGMT_TIMEOUT_S)
            self.replies = self.conn.create_receiver(None, dynamic=True)
            self.requests = self.conn.create_sender("$management")
        except Exception as e:
            raise BenchError(f"management on port {port}: {e}") from e

    def query(self, entity_type: str, names: list[str], again: bool = True) -> list[dict[str, Any]]:
        from proton import Message
        from proton.utils import ConnectionClosed

        request = Message(
            reply_to=self.replies.remote_source.address,
            correlation_id=1,
            properties={
                "operation": "QUERY",
                "type": "org.amqp.management",
                "entityType": entity_type,
                "name": "self",
            },
            body={"attributeNames": names},
        )
        try:
            self.requests.send(request)
            reply = self.replies.receive(timeout=MGMT_TIMEOUT_S)
        except ConnectionClosed as e:
            if not again:
                raise BenchError(f"management QUERY {entity_type}: {e}") from e
            self._open()
            return self.query(entity_type, names, again=False)
        except Exception as e:
            raise BenchError(f"management QUERY {entity_type}: {e}") from e
        if reply.properties.get("statusCode") != 200:
            raise BenchError(f"management QUERY {entity_type}: {reply.properties}")
        body = reply.body
        return [dict(zip(body["attributeNames"], row, strict=True)) for row in body["results"]]

    def close(self) -> None:
        self.conn.close()


@contextmanager
def management(port: int) -> Iterator[Management]:
    m = Management(port)
    try:
        yield m
    finally:
        m.close()


def wait_until(check: Callable[[], Any], timeout: float, what: str, every: float = POLL_S) -> Any:
    """Polls `check` every `every` seconds until it returns something true; returns that."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise BenchError(f"{what} not within {timeout:.0f} s")
        time.sleep(every)


def shortest_costs(specs: tuple[Spec, ...]) -> dict[str, dict[str, int]]:
    """Each router's cost to every other one over the specs' connections (Floyd-Warshall)."""
    ids = [s.id for s in specs]
    cost = {a: {b: 0 if a == b else sys.maxsize for b in ids} for a in ids}
    for spec in specs:
        for peer, c in spec.connect:
            cost[spec.id][peer] = cost[peer][spec.id] = min(cost[spec.id][peer], c)
    for k in ids:
        for a in ids:
            for b in ids:
                cost[a][b] = min(cost[a][b], cost[a][k] + cost[k][b])
    return {a: {b: c for b, c in row.items() if b != a} for a, row in cost.items()}


def _converged(
    mgmts: dict[str, Management], expected: dict[str, dict[str, int]]
) -> dict[str, dict[str, Any]] | None:
    """Each router's view of the others (`router.node` rows by id) once every router reaches
    every other one at its shortest-path cost; None before. Every router being reachable is
    not enough: a longer path can be known before the shorter one.

    Every router is asked each time, even once one is seen not there yet: a connection left
    unused past qdrouterd's idle timeout (16 s) is closed by it, and its convergence can take
    longer than that."""
    views = {}
    for rid, m in mgmts.items():
        rows = m.query("router.node", ["id", "nextHop", "routerLink", "cost"])
        views[rid] = {
            r["id"]: r
            for r in rows
            if r["id"] != rid and (r["nextHop"] is not None or r["routerLink"] is not None)
        }
    for rid, reachable in views.items():
        if {peer: r["cost"] for peer, r in reachable.items()} != expected[rid]:
            return None
    return views


def router_command(
    spec: Spec, port: int, ir_port: int, ports: dict[str, tuple[int, int]]
) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "router",
        "--id",
        spec.id,
        "--mode",
        "interior",
        "--listen",
        f"{HOST}:{port}",
        "--inter-router-listen",
        f"{HOST}:{ir_port}",
        "--log-format",
        "json",
    ]
    for peer, cost in spec.connect:
        command += ["--connect", f"{HOST}:{ports[peer][1]},cost={cost}"]
    return command


def qdrouterd_config(spec: Spec, port: int, ir_port: int, ports: dict[str, tuple[int, int]]) -> str:
    """The same router as `router_command`'s, for qdrouterd: one worker thread, anonymous
    client and inter-router listeners, a connector to each peer it dials."""
    listener = (
        "listener {{\n    host: {host}\n    port: {port}\n    role: {role}\n"
        "    authenticatePeer: no\n    saslMechanisms: ANONYMOUS\n}}\n"
    )
    text = f"router {{\n    mode: interior\n    id: {spec.id}\n    workerThreads: 1\n}}\n"
    text += listener.format(host=HOST, port=port, role="normal")
    text += listener.format(host=HOST, port=ir_port, role="inter-router")
    for peer, cost in spec.connect:
        text += (
            f"connector {{\n    host: {HOST}\n    port: {ports[peer][1]}\n"
            f"    role: inter-router\n    cost: {cost}\n    saslMechanisms: ANONYMOUS\n}}\n"
        )
    return text


def router_process(
    spec: Spec,
    port: int,
    ir_port: int,
    ports: dict[str, tuple[int, int]],
    log_dir: Path,
    scenario: str,
    qdrouterd: bool,
) -> list[str]:
    """The command of one of our routers, or of qdrouterd's (its configuration written to
    `<log_dir>/<scenario>-<id>.conf`)."""
    if not qdrouterd:
        return router_command(spec, port, ir_port, ports)
    assert QDROUTERD_BINARY is not None
    conf = log_dir / f"{scenario}-{spec.id}.conf"
    conf.write_text(qdrouterd_config(spec, port, ir_port, ports))
    return [QDROUTERD_BINARY, "-c", str(conf)]


@contextmanager
def network(
    specs: tuple[Spec, ...],
    log_dir: Path,
    scenario: str,
    *,
    append: bool = False,
    source: bool = False,
    telemetry: dict[str, Any] | None = None,
    config: Callable[[str], dict[str, Any]] | None = None,
    qdrouterd: bool = False,
    sequential: bool = False,
    timings: dict[str, float] | None = None,
) -> Iterator[tuple[dict[str, Router], dict[str, dict[str, Any]]]]:
    """Starts one fresh interior router per spec and waits until every router reaches every
    other at its shortest-path cost; yields the routers and each one's `router.node` view.
    Stops them all on the way out, whatever happens. Router logs (JSON lines) go to
    `<log_dir>/<scenario>-<id>.log`, appended to if `append`. `source`: the routers run their
    plain Python source. `telemetry`: the routers' telemetry section, in a JSON config file
    beside the log (`<scenario>-<id>.config.log`, ignored by git like the logs; the flags give
    the rest). `config`: more of each router's configuration by its id (`addresses`, `store`),
    in that same file. `qdrouterd`: qdrouterd routers (QDROUTERD) instead, one worker thread
    each, configured alike (`<scenario>-<id>.conf`). `sequential`: each router listens before
    the next starts, so that no connector finds its peer not yet there (qdrouterd would wait 5
    s to dial again). `timings`: filled with the monotonic times at which every router
    listened (``listening``) and the network converged (``converged``)."""
    env = {**os.environ, "ROUTERNET_PURE": "1" if source else ""}
    chosen = iter(free_ports(2 * len(specs)))
    ports = {s.id: (next(chosen), next(chosen)) for s in specs}
    expected = shortest_costs(specs)
    routers: dict[str, Router] = {}
    with ExitStack() as stack:
        for spec in specs:
            port, ir_port = ports[spec.id]
            command = router_process(spec, port, ir_port, ports, log_dir, scenario, qdrouterd)
            if telemetry is not None or config is not None:
                settings: dict[str, Any] = {"router": {"id": spec.id}}
                settings.update(config(spec.id) if config is not None else {})
                if telemetry is not None:
                    settings["telemetry"] = telemetry
                path = log_dir / f"{scenario}-{spec.id}.config.log"  # JSON; beside the log
                path.write_text(json.dumps(settings))
                command += ["--config", str(path)]
            log = stack.enter_context(
                (log_dir / f"{scenario}-{spec.id}.log").open("ab" if append else "wb")
            )
            proc = stack.enter_context(
                running(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_DIR, env=env)
            )
            routers[spec.id] = Router(spec.id, port, ir_port, proc)
            if sequential:
                try:
                    wait_for_port(proc, port, f"router {spec.id}", START_TIMEOUT_S)
                except BenchError as e:
                    raise BenchError(f"{e}; see {log_dir}/{scenario}-*.log") from e
        try:
            for r in routers.values():
                wait_for_port(r.proc, r.port, f"router {r.id}", START_TIMEOUT_S)
            if timings is not None:
                timings["listening"] = time.monotonic()
            with ExitStack() as mgmt_stack:
                mgmts = {
                    rid: mgmt_stack.enter_context(management(r.port)) for rid, r in routers.items()
                }
                views = wait_until(
                    lambda: _converged(mgmts, expected), CONVERGE_TIMEOUT_S, "network convergence"
                )
                if timings is not None:
                    timings["converged"] = time.monotonic()
        except BenchError as e:
            raise BenchError(f"{e}; see {log_dir}/{scenario}-*.log") from e
        yield routers, views
