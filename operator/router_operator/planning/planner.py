"""The network planner: from the Router, Address, LinkRoute and Gateway declarations of one
namespace to the exact configuration of every router pod.

Pure on purpose: the reconciler, the local backend (`routernet up`) and the tests all need the
same answer to "who dials whom and what does each address mean", and a function of its inputs
alone gives it without a cluster. Its input is a set of small frozen declarations rather than the
CRD models, so the planner does not move every time the API does; a thin adapter maps one to the
other.

Rules, and why:
- A network is (namespace, ``network`` name). Router ids are the pod names ``<router>-<i>``, which
  Kubernetes already keeps unique per namespace (``<a>-<i>`` splits back into one name and one
  ordinal), so two Router resources in one network never collide.
- Peers are dialled by stable DNS names (``<pod>.<router>-peers.<ns>.svc.<domain>``), never by pod
  IP: IPs change on every restart and qdr-operator's routers kept dialling dead ones.
- Interior mesh: each pair of interior pods is connected exactly once; the pod that sorts later by
  (Router name, ordinal) dials the earlier one. Scaling a Router up therefore changes only the new
  pods' configs (plus those of Routers whose names sort after it), and scaling down removes the
  departed pods from every connector list.
- Edges: one uplink plus ``edge_failovers`` reserve connectors, chosen round-robin over the
  network's interiors from an offset derived from the edge Router's name. Pods of one edge Router
  are spread evenly; scaling one edge Router (an HPA's daily work) never moves another's uplinks.
- Addresses of a network are folded, sorted by key, into every router of that network. Two Address
  resources with the same prefix/pattern conflict: the older one (then the smaller name) wins, so
  a newcomer never silently changes what running routers do.
- An Address with a ``node`` (resources/nodes.py) has the same node settings in every router
  config of its network, ``hosts`` being the pods of the Router it names, at that Router's current
  replicas (scaling it changes every config, and the routers' stable hash moves few nodes; a
  scale-in keeps the leaving pods, hosts no more, until they have moved theirs:
  planning/handoff.py). That Router must be an interior of the network with ``store``, whose pods
  all get ``store.path``; otherwise the Address is a Problem (InvalidNode) and not folded at all.
- LinkRoutes are folded into every router of their network as ``linkRoutes`` entries (direction
  ``both`` is two entries, in and out), with the same conflict rule per prefix/pattern and
  direction. One naming a ``connection`` also puts a route-container connector
  ``linkroute/<name>`` on every interior router, and its entries name that connector; edges get
  the entries alone (they pass link-routed attaches up to their interior). A connection's
  Secrets are mounted into the interior pods (render), under
  ``/etc/routernet-linkroute/<LinkRoute name>/``: ``tls/ca.crt`` is the caCertFile of the
  connector's sslProfile ``linkroute-<name>`` (verifyHostname, the router's default: the host
  is a Service's DNS name the broker's certificate must name), and ``sasl/username`` and
  ``sasl/password`` are its PLAIN credentials as ``file:`` references, which the router reads
  on every connection attempt. The operator never reads a Secret, so it cannot know whether a
  TLS Secret also holds a client certificate: none is presented (tls.crt and tls.key are not
  used).
- A network has at most one Gateway (resources/gateway.py ``plan_gateway``: the oldest wins,
  others are a Conflict): its rules, defaultContainer and export go into every router's
  ``gateway`` section; its listener (role gateway) and connectors (``gateway/<name>``) into the
  pods of the interior Router each names, with the container routes that use those connectors.
  Their TLS Secrets are mounted on those pods only (render), under
  ``/etc/routernet-gateway/listener/`` and ``.../connectors/<name>/`` (``tls/`` tls.crt and
  tls.key, ``ca/`` ca.crt), the files of the sslProfiles ``gateway-listener`` and
  ``gateway-connector-<name>``. A listener with a CA offers SASL EXTERNAL alone (mutual TLS: a
  connector is admitted by its certificate); a connector with a certificate authenticates with
  EXTERNAL, and checks the listener's certificate against its host unless told not to
  (verifyHostname).
- A listener with a TLS Secret serves TLS only (``requireSsl``) with an sslProfile
  ``listener-<port>`` whose certFile and privateKeyFile are the Secret's tls.crt and tls.key,
  mounted at ``/etc/routernet-tls/<port>/`` (render). The files exist only in the pod, so configs
  are validated with the router's own model minus its file checks (the ``files`` validation
  context of router/config/models.py); the router checks them when it loads the config.
- A bad declaration is a ``Problem`` on that object, not an exception: one broken Router must not
  stop the reconciliation of its whole network. A Router whose configs cannot be built gets no pod
  configs (``RouterPlan.ok`` is false) and its existing children should be left alone, but its pods
  stay in the topology so that its peers keep their connections to it.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from router.config.models import (
    AMQP_PORT,
    FILES_CONTEXT_KEY,
    Address,
    ConfigError,
    Connector,
    RouterConfig,
    SslProfile,
)
from router.config.models import LinkRoute as RouterLinkRoute
from router.telemetry.config import METRICS_PORT
from router_operator.planning import internal_tls
from router_operator.resources.gateway import GatewayDecl, GatewayPlan, plan_gateway
from router_operator.resources.mounts import CA_CERT_FILE, TLS_CERT_FILE, TLS_KEY_FILE, SecretMount
from router_operator.resources.nodes import STORE_PATH, NodeDecl, StoreDecl

RouterRole = Literal["interior", "edge"]
Direction = Literal["in", "out", "both"]
Kind = Literal["Router", "Address", "LinkRoute", "Gateway"]
Report = Callable[[Kind, str, str, str], None]

INTER_ROUTER_PORT = 55672
"""Interior routers listen here for each other (Dispatch's conventional inter-router port)."""
EDGE_PORT = 45672
"""Interior routers listen here for edge routers."""
RESERVED_PORTS = {INTER_ROUTER_PORT: "inter-router", EDGE_PORT: "edge"}
# On every router, interior or edge: /metrics, /healthz and /readyz (router/telemetry/http.py).
DEFAULT_NETWORK = "default"
DEFAULT_CLUSTER_DOMAIN = "cluster.local"
DEFAULT_EDGE_FAILOVERS = 2
"""Reserve uplinks per edge. The router keeps every edge connector connected, so each reserve
costs a live connection on an interior: enough to survive a rolling restart, no more."""
MAX_ROUTER_NAME = 45
"""As the CRD's rule: the StatefulSet's revision-hash label allows 52 characters, and the
Services add suffixes of their own."""
SASL_CONFIG_DIR = "/etc/routernet-sasl"
"""Where the pod gets the Cyrus config and the users' sasldb (a projected volume, see render)."""
SASL_CONFIG_NAME = "routernet"
SASLDB_FILE = "users.sasldb"
TLS_DIR = "/etc/routernet-tls"
"""Each TLS listener's Secret is mounted at ``<TLS_DIR>/<port>/`` (a Secret volume, see render)."""
LINK_ROUTE_CONNECTOR_PREFIX = "linkroute/"
"""Route-container connectors of LinkRoutes are ``linkroute/<LinkRoute name>``: deterministic, so
config-sync diffs them by name, and apart from the ``inter-router/`` and ``edge/`` ones."""
LINK_ROUTE_DIR = "/etc/routernet-linkroute"
"""A LinkRoute connection's Secrets are mounted at ``<LINK_ROUTE_DIR>/<LinkRoute name>/tls/`` and
``.../sasl/`` on every interior pod of its network (Secret volumes, see render)."""
LINK_ROUTE_SSL_PROFILE_PREFIX = "linkroute-"
"""The sslProfile of a LinkRoute connection is ``linkroute-<LinkRoute name>``; listeners' are
``listener-<port>``."""
SASL_USERNAME_FILE = "username"
SASL_PASSWORD_FILE = "password"
"""The keys of a kubernetes.io/basic-auth Secret, a LinkRoute connection's saslSecret."""

_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


# ---------------------------------------------------------------------------------------------
# Input: what the user declared, already defaulted by the CRD schema.


@dataclass(frozen=True)
class ListenerDecl:
    """A listener of a Router, for clients (normal) or brokers (route-container). ``None`` keeps
    the router's own default, so defaults live in one place: router/config/models.py."""

    port: int = AMQP_PORT
    role: Literal["normal", "route-container"] = "normal"
    name: str | None = None
    host: str = "0.0.0.0"
    sasl_mechanisms: tuple[str, ...] | None = None
    sasl_users_secret: str | None = None
    """With PLAIN: the Secret whose key ``users.sasldb`` is the Cyrus user database. A router
    has one SASL configuration, so all its PLAIN listeners share one Secret."""
    authenticate_peer: bool | None = None
    link_capacity: int | None = None
    idle_timeout_seconds: int | None = None
    max_frame_size: int | None = None
    strip_annotations: str | None = None
    tls_secret: str | None = None
    """A kubernetes.io/tls Secret: the listener serves TLS only (requireSsl), presenting its
    tls.crt and tls.key through the sslProfile ``listener-<port>``."""


@dataclass(frozen=True)
class RouterDecl:
    """One Router resource. Empty ``listeners`` means the default AMQP listener on 5672: a router
    nobody can reach is never what was meant."""

    name: str
    uid: str = ""
    replicas: int = 1
    role: RouterRole = "interior"
    network: str = DEFAULT_NETWORK
    listeners: tuple[ListenerDecl, ...] = (ListenerDecl(),)
    link_capacity: int | None = None
    image: str | None = None
    resources: Mapping[str, Any] | None = None
    pod_template: Mapping[str, Any] | None = None
    generation: int = 0
    store: StoreDecl | None = None
    """A PersistentVolumeClaim per pod (render), which every pod config names as store.path:
    what lets the Router host the nodes of Addresses (``AddressDecl.node``)."""
    hosts: int | None = None
    """How many of its pods (the first) host those nodes; None: all. Fewer while a scale-in
    waits for the others to hand theirs off (planning/handoff.py)."""
    management_writers: tuple[str, ...] = ()
    """Users its routers let write through $management (router.managementWriters)."""
    policy: Mapping[str, Any] | None = None
    """Its routers' ``policy`` and ``vhosts`` (RouterPolicy.config_sections), if it has one."""
    inter_router_tls: bool = True
    """Its inter-router and edge listeners take mutual TLS only, where the plan has it
    (planning/internal_tls.py)."""
    tls_issuer: internal_tls.Issuer | None = None
    """The cert-manager issuer of its pods' certificates; None: the operator's own CA."""


@dataclass(frozen=True)
class AddressDecl:
    """One Address resource. ``creation_timestamp`` (RFC 3339, as the API gives it) decides who
    wins when two Addresses claim the same prefix or pattern."""

    name: str
    prefix: str | None = None
    pattern: str | None = None
    network: str = DEFAULT_NETWORK
    distribution: str | None = None
    undeliverable: str | None = None
    hold_timeout_seconds: float | None = None
    fallback_address: str | None = None
    priority: int | None = None
    creation_timestamp: str = ""
    generation: int = 0
    node: NodeDecl | None = None
    """Store the messages: queues or topics on the pods of ``node.router``."""


@dataclass(frozen=True)
class LinkRouteConnectionDecl:
    """Where a LinkRoute's links go when it names a host rather than a container id."""

    host: str
    port: int = AMQP_PORT
    tls_secret: str | None = None
    sasl_secret: str | None = None


@dataclass(frozen=True)
class LinkRouteDecl:
    """One LinkRoute resource: exactly one of prefix/pattern and of container_id/connection."""

    name: str
    prefix: str | None = None
    pattern: str | None = None
    network: str = DEFAULT_NETWORK
    direction: Direction = "both"
    container_id: str | None = None
    connection: LinkRouteConnectionDecl | None = None
    creation_timestamp: str = ""
    generation: int = 0


# ---------------------------------------------------------------------------------------------
# Output.


@dataclass(frozen=True)
class Problem:
    """Something wrong with one declared object, worded for its status condition."""

    kind: Kind
    name: str
    reason: str
    message: str


@dataclass(frozen=True, eq=True)
class PodPlan:
    """One router pod: who it is, where peers reach it, and the exact config it runs."""

    router: str
    ordinal: int
    name: str
    router_id: str
    host: str
    role: RouterRole
    config: RouterConfig | None
    """None when the owning Router has a problem that stops its configs being built."""


@dataclass(frozen=True)
class RouterPlan:
    """Everything the renderer needs for one Router resource."""

    decl: RouterDecl
    namespace: str
    network: str
    pods: tuple[PodPlan, ...]
    problems: tuple[Problem, ...]
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN
    link_routes: tuple[LinkRoutePlan, ...] = ()
    """The LinkRoutes folded into this Router's configs (those of its network)."""
    gateway: GatewayPlan | None = None
    """Its network's Gateway, as applied (None when it has none or it cannot be)."""
    internal_tls: bool = False
    """Its pods have certificates for mutual TLS with the network's routers (the Secret
    internal_tls.secret_name, mounted whole)."""

    @property
    def ok(self) -> bool:
        """Whether every pod has a config, i.e. the Router may be rendered and applied."""
        return all(pod.config is not None for pod in self.pods) and not any(
            p.reason in BLOCKING for p in self.problems
        )

    @property
    def name(self) -> str:
        return self.decl.name

    @property
    def mode(self) -> RouterRole:
        return self.decl.role

    @property
    def peers_service(self) -> str:
        return peers_service_name(self.decl.name)

    @property
    def client_ports(self) -> tuple[int, ...]:
        """The ports of the Router's own listeners (clients, and brokers on route-container
        listeners), in declaration order: what the client Service exposes."""
        return tuple(lsn.port for lsn in effective_listeners(self.decl))

    @property
    def tls_ports(self) -> frozenset[int]:
        """The ports of the listeners that serve TLS (only)."""
        return frozenset(lsn.port for lsn in effective_listeners(self.decl) if lsn.tls_secret)

    @property
    def tls_secrets(self) -> tuple[tuple[int, str], ...]:
        """(port, Secret) of every TLS listener, in declaration order: what the pods mount."""
        return tuple(
            (lsn.port, lsn.tls_secret)
            for lsn in effective_listeners(self.decl)
            if lsn.tls_secret is not None
        )

    @property
    def sasl_users_secret(self) -> str | None:
        """The Secret mounted as the router's sasldb, if any listener uses PLAIN."""
        return _sasl_users_secret(self.decl)

    @property
    def link_route_secrets(self) -> tuple[SecretMount, ...]:
        """The Secrets of the LinkRoute connections its pods dial, in LinkRoute order: what an
        interior Router's pods mount (edges dial no broker, so they mount none)."""
        if self.decl.role != "interior":
            return ()
        return tuple(mount for route in self.link_routes for mount in route.secret_mounts)

    @property
    def gateway_port(self) -> int | None:
        """The port of the Gateway's listener, if this Router's pods have it."""
        listener = None if self.gateway is None else self.gateway.listener(self.decl.name)
        return None if listener is None else listener.port

    @property
    def gateway_secrets(self) -> tuple[SecretMount, ...]:
        """The Secrets of the Gateway's TLS listener and connectors on this Router's pods."""
        return () if self.gateway is None else self.gateway.secret_mounts(self.decl.name)

    @property
    def endpoints(self) -> tuple[str, ...]:
        """The client Service's URLs, what applications connect to (for status): ``amqps://``
        for the TLS listeners, ``amqp://`` for the others."""
        host = f"{self.decl.name}.{self.namespace}.svc.{self.cluster_domain}"
        tls = self.tls_ports
        return tuple(
            f"{'amqps' if port in tls else 'amqp'}://{host}:{port}" for port in self.client_ports
        )


@dataclass(frozen=True)
class FoldedAddress:
    """An Address resource as it appears in every router config of its network."""

    name: str
    entry: Address


@dataclass(frozen=True)
class LinkRoutePlan:
    """A LinkRoute as it is folded into the routers of its network: ``entries`` go into every
    router's linkRoutes, ``connector`` (connection routes only) into every interior's
    connectors, with ``ssl_profile`` (a connection with a tlsSecret) into its sslProfiles."""

    name: str
    prefix: str | None
    pattern: str | None
    directions: tuple[Literal["in", "out"], ...]
    container_id: str | None
    connection: LinkRouteConnectionDecl | None
    entries: tuple[RouterLinkRoute, ...] = ()
    connector: Connector | None = None
    ssl_profile: SslProfile | None = None

    @property
    def secret_mounts(self) -> tuple[SecretMount, ...]:
        """What the interior pods mount for this LinkRoute's connection (its TLS, then its
        SASL Secret): the files its sslProfile and connector name."""
        connection = self.connection
        if connection is None:
            return ()
        mounts = []
        if connection.tls_secret is not None:
            path = link_route_secret_dir(self.name, "tls")
            mounts.append(
                SecretMount("lr", self.name, "tls", connection.tls_secret, path, (CA_CERT_FILE,))
            )
        if connection.sasl_secret is not None:
            path = link_route_secret_dir(self.name, "sasl")
            keys = (SASL_USERNAME_FILE, SASL_PASSWORD_FILE)
            mounts.append(SecretMount("lr", self.name, "sasl", connection.sasl_secret, path, keys))
        return tuple(mounts)

    @property
    def key(self) -> str:
        return f"prefix:{self.prefix}" if self.prefix is not None else f"pattern:{self.pattern}"

    @property
    def direction(self) -> Direction:
        """As declared: ``both`` when it has both entries."""
        return "both" if len(self.directions) == 2 else self.directions[0]

    def record(self) -> dict[str, Any]:
        """What was applied, as a LinkRoute spec's fields: the renderer keeps it beside the
        configs so that a paused LinkRoute can be folded again exactly as applied (its
        containerId entries carry no name to find them by)."""
        data: dict[str, Any] = {"prefix": self.prefix} if self.prefix is not None else {}
        if self.pattern is not None:
            data["pattern"] = self.pattern
        data["direction"] = self.direction
        if self.container_id is not None:
            data["containerId"] = self.container_id
        if self.connection is not None:
            connection: dict[str, Any] = {
                "host": self.connection.host,
                "port": self.connection.port,
            }
            if self.connection.tls_secret is not None:
                connection["tlsSecret"] = self.connection.tls_secret
            if self.connection.sasl_secret is not None:
                connection["saslSecret"] = self.connection.sasl_secret
            data["connection"] = connection
        return data


@dataclass(frozen=True)
class Connection:
    """One planned connection: ``dialer`` (pod name) keeps a connector to ``listener``."""

    dialer: str
    listener: str
    role: Literal["inter-router", "edge"]
    uplink: bool = False


@dataclass(frozen=True)
class NetworkPlan:
    """One network of a namespace: its routers, connections, addresses and link routes."""

    name: str
    routers: tuple[RouterPlan, ...]
    connections: tuple[Connection, ...]
    addresses: tuple[FoldedAddress, ...]
    link_routes: tuple[LinkRoutePlan, ...]
    gateway: GatewayPlan | None = None

    @property
    def pods(self) -> tuple[PodPlan, ...]:
        return tuple(pod for router in self.routers for pod in router.pods)

    @property
    def interiors(self) -> tuple[PodPlan, ...]:
        return tuple(pod for pod in self.pods if pod.role == "interior")


@dataclass(frozen=True)
class NamespacePlan:
    """The plan of a whole namespace: every network, and every problem found on the way."""

    namespace: str
    networks: Mapping[str, NetworkPlan]
    problems: tuple[Problem, ...]
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN

    def router(self, name: str) -> RouterPlan:
        """The plan of one Router resource; KeyError when it was not declared."""
        for network in self.networks.values():
            for router in network.routers:
                if router.name == name:
                    return router
        raise KeyError(name)

    def network_of(self, router: str) -> NetworkPlan:
        return self.networks[self.router(router).network]

    def pods(self) -> dict[str, PodPlan]:
        """Every pod of the namespace by name."""
        return {pod.name: pod for net in self.networks.values() for pod in net.pods}

    def problems_of(self, kind: Kind, name: str) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.kind == kind and p.name == name)


