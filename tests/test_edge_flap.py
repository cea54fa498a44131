"""An edge that switches uplinks in quick succession, many times, against real interiors.

Between the edge and the interiors sits `Relays`: one loopback port per edge connector, several
per interior, relaying bytes both ways. A relay can gate a new connection: what the interior
sends after its AMQP protocol header (its Open, then everything else) waits until the test
releases it. Each round the test cuts every connection of the edge, lets the connectors redial,
waits until every interior's Open is held, and releases them all at once or a millisecond apart,
least preferred connector first. The edge then sees its connections open within milliseconds,
each preferred to the one before, and moves its uplink up the order again and again, often
before the interior it just left has answered its attaches.

Afterwards no router may have refused a link or attached more than those switches explain,
traffic must flow through the edge both ways, only the interior it uses may serve its
containers, and the status view (`routernet status`, from the edge's own management) must name
the interior the edge says it uses.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import cast

import pytest
from clients import Management, Receiver, Sender, World
from harness import RouterProcess
from proton import Message
from router_operator.local import backend as local
from test_edge import interior, started

pytestmark = pytest.mark.network

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"  # after SASL's own header and outcome
CONNECTORS_PER_INTERIOR = 2
ROUNDS = 5  # the first connect, then four cuts (the connectors' backoff: 0.1, 0.2, 0.4, 0.8 s)
# Links an edge attaches on an uplink before any client uses it: its anonymous sender, its
# `_edge/<id>` receiver, the sender reporting its containers and the address tracking
# receiver; one more per address with consumers on the edge, and per address it sends to.
LINKS_PER_UPLINK = 4


class Pair:
    """One relayed connection: the edge's socket and ours to the interior."""

    def __init__(self, index: int, client: socket.socket, upstream: socket.socket, gated: bool):
        self.index = index
        self.client = client
        self.upstream = upstream
        self.gated = gated
        self.past_header = False
        self.scanned = b""  # the tail of what came from the interior, to find the header in
        self.held = bytearray()
        self.out: dict[socket.socket, bytearray] = {client: bytearray(), upstream: bytearray()}
        self.closed = False

    def peer(self, sock: socket.socket) -> socket.socket:
        return self.upstream if sock is self.client else self.client


