"""The custom resources Router, Address, LinkRoute and Gateway: the one definition of their API.

These pydantic models are the single source of truth. ``resources/crds.py`` turns them into the CRDs
the API server enforces (OpenAPI schema, defaults, enums, CEL rules), and the operator and the local
backend validate objects with the very same models, so a file that ``routernet up`` accepts is one
``kubectl apply`` accepts too, and the other way round.

Every cross-field rule is written once, as a :class:`Rule`: its CEL text goes into the CRD's
``x-kubernetes-validations`` and its Python twin runs in the model's validator, with the same
message. Field names are the API's (camelCase), as in ``router/config/models.py``, so the planner
maps one onto the other without a translation table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_serializer,
    field_validator,
)

from router import __version__
from router.config.policy import RouterPolicy
from router_operator.resources.autoscaling import AutoscalingSpec, AutoscalingStatus
from router_operator.resources.gateway import GatewayRouting
from router_operator.resources.nodes import (
    NODE_TYPE_UNCHANGED,
    STORE_UNCHANGED,
    AddressNode,
    RouterStore,
)
from router_operator.resources.spec import (
    IssuerName,
    Rule,
    SecretName,
    StrictSpec,
    constrained,
)

GROUP = "routernet.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
CATEGORY = "routernet"

PAUSE_ANNOTATION = f"{GROUP}/paused"
"""Set to "true" on any Routernet resource to stop reconciling it (and say so in a condition)."""

READY = "Ready"
"""The aggregate condition every kind reports; printer columns read it."""
RECONCILIATION_PAUSED = "ReconciliationPaused"
"""The condition (status "True") a paused resource shows, so nobody wonders why it is stale."""

DEFAULT_NETWORK = "default"
DEFAULT_ROUTER_IMAGE = f"routernet/router:{__version__}"
"""Used when a Router names no image. Deliberately not a CRD default: a default the API server
writes into every stored object would pin old routers to the image of the operator release
that created them; resolved by the operator instead, an operator upgrade upgrades them."""
DEFAULT_COLLECTOR_IMAGE = f"routernet/collector:{__version__}"
"""The telemetry collectors' image (Dockerfile.collector) unless ROUTERNET_COLLECTOR_IMAGE
names another: the router image has no Parquet writer."""
DEFAULT_PIPELINE_IMAGE = f"routernet/pipeline:{__version__}"
"""The recommendation CronJobs' image (Dockerfile.pipeline) unless ROUTERNET_RECOMMEND_IMAGE
names another."""

ROUTER_CONTAINER = "router"
"""The router's container in the pod template; podTemplate overrides match containers by name."""
AMQP_PORT = 5672
INTER_ROUTER_PORT = 55672
"""Where interior routers listen for each other; the operator adds this listener itself."""
EDGE_PORT = 45672
"""Where interior routers listen for edge routers; the operator adds this listener itself."""
METRICS_PORT = 9090
"""Where every router serves /metrics, /healthz and /readyz (router.telemetry.config)."""
RESERVED_PORTS = (INTER_ROUTER_PORT, EDGE_PORT, METRICS_PORT)

ROUTER_NAME_MAX_LENGTH = 45
"""A Router names its StatefulSet (whose revision-hash label allows at most 52 characters), its
pods and its Services (DNS-1035 labels of at most 63) with suffixes of its own: 45 leaves room."""


_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_DNS1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
# Router addresses: tokens split by '.' or '/', none empty, no whitespace (router/config/models.py).
_PREFIX = r"^[^./\s*#]+([./][^./\s*#]+)*$"
_PATTERN = r"^(\*|#|[^./\s*#]+)([./](\*|#|[^./\s*#]+))*$"
_ADDRESS = r"^[^./\s]+([./][^./\s]+)*$"
_HOST = (
    r"^([A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?"  # a host name or IPv4 literal
    r"|\[?[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*\]?)$"  # an IPv6 literal, brackets optional
)
# Kubernetes' resource.Quantity, as its own CRDs spell it.
_QUANTITY = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

