"""The management agent, driven with requests shaped exactly as qdstat and qdmanage send them.

Dispatch's client (`qpid_dispatch/management/client.py`, used by both tools) sends node requests
with application properties `operation`, `name="self"`, `type="org.amqp.management"` plus
`entityType`/`offset`/`count` for QUERY (None values dropped), entity requests with `operation`,
`type` and `name` or `identity`, a body that is the given map or `{}`, and, through proton's
SyncRequestResponse, a dynamic `reply_to` and a string correlation id, with no `to`.
"""

from __future__ import annotations

import time
from dataclasses import fields
from typing import Any
from uuid import UUID

import amqp_raw
import proton
import pytest
from clients import QDSTAT_G

from router.datapath.stats import RouterStats
from router.management.agent import (
    ADDRESS,
    CONNECTION,
    CONTAINER,
    ENTITY_ATTRIBUTES,
    HOSTED_NODE,
    LINK,
    LISTENER,
    MANAGEMENT,
    MAX_DESCRIPTION,
    NODE,
    ROUTER,
    Agent,
)

REPLY_TO = "amqp:/_topo/0/R1/temp.Xyz"
QDSTAT_L = [
    "linkType",
    "linkDir",
    "connectionId",
    "identity",
    "peer",
    "owningAddr",
    "capacity",
    "undeliveredCount",
    "unsettledCount",
    "deliveryCount",
    "presettledCount",
    "droppedPresettledCount",
    "acceptedCount",
    "rejectedCount",
    "releasedCount",
    "modifiedCount",
    "deliveriesDelayed1Sec",
    "deliveriesDelayed10Sec",
    "deliveriesStuck",
    "creditAvailable",
    "zeroCreditSeconds",
    "adminStatus",
    "operStatus",
    "linkName",
    "priority",
    "settleRate",
]


def router_row() -> dict[str, Any]:
    stats = RouterStats(acceptedDeliveries=7, deliveriesIngress=9)
    return {
        "name": "router/R1",
        "identity": "router/R1",
        "id": "R1",
        "mode": "interior",
        "version": "0.1.0",
        "workerThreads": 1,
        "uptimeSeconds": 12,
        "memoryUsage": 1 << 20,
        "area": "0",
        "linkRouteCount": 0,
        "autoLinkCount": 0,
        "linkCount": 3,
        "nodeCount": 1,
        "addrCount": 4,
        "connectionCount": 2,
        **stats.as_dict(),
        "deliveriesStuck": 0,
        "linksBlocked": 0,
    }


def link_rows(n: int) -> list[dict[str, Any]]:
    return [
        {"identity": str(i), "name": f"link-{i}", "linkDir": "in", "deliveryCount": i}
        for i in range(n)
    ]


def make_agent(links: int = 3, **overrides: Any) -> Agent:
    entities = {
        ROUTER: lambda: [router_row()],
        CONNECTION: lambda: [{"identity": "1", "host": "127.0.0.1:40000", "container": "c1"}],
        LINK: lambda: link_rows(links),
        ADDRESS: lambda: [{"name": "M0orders", "key": "M0orders", "priority": -1}],
        LISTENER: lambda: [{"name": "amqp", "host": "0.0.0.0", "port": "5672"}],
        **overrides,
    }
    return Agent("R1", entities, lambda: ["amqp:/_topo/0/R1/$management"])


def request(
    body: Any = None, *, reply_to: str | None = REPLY_TO, **properties: Any
) -> proton.Message:
    """A request as the stock tools build it, decoded from the wire as the engine sees it."""
    message = proton.Message(
        reply_to=reply_to,
        correlation_id="1",
        properties={k: v for k, v in properties.items() if v is not None},
        body=body or {},
    )
    received = proton.Message()
    received.decode(message.encode())
    return received


def node_request(body: Any = None, **properties: Any) -> proton.Message:
    return request(body, name="self", type="org.amqp.management", **properties)


def call(agent: Agent, message: proton.Message) -> proton.Message:
    response = agent.handle(message)
    assert response is not None
    received = proton.Message()
    received.decode(response.encode())
    assert received.address == message.reply_to
    return received


def status(response: proton.Message) -> int:
    code = response.properties["statusCode"]
    assert isinstance(code, proton.int32)  # Dispatch sends an AMQP int
    assert isinstance(response.properties["statusDescription"], str)
    return code


