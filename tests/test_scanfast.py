"""router/datapath/scanfast.c finds exactly the sections `sections.walk_sections` finds, or leaves
the message to it: never other offsets, and never a pass for a message the walk rejects.

Checked on messages as clients encode them (each must take the fast path) and on every
truncation, thousands of byte flips and random garbage derived from them.
"""

from __future__ import annotations

import random

import pytest
from proton import Message, symbol, ulong

from router.datapath import scanfast
from router.datapath.sections import MessageFormatError, Scan, scan, walk_sections


def offsets(s: Scan) -> tuple[int, int, int, int, int]:
    return (s.ma_start, s.ma_end, s.props_start, s.props_end, s.body_start)


def encoded(**fields: object) -> bytes:
    return bytes(Message(**fields).encode())  # type: ignore[arg-type]


SENT = [
    encoded(address="a", body=b"x" * 100),
    encoded(address="a", body="text", durable=True, priority=7, ttl=5.0),
    encoded(
        address="bench",
        body=b"x" * 100,
        properties={"n": 1, "k": "v"},
        annotations={symbol("x-opt-qd.ingress"): "0/A", symbol("x-opt-qd.trace"): ["0/A", "0/B"]},
    ),
    encoded(body=[1, 2, 3], subject="s", correlation_id=ulong(7), reply_to="r"),
    encoded(body={"map": [1.5, None, True]}, instructions={symbol("x-opt-d"): 1}),
    encoded(body=b"y" * 70_000),  # a data section with a 4-byte size
    encoded(body=None),
    encoded(),
]


def test_the_compiled_module_is_loaded() -> None:
    assert scanfast.__file__ is not None and scanfast.__file__.endswith(".so")


@pytest.mark.parametrize("data", SENT, ids=range(len(SENT)))
def test_messages_as_clients_send_them_take_the_fast_path(data: bytes) -> None:
    found = scanfast.section_offsets(data)
    assert found is not None
    assert found == offsets(walk_sections(data))
    assert offsets(scan(data)) == found
    assert scanfast.section_offsets(bytearray(data)) == found


def agrees(data: bytes) -> bool:
    """The fast path's answer is None or the walk's; None whenever the walk rejects the bytes.
    Returns whether the fast path answered."""
    found = scanfast.section_offsets(data)
    try:
        walked = offsets(walk_sections(data))
    except MessageFormatError:
        assert found is None, data.hex()
        with pytest.raises(MessageFormatError):
            scan(data)
        return False
    assert found is None or found == walked, data.hex()
    assert offsets(scan(data)) == walked
    return found is not None


def test_every_truncation() -> None:
    for data in SENT[:5]:
        for end in range(len(data)):
            agrees(data[:end])


def test_byte_flips_and_garbage() -> None:
    rng = random.Random(20261127)
    answered = 0
    for _ in range(20_000):
        data = bytearray(rng.choice(SENT[:5]))
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        answered += agrees(bytes(data))
    for _ in range(5_000):
        agrees(bytes(rng.randrange(256) for _ in range(rng.randint(0, 40))))
    # Flips in bodies leave most messages valid: the fast path must have taken those.
    assert answered > 5_000


def test_unusual_descriptors_are_left_to_the_walk() -> None:
    # A data section described by a ulong (0x80) rather than a small ulong: legal, rare.
    data = b"\x00\x80" + (0x75).to_bytes(8, "big") + b"\xa0\x02hi"
    assert scanfast.section_offsets(data) is None
    # no annotations: they would go before the body, where it starts
    assert offsets(scan(data)) == (0, 0, -1, -1, 0)