NetworkName = constrained(
    "network name",
    _DNS_LABEL,
    63,
    "lower-case letters, digits and '-', at most 63 characters (it is used as a label value)",
)
AddressPrefix = constrained(
    "prefix",
    _PREFIX,
    1000,
    "non-empty tokens separated by '.' or '/', no whitespace, no '*' or '#' (use pattern)",
)
AddressPattern = constrained(
    "pattern",
    _PATTERN,
    1000,
    "non-empty tokens separated by '.' or '/', no whitespace; '*' and '#' only as whole tokens",
)
AddressName = constrained(
    "address", _ADDRESS, 1000, "non-empty tokens separated by '.' or '/', no whitespace"
)
ContainerId = constrained("container id", r"^\S+$", 1000, "non-empty, no whitespace")
HostName = constrained("host", _HOST, 253, "a host name or an IP address")
ImageName = constrained("image", r"^\S+$", 1000, "non-empty, no whitespace")
RouterName = constrained(
    "Router name",
    _DNS1035_LABEL,
    ROUTER_NAME_MAX_LENGTH,
    "a DNS-1035 label (lower-case letters, digits, '-', starting with a letter) of at most"
    f" {ROUTER_NAME_MAX_LENGTH} characters: it names the StatefulSet, the pods and the Services",
)


def _check_quantity(value: int | str) -> int | str:
    if isinstance(value, str) and not re.fullmatch(_QUANTITY, value):
        raise ValueError(f"{value!r} is not a valid quantity (e.g. 100m, 0.5, 256Mi, 1G)")
    return value


Quantity = Annotated[
    int | str,
    AfterValidator(_check_quantity),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": _QUANTITY,
            "x-kubernetes-int-or-string": True,
        }
    ),
]

Port = Annotated[int, Field(ge=1, le=65535)]
UserName = Annotated[str, Field(min_length=1, max_length=1024)]
SaslMechanism = Literal["ANONYMOUS", "PLAIN"]
Distribution = Literal["closest", "balanced", "multicast"]
UndeliverableAction = Literal["drop", "hold", "redirect"]
Direction = Literal["in", "out", "both"]

_FREE_FORM = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def _unique(values: list[Any], what: str) -> list[Any]:
    seen: set[Any] = set()
    for value in values:
        if value in seen:
            raise ValueError(f"duplicate {what} {value!r}")
        seen.add(value)
    return values


def _exactly_one(a: str, b: str) -> Rule:
    return Rule(
        rule=f"has(self.{a}) != has(self.{b})",
        message=f"exactly one of {a} or {b} is required",
        holds=lambda s: (getattr(s, a) is None) != (getattr(s, b) is None),
    )


# --- Router -------------------------------------------------------------------------------

_NOT_RESERVED = Rule(
    rule=" && ".join(f"self != {port}" for port in RESERVED_PORTS),
    message=(
        f"ports {INTER_ROUTER_PORT}, {EDGE_PORT} and {METRICS_PORT} are reserved for the"
        " inter-router and edge listeners and the metrics endpoint the operator adds"
    ),
    holds=lambda port: port not in RESERVED_PORTS,
)
"""On a listener's port itself, so that the API server names the port, not the listener."""


