"""Which container ``()/node`` means: the gateway rules applied to what a message or a link
says about itself. Pure (no I/O), so that the engine calls it where it routes and the tests
without a network.

Property values are matched as text. Rules are written in YAML or JSON, where a value the
user wants matched is written as a string, so a value that is not a string matches through a
canonical spelling: integers in decimal, booleans as ``true``/``false`` (as YAML, JSON and the
AMQP type names spell them, not as Python does). Other types (floats, whose text is ambiguous;
binary; timestamps, uuids, lists, maps, null) never match: there is no one spelling a user
could know to write.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from proton import Message

from router.config.records import Gateway, GatewayRule
from router.datapath.sections import scan


@dataclass(frozen=True, slots=True)
class Facts:
    """What rules may look at: a message's properties, or a link's attach and its user."""

    node: str
    subject: str | None = None
    group_id: str | None = None
    user_id: str | None = None
    properties: Mapping[str, object] = field(default_factory=dict)
    """Application properties of a message, or the link properties of an attach."""


def resolve(gateway: Gateway, facts: Facts) -> str | None:
    """The container of the first rule that matches, else ``defaultContainer``; None when there
    is neither, and the caller releases the message (or refuses the link)."""
    for rule in gateway.rules:
        if _matches(rule, facts):
            return rule.container
    return gateway.defaultContainer


def exported(gateway: Gateway, container: str) -> bool:
    """Whether this network shows ``container`` to networks joined through gateways."""
    return any(match.matches(container) for match in gateway.export)


def message_facts(data: bytes | bytearray, node: str) -> Facts:
    """The facts of an encoded message for ``node`` (the path after ``()/``). Raises
    ValueError with a one-line reason when the message does not decode.

    Only the sections before the body are decoded: rules never look at the body, which may be
    large, and a message is scanned as the router scans every message it forwards."""
    head = data[: scan(data).body_start]
    message = Message()
    try:
        message.decode(bytes(head))
        subject, group_id, user = message.subject, message.group_id, message.user_id
        properties = dict(message.properties or {})
    except Exception as err:  # proton's own errors, KeyError, UnicodeDecodeError: all bad input
        raise ValueError(f"message properties do not decode: {_one_line(err)}") from None
    return Facts(
        node=node,
        subject=_string(subject),
        group_id=_string(group_id),
        # Proton gives an absent user-id as b"": an empty one counts as none.
        user_id=user.decode("utf-8", "replace") if isinstance(user, bytes) and user else None,
        properties=properties,
    )


def link_facts(node: str, properties: Mapping[str, object] | None, user: str | None) -> Facts:
    """The facts of an attach for ``()/node``: its link properties play the application
    properties, and the connection's authenticated user the user-id. Links have no subject or
    group-id, so rules on those never match a link."""
    return Facts(node=node, user_id=user, properties=dict(properties or {}))


def _matches(rule: GatewayRule, facts: Facts) -> bool:
    for match, value in (
        (rule.node, facts.node),
        (rule.subject, facts.subject),
        (rule.groupId, facts.group_id),
        (rule.userId, facts.user_id),
    ):
        if match is not None and (value is None or not match.matches(value)):
            return False
    for key, match in rule.applicationProperties.items():
        text = _text(facts.properties.get(key))
        if text is None or not match.matches(text):
            return False
    return True


def _text(value: object) -> str | None:
    """A property value as rules match it (see the module's docstring)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))  # proton's int32, ulong, ... would print their type
    if isinstance(value, str):
        return str(value)  # a proton symbol as plain text
    return None


def _string(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _one_line(err: Exception) -> str:
    return " ".join(str(err).split()) or type(err).__name__
