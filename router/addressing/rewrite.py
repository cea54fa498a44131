"""The address on a routed link's returning attach, put back in the client's terms.

A routed link may reach its container under another address than the client asked for: a
link route's `delExternalPrefix`/`addExternalPrefix`, `(container)/node` that the container
sees as `node`, `()/node` that the first router resolves to `(container)/node`, a hosted
queue that travels to its host as `(host)/queue`. The container answers in its own terms, and
a client that checks its terminus (Proton's blocking API, rhea) refuses a link whose answer
names another node than the one it asked for. So each router that changed the address on the
way out changes it back on the way in, as Dispatch does for link routes on the second attach
(router_core/connections.c): the prefix it added comes off, the prefix it took off goes back on.

One difference from Dispatch: it puts `delExternalPrefix` back even where the address did not
start with it (so was not taken off), naming a node the client never asked for. Here a prefix
goes back only if it came off. An answer that repeats what was sent is given the client's
address exactly, whatever its spelling (`amqp:(c)/node`, a trailing `/`).
"""

from __future__ import annotations

from dataclasses import dataclass


def _starts(address: str, prefix: str) -> bool:
    """Whether `prefix` comes off `address`: as in Dispatch's qdr_terminus_strip_address_prefix,
    only from a longer address, so that something is left."""
    return len(address) > len(prefix) and address.startswith(prefix)


@dataclass(frozen=True, slots=True)
class Rewrite:
    """How one router maps the far end's answer back: `sent` is the address it attached there,
    `asked` the one its own peer attached; `strip` and `insert` the prefixes that differ."""

    sent: str
    asked: str
    strip: str
    insert: str

    def back(self, answered: str) -> str:
        if answered == self.sent:
            return self.asked
        if self.strip and _starts(answered, self.strip):
            answered = answered[len(self.strip) :]
        return self.insert + answered


def external(address: str, add: str | None, delete: str | None) -> tuple[str, Rewrite | None]:
    """A link route's address toward its container (`delete` taken off where it leads,
    `add` put on) and the way back; None if the address is unchanged."""
    deleted = delete if delete and _starts(address, delete) else ""
    added = add or ""
    if not deleted and not added:
        return address, None
    there = added + address[len(deleted) :]
    return there, Rewrite(there, address, added, deleted)


def between(asked: str, sent: str, node: str) -> Rewrite | None:
    """The way back for a link to `node` that was asked as `asked` (a container form, or a
    hosted node's name) and attached onward as `sent` (`node` itself, or `(container)/node`);
    None if the address went on unchanged."""
    if asked == sent:
        return None
    return Rewrite(sent, asked, _before(sent, node), _before(asked, node))


def _before(address: str, node: str) -> str:
    """What precedes `node` in `address`: `(c)/`, `amqp:(c)/`, or nothing."""
    at = address.rfind(node)
    return address[:at] if at > 0 else ""