class RouterListener(StrictSpec):
    """A listener for clients. The operator adds the inter-router and edge listeners itself."""

    rules: ClassVar[tuple[Rule, ...]] = (
        # saslMechanisms and authenticatePeer have defaults, so stored listeners always have
        # them; the rules still read them behind has(), absent meaning ANONYMOUS and false.
        Rule(
            rule=(
                "!(has(self.saslMechanisms) && 'PLAIN' in self.saslMechanisms)"
                " || has(self.saslUsersSecret)"
            ),
            message="PLAIN needs saslUsersSecret, the Secret holding the users' sasldb",
            holds=lambda s: "PLAIN" not in s.saslMechanisms or s.saslUsersSecret is not None,
        ),
        Rule(
            rule=(
                "(has(self.saslMechanisms) && 'PLAIN' in self.saslMechanisms)"
                " || !has(self.saslUsersSecret)"
            ),
            message="saslUsersSecret is only used with PLAIN in saslMechanisms",
            holds=lambda s: "PLAIN" in s.saslMechanisms or s.saslUsersSecret is None,
        ),
        Rule(
            rule=(
                "!has(self.authenticatePeer) || !self.authenticatePeer"
                " || (has(self.saslMechanisms) && self.saslMechanisms.exists(m, m != 'ANONYMOUS'))"
            ),
            message="authenticatePeer requires a mechanism other than ANONYMOUS in saslMechanisms",
            holds=lambda s: not s.authenticatePeer or bool(set(s.saslMechanisms) - {"ANONYMOUS"}),
        ),
    )

    port: Annotated[Port, AfterValidator(_NOT_RESERVED.check)] = Field(
        description=(
            "TCP port, unique among the listeners; the client Service exposes it."
            f" {INTER_ROUTER_PORT}, {EDGE_PORT} and {METRICS_PORT} are reserved."
        ),
        json_schema_extra={"x-kubernetes-validations": [_NOT_RESERVED.cel()]},
    )
    role: Literal["normal", "route-container"] = Field(
        default="normal",
        description=(
            "normal: clients; route-container: brokers and services that link routes reach"
            " by container id (LinkRoute containerId)."
        ),
    )
    tlsSecret: SecretName | None = Field(
        default=None,
        description=(
            "A kubernetes.io/tls Secret (tls.crt, tls.key) in the Router's namespace: the"
            " listener serves AMQPS only (clients that do not start TLS are refused) with this"
            " certificate. Clients are not asked for certificates (a ca.crt in the Secret is not"
            " used). Adding or removing it restarts the pods (rolling); a renewed certificate is"
            " used from the pods' next restart. Not available to local routers (routernet up)."
        ),
    )
    saslMechanisms: Annotated[
        list[SaslMechanism], AfterValidator(lambda v: _unique(v, "SASL mechanism"))
    ] = Field(
        default_factory=lambda: ["ANONYMOUS"],
        min_length=1,
        max_length=2,
        description="SASL mechanisms offered to clients.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    saslUsersSecret: SecretName | None = Field(
        default=None,
        description=(
            "With PLAIN: a Secret whose key users.sasldb is a Cyrus sasldb (saslpasswd2 -c -f"
            " users.sasldb -u REALM USER); clients log in as USER@REALM."
        ),
    )
    authenticatePeer: bool = Field(
        default=False, description="Refuse clients that authenticate as ANONYMOUS."
    )


def _unique_ports(listeners: list[RouterListener]) -> list[RouterListener]:
    _unique([listener.port for listener in listeners], "listener port")
    return listeners


class ResourceRequirements(StrictSpec):
    """The router container's requests and limits (Kubernetes' ResourceRequirements).

    A bounded router needs a memory limit: unbounded buffering and OOM kills are what users of
    other router operators complain about most, hence a default.
    """

    requests: dict[str, Quantity] | None = Field(
        default=None, description="Minimum resources, e.g. {cpu: 100m, memory: 64Mi}."
    )
    limits: dict[str, Quantity] | None = Field(
        default=None, description="Maximum resources, e.g. {memory: 256Mi}."
    )


class PodMetadata(StrictSpec):
    """Labels and annotations added to the router pods."""

    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class PodTemplateOverrides(StrictSpec):
    """Merged over the pod template the operator renders."""

    metadata: PodMetadata | None = Field(
        default=None, description="Labels and annotations added to the operator's own."
    )
    spec: Annotated[dict[str, Any], WithJsonSchema(_FREE_FORM)] | None = Field(
        default=None,
        description=(
            "A PodSpec fragment merged over the operator's (nodeSelector, tolerations, affinity,"
            " priorityClassName, securityContext, ...); containers merge by name, the router's"
            f" is {ROUTER_CONTAINER!r}."
        ),
    )


def _default_resources() -> ResourceRequirements:
    return ResourceRequirements(
        requests={"cpu": "100m", "memory": "64Mi"}, limits={"memory": "256Mi"}
    )


class IssuerReference(StrictSpec):
    """A cert-manager issuer (cert-manager.io/v1), named as a Certificate's issuerRef."""

    name: IssuerName = Field(description="The Issuer (in the Router's namespace) or ClusterIssuer.")
    kind: Literal["Issuer", "ClusterIssuer"] = Field(default="Issuer")
    group: str = Field(
        default="cert-manager.io",
        min_length=1,
        description="The issuer's API group: cert-manager.io, or an external issuer's.",
    )


