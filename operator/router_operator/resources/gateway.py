"""The Gateway resource's spec, but for its network (resources/models.py adds that, with the kind):
one network's global addressing, folded into every router of it, and its gateway connections to
other networks; and how the planner folds it (``plan_gateway``), kept here rather than in the
planner, which calls it.

The routing part (rules, defaultContainer, export, containers) is the router configuration's
own models (router/gateway/config.py), so that what the operator accepts is what the routers
run, checked once. The API server checks what those models check with the CEL rules below,
which sit on the lists (a rule on the router's models would put Kubernetes into them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from router.gateway.config import MAX_VALUE_LENGTH, ContainerRoute, GatewayRule, Match
from router.gateway.config import Gateway as RouterGateway
from router_operator.resources.mounts import CA_CERT_FILE, TLS_CERT_FILE, TLS_KEY_FILE, SecretMount
from router_operator.resources.spec import Rule, SecretName, StrictSpec

GATEWAY_PORT = 5673
"""Where a gateway listener listens unless told otherwise: beside the clients' 5672."""

_ROUTER_NAME = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
_CONNECTOR_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_HOST = r"^[A-Za-z0-9_.:\[\]-]+$"


def _one_kind(var: str) -> str:
    """CEL: the Match ``var`` has exactly one of exact, prefix and pattern."""
    return " + ".join(f"(has({var}.{k}) ? 1 : 0)" for k in ("exact", "prefix", "pattern")) + " == 1"


def _one_kind_holds(match: Match | None) -> bool:
    return match is None or [match.exact, match.prefix, match.pattern].count(None) == 2


_MATCH_ONE_KIND = "exactly one of exact, prefix or pattern is required"

_EXPORT_RULE = Rule(
    rule=f"self.all(m, {_one_kind('m')})",
    message=_MATCH_ONE_KIND,
    holds=lambda export: all(_one_kind_holds(m) for m in export),
)

_CONDITIONS = ("node", "subject", "groupId", "userId")
_RULE_RULES = (
    Rule(
        rule=(
            "self.all(r, "
            + " || ".join(f"has(r.{c})" for c in _CONDITIONS)
            + " || (has(r.applicationProperties) && size(r.applicationProperties) > 0))"
        ),
        message=(
            "a rule has no condition: give node, subject, groupId, userId or"
            " applicationProperties (defaultContainer is the rule for everything else)"
        ),
        holds=lambda rules: all(
            any(getattr(r, c) is not None for c in _CONDITIONS) or r.applicationProperties
            for r in rules
        ),
    ),
    Rule(
        rule=(
            "self.all(r, "
            + " && ".join(f"(!has(r.{c}) || {_one_kind(f'r.{c}')})" for c in _CONDITIONS)
            + " && (!has(r.applicationProperties) || r.applicationProperties.all(k,"
            + f" {_one_kind('r.applicationProperties[k]')})))"
        ),
        message=_MATCH_ONE_KIND,
        holds=lambda rules: all(
            all(_one_kind_holds(getattr(r, c)) for c in _CONDITIONS)
            and all(_one_kind_holds(m) for m in r.applicationProperties.values())
            for r in rules
        ),
    ),
)


def _checked(rules: tuple[Rule, ...]) -> AfterValidator:
    def check(value: object) -> object:
        for rule in rules:
            rule.check(value)
        return value

    return AfterValidator(check)


_RESTART_NOTE = (
    " The pods of the Router mount it (a pod waits, FailedMount, while the Secret or a key is"
    " missing); adding, changing or removing it restarts them (rolling), and a renewed"
    " certificate is used from their next restart. Not available to local routers"
    " (routernet up)."
)