BLOCKING = frozenset(
    {"InvalidName", "InvalidNetwork", "InvalidListener", "PortConflict", "InvalidConfig"}
)
"""Problem reasons that stop a Router's configs from being built (others are warnings, such as
an edge network without interiors: the edges still run, unconnected)."""


# ---------------------------------------------------------------------------------------------
# Naming helpers shared with the renderer.


def pod_name(router: str, ordinal: int) -> str:
    return f"{router}-{ordinal}"


def peers_service_name(router: str) -> str:
    return f"{router}-peers"


def pod_host(router: str, ordinal: int, namespace: str, domain: str) -> str:
    """The pod's stable DNS name through the headless Service, valid before the pod is ready."""
    return f"{pod_name(router, ordinal)}.{peers_service_name(router)}.{namespace}.svc.{domain}"


def effective_listeners(decl: RouterDecl) -> tuple[ListenerDecl, ...]:
    return decl.listeners or (ListenerDecl(),)


def link_route_connector_name(link_route: str) -> str:
    return f"{LINK_ROUTE_CONNECTOR_PREFIX}{link_route}"


def listener_ssl_profile_name(port: int) -> str:
    """The sslProfile of the TLS listener on ``port`` (ports are unique per Router)."""
    return f"listener-{port}"


def listener_tls_dir(port: int) -> str:
    """Where the pod has the TLS Secret of the listener on ``port``."""
    return f"{TLS_DIR}/{port}"


