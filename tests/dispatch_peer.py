"""A neighbour that speaks to our router as qdrouterd 1.19 does on the wire.

No registry ships qdrouterd, so CI cannot run one. `encode` is Dispatch's composer (compose.c,
python_embedded.c) for the values a router sends, and `control_message` lays out a control
message's sections as Dispatch does, the `opcode` application-property key a symbol; links carry
single-symbol capabilities and the Open Dispatch's properties.

`DispatchPeer` is one inter-router connection from such a neighbour: the side that dials (it
attaches the control link and the ten data links), or with `listen` the side our router dials
(it takes the links our router attaches, recognised by capability). It runs the protocol with
our own pure control plane (`router/network/`), which is Dispatch's algorithm, so what differs
from our router is only the wire: exactly the part a mixed network depends on.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Hashable
from typing import Any

from proton import Delivery, Message, int32, symbol
from proton.handlers import MessagingHandler

from router.network import ControlPlane, Routes, Timers

CONTROL = symbol("qd.router")
DATA = symbol("qd.router-data")
PRIORITIES = 10
# What Dispatch offers and desires in its Open, both sides.
CAPABILITIES = [symbol("ANONYMOUS-RELAY"), symbol("qd.streaming-links")]
TIMERS = Timers(
    helloIntervalSeconds=1, helloMaxAgeSeconds=3, raIntervalSeconds=5, raIntervalFluxSeconds=1
)


# ----- Dispatch's encodings ------------------------------------------------------------------
# Two composers write Dispatch's control messages: its Python router (HELLO, RA, LSR, LSU) and
# the C mobile-address module (MAU, MAR). They differ in key types and integer widths; both are
# reproduced byte for byte (checked against the captures in tests/test_dispatch_interop.py).


def _sized(small: int, large: int, payload: bytes, count: int | None = None) -> bytes:
    """A variable-width or compound value: 8-bit size (and count) when it fits, else 32-bit."""
    if count is None:
        if len(payload) < 256:
            return bytes((small, len(payload))) + payload
        return bytes((large,)) + struct.pack(">I", len(payload)) + payload
    return bytes((large,)) + struct.pack(">II", len(payload) + 4, count) + payload


def _string(value: str, code: tuple[int, int] = (0xA1, 0xB1)) -> bytes:
    return _sized(*code, value.encode())


def _symbol(value: str) -> bytes:
    return _string(value, (0xA3, 0xB3))


def _int(value: int) -> bytes:
    """A Python int as Dispatch's Python composer writes it: smallint, int, then long."""
    if -128 <= value <= 127:
        return b"\x54" + struct.pack(">b", value)
    if -(2**31) <= value < 2**31:
        return b"\x71" + struct.pack(">i", value)
    return b"\x81" + struct.pack(">q", value)


def _long(value: int) -> bytes:
    """qd_compose_insert_long: smalllong or long."""
    if -128 <= value <= 127:
        return b"\x55" + struct.pack(">b", value)
    return b"\x81" + struct.pack(">q", value)


def encode(value: Any) -> bytes:
    """A value as Dispatch's Python composer writes it: str8/str32 strings (keys too), ints as
    `_int`, lists list0 when empty else list32, maps map32."""
    if value is None:
        return b"\x40"
    if value is True:
        return b"\x41"
    if value is False:
        return b"\x42"
    if isinstance(value, int):
        return _int(value)
    if isinstance(value, symbol):
        return _symbol(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, dict):
        items = b"".join(encode(k) + encode(v) for k, v in value.items())
        return _sized(0xC1, 0xD1, items, 2 * len(value))
    if isinstance(value, list | tuple):
        if not value:
            return b"\x45"
        return _sized(0xC0, 0xD0, b"".join(encode(v) for v in value), len(value))
    raise TypeError(f"Dispatch does not compose {type(value).__name__}")


def _mobile_body(body: dict[str, Any]) -> bytes:
    """A MAU or MAR body as mobile.c composes it: symbol keys, smalllong/long numbers, hints
    as ints, every list list32 even when empty."""
    items = b""
    for key, value in body.items():
        if isinstance(value, list):
            each = _int if key == "hints" else _string
            encoded = (
                b"\xd0"
                + struct.pack(">II", 4 + sum(len(each(v)) for v in value), len(value))
                + b"".join(each(v) for v in value)
            )
        elif isinstance(value, int):
            encoded = _long(value)
        else:
            encoded = _string(value)
        items += _symbol(key) + encoded
    return b"\xd1" + struct.pack(">II", len(items) + 4, 2 * len(body)) + items


def _annotations(ingress: str, trace: list[str]) -> bytes:
    """x-opt-qd.ingress and x-opt-qd.trace as Dispatch's router core adds them."""
    hops = b"".join(_string(hop) for hop in trace)
    trace_list = bytes((0xC0, len(hops) + 1, len(trace))) + hops
    items = _symbol("x-opt-qd.ingress") + _string(ingress) + _symbol("x-opt-qd.trace") + trace_list
    return section(0x72, bytes((0xC1, len(items) + 1, 4)) + items)


