"""Fuzzing what an inter-router neighbour can send: the control plane's message parsing, and a
live router fed random, mutated and truncated control and data messages on an inter-router
connection. Whatever arrives, the router stays up, keeps the connection (malformed input is
logged and dropped, as Dispatch does) and keeps routing.

Bounded for `make test`: a fixed number of examples, derandomized so a CI run is repeatable.
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from clients import World
from dispatch_peer import DispatchPeer, control_message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from proton import Data, symbol, ulong
from test_dispatch_interop import RA, assert_serving, interior, peer_url

from router.network import ControlPlane, ProtocolError, Routes, Timers

OPCODES = ["HELLO", "RA", "LSR", "LSU", "MAR", "MAU"]
FIELDS = [
    "id",
    "pv",
    "area",
    "instance",
    "seen",
    "ls_seq",
    "mobile_seq",
    "ls",
    "peers",
    "have_seq",
    "hints",
    "add",
    "del",
    "exist",
]


def _hashable(value: Any) -> bool:
    return isinstance(value, Hashable) and not isinstance(value, float)


@dataclass(frozen=True)
class Typed:
    """An AMQP symbol or ulong to be: hypothesis mistakes str and int subclasses for its own
    draws, so they are made only when the message is encoded (`amqp`)."""

    kind: str
    value: Any


def real(value: Any) -> Any:
    if isinstance(value, Typed):
        return symbol(value.value) if value.kind == "symbol" else ulong(value.value)
    if isinstance(value, list):
        return [real(v) for v in value]
    if isinstance(value, dict):
        return {real(k): real(v) for k, v in value.items()}
    return value


# Every AMQP type python-qpid-proton can put, nested.
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.builds(Typed, st.just("ulong"), st.integers(min_value=0, max_value=2**64 - 1)),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.sampled_from(["A", "R", "Q", "0", "0/A", "M0x", "Lfoo", ""]),
    st.builds(Typed, st.just("symbol"), st.text(st.characters(max_codepoint=127), max_size=12)),
    st.binary(max_size=20),
    st.uuids(),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(
            st.one_of(st.sampled_from(FIELDS), scalars.filter(_hashable)), inner, max_size=5
        ),
    ),
    max_leaves=20,
)


bodies = st.one_of(
    values,
    st.fixed_dictionaries(
        {
            "id": st.sampled_from(["A", "R", "Q"]) | values,
            "pv": st.just(1) | values,
            "area": st.just("0") | values,
        },
        optional={k: values for k in FIELDS[3:]},
    ),
)


def amqp(value: Any) -> bytes:
    data = Data()
    data.put_object(real(value))
    return bytes(data.encode())


def section(code: int, value: Any) -> bytes:
    return b"\x00\x53" + bytes((code,)) + amqp(value)


# ----- the control plane alone --------------------------------------------------------------


class Quiet:
    def send_hello(self, link: Hashable, body: dict[str, Any]) -> None: ...
    def send(self, address: str, opcode: str, body: dict[str, Any]) -> None: ...
    def topology_changed(self, routes: Routes) -> None: ...
    def mobile_changed(self, router_id: str, added: dict[str, int], removed: list[str]) -> None: ...
    def duplicate_router(self, router_id: str, detail: str) -> None: ...


@settings(max_examples=600, derandomize=True, deadline=None, database=None)
@given(st.lists(st.tuples(st.sampled_from(OPCODES), bodies), min_size=1, max_size=6))
def test_the_control_plane_rejects_any_body_with_a_protocol_error(
    messages: list[tuple[str, Any]],
) -> None:
    plane = ControlPlane("R", 1, Quiet(), Timers(), 100.0)
    plane.link_up("link", 1, 100.0)
    now = 100.0
    for opcode, body in messages:
        now += 0.5
        with contextlib.suppress(ProtocolError):
            plane.receive("link", opcode, body, now)
        plane.tick(now)
    plane.nodes()


# ----- a live router ------------------------------------------------------------------------

addresses = st.sampled_from(
    [
        "amqp:/_local/qdhello",
        "amqp:/_topo/0/all/qdrouter",
        "_topo/0/all/qdrouter.ma",
        "amqp:/_topo/0/R/qdrouter",
        "amqp:/_topo/0/R/qdrouter.ma",
        "amqp:/_topo/0/Z/qdrouter",
        "_topo/0/Q/x",
        "_topo",
        "",
        "amqp:/_topo/0//",
    ]
) | st.text(max_size=20)
ANNOTATION_KEYS = [*(f"x-opt-qd.{k}" for k in ("trace", "ingress", "to", "phase")), "x-opt-user"]
annotation_maps = st.dictionaries(
    st.one_of(
        st.builds(Typed, st.just("symbol"), st.sampled_from(ANNOTATION_KEYS)),
        st.sampled_from(["x-opt-qd.trace", 5]),
    ),
    values,
    max_size=4,
)


@st.composite
def messages(draw: Any) -> bytes:
    """A message as a neighbour might send it: well-formed sections with odd values, or a
    valid control message truncated or with bytes flipped."""
    kind = draw(st.sampled_from(["sections", "truncated", "flipped"]))
    if kind != "sections":
        annotations = draw(annotation_maps)
        raw = bytearray(
            (section(0x72, annotations) if annotations else b"")
            + control_message(draw(addresses), draw(st.sampled_from(OPCODES)), RA)
        )
        if kind == "truncated":
            return bytes(raw[: draw(st.integers(0, len(raw) - 1))])
        for _ in range(draw(st.integers(1, 4))):
            raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
        return bytes(raw)
    out = b""
    if draw(st.booleans()):
        out += section(0x72, draw(annotation_maps))
    if draw(st.booleans()):
        out += section(0x73, [draw(values), None, draw(addresses | values)])
    props = draw(
        st.dictionaries(
            st.sampled_from(["opcode", 7])
            | st.builds(Typed, st.just("symbol"), st.sampled_from(["opcode", "k"])),
            st.sampled_from(OPCODES) | values,
            max_size=3,
        )
    )
    out += section(0x74, props)
    out += section(0x77, draw(bodies))
    return out


@pytest.mark.network
def test_a_router_survives_whatever_a_neighbour_sends(tmp_path: Path, world: World) -> None:
    with interior(tmp_path) as router:
        peer = DispatchPeer(world, peer_url(router), "Q", run_protocol=False)
        world.run_until(
            lambda: (peer.control_out is not None and peer.control_out.credit > 0) or peer.closed,
            what="the peer's control link",
        )
        sent: list[bytes] = []

        @settings(
            max_examples=300,
            derandomize=True,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(st.lists(st.tuples(messages(), st.booleans()), min_size=1, max_size=4))
        def feed(batch: list[tuple[bytes, bool]]) -> None:
            for data, on_data_link in batch:
                sent.append(data)
                if on_data_link:
                    peer.send_data(data, settled=True)
                else:
                    peer.send_control(data)
            world.run_for(0.005)
            assert router.alive(), f"router died after {sent[-1].hex()}:\n{router.log()[-3000:]}"
            assert not peer.closed, f"connection closed after {sent[-1].hex()}: {peer.errors}"

        feed()
        world.run_for(0.5)
        assert not peer.closed, peer.errors
        assert "connection.failed" not in router.log()
        assert_serving(world, router)
