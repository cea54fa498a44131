"""Control messages of Qpid Dispatch's inter-router protocol, version 1, and their body maps.

Bodies are what the engine puts in (and gets out of) an amqp-value section; the opcode travels
in the `opcode` application property. Keys and value types follow Dispatch exactly (`data.py`
and `mobile_sync/mobile.c`) so that our routers and qdrouterd can share a network. Decoding is
strict about what routing depends on, because a wrong type in a sequence number or a cost would
otherwise surface much later as a wrong route; it is lenient where Dispatch is (missing `pv`
means version 0, `area` is not checked, MAU hints that do not line up with the addresses are
dropped rather than rejecting the update).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

PROTOCOL_VERSION = 1
AREA = "0"

HELLO_ADDRESS = "amqp:/_local/qdhello"
ALL_ROUTERS_ADDRESS = "amqp:/_topo/0/all/qdrouter"
# Dispatch sends differential MAUs to this spelling, without the scheme.
ALL_ROUTERS_MA_ADDRESS = "_topo/0/all/qdrouter.ma"

# Address treatments as MAU hints carry them (Dispatch's qd_address_treatment_t).
TREATMENT_MULTICAST_FLOOD = 0
TREATMENT_MULTICAST_ONCE = 1
TREATMENT_ANYCAST_CLOSEST = 2
TREATMENT_ANYCAST_BALANCED = 3
TREATMENT_LINK_BALANCED = 4
TREATMENT_UNAVAILABLE = 5
# Not on the wire: the sender's hints were missing or did not line up with its addresses, so the
# receiver decides the treatment from its own address configuration (as Dispatch does).
NO_HINT = -1


def router_address(router_id: str) -> str:
    """Where LSR and LSU for `router_id` go (unicast on the shortest path)."""
    return f"amqp:/_topo/0/{router_id}/qdrouter"


def router_ma_address(router_id: str) -> str:
    """Where MAR and absolute MAU for `router_id` go (unicast on the shortest path)."""
    return f"amqp:/_topo/0/{router_id}/qdrouter.ma"


class ProtocolError(ValueError):
    """A control message body that does not follow the protocol; the engine logs and drops it."""


# ----- field readers -------------------------------------------------------------------------


def _get(body: Mapping[Any, Any], key: str, opcode: str) -> Any:
    if key not in body:
        raise ProtocolError(f"{opcode}: mandatory field {key!r} missing")
    return body[key]


def _str(value: Any, what: str) -> str:
    # proton decodes AMQP symbols as a str subclass; normalise so ids compare and hash plainly.
    if not isinstance(value, str):
        raise ProtocolError(f"{what}: expected a string, got {type(value).__name__}")
    return str(value)


def _id(value: Any, what: str) -> str:
    rid = _str(value, what)
    if not rid:
        raise ProtocolError(f"{what}: empty router id")
    return rid


def _int(value: Any, what: str, minimum: int | None = None) -> int:
    # bool is an int subclass but never a valid protocol number; proton's ulong/int32 are ints.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(f"{what}: expected an integer, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ProtocolError(f"{what}: {value} is below {minimum}")
    return int(value)


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise ProtocolError(f"{what}: expected a list, got {type(value).__name__}")
    return list(value)


def _map(value: Any, what: str) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise ProtocolError(f"{what}: expected a map, got {type(value).__name__}")
    return value


# ----- messages ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hello:
    """One hop only; `seen` lists the routers whose HELLO we heard within helloMaxAge, so a
    neighbor finding itself there knows the link works both ways."""

    OPCODE: ClassVar[str] = "HELLO"
    id: str
    instance: int
    seen: tuple[str, ...] = ()

    def to_body(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "pv": PROTOCOL_VERSION,
            "area": AREA,
            "instance": self.instance,
            "seen": list(self.seen),
        }

    @classmethod
    def parse(cls, body: Mapping[Any, Any]) -> Hello:
        op = cls.OPCODE
        seen = tuple(_id(s, f"{op}.seen[]") for s in _list(_get(body, "seen", op), f"{op}.seen"))
        return cls(
            id=_id(_get(body, "id", op), f"{op}.id"),
            instance=_int(body.get("instance", 0), f"{op}.instance"),
            seen=seen,
        )


@dataclass(frozen=True)
class RouterAdvertisement:
    """Flooded periodically and on every change so that everyone notices stale copies of the
    sender's link state or mobile addresses, and its restarts (a new `instance`)."""

    OPCODE: ClassVar[str] = "RA"
    id: str
    instance: int
    ls_seq: int
    mobile_seq: int

    def to_body(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "pv": PROTOCOL_VERSION,
            "area": AREA,
            "instance": self.instance,
            "ls_seq": self.ls_seq,
            "mobile_seq": self.mobile_seq,
        }

    @classmethod
    def parse(cls, body: Mapping[Any, Any]) -> RouterAdvertisement:
        op = cls.OPCODE
        return cls(
            id=_id(_get(body, "id", op), f"{op}.id"),
            instance=_int(body.get("instance", 0), f"{op}.instance"),
            ls_seq=_int(_get(body, "ls_seq", op), f"{op}.ls_seq", 0),
            mobile_seq=_int(_get(body, "mobile_seq", op), f"{op}.mobile_seq", 0),
        )


