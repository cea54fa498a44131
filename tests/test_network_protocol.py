"""Whole-protocol simulations: ControlPlanes joined by in-memory links on a simulated clock.

`SimNet` plays the engines: it carries HELLOs one hop, floods `_topo/0/all/...` (trace-guarded,
so duplicates do arrive in meshes, as they can on a real network), and forwards unicast hop by
hop on each router's own `Routes`, dropping what has no route. Every hop takes `latency`.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import pytest

from router.network import ControlPlane, ProtocolError, Routes, Timers
from router.network.link_state import MAX_ROUTERS, LinkStateProtocol
from router.network.path import compute_paths

TIMERS = Timers()
TICK = 0.05


@dataclass(frozen=True)
class End:
    """One end of a simulated link, as the router at `local` knows it."""

    link: int
    local: str
    remote: str

    def other(self) -> End:
        return End(self.link, self.remote, self.local)


@dataclass
class Sent:
    at: float
    sender: str
    address: str
    opcode: str
    body: dict[str, Any]


class Engine:
    """One router's Container: records what the control plane tells it."""

    def __init__(self, net: SimNet, name: str) -> None:
        self.net = net
        self.name = name
        self.routes = Routes.empty()
        self.topology_changes = 0
        self.mobile: dict[str, dict[str, int]] = {}
        self.mobile_calls: list[tuple[float, str, dict[str, int], list[str]]] = []
        self.duplicates: list[tuple[str, str]] = []

    def send_hello(self, link: Hashable, body: dict[str, Any]) -> None:
        assert isinstance(link, End)
        self.net.log.append(Sent(self.net.now, self.name, "hello", "HELLO", body))
        self.net.hop(link, "amqp:/_local/qdhello", "HELLO", body, trace=())

    def send(self, address: str, opcode: str, body: dict[str, Any]) -> None:
        self.net.log.append(Sent(self.net.now, self.name, address, opcode, body))
        self.net.route(self.name, address, opcode, body, trace=(self.name,))

    def topology_changed(self, routes: Routes) -> None:
        self.routes = routes
        self.topology_changes += 1

    def mobile_changed(self, router_id: str, added: dict[str, int], removed: list[str]) -> None:
        self.mobile_calls.append((self.net.now, router_id, dict(added), list(removed)))
        held = self.mobile.setdefault(router_id, {})
        held.update(added)
        for key in removed:
            held.pop(key, None)
        if not held:
            del self.mobile[router_id]

    def duplicate_router(self, router_id: str, detail: str) -> None:
        self.duplicates.append((router_id, detail))


@dataclass
class Router:
    name: str
    engine: Engine
    cp: ControlPlane
    alive: bool = True