class Relays:
    """Loopback TCP relays to interiors' edge listeners, all run by one thread (`stop` joins
    it and closes every socket)."""

    def __init__(self, targets: list[int]) -> None:
        self.sel = selectors.DefaultSelector()
        self.lock = threading.Lock()
        self.targets = targets
        self.listeners: list[socket.socket] = []
        self.ports: list[int] = []
        self.pairs: list[Pair] = []
        self.gating = True  # new connections are gated
        self.stopping = False
        for index in range(len(targets)):
            lsock = socket.create_server(("127.0.0.1", 0))
            lsock.setblocking(False)
            self.sel.register(lsock, selectors.EVENT_READ, index)
            self.listeners.append(lsock)
            self.ports.append(lsock.getsockname()[1])
        self.thread = threading.Thread(target=self.run, name="relays", daemon=True)
        self.thread.start()

    # ----- the test's side -----------------------------------------------------------------

    def held_everywhere(self) -> bool:
        """Every relay has a gated connection whose interior's Open is held."""
        with self.lock:
            ready = {p.index for p in self.pairs if not p.closed and p.gated and p.held}
        return ready == set(range(len(self.targets)))

    def release(self, order: list[int], gap: float) -> None:
        """Let the held bytes of relays `order` through, in that order, `gap` seconds apart;
        from now on new connections are not gated (until `cut`)."""
        for i, index in enumerate(order):
            if gap and i:
                time.sleep(gap)
            with self.lock:
                for pair in self.pairs:
                    if pair.index == index and pair.gated and not pair.closed:
                        pair.gated = False
                        self.forward(pair, pair.client, bytes(pair.held))
                        pair.held.clear()
        with self.lock:
            self.gating = False

    def cut(self, gate: bool = True) -> None:
        """Close every relayed connection; with `gate`, gate the next ones."""
        with self.lock:
            self.gating = gate
            for pair in list(self.pairs):
                self.close(pair)

    def stop(self) -> None:
        self.stopping = True
        self.thread.join(5)
        with self.lock:
            for pair in list(self.pairs):
                self.close(pair)
            for lsock in self.listeners:
                with contextlib.suppress(KeyError, ValueError):
                    self.sel.unregister(lsock)
                lsock.close()
        self.sel.close()

    # ----- the relay thread ----------------------------------------------------------------

    def run(self) -> None:
        while not self.stopping:
            events = self.sel.select(0.05)
            with self.lock:
                for key, mask in events:
                    sock = cast(socket.socket, key.fileobj)
                    if isinstance(key.data, int):
                        self.accept(sock, key.data)
                        continue
                    pair: Pair = key.data
                    if pair.closed:
                        continue
                    if mask & selectors.EVENT_WRITE:
                        self.flush(pair, sock)
                    if mask & selectors.EVENT_READ and not pair.closed:
                        self.read(pair, sock)

    def accept(self, lsock: socket.socket, index: int) -> None:
        try:
            client, _ = lsock.accept()
        except (BlockingIOError, InterruptedError):
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", self.targets[index]), timeout=2)
        except OSError:
            client.close()  # that interior is down: so is this relay
            return
        for sock in (client, upstream):
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pair = Pair(index, client, upstream, self.gating)
        self.pairs.append(pair)
        self.sel.register(client, selectors.EVENT_READ, pair)
        self.sel.register(upstream, selectors.EVENT_READ, pair)

    def read(self, pair: Pair, sock: socket.socket) -> None:
        try:
            data = sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.close(pair)
            return
        if sock is pair.upstream and pair.gated:
            if not pair.past_header:
                seen = pair.scanned + data
                at = seen.find(AMQP_HEADER)
                if at < 0:
                    pair.scanned = seen[-(len(AMQP_HEADER) - 1) :]
                    self.forward(pair, pair.client, data)
                    return
                pair.past_header = True
                split = at + len(AMQP_HEADER) - len(pair.scanned)
                self.forward(pair, pair.client, data[:split])
                data = data[split:]
            pair.held += data
            return
        self.forward(pair, pair.peer(sock), data)

    def forward(self, pair: Pair, to: socket.socket, data: bytes) -> None:
        if data:
            pair.out[to] += data
            self.flush(pair, to)

    def flush(self, pair: Pair, sock: socket.socket) -> None:
        buf = pair.out[sock]
        if buf:
            try:
                sent = sock.send(buf)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                self.close(pair)
                return
            del buf[:sent]
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if buf else 0)
        with contextlib.suppress(KeyError, ValueError):
            self.sel.modify(sock, events, pair)

    def close(self, pair: Pair) -> None:
        if pair.closed:
            return
        pair.closed = True
        for sock in (pair.client, pair.upstream):
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(sock)
            sock.close()
        self.pairs.remove(pair)


@contextlib.contextmanager
def relaying(targets: list[int]) -> Iterator[Relays]:
    relays = Relays(targets)
    try:
        yield relays
    finally:
        relays.stop()


def wait(what: str, check: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.01)


def count(log: str, event: str) -> int:
    return len(re.findall(rf"event={re.escape(event)}( |$)", log, re.MULTILINE))


def tail(router: RouterProcess, lines: int = 30) -> str:
    return f"{router.id}'s log ends:\n" + "\n".join(router.log().splitlines()[-lines:])


def quickest_move(log: str) -> float:
    """The shortest time, in seconds, between two of the edge's `edge.uplink` lines."""
    times = [
        datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()
        for ts in re.findall(r"^ts=(\S+) .*event=edge\.uplink ", log, re.MULTILINE)
    ]
    return min((b - a for a, b in itertools.pairwise(times)), default=float("inf"))


def uplink_in_log(log: str) -> str | None:
    """The interior the edge last said it took as its uplink (its `edge.uplink` line)."""
    found = re.findall(r"event=edge\.uplink conn=\S+ peer=\S+ container=(\S+)", log)
    return found[-1] if found else None


def consumers_of(world: World, router: RouterProcess, key: str) -> int:
    client = world.connect(router.url)
    try:
        rows = Management(client).query("router.address", ["key", "subscriberCount"])
    finally:
        client.close()
    return next((r["subscriberCount"] for r in rows if r["key"] == key), 0)


def container_row(world: World, router: RouterProcess, container: str) -> dict[str, object]:
    client = world.connect(router.url)
    try:
        rows = Management(client).query("io.routernet.container")
    finally:
        client.close()
    return next(r for r in rows if r["containerId"] == container)