@dataclass(frozen=True)
class LinkState:
    """A router's two-way neighbors and the cost of each link; `ls_seq` orders versions."""

    id: str
    ls_seq: int
    peers: Mapping[str, int] = field(default_factory=dict)

    def to_body(self) -> dict[str, Any]:
        return {"id": self.id, "area": AREA, "ls_seq": self.ls_seq, "peers": dict(self.peers)}

    @classmethod
    def parse(cls, body: Mapping[Any, Any], what: str) -> LinkState:
        peers: dict[str, int] = {}
        for peer, cost in _map(_get(body, "peers", what), f"{what}.peers").items():
            peers[_id(peer, f"{what}.peers key")] = _int(cost, f"{what}.peers[{peer!r}]", 1)
        return cls(
            id=_id(_get(body, "id", what), f"{what}.id"),
            ls_seq=_int(_get(body, "ls_seq", what), f"{what}.ls_seq", 0),
            peers=peers,
        )


@dataclass(frozen=True)
class LinkStateRequest:
    """Asks the addressed router for its LSU; the body only says who asks."""

    OPCODE: ClassVar[str] = "LSR"
    id: str

    def to_body(self) -> dict[str, Any]:
        return {"id": self.id, "pv": PROTOCOL_VERSION, "area": AREA}

    @classmethod
    def parse(cls, body: Mapping[Any, Any]) -> LinkStateRequest:
        return cls(id=_id(_get(body, "id", cls.OPCODE), f"{cls.OPCODE}.id"))


@dataclass(frozen=True)
class LinkStateUpdate:
    """The answer to an LSR: the sender's whole link state."""

    OPCODE: ClassVar[str] = "LSU"
    id: str
    instance: int
    ls: LinkState

    @property
    def ls_seq(self) -> int:
        return self.ls.ls_seq

    def to_body(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "pv": PROTOCOL_VERSION,
            "area": AREA,
            "instance": self.instance,
            "ls_seq": self.ls.ls_seq,
            "ls": self.ls.to_body(),
        }

    @classmethod
    def parse(cls, body: Mapping[Any, Any]) -> LinkStateUpdate:
        op = cls.OPCODE
        rid = _id(_get(body, "id", op), f"{op}.id")
        _int(_get(body, "ls_seq", op), f"{op}.ls_seq", 0)
        ls = LinkState.parse(_map(_get(body, "ls", op), f"{op}.ls"), f"{op}.ls")
        if ls.id != rid:
            # Stored under the sender's id: a mismatch would file one router's links under another.
            raise ProtocolError(f"{op}: ls.id {ls.id!r} is not the sender {rid!r}")
        return cls(id=rid, instance=_int(body.get("instance", 0), f"{op}.instance"), ls=ls)


@dataclass(frozen=True)
class MobileAddressRequest:
    """Asks the addressed router for its whole address set; `have_seq` is the requester's copy."""

    OPCODE: ClassVar[str] = "MAR"
    id: str
    have_seq: int

    def to_body(self) -> dict[str, Any]:
        return {"id": self.id, "pv": PROTOCOL_VERSION, "area": AREA, "have_seq": self.have_seq}

    @classmethod
    def parse(cls, body: Mapping[Any, Any]) -> MobileAddressRequest:
        op = cls.OPCODE
        return cls(
            id=_id(_get(body, "id", op), f"{op}.id"),
            have_seq=_int(_get(body, "have_seq", op), f"{op}.have_seq", 0),
        )


