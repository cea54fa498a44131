"""The collector end to end: a router process, the collector process attached to it, test
senders sending telemetry batches through the router; the Parquet dataset read back."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from clients import ACCEPTED, REJECTED, World
from harness import RouterProcess, free_port
from proton import Message
from telemetry_rows import BASE_MS, HOUR_MS, make_rows, record_id

from collector.window import FlowReader, Totals
from router.telemetry.schema import (
    TELEMETRY_ADDRESS,
    TELEMETRY_SUBJECT,
    Kind,
    columns,
    encode_batch,
)

pytestmark = pytest.mark.network

ROOT = Path(__file__).resolve().parent.parent


class CollectorProcess:
    """``python -m collector`` against a router, logging to a file."""

    def __init__(self, workdir: Path, url: str, *args: str) -> None:
        self.dataset = workdir / "dataset"
        self.log_path = workdir / "collector.log"
        self.url = url
        self.args = list(args)
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0

    def start(self, wait_attached: bool = True) -> CollectorProcess:
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT), str(ROOT / "operator"), env.get("PYTHONPATH", "")]
        )
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "collector",
                    "--url",
                    self.url,
                    "--dataset",
                    str(self.dataset),
                    "--id",
                    "test-collector",
                    "--log-level",
                    "debug",
                    *self.args,
                ],
                stdout=log,
                stderr=log,
                env=env,
            )
        if wait_attached:
            self.wait_log("collector.attached")
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[self._log_offset :]

    def wait_log(self, text: str, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log():
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"collector exited ({self.proc.returncode}):\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} in the collector's log:\n{self.log()}")
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"collector did not stop after {sig}:\n{self.log()}") from None


@pytest.fixture
def router(tmp_path: Path):
    """A router that sends no telemetry of its own: the tests count the records they send."""
    r = RouterProcess(tmp_path / "router")
    r.config["telemetry"] = {"enabled": False}
    r.start()
    try:
        yield r
    finally:
        r.stop()


@pytest.fixture
def collector(tmp_path: Path, router: RouterProcess):
    c = CollectorProcess(tmp_path, router.url, "--flush-seconds", "0.5")
    try:
        yield c
    finally:
        if c.proc is not None and c.proc.poll() is None:
            c.proc.kill()
            c.proc.wait()


def telemetry(kind: Kind, rows: list[tuple], subject: str = TELEMETRY_SUBJECT) -> Message:
    return Message(subject=subject, body=encode_batch(kind, rows))


def read(dataset: Path, kind: Kind) -> pa.Table:
    return ds.dataset(dataset / kind, format="parquet", partitioning="hive").to_table()


def ids(kind: Kind, rows: list[tuple]) -> list[str]:
    return [record_id(kind, row) for row in rows]


def test_the_dataset_holds_exactly_the_rows_sent(
    world: World, router: RouterProcess, collector: CollectorProcess
) -> None:
    collector.start()
    client = world.connect(router.url)
    presettled = client.sender(TELEMETRY_ADDRESS, presettled=True, name="presettled")
    unsettled = client.sender(TELEMETRY_ADDRESS, name="unsettled")
    world.run_until(lambda: presettled.credit > 0 and unsettled.credit > 0, what="credit")
    flows_a = make_rows("flow", 50)
    flows_b = make_rows("flow", 30, BASE_MS + HOUR_MS, first=50)  # the next hour
    routers = make_rows("router", 3)
    presettled.send(telemetry("flow", flows_a))
    presettled.send(telemetry("router", routers))
    tracked = unsettled.send(telemetry("flow", flows_b))
    world.run_until(lambda: tracked.settled, timeout=10, what="the collector's outcome")
    assert tracked.outcome == "accepted"
    # Accepted only once written: the file is there already.
    assert set(read(collector.dataset, "flow").column("record_id").to_pylist()) >= set(
        ids("flow", flows_b)
    )
    world.run_for(0.2)
    assert collector.stop() == 0
    assert "collector.stopped" in collector.log()

    flow = read(collector.dataset, "flow")
    assert sorted(flow.column("record_id").to_pylist()) == sorted(ids("flow", flows_a + flows_b))
    assert flow.schema.field("window_start").type == pa.timestamp("ms", tz="UTC")
    assert flow.schema.field("latency_hist").type == pa.list_(pa.int64())
    by_hour = {
        (str(d), h) for d, h in zip(flow["date"].to_pylist(), flow["hour"].to_pylist(), strict=True)
    }
    assert by_hour == {("2026-11-22", 7), ("2026-11-22", 8)}
    dirs = {
        p.parent.relative_to(collector.dataset).as_posix()
        for p in collector.dataset.rglob("*.parquet")
    }
    assert dirs == {
        "flow/date=2026-11-22/hour=07",
        "flow/date=2026-11-22/hour=08",
        "router/date=2026-11-22/hour=07",
    }
    router_rows = read(collector.dataset, "router")
    assert sorted(router_rows.column("record_id").to_pylist()) == sorted(ids("router", routers))
    # Values round-trip: the row sent is the row read.
    first = flow.filter(pa.compute.equal(flow["record_id"], ids("flow", flows_a)[0])).to_pylist()[0]
    assert first["deliveries"] == 0 and first["address"] == "address-0"


def test_with_http_it_answers_the_flow_totals_of_what_it_wrote(
    world: World, router: RouterProcess, tmp_path: Path
) -> None:
    """As on Kubernetes, where the console asks the collector rather than read its volume."""
    port = free_port()
    c = CollectorProcess(
        tmp_path, router.url, "--flush-seconds", "0.5", "--http", f"127.0.0.1:{port}"
    )
    try:
        c.start()
        client = world.connect(router.url)
        sender = client.sender(TELEMETRY_ADDRESS)
        world.run_until(lambda: sender.credit > 0, what="credit")
        rows = make_rows("flow", 20)
        tracked = sender.send(telemetry("flow", rows))
        world.run_until(lambda: tracked.settled, timeout=10, what="the collector's outcome")
        assert tracked.outcome == "accepted"  # written: the files are there
        url = f"http://127.0.0.1:{port}/flows?from={BASE_MS - HOUR_MS}&to={BASE_MS + HOUR_MS}"
        with urllib.request.urlopen(url, timeout=5) as answer:
            totals = Totals.from_json(json.load(answer))
        expected = Totals().add(FlowReader(c.dataset).read(BASE_MS - HOUR_MS, BASE_MS + HOUR_MS))
        assert totals.records == len(rows) == expected.records
        assert totals == expected
        assert c.stop() == 0
    finally:
        if c.proc is not None and c.proc.poll() is None:
            c.proc.kill()
            c.proc.wait()


def test_a_port_it_cannot_listen_on_is_a_one_line_error(
    router: RouterProcess, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        c = CollectorProcess(tmp_path, router.url, "--http", f"127.0.0.1:{port}")
        c.start(wait_attached=False)
        assert c.proc is not None and c.proc.wait(15) == 2
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in c.log()
    bad = subprocess.run(
        [sys.executable, "-m", "collector", "--http", "nowhere"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'operator'}"},
        timeout=30,
    )
    assert bad.returncode == 2
    assert "'nowhere': expected HOST:PORT" in bad.stderr


def test_a_bad_message_is_rejected_and_the_collector_goes_on(
    world: World, router: RouterProcess, collector: CollectorProcess
) -> None:
    collector.start()
    client = world.connect(router.url)
    sender = client.sender(TELEMETRY_ADDRESS)
    world.run_until(lambda: sender.credit > 0, what="credit")
    bad_body = sender.send(Message(subject=TELEMETRY_SUBJECT, body="not a batch"))
    bad_subject = sender.send(telemetry("flow", make_rows("flow", 2), subject="something.else"))
    good = make_rows("flow", 4)
    ok = sender.send(telemetry("flow", good))
    again = sender.send(telemetry("flow", good))  # a resend: the same record ids
    world.run_until(sender.all_settled, timeout=10, what="outcomes")
    assert again.outcome == "accepted"
    assert [bad_body.outcome, bad_subject.outcome, ok.outcome] == [
        "rejected",
        "rejected",
        "accepted",
    ]
    assert bad_body.state == REJECTED and ok.state == ACCEPTED
    assert bad_body.condition.name == "amqp:decode-error"
    assert "not a map" in bad_body.condition.description
    assert "something.else" in bad_subject.condition.description
    refused = [line for line in collector.log().splitlines() if "collector.refused" in line]
    assert len(refused) == 2 and 'reason="telemetry body is a str, not a map"' in refused[0]
    assert collector.stop() == 0
    # Stored once: the resend's rows were recognised as duplicates.
    assert sorted(read(collector.dataset, "flow").column("record_id").to_pylist()) == sorted(
        ids("flow", good)
    )
    assert "duplicates=4 refused=2" in collector.log()


def test_node_records_and_an_older_routers_flow_records_are_stored(
    world: World, router: RouterProcess, collector: CollectorProcess
) -> None:
    """Node records (schema version 2) get a table of their own; flow records of a router
    still on version 1 (no node_leg) are taken, node_leg null."""
    collector.start()
    client = world.connect(router.url)
    sender = client.sender(TELEMETRY_ADDRESS)
    world.run_until(lambda: sender.credit > 0, what="credit")
    nodes = make_rows("node", 3)
    v1 = columns("flow", 1)
    old = [row[: len(v1)] for row in make_rows("flow", 2)]
    body = {"kind": "flow", "version": 1, "columns": list(v1), "rows": [list(r) for r in old]}
    tracked = [
        sender.send(telemetry("node", nodes)),
        sender.send(Message(subject="routernet.telemetry.v1", body=body)),
    ]
    world.run_until(sender.all_settled, timeout=10, what="outcomes")
    assert [t.outcome for t in tracked] == ["accepted", "accepted"]
    assert collector.stop() == 0
    stored = read(collector.dataset, "node")
    assert sorted(stored.column("record_id").to_pylist()) == sorted(ids("node", nodes))
    assert stored.schema.field("depth").type == pa.int64()
    flow = read(collector.dataset, "flow")
    assert sorted(flow.column("record_id").to_pylist()) == sorted(ids("flow", old))
    assert flow.column("node_leg").to_pylist() == [None, None]


def test_a_restarted_collector_loses_nothing_it_acknowledged(
    world: World, router: RouterProcess, collector: CollectorProcess
) -> None:
    """SIGKILL mid-stream: what was accepted is on disk; what was not comes back to the sender
    (released by the router), is resent, and the next collector takes it."""
    collector.start()
    client = world.connect(router.url)
    sender = client.sender(TELEMETRY_ADDRESS, resend=True)
    world.run_until(lambda: sender.credit > 0, what="credit")
    batches = [make_rows("flow", 20, first=20 * i) for i in range(40)]
    for batch in batches[:20]:
        sender.send(telemetry("flow", batch))
    world.run_until(
        lambda: any(t.settled for t in sender.sent), timeout=10, what="a first acknowledgment"
    )
    for batch in batches[20:]:
        sender.send(telemetry("flow", batch))
    collector.stop(signal.SIGKILL)
    accepted_before = {
        record_id("flow", row)
        for t in sender.sent
        if t.outcome == "accepted"
        for row in t.message.body["rows"]
    }
    assert accepted_before
    on_disk = set(read(collector.dataset, "flow").column("record_id").to_pylist())
    assert accepted_before <= on_disk

    collector.start()
    world.run_until(sender.all_settled, timeout=20, what="every batch accepted")
    assert all(t.final.outcome == "accepted" for t in sender.originals)
    assert collector.stop() == 0
    stored = read(collector.dataset, "flow").column("record_id").to_pylist()
    every = {record_id("flow", row) for batch in batches for row in batch}
    assert set(stored) == every  # nothing lost; a resend may repeat rows (dedup downstream)


def test_the_collector_reconnects_when_the_router_comes_back(
    world: World, tmp_path: Path, router: RouterProcess, collector: CollectorProcess
) -> None:
    collector.start()
    router.stop()
    collector.wait_log("collector.disconnected")
    router.start()
    collector._log_offset = 0
    deadline = time.monotonic() + 15
    while collector.log().count("collector.attached") < 2:
        assert time.monotonic() < deadline, collector.log()
        time.sleep(0.05)
    client = world.connect(router.url)
    sender = client.sender(TELEMETRY_ADDRESS)
    world.run_until(lambda: sender.credit > 0, what="credit")
    rows = make_rows("router", 5)
    tracked = sender.send(telemetry("router", rows))
    world.run_until(lambda: tracked.settled, timeout=10, what="outcome")
    assert tracked.outcome == "accepted"
    assert collector.stop() == 0
    assert sorted(read(collector.dataset, "router").column("record_id").to_pylist()) == sorted(
        ids("router", rows)
    )
