from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from harness import config_error
from pydantic import ValidationError

from router.config.models import (
    FILES_CONTEXT_KEY,
    Address,
    ConfigError,
    Listener,
    RouterConfig,
    config_schema,
    load_config,
    validate_config,
)


def config(**sections: Any) -> dict[str, Any]:
    return {"router": {"id": "R1"}, **sections}


def test_only_an_id_gives_every_default() -> None:
    cfg = validate_config({"router": {"id": "R1"}})
    assert cfg.router.id == "R1"
    assert cfg.router.mode == "standalone"
    assert cfg.listeners == []
    assert cfg.addresses == []


def test_listener_defaults() -> None:
    lsn = validate_config(config(listeners=[{}])).listeners[0]
    assert lsn.model_dump() == {
        "name": "listener/0.0.0.0:5672",
        "host": "0.0.0.0",
        "port": 5672,
        "role": "normal",
        "cost": 1,
        "linkCapacity": 250,
        "saslMechanisms": ["ANONYMOUS"],
        "authenticatePeer": False,
        "idleTimeoutSeconds": 16,
        "maxFrameSize": 16384,
        "stripAnnotations": "both",
        "sslProfile": None,
        "requireSsl": False,
        "policyVhost": None,
    }


def test_address_defaults() -> None:
    addr = validate_config(config(addresses=[{"prefix": "orders"}])).addresses[0]
    assert addr.model_dump() == {
        "prefix": "orders",
        "pattern": None,
        "distribution": "balanced",
        "undeliverable": "drop",
        "holdTimeoutSeconds": 30.0,
        "fallbackAddress": None,
        "priority": -1,
        "node": None,
    }


@pytest.mark.parametrize("mode", ["standalone", "interior", "edge"])
def test_modes(mode: str) -> None:
    assert validate_config({"router": {"id": "R1", "mode": mode}}).router.mode == mode


@pytest.mark.parametrize("role", ["normal", "inter-router", "edge", "route-container", "gateway"])
def test_roles(role: str) -> None:
    assert Listener.model_validate({"role": role}).role == role


@pytest.mark.parametrize("strip", ["in", "out", "both", "no"])
def test_strip_annotations(strip: str) -> None:
    assert Listener.model_validate({"stripAnnotations": strip}).stripAnnotations == strip


@pytest.mark.parametrize("distribution", ["closest", "balanced", "multicast"])
def test_distributions(distribution: str) -> None:
    addr = Address.model_validate({"prefix": "a", "distribution": distribution})
    assert addr.distribution == distribution


@pytest.mark.parametrize(
    ("fields", "undeliverable"),
    [
        ({"undeliverable": "drop"}, "drop"),
        ({"undeliverable": "hold", "holdTimeoutSeconds": 2.5}, "hold"),
        ({"undeliverable": "redirect", "fallbackAddress": "spill"}, "redirect"),
    ],
)
def test_undeliverable(fields: dict[str, Any], undeliverable: str) -> None:
    assert Address.model_validate({"prefix": "a", **fields}).undeliverable == undeliverable


@pytest.mark.parametrize(
    ("value", "mechanisms"),
    [
        (["ANONYMOUS"], ["ANONYMOUS"]),
        (["PLAIN"], ["PLAIN"]),
        ("ANONYMOUS PLAIN", ["ANONYMOUS", "PLAIN"]),
        ("  PLAIN  ", ["PLAIN"]),
        ("anonymous", ["ANONYMOUS"]),
    ],
)
def test_sasl_mechanisms(value: object, mechanisms: list[str]) -> None:
    assert Listener.model_validate({"saslMechanisms": value}).saslMechanisms == mechanisms


@pytest.mark.parametrize(("value", "port"), [(5673, 5673), ("amqp", 5672), ("5674", 5674)])
def test_ports(value: object, port: int) -> None:
    assert Listener.model_validate({"port": value}).port == port


def test_ipv6_host_loses_its_brackets_and_keeps_them_in_the_name() -> None:
    for host in ("::1", "[::1]"):
        lsn = Listener.model_validate({"host": host, "port": 5673})
        assert lsn.host == "::1"
        assert lsn.name == "listener/[::1]:5673"
        assert lsn.address == "[::1]:5673"


def test_explicit_listener_name_is_kept() -> None:
    assert Listener.model_validate({"name": "amqp-public"}).name == "amqp-public"


def test_authenticate_peer_with_plain() -> None:
    lsn = Listener.model_validate({"authenticatePeer": True, "saslMechanisms": "PLAIN"})
    assert lsn.authenticatePeer


