"""The router process runs on plain records generated from the config models, validated by a
child (router/config/views.py says why): the records must be current, say what the models say,
and the router process must not load what they exist to keep out."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from router.config import generate as configgen
from router.config import records as configrecords
from router.config.child import ChildValidator
from router.config.models import RouterConfig, validate_config
from router.config.views import ConfigError
from router.nodes.config import NodeSettings

REPO = Path(__file__).resolve().parent.parent

FULL: dict[str, Any] = {
    "router": {"id": "R1", "mode": "interior", "drainTimeoutSeconds": 4},
    "sslProfiles": [{"name": "tls", "caCertFile": __file__}],
    "listeners": [
        {"port": 5672, "saslMechanisms": "ANONYMOUS PLAIN"},
        {"host": "::1", "port": 5673, "role": "inter-router", "cost": 3},
    ],
    "connectors": [
        {"name": "up", "host": "peer", "port": 55672, "role": "inter-router"},
        {"name": "gw", "host": "other", "role": "gateway", "sslProfile": "tls"},
    ],
    "addresses": [
        {"prefix": "orders", "distribution": "balanced", "undeliverable": "hold"},
        {
            "pattern": "jobs.*",
            "node": {"type": "queue", "hosts": ["R1"], "bindings": [{"address": "audit"}]},
        },
    ],
    "linkRoutes": [{"prefix": "broker", "direction": "in", "containerId": "b"}],
    "telemetry": {"http": {"port": 0}, "windowSeconds": 2},
    "gateway": {
        "rules": [{"container": "c1", "node": {"pattern": "a.#"}, "applicationProperties": {}}],
        "export": [{"prefix": "c"}],
        "containers": [{"container": "far", "connector": "gw"}],
    },
    "store": {"path": "/var/lib/routernet"},
}


def full_model() -> RouterConfig:
    return RouterConfig.model_validate(FULL)


def test_records_are_generated_from_the_current_models() -> None:
    assert (REPO / "router" / "config" / "records.py").read_text() == configgen.render(), (
        "router/config/records.py is stale: run `make config-records`"
    )


def test_a_record_says_what_its_model_says() -> None:
    model = full_model()
    record = configrecords.RouterConfig.from_dict(model.model_dump(mode="json"))
    assert record.as_dict() == model.model_dump(mode="json")
    assert record.field_names() == model.field_names()
    for got, want in zip(record.listeners, model.listeners, strict=True):
        assert (got.address, got.name, got.verifies_clients) == (
            want.address,
            want.name,
            want.verifies_clients,
        )
    assert record.listeners[1].address == "[::1]:5673"
    assert [c.address for c in record.connectors] == [c.address for c in model.connectors]
    assert [a.key for a in record.addresses] == [a.key for a in model.addresses]
    assert [r.key for r in record.linkRoutes] == [r.key for r in model.linkRoutes]
    assert isinstance(record.addresses[1].node, configrecords.NodeSettings)
    assert record.addresses[1].node.bindings[0].address == "audit"
    match = record.gateway.rules[0].node
    assert match is not None and match.matches("a.b.c") and not match.matches("b")
    assert record.telemetry.http is not None and record.telemetry.http.port == 0


def test_endpoints_point_at_their_resolved_profile_which_takes_part_in_equality() -> None:
    dump = full_model().model_dump(mode="json")
    record = configrecords.RouterConfig.from_dict(dump)
    [gw] = [c for c in record.connectors if c.name == "gw"]
    assert gw.ssl is record.sslProfiles[0]
    assert record.connectors[0].ssl is None
    assert configrecords.RouterConfig.from_dict(dump) == record
    dump["sslProfiles"][0]["ciphers"] = "HIGH"
    changed = configrecords.RouterConfig.from_dict(dump)
    assert changed.connectors[1] != gw  # same fields, another profile: a changed connector
    assert changed.connectors[0] == record.connectors[0]


def test_records_default_as_the_models_do() -> None:
    """The router makes some itself (a temporary queue's settings, say)."""
    topic = configrecords.NodeSettings(type="topic").as_dict()
    assert topic == NodeSettings(type="topic").model_dump()
    minimal = validate_config({"router": {"id": "R1"}})
    built = configrecords.RouterConfig(router=configrecords.RouterSettings(id="R1"))
    assert built.as_dict() == minimal.model_dump()


def test_a_child_validates_with_the_command_line() -> None:
    config = ChildValidator(["--id", "R7", "--listen", "127.0.0.1:5999"]).start(None, None)
    record = config.result()
    assert isinstance(record, configrecords.RouterConfig)
    assert record.router.id == "R7"
    assert [lsn.address for lsn in record.listeners] == ["127.0.0.1:5999"]
    text = "router: {id: FILE}\naddresses: [{prefix: a, distribution: nowhere}]\n"
    with pytest.raises(ConfigError, match=r"^addresses\[0\]\.distribution: 'nowhere' is invalid"):
        ChildValidator(["--id", "R7"])(text, "router.yaml").result()


def test_changes_go_to_one_warm_child_that_answers_each() -> None:
    """Changes come in bursts: the child that validated one stays for the next (a cold start
    took over a second on a busy machine); good and bad ones alike, one after another."""
    validator = ChildValidator(["--id", "R7"])
    good = "router: {id: FILE}\naddresses: [{prefix: a, distribution: multicast}]\n"
    bad = "router: {id: FILE}\naddresses: [{prefix: a, distribution: nowhere}]\n"
    first = validator(good, "router.yaml")
    assert first.exit_fd() is not None  # a loop can wait on it
    assert first.result().addresses[0].distribution == "multicast"
    warm = validator._warm
    assert warm is not None
    with pytest.raises(ConfigError, match=r"^addresses\[0\]\.distribution: 'nowhere'"):
        validator(bad, "router.yaml").result()
    started = time.monotonic()
    again = validator(good.replace("multicast", "closest"), "router.yaml")
    assert again.result().addresses[0].distribution == "closest"
    assert time.monotonic() - started < 0.2  # no interpreter to start
    assert validator._warm is warm and warm.usable()


def test_a_warm_child_gone_is_replaced_by_a_cold_one_for_the_request() -> None:
    validator = ChildValidator(["--id", "R7"])
    validator("router: {id: FILE}\n", "router.yaml").result()
    warm = validator._warm
    assert warm is not None
    warm._proc.kill()  # a crash, or its idle time just over
    warm._proc.wait()
    warm.used_at = time.monotonic()  # as if still within its time: the request is sent to it
    check = validator("router: {id: FILE}\naddresses: [{prefix: b}]\n", "router.yaml")
    assert [a.prefix for a in check.result().addresses] == ["b"]


def test_a_warm_child_leaves_when_idle_or_when_the_router_goes() -> None:
    argv = [sys.executable, "-m", "router.config.check", "--serve"]
    with subprocess.Popen([*argv, "0.2"], stdin=subprocess.PIPE) as idle:
        try:
            assert idle.stdin is not None
            idle.stdin.write(b'["--id", "R7"]\n')
            idle.stdin.flush()
            assert idle.wait(timeout=20) == 0  # its stdin still open: it left by itself
        finally:
            idle.kill()
    gone = subprocess.run([*argv, "30"], input=b'["--id", "R7"]\n', timeout=20, check=False)
    assert gone.returncode == 0  # its stdin closed: the router went


def test_the_router_process_loads_no_pydantic_yaml_or_metrics_library() -> None:
    """Its idle memory: pydantic, the models and PyYAML were a third of it, prometheus-client
    and the HTTP and e-mail modules it imports a sixth (loaded only with telemetry.http), and
    hashlib's OpenSSL digests a tenth."""
    probe = (
        "import sys, router.cli, router.core.engine, router.config.live, router.config.sync;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in"
        " ('pydantic', 'pydantic_core', 'yaml', 'prometheus_client', 'hashlib', '_hashlib',"
        " 'secrets', 'email') or m in ('router.config.models', 'router.config.check')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(out.stdout.replace("'", '"')) == []
