"""The AMQP Management agent at `$management`, answering as Qpid Dispatch's agent does.

qdstat and qdmanage are the operators' tools for any router in a Dispatch network, so they must
work against Routernet unchanged: same request shapes, same entity type and attribute names, same
status codes. The agent is pure: the engine decodes a request, calls `Agent.handle` and sends the
message it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import fields
from http import HTTPStatus
from typing import Any, NamedTuple, Protocol
from uuid import UUID

import proton

from router.datapath.stats import RouterStats
from router.linkroutes.scoped import ATTRIBUTES as CONN_LINK_ROUTE_ATTRIBUTES
from router.linkroutes.scoped import CONN_LINK_ROUTE, RequestError
from router.management.entitytypes import CONTAINER, HOSTED_NODE

PREFIX = "org.apache.qpid.dispatch."
ROUTER = PREFIX + "router"
LISTENER = PREFIX + "listener"
CONNECTOR = PREFIX + "connector"
CONNECTION = PREFIX + "connection"
LINK = PREFIX + "router.link"
ADDRESS = PREFIX + "router.address"
NODE = PREFIX + "router.node"
LINK_ROUTE = PREFIX + "router.config.linkRoute"
SSL_PROFILE = PREFIX + "sslProfile"
POLICY = PREFIX + "policy"
VHOST = PREFIX + "vhost"
VHOST_STATS = PREFIX + "vhostStats"
# Ours: the containers `(id)/node` reaches (router/containers/), duplicates included.
MANAGEMENT = PREFIX + "management"
AMQP_MANAGEMENT = "org.amqp.management"
_ENTITY = PREFIX + "entity"
_CONFIGURATION = PREFIX + "configurationEntity"
_OPERATIONAL = PREFIX + "operationalEntity"

_BASE_ATTRIBUTES = ("name", "identity", "type")

# Attribute names and order per type, as Dispatch answers a QUERY without attributeNames: its
# C agent's column lists for the types it serves (agent_router.c, agent_connection.c,
# agent_link.c, agent_address.c), and for Python-served types (listener, router.node) the schema's
# own attributes followed by the inherited name, identity, type. The router's delivery counters
# come from RouterStats in its field order. Rows the engine supplies should carry every one of
# these: qdstat does arithmetic on several (e.g. link deliveriesDelayed1Sec, address priority).
ENTITY_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    ROUTER: (
        "name",
        "identity",
        "id",
        "type",
        "mode",
        "area",
        "version",
        "metadata",
        "addrCount",
        "linkCount",
        "nodeCount",
        "linkRouteCount",
        "autoLinkCount",
        "connectionCount",
        *(field.name for field in fields(RouterStats)),
        "deliveriesStuck",
        "linksBlocked",
        "uptimeSeconds",
        "memoryUsage",
        "workerThreads",
    ),
    CONNECTION: (
        "name",
        "identity",
        "host",
        "role",
        "protocol",
        "dir",
        "container",
        "sasl",
        "isAuthenticated",
        "user",
        "isEncrypted",
        "sslProto",
        "sslCipher",
        "properties",
        "sslSsf",
        "tenant",
        "type",
        "ssl",
        "opened",
        "active",
        "adminStatus",
        "operStatus",
        "uptimeSeconds",
        "lastDlvSeconds",
        "enableProtocolTrace",
    ),
    LINK: (
        "name",
        "identity",
        "type",
        "linkName",
        "linkType",
        "linkDir",
        "owningAddr",
        "capacity",
        "peer",
        "undeliveredCount",
        "unsettledCount",
        "deliveryCount",
        "connectionId",
        "adminStatus",
        "operStatus",
        "presettledCount",
        "droppedPresettledCount",
        "acceptedCount",
        "rejectedCount",
        "releasedCount",
        "modifiedCount",
        "deliveriesDelayed1Sec",
        "deliveriesDelayed10Sec",
        "deliveriesStuck",
        "ingressHistogram",
        "priority",
        "settleRate",
        "creditAvailable",
        "zeroCreditSeconds",
    ),
    ADDRESS: (
        "name",
        "identity",
        "type",
        "key",
        "distribution",
        "inProcess",
        "subscriberCount",
        "remoteCount",
        "containerCount",
        "remoteHostRouters",
        "deliveriesIngress",
        "deliveriesEgress",
        "deliveriesTransit",
        "deliveriesToContainer",
        "deliveriesFromContainer",
        "deliveriesEgressRouteContainer",
        "deliveriesIngressRouteContainer",
        "transitOutstanding",
        "trackedDeliveries",
        "priority",
        "deliveriesRedirectedToFallback",
    ),
    LISTENER: (
        "host",
        "port",
        "socketAddressFamily",
        "role",
        "cost",
        "sslProfile",
        "saslMechanisms",
        "authenticatePeer",
        "saslPlugin",
        "requireEncryption",
        "requireSsl",
        "maxFrameSize",
        "maxSessions",
        "maxSessionFrames",
        "idleTimeoutSeconds",
        "initialHandshakeTimeoutSeconds",
        "stripAnnotations",
        "linkCapacity",
        "multiTenant",
        "failoverUrls",
        "healthz",
        "metrics",
        "websockets",
        "http",
        "httpRootDir",
        "messageLoggingComponents",
        "policyVhost",
        "openProperties",
        *_BASE_ATTRIBUTES,
    ),
    # saslPassword is left out: Dispatch's schema marks it hidden.
    CONNECTOR: (
        "host",
        "port",
        "socketAddressFamily",
        "role",
        "cost",
        "sslProfile",
        "saslMechanisms",
        "allowRedirect",
        "maxFrameSize",
        "maxSessions",
        "maxSessionFrames",
        "idleTimeoutSeconds",
        "stripAnnotations",
        "linkCapacity",
        "verifyHostname",
        "saslUsername",
        "messageLoggingComponents",
        "failoverUrls",
        "connectionStatus",
        "connectionMsg",
        "policyVhost",
        "openProperties",
        *_BASE_ATTRIBUTES,
    ),
    NODE: (
        "id",
        "protocolVersion",
        "instance",
        "linkState",
        "nextHop",
        "validOrigins",
        "address",
        "routerLink",
        "cost",
        "lastTopoChange",
        *_BASE_ATTRIBUTES,
    ),
    LINK_ROUTE: (
        "name",
        "identity",
        "type",
        "prefix",
        "pattern",
        "addExternalPrefix",
        "delExternalPrefix",
        "containerId",
        "connection",
        "distribution",
        "direction",
        "operStatus",
    ),
    # Dispatch's schema order; password (and the deprecated passwordFile, certDb) left out.
    SSL_PROFILE: (
        "ciphers",
        "protocols",
        "caCertFile",
        "certFile",
        "privateKeyFile",
        "uidFormat",
        "uidNameMappingFile",
        *_BASE_ATTRIBUTES,
    ),
    # Dispatch's policy entities (router/policy/), in its schema's order.
    POLICY: (
        "maxConnections",
        "maxMessageSize",
        "enableVhostPolicy",
        "enableVhostNamePatterns",
        "policyDir",
        "defaultVhost",
        "connectionsProcessed",
        "connectionsDenied",
        "connectionsCurrent",
        "linksDenied",
        "maxMessageSizeDenied",
        "totalDenials",
        *_BASE_ATTRIBUTES,
    ),
    VHOST: (
        "hostname",
        "aliases",
        "maxConnections",
        "maxMessageSize",
        "maxConnectionsPerUser",
        "maxConnectionsPerHost",
        "allowUnknownUser",
        "groups",
        *_BASE_ATTRIBUTES,
    ),
    VHOST_STATS: (
        "hostname",
        "connectionsApproved",
        "connectionsDenied",
        "connectionsCurrent",
        "sessionDenied",
        "senderDenied",
        "receiverDenied",
        "maxMessageSizeDenied",
        "perUserState",
        "perHostState",
        *_BASE_ATTRIBUTES,
    ),
    CONTAINER: ("containerId", "location", "places", "duplicate", *_BASE_ATTRIBUTES),
    HOSTED_NODE: (
        "nodeType",
        "router",
        "depth",
        "bytes",
        "durable",
        "paged",
        "consumers",
        "producers",
        "enqueued",
        "dequeued",
        "deadLettered",
        "expired",
        "subscriptions",
        *_BASE_ATTRIBUTES,
    ),
    CONN_LINK_ROUTE: CONN_LINK_ROUTE_ATTRIBUTES,
}

_NODE_OPERATIONS = (
    "QUERY",
    "GET-TYPES",
    "GET-ANNOTATIONS",
    "GET-OPERATIONS",
    "GET-ATTRIBUTES",
    "GET-MGMT-NODES",
    "READ",
)


class _Type(NamedTuple):
    bases: tuple[str, ...]
    operations: tuple[str, ...]
    attributes: tuple[str, ...]


# The schema as GET-TYPES/-OPERATIONS/-ATTRIBUTES report it: Dispatch's inheritance, but only the
# operations this agent really performs (entities are read-only for now).
_CONFIG_BASES = (_CONFIGURATION, _ENTITY)
_OPERATIONAL_BASES = (_OPERATIONAL, _ENTITY)
_TYPES: dict[str, _Type] = {
    _ENTITY: _Type((), (), _BASE_ATTRIBUTES),
    _CONFIGURATION: _Type((_ENTITY,), ("READ",), _BASE_ATTRIBUTES),
    _OPERATIONAL: _Type((_ENTITY,), ("READ",), _BASE_ATTRIBUTES),
    AMQP_MANAGEMENT: _Type(_OPERATIONAL_BASES, _NODE_OPERATIONS, _BASE_ATTRIBUTES),
    MANAGEMENT: _Type((AMQP_MANAGEMENT, *_OPERATIONAL_BASES), _NODE_OPERATIONS, _BASE_ATTRIBUTES),
    ROUTER: _Type(_CONFIG_BASES, ("READ",), ENTITY_ATTRIBUTES[ROUTER]),
    LISTENER: _Type(_CONFIG_BASES, ("READ",), ENTITY_ATTRIBUTES[LISTENER]),
    CONNECTOR: _Type(_CONFIG_BASES, ("READ",), ENTITY_ATTRIBUTES[CONNECTOR]),
    CONNECTION: _Type(_OPERATIONAL_BASES, ("READ",), ENTITY_ATTRIBUTES[CONNECTION]),
    LINK: _Type(_OPERATIONAL_BASES, ("READ",), ENTITY_ATTRIBUTES[LINK]),
    ADDRESS: _Type(_OPERATIONAL_BASES, ("READ",), ENTITY_ATTRIBUTES[ADDRESS]),
    NODE: _Type(_OPERATIONAL_BASES, ("READ",), ENTITY_ATTRIBUTES[NODE]),
    LINK_ROUTE: _Type(_CONFIG_BASES, ("READ",), ENTITY_ATTRIBUTES[LINK_ROUTE]),
    SSL_PROFILE: _Type(_CONFIG_BASES, ("READ",), ENTITY_ATTRIBUTES[SSL_PROFILE]),
    POLICY: _Type(_CONFIG_BASES, ("READ",), ENTITY_ATTRIBUTES[POLICY]),
    VHOST: _Type(_CONFIG_BASES, ("READ",), ENTITY_ATTRIBUTES[VHOST]),
    VHOST_STATS: _Type(_OPERATIONAL_BASES, ("READ",), ENTITY_ATTRIBUTES[VHOST_STATS]),
    CONTAINER: _Type(_OPERATIONAL_BASES, ("READ",), ENTITY_ATTRIBUTES[CONTAINER]),
    HOSTED_NODE: _Type(_OPERATIONAL_BASES, ("READ",), ENTITY_ATTRIBUTES[HOSTED_NODE]),
    # The one type a peer may create and delete: routes of its own connection.
    CONN_LINK_ROUTE: _Type(
        _OPERATIONAL_BASES, ("CREATE", "READ", "DELETE"), ENTITY_ATTRIBUTES[CONN_LINK_ROUTE]
    ),
}
# An untyped QUERY defaults to every attribute of every type, in first-seen order.
_ALL_ATTRIBUTES = tuple(dict.fromkeys(a for t in _TYPES.values() for a in t.attributes))
_SELF_ROW = {"name": "self", "identity": "self", "type": MANAGEMENT}


# Bounds on what one request may ask for and on what is quoted back. Proton's codec holds at most
# 65,535 values per section (pn_data's node index is 16 bits): it silently drops the rest of a
# bigger request section on decode and fails to encode a bigger reply, so QUERY checks the size
# of its answer before building it. Descriptions quote input only briefly and stay one short line.
MAX_VALUES = 65535
MAX_ATTRIBUTE_NAMES = 1000
MAX_NAME_LENGTH = 256
QUOTE_LENGTH = 40
MAX_DESCRIPTION = 300
_TOO_LARGE = (
    "Reply too large to encode: {} exceed the {} AMQP values a reply may hold; ask for"
    " fewer rows ('count') or fewer 'attributeNames'"
)


def _quote(value: object) -> str:
    """`value` as a description may quote it: strings and scalars briefly, containers and
    binaries by size, never whole."""
    if isinstance(value, str):
        text = repr(str(value[:QUOTE_LENGTH]))
        return text + "..." if len(value) > QUOTE_LENGTH else text
    if isinstance(value, (bytes, bytearray, memoryview)):
        size = value.nbytes if isinstance(value, memoryview) else len(value)
        return f"binary of {size} bytes"
    if isinstance(value, dict):
        return f"a map of {len(value)} entries"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)} items"
    if isinstance(value, proton.Array):
        return f"an array of {len(value.elements)} items"
    if isinstance(value, proton.Described):
        return "a described value"
    if value is None or isinstance(value, (bool, int, float, UUID)):
        text = repr(value)
    else:
        text = type(value).__name__
    return text if len(text) <= QUOTE_LENGTH else text[:QUOTE_LENGTH] + "..."


def _clip(text: str) -> str:
    """A name or identity as Dispatch's descriptions show it (unquoted), cut short."""
    return text if len(text) <= QUOTE_LENGTH else text[:QUOTE_LENGTH] + "..."