def test_sasl_config_defaults() -> None:
    settings = validate_config(config()).router
    assert settings.saslConfigDir is None
    assert settings.saslConfigName == "routernet"


def test_sasl_config_dir_with_its_config_file(tmp_path: Path) -> None:
    (tmp_path / "routernet.conf").write_text("mech_list: PLAIN\n")
    (tmp_path / "other.conf").write_text("mech_list: PLAIN\n")
    settings = validate_config({"router": {"id": "R1", "saslConfigDir": str(tmp_path)}}).router
    assert settings.saslConfigDir == str(tmp_path)
    named = {"id": "R1", "saslConfigDir": str(tmp_path), "saslConfigName": "other"}
    assert validate_config({"router": named}).router.saslConfigName == "other"


def test_sasl_config_dir_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    assert config_error({"router": {"id": "R1", "saslConfigDir": str(missing)}}) == (
        f"router.saslConfigDir: {str(missing)!r} does not exist"
    )
    a_file = tmp_path / "routernet.conf"
    a_file.write_text("mech_list: PLAIN\n")
    assert config_error({"router": {"id": "R1", "saslConfigDir": str(a_file)}}) == (
        f"router.saslConfigDir: {str(a_file)!r} is not a directory"
    )
    assert config_error({"router": {"id": "R1", "saslConfigDir": ""}}) == (
        "router.saslConfigDir: '' is not a directory (leave it out for Cyrus's default)"
    )
    named = {"id": "R1", "saslConfigDir": str(tmp_path), "saslConfigName": "qdrouterd"}
    assert config_error({"router": named}) == (
        f"router: saslConfigDir {str(tmp_path)!r} has no qdrouterd.conf"
        " (the Cyrus SASL config file named by saslConfigName)"
    )


def test_files_context_skips_only_the_file_checks(tmp_path: Path) -> None:
    """For configs written here to run elsewhere (the operator's pod configs): with the
    validation context {"files": False} missing files pass, everything else is still checked;
    the router's own loading (validate_config, no context) keeps refusing them."""
    missing = str(tmp_path / "nope")
    data = {
        "router": {"id": "R1", "saslConfigDir": missing},
        "sslProfiles": [
            {
                "name": "p",
                "certFile": f"{missing}/tls.crt",
                "privateKeyFile": f"{missing}/tls.key",
                "caCertFile": f"{missing}/ca.crt",
            }
        ],
        "listeners": [{"port": 5671, "sslProfile": "p"}],
    }
    cfg = RouterConfig.model_validate(data, context={FILES_CONTEXT_KEY: False})
    assert cfg.listeners[0].ssl is cfg.sslProfiles[0]
    assert cfg.listeners[0].requireSsl is True
    assert cfg.router.saslConfigDir == missing
    assert config_error(data) == (
        f"router.saslConfigDir: {missing!r} does not exist;"
        f" sslProfiles[0].certFile: '{missing}/tls.crt' does not exist;"
        f" sslProfiles[0].privateKeyFile: '{missing}/tls.key' does not exist;"
        f" sslProfiles[0].caCertFile: '{missing}/ca.crt' does not exist"
    )
    # Only the files: a profile without the key its certFile needs is still refused.
    del data["sslProfiles"][0]["privateKeyFile"]  # type: ignore[index]
    with pytest.raises(ValidationError, match="certFile and privateKeyFile go together"):
        RouterConfig.model_validate(data, context={FILES_CONTEXT_KEY: False})
    data["sslProfiles"][0]["certFile"] = " "  # type: ignore[index]
    with pytest.raises(ValidationError, match="is not a file name"):
        RouterConfig.model_validate(data, context={FILES_CONTEXT_KEY: False})


@pytest.mark.parametrize("name", ["", "a b", "a/b", ".hidden"])
def test_sasl_config_name_errors(name: str) -> None:
    assert config_error({"router": {"id": "R1", "saslConfigName": name}}) == (
        f"router.saslConfigName: {name!r} is not a valid SASL config name (a file name without"
        " '.conf': non-empty, no whitespace, no '/', not starting with '.')"
    )


@pytest.mark.parametrize("prefix", ["orders", "a.b", "a/b", "a.b/c"])
def test_valid_prefixes(prefix: str) -> None:
    assert Address.model_validate({"prefix": prefix}).prefix == prefix


