"""The local backend's plan and config files for LinkRoutes, without starting routers."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from router_operator.local import backend as local
from router_operator.local.files import InvalidInput, Planned, plan_files

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
STATE = Path("/state")

LINK_ROUTES = """\
apiVersion: routernet.io/v1alpha1
kind: LinkRoute
metadata: {name: db}
spec:
  prefix: db
  direction: in
  connection: {host: localhost, port: 5673}
---
apiVersion: routernet.io/v1alpha1
kind: LinkRoute
metadata: {name: queues}
spec: {pattern: "queue.*", containerId: broker-0}
"""


def planned(tmp_path: Path, text: str) -> Planned:
    extra = tmp_path / "linkroutes.yaml"
    extra.write_text(textwrap.dedent(text))
    return plan_files([str(EXAMPLES), str(extra)])


def configs(result: Planned) -> dict[str, dict[str, object]]:
    """Every pod's local config file, with made-up loopback addresses."""
    pods = [pod for pod in result.plan.pods().values() if pod.config is not None]
    hosts = {pod.name: f"127.0.0.{i}" for i, pod in enumerate(pods, 2)}
    dns = {pod.host: hosts[pod.name] for pod in pods}
    return {
        pod.name: local.local_config(pod, hosts[pod.name], dns, state_dir=STATE) for pod in pods
    }


def test_link_routes_go_into_the_local_configs(tmp_path: Path) -> None:
    result = planned(tmp_path, LINK_ROUTES)
    assert result.warnings == ()
    entries = [
        {"pattern": "queue.*", "direction": "in", "containerId": "broker-0"},
        {"pattern": "queue.*", "direction": "out", "containerId": "broker-0"},
        {"prefix": "db", "direction": "in", "connection": "linkroute/db"},
    ]
    for name, config in configs(result).items():
        assert config["linkRoutes"] == entries, name
        route_containers = [
            c
            for c in config.get("connectors", [])  # type: ignore[attr-defined]
            if c["role"] == "route-container"
        ]
        if name.startswith("core-"):
            # The broker's host is dialled as declared, not mapped to a router's address.
            assert route_containers == [
                {
                    "name": "linkroute/db",
                    "host": "localhost",
                    "port": 5673,
                    "role": "route-container",
                }
            ]
        else:
            assert route_containers == []


def test_a_link_route_over_tls_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as caught:
        planned(
            tmp_path,
            """\
            apiVersion: routernet.io/v1alpha1
            kind: LinkRoute
            metadata: {name: vault}
            spec: {prefix: vault, connection: {host: vault, tlsSecret: vault-tls}}
            """,
        )
    [line] = caught.value.lines
    assert line.startswith(f"{tmp_path / 'linkroutes.yaml'}: LinkRoute 'vault': ")
    assert "spec.connection.tlsSecret: Secret 'vault-tls' is not available to local" in line
    assert "vault:5672 is not dialled in clear text instead" in line


def test_a_link_route_with_credentials_is_refused_locally_not_dialled_anonymously(
    tmp_path: Path,
) -> None:
    """On Kubernetes the interior pods mount both Secrets; locally there are none."""
    with pytest.raises(InvalidInput) as caught:
        planned(
            tmp_path,
            """\
            apiVersion: routernet.io/v1alpha1
            kind: LinkRoute
            metadata: {name: vault}
            spec:
              prefix: vault
              connection: {host: vault, port: 5671, tlsSecret: ca, saslSecret: login}
            """,
        )
    tls, sasl = caught.value.lines
    assert "spec.connection.tlsSecret: Secret 'ca' is not available" in tls
    assert "spec.connection.saslSecret: Secret 'login' is not available" in sasl
    assert "vault:5671 is not dialled anonymously instead" in sasl


def test_the_link_route_tls_example_is_for_kubernetes_only() -> None:
    with pytest.raises(InvalidInput) as caught:
        plan_files([str(EXAMPLES), str(EXAMPLES / "linkroute-tls")])
    lines = caught.value.lines
    assert [line.split(": ")[2] for line in lines] == [
        "spec.connection.tlsSecret",
        "spec.connection.saslSecret",
    ]


