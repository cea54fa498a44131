"""`routernet console` against a real `routernet up` network of examples/ (five routers and a
collector on 127.0.0.x), its JSON API asked over HTTP as a script would: every router and link,
rates that move with traffic, a queue's depth, flows from the collector's dataset, the health
page's problems, a router stopped shown down, bad requests answered in one line, basic auth,
and `routernet down` stopping the console with the network."""

from __future__ import annotations

import base64
import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from proton import Message
from proton.utils import BlockingConnection
from router_operator.console.auth import BasicAuth, TokenReviewAuth
from router_operator.console.scraper import Scraper
from router_operator.console.server import Console, ConsoleServer
from router_operator.console.sources import LocalSource
from router_operator.local import backend as local
from router_operator.local import console as local_console
from test_local_backend import EDGES, EXAMPLES, INTERIORS, converged, routernet, stop_all

# One network for the module, its tests in order on one xdist worker (`--dist loadgroup`).
pytestmark = [pytest.mark.network, pytest.mark.xdist_group("console-api")]

TIMEOUT = 60.0
ROUTERS = INTERIORS + EDGES


def eventually(what: str, check: Callable[[], Any], timeout: float = TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.2)
    return result


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """examples/ running, with a console in the background: (state directory, console URL)."""
    state = tmp_path_factory.mktemp("console") / "state"
    try:
        up = routernet("up", "--state-dir", str(state), str(EXAMPLES))
        assert up.returncode == 0, up.stderr
        eventually("the network to converge", lambda: converged(state))
        started = routernet(
            "console", "--state-dir", str(state), "--listen", "127.0.0.1:0", "--detach"
        )
        assert started.returncode == 0, started.stderr
        url = started.stdout.split()[1]
        assert url.startswith("http://127.0.0.1:"), started.stdout
        yield state, url
    finally:
        local_console.stop(state)
        stop_all(state)


