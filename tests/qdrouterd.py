"""qdrouterd 1.19 run from the same configuration as a RouterProcess, for tests that show both
routers answer alike.

No registry ships qdrouterd, so CI has none: a test parametrized with `KINDS` runs against ours
always and against qdrouterd where ``QDROUTERD`` names a binary (bench/build-qdrouterd.sh
builds one), skipping it otherwise. `conf` writes Dispatch's file format from our configuration
dict: the router, listeners, policy and vhost entities (a vhost's groups as the JSON Dispatch
reads between ``groups: {`` and its closing brace).
"""

from __future__ import annotations

import json
import os
from typing import Any

import processes
import pytest
from harness import RouterProcess

QDROUTERD = os.environ.get("QDROUTERD")
KINDS = [
    "routernet",
    pytest.param(
        "qdrouterd",
        marks=pytest.mark.skipif(
            not QDROUTERD, reason="QDROUTERD is not set: no qdrouterd to compare with"
        ),
    ),
]


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ", ".join(value)
    return str(value)


def _section(name: str, values: dict[str, Any]) -> str:
    lines = [f"{name} {{"]
    for key, value in values.items():
        if key == "groups":
            # As Dispatch's own tests write it: one group a line, each with a comma (its
            # parser passes these lines through as JSON and counts braces only at line ends).
            lines.append("    groups: {")
            lines += [f"        {json.dumps(g)}: {json.dumps(v)}," for g, v in value.items()]
            lines.append("    }")
        else:
            lines.append(f"    {key}: {_value(value)}")
    lines.append("}")
    return "\n".join(lines)


def conf(config: dict[str, Any]) -> str:
    """qdrouterd.conf for a RouterProcess's configuration (the parts these tests use)."""
    router = dict(config["router"])
    router.pop("drainTimeoutSeconds", None)
    router.pop("managementWriters", None)
    router.setdefault("mode", "standalone")
    if "saslConfigDir" in router:
        router.setdefault("saslConfigName", "routernet")
    sections = [_section("router", router)]
    for listener in config["listeners"]:
        entry = {"host": listener["host"], "port": listener["port"]}
        entry["saslMechanisms"] = " ".join(listener.get("saslMechanisms", ["ANONYMOUS"]))
        entry["authenticatePeer"] = "yes" if listener.get("authenticatePeer") else "no"
        for key in ("role", "policyVhost", "maxFrameSize"):
            if key in listener:
                entry[key] = listener[key]
        sections.append(_section("listener", entry))
    if "policy" in config:
        sections.append(_section("policy", config["policy"]))
    for vhost in config.get("vhosts", []):
        sections.append(_section("vhost", vhost))
    return "\n".join(sections) + "\n"


class QdrouterdProcess(RouterProcess):
    """A RouterProcess whose process is qdrouterd, run from `conf` of the same settings."""

    def launch(self) -> None:
        assert QDROUTERD, "QDROUTERD is not set"
        path = self.config_path.with_suffix(".conf")
        path.write_text(conf(self.config))
        log = self.log_path.open("ab")
        self.proc = processes.start(
            [QDROUTERD, "-c", str(path)], stdout=log, stderr=log, env={**os.environ}
        )
        log.close()

    def rewrite_config(self) -> None:
        raise NotImplementedError("qdrouterd reads its configuration once")


def router_process(kind: str, *args: Any, **kwargs: Any) -> RouterProcess:
    """Ours or qdrouterd, with RouterProcess's arguments."""
    cls = QdrouterdProcess if kind == "qdrouterd" else RouterProcess
    return cls(*args, **kwargs)
