"""The routers' reports on their own Pods (router/pod/status.py): what each mode reports, the
reporter thread (changes only, the latest value, backoff, never blocking the router's loop),
its registration, and real router processes writing their Pods' annotation through a
Kubernetes API (kmock's emulator), followed by the operator's verdict (planning/mesh.py) on them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from harness import RouterNetwork, RouterProcess, free_port, write_kubeconfig
from router_operator.planning.mesh import mesh_verdicts, pod_report
from router_operator.planning.planner import RouterDecl

from router import cli
from router.config.live import apply_config
from router.config.models import validate_config
from router.core import engine
from router.pod.report import (
    ANNOTATION,
    STORE_ANNOTATION,
    StoreReport,
    annotation_value,
    parse_annotation,
    parse_store,
)
from router.pod.status import (
    MERGE_PATCH,
    PodAnnotator,
    PodStatusSource,
    pod_status_sources,
    reachable_routers,
    store_state,
)

NS = "ns"


def wait_for(condition: Callable[[], Any], timeout: float = 5.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what or condition}"
        time.sleep(0.005)


def interior(*ids: str) -> Any:
    return SimpleNamespace(
        network=SimpleNamespace(routes=SimpleNamespace(cost=dict.fromkeys(ids, 1))), edge=None
    )


def edge(uplink: str | None) -> Any:
    active = None if uplink is None else SimpleNamespace(remote_container=uplink)
    return SimpleNamespace(network=None, edge=SimpleNamespace(active=active))


class Recorder:
    """A patch function that records what it was sent; it fails while ``failing`` is set and
    waits while ``hold`` is clear."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, dict[str, Any]]] = []
        self.sent: list[str] = []
        self.failing = False
        self.hold = threading.Event()
        self.hold.set()

    def __call__(self, body: dict[str, Any]) -> None:
        self.calls.append((time.monotonic(), body))
        self.hold.wait(10)
        if self.failing:
            raise ConnectionRefusedError("API unreachable")
        self.sent.append(body["metadata"]["annotations"][ANNOTATION])


def source(recorder: Recorder, **options: Any) -> PodStatusSource:
    options = {"settle": 0.0, "rand": lambda: 0.5, **options}
    return PodStatusSource(NS, "r-0", patch_fn=recorder, **options)


# --- what a router reports -----------------------------------------------------------------------


def test_what_each_mode_reports() -> None:
    assert reachable_routers(interior("r-2", "r-1")) == {"r-1", "r-2"}
    assert reachable_routers(interior()) == frozenset()
    assert reachable_routers(edge("r-1")) == {"r-1"}
    assert reachable_routers(edge(None)) == frozenset()
    assert reachable_routers(SimpleNamespace(network=None, edge=None)) is None  # standalone
    assert annotation_value(frozenset({"b-1", "a-0", "b-10"})) == "a-0,b-1,b-10"
    assert annotation_value(frozenset()) == ""
    assert parse_annotation("a-0,b-1") == {"a-0", "b-1"}
    assert parse_annotation("") == frozenset()
    assert parse_annotation(None) is None


# --- the reporter --------------------------------------------------------------------------------


def test_reports_once_at_start_then_changes_only() -> None:
    recorder = Recorder()
    src = source(recorder)
    router = interior()
    src.start(router)
    try:
        wait_for(lambda: recorder.sent == [""], what="the report at start")
        for _ in range(20):
            src.poll(time.monotonic())
        router.network.routes = SimpleNamespace(cost={"r-2": 2, "r-1": 1})
        src.poll(time.monotonic())
        wait_for(lambda: recorder.sent == ["", "r-1,r-2"])
        router.network.routes = SimpleNamespace(cost={"r-1": 1, "r-2": 1})  # same set, new costs
        for _ in range(20):
            src.poll(time.monotonic())
        router.network.routes = SimpleNamespace(cost={"r-1": 1})
        src.poll(time.monotonic())
        wait_for(lambda: recorder.sent == ["", "r-1,r-2", "r-1"])
        time.sleep(0.05)
        assert len(recorder.calls) == 3
        body = recorder.calls[-1][1]
        assert body == {"metadata": {"annotations": {ANNOTATION: "r-1"}}}  # a merge patch
    finally:
        src.stop()
        assert src.annotator is not None
        src.annotator.join(5)
        assert not src.annotator._thread or not src.annotator._thread.is_alive()
    src.poll(time.monotonic())  # stopped: nothing happens
    src.stop()  # twice (the drain, then the shutdown)


