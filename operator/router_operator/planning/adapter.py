"""Between the API and the planner: custom resources in, planner declarations out; and back,
what happened to each object as its status.

Pure (no I/O), so that every rule about what a status says is tested without a cluster, and so
that the reconciler (which does the I/O) stays a short sequence of steps. Choices, and why:

- An object whose spec the models refuse (it got past the API server: an older CRD, a disabled
  CEL rule, a hand-edited etcd) is reported as ``Ready False / InvalidSpec`` and never rendered.
  An invalid Router still takes part in the topology with what can be read of it (replicas, role,
  network), so that its peers keep their connectors to its pods, which keep running.
- A paused object keeps everything else in its status as it was and only says that it is paused:
  ``observedGeneration`` does not move, since that generation was not acted upon.
- A paused Address stays applied as it was last applied. Its prefix/pattern is immutable (CEL),
  so its entry can be found in the routers' current configurations by that key and folded again
  unchanged; one never applied stays out. A paused LinkRoute likewise, from the record of the
  LinkRoutes applied that each Router's ConfigMap keeps (render.LINK_ROUTES_KEY).
- Conditions are one per type (``set_condition``); ``lastTransitionTime`` moves only with status.
- Status is written only when it differs from what is stored, so a resync of an unchanged
  namespace writes nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import ValidationError

from router.config.models import Address as RouterAddress
from router.gateway.config import Gateway as RouterGateway
from router.nodes.config import NodeSettings
from router_operator.planning import internal_tls
from router_operator.planning.handoff import IDLE, MOVING, STORE_HAND_OFF, HandOff
from router_operator.planning.mesh import Verdict
from router_operator.planning.names import selector
from router_operator.planning.planner import (
    BLOCKING,
    AddressDecl,
    LinkRouteConnectionDecl,
    LinkRouteDecl,
    ListenerDecl,
    Problem,
    RouterDecl,
)
from router_operator.resources.autoscaling import CONDITIONS as AUTOSCALER_CONDITIONS
from router_operator.resources.gateway import (
    ConnectorTlsDecl,
    GatewayConnectorDecl,
    GatewayDecl,
    GatewayListenerDecl,
    ListenerTlsDecl,
)
from router_operator.resources.models import (
    DEFAULT_NETWORK,
    PAUSE_ANNOTATION,
    READY,
    RECONCILIATION_PAUSED,
    ROUTER_CONTAINER,
    Address,
    AddressStatus,
    CustomResource,
    Gateway,
    GatewayStatus,
    LinkRoute,
    LinkRouteSpec,
    LinkRouteStatus,
    Router,
    RouterStatus,
    is_paused,
)
from router_operator.resources.nodes import NodeDecl, StoreDecl, node_decl

CONFIG_APPLIED = "ConfigApplied"
"""Router: its children (StatefulSet, Services, ConfigMap, ...) match the spec of
``observedGeneration``."""
REPLICAS_READY = "ReplicasReady"
"""Router: every requested router pod is ready (from the StatefulSet's status)."""
MESH_CONNECTED = "MeshConnected"
"""Router: every interior of its network sees every other one (edges: and each has an uplink),
from what the router pods report on their Pods (planning/mesh.py)."""

AnyStatus = RouterStatus | AddressStatus | LinkRouteStatus | GatewayStatus
STATUS_CLASSES: dict[str, type[AnyStatus]] = {
    "Router": RouterStatus,
    "Address": AddressStatus,
    "LinkRoute": LinkRouteStatus,
    "Gateway": GatewayStatus,
}
KIND_CLASSES: dict[str, type[CustomResource]] = {
    "Router": Router,
    "Address": Address,
    "LinkRoute": LinkRoute,
    "Gateway": Gateway,
}


# --- reading objects ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Parsed:
    """One custom resource as listed: validated with the models when it can be."""

    kind: str
    body: Mapping[str, Any]
    model: CustomResource | None
    error: str | None
    """Why the models refused the object (``model`` is None then)."""
    status: AnyStatus

    @property
    def metadata(self) -> Mapping[str, Any]:
        return self.body.get("metadata") or {}

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace", ""))

    @property
    def uid(self) -> str:
        return str(self.metadata.get("uid") or "")

    @property
    def generation(self) -> int | None:
        value = self.metadata.get("generation")
        return value if isinstance(value, int) else None

    @property
    def creation_timestamp(self) -> str:
        return str(self.metadata.get("creationTimestamp") or "")

    @property
    def paused(self) -> bool:
        return is_paused(self.metadata.get("annotations"))

    @property
    def deleting(self) -> bool:
        """Marked for deletion: its children are going away with it (garbage collection), so
        it must neither be applied (that would recreate them) nor count as a peer."""
        return bool(self.metadata.get("deletionTimestamp"))

    @property
    def spec(self) -> Mapping[str, Any]:
        spec = self.body.get("spec")
        return spec if isinstance(spec, Mapping) else {}


def parse(kind: str, body: Mapping[str, Any]) -> Parsed:
    """Validates everything but the status, which is read leniently on its own: a status the
    models cannot read (a newer operator's) is no reason to stop reconciling the spec."""
    status_cls = STATUS_CLASSES[kind]
    try:
        status = status_cls.model_validate(body.get("status") or {})
    except ValidationError:
        status = status_cls()
    data = {key: value for key, value in body.items() if key != "status"}
    try:
        model: CustomResource | None = KIND_CLASSES[kind].model_validate(data)
        error = None
    except ValidationError as err:
        model, error = None, validation_message(err)
    return Parsed(kind, body, model, error, status)


def validation_message(err: ValidationError) -> str:
    """One line per broken rule, each naming its field, as ``kubectl`` users read them."""
    lines = []
    for item in err.errors():
        where = ".".join(str(part) for part in item["loc"])
        text = str(item["msg"]).removeprefix("Value error, ")
        lines.append(f"{where}: {text}" if where else text)
    return "; ".join(lines)


# --- declarations for the planner --------------------------------------------------------------


def router_decl(parsed: Parsed, default_image: str) -> RouterDecl:
    """A valid Router as the planner takes it; the operator's image when it names none."""
    router = parsed.model
    assert isinstance(router, Router), "router_decl needs a valid Router"
    spec = router.spec
    listeners = tuple(
        ListenerDecl(
            port=lst.port,
            role=lst.role,
            sasl_mechanisms=tuple(lst.saslMechanisms),
            sasl_users_secret=lst.saslUsersSecret,
            authenticate_peer=lst.authenticatePeer,
            tls_secret=lst.tlsSecret,
        )
        for lst in spec.listeners
    )
    return RouterDecl(
        name=parsed.name,
        uid=parsed.uid,
        replicas=spec.replicas,
        role=spec.role,
        network=spec.network,
        listeners=listeners,
        link_capacity=spec.linkCapacity,
        image=spec.image or default_image,
        resources=spec.resources.model_dump(exclude_none=True),
        pod_template=spec.podTemplate.model_dump(exclude_none=True) if spec.podTemplate else None,
        generation=parsed.generation or 0,
        store=None
        if spec.store is None
        else StoreDecl(spec.store.size, spec.store.storageClassName),
        management_writers=tuple(spec.managementWriters),
        policy=spec.policy.config_sections() if spec.policy is not None else None,
        inter_router_tls=spec.interRouterTLS == "enabled",
        tls_issuer=None
        if spec.interRouterIssuer is None
        else internal_tls.Issuer(
            spec.interRouterIssuer.name, spec.interRouterIssuer.kind, spec.interRouterIssuer.group
        ),
    )


def topology_decl(parsed: Parsed) -> RouterDecl:
    """An invalid Router as far as the topology goes: its pods keep running, so its peers must
    keep their connectors to them. Whatever cannot be read takes its default."""
    spec = parsed.spec
    replicas = spec.get("replicas", 1)
    role = spec.get("role", "interior")
    network = spec.get("network", DEFAULT_NETWORK)
    return RouterDecl(
        name=parsed.name,
        uid=parsed.uid,
        replicas=replicas if isinstance(replicas, int) and replicas >= 0 else 1,
        role=role if role in ("interior", "edge") else "interior",
        network=network if isinstance(network, str) else DEFAULT_NETWORK,
        generation=parsed.generation or 0,
        # Its pods keep their volumes (store is immutable): the nodes they host stay there.
        store=StoreDecl() if isinstance(spec.get("store"), Mapping) else None,
    )


def address_decl(parsed: Parsed) -> AddressDecl:
    address = parsed.model
    assert isinstance(address, Address), "address_decl needs a valid Address"
    spec = address.spec
    return AddressDecl(
        name=parsed.name,
        prefix=spec.prefix,
        pattern=spec.pattern,
        network=spec.network,
        distribution=spec.distribution,
        undeliverable=spec.undeliverable.action,
        hold_timeout_seconds=spec.undeliverable.holdTimeoutSeconds,
        fallback_address=spec.undeliverable.fallbackAddress,
        priority=spec.priority,
        creation_timestamp=parsed.creation_timestamp,
        generation=parsed.generation or 0,
        node=None if spec.node is None else node_decl(spec.node),
    )


def address_key(parsed: Parsed) -> str:
    """The key the router's config gives the Address's entry (router/config/models.py)."""
    address = parsed.model
    assert isinstance(address, Address)
    spec = address.spec
    return f"prefix:{spec.prefix}" if spec.prefix is not None else f"pattern:{spec.pattern}"


def frozen_address_decl(parsed: Parsed, entry: Mapping[str, Any]) -> AddressDecl:
    """A paused Address as the routers have it: ``entry`` is its item in a router config."""
    applied = RouterAddress.model_validate(entry)
    address = parsed.model
    assert isinstance(address, Address)
    return AddressDecl(
        name=parsed.name,
        prefix=applied.prefix,
        pattern=applied.pattern,
        network=address.spec.network,
        distribution=applied.distribution,
        undeliverable=applied.undeliverable,
        hold_timeout_seconds=(
            applied.holdTimeoutSeconds if applied.undeliverable == "hold" else None
        ),
        fallback_address=applied.fallbackAddress,
        priority=applied.priority,
        creation_timestamp=parsed.creation_timestamp,
        generation=parsed.generation or 0,
        node=None if applied.node is None else _frozen_node(applied.node),
    )


def _frozen_node(node: NodeSettings) -> NodeDecl:
    """A paused Address's node as applied: its settings, on the Router whose pods its hosts
    are (``<router>-<ordinal>``); the hosts themselves follow that Router's replicas, as they
    would for any Address. Hosts that name no pod make a Router no network has, so the Address
    is then a problem rather than folded without its node."""
    routers = {host.rpartition("-")[0] for host in node.hosts}
    router = routers.pop() if len(routers) == 1 else ""
    return NodeDecl(router, node.model_copy(update={"hosts": []}))


def link_route_decl(parsed: Parsed) -> LinkRouteDecl:
    link_route = parsed.model
    assert isinstance(link_route, LinkRoute), "link_route_decl needs a valid LinkRoute"
    return _link_route_decl(parsed, link_route.spec)


def frozen_link_route_decl(
    parsed: Parsed, network: str, record: Mapping[str, Any]
) -> LinkRouteDecl | None:
    """A paused LinkRoute as the routers of ``network`` have it: ``record`` is its spec as
    applied (render.LINK_ROUTES_KEY). None when the record cannot be read (another version's):
    it then stays out, as one never applied."""
    try:
        spec = LinkRouteSpec.model_validate({**record, "network": network})
    except ValidationError:
        return None
    return _link_route_decl(parsed, spec)


def _link_route_decl(parsed: Parsed, spec: LinkRouteSpec) -> LinkRouteDecl:
    connection = None
    if spec.connection is not None:
        connection = LinkRouteConnectionDecl(
            host=spec.connection.host,
            port=spec.connection.port,
            tls_secret=spec.connection.tlsSecret,
            sasl_secret=spec.connection.saslSecret,
        )
    return LinkRouteDecl(
        name=parsed.name,
        prefix=spec.prefix,
        pattern=spec.pattern,
        network=spec.network,
        direction=spec.direction,
        container_id=spec.containerId,
        connection=connection,
        creation_timestamp=parsed.creation_timestamp,
        generation=parsed.generation or 0,
    )


def gateway_decl(parsed: Parsed) -> GatewayDecl:
    """A valid Gateway as the planner takes it: its routing as the router config's section."""
    gateway = parsed.model
    assert isinstance(gateway, Gateway), "gateway_decl needs a valid Gateway"
    spec = gateway.spec
    routing = RouterGateway(
        rules=spec.rules,
        defaultContainer=spec.defaultContainer,
        export=spec.export,
        containers=spec.containers,
    )
    listener = None
    if spec.listener is not None:
        tls = spec.listener.tls
        listener = GatewayListenerDecl(
            spec.listener.router,
            spec.listener.port,
            None if tls is None else ListenerTlsDecl(tls.secret, tls.caSecret),
        )
    connectors = tuple(
        GatewayConnectorDecl(
            c.name,
            c.router,
            c.host,
            c.port,
            None
            if c.tls is None
            else ConnectorTlsDecl(c.tls.secret, c.tls.caSecret, c.tls.verifyHostname),
        )
        for c in spec.connectors
    )
    return GatewayDecl(
        name=parsed.name,
        network=spec.network,
        routing=routing,
        listener=listener,
        connectors=connectors,
        creation_timestamp=parsed.creation_timestamp,
        generation=parsed.generation or 0,
    )


def with_pull_policy(
    children: Sequence[Mapping[str, Any]], policy: str | None, decl: RouterDecl
) -> list[dict[str, Any]]:
    """The operator's image pull policy (the chart's ``router.image.pullPolicy``) on the router
    container, unless the Router's podTemplate sets one for it itself."""
    result = [copy.deepcopy(dict(child)) for child in children]
    if not policy or _template_sets_pull_policy(decl.pod_template):
        return result
    for child in result:
        if child.get("kind") == "StatefulSet":
            for container in child["spec"]["template"]["spec"]["containers"]:
                if container.get("name") == ROUTER_CONTAINER:
                    container["imagePullPolicy"] = policy
    return result


def _template_sets_pull_policy(pod_template: Mapping[str, Any] | None) -> bool:
    containers = ((pod_template or {}).get("spec") or {}).get("containers") or []
    return any(
        isinstance(c, Mapping) and c.get("name") == ROUTER_CONTAINER and "imagePullPolicy" in c
        for c in containers
    )


# --- what happened, as status -------------------------------------------------------------------


RouterState = Literal["applied", "invalid", "blocked", "failed", "paused"]


@dataclass(frozen=True)
class RouterOutcome:
    """What a reconcile did with one Router's children; its status is computed from this and
    from the StatefulSet's status, which changes on its own schedule."""

    state: RouterState
    reason: str
    message: str
    generation: int | None
    desired_replicas: int = 0
    endpoints: tuple[str, ...] = ()
    warnings: tuple[Problem, ...] = ()
    """Problems that do not stop the configs (e.g. edges without interiors)."""
    transient: bool = False
    """``failed`` only: worth retrying as is."""

    @property
    def applied(self) -> bool:
        return self.state == "applied"

    def why_not_applied(self) -> str:
        """A few words for other objects' status (an Address not applied to this Router)."""
        return {
            "paused": "paused",
            "invalid": "invalid spec",
            "blocked": f"not rendered: {self.reason}",
            "failed": "apply failed",
            "applied": "applied",
        }[self.state]


def paused_message(kind: str) -> str:
    what = {
        "Router": (
            "the operator changes none of this Router's children (StatefulSet, Services,"
            " ConfigMap, PodDisruptionBudget, ServiceAccount)"
        ),
        "Address": (
            "the routers keep this Address as it was last applied (or without it, if it never"
            " was); spec changes wait"
        ),
        "LinkRoute": (
            "the routers keep this LinkRoute as it was last applied (or without it, if it never"
            " was); spec changes wait"
        ),
    }[kind]
    return (
        f"annotation {PAUSE_ANNOTATION}=true: {what}; the rest of this status is as of the last"
        " reconciliation. Remove the annotation to resume."
    )


def _start(parsed: Parsed) -> AnyStatus:
    return parsed.status.model_copy(deep=True)


def _set_paused(status: AnyStatus, kind: str, now: datetime | None) -> None:
    status.set_condition(RECONCILIATION_PAUSED, "True", "Paused", paused_message(kind), now=now)


def _clear_paused(status: AnyStatus) -> None:
    status.conditions = [c for c in status.conditions if c.type != RECONCILIATION_PAUSED]


def router_status(
    parsed: Parsed,
    outcome: RouterOutcome,
    statefulset: Mapping[str, Any] | None,
    *,
    mesh: Verdict | None = None,
    handoff: HandOff | None = None,
    autoscaler: RouterStatus | None = None,
    now: datetime | None = None,
) -> RouterStatus:
    """A Router's status from what its reconcile did, its StatefulSet's status and what its
    network's pods report (``mesh``; None: not observed) and, with a store, where a scale-in
    stands (``handoff``: StoreHandOff says why the pods are kept, for kubectl describe); and
    what the operator's autoscaler last said of it (``autoscaler``: its ``autoscaling`` and
    conditions replace those it started from; None: nothing said since this process began).

    Ready is True when the children match the spec and every requested pod is ready.
    MeshConnected (and meshConnected) say whether the network's routers see each other; it does
    not count towards Ready: a router image that does not report would keep a working Router
    from ever being Ready, and a mesh healing after a pod restart is no reason to unready it."""
    status = _start(parsed)
    assert isinstance(status, RouterStatus)
    status.selector = selector(parsed.name)
    observed = statefulset or {}
    status.replicas = int(observed.get("replicas") or 0)
    status.readyReplicas = int(observed.get("readyReplicas") or 0)
    if outcome.state == "paused":
        _set_paused(status, "Router", now)
        return status
    _clear_paused(status)
    gen = outcome.generation  # what was acted upon, even if the spec moved on since
    status.observedGeneration = gen
    if outcome.endpoints or outcome.applied:
        status.endpoints = list(outcome.endpoints)

    def cond(type_: str, value: Literal["True", "False", "Unknown"], reason: str, msg: str) -> None:
        status.set_condition(type_, value, reason, msg, observed_generation=gen, now=now)

    if outcome.applied:
        cond(CONFIG_APPLIED, "True", outcome.reason, outcome.message)
    else:
        cond(CONFIG_APPLIED, "False", outcome.reason, outcome.message)
    desired = outcome.desired_replicas
    ready = status.readyReplicas
    pods = f"{ready} of {desired} router pods ready"
    if ready >= desired:
        cond(REPLICAS_READY, "True", "AllReady", pods)
    else:
        cond(REPLICAS_READY, "False", "NotReady", pods)
    if mesh is None:
        mesh = Verdict("Unknown", "NotObserved", "the routers' reports are not observed")
    status.meshConnected = mesh.connected
    cond(MESH_CONNECTED, mesh.status, mesh.reason, mesh.message)
    if handoff is not None:
        value: Literal["True", "False"] = "True" if handoff.holding else "False"
        cond(STORE_HAND_OFF, value, MOVING if handoff.holding else IDLE, handoff.message)
    if not outcome.applied:
        cond(READY, "False", outcome.reason, outcome.message)
    elif outcome.warnings:
        first = outcome.warnings[0]
        cond(READY, "False", first.reason, "; ".join(w.message for w in outcome.warnings))
    elif ready < desired:
        cond(READY, "False", "RoutersNotReady", pods)
    else:
        cond(READY, "True", "Ready", f"{pods}; configuration of generation {gen} applied")
    if autoscaler is not None:
        status.autoscaling = copy.deepcopy(autoscaler.autoscaling)
        status.conditions = [
            *(c for c in status.conditions if c.type not in AUTOSCALER_CONDITIONS),
            *(c.model_copy() for c in autoscaler.conditions if c.type in AUTOSCALER_CONDITIONS),
        ]
    return status


@dataclass(frozen=True)
class Application:
    """Where an Address's or LinkRoute's network stands: the Routers whose configuration now
    has it, and those whose does not, with why (paused, invalid, apply failed)."""

    network: str
    applied: tuple[str, ...] = ()
    missing: Mapping[str, str] = field(default_factory=dict)


def address_status(
    parsed: Parsed,
    problems: Iterable[Problem],
    application: Application,
    *,
    now: datetime | None = None,
) -> AddressStatus:
    """Ready True only when every Router of the network has this Address in its configuration
    (so users can tell whether it is applied: ArtemisCloud's empty Address status was a
    complaint)."""
    status = _start(parsed)
    assert isinstance(status, AddressStatus)
    _set_applied(status, parsed, problems, application, now)
    return status


def link_route_status(
    parsed: Parsed,
    problems: Iterable[Problem],
    application: Application,
    *,
    now: datetime | None = None,
) -> LinkRouteStatus:
    """As an Address's: Ready True only when every Router of the network has this LinkRoute's
    entries (and, on interiors, its connector) in its configuration. A LinkRoute the planner
    refused (a conflict, an invalid connection) is in none. Applied says where a connection's
    Secrets are: mounted on the interior pods, which the StatefulSets roll to get them."""
    status = _start(parsed)
    assert isinstance(status, LinkRouteStatus)
    note = ""
    model = parsed.model
    if isinstance(model, LinkRoute) and model.spec.connection is not None:
        connection = model.spec.connection
        secrets = [s for s in (connection.tlsSecret, connection.saslSecret) if s is not None]
        if secrets:
            named = ", ".join(repr(s) for s in secrets)
            note = f"; its Secrets {named} are mounted on the interior pods (which roll for them)"
    _set_applied(status, parsed, problems, application, now, note)
    return status


def gateway_status(
    parsed: Parsed,
    problems: Iterable[Problem],
    application: Application,
    *,
    now: datetime | None = None,
) -> GatewayStatus:
    """As an Address's: Ready True only when every Router of the network has this Gateway's
    section (and the Routers it names, its listener and connectors) in its configuration. The
    pause annotation is not supported on Gateways yet: one is applied as declared regardless,
    and its status says so rather than claiming a pause."""
    status = _start(parsed)
    assert isinstance(status, GatewayStatus)
    _set_applied(status, parsed, problems, application, now, pausable=False)
    return status


def _set_applied(
    status: AnyStatus,
    parsed: Parsed,
    problems: Iterable[Problem],
    application: Application,
    now: datetime | None,
    note: str = "",
    *,
    pausable: bool = True,
) -> None:
    """Ready of an object folded into every router of its network (Address, LinkRoute,
    Gateway); ``note`` ends the Applied message."""
    if pausable and parsed.paused:
        _set_paused(status, parsed.kind, now)
        return
    _clear_paused(status)
    gen = parsed.generation
    status.observedGeneration = gen
    problems = list(problems)
    net = application.network
    if parsed.model is None:
        reason, message, value = "InvalidSpec", parsed.error or "invalid spec", "False"
    elif problems:
        reason, message, value = problems[0].reason, problems[0].message, "False"
    elif not application.applied and not application.missing:
        reason, value = "NoRouters", "False"
        message = (
            f"network {net!r} has no Routers in namespace {parsed.namespace!r}: no router has"
            f" this {parsed.kind}"
        )
    elif application.missing:
        reason, value = "PartiallyApplied", "False"
        missing = ", ".join(f"{name} ({why})" for name, why in sorted(application.missing.items()))
        have = ", ".join(application.applied) or "none"
        message = f"in the configuration of Routers {have}; not of {missing}"
    else:
        reason, value = "Applied", "True"
        message = (
            f"in the configuration of every router of network {net!r}"
            f" (Routers {', '.join(application.applied)}){note}"
        )
    status.set_condition(READY, value, reason, message, observed_generation=gen, now=now)


def router_outcome_for_problems(
    parsed: Parsed, problems: Sequence[Problem], desired: int, endpoints: tuple[str, ...]
) -> RouterOutcome | None:
    """The outcome of a Router that must not be applied, or None when it may be."""
    gen = parsed.generation
    if parsed.paused:
        return RouterOutcome("paused", "Paused", paused_message("Router"), gen, desired)
    if parsed.model is None:
        return RouterOutcome("invalid", "InvalidSpec", parsed.error or "invalid spec", gen, desired)
    blocking = [p for p in problems if p.reason in BLOCKING]
    if blocking:
        message = "; ".join(p.message for p in blocking)
        return RouterOutcome("blocked", blocking[0].reason, message, gen, desired, endpoints)
    return None


def status_patch(current: Mapping[str, Any] | None, new: AnyStatus) -> dict[str, Any] | None:
    """The merge patch that turns the stored status into ``new``; None when they agree. Fields
    ``new`` no longer has are removed (null), fields of other writers are left alone."""
    wanted = new.model_dump(mode="json", exclude_none=True)
    stored = dict(current or {})
    known = set(type(new).model_fields)
    patch: dict[str, Any] = {}
    for key in known:
        if key in wanted:
            if stored.get(key) != wanted[key]:
                patch[key] = wanted[key]
        elif key in stored and stored[key] is not None:
            patch[key] = None
    return patch or None