class RouterSpec(StrictSpec):
    """A set of identical routers (a StatefulSet) in a router network. Interior routers of one
    network, in one namespace, form a full mesh; edge routers attach to its interiors."""

    rules: ClassVar[tuple[Rule, ...]] = (
        # A router process has one Cyrus SASL configuration, hence one user database.
        # has(): the API server evaluates the rule against spec's default, {}, when the CRD is
        # created, and listeners is not there (nested defaults are not filled in first).
        Rule(
            rule=(
                "!has(self.listeners) || self.listeners.all(a, !has(a.saslUsersSecret)"
                " || self.listeners.all(b,"
                " !has(b.saslUsersSecret) || b.saslUsersSecret == a.saslUsersSecret))"
            ),
            message="all listeners with PLAIN must name the same saslUsersSecret",
            holds=lambda s: len({lst.saslUsersSecret for lst in s.listeners} - {None}) <= 1,
        ),
        STORE_UNCHANGED,
    )

    replicas: int = Field(
        default=1, ge=0, description="Number of routers (pods <name>-0, <name>-1, ...)."
    )
    role: Literal["interior", "edge"] = Field(
        default="interior",
        description=(
            "interior: joins the network's mesh; edge: attaches to the network's interior"
            " routers (one active uplink, the others standing by), for many clients."
        ),
    )
    network: NetworkName = Field(
        default=DEFAULT_NETWORK,
        description="The router network, within this namespace, that these routers belong to.",
    )
    listeners: Annotated[list[RouterListener], AfterValidator(_unique_ports)] = Field(
        default_factory=lambda: [RouterListener(port=AMQP_PORT)],
        max_length=16,
        description="Listeners for clients; by default one plain AMQP listener on 5672.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["port"],
        },
    )
    linkCapacity: int = Field(
        default=250,
        ge=1,
        description="Credit granted per incoming link: bounds the router's memory per sender.",
    )
    resources: ResourceRequirements = Field(
        default_factory=_default_resources,
        description="Requests and limits of the router container.",
    )
    image: ImageName | None = Field(
        default=None,
        description="The router image; unset: the one the operator is configured with.",
    )
    podTemplate: PodTemplateOverrides | None = Field(
        default=None, description="Overrides merged over the operator's pod template."
    )
    autoscaling: AutoscalingSpec | None = Field(
        default=None,
        description=(
            "Scale this Router's replicas on its routers' load (the HPA's algorithm and"
            " behavior); replicas is then set by the autoscaler."
        ),
    )
    store: RouterStore | None = Field(
        default=None,
        description=(
            "A PersistentVolumeClaim per pod, for the queues and topics of Addresses whose"
            " node names this Router; immutable (a StatefulSet's volumeClaimTemplates cannot"
            " change): give it when the Router is created."
        ),
    )
    managementWriters: list[UserName] = Field(
        default_factory=list,
        max_length=64,
        description=(
            "Users who may CREATE, UPDATE and DELETE through its routers' $management (a"
            " broker registering connection-scoped link routes, say): a SASL PLAIN user as"
            " USER@REALM, a TLS client certificate's subject, or 'anonymous' for every client"
            " that does not authenticate. Reads stay open; the network's routers may always;"
            " anyone else gets 403. Empty (the default): nobody. Applied live."
        ),
    )
    interRouterTLS: Literal["enabled", "disabled"] = Field(
        default="enabled",
        description=(
            "enabled: its inter-router and edge listeners take mutual TLS only, from routers"
            " with a certificate of the network's CA (the operator issues a CA per network and"
            " a certificate per router pod, in Secrets it owns, and renews them before they"
            " expire without dropping a connection); disabled: they listen in the clear, for"
            " any peer that reaches them. Connections to this Router follow it."
        ),
    )
    interRouterIssuer: IssuerReference | None = Field(
        default=None,
        description=(
            "With interRouterTLS enabled: a cert-manager Issuer or ClusterIssuer that signs the"
            " certificates of the network's router pods instead of the operator's own CA. The"
            " operator asks for one Certificate per pod (<pod>-issued-tls: its DNS names, 90"
            " days, renewed 30 days before its end) and gives the pods what cert-manager"
            " issues, with the issuer's ca.crt as the network's CA. Every Router of a network"
            " names the same issuer, or none."
        ),
    )
    policy: RouterPolicy | None = Field(
        default=None,
        description=(
            "Qpid Dispatch's policy for its routers, each on its own: maxConnections on the"
            " listeners, and with enableVhostPolicy the vhosts that admit clients' connections"
            " (by the Open's hostname), limit their connections, sessions, links and message"
            " size, and say which addresses each group of users may send to and receive from;"
            " Dispatch's attribute names and meanings (router/config/policy.py). Applied live:"
            " admitted connections keep what they were given."
        ),
    )