def section(code: int, value: bytes) -> bytes:
    return b"\x00\x53" + bytes((code,)) + value


MOBILE = ("MAU", "MAR")


def control_message(
    to: str,
    opcode: str,
    body: dict[str, Any],
    annotations: dict[Any, Any] | None = None,
    *,
    ingress: str | None = None,
    trace: list[str] | None = None,
) -> bytes:
    """A control message as qdrouterd 1.19 sends it: header, Dispatch's ingress and trace
    annotations (every control message has them, HELLO too), properties with `to`, the opcode,
    the body. `annotations` replaces Dispatch's with any map (for hostile peers)."""
    out = section(0x70, b"\xd0" + struct.pack(">II", 5, 1) + b"\x42")
    if annotations is not None:
        out += section(0x72, encode(annotations))
    elif ingress is not None:
        out += _annotations(ingress, trace or [ingress])
    if opcode in MOBILE:
        out += section(0x73, encode([None, None, to]))
        out += section(0x74, encode({symbol("opcode"): opcode}))
        out += section(0x77, _mobile_body(body))
    else:
        out += section(0x73, encode([None, None, to, None, None, None]))
        out += section(0x74, encode({"opcode": opcode}))
        out += section(0x77, encode(body))
    return out


def data_message(client: bytes, ingress: str, trace: list[str]) -> bytes:
    """A client's message as Dispatch forwards it to the next router: its header (if any) as
    it came, Dispatch's ingress and trace annotations, every other section as it came."""
    header = b""
    if client.startswith(b"\x00\x53\x70"):
        code = client[3]
        size = {0x45: 1, 0xC0: 2 + client[4], 0xD0: 5 + int.from_bytes(client[4:8])}[code]
        header, client = client[: 3 + size], client[3 + size :]
    return header + _annotations(ingress, trace) + client


# ----- the neighbour ---------------------------------------------------------------------------


