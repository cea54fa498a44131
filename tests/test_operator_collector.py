"""The operator's telemetry collector per network: the Deployment and PVC it renders (validated
against Kubernetes' schemas), where it connects, who owns it, the chart's settings as the
operator reads them, and the reconciler applying it."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from router_operator.kubernetes.environment import OperatorConfig, collector_from_env
from router_operator.kubernetes.reconciler import Memory, Snapshot, reconcile_namespace
from router_operator.planning.planner import ListenerDecl, RouterDecl, plan_namespace
from router_operator.rendering.collector import (
    DATASET_DIR,
    FLOWS_PORT,
    CollectorSettings,
    claim_name,
    deployment_name,
    render_collector,
)
from test_operator_handlers import FakeApi, body

NS = "msg"
DOMAIN = "cluster.local"
VERSIONS = ["1.30", kubernetes_validate.latest_version()]
SETTINGS = CollectorSettings(image="registry.example/routernet/router:1.0")


def rendered(routers: list[RouterDecl], settings: CollectorSettings = SETTINGS, network="default"):
    p = plan_namespace(NS, routers)
    objects = render_collector(p.networks[network], NS, settings, DOMAIN)
    return {o["kind"]: o for o in objects}


def mesh() -> list[RouterDecl]:
    return [
        RouterDecl("leaf", uid="uid-leaf", role="edge", replicas=2),
        RouterDecl("core-b", uid="uid-core-b", replicas=2),
        RouterDecl("core-a", uid="uid-core-a", replicas=3),
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_deployment_claim_and_service_validate(version: str) -> None:
    objects = rendered(
        mesh(), CollectorSettings(image="x", storage_class="fast", storage_size="5Gi")
    )
    assert list(objects) == ["PersistentVolumeClaim", "Deployment", "Service"]  # apply order
    for obj in objects.values():
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_collector_receives_from_the_first_interior_client_service() -> None:
    objects = rendered(mesh())
    deployment = objects["Deployment"]
    assert deployment["metadata"]["name"] == deployment_name("default")
    spec = deployment["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    [container] = spec["template"]["spec"]["containers"]
    assert container["image"] == SETTINGS.image
    assert container["command"] == [
        "routernet-collector",
        "--url",
        f"amqp://core-a.{NS}.svc.{DOMAIN}:5672",
        "--dataset",
        DATASET_DIR,
        "--id",
        "routernet-collector-default",
        "--http",
        f"0.0.0.0:{FLOWS_PORT}",
    ]
    [mount] = container["volumeMounts"]
    assert DATASET_DIR.startswith(mount["mountPath"])
    [volume] = spec["template"]["spec"]["volumes"]
    assert volume["persistentVolumeClaim"] == {"claimName": claim_name("default")}
    pod = spec["template"]
    assert pod["spec"]["securityContext"]["fsGroup"] == 10001
    # Not a router pod: the operator's pod watch (managed-by) must not see it.
    assert "app.kubernetes.io/managed-by" not in pod["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()


def test_the_service_reaches_the_collectors_flow_totals_and_readiness_asks_them() -> None:
    objects = rendered(mesh())
    service, deployment = objects["Service"], objects["Deployment"]
    assert service["metadata"]["name"] == deployment_name("default")
    assert service["metadata"]["labels"]["app.kubernetes.io/component"] == "collector"
    assert service["metadata"]["labels"]["routernet.io/network"] == "default"
    pod = deployment["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    [port] = service["spec"]["ports"]
    [container] = pod["spec"]["containers"]
    [container_port] = container["ports"]
    assert port["port"] == FLOWS_PORT == container_port["containerPort"]
    assert port["targetPort"] == container_port["name"]
    probe = container["readinessProbe"]["httpGet"]
    assert probe == {"path": "/healthz", "port": container_port["name"]}


def test_every_router_of_the_network_owns_the_deployment_and_none_the_claim() -> None:
    objects = rendered(mesh())
    owners = objects["Deployment"]["metadata"]["ownerReferences"]
    assert [o["name"] for o in owners] == ["core-a", "core-b", "leaf"]
    assert objects["Service"]["metadata"]["ownerReferences"] == owners
    assert not any(o.get("controller") for o in owners)
    assert "ownerReferences" not in objects["PersistentVolumeClaim"]["metadata"]


def test_storage_settings() -> None:
    claim = rendered(mesh())["PersistentVolumeClaim"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert "storageClassName" not in claim["spec"]  # the cluster's default
    settings = CollectorSettings(image="x", storage_class="fast-ssd", storage_size="200Gi")
    claim = rendered(mesh(), settings)["PersistentVolumeClaim"]
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    assert claim["spec"]["resources"]["requests"]["storage"] == "200Gi"


def test_tls_only_interiors_leave_the_edges_plain_listener() -> None:
    tls = (ListenerDecl(port=5671, tls_secret="cert"),)
    routers = [
        RouterDecl("core", uid="uid-core", listeners=tls),
        RouterDecl("leaf", uid="uid-leaf", role="edge"),
    ]
    [container] = rendered(routers)["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert container["command"][2] == f"amqp://leaf.{NS}.svc.{DOMAIN}:5672"
    assert rendered([RouterDecl("core", uid="uid-core", listeners=tls)]) == {}


def test_a_network_per_collector() -> None:
    routers = [RouterDecl("a", uid="uid-a"), RouterDecl("b", uid="uid-b", network="blue")]
    blue = rendered(routers, network="blue")
    assert blue["Deployment"]["metadata"]["name"] == "routernet-collector-blue"
    assert blue["PersistentVolumeClaim"]["metadata"]["name"] == "routernet-telemetry-blue"
    assert [o["name"] for o in blue["Deployment"]["metadata"]["ownerReferences"]] == ["b"]


def test_settings_from_the_charts_environment() -> None:
    # Its own image by default, of this version: the router image has no Parquet writer.
    assert collector_from_env({}) == CollectorSettings(image="routernet/collector:0.1.0")
    env = {
        "ROUTERNET_COLLECTOR_IMAGE": "collector:2",
        "ROUTERNET_COLLECTOR_IMAGE_PULL_POLICY": "Always",
        "ROUTERNET_COLLECTOR_STORAGE_CLASS": "standard",
        "ROUTERNET_COLLECTOR_STORAGE_SIZE": "1Ti",
        "ROUTERNET_ROUTER_IMAGE_PULL_POLICY": "Never",
    }
    settings = collector_from_env(env)
    assert settings is not None
    assert (
        settings.image,
        settings.image_pull_policy,
        settings.storage_class,
        settings.storage_size,
    ) == ("collector:2", "Always", "standard", "1Ti")
    assert collector_from_env({"ROUTERNET_COLLECTOR_ENABLED": "false"}) is None
    assert OperatorConfig.from_env({}).collector is not None
    for name, value in (
        ("ROUTERNET_COLLECTOR_ENABLED", "maybe"),
        ("ROUTERNET_COLLECTOR_STORAGE_SIZE", "lots"),
        ("ROUTERNET_COLLECTOR_STORAGE_CLASS", "Not A Name"),
        ("ROUTERNET_COLLECTOR_IMAGE", "a b"),
        ("ROUTERNET_COLLECTOR_IMAGE_PULL_POLICY", "Sometimes"),
    ):
        with pytest.raises(ValueError, match=f"^{name}="):
            collector_from_env({name: value})


def test_the_reconciler_applies_it_once_per_network_and_not_again_unchanged() -> None:
    config = OperatorConfig(collector=SETTINGS)
    snapshot = Snapshot(
        NS, routers=(body("Router", "hub", {}), body("Router", "leaf", {"role": "edge"}))
    )
    api, memory = FakeApi(), Memory()
    result = reconcile_namespace(snapshot, api, config, memory)
    assert not result.failures
    collector = [a for a in api.applied if "routernet-" in a and not a.startswith("Secret/")]
    assert collector == [
        "PersistentVolumeClaim/routernet-telemetry-default",
        "Deployment/routernet-collector-default",
        "Service/routernet-collector-default",
    ]
    again = FakeApi()
    reconcile_namespace(snapshot, again, config, memory)
    assert not [a for a in again.applied if "routernet-" in a]
    # Off: nothing of it.
    off = FakeApi()
    reconcile_namespace(snapshot, off, OperatorConfig(), Memory())
    assert not [a for a in off.applied if "routernet-" in a and not a.startswith("Secret/")]


def test_a_failed_apply_is_a_transient_failure_routers_still_applied() -> None:
    from router_operator.kubernetes.api import ApiError

    fail: dict[str, Any] = {
        "Deployment/routernet-collector-default": ApiError(503, "ServiceUnavailable", "later")
    }
    api = FakeApi(fail)
    snapshot = Snapshot(NS, routers=(body("Router", "hub", {}),))
    result = reconcile_namespace(snapshot, api, OperatorConfig(collector=SETTINGS), Memory())
    assert "StatefulSet/hub" in api.applied
    assert result.transient and "telemetry of network default" in result.failures[0]