def _one_line(text: str) -> str:
    """A status description: one line of at most MAX_DESCRIPTION characters."""
    line = " ".join(text.split())
    return line if len(line) <= MAX_DESCRIPTION else line[: MAX_DESCRIPTION - 3] + "..."


def _correlation(request: proton.Message) -> Any:
    """The reply's correlation-id: the request's correlation-id, else its message-id (AMQP
    Management; Dispatch's agents copy only the correlation-id and answer null without one), of
    the same AMQP type. Proton hands a binary id over as a memoryview into the request's own
    buffer, which it would encode as null: copy it into bytes, which stay binary. Proton decodes
    ids only when asked, so a string id that is not UTF-8 fails here: a 400, answered with none."""
    correlation = None
    for field, name in (("correlation_id", "correlation-id"), ("id", "message-id")):
        try:
            correlation = getattr(request, field)
        except Exception:
            raise _Failure(
                HTTPStatus.BAD_REQUEST, f"The request's {name} cannot be read: not valid UTF-8"
            ) from None
        if correlation is not None:
            break
    if isinstance(correlation, memoryview):
        return correlation.tobytes()
    if correlation is None or isinstance(correlation, (bytes, str, int, UUID)):
        return correlation
    return None


def _count_values(value: object, limit: int) -> int:
    """How many AMQP values proton needs to encode `value`, counting no further than `limit`+1."""
    count = 0
    stack = [value]
    while stack and count <= limit:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            for key, member in item.items():
                stack += (key, member)
        elif isinstance(item, (list, tuple)):
            stack += item
        elif isinstance(item, proton.Described):
            stack += (item.descriptor, item.value)
        elif isinstance(item, proton.Array):
            count += len(item.elements)
    return count