def get(url: str, path: str, headers: dict[str, str] | None = None) -> Any:
    request = urllib.request.Request(url.rstrip("/") + path, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.headers["Content-Type"] == "application/json"
        return json.load(response)


def error(url: str, path: str, method: str = "GET", **kw: Any) -> tuple[int, Any]:
    request = urllib.request.Request(url.rstrip("/") + path, method=method, **kw)
    with pytest.raises(urllib.error.HTTPError) as failed:
        urllib.request.urlopen(request, timeout=10)
    body = failed.value.read()
    return failed.value.code, json.loads(body) if body else None


def endpoint(state: Path, router: str) -> str:
    report = local.status(state)
    assert report is not None
    return next(f"amqp://{r['clientEndpoints'][0]}" for r in report["routers"] if r["id"] == router)


def test_the_topology_shows_every_router_and_link(network: tuple[Path, str]) -> None:
    state, url = network

    def complete() -> dict[str, Any] | None:
        topology = get(url, "/api/topology")
        if sorted(r["id"] for r in topology["routers"] if r["state"] == "up") != ROUTERS:
            return None
        return topology if len(topology["links"]) == 9 else None

    # The interiors in a mesh; each edge connected to every interior, one of them its uplink.
    topology = eventually("five routers up and nine links", complete)
    pairs = {(lk["source"], lk["target"], lk["kind"]) for lk in topology["links"]}
    meshed = {(a, b, "inter-router") for a in INTERIORS for b in INTERIORS if a < b}
    edged = {(a, b, "edge") for a in INTERIORS for b in EDGES}
    assert pairs == meshed | edged
    report = local.status(state)
    assert report is not None
    uplinks = {r["id"]: r["uplink"] for r in report["routers"] if r["mode"] == "edge"}
    shown = {lk["target"]: lk["source"] for lk in topology["links"] if lk["uplink"]}
    assert shown == uplinks
    modes = {r["id"]: r["mode"] for r in topology["routers"]}
    assert modes == {**dict.fromkeys(INTERIORS, "interior"), **dict.fromkeys(EDGES, "edge")}


def test_rates_move_with_traffic_and_the_flows_show_where_it_went(
    network: tuple[Path, str],
) -> None:
    state, url = network
    receiver = BlockingConnection(endpoint(state, "edge-1"), timeout=TIMEOUT)
    sender = BlockingConnection(endpoint(state, "edge-0"), timeout=TIMEOUT)
    stop = threading.Event()

    def consume() -> None:
        rx = receiver.create_receiver("orders.console", credit=100)
        while not stop.is_set():
            try:
                rx.receive(0.5)
                rx.accept()
            except Exception:  # a timeout: nothing came in half a second
                continue

    thread = threading.Thread(target=consume)
    thread.start()
    try:
        tx = sender.create_sender("orders.console")

        def moving() -> bool:
            for _ in range(20):
                tx.send(Message(body="order"))
            addresses = get(url, "/api/addresses")["addresses"]
            orders = next((a for a in addresses if a["address"] == "orders.console"), None)
            links = get(url, "/api/topology")["links"]
            return bool(
                orders
                and (orders["egressPerSecond"] or 0) > 0
                and any((lk["rate"]["total"] or 0) > 0 for lk in links if lk["kind"] == "edge")
            )

        eventually("rates above zero", moving)

        def flowed() -> dict[str, Any] | None:
            flows = get(url, "/api/flows?minutes=5")
            assert flows["available"] is True
            paths = [
                p
                for p in flows["paths"]
                if p["address"] == "orders.console" and p["ingress"] == "edge-0"
            ]
            # Latency is sampled: a window's records may carry none yet, a later one will.
            sampled = [p for p in paths if p["egress"] == "edge-1" and p["latencyUs"]["samples"]]
            return sampled[0] if sampled else None

        path = eventually("sampled flow records of orders.console", flowed, 90)
        assert path["deliveries"] > 0
        assert path["latencyUs"]["p50"] is not None
    finally:
        stop.set()
        thread.join(10)
        sender.close()
        receiver.close()


def test_a_queues_depth_follows_sends_and_receives(network: tuple[Path, str]) -> None:
    state, url = network

    def depth() -> int | None:
        nodes = [n for n in get(url, "/api/nodes")["nodes"] if n["name"] == "jobs.console"]
        return nodes[0]["depth"] if nodes else None

    conn = BlockingConnection(endpoint(state, "edge-0"), timeout=TIMEOUT)
    try:
        tx = conn.create_sender("jobs.console")
        for i in range(7):
            tx.send(Message(body=i, durable=True))
        eventually("depth 7", lambda: depth() == 7)
        [node] = [n for n in get(url, "/api/nodes")["nodes"] if n["name"] == "jobs.console"]
        assert node["router"] in INTERIORS
        assert node["deadLetterAddress"] == "jobs.failed"
        assert node["history"][-1][1] == 7
    finally:
        conn.close()
    worker = BlockingConnection(endpoint(state, "edge-1"), timeout=TIMEOUT)
    try:
        rx = worker.create_receiver("jobs.console", credit=10)
        for _ in range(7):
            rx.receive(TIMEOUT)
            rx.accept()
    finally:
        worker.close()  # the blocking client sends its accepts as it closes at the latest
    eventually("depth 0", lambda: depth() == 0)


def test_the_health_page_names_an_address_with_senders_and_no_consumer(
    network: tuple[Path, str],
) -> None:
    state, url = network
    conn = BlockingConnection(endpoint(state, "core-1"), timeout=TIMEOUT)
    try:
        conn.create_sender("nobody.listens", options=None)

        def named() -> list[dict[str, Any]]:
            problems = get(url, "/api/health")["problems"]
            return [p for p in problems if p["subject"].get("address") == "nobody.listens"]

        [problem] = eventually("a problem about nobody.listens", named)
        assert problem["kind"] == "no-consumer"
        assert "on core-1 and no consumer" in problem["what"]
    finally:
        conn.close()
    eventually(
        "the problem gone with the sender",
        lambda: (
            not [
                p
                for p in get(url, "/api/health")["problems"]
                if p["subject"].get("address") == "nobody.listens"
            ]
        ),
    )


def test_bad_requests_get_a_one_line_error_and_the_console_is_read_only(
    network: tuple[Path, str],
) -> None:
    _, url = network
    assert error(url, "/api/flows?minutes=soon") == (
        400,
        {"error": "minutes must be a whole number, not 'soon'"},
    )
    code, body = error(url, "/api/nope")
    assert code == 404 and body["error"].startswith("no API /api/nope; there are /api/topology")
    assert error(url, "/api/routers/nope") == (404, {"error": "no router 'nope'"})
    assert error(url, "/static/../server.py")[0] == 404
    assert error(url, "/api/topology", method="POST", data=b"{}") == (
        405,
        {"error": "the console is read-only"},
    )
    router = get(url, "/api/routers/core-0")
    assert router["router"]["state"] == "up"
    assert any("router.started" in line for line in router["log"])
    with urllib.request.urlopen(url, timeout=10) as page:
        assert page.headers["Content-Type"] == "text/html; charset=utf-8"
        assert "default-src 'self'" in page.headers["Content-Security-Policy"]


def test_basic_auth_keeps_out_who_has_no_password(
    network: tuple[Path, str], tmp_path: Path
) -> None:
    state, _ = network
    users = tmp_path / "users"
    users.write_text("ops:open-sesame\n")
    scraper = Scraper(LocalSource(state))
    server = ConsoleServer(("127.0.0.1", 0), Console(scraper, BasicAuth.from_file(users)))
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    try:
        code, _ = error(server.url, "/api/topology")
        assert code == 401
        good = base64.b64encode(b"ops:open-sesame").decode()
        assert get(server.url, "/api/health", {"Authorization": f"Basic {good}"})["at"] is None
        bad = base64.b64encode(b"ops:guess").decode()
        assert error(server.url, "/", headers={"Authorization": f"Basic {bad}"})[0] == 401
        with urllib.request.urlopen(server.url + "healthz", timeout=10) as probe:
            assert probe.read() == b"ok\n"  # the kubelet's probe needs no password
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


class ReviewingCluster:
    """An API server that knows one token, of a user allowed to list Routers."""

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> Any:
        if path.endswith("/tokenreviews"):
            known = body["spec"]["token"] == "good-token"
            return {"status": {"authenticated": known, "user": {"username": "alice"}}}
        return {"status": {"allowed": True}}


def test_under_token_review_the_pages_load_and_the_api_wants_the_token(
    network: tuple[Path, str],
) -> None:
    """A browser has no bearer token to send: the pages come without one (they hold no data,
    and ask the user for a token), the API does not."""
    state, _ = network
    auth = TokenReviewAuth(ReviewingCluster(), None)  # type: ignore[arg-type]
    server = ConsoleServer(("127.0.0.1", 0), Console(Scraper(LocalSource(state)), auth))
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    try:
        with urllib.request.urlopen(server.url, timeout=10) as page:
            assert b'id="token-form"' in page.read()
        request = urllib.request.Request(server.url + "api/topology")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 401
        assert refused.value.headers["WWW-Authenticate"].startswith("Bearer")
        wrong = {"Authorization": "Bearer bad-token"}
        assert error(server.url, "/api/topology", headers=wrong)[0] == 401
        good = {"Authorization": "Bearer good-token"}
        assert "routers" in get(server.url, "/api/topology", good)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_a_stopped_router_is_shown_down_within_ten_seconds(network: tuple[Path, str]) -> None:
    """Last: it leaves edge-1 stopped."""
    state, url = network
    pid = local.running_pid(state, "edge-1")
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    stopped = time.monotonic()

    def down() -> dict[str, Any] | None:
        routers = get(url, "/api/topology")["routers"]
        return next((r for r in routers if r["id"] == "edge-1" and r["state"] == "down"), None)

    router = eventually("edge-1 down", down, timeout=10)
    assert time.monotonic() - stopped < 10
    assert router["error"] == "not running"
    problems = get(url, "/api/health")["problems"]
    assert problems[0]["kind"] == "router-down" and problems[0]["subject"] == {"router": "edge-1"}


def test_down_stops_the_console_with_the_network(network: tuple[Path, str]) -> None:
    state, url = network
    assert local_console.running_url(state) == url
    result = routernet("down", "--state-dir", str(state))
    assert result.returncode == 0, result.stderr
    assert "stopped the console first" in result.stdout
    assert local_console.running_pid(state) is None
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "healthz", timeout=5)
