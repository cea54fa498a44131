"""Rendering a Router's plan into Kubernetes objects, validated against Kubernetes' schemas."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from router_operator.planning import adapter
from router_operator.planning.names import selector
from router_operator.planning.planner import (
    AddressDecl,
    LinkRouteConnectionDecl,
    LinkRouteDecl,
    ListenerDecl,
    NamespacePlan,
    RouterDecl,
    plan_namespace,
)
from router_operator.rendering.router import (
    DIGEST_ANNOTATION,
    LINK_ROUTES_KEY,
    MAX_CONFIG_MAP_BYTES,
    RenderError,
    config_map_data,
    merge,
    render_router,
    render_stateful_set,
)
from router_operator.resources.gateway import (
    ConnectorTlsDecl,
    GatewayConnectorDecl,
    GatewayDecl,
    GatewayListenerDecl,
    ListenerTlsDecl,
)
from router_operator.resources.mounts import secret_volume_name

from router.config.models import FILES_CONTEXT_KEY, ConfigError, RouterConfig, validate_config

NS = "msg"
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
EXAMPLE_TLS = EXAMPLES / "tls" / "router.yaml"
VERSIONS = ["1.30", kubernetes_validate.latest_version()]


def decls(**overrides: Any) -> list[RouterDecl]:
    return [
        RouterDecl("core", uid="uid-core", replicas=3, **overrides),
        RouterDecl("leaf", uid="uid-leaf", replicas=2, role="edge"),
    ]


def plan(routers: list[RouterDecl] | None = None, addresses: Any = ()) -> NamespacePlan:
    return plan_namespace(NS, routers if routers is not None else decls(), addresses)


def objects(p: NamespacePlan, name: str) -> dict[str, dict[str, Any]]:
    rendered = render_router(p.router(name))
    out = {f"{o['kind']}/{o['metadata']['name']}": o for o in rendered}
    assert len(out) == len(rendered)
    return out


def statefulset(p: NamespacePlan, name: str) -> dict[str, Any]:
    return objects(p, name)[f"StatefulSet/{name}"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", ["core", "leaf"])
def test_every_object_validates_against_kubernetes_schemas(name: str, version: str) -> None:
    p = plan(addresses=[AddressDecl("a", prefix="a")])
    for obj in render_router(p.router(name)):
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_validator_is_strict_enough_to_catch_mistakes() -> None:
    sts = statefulset(plan(), "core")
    sts["spec"]["template"]["spec"]["containers"][0]["comand"] = ["typo"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(sts, "1.30", strict=True)


def test_children_in_apply_order_with_deterministic_names() -> None:
    kinds = [f"{o['kind']}/{o['metadata']['name']}" for o in render_router(plan().router("core"))]
    assert kinds == [
        "ServiceAccount/core",
        "ConfigMap/core-config",
        "Role/core-config-reader",
        "RoleBinding/core-config-reader",
        "Service/core-peers",
        "Service/core",
        "PodDisruptionBudget/core",
        "StatefulSet/core",
    ]


@pytest.mark.parametrize("name", ["core", "leaf"])
def test_owner_references_and_labels_on_every_child(name: str) -> None:
    p = plan()
    for obj in render_router(p.router(name)):
        meta = obj["metadata"]
        assert meta["namespace"] == NS
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "routernet.io/v1alpha1",
                "kind": "Router",
                "name": name,
                "uid": f"uid-{name}",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert meta["labels"]["app.kubernetes.io/name"] == "routernet"
        assert meta["labels"]["app.kubernetes.io/instance"] == name
        assert meta["labels"]["routernet.io/network"] == "default"


def test_no_uid_no_owner_reference() -> None:
    p = plan_namespace(NS, [RouterDecl("core", replicas=1)])
    with pytest.raises(RenderError, match="no uid"):
        render_router(p.router("core"))


def test_statefulset_shape() -> None:
    sts = statefulset(plan(), "core")
    spec = sts["spec"]
    assert spec["replicas"] == 3
    assert spec["serviceName"] == "core-peers"
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "routernet",
        "app.kubernetes.io/instance": "core",
        "app.kubernetes.io/component": "router",
    }
    template = spec["template"]
    pod_labels = template["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pod_labels["routernet.io/network"] == "default"
    assert pod_labels["routernet.io/role"] == "interior"
    pod = template["spec"]
    assert pod["serviceAccountName"] == "core"
    assert pod["terminationGracePeriodSeconds"] >= 10
    (container,) = pod["containers"]
    assert container["command"] == [
        "routernet-router",
        "--config",
        "/etc/routernet/$(POD_NAME).json",
    ]
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in (
        container["env"]
    )
    # HTTP probes on the router's own endpoint: alive (the loop turns), ready (in its network).
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert {"name": "metrics", "containerPort": 9090, "protocol": "TCP"} in container["ports"]
    assert container["lifecycle"]["preStop"]["sleep"]["seconds"] > 0
    assert (
        container["lifecycle"]["preStop"]["sleep"]["seconds"] < pod["terminationGracePeriodSeconds"]
    )
    assert {(p["name"], p["containerPort"]) for p in container["ports"]} == {
        ("amqp", 5672),
        ("inter-router", 55672),
        ("edge", 45672),
        ("metrics", 9090),
    }
    assert container["resources"]["limits"]["memory"]
    assert container["volumeMounts"] == [
        {"name": "config", "mountPath": "/etc/routernet", "readOnly": True}
    ]
    assert pod["volumes"] == [{"name": "config", "configMap": {"name": "core-config"}}]
    assert selector("core") == (
        "app.kubernetes.io/component=router,app.kubernetes.io/instance=core,"
        "app.kubernetes.io/name=routernet"
    )


@pytest.mark.parametrize("name", ["core", "leaf"])
def test_pods_follow_their_config_map_through_the_api(name: str) -> None:
    """Config-sync (router/config/sync.py): the file starts the router, the ConfigMap watch keeps
    it current; it needs the ConfigMap's name, the pod's name and namespace, and a token."""
    pod = statefulset(plan(), name)["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True
    (container,) = pod["containers"]
    assert container["command"][1:] == ["--config", "/etc/routernet/$(POD_NAME).json"]
    env = {e["name"]: e for e in container["env"]}
    assert env["ROUTERNET_CONFIGMAP"] == {"name": "ROUTERNET_CONFIGMAP", "value": f"{name}-config"}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}


@pytest.mark.parametrize("name", ["core", "leaf"])
def test_config_reader_role_grants_reading_that_one_config_map(name: str) -> None:
    objs = objects(plan(), name)
    role = objs[f"Role/{name}-config-reader"]
    assert role["apiVersion"] == "rbac.authorization.k8s.io/v1"
    pods = {"core": ["core-0", "core-1", "core-2"], "leaf": ["leaf-0", "leaf-1"]}[name]
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [f"{name}-config"],
            "verbs": ["get", "list", "watch"],
        },
        # router/pod/status.py: each pod reports on itself, and on no other pod.
        {
            "apiGroups": [""],
            "resources": ["pods"],
            "resourceNames": pods,
            "verbs": ["get", "patch"],
        },
    ]
    assert f"ConfigMap/{role['rules'][0]['resourceNames'][0]}" in objs
    binding = objs[f"RoleBinding/{name}-config-reader"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    # The ServiceAccount the pods run as.
    account = objs[f"ServiceAccount/{name}"]["metadata"]["name"]
    assert objs[f"StatefulSet/{name}"]["spec"]["template"]["spec"]["serviceAccountName"] == account
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NS}]
    # Neither the ServiceAccount nor the pod turns the token off.
    assert objs[f"ServiceAccount/{name}"].get("automountServiceAccountToken", True) is True


@pytest.mark.parametrize("version", VERSIONS)
def test_pod_rule_follows_the_replicas_and_is_absent_at_zero(version: str) -> None:
    """Rendered again on every scale; at zero replicas no pod rule at all, since an empty
    resourceNames would grant get and patch on every pod of the namespace."""

    def role(replicas: int) -> dict[str, Any]:
        p = plan([RouterDecl("core", uid="uid-core", replicas=replicas)])
        found = objects(p, "core")["Role/core-config-reader"]
        kubernetes_validate.validate(found, version, strict=True)
        return found

    def pod_names(replicas: int) -> list[list[str]]:
        return [r["resourceNames"] for r in role(replicas)["rules"] if r["resources"] == ["pods"]]

    assert pod_names(1) == [["core-0"]]
    assert pod_names(4) == [["core-0", "core-1", "core-2", "core-3"]]
    assert pod_names(0) == []
    assert all(rule["resourceNames"] for rule in role(0)["rules"])


def test_edge_statefulset_exposes_client_ports_only() -> None:
    (container,) = statefulset(plan(), "leaf")["spec"]["template"]["spec"]["containers"]
    assert [(p["name"], p["containerPort"]) for p in container["ports"]] == [
        ("amqp", 5672),
        ("metrics", 9090),
    ]


def test_services() -> None:
    listeners = (ListenerDecl(port=5672), ListenerDecl(port=15672))
    objs = objects(plan(decls(listeners=listeners)), "core")
    peers = objs["Service/core-peers"]["spec"]
    assert peers["clusterIP"] == "None"
    assert peers["publishNotReadyAddresses"] is True
    assert {(p["name"], p["port"]) for p in peers["ports"]} >= {
        ("inter-router", 55672),
        ("edge", 45672),
    }
    client = objs["Service/core"]["spec"]
    assert client.get("clusterIP") != "None"
    assert [(p["name"], p["port"], p["targetPort"]) for p in client["ports"]] == [
        ("amqp", 5672, "amqp"),
        ("amqp-15672", 15672, "amqp-15672"),
    ]
    assert client["selector"] == peers["selector"]
    pdb = objs["PodDisruptionBudget/core"]["spec"]
    assert pdb["maxUnavailable"] == 1
    assert pdb["selector"]["matchLabels"] == client["selector"]


def test_config_map_holds_every_pods_config_valid_for_the_router() -> None:
    p = plan(addresses=[AddressDecl("o", prefix="orders", distribution="closest")])
    for name, count in (("core", 3), ("leaf", 2)):
        data = objects(p, name)[f"ConfigMap/{name}-config"]["data"]
        assert sorted(data) == [f"{name}-{i}.json" for i in range(count)]
        for key, text in data.items():
            pod = key.removesuffix(".json")
            loaded = validate_config(json.loads(text))  # what the router does with the file
            assert loaded == p.pods()[pod].config
            assert loaded.router.id == pod
            assert [a.key for a in loaded.addresses] == ["prefix:orders"]


@pytest.mark.parametrize("n", [1, 5, 20])
def test_rendered_configs_for_larger_meshes(n: int) -> None:
    p = plan_namespace(NS, [RouterDecl("r", uid="u", replicas=n)])
    data = config_map_data(p.router("r"))
    links = 0
    for text in data.values():
        cfg = RouterConfig.model_validate(json.loads(text))
        links += sum(1 for c in cfg.connectors if c.role == "inter-router")
    assert links == n * (n - 1) // 2


def test_config_digest_ignores_addresses_but_not_the_mode() -> None:
    def digest(p: NamespacePlan, name: str = "core") -> str:
        return statefulset(p, name)["spec"]["template"]["metadata"]["annotations"][
            DIGEST_ANNOTATION
        ]

    base = plan(addresses=[AddressDecl("a", prefix="a")])
    more = plan(
        addresses=[
            AddressDecl("a", prefix="a", distribution="multicast"),
            AddressDecl("b", prefix="b"),
        ]
    )
    assert digest(base) == digest(more)
    # Nor connectors: scaling adds connectors, not restarts.
    scaled = plan([RouterDecl("core", uid="uid-core", replicas=7)])
    assert digest(base) == digest(scaled)
    # The ConfigMap is what carries the change.
    assert (
        objects(base, "core")["ConfigMap/core-config"]
        != objects(more, "core")["ConfigMap/core-config"]
    )
    # The whole pod template is unchanged by an address change, so nothing rolls.
    assert (
        statefulset(base, "core")["spec"]["template"]
        == statefulset(more, "core")["spec"]["template"]
    )
    as_edge = plan(
        [RouterDecl("core", uid="uid-core", replicas=3, role="edge"), RouterDecl("i", uid="i")]
    )
    assert digest(as_edge) != digest(base)
    assert digest(base, "leaf") != digest(base, "core")


LINK_ROUTES = [
    LinkRouteDecl("broker", prefix="queue", container_id="broker-0"),
    LinkRouteDecl(
        "db", pattern="db.*", direction="out", connection=LinkRouteConnectionDecl("db.msg.svc")
    ),
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", ["core", "leaf"])
def test_link_routes_are_in_the_config_map_not_the_pod_template(name: str, version: str) -> None:
    base = plan()
    with_routes = plan_namespace(NS, decls(), link_routes=LINK_ROUTES)
    objs = objects(with_routes, name)
    for obj in objs.values():
        kubernetes_validate.validate(obj, version, strict=True)
    data = objs[f"ConfigMap/{name}-config"]["data"]
    pods = sorted(k for k in data if k.endswith(".json"))
    assert sorted(data) == sorted([*pods, LINK_ROUTES_KEY])
    for key in pods:
        loaded = validate_config(json.loads(data[key]))
        assert loaded == with_routes.pods()[key.removesuffix(".json")].config
        assert [r.key for r in loaded.linkRoutes] == [
            "pattern:db.* direction:out",
            "prefix:queue direction:in",
            "prefix:queue direction:out",
        ]
        route_containers = [c.name for c in loaded.connectors if c.role == "route-container"]
        assert route_containers == (["linkroute/db"] if name == "core" else [])
    # The record a paused LinkRoute is folded again from.
    assert json.loads(data[LINK_ROUTES_KEY]) == {
        "broker": {"prefix": "queue", "direction": "both", "containerId": "broker-0"},
        "db": {
            "pattern": "db.*",
            "direction": "out",
            "connection": {"host": "db.msg.svc", "port": 5672},
        },
    }
    # Applied live: no pod template change, so no rolling restart.
    assert (
        statefulset(base, name)["spec"]["template"]
        == objs[f"StatefulSet/{name}"]["spec"]["template"]
    )
    assert LINK_ROUTES_KEY not in objects(base, name)[f"ConfigMap/{name}-config"]["data"]


def test_rendering_is_deterministic() -> None:
    assert render_router(plan().router("core")) == render_router(plan().router("core"))


def test_a_blocked_router_is_not_rendered() -> None:
    p = plan(decls(listeners=(ListenerDecl(port=55672),)))
    with pytest.raises(RenderError, match="reserved for inter-router"):
        render_router(p.router("core"))


def test_scale_to_zero_renders() -> None:
    p = plan_namespace(NS, [RouterDecl("core", uid="u", replicas=0)])
    objs = objects(p, "core")
    assert objs["StatefulSet/core"]["spec"]["replicas"] == 0
    assert objs["ConfigMap/core-config"]["data"] == {}
    for obj in objs.values():
        kubernetes_validate.validate(obj, "1.30", strict=True)


def test_image_and_resources_from_the_spec() -> None:
    resources = {"requests": {"cpu": "1", "memory": "128Mi"}, "limits": {"memory": "1Gi"}}
    p = plan(decls(image="registry.example/routernet:1.2.3", resources=resources))
    (container,) = statefulset(p, "core")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example/routernet:1.2.3"
    assert container["resources"] == resources


def test_pod_template_overrides_merge_but_never_take_the_selector() -> None:
    override = {
        "metadata": {
            "labels": {"team": "payments", "app.kubernetes.io/instance": "hijack"},
            "annotations": {"example.com/x": "1", DIGEST_ANNOTATION: "mine"},
        },
        "spec": {
            "nodeSelector": {"disk": "ssd"},
            "tolerations": [{"key": "dedicated", "operator": "Exists"}],
            "priorityClassName": "high",
            "containers": [
                {"name": "router", "env": [{"name": "EXTRA", "value": "1"}]},
                {"name": "sidecar", "image": "busybox"},
            ],
        },
    }
    p = plan(decls(pod_template=override))
    sts = statefulset(p, "core")
    kubernetes_validate.validate(sts, "1.30", strict=True)
    template = sts["spec"]["template"]
    assert template["metadata"]["labels"]["team"] == "payments"
    assert template["metadata"]["labels"]["app.kubernetes.io/instance"] == "core"
    assert template["metadata"]["annotations"]["example.com/x"] == "1"
    assert template["metadata"]["annotations"][DIGEST_ANNOTATION] != "mine"
    spec = template["spec"]
    assert spec["nodeSelector"] == {"disk": "ssd"}
    assert spec["priorityClassName"] == "high"
    router, sidecar = spec["containers"]
    assert router["command"][0] == "routernet-router"
    assert [e["name"] for e in router["env"]] == [
        "POD_NAME",
        "POD_NAMESPACE",
        "ROUTERNET_CONFIGMAP",
        "EXTRA",
    ]
    assert sidecar == {"name": "sidecar", "image": "busybox"}
    # The override is not mutated.
    assert override["spec"]["containers"][0] == {  # type: ignore[index]
        "name": "router",
        "env": [{"name": "EXTRA", "value": "1"}],
    }


def test_merge_rules() -> None:
    base = {"a": {"b": 1, "c": [1, 2]}, "l": [{"name": "x", "v": 1}]}
    assert merge(base, {"a": {"c": [3]}, "l": [{"name": "x", "w": 2}, {"name": "y"}]}) == {
        "a": {"b": 1, "c": [3]},
        "l": [{"name": "x", "v": 1, "w": 2}, {"name": "y"}],
    }
    assert base == {"a": {"b": 1, "c": [1, 2]}, "l": [{"name": "x", "v": 1}]}


def test_plain_listeners_mount_the_users_secret_with_a_cyrus_config() -> None:
    listeners = (
        ListenerDecl(port=5672),
        ListenerDecl(port=5671, sasl_mechanisms=("PLAIN",), sasl_users_secret="users"),
    )
    p = plan(decls(listeners=listeners))
    objs = objects(p, "core")
    for obj in objs.values():
        kubernetes_validate.validate(obj, "1.30", strict=True)
    data = objs["ConfigMap/core-config"]["data"]
    assert "sasldb_path: /etc/routernet-sasl/users.sasldb" in data["sasl.conf"]
    assert "pwcheck_method: auxprop" in data["sasl.conf"]
    router = json.loads(data["core-0.json"])["router"]
    assert router["saslConfigDir"] == "/etc/routernet-sasl"
    pod = objs["StatefulSet/core"]["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "sasl"]
    sources = volume["projected"]["sources"]
    assert sources[0]["configMap"] == {
        "name": "core-config",
        "items": [{"key": "sasl.conf", "path": "routernet.conf"}],
    }
    assert sources[1]["secret"] == {
        "name": "users",
        "items": [{"key": "users.sasldb", "path": "users.sasldb"}],
    }
    mounts = pod["containers"][0]["volumeMounts"]
    assert {"name": "sasl", "mountPath": "/etc/routernet-sasl", "readOnly": True} in mounts
    # Without PLAIN, nothing of the kind.
    plain_free = objects(plan(), "core")
    assert "sasl.conf" not in plain_free["ConfigMap/core-config"]["data"]
    assert len(plain_free["StatefulSet/core"]["spec"]["template"]["spec"]["volumes"]) == 1


@pytest.mark.parametrize("version", VERSIONS)
def test_tls_listeners_mount_their_secret_and_use_it_in_the_config(version: str) -> None:
    listeners = (
        ListenerDecl(port=5671, tls_secret="core-tls"),
        ListenerDecl(port=5672),
        ListenerDecl(port=8671, tls_secret="other-tls", role="route-container"),
    )
    p = plan(decls(listeners=listeners))
    objs = objects(p, "core")
    for obj in objs.values():
        kubernetes_validate.validate(obj, version, strict=True)
    pod = objs["StatefulSet/core"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tls-5671"] == {
        "name": "tls-5671",
        "secret": {"secretName": "core-tls", "optional": False},
    }
    assert volumes["tls-8671"]["secret"] == {"secretName": "other-tls", "optional": False}
    (container,) = pod["containers"]
    mounts = container["volumeMounts"]
    assert {"name": "tls-5671", "mountPath": "/etc/routernet-tls/5671", "readOnly": True} in mounts
    assert {"name": "tls-8671", "mountPath": "/etc/routernet-tls/8671", "readOnly": True} in mounts
    assert len(mounts) == 3  # and the config
    # Ports say TLS: IANA's amqps for 5671, amqps-<port> otherwise.
    assert [(c["name"], c["containerPort"]) for c in container["ports"]][:3] == [
        ("amqps", 5671),
        ("amqp", 5672),
        ("amqps-8671", 8671),
    ]
    client = objs["Service/core"]["spec"]["ports"]
    assert [(c["name"], c["port"], c["targetPort"]) for c in client] == [
        ("amqps", 5671, "amqps"),
        ("amqp", 5672, "amqp"),
        ("amqps-8671", 8671, "amqps-8671"),
    ]
    # Every pod's config: an sslProfile per TLS listener, naming the mounted files.
    data = objs["ConfigMap/core-config"]["data"]
    for i in range(3):
        raw = json.loads(data[f"core-{i}.json"])
        assert raw["sslProfiles"] == [
            {
                "name": "listener-5671",
                "certFile": "/etc/routernet-tls/5671/tls.crt",
                "privateKeyFile": "/etc/routernet-tls/5671/tls.key",
            },
            {
                "name": "listener-8671",
                "certFile": "/etc/routernet-tls/8671/tls.crt",
                "privateKeyFile": "/etc/routernet-tls/8671/tls.key",
            },
        ]
        by_port = {lsn.get("port", 5672): lsn for lsn in raw["listeners"]}
        assert (by_port[5671]["sslProfile"], by_port[5671]["requireSsl"]) == ("listener-5671", True)
        assert (by_port[8671]["sslProfile"], by_port[8671]["requireSsl"]) == ("listener-8671", True)
        for port in (5672, 55672, 45672):
            assert "sslProfile" not in by_port[port] and "requireSsl" not in by_port[port]
        # What the router loads in the pod, where the files are mounted (here they are not).
        loaded = RouterConfig.model_validate(raw, context={FILES_CONTEXT_KEY: False})
        assert loaded == p.pods()[f"core-{i}"].config
        with pytest.raises(ConfigError, match="does not exist"):
            validate_config(raw)


def test_the_tls_example_renders_valid_objects() -> None:
    (doc,) = yaml.safe_load_all(EXAMPLE_TLS.read_text())
    doc["metadata"].update(namespace=NS, uid="uid-secure")
    decl = adapter.router_decl(adapter.parse("Router", doc), "routernet/router:test")
    p = plan_namespace(NS, [decl])
    assert p.problems == ()
    for obj in render_router(p.router("secure")):
        kubernetes_validate.validate(obj, "1.30", strict=True)
    assert p.router("secure").endpoints[0] == f"amqps://secure.{NS}.svc.cluster.local:5671"


def test_adding_tls_changes_the_pod_template_not_the_digest() -> None:
    """A volume cannot be added to a running pod: the StatefulSet rolls its pods."""
    before = statefulset(plan(), "core")["spec"]["template"]
    tls = (ListenerDecl(port=5672, tls_secret="core-tls"),)
    after = statefulset(plan(decls(listeners=tls)), "core")["spec"]["template"]
    assert before != after
    assert before["metadata"]["annotations"] == after["metadata"]["annotations"]
    assert [v["name"] for v in after["spec"]["volumes"]] == ["config", "tls-5672"]
    assert after["spec"]["containers"][0]["ports"][0]["name"] == "amqps-5672"


def test_pod_template_overrides_keep_the_tls_volume() -> None:
    tls = (ListenerDecl(port=5671, tls_secret="core-tls"),)
    extra = {"spec": {"volumes": [{"name": "scratch", "emptyDir": {}}]}}
    sts = statefulset(plan(decls(listeners=tls, pod_template=extra)), "core")
    kubernetes_validate.validate(sts, "1.30", strict=True)
    names = [v["name"] for v in sts["spec"]["template"]["spec"]["volumes"]]
    assert names == ["config", "tls-5671", "scratch"]


def test_a_config_map_over_the_limit_is_refused() -> None:
    addresses = [
        AddressDecl(f"a{i}", prefix=f"some.rather.long.address.prefix.{i}") for i in range(1200)
    ]
    p = plan_namespace(NS, [RouterDecl("r", uid="u", replicas=20)], addresses)
    with pytest.raises(RenderError, match="ConfigMap limit"):
        render_router(p.router("r"))
    assert MAX_CONFIG_MAP_BYTES == 1024 * 1024


def test_render_stateful_set_alone_matches_render_router() -> None:
    p = plan()
    assert statefulset(p, "leaf") == render_stateful_set(p.router("leaf"))


# --- LinkRoute connections with Secrets ----------------------------------------------------------

SECURE = LinkRouteDecl(
    "vault",
    prefix="vault",
    connection=LinkRouteConnectionDecl(
        "vault.msg.svc", 5671, tls_secret="vault-ca", sasl_secret="vault-login"
    ),
)


@pytest.mark.parametrize("version", VERSIONS)
def test_link_route_secrets_are_mounted_on_interior_pods_only(version: str) -> None:
    base = plan()
    p = plan_namespace(NS, decls(), link_routes=[*LINK_ROUTES, SECURE])
    for name in ("core", "leaf"):
        for obj in render_router(p.router(name)):
            kubernetes_validate.validate(obj, version, strict=True)
    objs = objects(p, "core")
    pod = objs["StatefulSet/core"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["lr-tls-vault"] == {
        "name": "lr-tls-vault",
        "secret": {
            "secretName": "vault-ca",
            "items": [{"key": "ca.crt", "path": "ca.crt"}],
            "optional": False,
        },
    }
    assert volumes["lr-sasl-vault"]["secret"] == {
        "secretName": "vault-login",
        "items": [{"key": "username", "path": "username"}, {"key": "password", "path": "password"}],
        "optional": False,
    }
    assert list(volumes) == ["config", "lr-tls-vault", "lr-sasl-vault"]  # "db" has no Secrets
    mounts = pod["containers"][0]["volumeMounts"]
    assert mounts[1:] == [
        {
            "name": "lr-tls-vault",
            "mountPath": "/etc/routernet-linkroute/vault/tls",
            "readOnly": True,
        },
        {
            "name": "lr-sasl-vault",
            "mountPath": "/etc/routernet-linkroute/vault/sasl",
            "readOnly": True,
        },
    ]
    # The configs name the mounted files; the router refuses them where they are not.
    data = objs["ConfigMap/core-config"]["data"]
    for i in range(3):
        raw = json.loads(data[f"core-{i}.json"])
        assert raw["sslProfiles"] == [
            {"name": "linkroute-vault", "caCertFile": "/etc/routernet-linkroute/vault/tls/ca.crt"}
        ]
        connector = next(c for c in raw["connectors"] if c["name"] == "linkroute/vault")
        assert connector["sslProfile"] == "linkroute-vault"
        assert connector["saslUsername"] == "file:/etc/routernet-linkroute/vault/sasl/username"
        loaded = RouterConfig.model_validate(raw, context={FILES_CONTEXT_KEY: False})
        assert loaded == p.pods()[f"core-{i}"].config
        with pytest.raises(ConfigError, match="does not exist"):
            validate_config(raw)
    assert json.loads(data[LINK_ROUTES_KEY])["vault"]["connection"] == {
        "host": "vault.msg.svc",
        "port": 5671,
        "tlsSecret": "vault-ca",
        "saslSecret": "vault-login",
    }
    # Edges dial no broker: the entries in their configs, nothing mounted, no restart.
    assert (
        statefulset(p, "leaf")["spec"]["template"] == statefulset(base, "leaf")["spec"]["template"]
    )
    for key, text in objects(p, "leaf")["ConfigMap/leaf-config"]["data"].items():
        if key.endswith(".json"):
            raw = json.loads(text)
            assert "sslProfiles" not in raw and "vault" in json.dumps(raw["linkRoutes"])
            validate_config(raw)


def test_adding_a_link_route_with_secrets_rolls_the_interiors_not_the_digest() -> None:
    """A volume cannot be added to a running pod; LinkRoutes without Secrets stay live."""
    base = statefulset(plan(), "core")["spec"]["template"]
    plain = statefulset(plan_namespace(NS, decls(), link_routes=LINK_ROUTES), "core")
    assert plain["spec"]["template"] == base
    for connection in (
        LinkRouteConnectionDecl("vault", tls_secret="vault-ca"),
        LinkRouteConnectionDecl("vault", sasl_secret="vault-login"),
    ):
        route = LinkRouteDecl("vault", prefix="vault", connection=connection)
        after = statefulset(plan_namespace(NS, decls(), link_routes=[route]), "core")
        template = after["spec"]["template"]
        assert template != base
        assert template["metadata"]["annotations"] == base["metadata"]["annotations"]
        assert len(template["spec"]["volumes"]) == 2


@pytest.mark.parametrize(
    ("name", "tls"),
    [
        ("vault", "lr-tls-vault"),
        ("a" * 56, "lr-tls-" + "a" * 56),
        ("a" * 57, None),
        ("broker.messaging.example", None),
        ("x" + "-y.z" * 63, None),
    ],
)
def test_link_route_volume_names_are_dns_labels(name: str, tls: str | None) -> None:
    names = [secret_volume_name("lr", name, kind) for kind in ("tls", "sasl")]
    for volume in names:
        assert len(volume) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", volume)
    assert names[0] != names[1]
    assert names == [secret_volume_name("lr", name, kind) for kind in ("tls", "sasl")]
    if tls is not None:
        assert names[0] == tls
    else:
        assert names[0].startswith("lrh-tls-") and names[1].startswith("lrh-sasl-")
    # In a pod: the API's rules on volume names and mount paths hold, names stay apart.
    route = LinkRouteDecl(
        name, prefix="q", connection=LinkRouteConnectionDecl("b", tls_secret="c", sasl_secret="l")
    )
    sts = statefulset(plan_namespace(NS, decls(), link_routes=[route]), "core")
    kubernetes_validate.validate(sts, "1.30", strict=True)
    volumes = [v["name"] for v in sts["spec"]["template"]["spec"]["volumes"]]
    assert volumes == ["config", *names]
    paths = [
        m["mountPath"] for m in sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    ]
    assert paths[1:] == [
        f"/etc/routernet-linkroute/{name}/tls",
        f"/etc/routernet-linkroute/{name}/sasl",
    ]


def test_long_link_route_names_that_share_a_start_get_distinct_volumes() -> None:
    first, second = "q" * 60 + "-one", "q" * 60 + "-two"
    assert secret_volume_name("lr", first, "tls") != secret_volume_name("lr", second, "tls")


def test_the_link_route_tls_example_renders_valid_objects() -> None:
    routers = list(yaml.safe_load_all((EXAMPLES / "routers.yaml").read_text()))
    (route,) = yaml.safe_load_all((EXAMPLES / "linkroute-tls" / "broker.yaml").read_text())
    decls_ = []
    for doc in routers:
        doc["metadata"].update(namespace=NS, uid=f"uid-{doc['metadata']['name']}")
        decls_.append(adapter.router_decl(adapter.parse("Router", doc), "routernet/router:test"))
    route["metadata"].update(namespace=NS)
    link_route = adapter.link_route_decl(adapter.parse("LinkRoute", route))
    p = plan_namespace(NS, decls_, link_routes=[link_route])
    assert p.problems == ()
    for name in ("core", "edge"):
        for obj in render_router(p.router(name)):
            kubernetes_validate.validate(obj, "1.30", strict=True)
    volumes = statefulset(p, "core")["spec"]["template"]["spec"]["volumes"]
    assert [v["name"] for v in volumes] == ["config", "lr-tls-broker", "lr-sasl-broker"]
    assert [v["name"] for v in statefulset(p, "edge")["spec"]["template"]["spec"]["volumes"]] == [
        "config"
    ]


def gateway_plan() -> NamespacePlan:
    """core-N listen for other networks with mutual TLS, edge-N dial one; leaf has no part."""
    routers = [*decls(), RouterDecl("edge", uid="uid-edge", replicas=1)]
    gateway = GatewayDecl(
        "gw",
        listener=GatewayListenerDecl("core", tls=ListenerTlsDecl("core-tls", "peers-ca")),
        connectors=(
            GatewayConnectorDecl("bank", "edge", "gw.bank", tls=ConnectorTlsDecl("e-tls", "b-ca")),
        ),
    )
    return plan_namespace(NS, routers, gateways=[gateway])


@pytest.mark.parametrize("version", VERSIONS)
def test_gateway_secrets_are_mounted_on_the_pods_of_their_router_only(version: str) -> None:
    p = gateway_plan()
    for name in ("core", "leaf", "edge"):
        for obj in render_router(p.router(name)):
            kubernetes_validate.validate(obj, version, strict=True)
    core = statefulset(p, "core")["spec"]["template"]["spec"]
    assert core["volumes"][1:] == [
        {
            "name": "gw-tls-listener",
            "secret": {
                "secretName": "core-tls",
                "items": [
                    {"key": "tls.crt", "path": "tls.crt"},
                    {"key": "tls.key", "path": "tls.key"},
                ],
                "optional": False,
            },
        },
        {
            "name": "gw-ca-listener",
            "secret": {
                "secretName": "peers-ca",
                "items": [{"key": "ca.crt", "path": "ca.crt"}],
                "optional": False,
            },
        },
    ]
    assert core["containers"][0]["volumeMounts"][1:] == [
        {
            "name": "gw-tls-listener",
            "mountPath": "/etc/routernet-gateway/listener/tls",
            "readOnly": True,
        },
        {
            "name": "gw-ca-listener",
            "mountPath": "/etc/routernet-gateway/listener/ca",
            "readOnly": True,
        },
    ]
    edge = statefulset(p, "edge")["spec"]["template"]["spec"]
    assert [(v["name"], v["secret"]["secretName"]) for v in edge["volumes"][1:]] == [
        ("gwc-tls-bank", "e-tls"),
        ("gwc-ca-bank", "b-ca"),
    ]
    assert [m["mountPath"] for m in edge["containers"][0]["volumeMounts"][1:]] == [
        "/etc/routernet-gateway/connectors/bank/tls",
        "/etc/routernet-gateway/connectors/bank/ca",
    ]
    # The Routers without a part in the Gateway keep their pod template: no restart.
    assert (
        statefulset(p, "leaf")["spec"]["template"]
        == statefulset(plan(), "leaf")["spec"]["template"]
    )
    # The configs name the mounted files; the router refuses them where they are not.
    raw = json.loads(objects(p, "core")["ConfigMap/core-config"]["data"]["core-0.json"])
    assert [profile["name"] for profile in raw["sslProfiles"]] == ["gateway-listener"]
    with pytest.raises(ConfigError, match="does not exist"):
        validate_config(raw)


def test_the_gateway_listener_is_a_named_port_of_its_routers_client_service() -> None:
    p = gateway_plan()
    service = objects(p, "core")["Service/core"]["spec"]["ports"]
    assert service[-1] == {
        "name": "gateway",
        "port": 5673,
        "targetPort": "gateway",
        "protocol": "TCP",
    }
    container = statefulset(p, "core")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "gateway", "containerPort": 5673, "protocol": "TCP"} in container["ports"]
    # Status endpoints stay the clients'; the Routers without the listener have no such port.
    assert all("5673" not in url for url in p.router("core").endpoints)
    for name in ("leaf", "edge"):
        ports = objects(p, name)[f"Service/{name}"]["spec"]["ports"]
        assert "gateway" not in [port["name"] for port in ports]


@pytest.mark.parametrize("name", ["west", "east"])
def test_the_gateway_tls_examples_render_valid_objects(name: str) -> None:
    router, gateway = yaml.safe_load_all((EXAMPLES / "gateway-tls" / f"{name}.yaml").read_text())
    router["metadata"]["uid"] = f"uid-{name}"
    decl = adapter.router_decl(adapter.parse("Router", router), "routernet/router:test")
    namespace = router["metadata"]["namespace"]
    gw = adapter.gateway_decl(adapter.parse("Gateway", gateway))
    p = plan_namespace(namespace, [decl], gateways=[gw])
    assert p.problems == ()
    for obj in render_router(p.router(name)):
        kubernetes_validate.validate(obj, "1.30", strict=True)
    volumes = statefulset(p, name)["spec"]["template"]["spec"]["volumes"]
    owner = "listener" if name == "west" else "west"
    family = "gw" if name == "west" else "gwc"
    assert [v["name"] for v in volumes] == [
        "config",
        f"{family}-tls-{owner}",
        f"{family}-ca-{owner}",
    ]


def test_management_writers_reach_every_pods_config_and_restart_nothing() -> None:
    """A Router's managementWriters: in each of its pods' router settings (applied live by the
    router's config-sync), the StatefulSet as it was."""
    parsed = adapter.parse(
        "Router",
        {
            "apiVersion": "routernet.io/v1alpha1",
            "kind": "Router",
            "metadata": {"name": "core", "namespace": NS, "uid": "uid-core"},
            "spec": {"replicas": 3, "managementWriters": ["broker@example.com", "anonymous"]},
        },
    )
    decl = adapter.router_decl(parsed, "routernet/router:test")
    assert decl.management_writers == ("broker@example.com", "anonymous")
    writers = objects(plan([decl]), "core")
    for i in range(3):
        router = json.loads(writers["ConfigMap/core-config"]["data"][f"core-{i}.json"])["router"]
        assert router["managementWriters"] == ["broker@example.com", "anonymous"]
    nobody = objects(
        plan(
            [
                adapter.router_decl(
                    adapter.parse("Router", {**parsed.body, "spec": {"replicas": 3}}),
                    "routernet/router:test",
                )
            ]
        ),
        "core",
    )
    router = json.loads(nobody["ConfigMap/core-config"]["data"]["core-0.json"])["router"]
    assert "managementWriters" not in router
    assert nobody["StatefulSet/core"] == writers["StatefulSet/core"]


def test_a_routers_policy_reaches_every_pods_config_and_restarts_nothing() -> None:
    """Router.spec.policy: Dispatch's policy and vhosts in each of its pods' router config
    (applied live by the router's config-sync), checked by the router's own model on the way
    (a bad vhost refused there), the StatefulSet as it was."""
    policy = {
        "enableVhostPolicy": True,
        "maxConnections": 500,
        "vhosts": [
            {
                "hostname": "tenant-a",
                "maxConnections": 50,
                "groups": {"apps": {"users": ["app@a"], "remoteHosts": ["*"], "targets": ["a.*"]}},
            }
        ],
    }
    body = {
        "apiVersion": "routernet.io/v1alpha1",
        "kind": "Router",
        "metadata": {"name": "core", "namespace": NS, "uid": "uid-core"},
        "spec": {"replicas": 2, "policy": policy},
    }
    decl = adapter.router_decl(adapter.parse("Router", body), "routernet/router:test")
    policed = objects(plan([decl]), "core")
    for i in range(2):
        config = json.loads(policed["ConfigMap/core-config"]["data"][f"core-{i}.json"])
        assert config["policy"] == {"maxConnections": 500, "enableVhostPolicy": True}
        [vhost] = config["vhosts"]
        assert vhost["hostname"] == "tenant-a" and vhost["maxConnections"] == 50
        assert vhost["groups"]["apps"]["targets"] == ["a.*"]
    plain = objects(
        plan(
            [
                adapter.router_decl(
                    adapter.parse("Router", {**body, "spec": {"replicas": 2}}),
                    "routernet/router:test",
                )
            ]
        ),
        "core",
    )
    config = json.loads(plain["ConfigMap/core-config"]["data"]["core-0.json"])
    assert "vhosts" not in config and "policy" not in config
    assert plain["StatefulSet/core"] == policed["StatefulSet/core"]
    bad = {**policy, "vhosts": [{"hostname": "x", "allowUnknownUser": True}]}
    refused = adapter.parse("Router", {**body, "spec": {"replicas": 2, "policy": bad}})
    assert refused.model is None
    assert refused.error == "spec.policy.vhosts.0: allowUnknownUser needs a '$default' group"