def _hints(body: Mapping[Any, Any], count: int, op: str) -> tuple[int, ...]:
    if "hints" not in body:
        return (NO_HINT,) * count
    hints = tuple(_int(h, f"{op}.hints[]") for h in _list(body["hints"], f"{op}.hints"))
    # Dispatch ignores hints that do not pair up with the addresses instead of the whole MAU.
    return hints if len(hints) == count else (NO_HINT,) * count


@dataclass(frozen=True)
class MobileAddressUpdate:
    """Differential MAU: what changed since `mobile_seq - 1`; `hints[i]` goes with `add[i]`."""

    OPCODE: ClassVar[str] = "MAU"
    id: str
    mobile_seq: int
    add: tuple[str, ...] = ()
    delete: tuple[str, ...] = ()
    hints: tuple[int, ...] = ()

    def to_body(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "pv": PROTOCOL_VERSION,
            "area": AREA,
            "mobile_seq": self.mobile_seq,
            "hints": list(self.hints),
            "add": list(self.add),
            "del": list(self.delete),
        }

    def added(self) -> dict[str, int]:
        return dict(zip(self.add, self.hints, strict=True))


@dataclass(frozen=True)
class MobileAddressSnapshot:
    """Absolute MAU, the answer to a MAR: the sender's whole address set as of `mobile_seq`."""

    OPCODE: ClassVar[str] = "MAU"
    id: str
    mobile_seq: int
    exist: tuple[str, ...] = ()
    hints: tuple[int, ...] = ()

    def to_body(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "pv": PROTOCOL_VERSION,
            "area": AREA,
            "mobile_seq": self.mobile_seq,
            "exist": list(self.exist),
            "hints": list(self.hints),
        }

    def addresses(self) -> dict[str, int]:
        return dict(zip(self.exist, self.hints, strict=True))


def _parse_mau(body: Mapping[Any, Any]) -> MobileAddressUpdate | MobileAddressSnapshot:
    op = "MAU"
    rid = _id(_get(body, "id", op), f"{op}.id")
    seq = _int(_get(body, "mobile_seq", op), f"{op}.mobile_seq", 0)
    if "exist" in body:
        if "add" in body or "del" in body:
            raise ProtocolError(f"{op}: 'exist' cannot be combined with 'add'/'del'")
        exist = tuple(_str(a, f"{op}.exist[]") for a in _list(body["exist"], f"{op}.exist"))
        return MobileAddressSnapshot(rid, seq, exist, _hints(body, len(exist), op))
    if "add" not in body or "del" not in body:
        raise ProtocolError(f"{op}: needs either 'exist' or both 'add' and 'del'")
    add = tuple(_str(a, f"{op}.add[]") for a in _list(body["add"], f"{op}.add"))
    delete = tuple(_str(a, f"{op}.del[]") for a in _list(body["del"], f"{op}.del"))
    return MobileAddressUpdate(rid, seq, add, delete, _hints(body, len(add), op))


Message = (
    Hello
    | RouterAdvertisement
    | LinkStateRequest
    | LinkStateUpdate
    | MobileAddressRequest
    | MobileAddressUpdate
    | MobileAddressSnapshot
)

_PARSERS: dict[str, Any] = {
    Hello.OPCODE: Hello.parse,
    RouterAdvertisement.OPCODE: RouterAdvertisement.parse,
    LinkStateRequest.OPCODE: LinkStateRequest.parse,
    LinkStateUpdate.OPCODE: LinkStateUpdate.parse,
    MobileAddressRequest.OPCODE: MobileAddressRequest.parse,
    "MAU": _parse_mau,
}


def from_body(opcode: str, body: Any) -> Message | None:
    """Decodes one control message; None when it speaks a newer protocol version than ours
    (Dispatch ignores those, so a network can be upgraded one router at a time).

    Raises ProtocolError for an unknown opcode or a body that is not a well-formed v1 body.
    """
    parser = _PARSERS.get(opcode)
    if parser is None:
        raise ProtocolError(f"unknown opcode {opcode!r}")
    body = _map(body, f"{opcode} body")
    if _int(body.get("pv", 0), f"{opcode}.pv") > PROTOCOL_VERSION:
        return None
    message: Message = parser(body)
    return message


def to_body(message: Message) -> dict[str, Any]:
    """The amqp-value body map for `message` (symmetry with from_body for callers and tests)."""
    return message.to_body()