class GatewayListenerTls(StrictSpec):
    """TLS on the gateway listener, as a Router listener's tlsSecret; with caSecret, mutual:
    the other networks' connectors are admitted by their certificates (SASL EXTERNAL). A CA
    alone switches verification on, as RabbitMQ's caSecretName does: a CA that verified no
    one would have no use, so a separate switch could only be left off by mistake."""

    secret: SecretName = Field(
        description=(
            "A kubernetes.io/tls Secret (tls.crt, tls.key) in the Gateway's namespace: the"
            " listener serves TLS only (connectors that do not start TLS are refused) with this"
            " certificate, which must name the host the other networks dial." + _RESTART_NOTE
        ),
    )
    caSecret: SecretName | None = Field(
        default=None,
        description=(
            "A Secret whose key ca.crt (PEM) is the CA that signed the other networks' client"
            " certificates: with it, a connector must present one it signed (mutual TLS, SASL"
            " EXTERNAL) or is refused; without it, connectors are not asked for certificates."
            " May name the same Secret as secret when that has a ca.crt (cert-manager's do)."
            + _RESTART_NOTE
        ),
    )


class GatewayConnectorTls(StrictSpec):
    """TLS on a gateway connector: the client certificate it presents (secret) and the CA it
    verifies the listener with (caSecret), the other network's gateway listener's certificate
    checked against its host unless verifyHostname says otherwise."""

    rules: ClassVar[tuple[Rule, ...]] = (
        # verifyHostname has a default, so stored objects have it; read behind has() all the same.
        Rule(
            rule="!has(self.verifyHostname) || self.verifyHostname || has(self.caSecret)",
            message=(
                "verifyHostname false needs caSecret: with the system's CAs and no host check,"
                " any certificate a public CA signed for anyone would be accepted"
            ),
            holds=lambda s: s.verifyHostname or s.caSecret is not None,
        ),
    )

    secret: SecretName | None = Field(
        default=None,
        description=(
            "A kubernetes.io/tls Secret (tls.crt, tls.key) in the Gateway's namespace: the"
            " client certificate, with which the connector authenticates (SASL EXTERNAL) to a"
            " listener that verifies its clients; without it, it connects anonymously."
            + _RESTART_NOTE
        ),
    )
    caSecret: SecretName | None = Field(
        default=None,
        description=(
            "A Secret whose key ca.crt (PEM) is the CA that signed the other network's gateway"
            " listener's certificate; without it, the system's CAs." + _RESTART_NOTE
        ),
    )
    verifyHostname: bool = Field(
        default=True,
        description=(
            "The listener's certificate must name host (for an IP address, a DNS:<ip>"
            " subjectAltName). false still verifies it against caSecret, which it then needs."
        ),
    )


class GatewayListener(StrictSpec):
    """Where this network accepts other networks' gateway connectors."""

    router: str = Field(
        pattern=_ROUTER_NAME,
        max_length=45,
        description="An interior Router of this network: its pods get the listener.",
    )
    port: int = Field(
        default=GATEWAY_PORT,
        ge=1,
        le=65535,
        description=(
            "TCP port, apart from the Router's own (its listeners, 55672, 45672 and 9090). The"
            " Router's client Service exposes it as the port named gateway, for other"
            " namespaces; another cluster reaches it through a Service or gateway of its own"
            " (LoadBalancer, NodePort) selecting the Router's pods, targetPort gateway."
        ),
    )
    tls: GatewayListenerTls | None = Field(
        default=None,
        description="Serve TLS only; with caSecret, mutual TLS. Absent: plain AMQP.",
    )


class GatewayConnector(StrictSpec):
    """A connection to another network's gateway listener."""

    name: str = Field(
        pattern=_CONNECTOR_NAME,
        max_length=63,
        description="What containers[].connector names.",
    )
    router: str = Field(
        pattern=_ROUTER_NAME,
        max_length=45,
        description="An interior Router of this network: its pods dial.",
    )
    host: str = Field(
        pattern=_HOST, max_length=253, description="The other network's gateway host."
    )
    port: int = Field(default=GATEWAY_PORT, ge=1, le=65535, description="TCP port.")
    tls: GatewayConnectorTls | None = Field(
        default=None,
        description=(
            "Connect with TLS, with a client certificate (secret) for a listener that verifies"
            " its clients. Absent: plain AMQP."
        ),
    )


