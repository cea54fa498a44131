"""The local backend end to end: `routernet up` of examples/ as real router processes on
127.0.0.x, traffic across them, an Address added while running (applied live, no restart),
`status --json`, and `down` leaving nothing running. Invalid files change nothing."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from clients import ACCEPTED, World
from proton import Message
from router_operator.cli import main as local_cli
from router_operator.local import backend as local

pytestmark = pytest.mark.network

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
CLI = [sys.executable, "-m", "router_operator.cli.main"]
INTERIORS = ["core-0", "core-1", "core-2"]
EDGES = ["edge-0", "edge-1"]
# A bound on waits for a condition (converged, applied, delivered): seconds on an idle machine,
# many times that on a loaded one.
TIMEOUT = 60.0


def routernet(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of its own, as a user runs it (the routers are not our children)."""
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def eventually(what: str, check: Callable[[], Any], timeout: float = TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)
    return result


def is_router(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"router" in cmdline and b"--config" in cmdline


def running_command(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, reparented and not reaped yet, has no command line)."""
    try:
        return bool(Path(f"/proc/{pid}/cmdline").read_bytes())
    except OSError:
        return False


def routers_of(state: Path) -> list[int]:
    """Every process running a config file of this state directory."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if str(state / "config").encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
    return found


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    """A state directory whose routers are always stopped afterwards, whatever happened."""
    path = tmp_path / "state"
    try:
        yield path
    finally:
        stop_all(path)


def stop_all(state: Path) -> None:
    """`down`, then SIGKILL whatever of the state directory still runs."""
    with contextlib.suppress(Exception):
        local.down(state, timeout=2)
    for pid in routers_of(state):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def status_json(state: Path) -> dict[str, Any]:
    """`routernet status --json` once every router has answered it: the CLI gives each one
    local.MANAGEMENT_TIMEOUT, and reports one too busy to answer in that with an error."""

    def answered() -> dict[str, Any] | None:
        result = routernet("status", "--state-dir", str(state), "--json")
        assert result.returncode == 0, result.stderr
        shown: dict[str, Any] = json.loads(result.stdout)
        return shown if all(r["error"] is None for r in shown["routers"]) else None

    return eventually("every router to answer status", answered)


def converged(state: Path) -> dict[str, Any] | None:
    """The status once every interior routes to the other two and every edge has an uplink."""
    report = local.status(state, TIMEOUT)
    assert report is not None
    for r in report["routers"]:
        if r["error"] is not None:
            return None
        routes = {n["id"] for n in r["knownRouters"]}
        if r["mode"] == "interior" and routes != set(INTERIORS) - {r["id"]}:
            return None
        if r["mode"] == "edge" and not r.get("uplink"):
            return None
    return report


def uplink_in_log(log: Path) -> str | None:
    """The interior an edge last said it took as its uplink (its `edge.uplink` log line)."""
    found = re.findall(r"event=edge\.uplink conn=\S+ peer=\S+ container=(\S+)", log.read_text())
    return found[-1] if found else None


def uplinks_as_the_edges_say(state: Path) -> bool:
    """Whether `status` names, for every edge, the interior the edge's log says it uses."""
    report = local.status(state, TIMEOUT)
    assert report is not None
    edges = [r for r in report["routers"] if r["mode"] == "edge"]
    return all(r["uplink"] == uplink_in_log(Path(r["log"])) for r in edges)


def knows(state: Path, router: str, address: str, hosts: set[str]) -> bool:
    """Whether `router` knows consumers of `address` on every router of `hosts`."""
    report = local.status(state, TIMEOUT)
    assert report is not None
    row = next(
        (
            a
            for r in report["routers"]
            if r["id"] == router
            for a in r["addresses"]
            if a["address"] == address
        ),
        None,
    )
    if row is None:
        return False
    have = set(row["remoteHostRouters"]) | ({router} if row["localConsumers"] else set())
    return hosts <= have


def running(state: Path) -> dict[str, dict[str, Any]]:
    """The routers as `status` reports them, by id."""
    report = local.status(state, TIMEOUT)
    assert report is not None
    return {r["id"]: r for r in report["routers"]}


def distributions(state: Path, address: str) -> dict[str, str]:
    report = local.status(state, TIMEOUT)
    assert report is not None
    return {
        r["id"]: a["distribution"]
        for r in report["routers"]
        for a in r["addresses"]
        if a["address"] == address
    }


# Five routers and a collector up, changed and down: a minute on an idle machine, several beside a
# CPU hog; each wait in it has its own bound.
@pytest.mark.timeout(600)
def test_examples_run_change_live_and_stop(tmp_path: Path, state: Path, world: World) -> None:
    files = tmp_path / "examples"
    shutil.copytree(EXAMPLES, files)

    # --- up: five routers, each on a loopback address of its own -------------------------------
    result = routernet("up", "--state-dir", str(state), str(files))
    assert result.returncode == 0, result.stderr
    for name in INTERIORS + EDGES:
        assert name in result.stdout and "started" in result.stdout
    # A telemetry collector, on the first interior, writing under the state directory.
    assert "telemetry collector of network default: amqp://" in result.stdout
    report = eventually("the mesh and the edges' uplinks", lambda: converged(state))
    routers = {r["id"]: r for r in report["routers"]}
    assert sorted(routers) == INTERIORS + EDGES
    hosts = [r["host"] for r in routers.values()]
    assert len(set(hosts)) == 5 and all(h.startswith("127.0.0.") for h in hosts)
    for r in routers.values():
        assert r["running"] and r["clientEndpoints"] == [f"{r['host']}:5672"]
        assert r["mode"] == ("interior" if r["id"] in INTERIORS else "edge")
    pids = {name: r["pid"] for name, r in routers.items()}
    assert all(is_router(pid) for pid in pids.values())

    # --- status --json: the same, as the CLI prints it ------------------------------------------
    shown = status_json(state)
    assert shown["namespace"] == "default" and shown["files"] == [str(files)]
    assert {a["key"]: a["distribution"] for a in shown["addresses"]} == {
        "pattern:sensors.*.temperature": "multicast",
        "prefix:jobs": "balanced",
        "prefix:orders": "balanced",
        "prefix:requests": "closest",
    }
    by_id = {r["id"]: r for r in shown["routers"]}

    # --- a queue the network hosts (examples' `jobs`): stored on a core pod, in the state dir --
    sent = routernet(
        "send", "--state-dir", str(state), "--router", "edge", "--count", "7", "jobs.t"
    )
    assert sent.returncode == 0, sent.stderr
    [node] = [n for n in status_json(state)["nodes"] if n["name"] == "jobs.t"]
    assert node["router"] in INTERIORS and node["depth"] == 7 and node["type"] == "queue"
    assert any((state / "store" / node["router"]).glob("*.log"))
    assert {r: by_id[r]["pid"] for r in by_id} == pids
    for name in INTERIORS:
        inter = {c["peer"] for c in by_id[name]["connections"] if c["role"] == "inter-router"}
        assert inter == set(INTERIORS) - {name}  # the full mesh, each pair once
        assert by_id[name]["interRouterEndpoints"] == [f"{by_id[name]['host']}:55672"]
        assert by_id[name]["edgeEndpoints"] == [f"{by_id[name]['host']}:45672"]
    for name in EDGES:
        edge = {c["peer"] for c in by_id[name]["connections"] if c["role"] == "edge"}
        assert edge == set(INTERIORS)  # one uplink and two in reserve
        assert by_id[name]["uplink"] in INTERIORS
    eventually("status naming the uplinks the edges use", lambda: uplinks_as_the_edges_say(state))
    assert {(c["from"], c["to"]) for c in shown["connections"] if c["role"] == "inter-router"} == {
        ("core-1", "core-0"),
        ("core-2", "core-0"),
        ("core-2", "core-1"),
    }
    [collector] = shown["collectors"]
    assert collector["running"] and collector["router"] == "core-0"
    assert collector["url"] == f"amqp://{by_id['core-0']['clientEndpoints'][0]}"
    assert collector["dataset"] == str(state.resolve() / "telemetry")
    assert "event=collector.attached" in Path(collector["log"]).read_text()
    text = routernet("status", "--state-dir", str(state))
    assert text.returncode == 0 and "INTER-ROUTER" in text.stdout and "edge-1" in text.stdout
    assert "collector-default" in text.stdout
    # Each router's metrics and probes on its own address, as in its pod.
    for r in by_id.values():
        http = r["httpEndpoint"]
        assert http == f"http://{r['host']}:9090" and http in text.stdout
        with urllib.request.urlopen(f"{http}/readyz", timeout=TIMEOUT) as response:
            assert response.status == 200
        with urllib.request.urlopen(f"{http}/metrics", timeout=TIMEOUT) as response:
            assert f'routernet_routers_reachable{{router="{r["id"]}"}}' in response.read().decode()

    # --- traffic: a client on one edge reaches a consumer on the other through the mesh ---------
    def url(name: str) -> str:
        return f"amqp://{routers[name]['clientEndpoints'][0]}"

    consumer = world.connect(url("edge-0")).receiver("requests.echo")
    client = world.connect(url("edge-1")).sender("requests.echo", resend=True)
    # Released until the network knows the consumer: the sender resends, as reliable ones do.
    sent = client.send(Message(body="from edge-1"))
    world.run_until(lambda: sent.final.settled, timeout=TIMEOUT, what="the request")
    assert sent.final.state == ACCEPTED and consumer.bodies == ["from edge-1"]
    # From an interior that is not the consumer's uplink: across an inter-router connection.
    uplink = routers["edge-0"]["uplink"]
    other = next(name for name in INTERIORS if name != uplink)
    sent = world.connect(url(other)).sender("requests.echo", resend=True).send(Message(body="x"))
    world.run_until(lambda: sent.final.settled, timeout=TIMEOUT, what="the message from " + other)
    assert sent.final.state == ACCEPTED and consumer.bodies[-1] == "x"
    # A consumer of an address in edge-0's space on another interior counts there as one for
    # `_edge/edge-0`: status still names the uplink edge-0 uses (it once took the last interior
    # in name order that had such a consumer).
    decoy = max(name for name in INTERIORS if name != uplink)
    probe = world.connect(url(decoy)).receiver("_edge/edge-0/status.probe")
    world.run_until(lambda: probe.attached, timeout=TIMEOUT, what="the probe at " + decoy)
    assert running(state)["edge-0"]["uplink"] == uplink
    assert uplinks_as_the_edges_say(state)
    probe.close()

    # --- an Address added while running: applied live, no router restarted ---------------------
    news = [world.connect(url(name)).receiver("late.news") for name in EDGES]
    eventually(
        "late.news consumers known",
        lambda: knows(state, "core-2", "late.news", {routers[e]["uplink"] for e in EDGES}),
    )
    assert set(distributions(state, "late.news").values()) == {"balanced"}  # the default
    watcher = subprocess.Popen(
        [*CLI, "up", "--watch", "--state-dir", str(state), str(files)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert watcher.stdout is not None
        eventually("the watcher's first pass", lambda: "watching" in watcher.stdout.readline())
        (files / "late.yaml").write_text(
            textwrap.dedent(
                """\
                apiVersion: routernet.io/v1alpha1
                kind: Address
                metadata:
                  name: late
                spec:
                  prefix: late
                  distribution: multicast
                """
            )
        )
        # Every router answers status with its late.news row (one too busy to answer in time
        # is left out of `status`, not counted as applying it).
        seen = eventually(
            "every router to apply multicast for late.news",
            lambda: (
                (d := distributions(state, "late.news")).keys() >= {*INTERIORS, *EDGES}
                and set(d.values()) == {"multicast"}
                and d
            ),
        )
        assert set(seen) >= set(INTERIORS) | set(EDGES)
        # And it behaves so: one message from core-2, a copy to each edge's consumer.
        publisher = world.connect(url("core-2")).sender("late.news", presettled=True)
        world.run_until(lambda: publisher.credit > 0, what="credit for late.news")
        publisher.send(Message(body="extra!"))
        world.run_until(
            lambda: all(r.bodies == ["extra!"] for r in news), timeout=TIMEOUT, what="copies"
        )
        watcher.send_signal(signal.SIGINT)
        out, _ = watcher.communicate(timeout=TIMEOUT)
        assert watcher.returncode == 0, out
        assert "prefix:late multicast" in out and "routers keep running" in out
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    assert {name: r["pid"] for name, r in running(state).items()} == pids  # the same processes
    declared = routernet("status", "--state-dir", str(state), "--json").stdout
    assert "prefix:late" in {a["key"] for a in json.loads(declared)["addresses"]}

    # --- scaling: a new edge router starts on an address of its own, then goes again ----------
    routers_yaml = files / "routers.yaml"
    original = routers_yaml.read_text()
    assert "replicas: 2 " in original
    routers_yaml.write_text(original.replace("replicas: 2 ", "replicas: 3 "))
    result = routernet("up", "--state-dir", str(state), str(files))
    assert result.returncode == 0, result.stderr
    assert "edge-2" in result.stdout and "started" in result.stdout
    scaled = running(state)
    assert scaled["edge-2"]["running"] and scaled["edge-2"]["host"] not in hosts
    assert {name: scaled[name]["pid"] for name in pids} == pids
    routers_yaml.write_text(original)
    result = routernet("up", "--state-dir", str(state), str(files))
    assert result.returncode == 0, result.stderr
    assert "stopped (removed)" in result.stdout
    assert not is_router(scaled["edge-2"]["pid"])
    assert {name: r["pid"] for name, r in running(state).items()} == pids

    # --- an invalid change while running: refused, nothing touched ------------------------------
    configs = {p.name: p.read_bytes() for p in (state / "config").iterdir()}
    (files / "late.yaml").write_text(
        (files / "late.yaml").read_text().replace("prefix: late", "prefix: later")
    )
    result = routernet("up", "--state-dir", str(state), str(files))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"routernet: {files / 'late.yaml'}: Address 'late': spec: prefix is immutable:"
        " delete the Address and create a new one"
    ]
    assert {p.name: p.read_bytes() for p in (state / "config").iterdir()} == configs
    assert all(is_router(pid) for pid in pids.values())

    # --- down: SIGTERM, SIGKILL for a router that does not listen to it; nothing left -----------
    os.kill(pids["edge-1"], signal.SIGSTOP)
    result = routernet("down", "--state-dir", str(state), "--timeout", "1")
    assert result.returncode == 0, result.stderr
    assert "stopped 5 routers" in result.stdout and "edge-1 killed" in result.stdout
    # The collector after the routers (so their last telemetry is written), and cleanly.
    assert "then stopped the telemetry collectors: collector-default" in result.stdout
    assert not running_command(collector["pid"])
    assert "event=collector.stopped" in Path(collector["log"]).read_text()
    assert not any(is_router(pid) for pid in pids.values())
    assert routers_of(state) == []
    assert list((state / "pids").iterdir()) == []
    result = routernet("status", "--state-dir", str(state))
    assert result.returncode == 1 and result.stdout.count("not running") == 6


BAD = {
    "a field value": (
        """\
        apiVersion: routernet.io/v1alpha1
        kind: Address
        metadata: {name: orders}
        spec: {prefix: orders, distribution: nearest}
        """,
        "Address 'orders': spec.distribution: Input should be 'closest', 'balanced' or 'multicast'",
    ),
    "an unknown field": (
        """\
        apiVersion: routernet.io/v1alpha1
        kind: Router
        metadata: {name: core}
        spec: {replica: 3}
        """,
        "Router 'core': spec.replica: Extra inputs are not permitted",
    ),
    "a rule": (
        """\
        apiVersion: routernet.io/v1alpha1
        kind: Address
        metadata: {name: both}
        spec: {prefix: a, pattern: b.*}
        """,
        "Address 'both': spec: exactly one of prefix or pattern is required",
    ),
    "a kind": (
        """\
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: settings}
        """,
        "document 1: kind 'ConfigMap' is not a Routernet resource (Router, Address, LinkRoute,"
        " Gateway)",
    ),
    "YAML": ("kind: Router\nmetadata: {name: [core\n", "invalid YAML: line 3 column 1:"),
    "a conflict": (
        """\
        apiVersion: routernet.io/v1alpha1
        kind: Address
        metadata: {name: orders-2}
        spec: {prefix: orders, distribution: closest}
        """,
        "Address 'orders-2': prefix:orders is already declared by Address 'orders'",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_invalid_files_change_nothing(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, expected = BAD[case]
    bad = tmp_path / "bad.yaml"
    bad.write_text(textwrap.dedent(text))
    state = tmp_path / "state"
    code = local_cli.main(["up", "--state-dir", str(state), str(EXAMPLES), str(bad)])
    err = capsys.readouterr().err.splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith(f"routernet: {bad}: {expected}"), err
    assert not state.exists()  # nothing started, nothing written


def test_link_routes_added_while_running_are_applied_live(tmp_path: Path, state: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    (files / "routers.yaml").write_text(
        textwrap.dedent(
            """\
            apiVersion: routernet.io/v1alpha1
            kind: Router
            metadata: {name: hub}
            spec: {replicas: 1}
            ---
            apiVersion: routernet.io/v1alpha1
            kind: Router
            metadata: {name: leaf}
            spec: {replicas: 1, role: edge}
            """
        )
    )
    result = routernet("up", "--state-dir", str(state), str(files))
    assert result.returncode == 0, result.stderr
    pids = {name: r["pid"] for name, r in running(state).items()}
    assert sorted(pids) == ["hub-0", "leaf-0"]

    (files / "brokers.yaml").write_text(
        textwrap.dedent(
            """\
            apiVersion: routernet.io/v1alpha1
            kind: LinkRoute
            metadata: {name: queues}
            spec: {prefix: queue, containerId: broker-0}
            ---
            apiVersion: routernet.io/v1alpha1
            kind: LinkRoute
            metadata: {name: db}
            spec: {prefix: db, direction: out, connection: {host: 127.0.0.1, port: 1}}
            """
        )
    )
    result = routernet("up", "--state-dir", str(state), str(files))
    assert result.returncode == 0, result.stderr
    assert "link route +prefix:queue in, link route +prefix:queue out" in result.stdout
    assert "connector +linkroute/db" in result.stdout  # the interior's, to the broker
    assert "link routes: prefix:db out -> 127.0.0.1:1; prefix:queue both -> broker-0" in (
        result.stdout
    )
    hub = json.loads((state / "config" / "hub-0.json").read_text())
    assert hub["linkRoutes"][0] == {
        "prefix": "db",
        "direction": "out",
        "connection": "linkroute/db",
    }
    leaf = json.loads((state / "config" / "leaf-0.json").read_text())
    assert leaf["linkRoutes"] == hub["linkRoutes"]
    assert "linkroute/db" not in json.dumps(leaf["connectors"])
    # Live: the same processes, still running, after they have read the change.
    time.sleep(1.5)
    assert {name: r["pid"] for name, r in running(state).items()} == pids
    assert all(is_router(pid) for pid in pids.values())
    shown = json.loads(routernet("status", "--state-dir", str(state), "--json").stdout)
    assert [lr["name"] for lr in shown["linkRoutes"]] == ["db", "queues"]


def test_status_takes_an_edge_uplink_from_the_edge() -> None:
    """The uplink is the peer of the edge connection that carries the edge's anonymous sender,
    as the edge's own management lists them; a client's link of that name does not count, and
    no interior is asked (one may still hold a consumer for `_edge/<id>` the edge has left)."""
    connections = [
        {"identity": "1", "container": "core-0", "role": "edge", "dir": "out"},
        {"identity": "2", "container": "core-2", "role": "edge", "dir": "out"},
        {"identity": "7", "container": "app", "role": "normal", "dir": "in"},
    ]
    links = [
        {"name": "edge.uplink.edge-0", "linkDir": "in", "connectionId": "7"},
        {"name": "edge.proxy.edge-0._edge/edge-0", "linkDir": "in", "connectionId": "2"},
        {"name": "edge.uplink.edge-0", "linkDir": "out", "connectionId": "2"},
    ]
    assert local.edge_uplink({"connection": connections, "router.link": links}) == "core-2"
    assert local.edge_uplink({"connection": connections, "router.link": links[:2]}) is None