def _cells(body: Any) -> Iterator[tuple[str, Any]]:
    """The values of a reply body, each with where it sits: a QUERY's by attribute and row, a
    READ's by attribute."""
    if isinstance(body, dict) and isinstance(body.get("results"), list):
        names = body.get("attributeNames") or []
        for i, row in enumerate(body["results"]):
            for name, value in zip(names, row, strict=False):
                yield f"attribute {_quote(name)} of row {i}", value
    elif isinstance(body, dict):
        for key, value in body.items():
            yield f"attribute {_quote(key)}", value
    elif isinstance(body, list):
        for i, value in enumerate(body):
            yield f"item {i}", value
    else:
        yield "the body", body


def _unencodable(body: Any) -> str:
    """Why proton could not encode a reply with `body`, as a clear one-line description."""
    if _count_values(body, MAX_VALUES) > MAX_VALUES:
        return _TOO_LARGE.format("its values", MAX_VALUES)
    for where, value in _cells(body):
        data = proton.Data()
        try:
            data.put_object(value)
        except Exception:
            kind = type(value).__name__
            return f"Reply cannot be encoded: {where} is a {kind}, which AMQP cannot carry"
    return "Reply cannot be encoded as AMQP"


class _Failure(Exception):
    def __init__(self, status: HTTPStatus, description: str) -> None:
        super().__init__(description)
        self.status = status
        self.description = description


