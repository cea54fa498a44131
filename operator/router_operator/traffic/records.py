"""A received message as one JSON line (``receive --print``, ``request``'s reply): its body,
the header fields that differ from the defaults, the properties set and the application
properties.

AMQP values are richer than JSON: binary is shown as UTF-8 text (undecodable bytes escaped),
map keys as strings, and anything else JSON lacks (UUIDs, decimals, described values) as its
``str``, so that a line is always written and a script can read bodies the usual clients send
(strings, or bytes holding text or JSON).
"""

from __future__ import annotations

import json
from typing import Any

from proton import Message

# The properties section, by the spec's field names; left out when unset.
_PROPERTIES = (
    ("message_id", "id"),
    ("user_id", "user_id"),
    ("to", "address"),
    ("subject", "subject"),
    ("reply_to", "reply_to"),
    ("correlation_id", "correlation_id"),
    ("content_type", "content_type"),
    ("content_encoding", "content_encoding"),
    ("absolute_expiry_time", "expiry_time"),
    ("creation_time", "creation_time"),
    ("group_id", "group_id"),
    ("group_sequence", "group_sequence"),
    ("reply_to_group_id", "reply_to_group_id"),
)


# The header section: field name, attribute, the default a header without it means.
_HEADER = (
    ("durable", "durable", False),
    ("priority", "priority", 4),
    ("ttl", "ttl", 0),
    ("first_acquirer", "first_acquirer", False),
    ("delivery_count", "delivery_count", 0),
)


def message_record(message: Message) -> dict[str, Any]:
    """``{"body", "header", "properties", "application_properties"}`` of ``message``,
    JSON-ready."""
    header = {
        name: _plain(getattr(message, attribute))
        for name, attribute, default in _HEADER
        if getattr(message, attribute) != default
    }
    properties = {}
    for name, attribute in _PROPERTIES:
        value = getattr(message, attribute)
        if value is not None and value != "" and value != b"" and value != 0:
            properties[name] = _plain(value)
    for name in ("content_type", "content_encoding"):
        # Proton (0.40) gives an unset content-type or -encoding as symbol("None").
        if properties.get(name) == "None":
            del properties[name]
    return {
        "body": _plain(message.body),
        "header": header,
        "properties": properties,
        "application_properties": _plain(message.properties or {}),
    }


def message_line(message: Message) -> str:
    return json.dumps(message_record(message))


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return str(value)  # a proton symbol is a str subclass
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "backslashreplace")
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return str(value)