def link_route_ssl_profile_name(link_route: str) -> str:
    """The sslProfile of a LinkRoute's connection (LinkRoute names are unique per namespace)."""
    return f"{LINK_ROUTE_SSL_PROFILE_PREFIX}{link_route}"


def link_route_secret_dir(link_route: str, kind: Literal["tls", "sasl"]) -> str:
    """Where an interior pod has the tlsSecret or saslSecret of a LinkRoute's connection. A
    LinkRoute's name is a DNS subdomain (the API server's rule), so a safe path component."""
    return f"{LINK_ROUTE_DIR}/{link_route}/{kind}"


# ---------------------------------------------------------------------------------------------
# The planner.


def plan_namespace(
    namespace: str,
    routers: Iterable[RouterDecl],
    addresses: Iterable[AddressDecl] = (),
    link_routes: Iterable[LinkRouteDecl] = (),
    gateways: Iterable[GatewayDecl] = (),
    *,
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN,
    edge_failovers: int = DEFAULT_EDGE_FAILOVERS,
    internal_tls: bool = False,
) -> NamespacePlan:
    """Plans every network of a namespace. Deterministic: the order of the inputs is irrelevant,
    so the same declarations always give byte-identical configs (no spurious updates).
    ``internal_tls``: mutual TLS between routers whose Routers keep interRouterTLS (on
    Kubernetes, planning/internal_tls.py)."""
    if edge_failovers < 0:
        raise ValueError(f"edge_failovers must be >= 0, not {edge_failovers}")
    routers = sorted(routers, key=lambda r: r.name)
    _reject_duplicate_names("Router", [r.name for r in routers])
    addresses = sorted(addresses, key=_age)
    _reject_duplicate_names("Address", [a.name for a in addresses])
    link_routes = sorted(link_routes, key=_age)
    _reject_duplicate_names("LinkRoute", [lr.name for lr in link_routes])
    gateways = sorted(gateways, key=_age)
    _reject_duplicate_names("Gateway", [g.name for g in gateways])

    problems: list[Problem] = []
    names = {r.network for r in routers} | {a.network for a in addresses}
    names |= {lr.network for lr in link_routes} | {g.network for g in gateways}
    networks: dict[str, NetworkPlan] = {}
    for net in sorted(names):
        networks[net] = _plan_network(
            namespace,
            net,
            [r for r in routers if r.network == net],
            [a for a in addresses if a.network == net],
            [lr for lr in link_routes if lr.network == net],
            [g for g in gateways if g.network == net],
            cluster_domain,
            edge_failovers,
            problems,
            internal_tls,
        )
    return NamespacePlan(namespace, networks, tuple(problems), cluster_domain)


