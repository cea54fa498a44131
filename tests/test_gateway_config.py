"""The ``gateway`` section of the router's configuration (router/gateway/config.py) and the
gateway role of listeners and connectors (router/config/models.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import config_error
from pydantic import ValidationError

from router.config.models import FILES_CONTEXT_KEY, RouterConfig, load_config, validate_config
from router.gateway.config import ContainerRoute, Gateway, GatewayRule, Match


def config(mode: str = "interior", **sections: Any) -> dict[str, Any]:
    return {"router": {"id": "R1", "mode": mode}, **sections}


GATEWAY_CONNECTOR = {"name": "megabank", "host": "gw.example.com", "port": 5673, "role": "gateway"}


def test_no_gateway_section_means_nothing_routed_or_exported() -> None:
    gateway = validate_config(config()).gateway
    assert gateway == Gateway()
    assert (gateway.rules, gateway.defaultContainer, gateway.export, gateway.containers) == (
        [],
        None,
        [],
        [],
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "exactly one of exact, prefix or pattern is required"),
        ({"exact": "a", "prefix": "b"}, "exactly one of exact, prefix or pattern is required"),
        ({"prefix": ""}, "an empty prefix matches everything: use pattern '#' to say so"),
        ({"pattern": "a*.b"}, "'*' and '#' must be whole tokens"),
        ({"pattern": "a..b"}, "tokens separated by '.' or '/' must be non-empty"),
        ({"regex": "a"}, "Extra inputs are not permitted"),
    ],
)
def test_a_match_is_one_kind(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("*", r"\*")):
        Match.model_validate(data)


def test_a_rule_needs_a_condition_and_an_addressable_container() -> None:
    assert config_error(config(gateway={"rules": [{"container": "c"}]})) == (
        "gateway.rules[0]: the rule for container 'c' has no condition: give node, subject,"
        " groupId, userId or applicationProperties (defaultContainer is the rule for everything"
        " else)"
    )
    for bad in ("", "a b", "(c)", "c)"):
        message = config_error(
            config(gateway={"rules": [{"container": bad, "node": {"exact": "x"}}]})
        )
        assert message.startswith(f"gateway.rules[0].container: {bad!r} is not a valid container")
    message = config_error(config(gateway={"defaultContainer": "a b"}))
    assert message.startswith("gateway.defaultContainer: 'a b' is not a valid container id")


def test_every_condition_kind_is_accepted() -> None:
    rule = GatewayRule.model_validate(
        {
            "container": "london-branch-34",
            "node": {"exact": "atm"},
            "subject": {"prefix": "withdraw."},
            "groupId": {"pattern": "session.*"},
            "userId": {"exact": "teller"},
            "applicationProperties": {"branch": {"exact": "34"}, "region": {"pattern": "uk.#"}},
        }
    )
    assert rule.applicationProperties["region"] == Match(pattern="uk.#")


def test_container_routes_name_gateway_connectors() -> None:
    routes = {"containers": [{"container": "london-branch-34", "connector": "megabank"}]}
    cfg = validate_config(config(connectors=[GATEWAY_CONNECTOR], gateway=routes))
    assert cfg.gateway.containers == [
        ContainerRoute(container="london-branch-34", connector="megabank")
    ]
    assert config_error(config(gateway=routes)) == (
        "gateway.containers[0].connector: 'megabank' must name a connector with role gateway"
        " (no such connector)"
    )
    normal = {**GATEWAY_CONNECTOR, "role": "normal"}
    assert config_error(config(connectors=[normal], gateway=routes)) == (
        "gateway.containers[0].connector: 'megabank' must name a connector with role gateway"
        " (its role is normal)"
    )


def test_a_container_is_routed_once() -> None:
    route = {"container": "c", "connector": "megabank"}
    message = config_error(
        config(connectors=[GATEWAY_CONNECTOR], gateway={"containers": [route, route]})
    )
    assert message == "gateway: containers[1]: container 'c' is already routed (containers[0])"


@pytest.mark.parametrize("mode", ["interior", "standalone"])
def test_gateway_role_in_interior_and_standalone_routers(mode: str) -> None:
    cfg = validate_config(
        config(mode, listeners=[{"port": 5673, "role": "gateway"}], connectors=[GATEWAY_CONNECTOR])
    )
    assert (cfg.listeners[0].role, cfg.connectors[0].role) == ("gateway", "gateway")


def test_edge_routers_have_no_gateway_role() -> None:
    for field, entry in (("listeners", {"role": "gateway"}), ("connectors", GATEWAY_CONNECTOR)):
        assert config_error(config("edge", **{field: [entry]})) == (
            f"{field}[0]: role gateway needs router.mode interior or standalone, not edge"
            " (edges join no other network)"
        )


def test_mutual_tls_on_gateway_connections() -> None:
    """A gateway listener that verifies client certificates (EXTERNAL), a gateway connector
    that presents one: the sslProfile fields every listener and connector has."""
    data = config(
        sslProfiles=[
            {
                "name": "gw",
                "certFile": "/tls/tls.crt",
                "privateKeyFile": "/tls/tls.key",
                "caCertFile": "/tls/ca.crt",
            }
        ],
        listeners=[
            {
                "port": 5673,
                "role": "gateway",
                "sslProfile": "gw",
                "saslMechanisms": "EXTERNAL",
                "authenticatePeer": True,
            }
        ],
        connectors=[{**GATEWAY_CONNECTOR, "sslProfile": "gw", "saslMechanisms": "EXTERNAL"}],
    )
    cfg = RouterConfig.model_validate(data, context={FILES_CONTEXT_KEY: False})
    listener, connector = cfg.listeners[0], cfg.connectors[0]
    assert listener.requireSsl and listener.verifies_clients
    assert listener.ssl is not None and listener.ssl.caCertFile == "/tls/ca.crt"
    assert connector.ssl is not None and connector.ssl.certFile == "/tls/tls.crt"
    assert connector.verifyHostname


GATEWAY_YAML = """\
router: {id: R1, mode: interior}
connectors:
  - {name: megabank, host: gw.example.com, port: 5673, role: gateway}
listeners:
  - {port: 5673, role: gateway}
gateway:
  rules:
    - container: london-branch-34
      subject: {prefix: "atm."}
      applicationProperties:
        branch: {exact: "34"}
    - container: head-office
      node: {pattern: "control.#"}
  defaultContainer: head-office
  export: [{prefix: branch-}, {exact: head-office}]
  containers:
    - {container: paris-branch-1, connector: megabank}
"""


def test_yaml_round_trip_through_the_config_loader(tmp_path: Path) -> None:
    path = tmp_path / "router.yaml"
    path.write_text(GATEWAY_YAML)
    cfg = load_config(path)
    gateway = cfg.gateway
    assert [rule.container for rule in gateway.rules] == ["london-branch-34", "head-office"]
    assert gateway.rules[0].applicationProperties == {"branch": Match(exact="34")}
    assert gateway.export == [Match(prefix="branch-"), Match(exact="head-office")]
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump(cfg.model_dump(mode="json", exclude_defaults=True)))
    assert load_config(again) == cfg
    as_json = tmp_path / "again.json"
    as_json.write_text(cfg.model_dump_json())
    assert load_config(as_json) == cfg


def test_equal_configs_compare_equal() -> None:
    """Live reconfiguration compares configurations: matching must leave no state behind."""
    first = validate_config(config(gateway={"export": [{"pattern": "branch.*"}]}))
    assert first.gateway.export[0].matches("branch.34")
    assert validate_config(config(gateway={"export": [{"pattern": "branch.*"}]})) == first
