"""A neighbour that speaks to our router as qdrouterd 1.19 does on the wire.

No registry ships qdrouterd, so CI cannot run one. `encode` is Dispatch's composer (compose.c,
python_embedded.c) for the values a router sends, and `control_message` lays out a control
message's sections as Dispatch does, the `opcode` application-property key a symbol; links carry
single-symbol capabilities and the Open Dispatch's properties.

`DispatchPeer` is one inter-router connection from such a neighbour, the side that dials (it
attaches the control link and the ten data links). It runs the protocol with our own pure
control plane (`router/network/`), which is Dispatch's algorithm, so what differs from our
router is only the wire: exactly the part a mixed network depends on.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Hashable
from typing import Any

from proton import Delivery, Message, symbol
from proton.handlers import MessagingHandler

from router.network import ControlPlane, Routes, Timers

CONTROL = symbol("qd.router")
DATA = symbol("qd.router-data")
PRIORITIES = 10
TIMERS = Timers(
    helloIntervalSeconds=1, helloMaxAgeSeconds=3, raIntervalSeconds=5, raIntervalFluxSeconds=1
)


# ----- Dispatch's encodings ------------------------------------------------------------------


def encode(value: Any) -> bytes:
    """`value` as Dispatch composes it: ints as long (smalllong when it fits), strings str8 or
    str32, symbols sym8 or sym32, lists and maps always with 32-bit size and count."""
    if value is None:
        return b"\x40"
    if value is True:
        return b"\x41"
    if value is False:
        return b"\x42"
    if isinstance(value, int):
        if -128 <= value <= 127:
            return b"\x55" + struct.pack(">b", value)
        return b"\x81" + struct.pack(">q", value)
    if isinstance(value, symbol):
        raw = value.encode()
        return (
            b"\xa3" + bytes((len(raw),))
            if len(raw) < 256
            else b"\xb3" + struct.pack(">I", len(raw))
        ) + raw
    if isinstance(value, str):
        raw = value.encode()
        return (
            b"\xa1" + bytes((len(raw),))
            if len(raw) < 256
            else b"\xb1" + struct.pack(">I", len(raw))
        ) + raw
    if isinstance(value, dict):
        items = b"".join(encode(k) + encode(v) for k, v in value.items())
        return b"\xd1" + struct.pack(">II", len(items) + 4, 2 * len(value)) + items
    if isinstance(value, list | tuple):
        items = b"".join(encode(v) for v in value)
        return b"\xd0" + struct.pack(">II", len(items) + 4, len(value)) + items
    raise TypeError(f"Dispatch does not compose {type(value).__name__}")


def section(code: int, value: bytes) -> bytes:
    return b"\x00\x53" + bytes((code,)) + value


def control_message(
    to: str, opcode: str, body: dict[str, Any], annotations: dict[Any, Any] | None = None
) -> bytes:
    """A control message's bytes as qdrouterd sends them."""
    out = b""
    if annotations:
        out += section(0x72, encode(annotations))
    out += section(0x73, encode([None, None, to]))
    out += section(0x74, encode({symbol("opcode"): opcode}))
    out += section(0x77, encode(body))
    return out


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
    ) -> None:
        super().__init__(prefetch=0, auto_accept=False, auto_settle=False)
        self.world = world
        self.rid = rid
        self.instance = int(time.time())
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
            symbol("qd.conn-id"): 1,
            symbol("qd.annotations-version"): 1,
        }
        if cost is not None and cost > 1:
            props[symbol("qd.inter-router-cost")] = cost
        # Dispatch's container id is its router id.
        self.conn = world.container.connect(
            url, handler=self, reconnect=False, container_id=rid, properties=props
        )
        self.opened = False
        self.closed = False

    # --- links, as Dispatch's connector side makes them ---

    def on_connection_opened(self, event: Any) -> None:
        self.opened = True
        session = self.conn.session()
        session.open()
        self.control_in = self._link(session, CONTROL, "qdcontrol.in", incoming=True)
        self.control_out = self._link(session, CONTROL, "qdcontrol.out", incoming=False)
        for priority in range(PRIORITIES):
            session = self.conn.session()
            session.open()
            self._link(session, DATA, f"qddata.in.{priority}", incoming=True)
            self.data_out.append(self._link(session, DATA, f"qddata.out.{priority}", False))
        if self.plane is not None:
            self.plane.link_up(self, 1, time.monotonic())

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
        if self.plane is not None and self.opened and not self.closed:
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
        if not self.closed:
            self.conn.close()


class _Wire:
    """The control plane's Container for the peer: Dispatch's encodings, one neighbour."""

    def __init__(self, peer: DispatchPeer) -> None:
        self.peer = peer

    def send_hello(self, link: Hashable, body: dict[str, Any]) -> None:
        self.peer.send_control(control_message("amqp:/_local/qdhello", "HELLO", body))

    def send(self, address: str, opcode: str, body: dict[str, Any]) -> None:
        annotations = None
        if "/all/" in address:
            me = f"0/{self.peer.rid}"
            annotations = {symbol("x-opt-qd.ingress"): me, symbol("x-opt-qd.trace"): [me]}
        self.peer.send_control(control_message(address, opcode, body, annotations))

    def topology_changed(self, routes: Routes) -> None:
        self.peer.routes = routes

    def mobile_changed(self, router_id: str, addresses: dict[str, int]) -> None:
        self.peer.mobile[router_id] = dict(addresses)

    def duplicate_router(self, router_id: str, detail: str) -> None:
        self.peer.errors.append(f"duplicate {router_id}: {detail}")