def query(agent: Agent, entity_type: str | None, names: list[str] | None = None, **paging: Any):
    response = call(
        agent,
        node_request(
            {"attributeNames": names or []}, operation="QUERY", entityType=entity_type, **paging
        ),
    )
    assert status(response) == 200, response.properties
    return response.body


def rows(body: dict[str, Any]) -> list[dict[str, Any]]:
    """What the tools do with a QUERY answer: zip the names with each row."""
    return [dict(zip(body["attributeNames"], row, strict=True)) for row in body["results"]]


# ----- schema ------------------------------------------------------------------------------


def test_entity_attributes_follow_dispatch() -> None:
    for entity_type, names in ENTITY_ATTRIBUTES.items():
        assert len(set(names)) == len(names), entity_type
        assert {"name", "identity", "type"} <= set(names), entity_type
    assert set(QDSTAT_G) <= set(ENTITY_ATTRIBUTES[ROUTER])
    assert set(QDSTAT_L) <= set(ENTITY_ATTRIBUTES[LINK])
    # The router's counters are RouterStats', not a copy that could drift.
    counters = [f.name for f in fields(RouterStats)]
    start = ENTITY_ATTRIBUTES[ROUTER].index(counters[0])
    assert list(ENTITY_ATTRIBUTES[ROUTER][start : start + len(counters)]) == counters
    # C-agent types lead with name and identity; Python-agent types end with the base three.
    assert ENTITY_ATTRIBUTES[CONNECTION][:2] == ("name", "identity")
    assert ENTITY_ATTRIBUTES[LISTENER][-3:] == ("name", "identity", "type")


def test_unknown_entity_type_in_constructor() -> None:
    with pytest.raises(ValueError):
        Agent("R1", {"org.apache.qpid.dispatch.bogus": list}, list)


# ----- QUERY -------------------------------------------------------------------------------


def test_qdstat_general() -> None:
    body = query(make_agent(), ROUTER, offset=0, count=500)
    assert body["attributeNames"] == list(ENTITY_ATTRIBUTES[ROUTER])
    [router] = rows(body)
    for name in QDSTAT_G:
        assert router[name] is not None, name
    assert router["id"] == "R1"
    assert router["acceptedDeliveries"] == 7
    assert router["type"] == ROUTER


def test_query_named_attributes_keep_request_order_and_unknowns_are_null() -> None:
    names = ["name", "identity", "noSuchAttribute", "type", "deliveryCount"]
    body = query(make_agent(), LINK, names)
    assert body["attributeNames"] == names
    assert body["results"][1] == ["link-1", "1", None, LINK, 1]


def test_qdstat_links_columns() -> None:
    body = query(make_agent(), LINK, QDSTAT_L, offset=0, count=500)
    assert body["attributeNames"] == QDSTAT_L
    assert [row["identity"] for row in rows(body)] == ["0", "1", "2"]


def test_short_entity_type() -> None:
    assert query(make_agent(), "router")["attributeNames"] == list(ENTITY_ATTRIBUTES[ROUTER])
    assert rows(query(make_agent(), "router.address"))[0]["name"] == "M0orders"


def test_name_and_identity_default_to_each_other() -> None:
    agent = make_agent()
    [conn] = rows(query(agent, CONNECTION, ["name", "identity", "type"]))
    assert conn == {"name": "1", "identity": "1", "type": CONNECTION}
    [listener] = rows(query(agent, LISTENER, ["name", "identity"]))
    assert listener == {"name": "amqp", "identity": "amqp"}


def test_paging_like_the_client() -> None:
    """The client asks for pages of up to 500 until a page comes back short."""
    agent = make_agent(links=1203)
    collected: list[list[Any]] = []
    offset, pages = 0, 0
    while True:
        body = query(agent, LINK, ["identity"], offset=offset, count=500)
        collected += body["results"]
        pages += 1
        if len(body["results"]) < 500:
            break
        offset += 500
    assert pages == 3
    assert collected == [[str(i)] for i in range(1203)]


@pytest.mark.parametrize(
    ("paging", "identities"),
    [
        ({}, ["0", "1", "2"]),
        ({"offset": 1}, ["1", "2"]),
        ({"count": 2}, ["0", "1"]),
        ({"offset": 2, "count": 5}, ["2"]),
        ({"offset": 9}, []),
        ({"count": 0}, []),
        ({"count": -1}, ["0", "1", "2"]),
    ],
)
def test_offset_and_count(paging: dict[str, int], identities: list[str]) -> None:
    body = query(make_agent(), LINK, ["identity"], **paging)
    assert [row[0] for row in body["results"]] == identities