_CONNECTORS_NAMED = Rule(
    rule=(
        "!has(self.containers) || self.containers.all(c,"
        " has(self.connectors) && self.connectors.exists(k, k.name == c.connector))"
    ),
    message="every containers[].connector must name one of connectors",
    holds=lambda s: {c.connector for c in s.containers} <= {k.name for k in s.connectors},
)


class GatewayRouting(BaseModel):
    """Everything of a Gateway's spec but its network. Strict as StrictSpec is, but not one:
    its field ``rules`` (the router config's name) would shadow StrictSpec's CEL rules, so the
    one rule on the object is stated here by hand."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        allow_inf_nan=False,
        json_schema_extra={"x-kubernetes-validations": [_CONNECTORS_NAMED.cel()]},
    )

    rules: Annotated[list[GatewayRule], _checked(_RULE_RULES)] = Field(
        default_factory=list,
        max_length=64,
        description=(
            "For ()/node: in order, the first rule whose conditions all hold names the"
            " container; as the router config's gateway.rules."
        ),
        json_schema_extra={"x-kubernetes-validations": [r.cel() for r in _RULE_RULES]},
    )
    defaultContainer: str | None = Field(
        default=None,
        pattern=r"^[^\s()]+$",
        max_length=MAX_VALUE_LENGTH,
        description="For ()/node when no rule matches; absent: the message is released.",
    )
    export: Annotated[list[Match], _checked((_EXPORT_RULE,))] = Field(
        default_factory=list,
        max_length=64,
        description=(
            "Container ids this network shows to networks joined through gateway connections;"
            " none by default: nothing crosses unless exported."
        ),
        json_schema_extra={"x-kubernetes-validations": [_EXPORT_RULE.cel()]},
    )
    containers: list[ContainerRoute] = Field(
        default_factory=list,
        max_length=1000,
        description="Containers reached through one of connectors, configured by hand.",
    )
    listener: GatewayListener | None = Field(
        default=None,
        description="Accept other networks' gateway connectors on the pods of one Router.",
    )
    connectors: list[GatewayConnector] = Field(
        default_factory=list,
        max_length=16,
        description="Dial other networks' gateway listeners from the pods of one Router.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
        },
    )

    @model_validator(mode="after")
    def _connectors_named(self) -> Self:
        _CONNECTORS_NAMED.check(self)
        return self


# --- planning: a network's Gateway folded into its routers' configs ---------------------------

GATEWAY_CONNECTOR_PREFIX = "gateway/"
"""Gateway connectors are ``gateway/<name>`` in the router configs, apart from the
``inter-router/``, ``edge/`` and ``linkroute/`` ones."""
GATEWAY_LISTENER_NAME = "gateway"
GATEWAY_SECRET_DIR = "/etc/routernet-gateway"
"""The Gateway's Secrets are mounted at ``<dir>/listener/{tls,ca}/`` and
``<dir>/connectors/<name>/{tls,ca}/`` on the pods of the Router of that listener or connector
(connector names are DNS labels: safe path components)."""
GATEWAY_LISTENER_PROFILE = "gateway-listener"
GATEWAY_CONNECTOR_PROFILE_PREFIX = "gateway-connector-"
"""sslProfiles ``gateway-listener`` and ``gateway-connector-<name>``, apart from the Router
listeners' ``listener-<port>`` and the LinkRoutes' ``linkroute-<name>``."""


@dataclass(frozen=True)
class ListenerTlsDecl:
    """The listener's certificate Secret, and the CA Secret that verifies its clients."""

    secret: str
    ca_secret: str | None = None


@dataclass(frozen=True)
class ConnectorTlsDecl:
    """A connector's client certificate Secret and the CA Secret that verifies the listener
    (the system's CAs without one)."""

    secret: str | None = None
    ca_secret: str | None = None
    verify_hostname: bool = True