def _age(decl: AddressDecl | LinkRouteDecl | GatewayDecl) -> tuple[str, str]:
    # An empty timestamp (not yet created) sorts as the newest: it must not win a conflict.
    return (decl.creation_timestamp or "\uffff", decl.name)


def _reject_duplicate_names(kind: str, names: list[str]) -> None:
    """The API guarantees unique names per kind and namespace; duplicates are an adapter bug."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"two {kind} declarations named {name!r} in one namespace")
        seen.add(name)


@dataclass
class _Pod:
    router: RouterDecl
    ordinal: int
    name: str
    host: str
    connectors: list[dict[str, Any]] = field(default_factory=list)
    internal_tls: bool = False
    """It has a certificate of the network's CA (planning/internal_tls.py)."""


def _plan_network(
    namespace: str,
    network: str,
    routers: list[RouterDecl],
    addresses: list[AddressDecl],
    link_routes: list[LinkRouteDecl],
    gateways: list[GatewayDecl],
    domain: str,
    edge_failovers: int,
    problems: list[Problem],
    internal_tls: bool = False,
) -> NetworkPlan:
    router_problems: dict[str, list[Problem]] = {r.name: [] for r in routers}

    def report(kind: Kind, name: str, reason: str, message: str) -> None:
        problem = Problem(kind, name, reason, message)
        problems.append(problem)
        if kind == "Router":
            router_problems[name].append(problem)

    # Identities first: a Router whose name cannot be a StatefulSet gets no pods at all.
    placed: list[RouterDecl] = []
    for decl in routers:
        why = _name_problem(decl.name)
        if why:
            report("Router", decl.name, "InvalidName", why)
        elif not _LABEL_VALUE.fullmatch(network):
            report(
                "Router",
                decl.name,
                "InvalidNetwork",
                f"network {network!r} must be a Kubernetes label value (at most 63 letters,"
                " digits, '-', '_' or '.', starting and ending with a letter or digit):"
                " router pods carry it as the label routernet.io/network",
            )
        else:
            placed.append(decl)
    # Certificates for every pod of a network where any Router takes mutual TLS: a connection
    # follows the Router it dials, so any pod may need one to dial.
    certified = internal_tls and any(decl.inter_router_tls for decl in placed)
    pods = {
        decl.name: [
            _Pod(
                decl,
                i,
                pod_name(decl.name, i),
                pod_host(decl.name, i, namespace, domain),
                internal_tls=certified,
            )
            for i in range(max(decl.replicas, 0))
        ]
        for decl in placed
    }
    interiors = [pod for decl in placed if decl.role == "interior" for pod in pods[decl.name]]
    edges_by_router = {decl.name: pods[decl.name] for decl in placed if decl.role == "edge"}

    connections: list[Connection] = []
    # Interior mesh: `interiors` is sorted by (Router name, ordinal); each dials all before it.
    for index, pod in enumerate(interiors):
        for peer in interiors[:index]:
            pod.connectors.append(_connector(peer, INTER_ROUTER_PORT, "inter-router", pod.router))
            connections.append(Connection(pod.name, peer.name, "inter-router"))

    for router_name, edge_pods in edges_by_router.items():
        if edge_pods and not interiors:
            report(
                "Router",
                router_name,
                "NoInteriorRouters",
                f"network {network!r} has no interior router pods: the edge routers of"
                f" {router_name!r} run without an uplink; add a Router with role interior"
                f" (and replicas > 0) to network {network!r}",
            )
            continue
        if not edge_pods:
            continue
        offset = _stable_offset(router_name, len(interiors))
        count = min(1 + edge_failovers, len(interiors))
        for pod in edge_pods:
            for k in range(count):
                peer = interiors[(offset + pod.ordinal + k) % len(interiors)]
                pod.connectors.append(_connector(peer, EDGE_PORT, "edge", pod.router))
                connections.append(Connection(pod.name, peer.name, "edge", uplink=k == 0))

    def node_hosts(node: NodeDecl) -> tuple[str, ...] | str:
        return _node_hosts(node, network, routers, pods)

    folded = _fold_addresses(addresses, report, node_hosts)
    planned_routes = _plan_link_routes(link_routes, report)
    # What an interior's pods listen on already: a gateway listener there could not bind.
    interior_ports = {
        decl.name: (
            *(lsn.port for lsn in effective_listeners(decl)),
            *RESERVED_PORTS,
            METRICS_PORT,
        )
        for decl in placed
        if decl.role == "interior"
    }
    gateway = plan_gateway(
        gateways, interior_ports, lambda name, why, text: report("Gateway", name, why, text)
    )

    router_plans: list[RouterPlan] = []
    for decl in routers:
        blocked = [p for p in router_problems[decl.name] if p.reason in BLOCKING]
        if decl.name in pods and not blocked:
            _check_listeners(decl, report)
            blocked = [p for p in router_problems[decl.name] if p.reason in BLOCKING]
        pod_plans: list[PodPlan] = []
        for pod in pods.get(decl.name, []):
            config = None
            if not blocked:
                config = _build_config(pod, folded, planned_routes, gateway, report)
                if config is None:
                    blocked = [p for p in router_problems[decl.name] if p.reason in BLOCKING]
            pod_plans.append(
                PodPlan(decl.name, pod.ordinal, pod.name, pod.name, pod.host, decl.role, config)
            )
        if blocked:  # one bad pod config blocks the whole Router: never apply half of it
            pod_plans = [_without_config(p) for p in pod_plans]
        router_plans.append(
            RouterPlan(
                decl,
                namespace,
                network,
                tuple(pod_plans),
                tuple(router_problems[decl.name]),
                domain,
                tuple(planned_routes),
                gateway,
                internal_tls=certified,
            )
        )
    return NetworkPlan(
        network,
        tuple(router_plans),
        tuple(connections),
        tuple(folded),
        tuple(planned_routes),
        gateway,
    )


