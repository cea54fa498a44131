"""`routernet up` scaling in a Router with a store (operator/router_operator/local/handoff.py):
the leaving router hands its queues to the one that stays before it is stopped. The waiting,
pure; then real routers on 127.0.0.x: durable messages on the queues of hub-1, hub scaled from
2 to 1 with `up`, every message consumed from hub-0, none lost, none twice, hub-1 stopped."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from proton import Message, Timeout
from proton.utils import BlockingConnection
from router_operator.cli import main as local_cli
from router_operator.local import backend as local
from router_operator.local import handoff as local_handoff
from router_operator.local import scaler as local_scaler
from router_operator.local.files import plan_files
from test_local_backend import eventually, running_command, state

from router.nodes.placement import owner

__all__ = ["state"]  # the fixture: its routers are stopped whatever happens

CLI = [sys.executable, "-m", "router_operator.cli.main"]

ROUTER = """\
apiVersion: routernet.io/v1alpha1
kind: Router
metadata: {{name: hub}}
spec: {{replicas: {replicas}, store: {{}}}}
"""
ADDRESS = """\
apiVersion: routernet.io/v1alpha1
kind: Address
metadata: {name: jobs}
spec: {prefix: jobs, node: {type: queue, router: hub}}
"""


# --- waiting for the leaving routers, pure -----------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_pods_a_state_lists_are_its_routers_replicas() -> None:
    pods = {
        "hub-0": {"router": "hub"},
        "hub-2": {"router": "hub"},  # hub-1 not listed: the replicas are still 3
        "core-0": {"router": "core"},
        "a-b-1": {"router": "a-b"},
        "odd": {"router": "odd"},
    }
    assert local_handoff.running_replicas(pods) == {"hub": 3, "core": 1, "a-b": 2}


def test_what_a_router_holds_leaves_out_what_its_clients_made() -> None:
    rows = {
        local_handoff.NODE_ENTITY: [
            {"name": "jobs.a"},
            {"name": "_topo/0/hub-1/temp.x"},
            {"name": "_topo/0/hub-10/temp.y"},  # another router's name: counted
        ]
    }
    assert local_handoff.held("hub-1", rows) == 2
    assert local_handoff.held("hub-1", {}) == 0  # an older router, no such type: holds none


def test_the_wait_lets_the_configs_settle_then_ends_when_all_are_empty() -> None:
    clock = Clock()
    held = {"hub-1": [3, 1, 0], "hub-2": [None, 0]}
    asked: list[tuple[float, str]] = []

    def held_by(pod: str) -> int | None:
        asked.append((clock.now, pod))
        counts = held[pod]
        return counts.pop(0) if len(counts) > 1 else counts[0]

    pending = local_handoff.wait_handed_off(
        ["hub-1", "hub-2"], held_by, 60, settle=1.0, clock=clock, sleep=clock.sleep
    )
    assert pending == {}
    assert min(t for t, _ in asked) >= 1.0, "nobody is asked before their config is read"
    assert [p for _, p in asked] == ["hub-1", "hub-2", "hub-1", "hub-2", "hub-1"]


def test_the_wait_gives_up_naming_what_each_still_holds() -> None:
    clock = Clock()
    answers = {"hub-1": 2, "hub-2": None, "hub-3": 0}
    pending = local_handoff.wait_handed_off(
        list(answers), answers.get, 10, settle=1.0, clock=clock, sleep=clock.sleep
    )
    assert pending == {"hub-1": 2, "hub-2": None}
    assert 10 <= clock.now < 11
    line = local_handoff.left_running_line(pending)
    assert line.startswith("hub-1 still holds 2 nodes; hub-2 did not answer: left running")
    assert "run `up` again" in line
    assert local_handoff.progress_line(["hub-1"], 60) == (
        "hub-1 moves its queues and topics to the routers that stay before stopping"
        " (waiting up to 60 s)"
    )


def test_a_store_router_running_more_pods_is_planned_in_two_steps(tmp_path: Path) -> None:
    (tmp_path / "hub.yaml").write_text(ROUTER.format(replicas=1) + "---\n" + ADDRESS)
    planned = plan_files([str(tmp_path / "hub.yaml")], running={"hub": 3})
    assert sorted(planned.plan.pods()) == ["hub-0"]
    assert planned.interim is not None
    interim = planned.interim.pods()
    assert sorted(interim) == ["hub-0", "hub-1", "hub-2"]
    for pod in interim.values():
        assert pod.config is not None and pod.config.addresses[0].node is not None
        assert pod.config.addresses[0].node.hosts == ["hub-0"]
    [step] = planned.handoffs
    assert (step.router, step.replicas, step.hosts) == ("hub", 3, 1)
    # Scaling out, or a Router without a store: one step, as before.
    assert plan_files([str(tmp_path / "hub.yaml")], running={"hub": 1}).interim is None
    (tmp_path / "hub.yaml").write_text(ROUTER.format(replicas=1).replace(", store: {}", ""))
    assert plan_files([str(tmp_path / "hub.yaml")], running={"hub": 3}).interim is None


def test_status_shows_a_connection_still_opening() -> None:
    """A router whose peer stopped answering mid-hand-off has a connection without a peer yet:
    `routernet status` shows it as "?" rather than failing."""
    connections = [
        {"peer": None, "role": "inter-router", "dir": "out", "host": "127.0.0.2:55672"},
        {"peer": "hub-0", "role": "inter-router", "dir": "out", "host": "127.0.0.2:55672"},
        {"peer": None, "role": "edge", "dir": "in", "host": "127.0.0.9:4000"},
    ]
    router = {
        "id": "hub-1",
        "mode": "interior",
        "pid": 42,
        "clientEndpoints": ["127.0.0.3:5672"],
        "httpEndpoint": None,
        "error": None,
        "connections": connections,
        "knownRouters": [],
        "addresses": [],
    }
    report = {
        "namespace": "default",
        "stateDir": "/state",
        "routers": [router],
        "addresses": [],
        "linkRoutes": [],
        "collectors": [],
        "autoscaler": {"routers": {}, "running": False},
        "nodes": [],
    }
    [row] = [line for line in local_cli.format_status(report).splitlines() if "hub-1" in line]
    assert row.split()[5:7] == ["?", "hub-0"] and row.split()[7] == "?"


def test_the_local_autoscaler_runs_up_again_until_a_scale_in_is_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`up` from the autoscaler left leaving routers running: its next passes run `up` again
    (without that nothing would, the replicas being unchanged), and stop once it is done."""
    outcomes: list[dict[str, int | None]] = [{"hub-1": 2}, {"hub-1": None}, {}]
    calls: list[Path] = []

    def up(state_dir: Path, *args: object, **kwargs: object) -> local.Applied:
        calls.append(state_dir)
        return local.Applied("default", state_dir, (), {}, (), (), handing_off=outcomes.pop(0))

    monkeypatch.setattr(local, "up", up)
    local.State().save(tmp_path)  # no autoscaled Router: only the unfinished scale-in runs `up`
    scaler = local_scaler.LocalScaler(tmp_path, 1.0)
    scaler.up(collector=False)
    assert scaler.unfinished and len(calls) == 1
    scaler.tick()
    assert scaler.unfinished and len(calls) == 2
    scaler.tick()
    assert not scaler.unfinished and len(calls) == 3
    scaler.tick()
    assert len(calls) == 3