@pytest.mark.parametrize("pattern", ["a.*.c", "#", "a/#", "*.b", "a.#.z", "sensors.*.temp"])
def test_valid_patterns(pattern: str) -> None:
    assert Address.model_validate({"pattern": pattern}).pattern == pattern


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "router: required"),
        ({"router": {}}, "router.id: required"),
        (
            {"router": {"id": "R 1"}},
            "router.id: 'R 1' is not a valid router id (non-empty, no whitespace, no '/')",
        ),
        (
            {"router": {"id": "a/b"}},
            "router.id: 'a/b' is not a valid router id (non-empty, no whitespace, no '/')",
        ),
        (
            {"router": {"id": ""}},
            "router.id: '' is not a valid router id (non-empty, no whitespace, no '/')",
        ),
        (
            {"router": {"id": "R1", "mode": "mesh"}},
            "router.mode: 'mesh' is invalid: input should be 'standalone', 'interior' or 'edge'",
        ),
        ({"router": {"id": "R1", "colour": "red"}}, "router.colour: unknown key"),
        ({"router": {"id": "R1"}, "autoLinks": []}, "autoLinks: unknown key"),
        (
            config(listeners=[{"port": "abc"}]),
            """listeners[0].port: 'abc' is not a valid port (1..65535 or "amqp")""",
        ),
        (
            config(listeners=[{"port": 0}]),
            """listeners[0].port: 0 is not a valid port (1..65535 or "amqp")""",
        ),
        (
            config(listeners=[{"port": 65536}]),
            """listeners[0].port: 65536 is not a valid port (1..65535 or "amqp")""",
        ),
        (
            config(listeners=[{"port": True}]),
            """listeners[0].port: True is not a valid port (1..65535 or "amqp")""",
        ),
        (
            config(listeners=[{"host": "bad host"}]),
            "listeners[0].host: 'bad host' is not a valid host (an IPv4/IPv6 literal or a host"
            " name)",
        ),
        (
            config(listeners=[{"name": " "}]),
            "listeners[0].name: ' ' is not a valid name (leave it out to get the default)",
        ),
        (
            config(listeners=[{"role": "client"}]),
            "listeners[0].role: 'client' is invalid: input should be 'normal', 'inter-router',"
            " 'edge', 'route-container' or 'gateway'",
        ),
        (
            config(listeners=[{"linkCapacity": 0}]),
            "listeners[0].linkCapacity: 0 is invalid: input should be greater than 0",
        ),
        (
            config(listeners=[{"saslMechanisms": "ANONYMOUS GSSAPI"}]),
            "listeners[0].saslMechanisms[1]: 'GSSAPI' is invalid: input should be 'ANONYMOUS',"
            " 'PLAIN' or 'EXTERNAL'",
        ),
        (
            config(listeners=[{"saslMechanisms": []}]),
            "listeners[0].saslMechanisms: [] is invalid: value should have at least 1 item",
        ),
        (
            config(listeners=[{"authenticatePeer": "perhaps"}]),
            "listeners[0].authenticatePeer: 'perhaps' is invalid: input should be a valid boolean",
        ),
        (
            config(listeners=[{"authenticatePeer": True}]),
            "listeners[0]: authenticatePeer requires a mechanism other than ANONYMOUS",
        ),
        (
            config(listeners=[{"idleTimeoutSeconds": -1}]),
            "listeners[0].idleTimeoutSeconds: -1 is invalid: input should be greater than or"
            " equal to 0",
        ),
        (
            config(listeners=[{"maxFrameSize": 511}]),
            "listeners[0].maxFrameSize: 511 is invalid: input should be greater than or equal"
            " to 512",
        ),
        (
            config(listeners=[{"stripAnnotations": "all"}]),
            "listeners[0].stripAnnotations: 'all' is invalid: input should be 'in', 'out', 'both'"
            " or 'no'",
        ),
        (
            config(listeners=[{"prot": 5672}]),
            "listeners[0].prot: unknown key",
        ),
        (
            config(listeners=[{}, {"host": "0.0.0.0", "port": "amqp"}]),
            "listeners[1]: duplicate 0.0.0.0:5672 (also listeners[0])",
        ),
        (
            config(listeners=[{"name": "x", "port": 1}, {"name": "x", "port": 2}]),
            "listeners[1]: duplicate name 'x' (also listeners[0])",
        ),
        (
            config(listeners=["127.0.0.1:5672"]),
            "listeners[0]: '127.0.0.1:5672' is invalid: input should be a valid dictionary",
        ),
        (
            config(addresses=[{"prefix": "a"}, {"prefix": "a", "pattern": "a.*"}]),
            "addresses[1]: exactly one of prefix or pattern is required",
        ),
        (
            config(addresses=[{"distribution": "closest"}]),
            "addresses[0]: exactly one of prefix or pattern is required",
        ),
        (
            config(addresses=[{"prefix": "a.*"}]),
            "addresses[0].prefix: 'a.*' is not a valid prefix: use pattern for wildcards",
        ),
        (
            config(addresses=[{"prefix": ""}]),
            "addresses[0].prefix: '' is not a valid prefix: tokens separated by '.' or '/' must"
            " be non-empty and contain no spaces",
        ),
        (
            config(addresses=[{"pattern": "a..b"}]),
            "addresses[0].pattern: 'a..b' is not a valid pattern: tokens separated by '.' or '/'"
            " must be non-empty and contain no spaces",
        ),
        (
            config(addresses=[{"pattern": "a.b*"}]),
            "addresses[0].pattern: 'a.b*' is not a valid pattern: '*' and '#' must be whole tokens",
        ),
        (
            config(addresses=[{"pattern": "a b"}]),
            "addresses[0].pattern: 'a b' is not a valid pattern",
        ),
        (
            config(addresses=[{"prefix": "a", "distribution": "fanout"}]),
            "addresses[0].distribution: 'fanout' is invalid: input should be 'closest',"
            " 'balanced' or 'multicast'",
        ),
        (
            config(addresses=[{"prefix": "a", "undeliverable": "bounce"}]),
            "addresses[0].undeliverable: 'bounce' is invalid: input should be 'drop', 'hold'"
            " or 'redirect'",
        ),
        (
            config(addresses=[{"prefix": "a", "undeliverable": "redirect"}]),
            "addresses[0]: fallbackAddress is required when undeliverable is redirect",
        ),
        (
            config(addresses=[{"prefix": "a", "undeliverable": "hold", "fallbackAddress": "b"}]),
            "addresses[0]: fallbackAddress 'b' is only allowed when undeliverable is redirect,"
            " not hold",
        ),
        (
            config(addresses=[{"prefix": "a", "fallbackAddress": "b"}]),
            "addresses[0]: fallbackAddress 'b' is only allowed when undeliverable is redirect,"
            " not drop",
        ),
        (
            config(
                addresses=[{"prefix": "a", "undeliverable": "redirect", "fallbackAddress": "b c"}]
            ),
            "addresses[0].fallbackAddress: 'b c' is not a valid address",
        ),
        (
            config(addresses=[{"prefix": "a", "holdTimeoutSeconds": 0}]),
            "addresses[0].holdTimeoutSeconds: 0 is invalid: input should be greater than 0",
        ),
        (
            config(addresses=[{"prefix": "a", "priority": 10}]),
            "addresses[0].priority: 10 is invalid: input should be less than or equal to 9",
        ),
        (
            config(addresses=[{"prefix": "a", "priority": -2}]),
            "addresses[0].priority: -2 is invalid: input should be greater than or equal to -1",
        ),
        (
            config(addresses=[{"pattern": "a.*"}, {"pattern": "a.*"}]),
            "addresses[1]: duplicate pattern:a.* (also addresses[0])",
        ),
    ],
)
def test_error_names_field_and_value(data: dict[str, Any], message: str) -> None:
    assert config_error(data).startswith(message)