def _without_config(pod: PodPlan) -> PodPlan:
    return PodPlan(pod.router, pod.ordinal, pod.name, pod.router_id, pod.host, pod.role, None)


def _name_problem(name: str) -> str | None:
    if len(name) > MAX_ROUTER_NAME or not _DNS_LABEL.fullmatch(name):
        return (
            f"Router name {name!r} must be a DNS label of at most {MAX_ROUTER_NAME} characters"
            " (lower-case letters, digits and '-', starting with a letter): it names a"
            " StatefulSet and the Services '<name>' and '<name>-peers'"
        )
    return None


def _stable_offset(name: str, modulo: int) -> int:
    """A per-Router starting point that does not depend on the process (unlike ``hash()``)."""
    digest = hashlib.sha256(name.encode()).digest()
    return int.from_bytes(digest[:8], "big") % modulo


def _connector(peer: _Pod, port: int, role: str, dialer: RouterDecl) -> dict[str, Any]:
    # Named after the peer so that a live config-sync can diff connectors by name.
    entry: dict[str, Any] = {"name": f"{role}/{peer.name}", "host": peer.host, "port": port}
    entry["role"] = role
    if dialer.link_capacity is not None:
        entry["linkCapacity"] = dialer.link_capacity
    if peer.internal_tls and peer.router.inter_router_tls:
        entry.update(internal_tls.connector_settings())
    return entry