def test_type_without_rows_or_provider_is_empty() -> None:
    body = query(make_agent(), NODE)
    assert body == {"attributeNames": list(ENTITY_ATTRIBUTES[NODE]), "results": []}
    assert query(make_agent(**{LINK: list}), LINK)["results"] == []


def test_query_without_entity_type_covers_every_entity() -> None:
    body = query(make_agent(links=1), None, ["type", "name"])
    assert sorted(map(tuple, body["results"])) == sorted(
        [
            (ROUTER, "router/R1"),
            (CONNECTION, "1"),
            (LINK, "link-0"),
            (ADDRESS, "M0orders"),
            (LISTENER, "amqp"),
            (MANAGEMENT, "self"),
        ]
    )
    everything = query(make_agent(links=1), None)
    assert len(everything["attributeNames"]) == len(set(everything["attributeNames"]))
    assert set(ENTITY_ATTRIBUTES[ROUTER]) <= set(everything["attributeNames"])


def test_query_of_a_base_type() -> None:
    body = query(make_agent(links=1), "org.apache.qpid.dispatch.operationalEntity")
    assert body["attributeNames"] == ["name", "identity", "type"]
    assert {row[2] for row in body["results"]} == {CONNECTION, LINK, ADDRESS, MANAGEMENT}


def test_entity_type_may_come_in_type_as_dispatch_c_agent_accepts() -> None:
    response = call(make_agent(), request({}, operation="QUERY", type=ROUTER))
    assert status(response) == 200
    assert response.body["attributeNames"] == list(ENTITY_ATTRIBUTES[ROUTER])


def test_operation_is_case_insensitive_and_body_may_be_missing() -> None:
    message = node_request(operation="query", entityType=ROUTER)
    message.body = None
    response = call(make_agent(), message)
    assert status(response) == 200
    assert len(response.body["results"]) == 1


# ----- READ --------------------------------------------------------------------------------


def test_read_by_identity_and_by_name() -> None:
    agent = make_agent()
    response = call(agent, request(operation="READ", type=LINK, identity="2"))
    assert status(response) == 200
    assert list(response.body) == list(ENTITY_ATTRIBUTES[LINK])
    assert response.body["linkName"] is None and response.body["name"] == "link-2"
    by_name = call(agent, request(operation="READ", type="listener", name="amqp"))
    assert status(by_name) == 200
    assert by_name.body["port"] == "5672"
    untyped = call(agent, request(operation="READ", name="router/R1"))
    assert untyped.body["id"] == "R1"


def test_read_the_management_node() -> None:
    for message in (request(operation="READ"), node_request(operation="READ")):
        response = call(make_agent(), message)
        assert status(response) == 200
        assert response.body == {"name": "self", "identity": "self", "type": MANAGEMENT}


@pytest.mark.parametrize(
    ("properties", "code"),
    [
        ({"type": LINK, "identity": "99"}, 404),
        ({"type": ROUTER, "name": "link-1"}, 404),
        ({"name": "nothing"}, 404),
        ({"type": LINK}, 400),
        ({"type": LINK, "identity": "1", "name": "link-2"}, 400),
        ({"identity": "1"}, 400),  # a connection and a link share identity 1
        ({"type": "bogus", "name": "x"}, 400),
    ],
)
def test_read_failures(properties: dict[str, str], code: int) -> None:
    response = call(make_agent(), request(operation="READ", **properties))
    assert status(response) == code
    assert response.properties["statusDescription"]
    assert response.body == {}


# ----- node operations ---------------------------------------------------------------------


def test_get_mgmt_nodes() -> None:
    remote = "amqp:/_topo/0/R2/$management"
    agent = Agent("R1", {}, lambda: [remote, "amqp:/_topo/0/R1/$management"])
    response = call(agent, node_request(operation="GET-MGMT-NODES"))
    assert status(response) == 200
    # Own node first and once; qdstat takes the router id from the fourth path segment.
    assert response.body == ["amqp:/_topo/0/R1/$management", remote]
    assert [node.split("/")[3] for node in response.body] == ["R1", "R2"]


def test_get_types() -> None:
    everything = call(make_agent(), node_request(operation="GET-TYPES")).body
    assert everything[ROUTER] == [
        "org.apache.qpid.dispatch.configurationEntity",
        "org.apache.qpid.dispatch.entity",
    ]
    assert "org.amqp.management" in everything[MANAGEMENT]
    operational = call(
        make_agent(),
        node_request(operation="GET-TYPES", entityType="operationalEntity"),
    ).body
    assert set(operational) == {
        "org.apache.qpid.dispatch.operationalEntity",
        "org.amqp.management",
        MANAGEMENT,
        CONNECTION,
        LINK,
        ADDRESS,
        NODE,
        CONTAINER,
        HOSTED_NODE,
        "org.apache.qpid.dispatch.router.connection.linkRoute",
        "org.apache.qpid.dispatch.vhostStats",  # the policy's counts per vhost
    }