def test_several_errors_share_one_line() -> None:
    message = config_error(config(listeners=[{"port": "abc", "role": "x"}], addresses=[{}]))
    assert message.split("; ") == [
        """listeners[0].port: 'abc' is not a valid port (1..65535 or "amqp")""",
        "listeners[0].role: 'x' is invalid: input should be 'normal', 'inter-router', 'edge',"
        " 'route-container' or 'gateway'",
        "addresses[0]: exactly one of prefix or pattern is required",
    ]


def test_long_values_are_shortened() -> None:
    message = config_error(config(listeners=[{"role": "x" * 500}]))
    assert len(message) < 200


EXAMPLE_YAML = """\
router: {id: R1, mode: interior}
listeners:
  - {host: 127.0.0.1, port: 5672, role: normal, linkCapacity: 100, saslMechanisms: [ANONYMOUS],
     authenticatePeer: false, idleTimeoutSeconds: 16, maxFrameSize: 16384, stripAnnotations: both}
  - host: ::1
    port: amqp
    role: inter-router
    saslMechanisms: ANONYMOUS PLAIN
    stripAnnotations: no
addresses:
  - {prefix: orders, distribution: closest}
  - {pattern: "sensors.*.temp", distribution: multicast}
  - {prefix: jobs, distribution: balanced, undeliverable: hold, holdTimeoutSeconds: 30}
  - {prefix: audit, undeliverable: redirect, fallbackAddress: audit.fallback}
"""