def test_edge_switching_uplinks_within_milliseconds_settles_on_one(
    tmp_path: Path, world: World
) -> None:
    a = interior(tmp_path, "A")
    b = interior(tmp_path, "B", connect=a)
    c = interior(tmp_path, "C", connect=a)
    interiors = [a, b, c]
    # Connector i goes through relay i to interior i % 3: A, B, C, A, B, C (preferred first).
    targets = [interiors[i % 3].listeners[2]["port"] for i in range(3 * CONNECTORS_PER_INTERIOR)]
    order = list(reversed(range(len(targets))))  # least preferred first: each one a move up
    # The routers first: their ports are picked ahead, and a relay's listener must not take one.
    with started(a, b, c), relaying(targets) as relays:
        args = ["--mode", "edge"]
        for port in relays.ports:
            args += ["--connect", f"127.0.0.1:{port}"]
        e = RouterProcess(tmp_path, "E", extra_args=args)
        with started(e):
            for round_ in range(ROUNDS):
                if round_:
                    relays.cut()
                wait(f"every interior's Open held (round {round_})", relays.held_everywhere)
                relays.release(order, gap=0.001 if round_ % 2 else 0.0)
                time.sleep(0.2)  # the edge moves up its connectors; the interiors answer
            world.run_for(1.0)  # anything still going on (an echo, a retry) goes on here
            switches = count(e.log(), "edge.uplink")
            assert count(e.log(), "edge.uplink_preferred") >= ROUNDS, tail(e)
            assert quickest_move(e.log()) <= 0.002, tail(e)  # moves within milliseconds

            # Bounded: no router refused anything, and no interior saw more attaches than the
            # edge's switches explain (each switch attaches its links once).
            before = {r.id: count(r.log(), "link.attached") for r in [*interiors, e]}
            for r in [*interiors, e]:
                assert count(r.log(), "link.refused") == 0, tail(r)
            assert sum(before[r.id] for r in interiors) <= LINKS_PER_UPLINK * switches, before
            assert before["E"] == 0, tail(e)  # nothing attached to the edge from an interior
            assert count(e.log(), "edge.link_detached") == 0, tail(e)  # nor detached by one

            # The uplink: what the edge says it took, what its management shows (as
            # `routernet status` reads it), and the one interior with its `_edge/E` consumer.
            uplink = uplink_in_log(e.log())
            assert uplink in {"A", "B", "C"}
            rows = local.management_query(
                f"127.0.0.1:{e.port}",
                {
                    "connection": local.CONNECTION_ATTRIBUTES,
                    "router.link": local.LINK_ATTRIBUTES,
                },
            )
            assert local.edge_uplink(rows) == uplink
            holders = {r.id for r in interiors if consumers_of(world, r, "M0_edge/E")}
            assert holders == {uplink}
            queries = len(interiors)  # management queries to interiors, each two links there
            # Only that interior serves the edge's containers: the ones it left stopped when
            # it detached its report from them, though their connections stay in reserve.
            for r in interiors:
                assert container_row(world, r, "E")["duplicate"] is False, tail(r)
            queries += len(interiors)

            # Traffic through the edge, both ways, crossing the mesh.
            other = next(r for r in interiors if r.id != uplink)
            down = Receiver(world.connect(e.url), "flap.down")
            up = Receiver(world.connect(other.url), "flap.up")
            world.run_until(lambda: down.attached and up.attached)
            # Credit at the edge means the interior has a route (router/edges/tracking.py).
            to_edge = Sender(world.connect(other.url), "flap.down")
            from_edge = Sender(world.connect(e.url), "flap.up")
            world.run_until(
                lambda: to_edge.credit > 0 and from_edge.credit > 0,
                timeout=10,
                what="routes to and from the edge",
            )
            to_edge.send_all(Message(body=i) for i in range(10))
            from_edge.send_all(Message(body=i) for i in range(10))
            world.run_until(
                lambda: (
                    to_edge.all_settled()
                    and from_edge.all_settled()
                    and len(down.messages) == 10
                    and len(up.messages) == 10
                ),
                timeout=10,
                what="traffic through the edge",
            )
            assert down.bodies == up.bodies == list(range(10))
            assert {t.outcome for t in to_edge.sent + from_edge.sent} == {"accepted"}
            # Since then: management's links on the interiors (two per query), the clients' two,
            # and on the uplink a proxy for the consumer on the edge and the edge's link for
            # what it sends to flap.up (three to spare); nothing else.
            after = {r.id: count(r.log(), "link.attached") for r in interiors}
            attached = sum(after.values()) - sum(before[r.id] for r in interiors)
            assert attached <= 2 * queries + 4 + 3, after
            assert uplink_in_log(e.log()) == uplink