def test_a_tls_listener_is_refused_locally_not_served_in_clear(tmp_path: Path) -> None:
    """Kubernetes mounts the Secret; locally there is none, so the Router is refused whole."""
    with pytest.raises(InvalidInput) as caught:
        planned(
            tmp_path,
            """\
            apiVersion: routernet.io/v1alpha1
            kind: Router
            metadata: {name: secure}
            spec: {listeners: [{port: 5671, tlsSecret: secure-tls}]}
            """,
        )
    [line] = caught.value.lines
    assert line.startswith(f"{tmp_path / 'linkroutes.yaml'}: Router 'secure': ")
    assert "spec.listeners[0].tlsSecret: Secret 'secure-tls' is not available" in line
    assert "not served in clear text" in line


def test_the_tls_example_is_for_kubernetes_only() -> None:
    with pytest.raises(InvalidInput) as caught:
        plan_files([str(EXAMPLES / "tls")])
    [line] = caught.value.lines
    assert "spec.listeners[0].tlsSecret: Secret 'secure-tls' is not available" in line


def test_a_link_route_added_is_described_as_such() -> None:
    old = {"linkRoutes": [{"prefix": "a", "direction": "in", "containerId": "b"}]}
    new = {
        "linkRoutes": [
            {"prefix": "a", "direction": "in", "containerId": "c"},
            {"pattern": "q.*", "direction": "out", "containerId": "c"},
        ],
        "connectors": [{"name": "linkroute/x", "host": "h", "port": 1, "role": "route-container"}],
    }
    assert local.describe_change(old, new) == (
        "link route +pattern:q.* out, link route ~prefix:a in, connector +linkroute/x"
    )


def test_the_link_route_examples_plan_cleanly() -> None:
    result = plan_files([str(EXAMPLES), str(EXAMPLES / "linkroutes")])
    assert result.warnings == ()
    routes = result.plan.networks["default"].link_routes
    assert [(lr.name, lr.direction) for lr in routes] == [("archive", "out"), ("queues", "both")]


def test_the_autoscalers_replicas_replace_the_files_for_autoscaled_routers_only() -> None:
    files = [str(EXAMPLES / "autoscaling"), str(EXAMPLES / "routers.yaml")]
    as_written = plan_files(files)
    assert sorted(as_written.plan.pods()) == [
        "core-0",
        "core-1",
        "core-2",
        "edge-0",
        "edge-1",
        "hub-0",
    ]
    # "core" is not autoscaled: a stray entry for it changes nothing.
    scaled = plan_files(files, autoscaled={"hub": 3, "core": 1})
    pods = sorted(scaled.plan.pods())
    assert pods == ["core-0", "core-1", "core-2", "edge-0", "edge-1", "hub-0", "hub-1", "hub-2"]


WEST = """\
apiVersion: routernet.io/v1alpha1
kind: Router
metadata: {name: west}
spec: {replicas: 1}
---
apiVersion: routernet.io/v1alpha1
kind: Gateway
metadata: {name: west}
spec:
  export: [{prefix: branch-}]
  listener: {router: west, port: 5673}
"""

EAST = """\
apiVersion: routernet.io/v1alpha1
kind: Router
metadata: {name: east}
spec: {replicas: 2}
---
apiVersion: routernet.io/v1alpha1
kind: Gateway
metadata: {name: to-west}
spec:
  rules:
    - container: branch-34
      applicationProperties: {branch: {exact: "34"}}
  defaultContainer: head-office
  containers: [{container: branch-34, connector: west}]
  connectors:
    - {name: west, router: east, host: 127.0.0.2, port: 5673}
"""


