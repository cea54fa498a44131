"""Two `routernet up` networks joined by a Gateway resource, as a user runs them: the files
of examples/gateway/. West accepts gateway connections and exports its `branch-` containers;
east dials it, exports head-office and picks containers for `()/node` by its rules. Traffic
crosses both ways; what west does not export stays out of reach."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from clients import ACCEPTED, RELEASED, World
from proton import Message
from test_containers import anonymous_send, containers
from test_linkroute import FakeBroker
from test_local_backend import routernet, stop_all

pytestmark = pytest.mark.network

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "gateway"


@pytest.fixture
def world() -> Iterator[World]:
    with World() as w:
        yield w


@contextlib.contextmanager
def network(state: Path, file: Path) -> Iterator[str]:
    """`routernet up` of one file; yields its output; everything stopped after."""
    try:
        result = routernet("up", "--state-dir", str(state), str(file))
        assert result.returncode == 0, result.stderr
        yield result.stdout
    finally:
        stop_all(state)


def client_url(output: str, router: str) -> str:
    found = re.search(rf"^{router}\s+interior\s+(amqp://\S+)", output, re.MULTILINE)
    assert found, output
    return found.group(1)


def test_the_gateway_examples_join_two_local_networks(tmp_path: Path, world: World) -> None:
    with network(tmp_path / "west", EXAMPLES / "west.yaml") as west_out:
        listener = re.search(r"gateway listeners: west-0 (\S+):(\d+)", west_out)
        assert listener, west_out
        # East as the example says to run it: its connector aimed at what west printed.
        east_file = tmp_path / "east.yaml"
        east_file.write_text(
            (EXAMPLES / "east.yaml")
            .read_text()
            .replace("host: 127.0.0.2, port: 5673", f"host: {listener[1]}, port: {listener[2]}")
        )
        with network(tmp_path / "east", east_file) as east_out:
            west_url, east_url = client_url(west_out, "west-0"), client_url(east_out, "east-0")
            branch = FakeBroker(world, west_url, container_id="branch-34")
            secret = FakeBroker(world, west_url, container_id="vault")
            office = FakeBroker(world, east_url, container_id="head-office")

            def known(url: str, container: str) -> bool:
                row = containers(world, url).get(container, {})
                return row.get("location", "unreachable") != "unreachable"

            world.run_until(lambda: known(east_url, "branch-34"), timeout=20.0, what="import")
            world.run_until(lambda: known(west_url, "head-office"), timeout=20.0, what="export")
            east_client = world.connect(east_url)
            assert anonymous_send(east_client, "(branch-34)/atm", 2) == [ACCEPTED] * 2
            # ()/node by east's rules: branch 34 crosses to west, a report stays at home.
            assert anonymous_send(east_client, "()/atm", 1, branch="34") == [ACCEPTED]
            sender = east_client.sender(None)
            world.run_until(lambda: sender.credit > 0, what="credit")
            report = sender.send(Message(address="()/atm", subject="report.daily", body="r"))
            world.run_until(lambda: report.settled, what="the report's outcome")
            assert report.state == ACCEPTED
            west_client = world.connect(west_url)
            assert anonymous_send(west_client, "(head-office)/inbox", 1) == [ACCEPTED]
            assert [a for a, _m in branch.received] == ["atm"] * 3
            assert [a for a, _m in office.received] == ["atm", "inbox"]
            assert not known(east_url, "vault")
            assert anonymous_send(east_client, "(vault)/atm", 1) == [RELEASED]
            assert secret.received == []
