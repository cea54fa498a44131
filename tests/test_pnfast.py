"""router/datapath/pnfast.c does what router/datapath/pnfast.py says, on real Proton links.

Two Proton connections joined in memory (no sockets) carry deliveries made by each
implementation in turn: the compiled module the router loads and the Python source it runs with
ROUTERNET_PURE=1 must give the same answers, and the C one must refuse what is not a pointer of
the type it expects rather than misread it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from proton import Collector, Connection, Transport

import router.datapath.pnfast as compiled
from router.transport.pn import ffi, lib

SOURCE = Path(__file__).resolve().parent.parent / "router" / "datapath" / "pnfast.py"


def _source() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pnfast_source", SOURCE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_router_loads_the_compiled_module() -> None:
    # `make test` builds it; the source is only the fallback.
    assert compiled.__file__ is not None and compiled.__file__.endswith(".so")


class Pair:
    """A sending and a receiving link over two connections whose transports are joined."""

    def __init__(self) -> None:
        self.ends = []
        for _ in range(2):
            conn, transport, collector = Connection(), Transport(), Collector()
            conn.collect(collector)
            transport.bind(conn)
            conn.open()
            self.ends.append((conn, transport, collector))
        (a, _, _), (b, _, self.rcoll) = self.ends
        self.sender = a.session().sender("s")
        self.sender.session.open()
        self.sender.open()
        self.pump()
        session = b.session_head(0)
        session.open()
        self.receiver = b.link_head(0)
        self.receiver.open()
        self.receiver.flow(10)
        self.pump()

    def pump(self) -> None:
        for _ in range(20):
            moved = False
            for (_, t1, _), (_, t2, _) in (
                (self.ends[0], self.ends[1]),
                (self.ends[1], self.ends[0]),
            ):
                out = t1.peek(1 << 20)
                if out:
                    t1.pop(len(out))
                    t2.push(out)
                    moved = True
            if not moved:
                return

    @property
    def s(self) -> Any:
        return self.sender._impl

    @property
    def r(self) -> Any:
        return self.receiver._impl


def deliveries(fast: ModuleType, collector: Any) -> Iterator[tuple[Any, Any]]:
    event = fast.next_event(collector._impl, False)
    while event is not None:
        kind, link, d = event
        if kind == lib.PN_DELIVERY:
            yield link, d
        event = fast.next_event(collector._impl, True)


@pytest.fixture(params=["compiled", "source"])
def fast(request: pytest.FixtureRequest) -> ModuleType:
    return compiled if request.param == "compiled" else _source()


def test_send_take_and_settle_a_whole_message(fast: ModuleType) -> None:
    pair = Pair()
    assert fast.credit(pair.s) == 10
    od = fast.send(pair.s, 0x0102030405060708, b"hello", True, False)
    assert ffi.unpack(lib.pn_delivery_tag(od).start, 8) == bytes.fromhex("0807060504030201")
    assert fast.credit(pair.s) == 9
    assert not fast.settled(od)
    pair.pump()
    got = [(link, d) for link, d in deliveries(fast, pair.rcoll)]
    assert len(got) == 1 and got[0][0] == pair.r
    link, d = got[0]
    assert fast.take(link, d) == b"hello"
    assert lib.pn_link_current(link) == ffi.NULL  # advanced past it
    assert fast.take(link, d) == fast.NOT_CURRENT
    assert fast.outcome(od) == 0  # nothing from the receiver yet
    fast.settle(d, lib.PN_REJECTED)
    pair.pump()
    assert fast.outcome(od) == lib.PN_REJECTED
    fast.settle(od, 0)


def test_settled_without_an_outcome_counts_as_accepted(fast: ModuleType) -> None:
    pair = Pair()
    od = fast.send(pair.s, 1, b"x", True, False)
    pair.pump()
    (link, d), *_ = deliveries(fast, pair.rcoll)
    assert fast.take(link, d) == b"x"
    fast.settle(d, 0)
    pair.pump()
    assert fast.outcome(od) == lib.PN_ACCEPTED


def test_presettled_and_empty(fast: ModuleType) -> None:
    pair = Pair()
    fast.send(pair.s, 1, bytearray(b""), True, True)
    pair.pump()
    (link, d), *_ = deliveries(fast, pair.rcoll)
    assert fast.settled(d)
    assert fast.take(link, d) == b""  # an empty transfer: no bytes, still advanced
    assert lib.pn_link_current(link) == ffi.NULL


def test_partial_and_aborted_go_the_general_way(fast: ModuleType) -> None:
    pair = Pair()
    od = fast.send(pair.s, 1, b"head", False, False)  # not advanced: more to come
    pair.pump()
    (link, d), *_ = deliveries(fast, pair.rcoll)
    assert fast.take(link, d) == fast.SLOW
    assert lib.pn_delivery_pending(d) == 4  # nothing was read
    lib.pn_delivery_abort(od)
    pair.pump()
    assert fast.take(link, d) == fast.SLOW
    assert lib.pn_delivery_aborted(d)


def test_the_compiled_module_refuses_wrong_pointers() -> None:
    pair = Pair()
    od = compiled.send(pair.s, 1, b"x", True, False)
    with pytest.raises(TypeError):
        compiled.credit(od)  # a delivery where a link belongs
    with pytest.raises(TypeError):
        compiled.settle(pair.s, 0)
    with pytest.raises(TypeError):
        compiled.take(b"not a pointer", od)
    with pytest.raises(ValueError):
        compiled.credit(ffi.cast("pn_link_t *", 0))