@dataclass
class SimNet:
    timers: Timers = TIMERS
    latency: float = 0.002
    now: float = 1000.0
    routers: dict[str, Router] = field(default_factory=dict)
    links: dict[int, tuple[str, str]] = field(default_factory=dict)
    log: list[Sent] = field(default_factory=list)
    # Return False to lose a message in transit: (from, to, opcode, body) -> deliver?
    filter: Callable[[str, str, str, dict[str, Any]], bool] | None = None
    _events: list[tuple[float, int, Callable[[], None]]] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)
    _link_ids: itertools.count[int] = field(default_factory=itertools.count)
    _instances: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _next_tick: float = 1000.0

    # ----- topology ----------------------------------------------------------------------

    def add(self, name: str, instance: int | None = None) -> Router:
        engine = Engine(self, name)
        instance = next(self._instances) if instance is None else instance
        cp = ControlPlane(name, instance, engine, self.timers, self.now)
        router = Router(name, engine, cp)
        self.routers[name] = router
        return router

    def connect(self, a: str, b: str, cost: int = 1) -> int:
        link = next(self._link_ids)
        self.links[link] = (a, b)
        self.routers[a].cp.link_up(End(link, a, b), cost, self.now)
        self.routers[b].cp.link_up(End(link, b, a), cost, self.now)
        return link

    def disconnect(self, a: str, b: str) -> None:
        for link, ends in list(self.links.items()):
            if set(ends) == {a, b}:
                del self.links[link]
                for end in (End(link, a, b), End(link, b, a)):
                    if self.routers[end.local].alive:
                        self.routers[end.local].cp.link_down(end, self.now)

    def crash(self, name: str) -> None:
        """The router stops dead: no ticks, nothing sent or received, links stay 'up' at its
        neighbors (no connection close reaches them)."""
        self.routers[name].alive = False

    def restart(self, name: str) -> Router:
        """A crash followed by a fresh process (new instance): its connections closed."""
        for a, b in list(self.links.values()):
            if name in (a, b):
                self.disconnect(a, b)
        self.crash(name)
        return self.add(name)

    # ----- carrying messages -------------------------------------------------------------

    def hop(
        self, end: End, address: str, opcode: str, body: dict[str, Any], trace: tuple[str, ...]
    ) -> None:
        def arrive() -> None:
            target = self.routers[end.remote]
            if end.link not in self.links or not target.alive:
                return
            if self.filter is not None and not self.filter(end.local, end.remote, opcode, body):
                return
            if address == "amqp:/_local/qdhello":
                target.cp.receive(end.other(), opcode, body, self.now)
                return
            self.route(end.remote, address, opcode, body, trace, arrived_on=end.other())

        self.at(self.now + self.latency, arrive)

    def route(
        self,
        here: str,
        address: str,
        opcode: str,
        body: dict[str, Any],
        trace: tuple[str, ...],
        arrived_on: End | None = None,
    ) -> None:
        target = address.removeprefix("amqp:/").split("/")[2]
        router = self.routers[here]
        if target == "all":
            if arrived_on is not None:
                router.cp.receive(arrived_on, opcode, body, self.now)
            for link, ends in self.links.items():
                if here in ends:
                    remote = ends[1] if ends[0] == here else ends[0]
                    if remote not in trace:
                        self.hop(End(link, here, remote), address, opcode, body, (*trace, here))
            return
        if target == here:
            assert arrived_on is not None
            router.cp.receive(arrived_on, opcode, body, self.now)
            return
        end = router.engine.routes.next_hop.get(target)
        if end is not None and len(trace) < 32:
            assert isinstance(end, End)
            self.hop(end, address, opcode, body, (*trace, here))

    # ----- the clock ---------------------------------------------------------------------

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._events, (when, next(self._seq), action))

    def run(self, seconds: float) -> None:
        """Advances the clock, delivering messages and ticking every router each TICK (on a
        grid, so that run() in small steps ticks no more often than run() in one go)."""
        end = self.now + seconds
        while True:
            next_tick = self._next_tick
            if self._events and self._events[0][0] <= min(next_tick, end):
                when, _, action = heapq.heappop(self._events)
                self.now = max(self.now, when)
                action()
            elif next_tick <= end:
                self.now = max(self.now, next_tick)
                self._next_tick = next_tick + TICK
                for router in list(self.routers.values()):
                    if router.alive:
                        router.cp.tick(self.now)
            else:
                break
        self.now = end

    def run_until(self, condition: Callable[[], bool], limit: float, step: float = 0.01) -> float:
        """Runs until `condition` holds; returns how long that took (fails past `limit`)."""
        start = self.now
        while not condition():
            assert self.now - start <= limit, f"not within {limit}s"
            self.run(step)
        return self.now - start

    # ----- views -------------------------------------------------------------------------

    def engine(self, name: str) -> Engine:
        return self.routers[name].engine

    def view(self, name: str) -> dict[str, tuple[str, int]]:
        """name's routes as {router: (next hop router id, cost)}."""
        routes = self.engine(name).routes
        return {r: (routes.via[r], routes.cost[r]) for r in routes.cost}


def build(*edges: tuple[str, str, int]) -> SimNet:
    net = SimNet()
    for a, b, _ in edges:
        for name in (a, b):
            if name not in net.routers:
                net.add(name)
    for a, b, cost in edges:
        net.connect(a, b, cost)
    return net


