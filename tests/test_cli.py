from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from router.cli import main
from router.config.models import RouterConfig
from router.log import get_logger

ROUTER_DEFAULTS = {
    "helloIntervalSeconds": 1,
    "helloMaxAgeSeconds": 3,
    "raIntervalSeconds": 30,
    "raIntervalFluxSeconds": 4,
    "remoteLsMaxAgeSeconds": 60,
    "drainTimeoutSeconds": 10.0,
    "managementWriters": [],
    "saslConfigDir": None,
    "saslConfigName": "routernet",
}

REPO = Path(__file__).resolve().parent.parent

FILE = """\
router: {id: FromFile, mode: interior}
listeners:
  - {host: 127.0.0.1, port: 5672}
  - {host: 127.0.0.1, port: 5673, role: normal, linkCapacity: 10}
  - {host: 127.0.0.1, port: 5674, role: inter-router}
addresses:
  - {prefix: orders, distribution: closest}
"""


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """main() configures the root logger; keep that from leaking into other tests."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.captureWarnings(False)


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "router.yaml"
    path.write_text(FILE)
    return path


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[RouterConfig]:
    """Stands in for router.core.engine, recording what serve() was given."""
    calls: list[RouterConfig] = []

    def serve(config: RouterConfig, config_sources: object = ()) -> int:
        calls.append(config)
        get_logger("router.engine").info("engine.stub", note="fake engine", ok=True)
        return 7

    engine = types.ModuleType("router.core.engine")
    engine.serve = serve  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "router.core.engine", engine)
    return calls


def check(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["--check", *argv]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return json.loads(out)


def fail(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("routernet-router: ")
    assert err.endswith("\n")
    assert err.count("\n") == 1
    return err[len("routernet-router: ") : -1]


def test_check_prints_the_effective_config(
    capsys: pytest.CaptureFixture[str], config_file: Path
) -> None:
    printed = check(capsys, "--config", str(config_file))
    assert printed["router"] == {"id": "FromFile", "mode": "interior", **ROUTER_DEFAULTS}
    assert [lsn["port"] for lsn in printed["listeners"]] == [5672, 5673, 5674]
    assert printed["listeners"][0]["name"] == "listener/127.0.0.1:5672"
    assert printed["listeners"][0]["linkCapacity"] == 250
    assert printed["addresses"][0]["prefix"] == "orders"


def test_check_output_is_a_valid_config(
    capsys: pytest.CaptureFixture[str], config_file: Path
) -> None:
    printed = check(capsys, "--config", str(config_file), "--listen", "[::1]:amqp")
    assert check(capsys, "--config", str(_write_json(config_file, printed))) == printed


def _write_json(near: Path, data: dict[str, Any]) -> Path:
    path = near.with_name("effective.json")
    path.write_text(json.dumps(data))
    return path


def test_id_flag_replaces_the_files(capsys: pytest.CaptureFixture[str], config_file: Path) -> None:
    printed = check(capsys, "--config", str(config_file), "--id", "FromFlag")
    assert printed["router"] == {"id": "FromFlag", "mode": "interior", **ROUTER_DEFAULTS}


def test_id_defaults_to_the_host_name(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "box-1.example")
    router = {"id": "box-1.example", "mode": "standalone", **ROUTER_DEFAULTS}
    assert check(capsys)["router"] == router
    no_id = tmp_path / "no-id.yaml"
    no_id.write_text("router: {mode: edge}\n")
    assert check(capsys, "--config", str(no_id))["router"] == {
        "id": "box-1.example",
        "mode": "edge",
        **ROUTER_DEFAULTS,
    }
    no_router = tmp_path / "no-router.yaml"
    no_router.write_text("addresses: [{prefix: a}]\n")
    assert check(capsys, "--config", str(no_router))["router"]["id"] == "box-1.example"


def test_listen_flags_replace_only_normal_listeners(
    capsys: pytest.CaptureFixture[str], config_file: Path
) -> None:
    printed = check(
        capsys, "--config", str(config_file), "--listen", "[::1]:6000", "--listen", ":amqp"
    )
    assert [(lsn["host"], lsn["port"], lsn["role"]) for lsn in printed["listeners"]] == [
        ("127.0.0.1", 5674, "inter-router"),
        ("::1", 6000, "normal"),
        ("0.0.0.0", 5672, "normal"),
    ]
    assert printed["listeners"][1]["name"] == "listener/[::1]:6000"
    assert printed["listeners"][1]["linkCapacity"] == 250


def test_listen_without_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    printed = check(capsys, "--id", "R1", "--listen", "localhost:5800")
    assert [(lsn["host"], lsn["port"]) for lsn in printed["listeners"]] == [("localhost", 5800)]


def test_without_listen_the_files_listeners_stay(
    capsys: pytest.CaptureFixture[str], config_file: Path
) -> None:
    assert len(check(capsys, "--config", str(config_file))["listeners"]) == 3


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--listen", "5672"], "argument --listen: '5672' is not HOST:PORT"),
        (
            ["--listen", "::1:5672"],
            "argument --listen: '::1:5672': write an IPv6 host in brackets, [::1]:5672",
        ),
        (
            ["--listen", "host:abc"],
            "argument --listen: 'host:abc': port: 'abc' is not a valid port",
        ),
        (
            ["--listen", "host:70000"],
            "argument --listen: 'host:70000': port: 70000 is not a valid port",
        ),
        (
            ["--listen", "bad host:1"],
            "argument --listen: 'bad host:1': host: 'bad host' is not a valid host",
        ),
        (
            ["--id", "R1", "--listen", ":5672", "--listen", "0.0.0.0:5672"],
            "listeners[1]: duplicate 0.0.0.0:5672 (also listeners[0])",
        ),
        (["--id", "a b"], "router.id: 'a b' is not a valid router id"),
        (["--log-level", "trace"], "argument --log-level: invalid choice: 'trace'"),
        (["--log-format", "xml"], "argument --log-format: invalid choice: 'xml'"),
        (["--frobnicate"], "unrecognized arguments: --frobnicate"),
    ],
)
def test_bad_flags(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert fail(capsys, *argv).startswith(message)


def test_bad_field_in_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "router.yaml"
    path.write_text("router: {id: R1}\naddresses:\n  - {prefix: a}\n  - {prefix: b, pattern: c}\n")
    message = fail(capsys, "--check", "--config", str(path))
    assert message == "addresses[1]: exactly one of prefix or pattern is required"


def test_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    message = fail(capsys, "--config", str(path))
    assert message == f"cannot read config file {str(path)!r}: No such file or directory"


def test_unparsable_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "router.json"
    path.write_text("{router: 1}")
    assert fail(capsys, "--config", str(path)).startswith(f"{path}:1:2: invalid JSON")


def test_listen_flag_overrides_a_bad_normal_listener(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "router.yaml"
    path.write_text("router: {id: R1}\nlisteners: [{port: abc}]\n")
    assert fail(capsys, "--config", str(path)).startswith("listeners[0].port: 'abc'")
    assert check(capsys, "--config", str(path), "--listen", ":6000")["listeners"][0]["port"] == 6000


def test_serve_gets_the_effective_config(
    capsys: pytest.CaptureFixture[str], config_file: Path, served: list[RouterConfig]
) -> None:
    argv = ["--config", str(config_file), "--id", "R9", "--listen", "127.0.0.1:7000"]
    assert main(argv) == 7
    assert len(served) == 1
    [config] = served
    assert config.router.id == "R9"
    assert config.router.mode == "interior"
    assert [(lsn.port, lsn.role) for lsn in config.listeners] == [
        (5674, "inter-router"),
        (7000, "normal"),
    ]
    assert config.addresses[0].prefix == "orders"
    out, _ = capsys.readouterr()
    assert out == ""


def test_check_does_not_serve(
    capsys: pytest.CaptureFixture[str], served: list[RouterConfig]
) -> None:
    check(capsys, "--id", "R1")
    assert served == []


def test_text_logs(capsys: pytest.CaptureFixture[str], served: list[RouterConfig]) -> None:
    main(["--id", "R1"])
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("ts=")
    assert (
        " level=info logger=router event=config.loaded file=null id=R1 mode=standalone" in lines[0]
    )
    assert lines[1].endswith(
        ' level=info logger=router.engine event=engine.stub note="fake engine" ok=true'
    )


def test_json_logs(capsys: pytest.CaptureFixture[str], served: list[RouterConfig]) -> None:
    main(["--id", "R1", "--log-format", "json"])
    records = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [r["event"] for r in records] == ["config.loaded", "engine.stub"]
    assert records[1]["note"] == "fake engine"
    assert records[1]["ts"].endswith("Z")


def test_log_level_filters(capsys: pytest.CaptureFixture[str], served: list[RouterConfig]) -> None:
    main(["--id", "R1", "--log-level", "warning"])
    assert capsys.readouterr().err == ""
    assert not get_logger("router").enabled("info")


def test_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    assert "host name" in capsys.readouterr().out


def test_module_entry_point(config_file: Path) -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "router", "--check", "--config", str(config_file), "--id", "Sub"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["router"]["id"] == "Sub"

    bad = subprocess.run(
        [sys.executable, "-m", "router", "--check", "--listen", "nowhere"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2
    assert bad.stderr == "routernet-router: argument --listen: 'nowhere' is not HOST:PORT\n"


# ----- modes, inter-router and edge listeners, connectors ------------------------------------

ROUTERS_FILE = """\
router: {id: FromFile, mode: interior}
listeners:
  - {host: 127.0.0.1, port: 5672}
  - {host: 0.0.0.0, port: 55672, role: inter-router}
  - {host: 0.0.0.0, port: 45672, role: edge}