def _sasl_users_secret(decl: RouterDecl) -> str | None:
    secrets = sorted({s for lsn in effective_listeners(decl) if (s := lsn.sasl_users_secret)})
    return secrets[0] if secrets else None


def _check_listeners(decl: RouterDecl, report: Report) -> None:
    secrets = {lsn.sasl_users_secret for lsn in effective_listeners(decl)} - {None}
    if len(secrets) > 1:
        report(
            "Router",
            decl.name,
            "InvalidListener",
            f"listeners name different saslUsersSecrets {sorted(secrets)}: a router has one"
            " user database, so all its PLAIN listeners must name the same Secret",
        )
    for index, lsn in enumerate(effective_listeners(decl)):
        label = f"listener {lsn.name or index} (port {lsn.port})"
        if "PLAIN" in (lsn.sasl_mechanisms or ()) and not secrets:
            report(
                "Router",
                decl.name,
                "InvalidListener",
                f"{label}: PLAIN needs saslUsersSecret, the Secret holding the users' sasldb",
            )
        if lsn.port == METRICS_PORT:
            report(
                "Router",
                decl.name,
                "PortConflict",
                f"{label}: port {lsn.port} is reserved for the metrics and probe endpoint;"
                " choose another port",
            )
        if decl.role == "interior" and lsn.port in RESERVED_PORTS:
            report(
                "Router",
                decl.name,
                "PortConflict",
                f"{label}: port {lsn.port} is reserved for {RESERVED_PORTS[lsn.port]}"
                " connections on interior routers; choose another port",
            )


def _listener_entries(decl: RouterDecl, tls: bool = False) -> list[dict[str, Any]]:
    """The Router's own listeners, and an interior's inter-router and edge ones (``tls``:
    mutual TLS only)."""
    entries: list[dict[str, Any]] = []
    for lsn in effective_listeners(decl):
        entry: dict[str, Any] = {"host": lsn.host, "port": lsn.port, "role": lsn.role}
        optional = {
            "name": lsn.name,
            "saslMechanisms": list(lsn.sasl_mechanisms) if lsn.sasl_mechanisms else None,
            "authenticatePeer": lsn.authenticate_peer,
            "linkCapacity": lsn.link_capacity or decl.link_capacity,
            "idleTimeoutSeconds": lsn.idle_timeout_seconds,
            "maxFrameSize": lsn.max_frame_size,
            "stripAnnotations": lsn.strip_annotations,
        }
        entry.update({key: value for key, value in optional.items() if value is not None})
        if lsn.tls_secret is not None:
            entry["sslProfile"] = listener_ssl_profile_name(lsn.port)
            entry["requireSsl"] = True
        entries.append(entry)
    if decl.role == "interior":
        for port, role in RESERVED_PORTS.items():
            entry = {"host": "0.0.0.0", "port": port, "role": role}
            if decl.link_capacity is not None:
                entry["linkCapacity"] = decl.link_capacity
            if tls:
                entry.update(internal_tls.listener_settings())
            entries.append(entry)
    return entries


def _ssl_profiles(decl: RouterDecl) -> list[dict[str, Any]]:
    return [
        {
            "name": listener_ssl_profile_name(lsn.port),
            "certFile": f"{listener_tls_dir(lsn.port)}/{TLS_CERT_FILE}",
            "privateKeyFile": f"{listener_tls_dir(lsn.port)}/{TLS_KEY_FILE}",
        }
        for lsn in effective_listeners(decl)
        if lsn.tls_secret is not None
    ]


def _build_config(
    pod: _Pod,
    folded: list[FoldedAddress],
    routes: list[LinkRoutePlan],
    gateway: GatewayPlan | None,
    report: Report,
) -> RouterConfig | None:
    """Validates with the router's own model, so nothing reaches a pod that it would refuse;
    all but the files (TLS certificates, the SASL directory), which exist in the pod (mounted
    volumes) but not where the operator runs: the router checks those when it loads this."""
    router: dict[str, Any] = {"id": pod.name, "mode": pod.router.role}
    if pod.router.management_writers:
        router["managementWriters"] = list(pod.router.management_writers)
    if _sasl_users_secret(pod.router) is not None:
        router["saslConfigDir"] = SASL_CONFIG_DIR
        router["saslConfigName"] = SASL_CONFIG_NAME
    data = {
        "router": router,
        "sslProfiles": _ssl_profiles(pod.router)
        + _route_ssl_profiles(pod.router, routes)
        + _gateway_entries(gateway, "sslProfiles", pod)
        + ([internal_tls.ssl_profile(pod.name)] if pod.internal_tls else []),
        "listeners": _listener_entries(pod.router, pod.internal_tls and pod.router.inter_router_tls)
        + _gateway_entries(gateway, "listeners", pod),
        "connectors": pod.connectors
        + _route_connectors(pod.router, routes)
        + _gateway_entries(gateway, "connectors", pod),
        "addresses": [f.entry.model_dump(exclude_defaults=True) for f in folded],
        "linkRoutes": [e.model_dump(exclude_defaults=True) for r in routes for e in r.entries],
        # /metrics, /healthz and /readyz for the kubelet's probes and Prometheus
        # (rendering/router.py).
        "telemetry": {"http": {"host": "0.0.0.0", "port": METRICS_PORT}},
    }
    if pod.router.policy is not None:
        data.update(copy.deepcopy(dict(pod.router.policy)))
    if pod.router.store is not None:
        data["store"] = {"path": STORE_PATH}  # the pod's PersistentVolumeClaim (render)
    if gateway is not None:
        data["gateway"] = gateway.section(pod.router.name)
    try:
        return RouterConfig.model_validate(data, context={FILES_CONTEXT_KEY: False})
    except ValidationError as err:
        message = str(ConfigError.from_validation(err, context=f"router {pod.name}: "))
        report("Router", pod.router.name, "InvalidConfig", message)
        return None