# --- Address --------------------------------------------------------------------------------


class UndeliverablePolicy(StrictSpec):
    """What happens to a message for which no consumer exists."""

    # action has a default (drop), so stored objects always have it; the rules still read it
    # behind has(), absent meaning drop.
    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            rule="!has(self.action) || self.action != 'redirect' || has(self.fallbackAddress)",
            message="fallbackAddress is required when action is redirect",
            holds=lambda s: s.action != "redirect" or s.fallbackAddress is not None,
        ),
        Rule(
            rule="(has(self.action) && self.action == 'redirect') || !has(self.fallbackAddress)",
            message="fallbackAddress is only allowed when action is redirect",
            holds=lambda s: s.action == "redirect" or s.fallbackAddress is None,
        ),
        Rule(
            rule="(has(self.action) && self.action == 'hold') || !has(self.holdTimeoutSeconds)",
            message="holdTimeoutSeconds is only allowed when action is hold",
            holds=lambda s: s.action == "hold" or s.holdTimeoutSeconds is None,
        ),
    )

    action: UndeliverableAction = Field(
        default="drop",
        description=(
            "drop: pre-settled messages are discarded and counted, unsettled ones released to"
            " the sender; hold: kept until a consumer attaches (up to holdTimeoutSeconds);"
            " redirect: sent to fallbackAddress."
        ),
    )
    holdTimeoutSeconds: int | None = Field(
        default=None,
        ge=1,
        le=86400,
        description="action hold: how long messages wait for a consumer (default 30).",
    )
    fallbackAddress: AddressName | None = Field(
        default=None, description="action redirect: where messages go instead."
    )


def _same_key(field: str) -> Rule:
    """Changing what an Address matches would silently re-route traffic already flowing under
    the old one; deleting it and creating another says so. A field-level ``self == oldSelf``
    rule would not fire when the field is added or removed (a switch from prefix to pattern),
    so the rule sits on the spec and compares presence too."""
    return Rule(
        rule=(
            f"has(self.{field}) == has(oldSelf.{field})"
            f" && (!has(self.{field}) || self.{field} == oldSelf.{field})"
        ),
        message=f"{field} is immutable: delete the Address and create a new one",
        holds_on_update=lambda new, old: getattr(new, field) == getattr(old, field),
    )


RESERVED_ADDRESS_PREFIX = "_routernet"
"""The routers' own addresses (telemetry: router.telemetry.schema.TELEMETRY_ADDRESS)."""


def _reserved(value: str | None) -> bool:
    if value is None:
        return False
    return value.replace("/", ".").split(".", 1)[0] == RESERVED_ADDRESS_PREFIX


def _not_reserved(field: str) -> Rule:
    """No Address may take over the routers' own addresses under ``_routernet``."""
    p = RESERVED_ADDRESS_PREFIX
    return Rule(
        rule=(
            f"!has(self.{field}) || !(self.{field} == '{p}'"
            f" || self.{field}.startsWith('{p}.') || self.{field}.startsWith('{p}/'))"
        ),
        message=f"{field} under '{p}' is reserved for the routers' own addresses (telemetry)",
        holds=lambda s: not _reserved(getattr(s, field)),
    )


