"""Nodes a client asks for (a dynamic terminus): their lifetime policy and who may consume.

A receiver attaching with `dynamic: true` and a `lifetime-policy` in its dynamic node
properties (or the `temporary-queue` / `temporary-topic` capability JMS clients send) gets a
node made for it, on the router it attached to when that router has a store. Its name is
random and hard to guess (seed 002 §3.1), in the router's own address space
(`_topo/0/<router>/temp.<random>`) so that replies sent to it from anywhere in the network
reach it. The node is exclusive to the connection that made it (seed 002 §2.5): other
connections may send to it, not consume from it.

AMQP's lifetime policies (part 3, §3.5.10) decide when it goes:
- delete-on-close: when the link that made it closes;
- delete-on-no-links: when no link is attached to it any more;
- delete-on-no-messages: when it holds no message any more;
- delete-on-no-links-or-messages: when either.
With no policy (the capability alone) it goes with its link, as delete-on-close.
"""

from __future__ import annotations

from typing import Any, Literal

DELETE_ON_CLOSE = "delete-on-close"
DELETE_ON_NO_LINKS = "delete-on-no-links"
DELETE_ON_NO_MESSAGES = "delete-on-no-messages"
DELETE_ON_NO_LINKS_OR_MESSAGES = "delete-on-no-links-or-messages"

# The policies' descriptors, by code and by name.
_POLICIES: dict[Any, str] = {
    0x2B: DELETE_ON_CLOSE,
    0x2C: DELETE_ON_NO_LINKS,
    0x2D: DELETE_ON_NO_MESSAGES,
    0x2E: DELETE_ON_NO_LINKS_OR_MESSAGES,
    **{
        f"amqp:{name}:list": name
        for name in (
            DELETE_ON_CLOSE,
            DELETE_ON_NO_LINKS,
            DELETE_ON_NO_MESSAGES,
            DELETE_ON_NO_LINKS_OR_MESSAGES,
        )
    },
}
NodeKind = Literal["queue", "topic"]
TEMPORARY: dict[str, NodeKind] = {"temporary-queue": "queue", "temporary-topic": "topic"}


def requested(properties: Any, capabilities: Any) -> tuple[NodeKind, str] | None:
    """(node type, lifetime policy) a dynamic terminus asks for, or None when it asks for no
    node (a plain dynamic reply address, which the router routes as Dispatch does)."""
    policy = None
    if isinstance(properties, dict):
        for key, value in properties.items():
            if str(key) == "lifetime-policy":
                policy = _POLICIES.get(getattr(value, "descriptor", value))
                if policy is None:
                    policy = _POLICIES.get(str(getattr(value, "descriptor", value)))
    wanted = [TEMPORARY[str(c)] for c in _items(capabilities) if str(c) in TEMPORARY]
    if policy is None and not wanted:
        return None
    return (wanted[0] if wanted else "queue"), policy or DELETE_ON_CLOSE


def _items(value: Any) -> list[Any]:
    if value is None:
        return []
    items = getattr(value, "elements", value)
    return list(items) if isinstance(items, list | tuple) else [items]


def ended(policy: str, creator_attached: bool, links: int, emptied: bool) -> bool:
    """Whether a node with `policy` goes now. `emptied`: its last message just left (a node
    made empty is not gone before it had anything)."""
    if policy == DELETE_ON_CLOSE:
        return not creator_attached
    if policy == DELETE_ON_NO_LINKS:
        return links == 0
    if policy == DELETE_ON_NO_MESSAGES:
        return emptied
    return links == 0 or emptied