def test_get_attributes_and_operations() -> None:
    agent = make_agent()
    attributes = call(agent, node_request(operation="GET-ATTRIBUTES", entityType="router")).body
    assert attributes == {ROUTER: list(ENTITY_ATTRIBUTES[ROUTER])}
    operations = call(agent, node_request(operation="GET-OPERATIONS")).body
    assert operations[ROUTER] == ["READ"]
    assert "QUERY" in operations["org.amqp.management"]
    assert "CREATE" not in operations[LISTENER]  # only what we really perform
    annotations = call(agent, node_request(operation="GET-ANNOTATIONS"))
    assert (status(annotations), annotations.body) == (200, {})


# ----- not implemented, errors -------------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        # qdmanage create --type=address prefix=foo distribution=closest
        lambda: request(
            {"prefix": "foo", "distribution": "closest"},
            operation="CREATE",
            type="org.apache.qpid.dispatch.router.config.address",
            name="foo",
        ),
        lambda: request({"adminStatus": "disabled"}, operation="UPDATE", type=LINK, identity="1"),
        lambda: request(operation="DELETE", type=LISTENER, name="amqp"),
    ],
)
def test_changes_are_not_implemented(message: Any) -> None:
    response = call(make_agent(), message())
    assert status(response) == 501
    assert "not implemented" in response.properties["statusDescription"]


def test_unknown_operation() -> None:
    response = call(make_agent(), node_request(operation="GET-SCHEMA"))
    assert status(response) == 501
    assert "GET-SCHEMA" in response.properties["statusDescription"]


def garbage_properties() -> proton.Message:
    message = request(operation="QUERY")
    message.properties = ["operation", "QUERY"]  # type: ignore[assignment]
    return message


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (lambda: request(), 400),  # no application properties at all
        (lambda: node_request(), 400),  # no operation
        (lambda: node_request(operation=7), 400),
        (garbage_properties, 400),
        (lambda: node_request("garbage", operation="QUERY", entityType=ROUTER), 400),
        (lambda: node_request(["id"], operation="QUERY", entityType=ROUTER), 400),
        (lambda: node_request({"attributeNames": "id"}, operation="QUERY", entityType=ROUTER), 400),
        (lambda: node_request({"attributeNames": [1]}, operation="QUERY", entityType=ROUTER), 400),
        (lambda: node_request(operation="QUERY", entityType=ROUTER, offset=-1), 400),
        (lambda: node_request(operation="QUERY", entityType=ROUTER, offset="0"), 400),
        (lambda: node_request(operation="QUERY", entityType=ROUTER, count=True), 400),
        (lambda: node_request(operation="QUERY", entityType=ROUTER, count=1.5), 400),
        (lambda: node_request(operation="QUERY", entityType="org.example.bogus"), 400),
        (lambda: node_request(operation="QUERY", entityType=5), 400),
        (lambda: node_request(operation="GET-TYPES", entityType="bogus"), 400),
    ],
)
def test_malformed_requests(message: Any, code: int) -> None:
    response = call(make_agent(), message())
    assert status(response) == code
    assert response.properties["statusDescription"]
    assert response.body == {}


def test_missing_operation_is_described() -> None:
    response = call(make_agent(), node_request())
    assert "operation" in response.properties["statusDescription"]


def test_failing_provider_is_an_internal_error() -> None:
    def broken() -> list[dict[str, Any]]:
        raise RuntimeError("link table locked")

    response = call(make_agent(**{LINK: broken}), node_request(operation="QUERY", entityType=LINK))
    assert status(response) == 500
    assert "link table locked" in response.properties["statusDescription"]


def test_unencodable_row_value_is_an_internal_error() -> None:
    agent = make_agent(**{LINK: lambda: [{"identity": "1", "capacity": object()}]})
    response = call(agent, node_request(operation="QUERY", entityType=LINK))
    assert status(response) == 500


def test_no_reply_to_means_no_response() -> None:
    assert make_agent().handle(node_request(operation="QUERY", reply_to=None)) is None
    assert make_agent().handle(request(reply_to=None)) is None


