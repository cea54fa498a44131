"""Queues and topics inside the network, the operator's part: an Address's node folded into
every router config with the pods of its Router as hosts, problems when those pods cannot host
it, the Router's store as a PVC per pod (render), from the CRD objects (adapter). Pure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from router_operator.cli import main as local_cli
from router_operator.local import backend as local
from router_operator.local.files import InvalidInput, plan_files
from router_operator.planning import adapter
from router_operator.planning.planner import AddressDecl, NamespacePlan, RouterDecl, plan_namespace
from router_operator.rendering.router import render_router
from router_operator.resources.nodes import STORE_PATH, NodeDecl, StoreDecl

from router.config.models import FILES_CONTEXT_KEY, RouterConfig
from router.nodes.config import Binding, NodeSettings

NS = "msg"
STORE = StoreDecl("5Gi", "fast-ssd")


def routers(**hub: Any) -> list[RouterDecl]:
    return [
        RouterDecl("hub", uid="uid-hub", **({"replicas": 2, "store": STORE} | hub)),
        RouterDecl("core", uid="uid-core", replicas=1),
        RouterDecl("leaf", uid="uid-leaf", replicas=1, role="edge"),
    ]


def jobs(router: str = "hub", **settings: Any) -> AddressDecl:
    node = NodeDecl(router, NodeSettings(maxDeliveryCount=5, maxDepth=100, **settings))
    return AddressDecl("jobs", prefix="jobs", node=node, creation_timestamp="2026-01-01T00:00:00Z")


def plan(decls: list[RouterDecl], *addresses: AddressDecl) -> NamespacePlan:
    return plan_namespace(NS, decls, addresses)


def entries(p: NamespacePlan, pod: str) -> dict[str, dict[str, Any]]:
    config = p.pods()[pod].config
    assert config is not None
    return {a.key: a.model_dump(exclude_defaults=True) for a in config.addresses}


# --- planner ----------------------------------------------------------------------------------


def test_every_router_gets_the_node_with_the_pods_of_its_router_as_hosts() -> None:
    p = plan(routers(), jobs(), AddressDecl("plain", prefix="plain"))
    assert p.problems == ()
    node = {"hosts": ["hub-0", "hub-1"], "maxDeliveryCount": 5, "maxDepth": 100}
    for pod in ("hub-0", "hub-1", "core-0", "leaf-0"):
        assert entries(p, pod)["prefix:jobs"] == {"prefix": "jobs", "node": node}, pod
        assert "node" not in entries(p, pod)["prefix:plain"]
    # Store where the volume is: on the pods of a Router with store, and there only.
    stores = {name: pod.config.store.path for name, pod in p.pods().items() if pod.config}
    assert stores == {"hub-0": STORE_PATH, "hub-1": STORE_PATH, "core-0": None, "leaf-0": None}


def test_hosts_follow_the_replicas() -> None:
    p = plan(routers(replicas=3), jobs())
    assert entries(p, "core-0")["prefix:jobs"]["node"]["hosts"] == ["hub-0", "hub-1", "hub-2"]


def test_settings_and_bindings_pass_through_as_the_router_has_them() -> None:
    binding = Binding(address="audit", subject="eu.#")
    p = plan(routers(), jobs(deadLetterAddress="jobs.dlq", atLimit="reject", bindings=[binding]))
    node = entries(p, "leaf-0")["prefix:jobs"]["node"]
    assert node["deadLetterAddress"] == "jobs.dlq" and node["atLimit"] == "reject"
    assert node["bindings"] == [{"address": "audit", "subject": "eu.#"}]


@pytest.mark.parametrize(
    ("decls", "router", "phrase"),
    [
        (routers(), "nowhere", "'nowhere' is not a Router of network 'default'"),
        (routers(), "leaf", "'leaf' is an edge Router"),
        (routers(), "core", "'core' has no spec.store"),
        (routers(replicas=0), "hub", "'hub' has no pods"),
        (routers(network="other"), "hub", "'hub' is not a Router of network 'default'"),
    ],
)
def test_an_address_whose_nodes_cannot_be_hosted_is_not_applied_at_all(
    decls: list[RouterDecl], router: str, phrase: str
) -> None:
    """Not folded without its node either: its messages would be routed, unstored, unnoticed."""
    p = plan(decls, jobs(router), AddressDecl("plain", prefix="plain"))
    (problem,) = p.problems_of("Address", "jobs")
    assert problem.reason == "InvalidNode"
    assert phrase in problem.message and "not applied" in problem.message
    for pod in p.networks["default"].pods:
        assert list(entries(p, pod.name)) == ["prefix:plain"], pod.name
    # The Routers themselves are fine: nothing about them is blocked.
    assert all(r.ok for net in p.networks.values() for r in net.routers)


def test_configs_with_nodes_validate_as_the_router_loads_them() -> None:
    p = plan(routers(), jobs())
    for name, pod in p.pods().items():
        assert pod.config is not None
        data = pod.config.model_dump(mode="json", exclude_defaults=True)
        again = RouterConfig.model_validate(data, context={FILES_CONTEXT_KEY: False})
        assert again == pod.config, name


# --- adapter ----------------------------------------------------------------------------------


def _router(spec: dict[str, Any]) -> adapter.Parsed:
    body = {"apiVersion": "routernet.io/v1alpha1", "kind": "Router", "metadata": {"name": "hub"}}
    return adapter.parse("Router", {**body, "spec": spec})


def _address(spec: dict[str, Any], paused: bool = False) -> adapter.Parsed:
    metadata: dict[str, Any] = {"name": "jobs", "creationTimestamp": "2026-01-01T00:00:00Z"}
    if paused:
        metadata["annotations"] = {"routernet.io/paused": "true"}
    body = {"apiVersion": "routernet.io/v1alpha1", "kind": "Address", "metadata": metadata}
    return adapter.parse("Address", {**body, "spec": spec})


def test_the_crd_objects_become_the_declarations() -> None:
    hub = adapter.router_decl(_router({"replicas": 2, "store": {"size": "5Gi"}}), "img")
    assert hub.store == StoreDecl("5Gi", None)
    assert adapter.router_decl(_router({}), "img").store is None
    node = {"router": "hub", "type": "topic", "maxBytes": 4096, "bindings": [{"address": "x"}]}
    decl = adapter.address_decl(_address({"prefix": "news", "node": node}))
    assert decl.node == NodeDecl(
        "hub", NodeSettings(type="topic", maxBytes=4096, bindings=[Binding(address="x")])
    )
    # An invalid Router keeps what its pods have: their volumes, so the nodes stay there.
    broken = _router({"replicas": 2, "store": {"size": "huge"}})
    assert broken.model is None and adapter.topology_decl(broken).store == StoreDecl()


def test_a_paused_address_keeps_its_node_on_the_same_router() -> None:
    applied = plan(routers(), jobs())
    entry = entries(applied, "core-0")["prefix:jobs"]
    paused = _address({"prefix": "jobs", "node": {"router": "core"}}, paused=True)
    decl = adapter.frozen_address_decl(paused, entry)
    assert decl.node == NodeDecl("hub", NodeSettings(maxDeliveryCount=5, maxDepth=100))
    # Its hosts follow the Router's replicas, as any Address's.
    again = plan(routers(replicas=3), decl)
    assert entries(again, "core-0")["prefix:jobs"]["node"]["hosts"] == ["hub-0", "hub-1", "hub-2"]


# --- render -----------------------------------------------------------------------------------


def _statefulset(p: NamespacePlan, name: str) -> dict[str, Any]:
    return next(o for o in render_router(p.router(name)) if o["kind"] == "StatefulSet")


def test_a_router_with_store_gets_a_claim_per_pod_mounted_where_its_config_says() -> None:
    p = plan(routers(), jobs())
    sts = _statefulset(p, "hub")
    (template,) = sts["spec"]["volumeClaimTemplates"]
    assert template["metadata"]["name"] == "store"
    assert template["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "5Gi"}},
        "storageClassName": "fast-ssd",
    }
    pod = sts["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert {"name": "store", "mountPath": STORE_PATH} in container["volumeMounts"]
    assert pod["securityContext"]["fsGroup"] == 10001
    assert not any(v["name"] == "store" for v in pod["volumes"])  # the template's, not a volume
    for version in ("1.30", kubernetes_validate.latest_version()):
        kubernetes_validate.validate(sts, version, strict=True)


def test_a_router_without_store_renders_as_before() -> None:
    p = plan(routers(store=None))
    sts = _statefulset(p, "hub")
    assert "volumeClaimTemplates" not in sts["spec"]
    assert "fsGroup" not in sts["spec"]["template"]["spec"]["securityContext"]
    assert _statefulset(p, "core") == _statefulset(plan(routers()), "core")


# --- the local backend --------------------------------------------------------------------------

FILES = """\
apiVersion: routernet.io/v1alpha1
kind: Router
metadata: {name: hub}
spec: {replicas: 2, store: {}}
---
apiVersion: routernet.io/v1alpha1
kind: Router
metadata: {name: core}
---
apiVersion: routernet.io/v1alpha1
kind: Address
metadata: {name: jobs}
spec:
  prefix: jobs
  node: {type: queue, router: hub, deadLetterAddress: jobs.dlq, maxDeliveryCount: 5}
