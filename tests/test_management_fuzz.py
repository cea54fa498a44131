"""Fuzzing the management agent with whatever a client can put in a request.

Requests are written byte by byte (tests/amqp_raw.py), so they hold what proton's own encoder
never writes: every AMQP type in every application property, ids of every type, odd and huge
bodies, lists longer than proton's codec holds, invalid UTF-8, truncated and mutated bytes. Each
takes the engine's path (router/core/engine.py `on_management`): the bytes are decoded by proton
(a message that does not decode is rejected there and never reaches the agent), `Agent.handle`
answers, the answer is encoded and its sections scanned as the forwarder does. Whatever the
request, the answer is a proper status (never a 500, which would be an exception escaping the
agent's own checks) with a short one-line description and the request's correlation-id, value
and AMQP type; and the agent goes on answering a valid QUERY.

Bounded for `make test`: a fixed number of examples, derandomized so a CI run is repeatable.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import amqp_raw as raw
import proton
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from test_management import QDSTAT_L, make_agent, node_request, query, wire_id

from router.datapath.sections import scan
from router.management.agent import LINK, MAX_DESCRIPTION, ROUTER

REPLY_TO = "amqp:/_topo/0/R1/temp.fuzz"
STATUSES = {200, 400, 404, 501}
FUZZ = settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# One agent for the whole module: whatever it was sent, it must keep answering.
AGENT = make_agent()
NO_ANSWER = object()


# ----- AMQP values, encoded ------------------------------------------------------------------


def _int_encodings() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.integers(0, 2**8 - 1).map(raw.ubyte),
        st.integers(0, 2**16 - 1).map(raw.ushort),
        st.integers(0, 2**32 - 1).map(raw.uint),
        st.integers(0, 2**64 - 1).map(raw.ulong),
        st.integers(-(2**7), 2**7 - 1).map(raw.byte),
        st.integers(-(2**15), 2**15 - 1).map(raw.short),
        st.integers(-(2**31), 2**31 - 1).map(raw.int32),
        st.integers(-(2**63), 2**63 - 1).map(raw.long),
    )


WORDS = [
    "QUERY",
    "READ",
    "self",
    "router",
    "router.link",
    LINK,
    "org.amqp.management",
    "identity",
    "name",
    "attributeNames",
    "1",
    "link-1",
    "",
]
# Values bigger than anything sensible, some bigger than proton's codec holds (65,535 values).
HUGE = [
    raw.string("x" * 200_000, wide=True),
    raw.symbol("y" * 200_000, wide=True),
    raw.binary(b"\0" * 200_000, wide=True),
    raw.repeated_list(raw.NULL, 100_000),
    raw.repeated_list(raw.string("identity"), 100_000),
    raw.repeated_list(raw.ulong(7), 70_000),
    raw.array(b"\x71", [b"\0\0\0\1"] * 70_000),
    raw.map_([(raw.ulong(i), raw.NULL) for i in range(40_000)], wide=True),
]

scalars = st.one_of(
    st.just(raw.NULL),
    st.booleans().map(raw.boolean),
    _int_encodings(),
    st.floats(width=32).map(raw.float32),
    st.floats().map(raw.double),
    st.sampled_from([4, 8, 16])
    .flatmap(lambda n: st.binary(min_size=n, max_size=n))
    .map(raw.decimal),
    st.characters().map(raw.char),
    st.integers(-(2**63), 2**63 - 1).map(raw.timestamp),
    st.uuids().map(raw.uuid_),
    st.tuples(st.binary(max_size=20), st.booleans()).map(lambda b: raw.binary(*b)),
    st.tuples(st.text(max_size=20), st.booleans()).map(lambda t: raw.string(*t)),
    st.text(st.characters(max_codepoint=127), max_size=12).map(raw.symbol),
    st.sampled_from(WORDS).map(raw.string),
    st.sampled_from(WORDS).map(raw.symbol),
    st.binary(min_size=1, max_size=4).map(lambda b: raw.string(b"\xff" + b)),  # invalid UTF-8
    st.integers(0, len(HUGE) - 1).map(lambda i: HUGE[i]),  # not in the strategy's repr
)
# Array element types: constructor and how to encode one element without it.
ARRAYS: list[tuple[bytes, st.SearchStrategy[bytes]]] = [
    (b"\x71", st.integers(-(2**31), 2**31 - 1).map(lambda i: i.to_bytes(4, "big", signed=True))),
    (b"\x80", st.integers(0, 2**64 - 1).map(lambda i: i.to_bytes(8, "big"))),
    (b"\x56", st.booleans().map(lambda b: bytes([b]))),
    (b"\xa1", st.text(max_size=8).map(lambda t: raw.string(t)[1:])),
    (b"\xa3", st.sampled_from(WORDS).map(lambda t: raw.symbol(t)[1:])),
    (b"\x40", st.just(b"")),
]
arrays = st.sampled_from(ARRAYS).flatmap(
    lambda kind: st.lists(kind[1], max_size=6).map(lambda items: raw.array(kind[0], items))
)
values = st.recursive(
    st.one_of(scalars, arrays),
    lambda inner: st.one_of(
        st.tuples(st.lists(inner, max_size=5), st.booleans()).map(lambda t: raw.list_(*t)),
        st.lists(st.tuples(scalars, inner), max_size=4).map(raw.map_),
        st.tuples(st.one_of(_int_encodings(), scalars), inner).map(lambda t: raw.described(*t)),
    ),
    max_leaves=12,
)


flat_values = st.one_of(
    scalars,
    arrays,
    st.lists(scalars, max_size=3).map(raw.list_),
    st.lists(st.tuples(scalars, scalars), max_size=2).map(raw.map_),
    st.tuples(_int_encodings(), scalars).map(lambda t: raw.described(*t)),
)


# ----- ids: what the reply's correlation-id must be -------------------------------------------


def _id(encoding: st.SearchStrategy[bytes], expected: Any = None) -> st.SearchStrategy[Any]:
    return st.tuples(encoding, st.just(expected))


MESSAGE_ID_CODES = {0x44, 0x53, 0x80, 0x98, 0xA0, 0xB0, 0xA1, 0xB1}
# (encoding, the id as the reply must carry it) for the four message-id types; any other type
# is not an id (AMQP allows only these), proton reads it as none, and the reply falls back.
ids = st.one_of(
    st.integers(0, 2**64 - 1).map(lambda i: (raw.ulong(i), i)),
    st.uuids().map(lambda u: (raw.uuid_(u), u)),
    st.tuples(st.binary(max_size=40), st.booleans()).map(lambda t: (raw.binary(*t), t[0])),
    st.tuples(st.text(max_size=40), st.booleans()).map(lambda t: (raw.string(*t), t[0])),
    _id(st.just(raw.NULL)),
    # Not nested deeper: proton reads no properties at all past a described value in a
    # described value (nor then a reply-to), whatever the agent does.
    _id(flat_values.filter(lambda v: v[0] not in MESSAGE_ID_CODES)),
)


# ----- requests ------------------------------------------------------------------------------

OPERATIONS = [
    "QUERY",
    "READ",
    "CREATE",
    "UPDATE",
    "DELETE",
    "GET-TYPES",
    "GET-ATTRIBUTES",
    "GET-OPERATIONS",
    "GET-ANNOTATIONS",
    "GET-MGMT-NODES",
    "GET-SCHEMA",
    "GET-LOG",
    "query",
    "Read",
    "",
]
TYPES = [
    "router",
    ROUTER,
    "router.link",
    LINK,
    "connection",
    "listener",
    "router.node",
    "org.amqp.management",
    "org.apache.qpid.dispatch.management",
    "org.apache.qpid.dispatch.operationalEntity",
    "configurationEntity",
    "bogus",
    "",
]
NAMES = ["self", "router/R1", "link-1", "1", "2", "amqp", "M0orders", "nothing", ""]


def _text(words: list[str]) -> st.SearchStrategy[bytes]:
    """One of `words` as a string (mostly) or a symbol, or any value at all."""
    return st.one_of(
        st.sampled_from(words).map(raw.string),
        st.sampled_from(words).map(raw.symbol),
        values,
    )


application_properties = st.fixed_dictionaries(
    {"operation": _text(OPERATIONS)},
    optional={
        "type": _text(TYPES),
        "entityType": _text(TYPES),
        "name": _text(NAMES),
        "identity": _text(NAMES),
        "offset": st.one_of(_int_encodings(), values),
        "count": st.one_of(_int_encodings(), values),
    },
).flatmap(
    lambda known: st.lists(st.tuples(scalars, values), max_size=3).map(
        lambda extra: raw.application_properties(raw.string_map(known) + extra)
    )
)
attribute_names = st.one_of(
    st.lists(st.sampled_from([*QDSTAT_L[:8], "nope", ""]).map(raw.string), max_size=8),
    st.lists(values, max_size=5),
).map(raw.list_)
bodies = st.one_of(
    st.just(b""),
    st.tuples(attribute_names, st.lists(st.tuples(scalars, values), max_size=2)).map(
        lambda t: raw.amqp_value(raw.map_([(raw.string("attributeNames"), t[0]), *t[1]]))
    ),
    values.map(raw.amqp_value),
    st.lists(values, max_size=3).map(raw.amqp_sequence),
    st.binary(max_size=30).map(raw.data),
)


@st.composite
def requests(draw: st.DrawFn) -> tuple[bytes, Any]:
    """A request's bytes and the correlation-id its reply must carry (NO_ANSWER if none)."""
    message_id, expected_message_id = draw(ids)
    correlation_id, expected_correlation = draw(ids)
    reply_to = draw(st.sampled_from([REPLY_TO] * 8 + [None, ""]))
    properties = raw.properties(message_id, reply_to, correlation_id)
    app = draw(
        st.one_of(
            application_properties,
            application_properties,
            st.just(b""),  # none: no operation
            values.map(lambda v: raw.described(raw.ulong(0x74), v)),  # not a map
        )
    )
    expected = expected_correlation if expected_correlation is not None else expected_message_id
    return properties + app + draw(bodies), expected if reply_to else NO_ANSWER


