"""Telemetry end to end: metrics and probes over HTTP, flow records routed to a collector.

Real router processes, python-qpid-proton clients; the collector is a plain receiver on
TELEMETRY_ADDRESS that decodes what it gets with the schema's own reader.
"""

from __future__ import annotations

import logging
import signal
import urllib.error
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from clients import World
from harness import RouterNetwork, RouterProcess, free_port
from prometheus_client.parser import text_string_to_metric_families
from proton import Message
from test_edge import edge, interior, remote_keys, started

from router.telemetry.http import ReadinessLog
from router.telemetry.schema import (
    SAMPLE_ANNOTATION,
    TELEMETRY_ADDRESS,
    TELEMETRY_SUBJECT,
    decode_batch,
)

pytestmark = pytest.mark.network


def telemetry(router: RouterProcess, **settings: Any) -> str:
    """Give `router` an HTTP endpoint (and `settings`); returns its base URL."""
    port = free_port(router.host)
    router.config["telemetry"] = {"http": {"host": router.host, "port": port}, **settings}
    return f"http://{router.host}:{port}"


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def samples(base: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of /metrics, by (name, labels), parsed by prometheus-client."""
    status, text = get(f"{base}/metrics")
    assert status == 200
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str):
    return found.get((name, frozenset(labels.items())))


class Collector:
    """Receives telemetry messages and keeps their rows by kind."""

    def __init__(self, world: World, url: str) -> None:
        self.client = world.connect(url)
        self.receiver = self.client.receiver(TELEMETRY_ADDRESS, credit=1000)
        self.seen = 0

    def rows(self, kind: str) -> list[dict[str, Any]]:
        out = []
        for message in self.receiver.messages:
            assert message.subject == TELEMETRY_SUBJECT
            got_kind, rows = decode_batch(message.body)
            if got_kind == kind:
                out += rows
        return out

    def flows(self) -> dict[tuple[str, str, str | None], dict[str, int]]:
        """Flow rows summed over windows, by (address, ingress, egress)."""
        total: dict[tuple[str, str, str | None], dict[str, int]] = defaultdict(
            lambda: defaultdict(int)
        )
        for row in self.rows("flow"):
            key = (row["address"], row["ingress_router"], row["egress_router"])
            for name in ("deliveries", "accepted", "released", "rejected", "modified"):
                total[key][name] += row[name]
            for name in ("presettled", "dropped", "latency_samples", "bytes"):
                total[key][name] += row[name]
        return total


def test_metrics_and_health_after_known_traffic(tmp_path: Path, world: World) -> None:
    router = RouterProcess(tmp_path, "R1")
    base = telemetry(router, windowSeconds=60)
    with router:
        assert get(f"{base}/healthz") == (200, "ok\n")
        status, why = get(f"{base}/readyz")
        assert (status, why) == (200, "standalone\n")
        assert get(f"{base}/nothing")[0] == 404
        client = world.connect(router.url)
        rx = client.receiver("orders")
        rejecter = client.receiver("audit", policy="reject")
        tx = client.sender("orders")
        world.run_until(lambda: tx.credit >= 10, what="credit")
        sent = tx.send_all(Message(body=i) for i in range(10))
        tx2 = client.sender("audit")
        world.run_until(lambda: tx2.credit >= 3, what="credit")
        tx2.send_all(Message(body=i) for i in range(3))
        world.run_until(lambda: all(t.settled for t in sent + tx2.sent), what="outcomes")
        assert len(rx.messages) == 10 and len(rejecter.messages) == 3
        found = samples(base)
        rid = {"router": "R1"}
        orders = {**rid, "address": "orders"}
        assert value(found, "routernet_address_deliveries_in_total", **orders) == 10
        assert value(found, "routernet_address_deliveries_out_total", **orders) == 10
        assert value(found, "routernet_address_outcomes_total", **orders, outcome="accepted") == 10
        audit = {**rid, "address": "audit"}
        assert value(found, "routernet_address_outcomes_total", **audit, outcome="rejected") == 3
        assert value(found, "routernet_address_consumers", **orders) == 1
        assert value(found, "routernet_router_accepted_deliveries_total", **rid) == 10
        assert value(found, "routernet_router_rejected_deliveries_total", **rid) == 3
        assert value(found, "routernet_deliveries_total", **rid, direction="in") == 13
        assert value(found, "routernet_connections", **rid, role="normal") == 1
        assert value(found, "routernet_links", **rid, kind="endpoint", direction="in") == 2
        assert value(found, "routernet_unsettled_deliveries", **rid) == 0
        assert value(found, "routernet_address_bytes_out_total", **orders) == sum(
            len(m.encode()) for m in rx.messages
        )
        # 1 in 100 sampled by default: no sample yet, and the histogram says so.
        assert value(found, "routernet_address_transit_latency_seconds_count", **orders) == 0


def test_readyz_waits_for_an_interior_to_join_its_network(tmp_path: Path, world: World) -> None:
    net = RouterNetwork(tmp_path, world, [("A", "B", 1)])
    base = telemetry(net["A"])
    try:
        net.start(["A"])
        status, why = get(f"{base}/readyz")
        assert status == 503 and "without an inter-router neighbor" in why
        assert get(f"{base}/healthz")[0] == 200
        # What the probe saw is in the log, once: a pod's log says why it is not Ready.
        assert get(f"{base}/readyz")[0] == 503
        not_ready = net["A"].wait_log(r".*event=router\.not_ready .*")
        assert 'reason="interior without an inter-router neighbor yet"' in not_ready
        assert net["A"].log().count("event=router.not_ready") == 1
        net.start(["B"])
        world.run_until(lambda: get(f"{base}/readyz")[0] == 200, timeout=10, what="A ready")
        assert "1 neighbors" in get(f"{base}/readyz")[1]
        assert 'reason="interior with 1 neighbors"' in net["A"].wait_log(
            r".*event=router\.ready .*"
        )
        found = samples(base)
        assert value(found, "routernet_routers_reachable", router="A") == 1
        assert value(found, "routernet_route_cost", router="A", peer="B") == 1
    finally:
        net.stop()


def test_readiness_is_logged_when_it_changes(caplog: pytest.LogCaptureFixture) -> None:
    said = ReadinessLog()
    caplog.set_level(logging.INFO, logger="router")

    def lines() -> list[tuple[str, str]]:
        found = [(r.getMessage(), r.routernet_fields["reason"]) for r in caplog.records]
        caplog.clear()
        return found

    said.note(False, "not listening", 0.0)
    said.note(False, "not listening", 5.0)
    assert lines() == [("router.not_ready", "not listening")]
    said.note(False, "interior without an inter-router neighbor yet", 10.0)
    said.note(False, "interior without an inter-router neighbor yet", 69.0)
    assert lines() == [("router.not_ready", "interior without an inter-router neighbor yet")]
    said.note(False, "interior without an inter-router neighbor yet", 70.0)  # a minute on
    assert len(lines()) == 1
    said.note(True, "interior with 1 neighbors", 71.0)
    said.note(True, "interior with 2 neighbors", 200.0)
    assert lines() == [("router.ready", "interior with 1 neighbors")]
    said.note(False, "draining", 201.0)
    assert lines() == [("router.not_ready", "draining")]


def test_flow_records_across_a_chain_of_three(tmp_path: Path, world: World) -> None:
    """A -> B -> C: each (address, ingress, egress) is counted exactly once, at its egress;
    outcomes are the consumers'; every message is sampled (sampleEvery 1) and none carries the
    stamp to its consumer."""
    net = RouterNetwork(tmp_path, world, [("A", "B", 1), ("B", "C", 1)])
    bases = {n: telemetry(net[n], windowSeconds=0.5, sampleEvery=1) for n in "ABC"}
    with net:
        collector = Collector(world, net.url("B"))
        cc = world.connect(net.url("C"))
        accepter = cc.receiver("t.accept")
        rejecter = cc.receiver("t.reject", policy="reject")
        releaser = cc.receiver("t.release", policy="release")
        ca = world.connect(net.url("A"))
        local = ca.receiver("t.local")
        for address in ("t.accept", "t.reject", "t.release"):
            net.wait_address(address, {"C"}, at=["A"])
        counts = {"t.accept": 20, "t.reject": 5, "t.release": 4, "t.local": 6}
        senders = []
        for address, n in counts.items():
            tx = ca.sender(address)
            world.run_until(lambda tx=tx, n=n: tx.credit >= n, what=f"credit for {address}")
            tx.send_all(Message(body=i, address=address) for i in range(n))
            senders.append(tx)
        anonymous = ca.sender(None, presettled=True)
        world.run_until(lambda: anonymous.credit >= 3, what="anonymous credit")
        anonymous.send_all(Message(body=i, address="t.nobody") for i in range(3))
        world.run_until(lambda: all(tx.all_settled() for tx in senders), what="outcomes")
        expected = {
            ("t.accept", "A", "C"): {"deliveries": 20, "accepted": 20},
            ("t.reject", "A", "C"): {"deliveries": 5, "rejected": 5},
            ("t.release", "A", "C"): {"deliveries": 4, "released": 4},
            ("t.local", "A", "A"): {"deliveries": 6, "accepted": 6},
            ("t.nobody", "A", None): {"dropped": 3},
        }

        def complete() -> bool:
            flows = collector.flows()
            return all(
                all(flows[key][k] == v for k, v in want.items()) for key, want in expected.items()
            )

        world.run_until(complete, timeout=10, what="flow records for all the traffic")
        world.run_for(1.2)  # two more windows: nothing is counted twice
        flows = collector.flows()
        for key, want in expected.items():
            row = flows[key]
            for name in ("deliveries", "accepted", "released", "rejected", "modified", "dropped"):
                assert row[name] == want.get(name, 0), (key, name, dict(row))
            if key[2] is not None:
                assert row["latency_samples"] == want["deliveries"]
        ours = {k for k in flows if k[0].startswith("t.")}
        assert ours == set(expected)
        routers = {row["router"] for row in collector.rows("router")}
        assert routers == {"A", "B", "C"}
        rows = collector.rows("router")
        assert sum(r["deliveries_transit"] for r in rows if r["router"] == "B") >= 29
        for message in accepter.messages + rejecter.messages + releaser.messages + local.messages:
            keys = {str(k) for k in (message.annotations or {})}
            assert SAMPLE_ANNOTATION not in keys and not any(k.startswith("x-opt-") for k in keys)
        found = samples(bases["C"])
        accept = {"router": "C", "address": "t.accept"}
        count = value(found, "routernet_address_transit_latency_seconds_count", **accept)
        assert count == 20
        assert value(found, "routernet_address_deliveries_in_total", **accept) == 20
        b = samples(bases["B"])
        through = {"router": "B", "address": "t.accept"}
        assert value(b, "routernet_address_deliveries_transit_total", **through) == 20
        from_a = {"router": "B", "peer": "A", "direction": "in"}
        assert (value(b, "routernet_inter_router_deliveries_total", **from_a) or 0) >= 29


def test_without_a_collector_records_are_dropped_and_counted(tmp_path: Path, world: World) -> None:
    router = RouterProcess(tmp_path, "R1")
    base = telemetry(router, windowSeconds=0.1)
    with router:
        client = world.connect(router.url)
        rx = client.receiver("x")
        tx = client.sender("x")
        for _ in range(5):
            world.run_until(lambda: tx.credit > 0, what="credit")
            tx.send(Message(body="m"))
            world.run_for(0.3)
        world.run_until(lambda: len(rx.messages) == 5, what="deliveries")
        found = samples(base)
        dropped = value(found, "routernet_telemetry_records_total", router="R1", result="dropped")
        assert dropped is not None and dropped >= 10  # a router row and flow rows per window
        assert value(found, "routernet_telemetry_records_total", router="R1", result="sent") == 0
        assert value(found, "routernet_queued_deliveries", router="R1") == 0
        assert router.rss_bytes() < 120 * 1024 * 1024


def test_a_draining_router_flushes_its_last_window(tmp_path: Path, world: World) -> None:
    router = RouterProcess(tmp_path, "R1")
    telemetry(router, windowSeconds=3600)  # the window would end in an hour: only a flush sends
    with router:
        collector = Collector(world, router.url)
        client = world.connect(router.url)
        rx = client.receiver("d")
        tx = client.sender("d")
        world.run_until(lambda: tx.credit >= 7, what="credit")
        tx.send_all(Message(body=i) for i in range(7))
        world.run_until(lambda: tx.all_settled(), what="outcomes")
        assert len(rx.messages) == 7 and not collector.receiver.messages
        assert router.proc is not None
        router.proc.send_signal(signal.SIGTERM)
        world.run_until(lambda: collector.rows("router"), timeout=5, what="the last window")
        assert collector.flows()[("d", "R1", "R1")]["accepted"] == 7
        world.run_until(lambda: router.proc.poll() is not None, what="the router to exit")
        assert router.proc.returncode == 0


def test_the_reserved_prefix_is_refused(tmp_path: Path) -> None:
    from harness import config_error

    base = {"router": {"id": "R"}}
    message = config_error({**base, "addresses": [{"prefix": "_routernet.x"}]})
    assert "reserved" in message and "_routernet" in message
    message = config_error({**base, "addresses": [{"pattern": "_routernet/#"}]})
    assert "reserved" in message


def test_traffic_entering_at_an_edge_is_counted_from_that_edge(
    tmp_path: Path, world: World
) -> None:
    """E1 -> A -> B (consumer on B) and E1 -> A -> E2: the interior A becomes the message's
    ingress for the interiors (as in Dispatch), but its flow rows say it entered at E1; a
    message from a client of A says A. No telemetry annotation reaches a client."""
    a = interior(tmp_path, "A")
    b = interior(tmp_path, "B", connect=a)
    e1 = edge(tmp_path, "E1", [a])
    e2 = edge(tmp_path, "E2", [a])
    for router in (a, b, e1, e2):
        telemetry(router, windowSeconds=0.5, sampleEvery=1)
    with started(a, b, e1, e2):
        collector = Collector(world, b.url)
        at_b = world.connect(b.url).receiver("to.b")
        at_e2 = world.connect(e2.url).receiver("to.e2")
        world.run_until(lambda: at_b.attached and at_e2.attached, what="consumers")
        world.run_until(
            lambda: remote_keys(world, a).get("M0to.b") == ["B"], timeout=10, what="to.b at A"
        )
        from_e1 = world.connect(e1.url)
        from_a = world.connect(a.url)
        sent = []
        for client, address, n in (
            (from_e1, "to.b", 7),
            (from_e1, "to.e2", 5),
            (from_a, "to.b", 3),
        ):
            tx = client.sender(address)
            world.run_until(lambda tx=tx: tx.credit > 0, timeout=10, what=f"credit {address}")
            tx.send_all(Message(body=i) for i in range(n))
            sent.append(tx)
        world.run_until(lambda: all(tx.all_settled() for tx in sent), what="outcomes")
        expected = {("to.b", "E1", "B"): 7, ("to.e2", "E1", "E2"): 5, ("to.b", "A", "B"): 3}

        def counted() -> bool:
            flows = collector.flows()
            return all(flows[key]["accepted"] == n for key, n in expected.items())

        world.run_until(counted, timeout=10, what="flow rows from the edge")
        flows = collector.flows()
        ours = {k: v["deliveries"] for k, v in flows.items() if k[0].startswith("to.")}
        assert {k: n for k, n in ours.items() if n} == expected  # (and management's replies)
        for message in at_b.messages + at_e2.messages:
            keys = set((message.annotations or {}).keys())
            assert not any(str(k).startswith("x-opt-") for k in keys), keys