"""


def test_local_host_pods_store_in_the_state_directory(tmp_path: Path) -> None:
    (tmp_path / "net.yaml").write_text(FILES)
    planned = plan_files([str(tmp_path / "net.yaml")])
    pods = planned.plan.pods()
    hosts = {name: f"127.0.0.{i}" for i, name in enumerate(sorted(pods), 2)}
    dns = {pod.host: hosts[name] for name, pod in pods.items()}
    state = tmp_path / "state"
    written = {
        name: local.local_config(pod, hosts[name], dns, state_dir=state)
        for name, pod in pods.items()
    }
    assert written["hub-0"]["store"] == {"path": str(state / "store" / "hub-0")}
    assert written["hub-1"]["store"] == {"path": str(state / "store" / "hub-1")}
    assert "store" not in written["core-0"]
    for config in written.values():
        (jobs_entry,) = config["addresses"]
        assert jobs_entry["node"]["hosts"] == ["hub-0", "hub-1"]


def test_local_an_address_on_a_router_without_store_is_refused(tmp_path: Path) -> None:
    (tmp_path / "net.yaml").write_text(FILES.replace("router: hub", "router: core"))
    with pytest.raises(InvalidInput) as caught:
        plan_files([str(tmp_path / "net.yaml")])
    assert "Address 'jobs': node.router 'core' has no spec.store" in str(caught.value)


def test_local_store_cannot_be_added_to_a_running_router(tmp_path: Path) -> None:
    """As on Kubernetes (the CRD's transition rule), since a StatefulSet's could not."""
    first = tmp_path / "first.yaml"
    first.write_text(FILES.replace(", store: {}", "").split("---")[0])
    applied = plan_files([str(first)])
    stored = {"Router": {d.name: d.stored() for d in applied.declared}}
    second = tmp_path / "second.yaml"
    second.write_text(FILES.split("---")[0])
    with pytest.raises(InvalidInput, match="store is immutable"):
        plan_files([str(second)], stored)


def _node_row(name: str, router: str, depth: int, **more: Any) -> dict[str, Any]:
    row = dict.fromkeys(local.HOSTED_NODE_ATTRIBUTES, 0)
    return row | {"name": name, "nodeType": "queue", "router": router, "depth": depth} | more


def test_status_lists_every_hosted_node_with_its_router_and_depth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fake management answers: hub-0 hosts two nodes, hub-1 one, core-0 (an older router,
    say) does not know the type, which management_query leaves out of its answer."""
    record = {
        "router": "hub",
        "network": "default",
        "mode": "interior",
        "host": "127.0.0.2",
        "ports": [5672],
        "clientEndpoints": ["127.0.0.2:5672"],
        "routeContainerEndpoints": [],
    }
    pods = {
        "hub-0": record,
        "hub-1": record | {"clientEndpoints": ["127.0.0.3:5672"]},
        "core-0": record | {"router": "core", "clientEndpoints": ["127.0.0.4:5672"]},
    }
    local.State(pods=pods).save(tmp_path)
    answers = {
        "127.0.0.2:5672": [_node_row("jobs.b", "hub-0", 3), _node_row("jobs.a", "hub-0", 0)],
        "127.0.0.3:5672": [_node_row("news", "hub-1", 12, nodeType="topic", consumers=2)],
    }
    asked: list[tuple[str, frozenset[str]]] = []

    def query(
        endpoint: str, entities: Any, timeout: float, optional: Any = ()
    ) -> dict[str, list[dict[str, Any]]]:
        asked.append((endpoint, frozenset(optional)))
        rows: dict[str, list[dict[str, Any]]] = {"connection": [], "router.node": []}
        rows["router.address"] = []
        if endpoint in answers:
            rows[local.NODE_ENTITY] = answers[endpoint]
        return rows

    monkeypatch.setattr(local, "running_pid", lambda state_dir, pod: 4242)
    monkeypatch.setattr(local, "management_query", query)
    report = local.status(tmp_path)
    assert report is not None
    assert all(r["error"] is None for r in report["routers"])
    assert {optional for _, optional in asked} == {frozenset({local.NODE_ENTITY})}
    assert [(n["name"], n["type"], n["router"], n["depth"]) for n in report["nodes"]] == [
        ("jobs.a", "queue", "hub-0", 0),
        ("jobs.b", "queue", "hub-0", 3),
        ("news", "topic", "hub-1", 12),
    ]
    assert set(report["nodes"][0]) == {
        "name",
        "type",
        "router",
        *local.HOSTED_NODE_ATTRIBUTES[3:],
    }
    json.dumps(report)  # what --json prints
    table = local_cli.format_status(report).split("\n\n")[-1].splitlines()
    assert table[0].split() == ["NODE", "TYPE", "ROUTER", "DEPTH", "CONSUMERS"]
    assert [line.split() for line in table[1:]] == [
        ["jobs.a", "queue", "hub-0", "0", "0"],
        ["jobs.b", "queue", "hub-0", "3", "0"],
        ["news", "topic", "hub-1", "12", "2"],
    ]


def test_no_nodes_no_table() -> None:
    report = {
        "namespace": "default",
        "stateDir": "/state",
        "routers": [],
        "addresses": [{"key": "prefix:jobs", "distribution": "balanced"}],
        "linkRoutes": [],
        "collectors": [],
        "autoscaler": {"routers": {}, "running": False},
        "nodes": [],
    }
    assert "NODE" not in local_cli.format_status(report)
    report["addresses"][0]["node"] = {"hosts": ["hub-0", "hub-1"]}
    assert "prefix:jobs balanced, queues on hub-0 hub-1" in local_cli.format_status(report)


def test_routernet_node_types_are_asked_by_their_full_name() -> None:
    assert local._entity_type(local.NODE_ENTITY) == "io.routernet.node"
    assert local._entity_type("router.address") == "org.apache.qpid.dispatch.router.address"