connectors:
  - {name: broker, host: broker.example, port: 5672, role: route-container}
  - {host: old-peer.example, port: 55672, role: inter-router}
"""


@pytest.fixture
def routers_file(tmp_path: Path) -> Path:
    path = tmp_path / "routers.yaml"
    path.write_text(ROUTERS_FILE)
    return path


def test_mode_flag_replaces_the_files(
    capsys: pytest.CaptureFixture[str], config_file: Path
) -> None:
    assert check(capsys, "--id", "R1", "--mode", "edge")["router"]["mode"] == "edge"
    printed = check(capsys, "--config", str(config_file), "--mode", "interior")
    assert printed["router"]["mode"] == "interior"


def test_connect_in_interior_mode_makes_inter_router_connectors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    printed = check(
        capsys,
        "--id",
        "R1",
        "--mode",
        "interior",
        "--connect",
        "router-1.routers.svc:55672",
        "--connect",
        "[fd00::2]:amqp,cost=4",
    )
    connectors = printed["connectors"]
    assert [(c["name"], c["host"], c["port"], c["role"], c["cost"]) for c in connectors] == [
        ("connector/router-1.routers.svc:55672", "router-1.routers.svc", 55672, "inter-router", 1),
        ("connector/[fd00::2]:5672", "fd00::2", 5672, "inter-router", 4),
    ]
    assert connectors[0]["saslMechanisms"] == ["ANONYMOUS"]


def test_connect_in_edge_mode_makes_edge_connectors(capsys: pytest.CaptureFixture[str]) -> None:
    printed = check(capsys, "--id", "E1", "--mode", "edge", "--connect", "interior:45672")
    assert [(c["host"], c["role"], c["cost"]) for c in printed["connectors"]] == [
        ("interior", "edge", 1)
    ]


def test_connect_takes_its_role_from_the_files_mode(
    capsys: pytest.CaptureFixture[str], routers_file: Path
) -> None:
    printed = check(capsys, "--config", str(routers_file), "--connect", "new-peer:55672")
    # The file's inter-router connector is replaced, its route-container one kept.
    assert [(c["name"], c["role"]) for c in printed["connectors"]] == [
        ("broker", "route-container"),
        ("connector/new-peer:55672", "inter-router"),
    ]


def test_router_listen_flags_replace_only_their_role(
    capsys: pytest.CaptureFixture[str], routers_file: Path
) -> None:
    printed = check(
        capsys,
        "--config",
        str(routers_file),
        "--inter-router-listen",
        ":55673",
        "--inter-router-listen",
        "[::]:55674",
        "--edge-listen",
        "127.0.0.1:45673",
    )
    assert [(lsn["host"], lsn["port"], lsn["role"]) for lsn in printed["listeners"]] == [
        ("127.0.0.1", 5672, "normal"),
        ("0.0.0.0", 55673, "inter-router"),
        ("::", 55674, "inter-router"),
        ("127.0.0.1", 45673, "edge"),
    ]
    assert len(printed["connectors"]) == 2  # untouched without --connect


def test_a_whole_interior_router_from_flags(
    capsys: pytest.CaptureFixture[str], served: list[RouterConfig]
) -> None:
    argv = [
        *("--id", "R1", "--mode", "interior", "--listen", ":5672"),
        *("--inter-router-listen", ":55672", "--edge-listen", ":45672"),
        *("--connect", "router-2:55672,cost=2", "--connect", "router-3:55672"),
    ]
    assert main(argv) == 7
    [config] = served
    assert [lsn.role for lsn in config.listeners] == ["normal", "inter-router", "edge"]
    assert [(c.host, c.cost) for c in config.connectors] == [("router-2", 2), ("router-3", 1)]
    assert "connectors=2" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--id", "R1", "--connect", "peer:55672"],
            "--connect needs router mode interior or edge (--mode), not standalone",
        ),
        (["--mode", "mesh"], "argument --mode: invalid choice: 'mesh'"),
        (
            ["--mode", "interior", "--connect", "peer"],
            "argument --connect: 'peer' is not HOST:PORT",
        ),
        (
            ["--mode", "interior", "--connect", ":55672"],
            "argument --connect: ':55672': a connector needs a host",
        ),
        (
            ["--mode", "interior", "--connect", "::1:55672"],
            "argument --connect: '::1:55672': write an IPv6 host in brackets",
        ),
        (
            ["--mode", "interior", "--connect", "peer:55672,cost=0"],
            "argument --connect: 'peer:55672,cost=0': cost: '0' is invalid",
        ),
        (
            ["--mode", "interior", "--connect", "peer:55672,cost=x"],
            "argument --connect: 'peer:55672,cost=x': cost: 'x' is invalid",
        ),
        (
            ["--mode", "interior", "--connect", "peer:55672,weight=2"],
            "argument --connect: 'peer:55672,weight=2': unknown option 'weight=2' (only cost=N)",
        ),
        (
            ["--id", "E1", "--mode", "edge", "--connect", "peer:55672,cost=2"],
            "connectors[0]: cost 2 applies only to role inter-router, not edge",
        ),
        (
            ["--id", "R1", "--inter-router-listen", ":55672"],
            "listeners[0]: role inter-router needs router.mode interior, not standalone",
        ),
        (
            ["--id", "E1", "--mode", "edge", "--edge-listen", ":45672"],
            "listeners[0]: role edge needs router.mode interior, not edge",
        ),
        (
            ["--id", "R1", "--mode", "interior", "--listen", ":5672", "--edge-listen", ":5672"],
            "listeners[1]: duplicate 0.0.0.0:5672 (also listeners[0])",
        ),
        (
            ["--inter-router-listen", "host:70000"],
            "argument --inter-router-listen: 'host:70000': port: 70000 is not a valid port",
        ),
    ],
)
def test_bad_router_network_flags(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert fail(capsys, *argv).startswith(message)


def test_drain_seconds_flag_replaces_the_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "router.yaml"
    path.write_text("router: {id: R1, drainTimeoutSeconds: 20}\n")
    assert check(capsys, "--config", str(path))["router"]["drainTimeoutSeconds"] == 20
    printed = check(capsys, "--config", str(path), "--drain-seconds", "2.5")
    assert printed["router"]["drainTimeoutSeconds"] == 2.5
    assert fail(capsys, "--id", "R1", "--drain-seconds", "-1").startswith(
        "router.drainTimeoutSeconds: -1.0 is invalid"
    )