# ----- the engine's path ---------------------------------------------------------------------


def tally(what: str) -> None:
    """Count what became of the examples (pytest --hypothesis-show-statistics)."""
    if currently_in_test_context():
        event(what)


def answer(data: bytes) -> tuple[proton.Message | None, proton.Message | None]:
    """As the engine: decode (or reject, and the agent sees nothing), let the agent answer,
    encode and scan the answer. Returns the decoded request and the answer as a client reads
    it."""
    request = proton.Message()
    try:
        request.decode(data)
    except Exception:  # the engine rejects the delivery: amqp:decode-error, no answer
        tally("rejected by the engine: does not decode")
        return None, None
    response = AGENT.handle(request)
    try:
        reply_to = request.reply_to
    except UnicodeDecodeError:  # proton decodes it only when asked
        reply_to = None
    if response is None:
        assert not reply_to
        tally("no reply-to: no answer")
        return request, None
    encoded = response.encode()
    scan(encoded)  # the forwarder's own section scanner must take it
    received = proton.Message()
    received.decode(encoded)
    assert received.address == reply_to
    return request, received


def readable_id(request: proton.Message) -> Any:
    """The request's correlation-id, else message-id, as proton reads them; none if it cannot
    (a string id that is not UTF-8)."""
    try:
        return request.correlation_id if request.correlation_id is not None else request.id
    except UnicodeDecodeError:
        return None