def converged(net: SimNet) -> bool:
    live = [r for r in net.routers.values() if r.alive]
    names = {r.name for r in live}
    return all(set(r.engine.routes.cost) == names - {r.name} for r in live)


# ----- convergence ---------------------------------------------------------------------------


def test_line_of_three_converges() -> None:
    net = build(("A", "B", 1), ("B", "C", 1))
    took = net.run_until(lambda: converged(net), limit=3.0)
    assert took < 1.0  # HELLO replies, then RA -> LSR -> LSU: a few round trips
    assert net.view("A") == {"B": ("B", 1), "C": ("B", 2)}
    assert net.view("B") == {"A": ("A", 1), "C": ("C", 1)}
    assert net.view("C") == {"A": ("B", 2), "B": ("B", 1)}
    b = net.engine("B").routes
    assert b.valid_origins == {"A": {"C"}, "C": {"A"}}
    assert (b.radius, net.engine("A").routes.radius) == (1, 2)
    assert set(b.neighbors) == {"A", "C"}
    a = net.engine("A").routes
    assert a.next_hop["C"] == a.neighbors["B"] == End(0, "A", "B")


def test_triangle_with_unequal_costs_converges_on_the_cheap_path() -> None:
    net = build(("A", "B", 1), ("B", "C", 1), ("A", "C", 5))
    net.run_until(lambda: converged(net), limit=3.0)
    net.run(2.0)  # let every link state settle, not just reachability
    assert net.view("A") == {"B": ("B", 1), "C": ("B", 2)}
    assert net.view("C") == {"A": ("B", 2), "B": ("B", 1)}
    assert net.engine("B").routes.valid_origins == {"A": {"C"}, "C": {"A"}}
    # The direct A-C link is a neighbor relation even though no route uses it.
    assert set(net.engine("A").routes.neighbors) == {"B", "C"}


def test_full_mesh_of_four_converges() -> None:
    net = build(*[(a, b, 1) for a, b in ["AB", "AC", "AD", "BC", "BD", "CD"]])
    net.run_until(lambda: converged(net), limit=3.0)
    net.run(2.0)
    for me in "ABCD":
        others = set("ABCD") - {me}
        assert net.view(me) == {o: (o, 1) for o in others}
        assert net.engine(me).routes.radius == 1


def test_every_router_computes_the_same_trees() -> None:
    # Equal-cost square: everyone must agree that A and D talk through B.
    net = build(("A", "B", 1), ("A", "C", 1), ("B", "D", 1), ("C", "D", 1))
    net.run_until(lambda: converged(net), limit=3.0)
    net.run(2.0)
    assert net.view("A")["D"] == ("B", 2)
    assert net.view("D")["A"] == ("B", 2)
    assert net.engine("B").routes.valid_origins["D"] == {"A"}
    assert net.engine("C").routes.valid_origins["D"] == frozenset()


def test_quiet_network_sends_little() -> None:
    net = build(("A", "B", 1), ("B", "C", 1))
    net.run(40.0)
    net.log.clear()
    net.run(30.0)
    by_opcode: dict[str, int] = {}
    for sent in net.log:
        by_opcode[sent.opcode] = by_opcode.get(sent.opcode, 0) + 1
    # HELLO once a second per link end; one RA per router per raInterval; nothing else.
    assert set(by_opcode) == {"HELLO", "RA"}
    assert by_opcode["RA"] == 3
    assert 4 * 29 <= by_opcode["HELLO"] <= 4 * 31


def test_advertisements_slow_down_two_flux_intervals_after_the_last_change() -> None:
    """Dispatch's cadence: RAs every raIntervalFluxSeconds while the topology changes, every
    raIntervalSeconds once it has not for two flux intervals."""
    net = build(("A", "B", 1), ("B", "C", 1))
    net.run_until(lambda: converged(net), limit=3.0)
    changed = max(r.cp.last_topology_change for r in net.routers.values())
    net.run(changed + 2 * TIMERS.raIntervalFluxSeconds - net.now)
    assert all(r.cp.in_flux(net.now) for r in net.routers.values())
    net.run(TICK)
    assert not any(r.cp.in_flux(net.now) for r in net.routers.values())
    net.log.clear()
    net.run(20.0)
    ras = [s.sender for s in net.log if s.opcode == "RA"]
    assert len(ras) <= 3 and len(set(ras)) == len(ras)  # at most one each, not one per 4 s