# --- real routers ------------------------------------------------------------------------------

COUNT = 60


def queue_names(host: str, hosts: list[str], n: int) -> list[str]:
    """``n`` queue names under jobs that the routers place on ``host``."""
    names = (f"jobs.q{i}" for i in itertools.count())
    return list(itertools.islice((q for q in names if owner(q, hosts) == host), n))


def endpoint(state_dir: Path, pod: str) -> str:
    record = local.State.load(state_dir.resolve())
    assert record is not None
    return str(record.pods[pod]["clientEndpoints"][0])


def meshed(state_dir: Path) -> bool:
    report = local.status(state_dir)
    assert report is not None
    pods = {"hub-0", "hub-1"}
    return all(
        r["error"] is None and {n["id"] for n in r["knownRouters"]} == pods - {r["id"]}
        for r in report["routers"]
    )


def depths(state_dir: Path) -> dict[str, tuple[str, int]]:
    report = local.status(state_dir)
    assert report is not None
    return {n["name"]: (n["router"], n["depth"]) for n in report["nodes"]}


@pytest.mark.network
@pytest.mark.timeout(180)
def test_scaling_in_moves_the_leaving_routers_messages_first(tmp_path: Path, state: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    (files / "hub.yaml").write_text(ROUTER.format(replicas=2))
    (files / "jobs.yaml").write_text(ADDRESS)
    up = [*CLI, "up", "--no-collector", "--state-dir", str(state), str(files)]
    result = subprocess.run(up, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    eventually("the mesh", lambda: meshed(state), timeout=30)

    leaving = queue_names("hub-1", ["hub-0", "hub-1"], 2)
    staying = queue_names("hub-0", ["hub-0", "hub-1"], 1)
    sent: dict[str, list[str]] = {}
    conn = BlockingConnection(f"amqp://{endpoint(state, 'hub-0')}", timeout=20)
    try:
        for queue in leaving + staying:
            sender = conn.create_sender(queue)
            sent[queue] = [f"{queue}/{i}" for i in range(COUNT)]
            for body in sent[queue]:
                sender.send(Message(body=body, durable=True))  # returns once accepted
            sender.close()
    finally:
        conn.close()
    before = depths(state)
    assert {q: before[q] for q in sent} == {
        q: ("hub-1" if q in leaving else "hub-0", COUNT) for q in sent
    }
    hub_1 = local.running_pid(state.resolve(), "hub-1")
    assert hub_1 is not None

    (files / "hub.yaml").write_text(ROUTER.format(replicas=1))
    result = subprocess.run(up, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "hub-1 moves its queues and topics to the routers that stay" in result.stdout
    [line] = [line for line in result.stdout.splitlines() if line.startswith("hub-1 ")]
    assert line.split()[-2:] == ["stopped", "(removed)"], result.stdout
    assert not running_command(hub_1), "the leaving router is stopped"
    assert local.running_pid(state.resolve(), "hub-1") is None

    after = depths(state)
    assert {q: after[q] for q in sent} == {q: ("hub-0", COUNT) for q in sent}, after
    conn = BlockingConnection(f"amqp://{endpoint(state, 'hub-0')}", timeout=20)
    try:
        for queue, bodies in sent.items():
            receiver = conn.create_receiver(queue, credit=COUNT)
            got = []
            for _ in bodies:
                got.append(receiver.receive(timeout=10).body)
                receiver.accept()
            assert sorted(got) == sorted(bodies), queue  # every one, none twice
            with pytest.raises(Timeout):
                receiver.receive(timeout=0.5)  # and nothing more
            receiver.close()
    finally:
        conn.close()
    assert not os.path.exists(state / "pids" / "hub-1.pid")
    record = json.loads((state / "state.json").read_text())
    assert sorted(record["pods"]) == ["hub-0"]