def assert_proper(response: proton.Message) -> None:
    properties = response.properties
    code = properties["statusCode"]
    description = properties["statusDescription"]
    tally(f"answered {int(code)}")
    assert isinstance(code, proton.int32), properties
    assert code in STATUSES, properties
    assert isinstance(description, str) and description, properties
    assert len(description) <= MAX_DESCRIPTION and "\n" not in description, properties
    if code != 200:
        assert response.body == {}, properties


def assert_still_serving() -> None:
    body = query(AGENT, LINK, ["identity", "name"], offset=0, count=500)
    assert body["results"] == [[str(i), f"link-{i}"] for i in range(3)]


@FUZZ
@given(requests())
def test_any_request_gets_a_proper_answer(case: tuple[bytes, Any]) -> None:
    data, expected = case
    request, response = answer(data)
    if request is not None:
        if expected is NO_ANSWER:
            assert response is None
        else:
            assert response is not None
            assert_proper(response)
            assert wire_id(response.correlation_id) == (type(expected), expected)
    assert_still_serving()


# ----- mutated and truncated valid requests ---------------------------------------------------


def _valid_requests() -> list[bytes]:
    """Requests as qdstat and qdmanage send them, with ids of each type."""
    made = []
    for correlation in ("req-1", 42, b"\x00bin", UUID(int=9)):
        for message in (
            node_request({"attributeNames": QDSTAT_L}, operation="QUERY", entityType=LINK),
            node_request({"attributeNames": []}, operation="QUERY", entityType=ROUTER),
            node_request(operation="GET-MGMT-NODES"),
            node_request(operation="GET-TYPES", entityType="operationalEntity"),
        ):
            message.correlation_id = correlation
            made.append(message.encode())
        made.append(raw.request("READ", REPLY_TO, raw.symbol("sym"), type=LINK, identity="1"))
    return made


VALID = _valid_requests()
mutations = st.lists(
    st.tuples(
        st.sampled_from(["set", "insert", "delete", "truncate"]),
        st.integers(0, 2**16),
        st.integers(0, 255),
    ),
    min_size=1,
    max_size=4,
)


def mutate(data: bytes, changes: list[tuple[str, int, int]]) -> bytes:
    buffer = bytearray(data)
    for change, where, byte in changes:
        at = where % (len(buffer) + 1)
        if change == "set" and at < len(buffer):
            buffer[at] = byte
        elif change == "insert":
            buffer[at:at] = bytes([byte])
        elif change == "delete":
            del buffer[at : at + 1]
        elif change == "truncate":
            del buffer[at:]
    return bytes(buffer)


@FUZZ
@given(st.sampled_from(VALID), mutations)
def test_mutated_and_truncated_requests_get_a_proper_answer(
    data: bytes, changes: list[tuple[str, int, int]]
) -> None:
    request, response = answer(mutate(data, changes))
    if request is not None and response is not None:
        assert_proper(response)
        # What proton reads of the mutated ids is what the reply must carry.
        assert wire_id(response.correlation_id) == wire_id(readable_id(request))
    assert_still_serving()


def test_the_valid_requests_are_answered() -> None:
    """The seeds of the mutations are themselves proper requests."""
    for data in VALID:
        _, response = answer(data)
        assert response is not None
        assert_proper(response)
        assert response.properties["statusCode"] == 200