def check_example(cfg: RouterConfig) -> None:
    assert cfg.router.id == "R1"
    assert cfg.router.mode == "interior"
    first, second = cfg.listeners
    assert (first.host, first.port, first.linkCapacity) == ("127.0.0.1", 5672, 100)
    assert (second.host, second.port, second.role) == ("::1", 5672, "inter-router")
    assert second.saslMechanisms == ["ANONYMOUS", "PLAIN"]
    assert second.stripAnnotations == "no"
    assert [a.key for a in cfg.addresses] == [
        "prefix:orders",
        "pattern:sensors.*.temp",
        "prefix:jobs",
        "prefix:audit",
    ]
    assert cfg.addresses[2].holdTimeoutSeconds == 30
    assert cfg.addresses[3].fallbackAddress == "audit.fallback"


@pytest.mark.parametrize("name", ["router.yaml", "router.yml", "router.conf"])
def test_yaml_file(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text(EXAMPLE_YAML)
    check_example(load_config(path))


def test_json_file(tmp_path: Path) -> None:
    path = tmp_path / "router.JSON"
    data = {
        "router": {"id": "R1", "mode": "interior"},
        "listeners": [
            {"host": "127.0.0.1", "port": 5672, "linkCapacity": 100},
            {
                "host": "::1",
                "port": "amqp",
                "role": "inter-router",
                "saslMechanisms": "ANONYMOUS PLAIN",
                "stripAnnotations": "no",
            },
        ],
        "addresses": [
            {"prefix": "orders", "distribution": "closest"},
            {"pattern": "sensors.*.temp", "distribution": "multicast"},
            {"prefix": "jobs", "undeliverable": "hold", "holdTimeoutSeconds": 30},
            {"prefix": "audit", "undeliverable": "redirect", "fallbackAddress": "audit.fallback"},
        ],
    }
    path.write_text(json.dumps(data))
    check_example(load_config(str(path)))


def test_a_dumped_config_loads_back_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "router.yaml"
    path.write_text(EXAMPLE_YAML)
    cfg = load_config(path)
    again = tmp_path / "again.json"
    again.write_text(cfg.model_dump_json())
    assert load_config(again) == cfg


def test_field_errors_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "router.yaml"
    path.write_text("router: {id: R1}\nlisteners:\n  - {port: abc}\n")
    with pytest.raises(ConfigError, match=r"^listeners\[0\]\.port: 'abc' is not a valid port"):
        load_config(path)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("r.yaml", "router: [\n", "invalid YAML: line 2 column 1: expected the node content"),
        (
            "r.yaml",
            "router:\n  id: a\n  id: b\n",
            "invalid YAML: line 3 column 3: duplicate key 'id'",
        ),
        ("r.json", '{"router": {"id": "R1",}}', ":1:24: invalid JSON: Expecting property name"),
        ("r.json", '{"router": {}, "router": {}}', "invalid JSON: duplicate key 'router'"),
        ("r.yaml", "- a\n- b\n", "the top level must be a mapping, not list"),
        ("r.json", "[]", "the top level must be a mapping, not list"),
    ],
)
def test_unreadable_files(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(str(path))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"cannot read config file {str(path)!r}: No such file or directory"


def test_empty_file_reports_missing_router(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    with pytest.raises(ConfigError, match=r"^router: required$"):
        load_config(path)


def test_schema_describes_the_file() -> None:
    schema = config_schema()
    assert set(schema["properties"]) == {
        "router",
        "sslProfiles",
        "listeners",
        "connectors",
        "addresses",
        "linkRoutes",
        "telemetry",
        "gateway",
        "store",
        "policy",
        "vhosts",
    }
    assert schema["additionalProperties"] is False
    listener = schema["$defs"]["Listener"]
    assert {"type": "string", "pattern": r"^(\d+|amqp)$"} in listener["properties"]["port"]["anyOf"]
    assert listener["properties"]["linkCapacity"]["default"] == 250
    assert set(schema["$defs"]["Address"]["properties"]["distribution"]["enum"]) == {
        "closest",
        "balanced",
        "multicast",
    }
    json.dumps(schema)


# ----- router timers, connectors, roles and modes ---------------------------------------------


def test_router_timer_defaults_are_dispatchs() -> None:
    router = validate_config(config()).router
    assert (
        router.helloIntervalSeconds,
        router.helloMaxAgeSeconds,
        router.raIntervalSeconds,
        router.raIntervalFluxSeconds,
        router.remoteLsMaxAgeSeconds,
    ) == (1, 3, 30, 4, 60)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"helloIntervalSeconds": 0},
            "router.helloIntervalSeconds: 0 is invalid: input should be greater than 0",
        ),
        (
            {"raIntervalFluxSeconds": -4},
            "router.raIntervalFluxSeconds: -4 is invalid: input should be greater than 0",
        ),
        (
            {"helloIntervalSeconds": 3},
            "router: helloMaxAgeSeconds 3 must be greater than helloIntervalSeconds 3,"
            " or neighbors are lost between two HELLOs",
        ),
        (
            {"raIntervalSeconds": 60},
            "router: remoteLsMaxAgeSeconds 60 must be greater than raIntervalSeconds 60,"
            " or link state expires between two advertisements",
        ),
        (
            {"helloIntervalSeconds": 1.5},
            "router.helloIntervalSeconds: 1.5 is invalid: input should be a valid integer",
        ),
    ],
)
def test_router_timer_errors(fields: dict[str, Any], message: str) -> None:
    assert config_error({"router": {"id": "R1", **fields}}).startswith(message)


