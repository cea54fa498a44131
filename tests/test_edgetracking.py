"""The edge's side of address tracking (router/edges/tracking.py) without sockets: when its
senders may get credit, what the interior's updates change, and the fallback when the interior
refuses the protocol (tests/test_edge.py runs it between real routers)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from proton import Message

from router.edges.tracking import Tracking


class FakeForwarder:
    def __init__(self) -> None:
        self.local_handlers: dict[str, Any] = {}
        self.entries: dict[str, Any] = {}
        self.reachable_again: list[str] = []
        self.rejected: list[str] = []

    def became_reachable(self, entry: Any) -> None:
        self.reachable_again.append(entry.key)

    def reachable(self, entry: Any) -> bool:
        return True

    def reject_incoming(self, fwd: Any, error: str, why: str) -> None:
        self.rejected.append(error)


def tracking_with(*keys: str) -> tuple[Tracking, FakeForwarder, dict[str, Any]]:
    """A Tracking whose interior tracks `keys` (a sender link each), none destined yet."""
    fwd = FakeForwarder()
    router = SimpleNamespace(id="E", fwd=fwd)
    tracking = Tracking(router)  # type: ignore[arg-type]
    receiver = SimpleNamespace(name="edge.tracking.E", address="_$qd.edge_addr_tracking")
    tracking.receiver = receiver  # type: ignore[assignment]
    entries = {}
    for key in keys:
        entries[key] = fwd.entries[key] = SimpleNamespace(key=key, senders=[object()])
        sender = SimpleNamespace(name=f"edge.sends.E.{key[2:]}", address=key[2:])
        tracking.senders[key] = sender  # type: ignore[assignment]
    return tracking, fwd, entries


def update(tracking: Tracking, body: Any) -> None:
    data = bytes(Message(body=body).encode())
    tracking.on_update(SimpleNamespace(data=data), None, tracking.receiver)  # type: ignore[arg-type]


def test_credit_follows_what_the_interior_says() -> None:
    tracking, fwd, entries = tracking_with("M0orders")
    untracked = SimpleNamespace(key="M0telemetry", senders=[])
    assert tracking.reachable(untracked)  # nobody sends to it here: the interior decides
    assert not tracking.reachable(entries["M0orders"])
    update(tracking, ["M0orders", True])
    assert tracking.reachable(entries["M0orders"]) and fwd.reachable_again == ["M0orders"]
    update(tracking, ["M0orders", False])
    assert not tracking.reachable(entries["M0orders"])
    assert fwd.reachable_again == ["M0orders"]  # losing a destination takes no credit back


def test_a_garbled_update_changes_nothing() -> None:
    tracking, fwd, entries = tracking_with("M0orders")
    update(tracking, ["M0orders"])
    update(tracking, {"M0orders": True})
    update(tracking, ["M0orders", "yes"])
    assert not tracking.reachable(entries["M0orders"]) and fwd.reachable_again == []


def test_updates_from_anything_but_the_tracking_receiver_are_refused() -> None:
    tracking, fwd, entries = tracking_with("M0orders")
    data = bytes(Message(body=["M0orders", True]).encode())
    tracking.on_update(SimpleNamespace(data=data), None, None)  # type: ignore[arg-type]
    assert fwd.rejected == ["amqp:unauthorized-access"]
    assert not tracking.reachable(entries["M0orders"])


def test_an_interior_that_refuses_tracking_decides_as_before() -> None:
    tracking, fwd, entries = tracking_with("M0orders", "M0bills")
    sender = tracking.senders["M0bills"]
    assert tracking.link_detached(sender)  # the interior refused this address's link
    assert tracking.reachable(entries["M0bills"]) and not tracking.reachable(entries["M0orders"])
    assert tracking.link_detached(tracking.receiver)  # type: ignore[arg-type]
    assert tracking.reachable(entries["M0orders"])
    assert set(fwd.reachable_again) == {"M0orders", "M0bills"}
    tracking.forget()  # a new uplink asks again
    assert not tracking.refused and not tracking.untracked
    other = SimpleNamespace(name="other", address="x")
    assert not tracking.link_detached(other)  # type: ignore[arg-type]
