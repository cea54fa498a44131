"""What the filters of a hosted queue or topic read from a message (no I/O).

A node tests each message against every receiver's filters and every binding, so the message is
decoded once into MessageFacts and the filters read plain Python values from it: str, int,
float, bool or None. AMQP types with no counterpart in a selector (binary, uuid, lists, maps,
decimals, described values) become None there, so a selector sees them as NULL, as it sees an
absent property.
"""

from __future__ import annotations

from typing import Any

import proton

from router.datapath.sections import scan

DEFAULT_PRIORITY = 4
"""AMQP's (and JMS's) priority of a message whose header does not say."""

Scalar = str | int | float | bool | None

# Proton decodes these as subclasses of int, but their value is not the number they stand for.
_NOT_NUMBERS = (proton.decimal32, proton.decimal64, proton.decimal128)


def scalar(value: object) -> Scalar:
    """`value` as a selector sees it: proton's subclasses (symbol, char, ulong, timestamp,
    float32, ...) as the plain type, so that comparing and hashing never depend on them."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int) and not isinstance(value, _NOT_NUMBERS):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return None


def _millis(seconds: float | None) -> int | None:
    """Proton gives timestamps as float seconds, 0 when absent; a selector compares AMQP's
    milliseconds."""
    return None if not seconds else round(seconds * 1000)


class MessageFacts:
    """The header, properties and annotations of one message, as filters read them."""

    __slots__ = (
        "absolute_expiry_time",
        "annotations",
        "application_properties",
        "content_type",
        "correlation_id",
        "creation_time",
        "durable",
        "group_id",
        "message_id",
        "priority",
        "reply_to",
        "subject",
        "to",
        "user_id",
    )

    def __init__(
        self,
        *,
        durable: bool = False,
        priority: int = DEFAULT_PRIORITY,
        subject: str | None = None,
        message_id: Scalar = None,
        correlation_id: Scalar = None,
        creation_time: int | None = None,
        absolute_expiry_time: int | None = None,
        user_id: str | None = None,
        to: str | None = None,
        reply_to: str | None = None,
        content_type: str | None = None,
        group_id: str | None = None,
        application_properties: dict[str, Scalar] | None = None,
        annotations: dict[str, Scalar] | None = None,
    ) -> None:
        self.durable = durable
        self.priority = priority
        self.subject = subject
        self.message_id = message_id
        self.correlation_id = correlation_id
        self.creation_time = creation_time
        """Milliseconds since the epoch, as AMQP encodes it."""
        self.absolute_expiry_time = absolute_expiry_time
        """Milliseconds since the epoch."""
        self.user_id = user_id
        """The binary user-id as UTF-8 text; None if it is not UTF-8."""
        self.to = to
        self.reply_to = reply_to
        self.content_type = content_type
        self.group_id = group_id
        self.application_properties = application_properties or {}
        self.annotations = annotations or {}
        """Message annotations by symbol; ulong keys (reserved by AMQP) are left out."""

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"MessageFacts({fields})"


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _user(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    try:
        return bytes(value).decode()  # type: ignore[call-overload]
    except (TypeError, UnicodeDecodeError):
        return None


def _string_keyed(values: dict[Any, Any] | None) -> dict[str, Scalar]:
    return {str(k): scalar(v) for k, v in (values or {}).items() if isinstance(k, str)}


def facts_of(data: bytes | bytearray | memoryview) -> MessageFacts:
    """The facts of an encoded AMQP message; ValueError with a one-line message if it cannot be
    decoded. The sections are checked first (router.datapath.sections.scan) because proton's decoder
    takes garbage for an empty message; only the sections before the body are decoded, as no
    filter reads the body."""
    head = bytes(data[: scan(data).body_start])
    message = proton.Message()
    try:
        message.decode(head)
        # Proton decodes strings when asked: invalid UTF-8 fails here, not in decode().
        return MessageFacts(
            durable=bool(message.durable),
            priority=int(message.priority),
            subject=_text(message.subject),
            message_id=scalar(message.id),
            correlation_id=scalar(message.correlation_id),
            creation_time=_millis(message.creation_time),
            absolute_expiry_time=_millis(message.expiry_time),
            user_id=_user(message.user_id),
            to=_text(message.address),
            reply_to=_text(message.reply_to),
            content_type=_text(message.content_type),
            group_id=_text(message.group_id),
            application_properties=_string_keyed(message.properties),
            annotations=_string_keyed(message.annotations),
        )
    except Exception as error:
        text = " ".join(str(error).split()) or type(error).__name__
        raise ValueError(f"undecodable message: {text}") from None