def test_a_standalone_router_reports_nothing() -> None:
    recorder = Recorder()
    src = source(recorder)
    src.start(SimpleNamespace(network=None, edge=None))
    try:
        src.poll(time.monotonic())
        time.sleep(0.1)
        assert recorder.calls == []
    finally:
        src.stop()


def test_changes_while_settling_make_one_write_of_the_latest() -> None:
    recorder = Recorder()
    src = source(recorder, settle=0.3)
    router = interior()
    src.start(router)
    try:
        for ids in (["r-1"], ["r-1", "r-2"], ["r-1", "r-2", "r-3"]):
            router.network.routes = SimpleNamespace(cost=dict.fromkeys(ids, 1))
            src.poll(time.monotonic())
        wait_for(lambda: recorder.sent, what="a write")
        time.sleep(0.4)
        assert recorder.sent == ["r-1,r-2,r-3"]
    finally:
        src.stop()


def test_errors_back_off_and_the_latest_value_is_sent_after() -> None:
    recorder = Recorder()
    recorder.failing = True
    annotator = PodAnnotator(
        NS, "r-0", patch_fn=recorder, settle=0.0, rand=lambda: 0.5, initial_backoff=0.05
    )
    annotator.start()
    try:
        annotator.offer("r-1")
        wait_for(lambda: len(recorder.calls) >= 4, what="four attempts")
        annotator.offer("r-1,r-2")  # while failing: the old value is never sent after this
        times = [t for t, _ in recorder.calls[:4]]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        for gap, delay in zip(gaps, (0.05, 0.1, 0.2), strict=True):
            assert gap >= delay * 0.9, gaps  # doubling from initial_backoff
        assert annotator.failures >= 3
        recorder.failing = False
        wait_for(lambda: recorder.sent, timeout=5, what="a write once the API answers")
        assert recorder.sent == ["r-1,r-2"]
        assert annotator.failures == 0 and annotator.written == "r-1,r-2"
        attempts = len(recorder.calls)
        time.sleep(0.3)
        assert len(recorder.calls) == attempts, "nothing more to send"
    finally:
        annotator.stop()
        annotator.join(5)


def test_a_hung_api_never_blocks_the_loop() -> None:
    """The patch hangs: the loop's poll and stop return at once, and the thread sends the
    latest value when the request finally returns."""
    recorder = Recorder()
    recorder.hold.clear()
    src = source(recorder)
    router = interior()
    src.start(router)
    try:
        wait_for(lambda: recorder.calls, what="the first request")
        started = time.monotonic()
        for i in range(1, 50):
            router.network.routes = SimpleNamespace(cost=dict.fromkeys([f"r-{i}"], 1))
            src.poll(time.monotonic())
        assert time.monotonic() - started < 0.5
        assert len(recorder.calls) == 1
        recorder.hold.set()
        wait_for(lambda: recorder.sent == ["", "r-49"], what="the latest value")
    finally:
        recorder.hold.set()
        src.stop()
        assert src.annotator is not None
        src.annotator.join(5)


def test_stop_returns_at_once_during_a_hung_request() -> None:
    recorder = Recorder()
    recorder.hold.clear()
    src = source(recorder)
    src.start(interior("r-1"))
    try:
        wait_for(lambda: recorder.calls, what="the request")
        started = time.monotonic()
        src.stop()
        assert time.monotonic() - started < 0.1
    finally:
        recorder.hold.set()
        assert src.annotator is not None
        src.annotator.join(5)
    assert recorder.sent == ["r-1"]  # the request in flight completes; nothing after it