def _gateway_entries(
    gateway: GatewayPlan | None,
    field: Literal["sslProfiles", "listeners", "connectors"],
    pod: _Pod,
) -> list[dict[str, Any]]:
    """The network's Gateway's listener or connectors, and their sslProfiles, on the pods of
    the Router it names."""
    if gateway is None:
        return []
    if field == "sslProfiles":
        return gateway.ssl_profiles(pod.router.name)
    if field == "listeners":
        return gateway.listeners(pod.router.name)
    return gateway.connectors(pod.router.name)


def _route_ssl_profiles(dialer: RouterDecl, routes: list[LinkRoutePlan]) -> list[dict[str, Any]]:
    """The sslProfiles of the connectors of ``_route_connectors``: interiors only, whose pods
    mount the files they name."""
    if dialer.role != "interior":
        return []
    profiles = [r.ssl_profile.model_dump(exclude_defaults=True) for r in routes if r.ssl_profile]
    return sorted(profiles, key=lambda profile: profile["name"])


def _route_connectors(dialer: RouterDecl, routes: list[LinkRoutePlan]) -> list[dict[str, Any]]:
    """Interior routers dial the brokers of connection routes themselves; an edge passes the
    attach up to its interior, so it needs no connection of its own."""
    if dialer.role != "interior":
        return []
    entries = []
    for route in routes:
        if route.connector is not None:
            entry = route.connector.model_dump(exclude_defaults=True)
            if dialer.link_capacity is not None:
                entry["linkCapacity"] = dialer.link_capacity
            entries.append(entry)
    return sorted(entries, key=lambda entry: entry["name"])


def _node_hosts(
    node: NodeDecl, network: str, routers: list[RouterDecl], pods: Mapping[str, list[_Pod]]
) -> tuple[str, ...] | str:
    """The router ids that host the nodes: the pods of ``node.router`` (every router of the
    network gets the same list, and each places a node on one of them by the same hash), or
    why there are none."""
    decl = next((r for r in routers if r.name == node.router), None)
    if decl is None:
        return f"node.router {node.router!r} is not a Router of network {network!r}"
    if decl.role != "interior":
        return f"node.router {node.router!r} is an edge Router: nodes live on interior routers"
    if decl.store is None:
        return (
            f"node.router {node.router!r} has no spec.store, so its pods have nowhere to keep"
            " messages (store is immutable: create the Router with it)"
        )
    hosts = tuple(pod.name for pod in pods.get(decl.name, [])[: decl.hosts])
    if not hosts:
        return f"node.router {node.router!r} has no pods (replicas 0, or a Router in error)"
    return hosts


def _fold_addresses(
    addresses: list[AddressDecl],
    report: Report,
    node_hosts: Callable[[NodeDecl], tuple[str, ...] | str],
) -> list[FoldedAddress]:
    """``addresses`` is sorted oldest first, so the first claim on a key wins. An Address
    whose nodes have no hosts is not applied at all rather than applied without its node: its
    messages would then be routed to whoever consumes, unstored, and nobody would notice."""
    owners: dict[str, str] = {}
    folded: list[FoldedAddress] = []
    for decl in addresses:
        node: dict[str, Any] | None = None
        if decl.node is not None:
            hosts = node_hosts(decl.node)
            if isinstance(hosts, str):
                report(
                    "Address",
                    decl.name,
                    "InvalidNode",
                    f"{hosts}; this Address is not applied (its messages would be routed"
                    " without being stored)",
                )
                continue
            node = {**decl.node.settings.model_dump(exclude_defaults=True), "hosts": list(hosts)}
        data = {
            "prefix": decl.prefix,
            "pattern": decl.pattern,
            "distribution": decl.distribution,
            "undeliverable": decl.undeliverable,
            "holdTimeoutSeconds": decl.hold_timeout_seconds,
            "fallbackAddress": decl.fallback_address,
            "priority": decl.priority,
            "node": node,
        }
        data = {k: v for k, v in data.items() if v is not None}
        try:
            entry = Address.model_validate(data)
        except ValidationError as err:
            report("Address", decl.name, "InvalidAddress", str(ConfigError.from_validation(err)))
            continue
        if entry.key in owners:
            report(
                "Address",
                decl.name,
                "Conflict",
                f"{entry.key} is already declared by Address {owners[entry.key]!r} (older);"
                " this one is not applied",
            )
            continue
        owners[entry.key] = decl.name
        folded.append(FoldedAddress(decl.name, entry))
    folded.sort(key=lambda f: f.entry.key)
    return folded


def _plan_link_routes(routes: list[LinkRouteDecl], report: Report) -> list[LinkRoutePlan]:
    """``routes`` is sorted oldest first, so the first claim on a prefix/pattern and direction
    wins. A refused LinkRoute claims nothing: it is in no router."""
    claimed: dict[str, str] = {}
    planned: list[LinkRoutePlan] = []
    for decl in routes:
        route = _link_route_plan(decl, report)
        if route is None:
            continue
        taken = [claimed[e.key] for e in route.entries if e.key in claimed]
        if taken:
            report(
                "LinkRoute",
                decl.name,
                "Conflict",
                f"{route.key} ({decl.direction}) is already declared by LinkRoute {taken[0]!r}"
                " (older); this one is not applied",
            )
            continue
        claimed.update({e.key: decl.name for e in route.entries})
        planned.append(route)
    planned.sort(key=lambda lr: (lr.key, lr.directions))
    return planned