# ----- mobile addresses ----------------------------------------------------------------------


def test_mobile_address_reaches_every_router_within_the_batch_delay() -> None:
    net = build(("A", "B", 1), ("B", "C", 1), ("C", "D", 1))
    net.run_until(lambda: converged(net), limit=3.0)
    net.run(5.0)
    net.routers["A"].cp.add_local("M0orders", 2)
    took = net.run_until(
        lambda: all(net.engine(r).mobile.get("A") == {"M0orders": 2} for r in "BCD"),
        limit=2.0,
    )
    assert took <= TIMERS.mobileSyncIntervalSeconds + TICK
    assert "A" not in net.engine("A").mobile  # our own addresses are the engine's business

    net.routers["A"].cp.add_local("M0news", 1)
    net.routers["A"].cp.remove_local("M0orders")
    net.run_until(lambda: net.engine("D").mobile.get("A") == {"M0news": 1}, limit=1.0)
    assert all(net.engine(r).mobile["A"] == {"M0news": 1} for r in "BCD")
    net.routers["A"].cp.remove_local("M0news")
    net.run_until(lambda: all("A" not in net.engine(r).mobile for r in "BCD"), limit=1.0)


def test_changes_within_one_batch_are_sent_together() -> None:
    net = build(("A", "B", 1))
    net.run_until(lambda: converged(net), limit=3.0)
    net.run(1.0)
    net.log.clear()
    cp = net.routers["A"].cp
    cp.add_local("M0a", 2)
    net.run(TICK)  # the first change goes out at the next tick...
    for key in ("M0b", "M0c", "M0gone"):
        cp.add_local(key, 3)
    cp.remove_local("M0gone")  # ...later ones wait for the interval, and cancel out
    net.run(1.0)
    maus = [s.body for s in net.log if s.opcode == "MAU" and s.sender == "A"]
    assert [(m["mobile_seq"], m["add"], m["hints"], m["del"]) for m in maus] == [
        (1, ["M0a"], [2], []),
        (2, ["M0b", "M0c"], [3, 3], []),
    ]
    gap = [s.at for s in net.log if s.opcode == "MAU" and s.sender == "A"]
    assert gap[1] - gap[0] >= TIMERS.mobileSyncIntervalSeconds
    assert net.engine("B").mobile["A"] == {"M0a": 2, "M0b": 3, "M0c": 3}
    # Each MAU is followed by an RA carrying the new mobile_seq, and needs no MAR.
    assert not [s for s in net.log if s.opcode == "MAR"]


def test_a_lost_differential_mau_is_repaired_with_mar_and_absolute_mau() -> None:
    net = build(("A", "B", 1), ("B", "C", 1))
    net.run_until(lambda: converged(net), limit=3.0)
    net.run(1.0)
    lose = {"armed": True}

    def lossy(src: str, dst: str, opcode: str, body: dict[str, Any]) -> bool:
        if opcode == "MAU" and dst == "C" and lose["armed"]:
            lose["armed"] = False
            return False
        return True

    net.filter = lossy
    net.log.clear()
    cp = net.routers["A"].cp
    cp.add_local("M0a", 2)
    net.run(0.5)
    cp.add_local("M0b", 2)
    net.run_until(lambda: net.engine("C").mobile.get("A") == {"M0a": 2, "M0b": 2}, limit=2.0)
    mars = [s for s in net.log if s.opcode == "MAR"]
    assert [(s.sender, s.body["have_seq"]) for s in mars][:1] == [("C", 0)]
    absolute = [s for s in net.log if s.opcode == "MAU" and "exist" in s.body]
    assert absolute and absolute[0].address == "amqp:/_topo/0/C/qdrouter.ma"
    assert net.engine("B").mobile["A"] == {"M0a": 2, "M0b": 2}