def test_registered_only_in_a_pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert pod_status_sources({}) == []
    assert pod_status_sources({"POD_NAME": "r-0"}) == []
    [src] = pod_status_sources({"POD_NAME": "r-0", "POD_NAMESPACE": NS})
    assert (src.namespace, src.pod) == (NS, "r-0")

    config = tmp_path / "r-0.json"
    config.write_text(json.dumps({"router": {"id": "r-0"}, "listeners": [{"port": 5672}]}))
    served: list[list[Any]] = []
    monkeypatch.setattr(engine, "serve", lambda _config, sources=(): served.append(sources) or 0)
    for name in ("ROUTERNET_CONFIGMAP", "POD_NAME", "POD_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    assert cli.main(["--config", str(config)]) == 0
    assert not any(isinstance(s, PodStatusSource) for s in served[-1])
    monkeypatch.setenv("POD_NAME", "r-0")
    monkeypatch.setenv("POD_NAMESPACE", NS)
    assert cli.main(["--config", str(config)]) == 0
    [reporter] = [s for s in served[-1] if isinstance(s, PodStatusSource)]
    assert (reporter.namespace, reporter.pod) == (NS, "r-0")


# --- the store's report: may this pod go? --------------------------------------------------------


def with_store(router: Any, hosting: bool, held: int, path: str | None = "/store") -> Any:
    """A router (as `interior` or `edge` make them) with a store, or ``path`` None: without."""
    router.config = SimpleNamespace(store=SimpleNamespace(path=path))
    router.nodes = SimpleNamespace(hosting=hosting, held=lambda: held)
    return router


def test_what_a_store_reports() -> None:
    assert store_state(with_store(interior(), hosting=True, held=3)) == "host"
    assert store_state(with_store(interior(), hosting=False, held=2)) == "moving 2"
    assert store_state(with_store(interior(), hosting=False, held=0)) == "empty"
    assert store_state(with_store(interior(), hosting=True, held=0, path=None)) is None
    assert store_state(interior()) is None  # no config at all: nothing to say
    assert parse_store("host") == StoreReport("host", 0)
    assert parse_store("moving 12") == StoreReport("moving", 12)
    empty = parse_store("empty")
    assert empty == StoreReport("empty", 0) and empty.empty
    assert not StoreReport("moving", 0).empty and not StoreReport("host").empty
    # Not reported, or words this version does not know: never taken for empty.
    for value in (None, "", "moving", "moving -1", "moving 2 3", "gone", "EMPTY"):
        assert parse_store(value) is None, value


def test_a_real_router_reports_its_store(tmp_path: Path) -> None:
    """The router's own objects: a host, a host no more that still holds a node, one holding
    none; a router without a store says nothing."""
    from router.core.engine import Router

    def cfg(hosts: list[str], store: bool = True) -> Any:
        data: dict[str, Any] = {
            "router": {"id": "r-1"},
            "addresses": [{"prefix": "jobs", "node": {"type": "queue", "hosts": hosts}}],
        }
        if store:
            data["store"] = {"path": str(tmp_path / "store")}
        return validate_config(data)

    router = Router(cfg(["r-0", "r-1"]))
    try:
        assert store_state(router) == "host"
        assert router.nodes.node("jobs.a") is not None  # a node this router hosts, stored
        assert apply_config(router, cfg(["r-0"]), "test")
        assert store_state(router) == "moving 1"  # not a host: jobs.a is still here
        router.nodes.forget(router.nodes.nodes["jobs.a"])  # as the mover does once it moved
        assert store_state(router) == "empty"
        assert apply_config(router, cfg(["r-0", "r-1"]), "test")
        assert store_state(router) == "host"
    finally:
        router.nodes.close()
        router.sel.close()
    plain = Router(cfg(["r-0"], store=False))
    try:
        assert store_state(plain) is None
    finally:
        plain.sel.close()


class AllRecorder(Recorder):
    """Records every annotation each patch carries."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[dict[str, str]] = []

    def __call__(self, body: dict[str, Any]) -> None:
        self.bodies.append(dict(body["metadata"]["annotations"]))
        self.hold.wait(10)
        if self.failing:
            raise ConnectionRefusedError("API unreachable")


def test_the_store_is_reported_with_the_reachable_routers_changes_only() -> None:
    recorder = AllRecorder()
    src = source(recorder)
    router = with_store(interior("r-1"), hosting=True, held=2)
    src.start(router)
    try:
        start = {ANNOTATION: "r-1", STORE_ANNOTATION: "host"}
        wait_for(lambda: recorder.bodies == [start], what="both, in one patch, at start")
        for _ in range(20):
            src.poll(time.monotonic())
        router.nodes.hosting = False  # the config no longer makes it a host: it moves its nodes
        src.poll(time.monotonic())
        wait_for(lambda: recorder.bodies[1:] == [{STORE_ANNOTATION: "moving 2"}])
        router.nodes.held = lambda: 0
        router.network.routes = SimpleNamespace(cost={"r-1": 1, "r-2": 1})
        src.poll(time.monotonic())
        both = {ANNOTATION: "r-1,r-2", STORE_ANNOTATION: "empty"}
        wait_for(lambda: recorder.bodies[2:] == [both], what="what changed together, together")
        time.sleep(0.05)
        assert len(recorder.bodies) == 3
        assert src.annotator is not None
        assert src.annotator.sent == both and src.annotator.written == "r-1,r-2"
    finally:
        src.stop()


def test_a_failed_store_report_is_retried_with_its_latest_value() -> None:
    recorder = AllRecorder()
    recorder.failing = True
    annotator = PodAnnotator(
        NS, "r-0", patch_fn=recorder, settle=0.0, rand=lambda: 0.5, initial_backoff=0.02
    )
    annotator.start()
    try:
        annotator.offer_all({ANNOTATION: "r-1", STORE_ANNOTATION: "moving 1"})
        wait_for(lambda: len(recorder.bodies) >= 2, what="two attempts")
        annotator.offer_all({STORE_ANNOTATION: "empty"})  # the reachable routers stay offered
        recorder.failing = False
        expected = {ANNOTATION: "r-1", STORE_ANNOTATION: "empty"}
        wait_for(lambda: annotator.sent == expected, what="the latest values written")
        assert recorder.bodies[-1] == expected
    finally:
        annotator.stop()
        annotator.join(5)


# --- real routers, a Kubernetes API (kmock's emulator) ------------------------------------------

MESH3 = [("r-1", "r-0", 1), ("r-2", "r-0", 1), ("r-2", "r-1", 1)]
CONVERGE = 30.0


@pytest.mark.network
@pytest.mark.asyncio
async def test_routers_report_what_they_reach_on_their_pods(
    tmp_path: Path, kmock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three interiors in a mesh and an edge on r-0, each with POD_NAME and POD_NAMESPACE set
    and a kubeconfig for the emulator, as in a pod: each Pod's annotation converges to the
    others' ids (the edge's to its uplink), loses a router killed, regains it restarted; the
    operator's verdict on those Pods follows."""
    import aiohttp

    server = str(kmock.url).rstrip("/")
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("POD_NAMESPACE", NS)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("ROUTERNET_CONFIGMAP", raising=False)

    net = RouterNetwork(tmp_path, None, MESH3)
    hub = net["r-0"]
    edge_port = free_port(hub.host)
    hub.listeners.append({"host": hub.host, "port": edge_port, "role": "edge"})
    leaf = RouterProcess(
        tmp_path / "e-0",
        "e-0",
        extra_args=["--mode", "edge", "--connect", f"{hub.host}:{edge_port}"],
    )
    pods = [*net.names, "e-0"]
    decls = [RouterDecl("r", replicas=3), RouterDecl("e", replicas=1, role="edge")]

    async with aiohttp.ClientSession() as http:
        for name in pods:
            role = "edge" if name == "e-0" else "interior"
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": NS,
                    "labels": {"routernet.io/role": role, "routernet.io/network": "default"},
                    "annotations": {"other": "kept"},
                },
            }
            response = await http.post(f"{server}/api/v1/namespaces/{NS}/pods", json=pod)
            assert response.status == 200, await response.text()

        def launch(name: str) -> None:
            """Each process gets its own POD_NAME, read from the environment at launch."""
            monkeypatch.setenv("POD_NAME", name)
            (leaf if name == "e-0" else net[name]).start()

        def annotations() -> dict[str, str | None]:
            found = {}
            for name in pods:
                meta = kmock.objects["v1/pods", NS, name].raw["metadata"]
                assert meta["annotations"]["other"] == "kept"  # a merge patch: others stay
                found[name] = meta["annotations"].get(ANNOTATION)
            return found

        async def converge(expected: dict[str, str], what: str) -> None:
            deadline = time.monotonic() + CONVERGE
            while (found := annotations()) != {**found, **expected}:
                if time.monotonic() > deadline:
                    raise AssertionError(f"{what}: {found}, expected {expected}\n{net.logs()}")
                await asyncio.sleep(0.05)

        def verdicts() -> dict[str, tuple[str, str]]:
            reports = {n: pod_report(kmock.objects["v1/pods", NS, n].raw) for n in pods}
            return {k: (v.status, v.message) for k, v in mesh_verdicts(decls, reports).items()}

        try:
            for name in pods:
                await asyncio.to_thread(launch, name)
            everyone = {"r-0": "r-1,r-2", "r-1": "r-0,r-2", "r-2": "r-0,r-1", "e-0": "r-0"}
            await converge(everyone, "the full mesh")
            assert verdicts()["r"][0] == "True" and verdicts()["e"][0] == "True"

            await asyncio.to_thread(net.kill, "r-2")
            await converge({"r-0": "r-1", "r-1": "r-0"}, "r-2 killed")
            assert annotations()["r-2"] == "r-0,r-1"  # nobody is left to correct a dead router
            status, message = verdicts()["r"]
            assert status == "False"
            assert message == "r-0 does not see r-2; r-1 does not see r-2"
            assert verdicts()["e"] == verdicts()["r"]

            await asyncio.to_thread(launch, "r-2")
            await converge(everyone, "r-2 restarted")
            assert verdicts()["r"][0] == "True"
        finally:
            await asyncio.to_thread(net.stop)
            await asyncio.to_thread(leaf.stop)

    patches = [r for r in kmock if r.method.value == "PATCH" and r.name in pods]
    assert all(r.headers.get("Content-Type") == MERGE_PATCH for r in patches)
    for name in pods:
        values = [r.data["metadata"]["annotations"][ANNOTATION] for r in patches if r.name == name]
        repeated = [a for a, b in itertools.pairwise(values) if a == b]
        # Changes only; a restart writes once more what the Pod may already have.
        assert len(repeated) <= (1 if name == "r-2" else 0), (name, values)


