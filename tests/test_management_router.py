"""`$management` of a real router process fed what a probe found it mishandled.

A binary correlation-id came back null, so a client matching replies by it never got its
answer; a request naming a million attributes got no usable answer (the agent built every row
for the 65,532 names proton keeps of them, then could not encode the reply); a reply-to or id
that is not UTF-8 raised out of the agent and closed the requester's connection. Each request
must be answered promptly as AMQP Management says, on the same connection, and the router must
go on serving QUERY.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from uuid import UUID

import amqp_raw as raw
import pytest
from clients import ACCEPTED, MANAGEMENT_TYPE, Management, World
from harness import RouterProcess
from proton import Message

from router.management.agent import MAX_DESCRIPTION

pytestmark = pytest.mark.network

RID = "R1"
PROMPT = 5.0  # seconds: the probe's client gave up waiting


class Encoded:
    """A message sent as the bytes given: requests proton cannot build (a million items)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def send(self, sender: Any, tag: str | None = None) -> Any:
        delivery = sender.delivery(tag or sender.delivery_tag())
        sender.stream(self.data)
        sender.advance()
        return delivery


def wire_id(value: Any) -> tuple[type, Any]:
    """An id as the client decoded it; proton gives a binary one as a memoryview."""
    if isinstance(value, memoryview):
        return bytes, value.tobytes()
    return type(value), value


def answer_to(mgmt: Management, world: World, correlation: Any) -> Message:
    """The reply whose correlation-id is `correlation`, value and type, waited for briefly."""

    def found() -> Message | None:
        for message in mgmt.replies.messages:
            if wire_id(message.correlation_id) == (type(correlation), correlation):
                return message
        return None

    world.run_until(found, timeout=PROMPT, what=f"the answer to {correlation!r}")
    reply = found()
    assert reply is not None
    return reply


def short_status(reply: Message) -> tuple[int, str]:
    code = reply.properties["statusCode"]
    description = reply.properties["statusDescription"]
    assert isinstance(description, str) and "\n" not in description
    assert len(description) <= MAX_DESCRIPTION, description
    return code, description


def assert_serving(mgmt: Management, client: Any) -> None:
    assert not client.failed and not client.errors, client.errors
    assert mgmt.router()["id"] == RID


def test_reply_correlation_id_keeps_its_type(tmp_path: Path, world: World) -> None:
    with RouterProcess(tmp_path, RID) as router, world:
        client = world.connect(router.url)
        mgmt = Management(client)
        properties = {
            "operation": "QUERY",
            "type": MANAGEMENT_TYPE,
            "name": "self",
            "entityType": "org.apache.qpid.dispatch.router",
        }
        for correlation in (b"\x00\x01bin", 2**64 - 1, UUID(int=7), "req-str"):
            mgmt.sender.send(
                Message(
                    reply_to=mgmt.reply_to,
                    correlation_id=correlation,
                    properties=properties,
                    body={"attributeNames": ["id"]},
                )
            )
            reply = answer_to(mgmt, world, correlation)
            assert reply.properties["statusCode"] == 200
            assert reply.body["results"] == [[RID]]
        # With no correlation-id, the message-id correlates, binary staying binary.
        mgmt.sender.send(Message(reply_to=mgmt.reply_to, id=b"mid", properties=properties))
        assert answer_to(mgmt, world, b"mid").properties["statusCode"] == 200
        assert_serving(mgmt, client)


def test_a_million_item_request_is_answered_promptly(tmp_path: Path, world: World) -> None:
    with RouterProcess(tmp_path, RID) as router, world:
        client = world.connect(router.url)
        mgmt = Management(client)
        million_names = raw.repeated_list(raw.string("identity"), 1_000_000)
        requests = {
            b"names": raw.map_([(raw.string("attributeNames"), million_names)]),
            b"body": raw.repeated_list(raw.ulong(7), 1_000_000),  # a body that is no map
        }
        for correlation, body in requests.items():
            data = raw.request(
                "QUERY",
                mgmt.reply_to,
                raw.binary(correlation),
                body,
                type=MANAGEMENT_TYPE,
                name="self",
            )
            assert len(data) > 1_000_000
            started = time.monotonic()
            tracked = mgmt.sender.send(Encoded(data))
            reply = answer_to(mgmt, world, correlation)
            assert time.monotonic() - started < PROMPT
            code, description = short_status(reply)
            assert code == 400, description
            assert description in (
                "'attributeNames' lists 65532 names; at most 1000",
                "QUERY body must be a map, got a list of 65534 items",
            )
            world.run_until(lambda t=tracked: t.settled, what="the request's settlement")
            assert tracked.state == ACCEPTED
        assert_serving(mgmt, client)


def test_reply_to_and_ids_that_are_not_utf8(tmp_path: Path, world: World) -> None:
    """Before, both raised out of the agent and the router closed the client's connection."""
    with RouterProcess(tmp_path, RID) as router, world:
        client = world.connect(router.url)
        mgmt = Management(client)
        app = raw.application_properties(raw.string_map({"operation": "GET-MGMT-NODES"}))
        body = raw.amqp_value(raw.map_([]))
        unreadable = raw.properties(raw.NULL, b"\xff\xfe", raw.string("c-1"))
        tracked = mgmt.sender.send(Encoded(unreadable + app + body))
        world.run_until(lambda: tracked.settled, what="the request's settlement")
        bad_id = raw.properties(raw.NULL, mgmt.reply_to, raw.string(b"\xff"))
        mgmt.sender.send(Encoded(bad_id + app + body))
        world.run_until(lambda: mgmt.replies.messages, timeout=PROMPT, what="an answer")
        [reply] = mgmt.replies.messages
        assert reply.correlation_id is None
        assert short_status(reply) == (
            400,
            "The request's correlation-id cannot be read: not valid UTF-8",
        )
        assert_serving(mgmt, client)


def test_a_request_that_does_not_decode_is_rejected_with_decode_error(
    tmp_path: Path, world: World
) -> None:
    """Proton cannot decode it (a string that is not UTF-8 inside the application properties),
    so the agent never sees it: the delivery is rejected with amqp:decode-error and a reason,
    as for any message the router cannot read, and the connection stays."""
    with RouterProcess(tmp_path, RID) as router, world:
        client = world.connect(router.url)
        mgmt = Management(client)
        props = raw.properties(raw.NULL, mgmt.reply_to, raw.string("c-1"))
        app = raw.application_properties([(raw.string("operation"), raw.string(b"\xff\xfe"))])
        tracked = mgmt.sender.send(Encoded(props + app + raw.amqp_value(raw.map_([]))))
        world.run_until(lambda: tracked.settled, what="the request's outcome")
        assert tracked.outcome == "rejected"
        condition = tracked.condition
        assert condition is not None
        assert condition.name == "amqp:decode-error" and "does not decode" in condition.description
        assert_serving(mgmt, client)