def test_a_router_joining_later_learns_existing_addresses() -> None:
    net = build(("A", "B", 1))
    net.routers["A"].cp.add_local("M0orders", 3)
    net.run(3.0)
    net.add("C")
    net.connect("B", "C")
    net.run_until(lambda: net.engine("C").mobile.get("A") == {"M0orders": 3}, limit=2.0)


# ----- routers leaving, restarting, misbehaving ----------------------------------------------


def test_router_removed_is_dropped_and_its_addresses_vanish() -> None:
    net = build(("A", "B", 1), ("B", "C", 1), ("A", "C", 1))
    net.routers["C"].cp.add_local("M0orders", 2)
    net.run_until(lambda: converged(net), limit=3.0)
    net.run_until(lambda: all(net.engine(r).mobile.get("C") for r in "AB"), limit=2.0)
    net.crash("C")
    net.disconnect("A", "C")
    net.disconnect("B", "C")
    took = net.run_until(lambda: all("C" not in net.engine(r).routes.cost for r in "AB"), limit=1.0)
    assert took < 0.1  # link_down is immediate
    assert "C" not in net.engine("A").mobile and "C" not in net.engine("B").mobile
    assert net.view("A") == {"B": ("B", 1)}


def test_silent_router_is_dropped_within_hello_max_age() -> None:
    net = build(("A", "B", 1), ("B", "C", 1))
    net.routers["C"].cp.add_local("M0orders", 2)
    net.run_until(lambda: converged(net), limit=3.0)
    net.run_until(lambda: net.engine("A").mobile.get("C") is not None, limit=2.0)
    net.crash("C")  # no link_down reaches B: only the HELLOs stop
    took = net.run_until(lambda: "C" not in net.engine("A").routes.cost, limit=5.0)
    assert took <= TIMERS.helloMaxAgeSeconds + TIMERS.helloIntervalSeconds
    assert "C" not in net.engine("A").mobile and "C" not in net.engine("B").mobile
    # Its link state ages out after remoteLsMaxAge and the router is forgotten entirely.
    assert "C" in [row["id"] for row in net.routers["A"].cp.nodes()]
    net.run(TIMERS.remoteLsMaxAgeSeconds + 2)
    assert "C" not in [row["id"] for row in net.routers["A"].cp.nodes()]


def test_restarted_router_rejoins_and_its_state_is_relearned() -> None:
    net = build(("A", "B", 1), ("B", "C", 1))
    net.routers["C"].cp.add_local("M0old", 2)
    net.run_until(lambda: converged(net), limit=3.0)
    net.run(35.0)  # sequence numbers well past 1
    old_instance = net.routers["C"].cp.instance
    assert net.engine("A").mobile["C"] == {"M0old": 2}

    c = net.restart("C")
    assert c.cp.instance != old_instance
    c.cp.add_local("M0new", 3)
    net.connect("B", "C")
    net.run_until(lambda: converged(net), limit=3.0)
    net.run_until(lambda: net.engine("A").mobile.get("C") == {"M0new": 3}, limit=3.0)
    row = next(r for r in net.routers["A"].cp.nodes() if r["id"] == "C")
    assert row["instance"] == c.cp.instance
    assert row["linkState"] == ["B"] and row["nextHop"] == "B"
    # ...and the restarted router learned everything again from scratch.
    assert net.view("C") == {"A": ("B", 2), "B": ("B", 1)}