def test_router_timers_can_be_tuned() -> None:
    router = validate_config(
        {"router": {"id": "R1", "helloIntervalSeconds": 2, "helloMaxAgeSeconds": 5}}
    ).router
    assert (router.helloIntervalSeconds, router.helloMaxAgeSeconds) == (2, 5)


def interior(**sections: Any) -> dict[str, Any]:
    return {"router": {"id": "R1", "mode": "interior"}, **sections}


def test_connector_defaults_are_dispatchs() -> None:
    ctr = validate_config(config(connectors=[{}])).connectors[0]
    assert ctr.model_dump() == {
        "name": "connector/127.0.0.1:5672",
        "host": "127.0.0.1",
        "port": 5672,
        "role": "normal",
        "cost": 1,
        "saslMechanisms": ["ANONYMOUS"],
        "saslUsername": None,
        "saslPassword": None,
        "idleTimeoutSeconds": 16,
        "maxFrameSize": 16384,
        "stripAnnotations": "both",
        "linkCapacity": 250,
        "sslProfile": None,
        "verifyHostname": True,
    }


def test_inter_router_connector_to_a_name_that_does_not_resolve_yet() -> None:
    ctr = validate_config(
        interior(
            connectors=[
                {
                    "host": "router-1.routers.ns.svc.cluster.local",
                    "port": "55672",
                    "role": "inter-router",
                    "cost": 5,
                }
            ]
        )
    ).connectors[0]
    assert (ctr.host, ctr.port, ctr.role, ctr.cost) == (
        "router-1.routers.ns.svc.cluster.local",
        55672,
        "inter-router",
        5,
    )
    assert ctr.name == "connector/router-1.routers.ns.svc.cluster.local:55672"


def test_ipv6_connector_is_bracketed_in_its_name() -> None:
    ctr = validate_config(config(connectors=[{"host": "[::1]", "port": 6000}])).connectors[0]
    assert (ctr.host, ctr.name) == ("::1", "connector/[::1]:6000")


def test_connector_with_a_user_defaults_to_plain() -> None:
    ctr = validate_config(
        config(connectors=[{"saslUsername": "r1@REALM", "saslPassword": "env:PW"}])
    ).connectors[0]
    assert ctr.saslMechanisms == ["PLAIN"]
    assert (ctr.saslUsername, ctr.saslPassword) == ("r1@REALM", "env:PW")


