"""The Proton calls every message makes, a few at a time.

Each function here is a sequence of `lib.pn_*` calls the data path always makes together. This
source says what each does and runs when the router runs its plain source (`ROUTERNET_PURE=1`);
the build compiles router/datapath/pnfast.c, the same functions in C calling the same Proton, which
is what the router loads otherwise. Through cffi every Proton call costs ~85 ns of overhead (the
GIL released and retaken, errno saved, arguments converted); a message through one router made
~27 of them, a third of the router's CPU. In C one of these costs ~25 ns, whatever it does.
"""

from __future__ import annotations

from typing import Any, Final

from router.transport.pn import ffi, lib

# What `take` answers instead of a message.
NOT_CURRENT: Final = 0  # the delivery is not the link's current one: an earlier one changed
UNREADABLE: Final = 1  # nothing to read yet
SLOW: Final = 2  # aborted, or in several frames: the caller's general path handles it

_TERMINAL: Final = (lib.PN_ACCEPTED, lib.PN_REJECTED, lib.PN_RELEASED, lib.PN_MODIFIED)
_SCRATCH: Final = [ffi.new("char[]", 1 << 16)]
_TAG: Final = ffi.new("char[8]")


def next_event(collector: Any, pop: bool) -> tuple[int, Any, Any] | None:
    """Pops the event handled last (if `pop`), then peeks at the next: None when there is none;
    (PN_DELIVERY, its link, its delivery) for a delivery event; else (its type, the event, None).
    The event stays in the collector, keeping what it refers to alive, until the next call."""
    if pop:
        lib.pn_collector_pop(collector)
    ev = lib.pn_collector_peek(collector)
    if ev == ffi.NULL:
        return None
    kind = lib.pn_event_type(ev)
    if kind == lib.PN_DELIVERY:
        return kind, lib.pn_event_link(ev), lib.pn_event_delivery(ev)
    return kind, ev, None


def take(link: Any, d: Any) -> bytes | int:
    """The whole message of `link`'s current delivery `d`, read, and the link advanced past it;
    or NOT_CURRENT, UNREADABLE or SLOW (aborted, or arriving in several frames), nothing done."""
    if lib.pn_link_current(link) != d:
        return NOT_CURRENT
    if lib.pn_delivery_aborted(d):
        return SLOW
    if not lib.pn_delivery_readable(d):
        return UNREADABLE
    if lib.pn_delivery_partial(d):
        return SLOW
    pending = lib.pn_delivery_pending(d)
    if pending > len(_SCRATCH[0]):
        _SCRATCH[0] = ffi.new("char[]", pending)
    got = lib.pn_link_recv(link, _SCRATCH[0], pending)
    data = ffi.unpack(_SCRATCH[0], max(got, 0))  # an empty transfer reads as PN_EOS (-1)
    lib.pn_link_advance(link)
    return data


def settled(d: Any) -> bool:
    return bool(lib.pn_delivery_settled(d))


def credit(link: Any) -> int:
    return int(lib.pn_link_credit(link))


def send(link: Any, tag: int, data: bytes | bytearray, advance: bool, settle: bool) -> Any:
    """A new delivery on `link`, tagged with `tag`'s 8 little-endian bytes, holding `data`;
    the link advanced past it (a whole message) and the delivery settled (pre-settled) if asked."""
    ffi.memmove(_TAG, tag.to_bytes(8, "little"), 8)
    d = lib.pn_delivery(link, (8, _TAG))
    lib.pn_link_send(link, ffi.from_buffer(data), len(data))
    if advance:
        lib.pn_link_advance(link)
    if settle:
        lib.pn_delivery_settle(d)
    return d


def outcome(d: Any) -> int:
    """The terminal outcome the peer gave `d`; accepted if it settled without one (the default
    outcome); 0 while it has none."""
    state = int(lib.pn_delivery_remote_state(d))
    if state in _TERMINAL:
        return state
    return int(lib.PN_ACCEPTED) if lib.pn_delivery_settled(d) else 0


def settle(d: Any, state: int) -> None:
    """Settles `d`, with `state` as its outcome unless 0."""
    if state:
        lib.pn_delivery_update(d, state)
    lib.pn_delivery_settle(d)