class AddressSpec(StrictSpec):
    """Routing semantics for a family of addresses, on every router of a network."""

    rules: ClassVar[tuple[Rule, ...]] = (
        _exactly_one("prefix", "pattern"),
        _same_key("prefix"),
        _same_key("pattern"),
        _not_reserved("prefix"),
        _not_reserved("pattern"),
        NODE_TYPE_UNCHANGED,
    )

    network: NetworkName = Field(
        default=DEFAULT_NETWORK, description="The router network, within this namespace."
    )
    prefix: AddressPrefix | None = Field(
        default=None,
        description=(
            "Matches this address and every address below it (whole tokens split by '.' or"
            " '/'). Exactly one of prefix or pattern; immutable."
        ),
    )
    pattern: AddressPattern | None = Field(
        default=None,
        description=(
            "Tokens split by '.' or '/'; '*' matches one token, '#' zero or more. Exactly one"
            " of prefix or pattern; immutable."
        ),
    )
    distribution: Distribution = Field(
        default="balanced",
        description=(
            "closest: the nearest consumer; balanced: the consumer with the fewest outstanding"
            " deliveries (weighed by path cost); multicast: a copy to every consumer."
        ),
    )
    undeliverable: UndeliverablePolicy = Field(
        default_factory=UndeliverablePolicy,
        description="What happens to a message for which no consumer exists.",
    )
    priority: int = Field(
        default=-1, ge=-1, le=9, description="Delivery priority 0..9; -1 keeps each message's."
    )
    node: AddressNode | None = Field(
        default=None,
        description=(
            "Store the messages: each address matched is a queue or topic hosted on one pod of"
            " node.router (resources/nodes.py); absent, messages are routed to consumers as"
            " they are."
        ),
    )


# --- LinkRoute ------------------------------------------------------------------------------


class LinkRouteConnection(StrictSpec):
    """A connection the routers open to a broker or service that owns the link route."""

    host: HostName = Field(description="Host name (a Service's DNS name) or IP address.")
    port: Port = Field(default=AMQP_PORT, description="TCP port.")
    tlsSecret: SecretName | None = Field(
        default=None,
        description=(
            "A Secret in the LinkRoute's namespace whose key ca.crt (PEM) is the CA that signed"
            " the broker's certificate: the routers connect with TLS only, verify the"
            " certificate against it and check that it names host. No client certificate is"
            " presented (tls.crt and tls.key are not used). The interior pods of the network"
            " mount it (a pod waits, FailedMount, while the Secret or its ca.crt is missing);"
            " adding or removing it restarts them (rolling), and a renewed CA is used from"
            " their next restart. Not available to local routers (routernet up)."
        ),
    )
    saslSecret: SecretName | None = Field(
        default=None,
        description=(
            "A kubernetes.io/basic-auth Secret (username, password) in the LinkRoute's"
            " namespace: the routers log in with PLAIN (use it with tlsSecret, or the password"
            " travels in clear text). The interior pods of the network mount it and read it on"
            " every connection attempt, so a changed password needs no restart; adding or"
            " removing it restarts them (rolling). Not available to local routers"
            " (routernet up)."
        ),
    )


class LinkRouteSpec(StrictSpec):
    """Links whose address matches are routed, attach and all, to one container (a broker), so
    that it, not the routers, holds the messages and settles the deliveries."""

    rules: ClassVar[tuple[Rule, ...]] = (
        _exactly_one("prefix", "pattern"),
        _exactly_one("containerId", "connection"),
    )

    network: NetworkName = Field(
        default=DEFAULT_NETWORK, description="The router network, within this namespace."
    )
    prefix: AddressPrefix | None = Field(
        default=None, description="Matches this address and every address below it."
    )
    pattern: AddressPattern | None = Field(
        default=None, description="'*' matches one token, '#' zero or more."
    )
    direction: Direction = Field(
        default="both",
        description=("in: links on which clients send; out: links on which clients receive; both."),
    )
    containerId: ContainerId | None = Field(
        default=None,
        description=(
            "The AMQP container id of a broker that connects to a route-container listener."
            " Exactly one of containerId or connection."
        ),
    )
    connection: LinkRouteConnection | None = Field(
        default=None,
        description=(
            "A broker the interior routers connect to themselves (edges pass the links up to"
            " them). Exactly one of containerId or connection. Applied live unless it names"
            " Secrets (tlsSecret, saslSecret): those are mounted on the interior pods, so"
            " adding, changing or removing such a LinkRoute restarts them one by one."
        ),
    )