def network_configs(tmp_path: Path, name: str, text: str, first: int) -> dict[str, dict[str, Any]]:
    """One `routernet up` network's local configs, its pods from 127.0.0.<first> on."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    result = plan_files([str(path)])
    assert result.warnings == ()
    pods = [pod for pod in result.plan.pods().values() if pod.config is not None]
    hosts = {pod.name: f"127.0.0.{i}" for i, pod in enumerate(pods, first)}
    dns = {pod.host: hosts[pod.name] for pod in pods}
    return {
        pod.name: local.local_config(pod, hosts[pod.name], dns, state_dir=STATE) for pod in pods
    }


def test_two_networks_joined_by_a_gateway(tmp_path: Path) -> None:
    """Two state directories' networks: west listens for gateways on its pod's own address,
    east's Gateway dials it there (the host as declared, not a pod of east)."""
    west = network_configs(tmp_path, "west", WEST, 2)["west-0"]
    assert {"host": "127.0.0.2", "port": 5673, "role": "gateway", "name": "gateway"} in west[
        "listeners"
    ]
    assert west["gateway"] == {"export": [{"prefix": "branch-"}]}

    east = network_configs(tmp_path, "east", EAST, 3)
    routing = {
        "rules": [{"container": "branch-34", "applicationProperties": {"branch": {"exact": "34"}}}],
        "defaultContainer": "head-office",
    }
    for name, config in east.items():
        gateway = [c for c in config.get("connectors", []) if c["role"] == "gateway"]
        assert gateway == [
            {"name": "gateway/west", "host": "127.0.0.2", "port": 5673, "role": "gateway"}
        ], name
        assert config["gateway"] == {
            **routing,
            "containers": [{"container": "branch-34", "connector": "gateway/west"}],
        }
        assert all(lsn["role"] != "gateway" for lsn in config["listeners"])


def test_a_gateway_on_an_edge_or_unknown_router_is_refused(tmp_path: Path) -> None:
    text = EAST.replace("router: east", "router: nowhere")
    with pytest.raises(InvalidInput) as info:
        network_configs(tmp_path, "east", text, 3)
    assert info.value.lines == [
        f"{tmp_path / 'east.yaml'}: Gateway 'to-west': connector west: 'nowhere' is not an"
        " interior Router of network 'default'"
    ]


def test_one_gateway_per_network(tmp_path: Path) -> None:
    second = (
        "---\napiVersion: routernet.io/v1alpha1\nkind: Gateway\nmetadata: {name: b}\nspec: {}\n"
    )
    with pytest.raises(InvalidInput) as info:
        network_configs(tmp_path, "west", WEST + second, 2)
    # Applied together, both are as old: the smaller name wins.
    [line] = info.value.lines
    assert "Gateway 'west': network 'default' already has Gateway 'b' (older)" in line


@pytest.mark.parametrize("name", ["west.yaml", "east.yaml"])
def test_the_gateway_examples_plan_cleanly(name: str) -> None:
    result = plan_files([str(EXAMPLES / "gateway" / name)])
    assert result.warnings == ()
    assert result.plan.networks["default"].gateway is not None


def test_gateway_tls_secrets_are_refused_locally(tmp_path: Path) -> None:
    """As a listener's tlsSecret: no Secrets here, and never clear text instead."""
    west = WEST.replace(
        "listener: {router: west, port: 5673}",
        "listener: {router: west, tls: {secret: west-tls, caSecret: peers-ca}}",
    )
    east = EAST.replace("port: 5673}", "port: 5673, tls: {secret: east-tls, verifyHostname: true}}")
    (tmp_path / "west.yaml").write_text(west)
    (tmp_path / "east.yaml").write_text(east)
    with pytest.raises(InvalidInput) as info:
        plan_files([str(tmp_path / "west.yaml"), str(tmp_path / "east.yaml")])
    tail = (
        " is not available to local routers (no Kubernetes here), and the gateway connection is"
        " not made in clear text instead; leave it out locally"
    )
    assert info.value.lines == [
        f"{tmp_path / 'west.yaml'}: Gateway 'west': spec.listener.tls.secret: Secret 'west-tls'"
        + tail,
        f"{tmp_path / 'west.yaml'}: Gateway 'west': spec.listener.tls.caSecret: Secret"
        " 'peers-ca'" + tail,
        f"{tmp_path / 'east.yaml'}: Gateway 'to-west': spec.connectors[0].tls.secret: Secret"
        " 'east-tls'" + tail,
    ]


def test_a_gateway_connector_trusting_the_systems_cas_runs_locally(tmp_path: Path) -> None:
    """TLS without Secrets needs nothing Kubernetes has: the profile names no files."""
    east = EAST.replace("port: 5673}", "port: 5673, tls: {}}")
    for config in network_configs(tmp_path, "east", east, 3).values():
        assert config["sslProfiles"] == [{"name": "gateway-connector-west"}]
        [connector] = [c for c in config["connectors"] if c["role"] == "gateway"]
        assert connector["sslProfile"] == "gateway-connector-west"