def test_correlation() -> None:
    agent = make_agent()
    message = node_request(operation="GET-MGMT-NODES")
    assert call(agent, message).correlation_id == "1"
    message.correlation_id = None
    message.id = 42
    assert call(agent, message).correlation_id == 42
    message.id = None
    assert call(agent, message).correlation_id is None


def wire_id(value: Any) -> tuple[type, Any]:
    """An id as a client decodes it: proton gives binary ids as memoryviews, which tell binary
    apart from the other three message-id types (ulong as int, uuid, string)."""
    if isinstance(value, memoryview):
        return bytes, value.tobytes()
    return type(value), value


@pytest.mark.parametrize(
    "value",
    [b"\x00\x01bin", b"", "req-1", "", 0, 7, 2**64 - 1, UUID(int=0x1234)],
    ids=[
        "binary",
        "empty-binary",
        "string",
        "empty-string",
        "ulong0",
        "ulong",
        "ulong-max",
        "uuid",
    ],
)
@pytest.mark.parametrize("field", ["correlation_id", "id"])
def test_correlation_keeps_its_amqp_type(field: str, value: Any) -> None:
    """The reply's correlation-id is the request's correlation-id (else message-id), value and
    type: a client matching replies by a binary id must find it binary (proton decodes it as a
    memoryview, which it would encode as null)."""
    for operation, code in (("GET-MGMT-NODES", 200), ("bogus", 501)):
        message = proton.Message(reply_to=REPLY_TO, properties={"operation": operation})
        setattr(message, field, value)
        received = proton.Message()
        received.decode(message.encode())
        response = call(make_agent(), received)
        assert status(response) == code
        assert wire_id(response.correlation_id) == (type(value), value)


def test_correlation_id_wins_over_message_id() -> None:
    message = proton.Message(
        reply_to=REPLY_TO, id=b"mid", correlation_id=b"cid", properties={"operation": "READ"}
    )
    received = proton.Message()
    received.decode(message.encode())
    assert wire_id(call(make_agent(), received).correlation_id) == (bytes, b"cid")


# ----- bounds: big or odd input, replies too big to encode ----------------------------------


def raw_request(data: bytes) -> proton.Message:
    received = proton.Message()
    received.decode(data)
    return received


def described_status(response: proton.Message) -> tuple[int, str]:
    code = status(response)
    description = response.properties["statusDescription"]
    assert description and "\n" not in description
    assert len(description) <= MAX_DESCRIPTION, description
    return code, description


def test_million_attribute_names_are_refused_promptly() -> None:
    """A million names reach the agent as the 65,532 proton keeps of them (it drops the rest of
    a section beyond 65,535 values); before, the agent answered 500 'DataException: [-10]: None',
    failing to encode the echo of them all."""
    names = amqp_raw.repeated_list(amqp_raw.string("identity"), 1_000_000)
    body = amqp_raw.map_([(amqp_raw.string("attributeNames"), names)])
    message = raw_request(amqp_raw.request("QUERY", REPLY_TO, amqp_raw.binary(b"q"), body))
    started = time.monotonic()
    response = call(make_agent(), message)
    assert time.monotonic() - started < 1
    code, description = described_status(response)
    assert code == 400
    assert "'attributeNames' lists 65532 names; at most 1000" in description
    assert wire_id(response.correlation_id) == (bytes, b"q")


@pytest.mark.parametrize(
    ("body", "code", "quoted"),
    [
        ({"attributeNames": ["identity"] * 1001}, 400, "lists 1001 names"),
        ({"attributeNames": ["x" * 257]}, 400, "'xxxxxxxx"),
        ({"attributeNames": list(range(60000))}, 400, "lists 60000 names"),
        ({"attributeNames": ["name", 7]}, 400, "not of 7"),
        ({"attributeNames": {"a": 1}}, 400, "got a map of 1 entries"),
        (list(range(60000)), 400, "got a list of 60000 items"),
        ("y" * 1_000_000, 400, "got 'yyyy"),
        (b"z" * 1_000_000, 400, "got binary of 1000000 bytes"),
    ],
)
def test_odd_and_oversized_query_bodies(body: Any, code: int, quoted: str) -> None:
    response = call(make_agent(), node_request(body, operation="QUERY", entityType=LINK))
    assert described_status(response)[0] == code
    assert quoted in response.properties["statusDescription"]
    assert response.body == {}