def _is_a(entity_type: str, base: str) -> bool:
    return entity_type == base or base in _TYPES[entity_type].bases


def _resolve(name: object) -> str:
    """Accept long or short type names, as Dispatch's tools do (`router` or
    `org.apache.qpid.dispatch.router`). Dispatch answers an unknown type with 400."""
    if isinstance(name, str):
        for candidate in (name, PREFIX + name):
            if candidate in _TYPES:
                return candidate
    raise _Failure(HTTPStatus.BAD_REQUEST, f"No such entity type {_quote(name)}")


def _complete(entity_type: str, row: Mapping[str, Any]) -> dict[str, Any]:
    """Every row answers name, identity and type; like Dispatch, a missing name is the
    identity (and the reverse), and the type is the one whose callback produced the row."""
    full = dict(row)
    full["type"] = entity_type
    if full.get("identity") is None:
        full["identity"] = full.get("name")
    if full.get("name") is None:
        full["name"] = full["identity"]
    return full


def _names(properties: Mapping[str, Any]) -> dict[str, str]:
    """The request's identity and name, those given, in that order."""
    ids: dict[str, str] = {}
    for k in ("identity", "name"):
        value = properties.get(k)
        if value is None:
            continue
        # Names and identities are strings; a bare integer identity is taken as its digits.
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise _Failure(HTTPStatus.BAD_REQUEST, f"'{k}' must be a string, got {_quote(value)}")
        ids[k] = str(value) if isinstance(value, str) else str(int(value))
    return ids