# --- Gateway --------------------------------------------------------------------------------


class GatewaySpec(GatewayRouting):
    """A network's global addressing and its gateway connections to other networks
    (resources/gateway.py); one per network."""

    network: NetworkName = Field(
        default=DEFAULT_NETWORK, description="The router network, within this namespace."
    )


# --- status -----------------------------------------------------------------------------------


class Condition(BaseModel):
    """A condition in Kubernetes' shape (metav1.Condition), one per type: the newest facts
    replace the old ones rather than piling up as a log."""

    model_config = ConfigDict(extra="ignore")

    type: str = Field(max_length=316, description="e.g. Ready, ReconciliationPaused.")
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(min_length=1, max_length=1024, description="CamelCase, for programs.")
    message: str = Field(default="", max_length=32768, description="For people.")
    lastTransitionTime: datetime = Field(description="When status last changed.")
    observedGeneration: int | None = Field(
        default=None, ge=0, description="The metadata.generation this condition describes."
    )

    @field_validator("lastTransitionTime")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)

    @field_serializer("lastTransitionTime")
    def _rfc3339(self, value: datetime) -> str:
        """metav1.Time's form: seconds, UTC, 'Z'."""
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")


class _Status(BaseModel):
    """What the operator observed. Lenient (unknown keys ignored): status is written by
    operators, possibly a newer release's during an upgrade, and never worth refusing."""

    model_config = ConfigDict(extra="ignore")

    observedGeneration: int | None = Field(
        default=None, ge=0, description="The metadata.generation last reconciled."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, and kind-specific conditions.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )

    def condition(self, type_: str) -> Condition | None:
        """The condition of this type, if any."""
        return next((c for c in self.conditions if c.type == type_), None)

    def set_condition(
        self,
        type_: str,
        status: Literal["True", "False", "Unknown"],
        reason: str,
        message: str = "",
        *,
        observed_generation: int | None = None,
        now: datetime | None = None,
    ) -> Condition:
        """Replaces the condition of this type. lastTransitionTime moves only when the status
        does, as Kubernetes' conventions ask (it answers "since when is this so")."""
        old = self.condition(type_)
        if old is not None and old.status == status:
            since = old.lastTransitionTime
        else:
            since = now or datetime.now(UTC).replace(microsecond=0)
        new = Condition(
            type=type_,
            status=status,
            reason=reason,
            message=message,
            lastTransitionTime=since,
            observedGeneration=observed_generation,
        )
        self.conditions = [new if c.type == type_ else c for c in self.conditions]
        if old is None:
            self.conditions.append(new)
        return new


class RouterStatus(_Status):
    """A Router's observed state; replicas and selector also serve the scale subresource."""

    replicas: int | None = Field(default=None, ge=0, description="Router pods that exist.")
    readyReplicas: int | None = Field(default=None, ge=0, description="Router pods ready.")
    selector: str | None = Field(
        default=None, description="Label selector of the pods, for the scale subresource (HPA)."
    )
    meshConnected: bool | None = Field(
        default=None,
        description=(
            "Interior: every interior router of the network sees every other one."
            " Edge: that, and every edge router of this Router has an uplink."
            " From what each router reports on its Pod (annotation"
            " routernet.io/reachable-routers); absent while unknown."
        ),
    )
    endpoints: list[str] = Field(
        default_factory=list,
        description=(
            "The client Service's URL for each listener, as clients dial it:"
            " amqps://HOST:PORT for TLS listeners, amqp://HOST:PORT for the others."
        ),
    )
    autoscaling: AutoscalingStatus | None = Field(
        default=None, description="The autoscaler's view, while spec.autoscaling is set."
    )


class AddressStatus(_Status):
    """An Address's observed state: whether every router of its network applies it."""


class LinkRouteStatus(_Status):
    """A LinkRoute's observed state: whether every router of its network applies it."""