@pytest.mark.network
@pytest.mark.asyncio
async def test_a_router_reports_its_store_on_its_pod(
    tmp_path: Path, kmock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A router with a store, in a pod as far as it can tell, writes ``routernet.io/store``
    through the API: host while its config says so, moving while it holds a node it no longer
    hosts (its new host, hub-0, does not exist: nothing moves), host again when it is again."""
    import aiohttp
    from proton import Message
    from proton.utils import BlockingConnection

    server = str(kmock.url).rstrip("/")
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kubeconfig", server)))
    monkeypatch.setenv("POD_NAMESPACE", NS)
    monkeypatch.setenv("POD_NAME", "hub-1")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("ROUTERNET_CONFIGMAP", raising=False)

    def jobs(hosts: list[str]) -> list[dict[str, Any]]:
        return [{"prefix": "jobs", "node": {"type": "queue", "hosts": hosts}}]

    router = RouterProcess(
        tmp_path / "hub-1",
        "hub-1",
        addresses=jobs(["hub-1"]),
        sections={"store": {"path": str(tmp_path / "store")}},
    )
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hub-1", "namespace": NS}}
    async with aiohttp.ClientSession() as http:
        response = await http.post(f"{server}/api/v1/namespaces/{NS}/pods", json=pod)
        assert response.status == 200, await response.text()

    def reported() -> dict[str, str]:
        return dict(kmock.objects["v1/pods", NS, "hub-1"].raw["metadata"].get("annotations", {}))

    async def converge(value: str) -> None:
        deadline = time.monotonic() + CONVERGE
        while reported().get(STORE_ANNOTATION) != value:
            assert time.monotonic() < deadline, (value, reported(), router.log_path.read_text())
            await asyncio.sleep(0.05)

    def send() -> None:
        conn = BlockingConnection(router.url, timeout=10)
        try:
            conn.create_sender("jobs.a").send(Message(body="kept", durable=True))
        finally:
            conn.close()

    await asyncio.to_thread(router.start)
    try:
        await converge("host")
        assert ANNOTATION not in reported()  # standalone: it reaches nobody to report
        await asyncio.to_thread(send)
        router.config["addresses"] = jobs(["hub-0"])
        router.rewrite_config()
        await converge("moving 1")
        router.config["addresses"] = jobs(["hub-0", "hub-1"])
        router.rewrite_config()
        await converge("host")
    finally:
        await asyncio.to_thread(router.stop)
