"""Two `routernet up` networks joined by a Gateway resource, as a user runs them: west accepts
gateway connections and exports its `plant-` containers, east dials it and exports `east-`
ones; `(c)/node` traffic crosses both ways and what west does not export stays out of reach."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from clients import ACCEPTED, RELEASED, World
from router_operator import local
from test_containers import anonymous_send, containers
from test_linkroute import FakeBroker
from test_local_backend import routernet, routers_of

pytestmark = pytest.mark.network

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
  export: [{prefix: plant-}]
  listener: {router: west, port: 5673}
"""

EAST = """\
apiVersion: routernet.io/v1alpha1
kind: Router
metadata: {name: east}
spec: {replicas: 1}
---
apiVersion: routernet.io/v1alpha1
kind: Gateway
metadata: {name: to-west}
spec:
  export: [{prefix: east-}]
  connectors: [{name: west, router: east, host: HOST, port: PORT}]
"""


@pytest.fixture
def world() -> Iterator[World]:
    with World() as w:
        yield w


@contextlib.contextmanager
def network(tmp_path: Path, name: str, yaml: str) -> Iterator[str]:
    """`routernet up` of one file; yields its output; always `down` (and SIGKILL) after."""
    state = tmp_path / name
    (tmp_path / f"{name}.yaml").write_text(yaml)
    try:
        result = routernet("up", "--state-dir", str(state), str(tmp_path / f"{name}.yaml"))
        assert result.returncode == 0, result.stderr
        yield result.stdout
    finally:
        with contextlib.suppress(Exception):
            local.down(state, timeout=2)
        for pid in routers_of(state):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def client_url(output: str, router: str) -> str:
    found = re.search(rf"^{router}\s+interior\s+(amqp://\S+)", output, re.MULTILINE)
    assert found, output
    return found.group(1)


def test_two_local_networks_joined_by_a_gateway(tmp_path: Path, world: World) -> None:
    with network(tmp_path, "west", WEST) as west_out:
        listener = re.search(r"gateway listeners: west-0 (\S+):(\d+)", west_out)
        assert listener, west_out
        host, port = listener.groups()
        east_yaml = textwrap.dedent(EAST).replace("HOST", host).replace("PORT", port)
        with network(tmp_path, "east", east_yaml) as east_out:
            west_url, east_url = client_url(west_out, "west-0"), client_url(east_out, "east-0")
            plant = FakeBroker(world, west_url, container_id="plant-w")
            secret = FakeBroker(world, west_url, container_id="secret-w")
            app = FakeBroker(world, east_url, container_id="east-app")

            def known(url: str, container: str) -> bool:
                row = containers(world, url).get(container, {})
                return row.get("location", "unreachable") != "unreachable"

            world.run_until(lambda: known(east_url, "plant-w"), timeout=20.0, what="plant-w")
            world.run_until(lambda: known(west_url, "east-app"), timeout=20.0, what="east-app")
            east_client = world.connect(east_url)
            assert anonymous_send(east_client, "(plant-w)/orders", 2) == [ACCEPTED] * 2
            west_client = world.connect(west_url)
            assert anonymous_send(west_client, "(east-app)/inbox", 1) == [ACCEPTED]
            assert [a for a, _m in plant.received] == ["orders"] * 2
            assert [a for a, _m in app.received] == ["inbox"]
            assert not known(east_url, "secret-w")
            assert anonymous_send(east_client, "(secret-w)/orders", 1) == [RELEASED]
            assert secret.received == []