@dataclass(frozen=True)
class GatewayListenerDecl:
    router: str
    port: int = GATEWAY_PORT
    tls: ListenerTlsDecl | None = None


@dataclass(frozen=True)
class GatewayConnectorDecl:
    name: str
    router: str
    host: str
    port: int = GATEWAY_PORT
    tls: ConnectorTlsDecl | None = None


@dataclass(frozen=True)
class GatewayDecl:
    """One Gateway resource, as the planner takes it. ``routing`` is the router config's own
    ``gateway`` section, its containers naming the Gateway's connectors."""

    name: str
    network: str = "default"
    routing: RouterGateway = field(default_factory=RouterGateway)
    listener: GatewayListenerDecl | None = None
    connectors: tuple[GatewayConnectorDecl, ...] = ()
    creation_timestamp: str = ""
    generation: int = 0


Report = Callable[[str, str, str], None]
"""(Gateway name, reason, message): a problem on that Gateway."""


@dataclass(frozen=True)
class GatewayPlan:
    """The one Gateway of a network as its routers get it: the rules, default and exports on
    every router; the listener, connectors and hand-made container routes on the pods of the
    Router named for them (a container route must name a connector its router has), and so
    are the sslProfiles and Secrets of the TLS ones."""

    decl: GatewayDecl

    def section(self, router: str) -> dict[str, Any]:
        """The ``gateway`` section of a pod config of ``router``."""
        routes = [
            {"container": r.container, "connector": gateway_connector_name(r.connector)}
            for r in self.decl.routing.containers
            if any(c.name == r.connector and c.router == router for c in self.decl.connectors)
        ]
        section = self.decl.routing.model_dump(mode="json", exclude_defaults=True)
        section.pop("containers", None)
        if routes:
            section["containers"] = routes
        return section

    def listener(self, router: str) -> GatewayListenerDecl | None:
        """The listener, if it is on the pods of ``router``."""
        listener = self.decl.listener
        return listener if listener is not None and listener.router == router else None

    def listeners(self, router: str) -> list[dict[str, Any]]:
        listener = self.listener(router)
        if listener is None:
            return []
        entry: dict[str, Any] = {
            "name": GATEWAY_LISTENER_NAME,
            "host": "0.0.0.0",
            "port": listener.port,
            "role": "gateway",
        }
        if listener.tls is not None:
            entry["sslProfile"] = GATEWAY_LISTENER_PROFILE
            entry["requireSsl"] = True
            if listener.tls.ca_secret is not None:
                # EXTERNAL alone: the handshake asks for a certificate the CA signed, and the
                # connection is authenticated as its subject; no anonymous way in is offered.
                entry["saslMechanisms"] = ["EXTERNAL"]
        return [entry]

    def connectors(self, router: str) -> list[dict[str, Any]]:
        entries = []
        for c in self._connectors(router):
            entry: dict[str, Any] = {
                "name": gateway_connector_name(c.name),
                "host": c.host,
                "port": c.port,
                "role": "gateway",
            }
            if c.tls is not None:
                entry["sslProfile"] = gateway_connector_profile(c.name)
                entry["verifyHostname"] = c.tls.verify_hostname
                if c.tls.secret is not None:
                    entry["saslMechanisms"] = ["EXTERNAL"]
            entries.append(entry)
        return entries

    def ssl_profiles(self, router: str) -> list[dict[str, Any]]:
        """The sslProfiles of the TLS listener and connectors on the pods of ``router``, naming
        the files of :meth:`secret_mounts`."""
        profiles = []
        listener = self.listener(router)
        if listener is not None and listener.tls is not None:
            tls = listener.tls
            profiles.append(_profile(GATEWAY_LISTENER_PROFILE, None, tls.secret, tls.ca_secret))
        for c in self._connectors(router):
            if c.tls is not None:
                name = gateway_connector_profile(c.name)
                profiles.append(_profile(name, c.name, c.tls.secret, c.tls.ca_secret))
        return profiles

    def secret_mounts(self, router: str) -> tuple[SecretMount, ...]:
        """What the pods of ``router`` mount for the TLS listener and connectors on them."""
        mounts = []
        listener = self.listener(router)
        if listener is not None and listener.tls is not None:
            mounts += _mounts("gw", "listener", None, listener.tls.secret, listener.tls.ca_secret)
        for c in self._connectors(router):
            if c.tls is not None:
                mounts += _mounts("gwc", c.name, c.name, c.tls.secret, c.tls.ca_secret)
        return tuple(mounts)

    def _connectors(self, router: str) -> list[GatewayConnectorDecl]:
        return [c for c in self.decl.connectors if c.router == router]


