"""The address on a routed link's returning attach (router/addressing/rewrite.py): what the client
asked for, whatever form the container or the next router answered in."""

from __future__ import annotations

import pytest

from router.addressing.rewrite import between


@pytest.mark.parametrize(
    ("asked", "sent", "node", "answered", "back"),
    [
        # `(c)/node` attached to the container itself as `node`.
        ("(london-branch-34)/atm", "atm", "atm", "atm", "(london-branch-34)/atm"),
        ("amqp:(c)/a/b", "a/b", "a/b", "a/b", "amqp:(c)/a/b"),
        ("amqps://gw.example.com/(c)/atm", "atm", "atm", "atm", "amqps://gw.example.com/(c)/atm"),
        # A trailing separator, which routing drops: the client's spelling comes back.
        ("(c)/atm/", "atm", "atm", "atm", "(c)/atm/"),
        # `()/node` resolved by a gateway rule, on to the next router.
        ("()/atm", "(c)/atm", "atm", "(c)/atm", "()/atm"),
        # A hosted queue on its way to its host, the host answering in either form.
        ("orders", "(R2)/orders", "orders", "(R2)/orders", "orders"),
        ("orders", "(R2)/orders", "orders", "orders", "orders"),
        ("(R1)/orders", "(R2)/orders", "orders", "(R2)/orders", "(R1)/orders"),
        # A container that names the node otherwise: still under the client's container part.
        ("(c)/atm", "atm", "atm", "atm-7", "(c)/atm-7"),
        ("()/atm", "(c)/atm", "atm", "(c)/atm-7", "()/atm-7"),
    ],
)
def test_the_answer_comes_back_as_asked(
    asked: str, sent: str, node: str, answered: str, back: str
) -> None:
    rewrite = between(asked, sent, node)
    assert rewrite is not None
    assert rewrite.back(answered) == back


def test_an_address_passed_on_unchanged_needs_no_rewrite() -> None:
    assert between("(c)/atm", "(c)/atm", "atm") is None
