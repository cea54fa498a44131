"""The HELLO and mobile-address protocols on their own, message by message."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from router.network.hello import HelloProtocol
from router.network.messages import (
    ALL_ROUTERS_MA_ADDRESS,
    Hello,
    MobileAddressRequest,
    MobileAddressSnapshot,
    MobileAddressUpdate,
    from_body,
)
from router.network.mobile import MobileSync


class Wire:
    def __init__(self) -> None:
        self.hellos: list[tuple[Hashable, Hello]] = []
        self.sent: list[tuple[str, Any]] = []
        self.published: list[tuple[str, dict[str, int], list[str]]] = []

    def send_hello(self, link: Hashable, body: dict[str, Any]) -> None:
        msg = from_body("HELLO", body)
        assert isinstance(msg, Hello)
        self.hellos.append((link, msg))

    def send(self, address: str, opcode: str, body: dict[str, Any]) -> None:
        self.sent.append((address, from_body(opcode, body)))

    def publish(self, router_id: str, added: dict[str, int], removed: list[str]) -> None:
        self.published.append((router_id, added, removed))


def hello_protocol() -> tuple[HelloProtocol, Wire]:
    wire = Wire()
    return HelloProtocol("A", 1, wire.send_hello, interval=1.0, max_age=3.0), wire


# ----- HELLO ---------------------------------------------------------------------------------


def test_two_way_only_once_the_neighbor_lists_us() -> None:
    hello, wire = hello_protocol()
    hello.link_up("L1", 4, 0.0)
    assert wire.hellos == [("L1", Hello("A", 1, ()))]  # at once, not at the next tick
    hello.receive("L1", Hello("B", 7, ()), 0.1)
    assert hello.neighbors() == {}
    # B did not list us, and is new to us: tell it we hear it, right away.
    assert wire.hellos[-1] == ("L1", Hello("A", 1, ("B",)))
    hello.receive("L1", Hello("B", 7, ("A",)), 0.2)
    assert hello.neighbors() == {"B": ("L1", 4)}
    assert len(wire.hellos) == 2  # B lists us and is not new: nothing to answer


def test_replies_cannot_ping_pong() -> None:
    a, wire_a = hello_protocol()
    wire_b = Wire()
    b = HelloProtocol("B", 2, wire_b.send_hello, 1.0, 3.0)
    a.link_up("ab", 1, 0.0)
    b.link_up("ba", 1, 0.0)
    for _ in range(10):  # deliver everything in flight until quiet
        moved = False
        while wire_a.hellos:
            moved = True
            b.receive("ba", wire_a.hellos.pop(0)[1], 0.0)
        while wire_b.hellos:
            moved = True
            a.receive("ab", wire_b.hellos.pop(0)[1], 0.0)
        if not moved:
            break
    else:
        raise AssertionError("HELLOs kept bouncing")
    assert set(a.neighbors()) == {"B"} and set(b.neighbors()) == {"A"}


def test_neighbor_lost_after_max_age_or_when_it_stops_listing_us() -> None:
    hello, _ = hello_protocol()
    hello.link_up("L1", 1, 0.0)
    hello.receive("L1", Hello("B", 7, ("A",)), 0.0)
    hello.tick(3.0)
    assert "B" in hello.neighbors()  # exactly max age: still fine
    hello.tick(3.01)
    assert hello.neighbors() == {}
    hello.receive("L1", Hello("B", 7, ("A",)), 4.0)
    assert "B" in hello.neighbors()
    hello.receive("L1", Hello("B", 7, ()), 4.5)  # B says it no longer hears us
    assert hello.neighbors() == {}


def test_periodic_hellos_keep_their_cadence() -> None:
    hello, wire = hello_protocol()
    hello.link_up("L1", 1, 0.0)
    wire.hellos.clear()
    t = 0.0
    while t < 10.0:
        hello.tick(t)
        t = round(t + 0.3, 6)  # ticks that never land on a whole second
    assert len(wire.hellos) == 10
    assert wire.hellos[-1][1].seen == ()


def test_cheapest_link_to_a_neighbor_wins() -> None:
    hello, _ = hello_protocol()
    hello.link_up("slow", 10, 0.0)
    hello.link_up("fast", 2, 0.0)
    hello.receive("slow", Hello("B", 7, ("A",)), 0.0)
    assert hello.neighbors() == {"B": ("slow", 10)}
    hello.receive("fast", Hello("B", 7, ("A",)), 0.0)
    assert hello.neighbors() == {"B": ("fast", 2)}
    hello.link_down("fast")
    assert hello.neighbors() == {"B": ("slow", 10)}


def test_someone_else_on_the_link_resets_it() -> None:
    hello, _ = hello_protocol()
    hello.link_up("L1", 1, 0.0)
    hello.receive("L1", Hello("B", 7, ("A",)), 0.0)
    hello.receive("L1", Hello("C", 8, ()), 0.1)
    assert hello.neighbors() == {}
    assert hello.neighbor_on("L1") == "C"


# ----- mobile addresses ----------------------------------------------------------------------


def mobile_sync() -> tuple[MobileSync, Wire]:
    wire = Wire()
    return MobileSync("A", wire.send, wire.publish, interval=0.25, retry=1.0), wire


def test_local_changes_batch_into_numbered_differential_updates() -> None:
    mobile, wire = mobile_sync()
    assert not mobile.tick(0.0)  # nothing to say
    mobile.add_local("M0a", 2)
    assert mobile.tick(0.0)
    mobile.add_local("M0b", 3)
    assert not mobile.tick(0.1)  # too soon after the last batch
    mobile.add_local("M0a", 1)  # hint changed: announced again
    mobile.remove_local("M0missing")
    assert mobile.tick(0.25)
    assert [m for _, m in wire.sent] == [
        MobileAddressUpdate("A", 1, ("M0a",), (), (2,)),
        MobileAddressUpdate("A", 2, ("M0a", "M0b"), (), (1, 3)),
    ]
    assert {a for a, _ in wire.sent} == {ALL_ROUTERS_MA_ADDRESS}
    mobile.remove_local("M0a")
    mobile.tick(1.0)
    assert wire.sent[-1][1] == MobileAddressUpdate("A", 3, (), ("M0a",), ())


def test_mar_is_answered_with_what_was_announced_unless_ahead() -> None:
    mobile, wire = mobile_sync()
    mobile.add_local("M0a", 2)
    mobile.tick(0.0)
    mobile.add_local("M0pending", 2)  # not announced yet: not in the snapshot
    mobile.on_request(MobileAddressRequest("B", 2))  # ahead of us: nothing to send
    assert wire.sent[1:] == []
    snapshot = ("amqp:/_topo/0/B/qdrouter.ma", MobileAddressSnapshot("A", 1, ("M0a",), (2,)))
    mobile.on_request(MobileAddressRequest("B", 0))
    assert wire.sent[-1] == snapshot
    # At our own mobile_seq too: a qdrouterd that skipped our first MAUs asks so (mobile.py).
    mobile.on_request(MobileAddressRequest("B", 1))
    assert wire.sent[-2:] == [snapshot, snapshot]


def test_remote_updates_apply_in_sequence_or_trigger_mar() -> None:
    mobile, wire = mobile_sync()
    mobile.set_reachable({"B"})
    mobile.on_update(MobileAddressUpdate("B", 1, ("M0x",), (), (2,)))
    assert wire.published == [("B", {"M0x": 2}, [])]
    mobile.on_update(MobileAddressUpdate("B", 1, ("M0x",), (), (2,)))  # duplicate: ignored
    mobile.on_update(MobileAddressUpdate("B", 3, ("M0z",), (), (2,)))  # missed seq 2
    assert mobile.addresses("B") == {"M0x": 2}
    mobile.request(5.0)
    assert wire.sent == [("amqp:/_topo/0/B/qdrouter.ma", MobileAddressRequest("A", 1))]
    mobile.request(5.5)  # outstanding: not repeated before `retry`
    assert len(wire.sent) == 1
    mobile.on_update(MobileAddressSnapshot("B", 3, ("M0y", "M0z"), (3, 2)))
    assert mobile.addresses("B") == {"M0y": 3, "M0z": 2}
    assert wire.published[-1] == ("B", {"M0y": 3, "M0z": 2}, ["M0x"])  # what it changed
    mobile.on_update(MobileAddressSnapshot("B", 2, ("M0old",), (3,)))  # overtaken: ignored
    mobile.on_update(MobileAddressUpdate("B", 4, (), ("M0y",), ()))
    assert wire.published[-1] == ("B", {}, ["M0y"])  # a change, not the whole set
    mobile.request(9.0)
    assert len(wire.sent) == 1


def test_edge_spaces_travel_as_dispatchs_edge_summaries() -> None:
    """`_edge/<edge>` is Dispatch's edge summary `H<edge>` between routers, both ways, so a
    qdrouterd routes `_edge/E/...` toward our edge E and we route toward its edges."""
    mobile, wire = mobile_sync()
    mobile.add_local("M0_edge/E", 2)
    mobile.add_local("M0_edge/x/y", 2)  # an ordinary address under `_edge/`: as it is
    mobile.tick(0.0)
    assert wire.sent[-1][1] == MobileAddressUpdate("A", 1, ("HE", "M0_edge/x/y"), (), (2, 2))
    assert mobile.local() == {"M0_edge/E": 2, "M0_edge/x/y": 2}
    mobile.remove_local("M0_edge/E")
    mobile.tick(1.0)
    assert wire.sent[-1][1] == MobileAddressUpdate("A", 2, (), ("HE",), ())
    mobile.set_reachable({"B"})
    mobile.on_update(MobileAddressUpdate("B", 1, ("HQE", "M0q"), (), (2, 2)))
    assert wire.published[-1] == ("B", {"M0_edge/QE": 2, "M0q": 2}, [])
    assert mobile.addresses("B") == {"M0_edge/QE": 2, "M0q": 2}


def test_unreachable_routers_addresses_are_withdrawn_and_refetched() -> None:
    mobile, wire = mobile_sync()
    mobile.set_reachable({"B"})
    mobile.on_update(MobileAddressUpdate("B", 1, ("M0x",), (), (2,)))
    mobile.set_reachable(set())
    assert wire.published[-1] == ("B", {}, ["M0x"])
    mobile.on_update(MobileAddressUpdate("B", 2, ("M0y",), (), (2,)))  # no route back: wait
    mobile.request(1.0)
    assert wire.sent == []
    mobile.set_reachable({"B"})
    mobile.request(2.0)
    assert wire.sent == [("amqp:/_topo/0/B/qdrouter.ma", MobileAddressRequest("A", 0))]


def test_restarted_router_is_forgotten() -> None:
    mobile, wire = mobile_sync()
    mobile.set_reachable({"B"})
    mobile.advertised("B", 9)
    mobile.on_update(MobileAddressSnapshot("B", 9, ("M0x",), (2,)))
    mobile.forget("B")
    assert wire.published[-1] == ("B", {}, ["M0x"])
    mobile.on_update(MobileAddressUpdate("B", 1, ("M0new",), (), (2,)))  # the new instance
    assert mobile.addresses("B") == {"M0new": 2}