def test_restart_is_noticed_even_if_the_connection_survived() -> None:
    # A control plane restarted behind a connection that stayed up (say, the engine
    # re-created it): the new instance in its HELLOs and RAs makes the others forget it.
    net = build(("A", "B", 1))
    net.routers["B"].cp.add_local("M0x", 2)
    net.run_until(lambda: net.engine("A").mobile.get("B") == {"M0x": 2}, limit=3.0)
    old = net.routers["B"]
    fresh = ControlPlane("B", 999, old.engine, net.timers, net.now)
    old.cp = fresh
    link = next(iter(net.links))
    fresh.link_up(End(link, "B", "A"), 1, net.now)
    net.run_until(lambda: "B" not in net.engine("A").mobile, limit=2.0)
    net.run_until(lambda: converged(net), limit=3.0)
    assert next(r for r in net.routers["A"].cp.nodes() if r["id"] == "B")["instance"] == 999


def test_partition_heals() -> None:
    net = build(("A", "B", 1), ("B", "C", 1))
    net.routers["C"].cp.add_local("M0c", 2)
    net.run_until(lambda: net.engine("A").mobile.get("C") == {"M0c": 2}, limit=3.0)
    net.disconnect("B", "C")
    net.run_until(lambda: "C" not in net.engine("A").routes.cost, limit=1.0)
    assert "C" not in net.engine("A").mobile
    net.connect("B", "C")
    net.run_until(lambda: net.engine("A").mobile.get("C") == {"M0c": 2}, limit=2.0)
    assert net.view("A") == {"B": ("B", 1), "C": ("B", 2)}


def test_cheaper_path_appearing_reroutes() -> None:
    net = build(("A", "B", 5), ("B", "C", 1))
    net.run_until(lambda: converged(net), limit=3.0)
    assert net.view("A") == {"B": ("B", 5), "C": ("B", 6)}
    net.connect("A", "C", 1)
    net.run_until(lambda: net.view("A") == {"B": ("C", 2), "C": ("C", 1)}, limit=1.0)
    net.run_until(lambda: net.view("B") == {"A": ("C", 2), "C": ("C", 1)}, limit=1.0)
    # A neighbor reached more cheaply through another router is still a neighbor.
    assert set(net.engine("A").routes.neighbors) == {"B", "C"}


def test_duplicate_router_id_between_neighbors_is_reported() -> None:
    net = SimNet()
    net.add("A", instance=1)
    twin = Engine(net, "A*")  # a second router configured with id "A"
    net.routers["A*"] = Router("A*", twin, ControlPlane("A", 2, twin, TIMERS, net.now))
    net.connect("A", "A*")
    net.run(2.0)
    for name in ("A", "A*"):
        reports = net.engine(name).duplicates
        assert len(reports) == 1 and reports[0][0] == "A"
        assert "another router using our id" in reports[0][1]
    assert net.engine("A").routes == Routes.empty()


def test_duplicate_router_id_across_the_network_is_reported() -> None:
    net = build(("A", "B", 1), ("B", "C", 1))
    net.run_until(lambda: converged(net), limit=3.0)
    # "D" is born calling itself "A": only RAs flooded through B can give it away.
    impostor = Engine(net, "D")
    net.routers["D"] = Router("D", impostor, ControlPlane("A", 77, impostor, TIMERS, net.now))
    net.connect("C", "D")
    net.run(3.0)
    assert net.engine("A").duplicates and net.engine("A").duplicates[0][1].startswith("RA from")
    assert len(net.engine("A").duplicates) == 1  # reported once, not on every RA
    # The routers in between hear both, and a boot time going backwards gives the pair away.
    for name in ("B", "C"):
        reports = net.engine(name).duplicates
        assert len(reports) == 1 and reports[0][0] == "A", (name, reports)
        assert "two routers with id 'A'" in reports[0][1]


# ----- facade details ------------------------------------------------------------------------


