"""The inter-router control plane (Qpid Dispatch protocol v1), free of I/O and clocks.

The engine implements `Container`, builds one `ControlPlane`, and feeds it link events,
control messages and the time; see `control.ControlPlane` for the call order.
"""

from router.network.contract import Container, Routes, Timers
from router.network.control import ControlPlane
from router.network.messages import (
    ALL_ROUTERS_ADDRESS,
    ALL_ROUTERS_MA_ADDRESS,
    HELLO_ADDRESS,
    NO_HINT,
    PROTOCOL_VERSION,
    ProtocolError,
    from_body,
    router_address,
    router_ma_address,
)

__all__ = [
    "ALL_ROUTERS_ADDRESS",
    "ALL_ROUTERS_MA_ADDRESS",
    "HELLO_ADDRESS",
    "NO_HINT",
    "PROTOCOL_VERSION",
    "Container",
    "ControlPlane",
    "ProtocolError",
    "Routes",
    "Timers",
    "from_body",
    "router_address",
    "router_ma_address",
]