@pytest.mark.parametrize(
    ("properties", "code"),
    [
        ({"operation": "X" * 1_000_000}, 501),
        ({"operation": "QUERY", "entityType": "t" * 1_000_000}, 400),
        ({"operation": "QUERY", "entityType": ["router"] * 50000}, 400),
        ({"operation": "QUERY", "entityType": ROUTER, "count": "9" * 1000}, 400),
        ({"operation": "READ", "type": LINK, "identity": "i" * 1_000_000}, 404),
        ({"operation": "READ", "type": LINK, "identity": ["1"] * 50000}, 400),
        ({"operation": "READ", "type": LINK, "name": {"a": "b"}}, 400),
        ({"operation": "READ", "type": LINK, "identity": b"1"}, 400),
        ({"operation": b"QUERY"}, 400),
    ],
)
def test_oversized_and_odd_properties_are_quoted_briefly(
    properties: dict[str, Any], code: int
) -> None:
    response = call(make_agent(), request(**properties))
    assert described_status(response)[0] == code


@pytest.mark.parametrize("identity", [2, proton.ulong(2), proton.int32(2)])
def test_read_accepts_an_integer_identity(identity: int) -> None:
    response = call(make_agent(), request(operation="READ", type=LINK, identity=identity))
    assert status(response) == 200
    assert response.body["name"] == "link-2"


def test_query_too_large_to_encode_is_refused_before_building_it() -> None:
    """40,000 links of 29 attributes make a reply proton cannot encode (65,535 values at most):
    a clear 500 telling the client to page, as qdstat does with count=500."""
    agent = make_agent(links=40_000)
    response = call(agent, node_request(operation="QUERY", entityType=LINK))
    code, description = described_status(response)
    assert code == 500
    assert description.startswith("Reply too large to encode: 40000 rows of 29 attributes")
    assert "'count'" in description
    assert len(query(agent, LINK, offset=500, count=500)["results"]) == 500


def test_reply_too_large_for_its_row_values() -> None:
    """The size check before building counts one value per attribute; bigger values are caught
    when the reply is encoded, with the same clear description."""
    histogram = list(range(70_000))
    agent = make_agent(**{LINK: lambda: [{"identity": "1", "ingressHistogram": histogram}]})
    response = call(agent, node_request(operation="QUERY", entityType=LINK))
    code, description = described_status(response)
    assert code == 500
    assert description.startswith("Reply too large to encode: its values exceed the 65535")


def test_unencodable_row_value_is_named() -> None:
    agent = make_agent(**{LINK: lambda: [{"identity": "1", "capacity": object()}]})
    response = call(agent, node_request(operation="QUERY", entityType=LINK))
    assert described_status(response) == (
        500,
        "Reply cannot be encoded: attribute 'capacity' of row 0 is a object,"
        " which AMQP cannot carry",
    )
    read = call(agent, request(operation="READ", type=LINK, identity="1"))
    assert described_status(read)[1].startswith("Reply cannot be encoded: attribute 'capacity'")


def test_failing_provider_is_described_on_one_short_line() -> None:
    def broken() -> list[dict[str, Any]]:
        raise RuntimeError("link table locked\n" + "detail " * 1000)

    response = call(make_agent(**{LINK: broken}), node_request(operation="QUERY", entityType=LINK))
    code, description = described_status(response)
    assert code == 500
    assert description.startswith("RuntimeError: link table locked detail")


def test_ids_and_reply_to_that_are_not_utf8() -> None:
    """Proton decodes the properties' strings only when they are read, so a reply-to or id that
    is not UTF-8 raised inside the agent and escaped to the event loop (which closed the
    client's connection). A reply-to that cannot be read is none: nothing to answer. An id
    that cannot be read is a 400, answered without one."""
    app = amqp_raw.application_properties(amqp_raw.string_map({"operation": "GET-MGMT-NODES"}))
    body = amqp_raw.amqp_value(amqp_raw.map_([]))
    bad = amqp_raw.string(b"\xff\xfe")
    no_reply_to = amqp_raw.properties(amqp_raw.NULL, b"\xff\xfe", amqp_raw.string("c"))
    assert make_agent().handle(raw_request(no_reply_to + app + body)) is None
    for message_id, correlation_id in ((amqp_raw.NULL, bad), (bad, amqp_raw.NULL)):
        properties = amqp_raw.properties(message_id, REPLY_TO, correlation_id)
        response = call(make_agent(), raw_request(properties + app + body))
        assert described_status(response)[0] == 400
        assert "cannot be read: not valid UTF-8" in response.properties["statusDescription"]
        assert response.correlation_id is None