def test_nodes_rows_as_qdstat_reads_them() -> None:
    net = build(("A", "B", 1), ("B", "C", 3))
    net.run_until(lambda: converged(net), limit=3.0)
    net.run(2.0)
    rows = net.routers["B"].cp.nodes(link_label=lambda end: end.link, clock_offset=0.5)
    me, a, c = rows
    assert me == {
        "id": "B",
        "index": 0,
        "protocolVersion": 1,
        "instance": net.routers["B"].cp.instance,
        "linkState": ["A", "C"],
        "nextHop": "(self)",
        "validOrigins": [],
        "address": "amqp:/_topo/0/B",
        "routerLink": None,
        "cost": None,
        "lastTopoChange": round(net.routers["B"].cp.last_topology_change + 0.5),
    }
    assert (a["id"], a["nextHop"], a["routerLink"], a["cost"]) == ("A", None, 0, 1)
    assert (c["id"], c["nextHop"], c["routerLink"], c["cost"]) == ("C", None, 1, 3)
    assert a["validOrigins"] == ["C"] and a["linkState"] == ["B"]
    assert {a["index"], c["index"]} == {1, 2}
    far = {r["id"]: r for r in net.routers["A"].cp.nodes()}["C"]
    assert (far["nextHop"], far["routerLink"], far["cost"]) == ("B", None, 4)


def test_malformed_and_future_messages() -> None:
    net = build(("A", "B", 1))
    cp = net.routers["A"].cp
    end = End(0, "A", "B")
    with pytest.raises(ProtocolError):
        cp.receive(end, "RA", {"id": "B", "ls_seq": "x", "mobile_seq": 0}, net.now)
    with pytest.raises(ProtocolError):
        cp.receive(end, "BOGUS", {}, net.now)
    cp.receive(end, "RA", {"id": "Z", "pv": 2, "ls_seq": 1, "mobile_seq": 1}, net.now)
    assert "Z" not in [r["id"] for r in cp.nodes()]
    net.run_until(lambda: converged(net), limit=3.0)  # nothing broke


def test_router_limit_refuses_the_129th() -> None:
    sent: list[tuple[str, str]] = []
    ls = LinkStateProtocol("me", 1, lambda a, o, b: sent.append((a, o)), lambda: 0, 30, 4, 60, 1)
    for i in range(MAX_ROUTERS - 1):
        assert ls.learn(f"R{i}", 0.0) is not None
    assert ls.learn("one-too-many", 0.0) is None
    assert ls.learn("R5", 0.0) is not None  # known ones still fine
    indexes = sorted(r.index for r in ls.routers.values())
    assert indexes == list(range(1, MAX_ROUTERS))
    # Once a router is forgotten its index (mask bit) is free for the next one.
    ls.routers["R5"].heard_at = -100.0
    _, dropped = ls.expire(0.0)
    assert dropped == ["R5"]
    assert ls.learn("one-too-many", 0.0) is not None
    assert ls.routers["one-too-many"].index == 6


def test_routes_are_only_published_when_they_change() -> None:
    net = build(("A", "B", 1), ("B", "C", 1))
    net.run_until(lambda: converged(net), limit=3.0)
    net.run(5.0)
    before = {r: net.engine(r).topology_changes for r in "ABC"}
    net.run(60.0)
    assert {r: net.engine(r).topology_changes for r in "ABC"} == before


@pytest.mark.parametrize("seed", range(5))
def test_random_network_converges_to_the_true_shortest_paths(seed: int) -> None:
    rng = random.Random(seed)
    names = [f"R{i:02d}" for i in range(rng.randrange(8, 16))]
    edges = {(names[i], names[rng.randrange(i)]) for i in range(1, len(names))}
    edges |= {tuple(sorted(rng.sample(names, 2))) for _ in range(len(names) // 2)}
    net = SimNet()
    for name in names:
        net.add(name)
    truth: dict[str, dict[str, int]] = {n: {} for n in names}
    for a, b in sorted(edges):
        if b in truth[a]:
            continue
        cost = rng.choice([1, 1, 2, 5])
        truth[a][b] = truth[b][a] = cost
        net.connect(a, b, cost)
    net.run_until(lambda: converged(net), limit=5.0)
    net.run(3.0)
    for name in names:
        expected = compute_paths(truth, name)
        routes = net.engine(name).routes
        assert dict(routes.via) == expected.next_hop
        assert dict(routes.cost) == expected.cost
        assert dict(routes.valid_origins) == expected.valid_origins
        assert routes.radius == expected.radius