def _profile(
    name: str, connector: str | None, secret: str | None, ca_secret: str | None
) -> dict[str, Any]:
    profile: dict[str, Any] = {"name": name}
    if secret is not None:
        profile["certFile"] = f"{gateway_secret_dir(connector, 'tls')}/{TLS_CERT_FILE}"
        profile["privateKeyFile"] = f"{gateway_secret_dir(connector, 'tls')}/{TLS_KEY_FILE}"
    if ca_secret is not None:
        profile["caCertFile"] = f"{gateway_secret_dir(connector, 'ca')}/{CA_CERT_FILE}"
    return profile


def _mounts(
    family: Literal["gw", "gwc"],
    owner: str,
    connector: str | None,
    secret: str | None,
    ca_secret: str | None,
) -> list[SecretMount]:
    mounts = []
    if secret is not None:
        path = gateway_secret_dir(connector, "tls")
        keys = (TLS_CERT_FILE, TLS_KEY_FILE)
        mounts.append(SecretMount(family, owner, "tls", secret, path, keys))
    if ca_secret is not None:
        path = gateway_secret_dir(connector, "ca")
        mounts.append(SecretMount(family, owner, "ca", ca_secret, path, (CA_CERT_FILE,)))
    return mounts


def gateway_secret_dir(connector: str | None, kind: Literal["tls", "ca"]) -> str:
    """Where a pod has a Secret of the listener (``connector`` None) or of a connector."""
    owner = "listener" if connector is None else f"connectors/{connector}"
    return f"{GATEWAY_SECRET_DIR}/{owner}/{kind}"


def gateway_connector_profile(name: str) -> str:
    return f"{GATEWAY_CONNECTOR_PROFILE_PREFIX}{name}"


def gateway_connector_name(name: str) -> str:
    return f"{GATEWAY_CONNECTOR_PREFIX}{name}"


def plan_gateway(
    gateways: Sequence[GatewayDecl],
    interiors: Mapping[str, tuple[int, ...]],
    report: Report,
) -> GatewayPlan | None:
    """The network's Gateway, if it has one that can be applied. ``gateways`` is sorted oldest
    first: one network has one Gateway (its rules are one ordered list, which two resources
    could only be merged into by guessing), so the oldest wins and the others are reported.
    ``interiors``: the network's interior Routers and the ports their pods already listen on;
    a listener or connector must be on one of them (edges join no other network)."""
    if not gateways:
        return None
    first, *others = gateways
    for other in others:
        report(
            other.name,
            "Conflict",
            f"network {other.network!r} already has Gateway {first.name!r} (older); a network"
            " has one Gateway: this one is not applied",
        )
    problems = []
    named = [(f"connector {c.name}", c.router) for c in first.connectors]
    if first.listener is not None:
        named.append(("listener", first.listener.router))
        ports = interiors.get(first.listener.router, ())
        if first.listener.port in ports:
            problems.append(
                f"listener: port {first.listener.port} is already taken on the pods of Router"
                f" {first.listener.router!r} (by a listener of its own, or as its inter-router,"
                " edge or metrics port); choose another port"
            )
    for what, router in named:
        if router not in interiors:
            problems.append(
                f"{what}: {router!r} is not an interior Router of network {first.network!r}"
            )
    if problems:
        report(first.name, "InvalidRouter", "; ".join(problems))
        return None
    return GatewayPlan(first)