class DispatchPeer(MessagingHandler):
    """One inter-router connection from a Dispatch-speaking neighbour with router id `rid`.

    `run_protocol` (default) answers HELLOs and runs link state and mobile sync; without it the
    peer only sends what the test gives it (`send_control`), as a fuzzer or a hostile peer.
    `received` keeps every control message that arrived, decoded; `data` every message that
    arrived on a data link, with its delivery.
    """

    def __init__(
        self,
        world: Any,
        url: str,
        rid: str,
        *,
        cost: int | None = None,
        run_protocol: bool = True,
        addresses: dict[str, int] | None = None,
        listen: bool = False,
    ) -> None:
        super().__init__(prefetch=0, auto_accept=False, auto_settle=False)
        self.world = world
        self.rid = rid
        self.instance = int(time.time())
        self.cost = cost or 1
        self.received: list[tuple[str, Any, Any]] = []
        self.data: list[tuple[Message, Delivery]] = []
        self.control_in: Any = None
        self.control_out: Any = None
        self.data_out: list[Any] = []
        self.errors: list[str] = []
        self.routes = Routes.empty()
        self.mobile: dict[str, dict[str, int]] = {}
        self.sent = 0
        self.plane = (
            ControlPlane(rid, self.instance, _Wire(self), TIMERS, time.monotonic())
            if run_protocol
            else None
        )
        for key, hint in (addresses or {}).items():
            assert self.plane is not None
            self.plane.add_local(key, hint)
        props: dict[symbol, Any] = {
            symbol("product"): "qpid-dispatch-router",
            symbol("version"): "1.19.0",
            symbol("qd.conn-id"): int32(1),
            symbol("qd.annotations-version"): int32(1),
        }
        if cost is not None and cost > 1 and not listen:
            props[symbol("qd.inter-router-cost")] = int32(cost)  # the dialling side's alone
        self.props = props
        self.listening = listen
        if listen:
            # Our router dials: the connection is the one the acceptor takes.
            url = url.removeprefix("amqp://")
            host, port = url.rsplit(":", 1)
            self.acceptor = world.container.acceptor(host, int(port), handler=self)
            self.conn: Any = None
        else:
            # Dispatch's container id is its router id.
            self.conn = world.container.connect(
                url,
                handler=self,
                reconnect=False,
                container_id=rid,
                properties=props,
                offered_capabilities=CAPABILITIES,
                desired_capabilities=CAPABILITIES,
            )
        self.opened = False
        self.closed = False
        self.up = False

    # --- links, as Dispatch's connector side makes them ---

    def on_connection_opening(self, event: Any) -> None:
        """Listening: our router dialled; answer as Dispatch's listener side does."""
        self.conn = event.connection
        self.conn.container = self.rid
        self.conn.properties = self.props
        self.conn.offered_capabilities = self.conn.desired_capabilities = CAPABILITIES

    def on_connection_opened(self, event: Any) -> None:
        self.opened = True
        if self.listening:
            remote = self.conn.remote_properties or {}
            self.cost = max(self.cost, int(remote.get(symbol("qd.inter-router-cost"), 1)))
        else:
            session = self.conn.session()
            session.open()
            self.control_in = self._link(session, CONTROL, "qdcontrol.in", incoming=True)
            self.control_out = self._link(session, CONTROL, "qdcontrol.out", incoming=False)
            for priority in range(PRIORITIES):
                session = self.conn.session()
                session.open()
                self._link(session, DATA, f"qddata.in.{priority}", incoming=True)
                self.data_out.append(self._link(session, DATA, f"qddata.out.{priority}", False))
        self._maybe_up()

    def _maybe_up(self) -> None:
        """The protocol starts once both control links are there (the dialler's own cost; the
        listener takes the larger of both ends')."""
        if self.plane is not None and not self.up and self.control_in and self.control_out:
            self.up = True
            self.plane.link_up(self, self.cost, time.monotonic())

    def on_link_opening(self, event: Any) -> None:
        """Listening: the dialler attaches every link; recognise each by its capability."""
        link = event.link
        capability = _first(link.remote_target.capabilities) or _first(
            link.remote_source.capabilities
        )
        for terminus in (link.source, link.target):
            terminus.capabilities.put_symbol(capability)
        if link.is_receiver:
            link.flow(250)
            if capability == CONTROL:
                self.control_in = link
        elif capability == CONTROL:
            self.control_out = link
        else:
            self.data_out.append(link)
        self._maybe_up()

    def _link(self, session: Any, capability: symbol, name: str, incoming: bool) -> Any:
        link = (
            session.receiver(f"{name}.{self.rid}")
            if incoming
            else session.sender(f"{name}.{self.rid}")
        )
        for terminus in (link.source, link.target):
            terminus.capabilities.put_symbol(capability)
        link.open()
        if incoming:
            link.flow(250)
        return link

    def on_connection_remote_close(self, event: Any) -> None:
        cond = event.connection.remote_condition
        if cond is not None:
            self.errors.append(f"{cond.name}: {cond.description}")
        self.closed = True
        if self.plane is not None:
            self.plane.link_down(self, time.monotonic())

    def on_disconnected(self, event: Any) -> None:
        self.closed = True

    def on_link_remote_close(self, event: Any) -> None:
        cond = event.link.remote_condition
        if cond is not None:
            self.errors.append(f"{cond.name}: {cond.description}")

    # --- messages ---

    def on_message(self, event: Any) -> None:
        link, delivery, msg = event.link, event.delivery, event.message
        if link.name == self.control_in.name:  # proton wraps the same link anew per event
            props = msg.properties or {}
            self.received.append((msg.address or "", props.get("opcode"), msg.body))
            delivery.settle()
            link.flow(1)
            if self.plane is not None and isinstance(msg.body, dict):
                self.plane.receive(self, props.get("opcode"), msg.body, time.monotonic())
        else:
            self.data.append((msg, delivery))
            link.flow(1)

    def send_control(self, data: bytes) -> None:
        """Raw bytes, pre-settled, on the control link (as Dispatch sends control messages)."""
        link = self.control_out
        self.sent += 1
        delivery = link.delivery(str(self.sent).encode())
        link.send(data)
        link.advance()
        delivery.settle()

    def send_data(self, data: bytes, priority: int = 4, settled: bool = False) -> Delivery:
        link = self.data_out[priority]
        self.sent += 1
        delivery = link.delivery(str(self.sent).encode())
        link.send(data)
        link.advance()
        if settled:
            delivery.settle()
        return delivery

    def tick(self) -> None:
        if self.plane is not None and self.up and not self.closed:
            self.plane.tick(time.monotonic())

    def run_for(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.world.step()
            self.tick()

    def run_until(self, condition: Any, timeout: float = 10.0, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            self.world.step()
            self.tick()

    def close(self) -> None:
        if self.listening:
            self.acceptor.close()
        if self.conn is not None and not self.closed:
            self.conn.close()


def _first(data: Any) -> Any:
    data.rewind()
    return data.get_object() if data.next() else None


class _Wire:
    """The control plane's Container for the peer: Dispatch's encodings, one neighbour."""

    def __init__(self, peer: DispatchPeer) -> None:
        self.peer = peer

    def send_hello(self, link: Hashable, body: dict[str, Any]) -> None:
        self.send("amqp:/_local/qdhello", "HELLO", body)

    def send(self, address: str, opcode: str, body: dict[str, Any]) -> None:
        me = f"0/{self.peer.rid}"
        self.peer.send_control(control_message(address, opcode, body, ingress=me))

    def topology_changed(self, routes: Routes) -> None:
        self.peer.routes = routes

    def mobile_changed(self, router_id: str, added: dict[str, int], removed: list[str]) -> None:
        held = self.peer.mobile.setdefault(router_id, {})
        held.update(added)
        for key in removed:
            held.pop(key, None)

    def duplicate_router(self, router_id: str, detail: str) -> None:
        self.peer.errors.append(f"duplicate {router_id}: {detail}")