def _integer(properties: Mapping[str, Any], key: str) -> int | None:
    value = properties.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise _Failure(HTTPStatus.BAD_REQUEST, f"'{key}' must be an integer, got {_quote(value)}")
    return value


class ScopedLinkRoutes(Protocol):
    """Connection-scoped link routes (router/linkroutes/relay.py): created, deleted and seen by the
    connection a request came on."""

    def create_scoped(self, conn: Any, name: str | None, attributes: object) -> dict[str, Any]: ...

    def delete_scoped(self, conn: Any, name: str | None, identity: str | None) -> int: ...

    def scoped_rows(self, conn: Any) -> list[dict[str, Any]]: ...


class Agent:
    """Answers management requests for router `router_id`.

    `entities` maps long type names (keys of ENTITY_ATTRIBUTES) to callbacks returning the
    current rows of that type; a type without a callback simply has no rows. `mgmt_nodes`
    returns the management addresses (`amqp:/_topo/0/<id>/$management`) of the routers known in
    the network. GET-MGMT-NODES answers them with this router's own first, listed even if the
    callback omits it: qdstat --all-routers visits each and takes fewer than two to mean a
    standalone router. With `scoped`, a peer may CREATE, READ and DELETE connection-scoped link
    routes for the connection its request came on (`handle`'s `requester`), and sees only those.
    """

    def __init__(
        self,
        router_id: str,
        entities: Mapping[str, Callable[[], list[dict[str, Any]]]],
        mgmt_nodes: Callable[[], list[str]],
        scoped: ScopedLinkRoutes | None = None,
        may_write: Callable[[Any], str | None] = lambda origin: None,
    ) -> None:
        unknown = set(entities) - set(ENTITY_ATTRIBUTES)
        if unknown:
            raise ValueError(f"no schema for entity types {sorted(unknown)}")
        self._own_node = f"amqp:/_topo/0/{router_id}/$management"
        self._entities = dict(entities)
        self._mgmt_nodes = mgmt_nodes
        self._scoped = scoped
        self._may_write = may_write
        # The connection the request being handled came on: scoped entities answer for it.
        self._requester: Any = None
        # The link it came on: whether it may write (router/management/authorization.py).
        self._origin: Any = None
        if scoped is not None:
            self._entities[CONN_LINK_ROUTE] = lambda: scoped.scoped_rows(self._requester)
        self._node_operations: dict[str, Callable[[Mapping[str, Any], Any], Any]] = {
            "QUERY": self._query,
            "GET-TYPES": self._get_types,
            "GET-ANNOTATIONS": self._get_annotations,
            "GET-OPERATIONS": self._get_operations,
            "GET-ATTRIBUTES": self._get_attributes,
            "GET-MGMT-NODES": self._get_mgmt_nodes,
        }

    def handle(
        self, request: proton.Message, requester: Any = None, origin: Any = None
    ) -> proton.Message | None:
        """The response to `request`, which came on connection `requester` by link `origin`
        (None: not over a connection), or None when it has no reply-to (nothing can be
        answered; Dispatch drops such requests too). Never raises: failures become error
        responses. A CREATE, UPDATE or DELETE is answered 403 when `may_write(origin)` says
        why not, whatever the entity."""
        try:
            reply_to = request.reply_to
        except Exception:  # proton decodes it only now: an address not UTF-8 is none
            return None
        if not reply_to:
            return None
        correlation = None
        self._requester = requester
        self._origin = origin
        try:
            correlation = _correlation(request)
            status, body = self._perform(request)
            response = self._response(reply_to, correlation, status, status.phrase, body)
            # Encode now so that a reply AMQP cannot carry (too big, or a row value of a type it
            # has no encoding for) is answered with a 500 rather than failing later in the engine
            # and leaving the client waiting.
            try:
                response.encode()
            except Exception:
                raise _Failure(HTTPStatus.INTERNAL_SERVER_ERROR, _unencodable(body)) from None
            return response
        except _Failure as failure:
            status, description = failure.status, failure.description
        except Exception as error:
            status = HTTPStatus.INTERNAL_SERVER_ERROR
            description = f"{type(error).__name__}: {error}"
        finally:
            self._requester = None
            self._origin = None
        return self._response(reply_to, correlation, status, description, {})

    @staticmethod
    def _response(
        reply_to: str, correlation: Any, status: HTTPStatus, description: str, body: Any
    ) -> proton.Message:
        return proton.Message(
            address=reply_to,
            correlation_id=correlation,
            properties={
                "statusCode": proton.int32(status),
                "statusDescription": _one_line(description),
            },
            body=body,
        )

    def _perform(self, request: proton.Message) -> tuple[HTTPStatus, Any]:
        properties = request.properties if request.properties is not None else {}
        if not isinstance(properties, dict):
            raise _Failure(HTTPStatus.BAD_REQUEST, "Application properties must be a map")
        operation = properties.get("operation")
        if operation is None:
            raise _Failure(HTTPStatus.BAD_REQUEST, "No 'operation' property")
        if not isinstance(operation, str):
            raise _Failure(
                HTTPStatus.BAD_REQUEST, f"'operation' must be a string, got {_quote(operation)}"
            )
        operation = operation.upper()
        shown = _quote(operation)
        node_operation = self._node_operations.get(operation)
        if node_operation is not None:
            return HTTPStatus.OK, node_operation(properties, request.body)
        if operation == "READ":
            return HTTPStatus.OK, self._read(properties)
        if operation in ("CREATE", "UPDATE", "DELETE"):
            refusal = self._may_write(self._origin)
            if refusal is not None:
                raise _Failure(HTTPStatus.FORBIDDEN, refusal)
        if operation in ("CREATE", "DELETE") and self._scoped is not None:
            requested = properties.get("type")
            if requested is not None and _resolve(requested) == CONN_LINK_ROUTE:
                return self._write_scoped(operation, properties, request.body)
        if operation in ("CREATE", "UPDATE", "DELETE"):
            raise _Failure(
                HTTPStatus.NOT_IMPLEMENTED,
                f"Operation {shown} not implemented: Routernet's management is read-only but"
                f" for {CONN_LINK_ROUTE}",
            )
        raise _Failure(
            HTTPStatus.NOT_IMPLEMENTED,
            f"Operation {shown} not implemented for '{MANAGEMENT}' {list(_NODE_OPERATIONS)}",
        )

    def _write_scoped(
        self, operation: str, properties: Mapping[str, Any], body: Any
    ) -> tuple[HTTPStatus, Any]:
        """CREATE or DELETE of a connection-scoped link route, for the requester's connection."""
        assert self._scoped is not None
        ids = _names(properties)
        if self._requester is None:
            raise _Failure(HTTPStatus.BAD_REQUEST, "Can only be done over a connection")
        try:
            if operation == "CREATE":
                name = ids.get("name")
                if name is None and isinstance(body, Mapping) and isinstance(body.get("name"), str):
                    name = body["name"]
                return HTTPStatus.CREATED, self._scoped.create_scoped(self._requester, name, body)
            status = self._scoped.delete_scoped(
                self._requester, ids.get("name"), ids.get("identity")
            )
            return HTTPStatus(status), {}
        except RequestError as e:
            raise _Failure(HTTPStatus(e.status), e.description) from None

    def _types_under(self, base: str | None) -> list[str]:
        return [
            t
            for t in _TYPES
            if (base is None or _is_a(t, base)) and (t == MANAGEMENT or t in self._entities)
        ]

    def _rows(self, entity_type: str) -> Sequence[Mapping[str, Any]]:
        if entity_type == MANAGEMENT:
            return [_SELF_ROW]
        return self._entities[entity_type]()

    def _query(self, properties: Mapping[str, Any], body: Any) -> dict[str, Any]:
        # Like Dispatch's C agent, fall back to `type` when `entityType` is absent; the
        # management node's own type there (qdstat always sends it) means no restriction.
        requested = properties.get("entityType")
        if not requested:
            requested = properties.get("type")
            if requested in (AMQP_MANAGEMENT, MANAGEMENT):
                requested = None
        entity_type = _resolve(requested) if requested else None
        names = self._attribute_names(body, entity_type)
        offset = _integer(properties, "offset") or 0
        count = _integer(properties, "count")
        if offset < 0:
            raise _Failure(HTTPStatus.BAD_REQUEST, f"'offset' must not be negative: {offset}")
        rows = [(t, row) for t in self._types_under(entity_type) for row in self._rows(t)]
        # Dispatch's C agent stands for a missing count with -1; any negative count means all.
        page = rows[offset:] if count is None or count < 0 else rows[offset : offset + count]
        # The answer holds at least its map, two keys, two lists, the names and a list per row
        # with a value per name: refuse before building what proton could never encode.
        least = 5 + len(names) + len(page) * (1 + len(names))
        if least > MAX_VALUES:
            raise _Failure(
                HTTPStatus.INTERNAL_SERVER_ERROR,
                _TOO_LARGE.format(f"{len(page)} rows of {len(names)} attributes", MAX_VALUES),
            )
        results = []
        for t, row in page:
            full = _complete(t, row)
            results.append([full.get(name) for name in names])
        return {"attributeNames": names, "results": results}

    @staticmethod
    def _attribute_names(body: Any, entity_type: str | None) -> list[str]:
        """The requested names in request order; an absent or empty list means all of the type.
        A name the type lacks comes back as null rather than failing the query, as Dispatch's
        C agent does, so tools of other Dispatch versions can probe for optional attributes."""
        if body is not None and not isinstance(body, dict):
            raise _Failure(HTTPStatus.BAD_REQUEST, f"QUERY body must be a map, got {_quote(body)}")
        requested = (body or {}).get("attributeNames")
        if requested is None:
            requested = []
        if not isinstance(requested, list):
            raise _Failure(
                HTTPStatus.BAD_REQUEST,
                f"'attributeNames' must be a list of strings, got {_quote(requested)}",
            )
        # Of a longer list proton delivers only what fits in MAX_VALUES, silently: the count
        # told is what arrived.
        if len(requested) > MAX_ATTRIBUTE_NAMES:
            raise _Failure(
                HTTPStatus.BAD_REQUEST,
                f"'attributeNames' lists {len(requested)} names; at most {MAX_ATTRIBUTE_NAMES}",
            )
        for name in requested:
            if not isinstance(name, str):
                raise _Failure(
                    HTTPStatus.BAD_REQUEST,
                    f"'attributeNames' must be a list of strings, not of {_quote(name)}",
                )
            if len(name) > MAX_NAME_LENGTH:
                raise _Failure(
                    HTTPStatus.BAD_REQUEST,
                    f"Attribute name {_quote(name)} is longer than {MAX_NAME_LENGTH} characters",
                )
        if requested:
            return list(requested)
        return list(_ALL_ATTRIBUTES if entity_type is None else _TYPES[entity_type].attributes)

    def _read(self, properties: Mapping[str, Any]) -> dict[str, Any]:
        """Find one entity by identity (or name, if no identity is given), as Dispatch does."""
        ids = _names(properties)
        requested = properties.get("type")
        entity_type = _resolve(requested) if requested else None
        if not ids:
            if entity_type is None or _is_a(MANAGEMENT, entity_type):
                return dict(_SELF_ROW)
            raise _Failure(HTTPStatus.BAD_REQUEST, f"{entity_type}: No name or identity provided")
        described = " ".join(f"{k}={_clip(v)}" for k, v in ids.items())
        key, value = next(iter(ids.items()))
        found = []
        for t in self._types_under(entity_type):
            for row in self._rows(t):
                full = _complete(t, row)
                if full[key] is not None and str(full[key]) == value:
                    found.append((t, full))
        if not found:
            raise _Failure(HTTPStatus.NOT_FOUND, f"No entity with {described}")
        if len(found) > 1:
            raise _Failure(
                HTTPStatus.BAD_REQUEST,
                f"{len(found)} entities with {key}={_clip(value)}; give 'type' to choose one",
            )
        t, full = found[0]
        if any(str(full[k]) != v for k, v in ids.items()):
            raise _Failure(HTTPStatus.BAD_REQUEST, f"Conflicting {described}")
        return {name: full.get(name) for name in _TYPES[t].attributes}

    @staticmethod
    def _filter(properties: Mapping[str, Any]) -> str | None:
        requested = properties.get("entityType")
        return _resolve(requested) if requested else None

    def _get_types(self, properties: Mapping[str, Any], body: Any) -> dict[str, list[str]]:
        base = self._filter(properties)
        return {t: list(info.bases) for t, info in _TYPES.items() if base is None or _is_a(t, base)}

    @staticmethod
    def _get_annotations(properties: Mapping[str, Any], body: Any) -> dict[str, list[str]]:
        """Dispatch defines no annotations and answers an empty map; so do we."""
        return {}

    # Dispatch filters GET-OPERATIONS and GET-ATTRIBUTES by exact type, GET-TYPES by ancestry.
    def _get_operations(self, properties: Mapping[str, Any], body: Any) -> dict[str, list[str]]:
        only = self._filter(properties)
        return {t: list(info.operations) for t, info in _TYPES.items() if only in (None, t)}

    def _get_attributes(self, properties: Mapping[str, Any], body: Any) -> dict[str, list[str]]:
        only = self._filter(properties)
        return {t: list(info.attributes) for t, info in _TYPES.items() if only in (None, t)}

    def _get_mgmt_nodes(self, properties: Mapping[str, Any], body: Any) -> list[str]:
        return list(dict.fromkeys([self._own_node, *self._mgmt_nodes()]))
