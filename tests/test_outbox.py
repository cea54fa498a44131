"""What an outbox labels its transfers with, and how a host takes each of them once
(router/nodes/outbox.py), without sockets: the store is real, the links are not."""

from __future__ import annotations

from pathlib import Path

import pytest
from proton import Message, symbol, ulong

from router.nodes.facts import facts_of
from router.nodes.message import with_delivery_annotation, without_delivery_annotation
from router.nodes.outbox import LABEL, Inbox, Outbox
from router.store import Store


def encoded(body: str, **kwargs: object) -> bytes:
    return bytes(Message(body=body, durable=True, **kwargs).encode())


def labelled(data: bytes, mid: int, floor: int) -> bytes:
    return with_delivery_annotation(data, LABEL, [ulong(mid), ulong(floor)])


@pytest.mark.parametrize(
    "data",
    [
        encoded("plain"),
        encoded("x" * 5000, priority=7, annotations={symbol("m"): "kept"}),
        encoded("annotated", instructions={symbol("x-opt-hop"): 1}),
    ],
    ids=["plain", "header-and-annotations", "delivery-annotations"],
)
def test_a_label_comes_off_as_it_went_on(data: bytes) -> None:
    on = labelled(data, 7, 3)
    msg = Message()
    msg.decode(on)
    original = Message()
    original.decode(data)
    assert msg.instructions[symbol(LABEL)] == [7, 3]
    assert (msg.body, msg.priority, msg.annotations) == (
        original.body,
        original.priority,
        original.annotations,
    )
    assert without_delivery_annotation(on, LABEL) == ([7, 3], data)
    assert without_delivery_annotation(data, LABEL) == (None, data)


def test_an_outboxs_floor_is_the_lowest_id_it_still_holds(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    box = Outbox("dead.jobs", store, lambda e: facts_of(store.body(e)), "t1")
    for i in range(3):
        box.put(encoded(f"m{i}"), 4, None, True)
    first, second, third = box.messages.values()
    box.accepted(first)
    value, _ = without_delivery_annotation(box.labelled(b"", third.entry), LABEL)
    assert value == [third.entry.id, second.entry.id]
    store.close()


def test_a_host_takes_each_id_once_across_its_restart(tmp_path: Path) -> None:
    """Each id taken is marked (in the store, with the message); one taken before is seen
    again after a restart; ids below the floor are let go, as are all of an old token's."""
    store = Store.open(tmp_path)
    inbox = Inbox(store, "B", "dead.jobs", "t1")
    for mid in (5, 6, 7):
        got, data = inbox.label(labelled(encoded(f"m{mid}"), mid, 5))
        assert (got, data) == (mid, encoded(f"m{mid}"))
        assert not inbox.seen(mid)
        with store.atomic():
            inbox.mark(mid)
    store.close()

    store = Store.open(tmp_path)
    again = Inbox(store, "B", "dead.jobs", "t1")
    again.restore(store.recovered()[again.name])
    assert again.label(labelled(encoded("m6"), 6, 6))[0] == 6
    assert again.seen(6)
    assert sorted(again.markers) == [6, 7]  # 5 is below the floor: never sent again
    again.renew("t2")  # a new outbox: its ids are not the old one's
    assert not again.seen(7)
    assert again.name not in store.recovered()
    store.close()


def test_a_transfer_without_a_label_is_refused_in_one_line(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    inbox = Inbox(store, "B", "dead.jobs", "t1")
    with pytest.raises(ValueError, match="no valid") as err:
        inbox.label(encoded("unlabelled"))
    assert "\n" not in str(err.value)
    store.close()