def _link_route_plan(decl: LinkRouteDecl, report: Report) -> LinkRoutePlan | None:
    """The entries and connector of one LinkRoute, validated with the router's own models (so
    a bad one is this LinkRoute's problem, never a Router's); None when it cannot be applied.
    The files its connector names (a mounted Secret's) are not checked here: they exist only in
    the interior pods."""
    directions: tuple[Literal["in", "out"], ...] = (
        ("in", "out") if decl.direction == "both" else (decl.direction,)
    )
    name = link_route_connector_name(decl.name) if decl.connection is not None else None
    try:
        entries = tuple(
            RouterLinkRoute.model_validate(
                {
                    "prefix": decl.prefix,
                    "pattern": decl.pattern,
                    "direction": direction,
                    "containerId": decl.container_id,
                    "connection": name,
                }
            )
            for direction in directions
        )
        connector = ssl_profile = None
        if decl.connection is not None:
            ssl_profile, fields = _connection_security(decl.name, decl.connection)
            connector = Connector.model_validate(
                {
                    "name": name,
                    "host": decl.connection.host,
                    "port": decl.connection.port,
                    "role": "route-container",
                    **fields,
                }
            )
    except ValidationError as err:
        report("LinkRoute", decl.name, "Invalid", str(ConfigError.from_validation(err)))
        return None
    return LinkRoutePlan(
        decl.name,
        decl.prefix,
        decl.pattern,
        directions,
        decl.container_id,
        decl.connection,
        entries,
        connector,
        ssl_profile,
    )


def _connection_security(
    name: str, connection: LinkRouteConnectionDecl
) -> tuple[SslProfile | None, dict[str, Any]]:
    """The sslProfile (tlsSecret) and the connector's TLS and SASL fields (tlsSecret,
    saslSecret) of a LinkRoute connection, naming the files its Secrets are mounted as. TLS
    verifies the broker's certificate against the Secret's ca.crt and its host name (the
    router's default, said here all the same); PLAIN reads the credentials on every attempt,
    so a changed saslSecret is used from the next connection without a restart."""
    profile = None
    fields: dict[str, Any] = {}
    if connection.tls_secret is not None:
        profile = SslProfile.model_validate(
            {
                "name": link_route_ssl_profile_name(name),
                "caCertFile": f"{link_route_secret_dir(name, 'tls')}/{CA_CERT_FILE}",
            },
            context={FILES_CONTEXT_KEY: False},
        )
        fields["sslProfile"] = profile.name
        fields["verifyHostname"] = True
    if connection.sasl_secret is not None:
        sasl = link_route_secret_dir(name, "sasl")
        fields["saslMechanisms"] = ["PLAIN"]
        fields["saslUsername"] = f"file:{sasl}/{SASL_USERNAME_FILE}"
        fields["saslPassword"] = f"file:{sasl}/{SASL_PASSWORD_FILE}"
    return profile, fields


# ---------------------------------------------------------------------------------------------
# Differences between two plans: what a reconcile changes, for events, logs and the tests.


@dataclass(frozen=True)
class PodChange:
    """How one pod's config changes between two plans. ``restart`` is true when the router mode
    changes, the one thing a running router cannot apply in place."""

    pod: str
    change: Literal["added", "removed", "changed"]
    restart: bool = False
    connectors_added: tuple[str, ...] = ()
    connectors_removed: tuple[str, ...] = ()
    connectors_changed: tuple[str, ...] = ()
    addresses_added: tuple[str, ...] = ()
    addresses_removed: tuple[str, ...] = ()
    addresses_changed: tuple[str, ...] = ()
    listeners_changed: bool = False
    link_routes_added: tuple[str, ...] = ()
    link_routes_removed: tuple[str, ...] = ()
    link_routes_changed: tuple[str, ...] = ()


def diff_plans(old: NamespacePlan | None, new: NamespacePlan) -> tuple[PodChange, ...]:
    """Per-pod changes from ``old`` to ``new``, sorted by pod name; unchanged pods omitted.
    Pods without a config (blocked Routers) are compared as absent."""
    before = {n: p.config for n, p in (old.pods() if old else {}).items() if p.config}
    after = {n: p.config for n, p in new.pods().items() if p.config}
    changes: list[PodChange] = []
    for name in sorted(before.keys() | after.keys()):
        a, b = before.get(name), after.get(name)
        if a is None:
            changes.append(PodChange(name, "added"))
        elif b is None:
            changes.append(PodChange(name, "removed"))
        elif a != b:
            connectors = _compare(
                {c.name: c for c in a.connectors}, {c.name: c for c in b.connectors}
            )
            addresses = _compare({x.key: x for x in a.addresses}, {x.key: x for x in b.addresses})
            routes = _compare({r.key: r for r in a.linkRoutes}, {r.key: r for r in b.linkRoutes})
            changes.append(
                PodChange(
                    name,
                    "changed",
                    restart=a.router.mode != b.router.mode,
                    connectors_added=connectors[0],
                    connectors_removed=connectors[1],
                    connectors_changed=connectors[2],
                    addresses_added=addresses[0],
                    addresses_removed=addresses[1],
                    addresses_changed=addresses[2],
                    listeners_changed=a.listeners != b.listeners,
                    link_routes_added=routes[0],
                    link_routes_removed=routes[1],
                    link_routes_changed=routes[2],
                )
            )
    return tuple(changes)


def _compare(
    old: Mapping[str, object], new: Mapping[str, object]
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(added, removed, changed) keys, each sorted."""
    added = tuple(sorted(new.keys() - old.keys()))
    removed = tuple(sorted(old.keys() - new.keys()))
    changed = tuple(sorted(k for k in old.keys() & new.keys() if old[k] != new[k]))
    return added, removed, changed