def test_listener_cost_for_inter_router() -> None:
    lsn = validate_config(interior(listeners=[{"role": "inter-router", "cost": 7}])).listeners[0]
    assert lsn.cost == 7


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            config(listeners=[{"role": "inter-router"}]),
            "listeners[0]: role inter-router needs router.mode interior, not standalone",
        ),
        (
            {"router": {"id": "R1", "mode": "edge"}, "listeners": [{"role": "inter-router"}]},
            "listeners[0]: role inter-router needs router.mode interior, not edge",
        ),
        (
            config(connectors=[{"role": "inter-router"}]),
            "connectors[0]: role inter-router needs router.mode interior, not standalone",
        ),
        (
            {"router": {"id": "R1", "mode": "edge"}, "listeners": [{"role": "edge"}]},
            "listeners[0]: role edge needs router.mode interior, not edge"
            " (edge routers connect to interior routers)",
        ),
        (
            config(listeners=[{"role": "edge"}]),
            "listeners[0]: role edge needs router.mode interior, not standalone",
        ),
        (
            interior(connectors=[{"port": 1}, {"port": 2, "role": "edge"}]),
            "connectors[1]: role edge needs router.mode edge, not interior"
            " (interior routers dial each other as inter-router)",
        ),
        (
            config(connectors=[{"role": "edge"}]),
            "connectors[0]: role edge needs router.mode edge, not standalone",
        ),
        (
            interior(connectors=[{"cost": 2}]),
            "connectors[0]: cost 2 applies only to role inter-router, not normal",
        ),
        (
            interior(listeners=[{"role": "edge", "cost": 2}]),
            "listeners[0]: cost 2 applies only to role inter-router, not edge",
        ),
        (
            interior(connectors=[{"role": "inter-router", "cost": 0}]),
            "connectors[0].cost: 0 is invalid: input should be greater than or equal to 1",
        ),
        (
            config(connectors=[{"saslMechanisms": "PLAIN", "saslUsername": "u"}]),
            "connectors[0]: PLAIN needs both saslUsername and saslPassword",
        ),
        (
            config(connectors=[{"saslMechanisms": "ANONYMOUS", "saslUsername": "u"}]),
            "connectors[0]: saslUsername and saslPassword are only sent with PLAIN",
        ),
        (
            config(connectors=[{"saslUsername": ""}]),
            "connectors[0].saslUsername: must not be empty (leave it out instead)",
        ),
        (
            config(connectors=[{"host": "bad host"}]),
            "connectors[0].host: 'bad host' is not a valid host",
        ),
        (
            config(connectors=[{"port": 0}]),
            "connectors[0].port: 0 is not a valid port",
        ),
        (
            config(connectors=[{"sslProfile": "tls"}]),
            "connectors[0].sslProfile: no sslProfile named 'tls' (none are defined)",
        ),
        (
            config(connectors=[{"verifyHostname": "maybe"}]),
            "connectors[0].verifyHostname: 'maybe' is invalid",
        ),
        (
            config(connectors=[{"port": 1}, {"name": "connector/127.0.0.1:1", "port": 2}]),
            "connectors[1]: duplicate name 'connector/127.0.0.1:1' (also connectors[0])",
        ),
    ],
)
def test_connector_and_role_errors(data: dict[str, Any], message: str) -> None:
    assert config_error(data).startswith(message)


@pytest.mark.parametrize(
    ("mode", "listener_roles", "connector_roles"),
    [
        ("standalone", ["normal", "route-container"], ["normal", "route-container"]),
        ("interior", ["normal", "inter-router", "edge"], ["inter-router", "route-container"]),
        ("edge", ["normal", "route-container"], ["edge", "normal"]),
    ],
)
def test_roles_each_mode_allows(
    mode: str, listener_roles: list[str], connector_roles: list[str]
) -> None:
    cfg = validate_config(
        {
            "router": {"id": "R1", "mode": mode},
            "listeners": [{"port": 5672 + i, "role": r} for i, r in enumerate(listener_roles)],
            "connectors": [{"port": 6000 + i, "role": r} for i, r in enumerate(connector_roles)],
        }
    )
    assert [c.role for c in cfg.connectors] == connector_roles


def test_a_config_with_connectors_dumps_and_loads_back(tmp_path: Path) -> None:
    cfg = validate_config(
        interior(
            listeners=[{"role": "inter-router", "port": 55672, "cost": 2}],
            connectors=[
                {"host": "peer", "port": 55672, "role": "inter-router", "cost": 3},
                {"host": "broker", "role": "route-container", "stripAnnotations": False},
            ],
        )
    )
    path = tmp_path / "again.json"
    path.write_text(cfg.model_dump_json())
    assert load_config(path) == cfg


# ----- link routes ----------------------------------------------------------------------------


def route(**fields: Any) -> dict[str, Any]:
    return {"direction": "in", "containerId": "broker", **fields}


