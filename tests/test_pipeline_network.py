"""Known traffic through real routers comes out of the pipeline exactly: routers A-B-C, the
collector on B, traffic the test chooses (accepted, rejected and released by consumers on C and
A), a router and the collector restarted while windows are open; then the Spark analysis of
what the collector wrote. Each delivery to a consumer is counted once, at its egress router,
with the router it entered the network by, and every outcome where it was decided."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from clients import World
from harness import RouterNetwork
from proton import Message
from test_collector import CollectorProcess

from pipeline.analyze import analyze, write
from router.telemetry.schema import TELEMETRY_ADDRESS

pytestmark = [pytest.mark.network, pytest.mark.spark, pytest.mark.timeout(300)]

WINDOW_SECONDS = 10
TELEMETRY = {"telemetry": {"windowSeconds": WINDOW_SECONDS, "sampleEvery": 1}}


def just_after_a_window_ends() -> None:
    """Windows end on multiples of WINDOW_SECONDS: a restart begun now is over before the
    next one ends (records are sent at a window's end, and dropped if no collector listens)."""
    while not 0.3 < time.time() % WINDOW_SECONDS < 1.5:
        time.sleep(0.05)


def send(world: World, net: RouterNetwork, at: str, address: str, count: int) -> None:
    sender = world.connect(net.url(at)).sender(address)
    world.run_until(lambda: sender.credit > 0, what=f"credit for {address} on {at}")
    tracked = sender.send_all(Message(body=i) for i in range(count))
    world.run_until(lambda: all(t.settled for t in tracked), timeout=10, what="outcomes")


def test_known_traffic_comes_out_of_the_pipeline_exactly(
    tmp_path: Path, world: World, spark: Any
) -> None:
    net = RouterNetwork(tmp_path, world, [("A", "B", 1), ("B", "C", 1)])
    for router in net.routers.values():
        router.config.update(TELEMETRY)
    with net:
        collector = CollectorProcess(tmp_path, net.url("B"), "--flush-seconds", "1").start()
        try:
            on_c = world.connect(net.url("C"))
            on_c.receiver("orders")
            on_c.receiver("bad", policy="reject")
            on_c.receiver("back", policy="release", credit=10)
            on_a = world.connect(net.url("A")).receiver("local")
            for address in ("orders", "bad", "back"):
                net.wait_address(address, {"C"})
            send(world, net, "A", "orders", 30)
            send(world, net, "A", "bad", 4)
            send(world, net, "A", "back", 2)
            send(world, net, "B", "orders", 6)
            # The collector restarts while a window is open: the window closes after it is back.
            just_after_a_window_ends()
            collector.stop()
            collector.start()
            net.wait_address(TELEMETRY_ADDRESS, {"B"})  # every router knows it is back
            send(world, net, "C", "orders", 5)
            # A router restarts mid-window: it sends its window so far as it drains.
            net["C"].stop(signal.SIGTERM)
            net.restart("C")
            net.wait_converged()
            on_c = world.connect(net.url("C"))
            on_c.receiver("orders")
            net.wait_address("orders", {"C"})
            send(world, net, "A", "orders", 10)
            send(world, net, "C", "local", 3)
            assert len(on_a.messages) == 3
        finally:
            # Every router drains and sends what it counted; the collector's router goes last,
            # as `routernet down` orders it, so the others' last windows find it there.
            for name in ("A", "C"):
                net[name].stop()
            net.stop()
            collector.stop()
    result = analyze(spark, collector.dataset)
    write(result, tmp_path / "analysis")
    tables = result.tables
    matrix = {
        (r["ingress_router"], r["egress_router"], r["address"]): r
        for r in tables["traffic_matrix"].to_pylist()
        if not r["address"].startswith("_")  # management replies of the test's queries
    }
    outcomes = ("deliveries", "accepted", "rejected", "released")
    counts = {k: tuple(r[c] for c in outcomes) for k, r in matrix.items()}
    assert counts == {
        ("A", "C", "orders"): (40, 40, 0, 0),
        ("A", "C", "bad"): (4, 0, 4, 0),
        ("A", "C", "back"): (2, 0, 0, 2),
        ("B", "C", "orders"): (6, 6, 0, 0),
        ("C", "C", "orders"): (5, 5, 0, 0),
        ("C", "A", "local"): (3, 3, 0, 0),
    }
    stats = {r["address"]: r for r in tables["address_stats"].to_pylist()}
    assert stats["orders"]["deliveries"] == 51 and stats["orders"]["accepted"] == 51
    assert stats["bad"]["rejected"] == 4
    assert (tmp_path / "analysis" / "traffic_matrix").is_dir()
    assert pq.read_table(tmp_path / "analysis" / "traffic_matrix").num_rows == len(matrix) + sum(
        1 for r in tables["traffic_matrix"].to_pylist() if r["address"].startswith("_")
    )