class GatewayStatus(_Status):
    """A Gateway's observed state: whether every router of its network applies it."""


# --- the kinds ----------------------------------------------------------------------------------


class ObjectMeta(BaseModel):
    """The parts of metav1.ObjectMeta the operator reads; everything else is kept as is."""

    model_config = ConfigDict(extra="allow")

    name: str
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    generation: int | None = None
    uid: str | None = None
    resourceVersion: str | None = None


class RouterMeta(ObjectMeta):
    """A Router's metadata: its name, which names other objects, is constrained. The CRD states
    it in the schema of ``metadata.name``, the one place of metadata a CRD may constrain; the API
    server reports a bad name there, at ``metadata.name``."""

    name: RouterName


def is_paused(annotations: Mapping[str, str] | None) -> bool:
    """True when the pause annotation is set to "true" (any case): kopf handlers get the
    annotations as a mapping, hence a function rather than only a property."""
    return (annotations or {}).get(PAUSE_ANNOTATION, "").strip().lower() == "true"


class CustomResource(BaseModel):
    """A whole custom resource as stored or as written in a file for ``routernet up``."""

    model_config = ConfigDict(extra="forbid")

    kind_name: ClassVar[str]
    plural: ClassVar[str]
    singular: ClassVar[str]
    short_names: ClassVar[tuple[str, ...]]
    spec_required: ClassVar[bool] = True

    apiVersion: Literal["routernet.io/v1alpha1"] = API_VERSION
    metadata: ObjectMeta

    @property
    def paused(self) -> bool:
        """Whether the pause annotation stops reconciliation of this object."""
        return is_paused(self.metadata.annotations)


class Router(CustomResource):
    """A set of routers of one role in a router network: a StatefulSet, its Services and
    configuration, rendered and kept up by the operator."""

    kind_name: ClassVar[str] = "Router"
    plural: ClassVar[str] = "routers"
    singular: ClassVar[str] = "router"
    short_names: ClassVar[tuple[str, ...]] = ("rtr",)
    spec_required: ClassVar[bool] = False

    metadata: RouterMeta
    kind: Literal["Router"] = "Router"
    spec: RouterSpec = Field(default_factory=RouterSpec)
    status: RouterStatus = Field(default_factory=RouterStatus)


class Address(CustomResource):
    """How the routers of a network treat a family of addresses."""

    kind_name: ClassVar[str] = "Address"
    plural: ClassVar[str] = "addresses"
    singular: ClassVar[str] = "address"
    short_names: ClassVar[tuple[str, ...]] = ("raddr",)

    kind: Literal["Address"] = "Address"
    spec: AddressSpec
    status: AddressStatus = Field(default_factory=AddressStatus)


class LinkRoute(CustomResource):
    """Links for a family of addresses routed to a broker, on every router of a network.
    Applied live, except that a connection with Secrets (tlsSecret, saslSecret) has them
    mounted on the network's interior pods, which restart one by one when such a LinkRoute is
    added, changed or removed."""

    kind_name: ClassVar[str] = "LinkRoute"
    plural: ClassVar[str] = "linkroutes"
    singular: ClassVar[str] = "linkroute"
    short_names: ClassVar[tuple[str, ...]] = ("rlr",)

    kind: Literal["LinkRoute"] = "LinkRoute"
    spec: LinkRouteSpec
    status: LinkRouteStatus = Field(default_factory=LinkRouteStatus)


class Gateway(CustomResource):
    """Global addressing for a router network: which container ()/node means, which containers
    other networks see, and gateway connections to them; on every router of the network."""

    kind_name: ClassVar[str] = "Gateway"
    plural: ClassVar[str] = "gateways"
    singular: ClassVar[str] = "gateway"
    short_names: ClassVar[tuple[str, ...]] = ("rgw",)

    kind: Literal["Gateway"] = "Gateway"
    spec: GatewaySpec
    status: GatewayStatus = Field(default_factory=GatewayStatus)


KINDS: tuple[type[CustomResource], ...] = (Router, Address, LinkRoute, Gateway)
"""Every custom resource kind, in the order the CRDs are generated."""