def test_link_route_defaults() -> None:
    lr = validate_config(config(linkRoutes=[route(prefix="queue")])).linkRoutes[0]
    assert lr.model_dump() == {
        "prefix": "queue",
        "pattern": None,
        "direction": "in",
        "containerId": "broker",
        "connection": None,
        "addExternalPrefix": None,
        "delExternalPrefix": None,
    }


def test_in_and_out_routes_for_one_prefix_are_fine() -> None:
    routes = [
        route(prefix="queue", direction="in"),
        route(prefix="queue", direction="out"),
        route(pattern="*.orders", direction="in", containerId=None, connection="brokers"),
        route(pattern="*/orders", direction="out", containerId=None, connection="brokers"),
    ]
    cfg = validate_config(config(linkRoutes=routes))
    assert [(lr.direction, lr.prefix or lr.pattern) for lr in cfg.linkRoutes] == [
        ("in", "queue"),
        ("out", "queue"),
        ("in", "*.orders"),
        ("out", "*/orders"),
    ]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            config(linkRoutes=[{"prefix": "queue", "containerId": "broker"}]),
            "linkRoutes[0].direction: required",
        ),
        (
            config(linkRoutes=[route(prefix="queue", direction="both")]),
            "linkRoutes[0].direction: 'both' is invalid: input should be 'in' or 'out'",
        ),
        (
            config(linkRoutes=[route(prefix="queue", pattern="queue.*")]),
            "linkRoutes[0]: exactly one of prefix or pattern is required",
        ),
        (
            config(linkRoutes=[route()]),
            "linkRoutes[0]: exactly one of prefix or pattern is required",
        ),
        (
            config(linkRoutes=[route(prefix="queue", connection="brokers")]),
            "linkRoutes[0]: exactly one of containerId or connection is required",
        ),
        (
            config(linkRoutes=[{"prefix": "queue", "direction": "out"}]),
            "linkRoutes[0]: exactly one of containerId or connection is required",
        ),
        (
            config(linkRoutes=[{"prefix": "q", "direction": "out", "connection": " "}]),
            "linkRoutes[0]: connection ' ' is empty: name the container or connection",
        ),
        (
            config(linkRoutes=[route(prefix="queue.*")]),
            "linkRoutes[0].prefix: 'queue.*' is not a valid prefix: use pattern for wildcards",
        ),
        (
            config(linkRoutes=[route(prefix="queue/#")]),
            "linkRoutes[0].prefix: 'queue/#' is not a valid prefix: use pattern for wildcards",
        ),
        (
            config(linkRoutes=[route(prefix="")]),
            "linkRoutes[0].prefix: '' is not a valid prefix: tokens separated by '.' or '/' must"
            " be non-empty and contain no spaces",
        ),
        (
            config(linkRoutes=[route(pattern="queue.a*")]),
            "linkRoutes[0].pattern: 'queue.a*' is not a valid pattern: '*' and '#' must be whole"
            " tokens",
        ),
        (
            config(linkRoutes=[route(pattern="queue..*")]),
            "linkRoutes[0].pattern: 'queue..*' is not a valid pattern: tokens separated by '.'"
            " or '/' must be non-empty and contain no spaces",
        ),
        (
            config(linkRoutes=[route(prefix="queue"), route(pattern="queue"), {"direction": "x"}]),
            "linkRoutes[2].direction: 'x' is invalid",
        ),
        (
            config(linkRoutes=[route(prefix="queue", colour="red")]),
            "linkRoutes[0].colour: unknown key",
        ),
        (
            config(linkRoutes=[route(prefix="a.b"), route(prefix="a.b", containerId="other")]),
            "linkRoutes[1]: duplicate prefix:a.b direction:in (also linkRoutes[0])",
        ),
        (
            config(linkRoutes=[route(prefix="a.b"), route(prefix="a/b")]),
            "linkRoutes[1]: duplicate prefix:a/b direction:in (also linkRoutes[0])",
        ),
        (
            config(
                linkRoutes=[
                    route(prefix="x", direction="out"),
                    route(prefix="a", direction="out"),
                    route(pattern="a.#", direction="out"),
                ]
            ),
            "linkRoutes[2]: duplicate pattern:a.# direction:out (also linkRoutes[1])",
        ),
        (
            config(linkRoutes=[route(pattern="a.*.c"), route(pattern="a/*/c")]),
            "linkRoutes[1]: duplicate pattern:a/*/c direction:in (also linkRoutes[0])",
        ),
    ],
)
def test_link_route_errors(data: dict[str, Any], message: str) -> None:
    assert config_error(data).startswith(message)
