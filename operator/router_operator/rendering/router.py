"""Rendering one Router resource's plan into the Kubernetes objects that run it, as plain dicts.

Pure, like the planner: the reconciler applies what this returns, the tests validate it against
the Kubernetes schemas, and neither needs a cluster. Choices, and why:
- One ConfigMap holds every pod's config as ``<pod>.json``; each pod reads its own through its
  name (``$(POD_NAME)``), so the StatefulSet's pod template is the same for every pod and an
  address change touches the ConfigMap only. Apply it before the StatefulSet: a new pod whose
  key is missing cannot start.
- The pod template carries ``routernet.io/config-digest``, a digest of the router mode alone: the
  one setting a running router cannot change in place. Addresses, connectors and listeners change
  live (config-sync); hashing the whole config would restart every router on every address change,
  qdr-operator's mistake.
- The headless ``<name>-peers`` Service publishes not-ready addresses: peers must resolve a
  router's DNS name while it starts, or the mesh could never form.
- Pods are managed in parallel: routers do not depend on each other's start order (connectors
  retry), and ordered start would make a 20-router mesh take 20 readiness periods.
- Scale-down and upgrades drain: preStop waits ``DRAIN_SECONDS`` so the endpoints controller
  takes the pod out of the client Service before SIGTERM, on which the router drains: it stops its
  listeners and new links, lets what it holds settle for up to ``drainTimeoutSeconds`` (10 s),
  then releases what is left to its senders (to be resent elsewhere).
- Config-sync: the router reads its file at start (the volume), then follows the ConfigMap through
  the API (``ROUTERNET_CONFIGMAP``, router/config/sync.py), so a change is live in about a second
  rather than at the kubelet's next volume refresh (a minute or more). The Router's ServiceAccount
  gets a Role ``<name>-config-reader``: get/list/watch on that one ConfigMap (resourceNames;
  configsync's list and watch carry the ``metadata.name`` field selector that authorizes them),
  bound before the StatefulSet so the first pods may already watch. The pod mounts its token.
- Pod status: each router writes the router ids it reaches to its own Pod's annotation
  ``routernet.io/reachable-routers`` (router/pod/status.py), which the operator reads for
  ``meshConnected`` (planning/mesh.py), and with a store ``routernet.io/store``, which a scale-in
  waits for (planning/handoff.py). The same Role grants get and patch on the Router's pods by name
  (``<name>-0`` .. ``<name>-<replicas-1>``, the pods planned: the leaving ones too while they
  hand off; rendered again on every scale), and no rule at all at zero replicas: an empty
  ``resourceNames`` would mean every pod of the namespace.
- LinkRoutes go into the pod configs like Addresses (live, no restart); the ConfigMap also keeps
  ``linkroutes``, the LinkRoutes folded in as their specs, which a paused LinkRoute is folded
  again from (its containerId entries in a pod config say nothing of which LinkRoute made them).
  The key has no ``.json`` suffix: pods and readers of pod configs take only ``<pod>.json``.
- TLS listeners (``tlsSecret``): the Secret is a volume ``tls-<port>`` (``optional: false``),
  mounted read-only at ``/etc/routernet-tls/<port>/``, where the pod config's sslProfile
  ``listener-<port>`` finds tls.crt and tls.key. A missing Secret keeps the pod from starting
  (the kubelet's FailedMount event says why) rather than letting it serve in clear text. The
  operator does not read Secrets (it has no RBAC for them), so it cannot report that itself.
  A volume cannot be added to a running pod: adding or removing a tlsSecret changes the pod
  template, and the StatefulSet replaces the pods one by one (RollingUpdate; the PDB and the
  preStop drain apply). Until a pod is replaced, config-sync refuses the new config there
  (``config.invalid``: the certificate files are not mounted yet) and the pod keeps its old
  one. The client Service and the container name the port ``amqps`` (5671) or
  ``amqps-<port>``, and status endpoints say ``amqps://``.
  Known gap, certificate rotation: the kubelet updates the mounted files in place when the
  Secret changes, but the router loads a profile's files once (router/transport/tls.py keys its
  cache on the profile's settings, not the files' content), so a renewed certificate is served only
  after the pods restart (``kubectl rollout restart statefulset/<name>``).
- LinkRoute connections with Secrets (``connection.tlsSecret``, ``connection.saslSecret``):
  every interior pod of the network mounts each Secret read-only (``optional: false``) at
  ``/etc/routernet-linkroute/<LinkRoute name>/tls/`` (its ``ca.crt`` only) and ``.../sasl/``
  (``username`` and ``password``), where the connector ``linkroute/<name>`` and its sslProfile
  ``linkroute-<name>`` find them (planner). Edges dial no broker and mount nothing. The volume is
  ``lr-tls-<name>`` / ``lr-sasl-<name>``, or, when that is not a DNS label of at most 63
  characters (a long name, or one with dots), ``lrh-<kind>-<the name's start>-<its digest>``:
  deterministic, and apart from ``config``, ``sasl`` and ``tls-<port>``. Listing the keys makes
  a Secret without them a FailedMount (the pod waits, saying which key is missing) rather than
  a router refusing its config. The price of mounting: adding or removing such a LinkRoute (or
  changing its Secrets) changes the interior pod templates, and the StatefulSets replace their
  pods one by one, as for a listener's tlsSecret; until a pod is replaced, config-sync refuses
  a config whose sslProfile names a CA file that is not mounted yet, and a connector's SASL
  files that are not there yet fail its connection attempts (retried) while the pod keeps
  running. LinkRoutes without Secrets still change the ConfigMap alone (live, no restart). A
  renewed password is read at the next connection attempt; a renewed CA only after a restart
  (as a listener's certificate).
- The Gateway's TLS Secrets (``listener.tls``, ``connectors[].tls``): mounted as LinkRoute
  connections' are (read-only, ``optional: false``, their keys listed), but only on the pods of
  the Router that has that listener or connector, at ``/etc/routernet-gateway/listener/`` and
  ``.../connectors/<name>/`` (``tls/`` tls.crt and tls.key, ``ca/`` ca.crt). Volumes
  ``gw-tls-listener`` and ``gw-ca-listener``, ``gwc-tls-<name>`` and ``gwc-ca-<name>`` (hashed as
  LinkRoutes' when too long). Adding, changing or removing them rolls those pods alone.
- Probes and metrics over HTTP: every router serves ``/metrics``, ``/healthz`` and ``/readyz`` on
  ``METRICS_PORT`` (9090; the planner puts ``telemetry.http`` in every pod config). Liveness is
  ``/healthz`` (the event loop turns), readiness ``/readyz`` (listening, not draining, an interior
  with a two-way neighbor or alone by its config, an edge with an uplink), so a router that has
  not joined its network gets no client traffic from the Service yet. The container port is
  named ``metrics``, which the chart's PodMonitor scrapes.
- The Gateway's listener is reached through the client Service of its Router, on the port
  named ``gateway`` (and the pods' container port of that name): other namespaces dial
  ``<router>.<ns>.svc:<port>``. It is not a Service of its own: the operator deletes no
  children, so one would outlive a listener moved to another Router; another cluster reaches
  the pods through a LoadBalancer, NodePort or gateway Service made beside it, selecting them
  with ``targetPort: gateway``. Status endpoints stay the clients' (gateway connectors are not
  clients). The planner keeps the port apart from the Router's own, reserved ones included.
- ``spec.store``: a volumeClaimTemplate ``store`` (ReadWriteOnce, its size and StorageClass),
  mounted read-write at ``/var/lib/routernet/store``, the pods' ``store.path``, with ``fsGroup``
  so the non-root router may write there. The StatefulSet controller creates the PVCs
  (``store-<pod>``), so the operator needs no rights on them, and keeps them when pods or the
  Router go (its default retention): a pod back at the same ordinal finds its messages. The
  template is immutable in Kubernetes, hence ``store`` is in the CRD (resources/nodes.py).
- Owner references (controller, blockOwnerDeletion) on every child with deterministic names, so
  deleting a Router deletes its children without a finalizer.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from router_operator.planning import internal_tls
from router_operator.planning.names import NETWORK_LABEL, ROLE_LABEL, selector_labels
from router_operator.planning.planner import (
    EDGE_PORT,
    INTER_ROUTER_PORT,
    METRICS_PORT,
    SASL_CONFIG_DIR,
    SASL_CONFIG_NAME,
    SASLDB_FILE,
    RouterPlan,
    listener_tls_dir,
    peers_service_name,
)
from router_operator.resources.models import DEFAULT_ROUTER_IMAGE
from router_operator.resources.nodes import STORE_PATH, STORE_VOLUME

API_GROUP = "routernet.io"
API_VERSION = f"{API_GROUP}/v1alpha1"
ROUTER_KIND = "Router"

CONFIG_DIR = "/etc/routernet"
CONTAINER = "router"
METRICS_PORT_NAME = "metrics"
GATEWAY_PORT_NAME = "gateway"
"""The Gateway listener's port, on the client Service and the pods of its Router, whatever its
number and TLS: other networks' connectors, and Services made to reach them from another
cluster, find it by this name."""
DIGEST_ANNOTATION = f"{API_GROUP}/config-digest"
DRAIN_SECONDS = 5
"""preStop wait: long enough for the endpoints controller and kube-proxy to stop sending new
clients to a terminating pod."""
TERMINATION_GRACE_SECONDS = 30
"""Includes the preStop wait; after SIGTERM the router drains (at most drainTimeoutSeconds, 10 s)
and closes (at most 3 s)."""
RUN_AS = 10001
DEFAULT_RESOURCES: Mapping[str, Any] = {
    "requests": {"cpu": "100m", "memory": "64Mi"},
    "limits": {"memory": "256Mi"},
}
"""Routers with no limits were the most common OOM complaint about messaging operators; the
router's memory is bounded by link credit (~40 MiB idle), so a modest default fits."""
MAX_CONFIG_MAP_BYTES = 1024 * 1024
"""Kubernetes refuses ConfigMaps whose data exceed 1 MiB."""
SASL_CONF_KEY = "sasl.conf"
"""The ConfigMap key of the Cyrus SASL config (never a pod's: those end in .json)."""
LINK_ROUTES_KEY = "linkroutes"
"""The ConfigMap key recording the LinkRoutes folded in: JSON, LinkRoute name -> its spec as
applied (prefix or pattern, direction, containerId or connection)."""
RBAC_API_VERSION = "rbac.authorization.k8s.io/v1"
CONFIG_MAP_ENV = "ROUTERNET_CONFIGMAP"
"""The router's config-sync watches the ConfigMap this names (router/config/live.py)."""
CONFIG_READER_VERBS = ("get", "list", "watch")
"""What config-sync does to the ConfigMap. The operator's own RBAC
(helm/routernet/templates/rbac.yaml) must hold these on configmaps to grant them."""
POD_STATUS_VERBS = ("get", "patch")
"""What a router does to its own Pod (router/pod/status.py: a merge patch of one annotation).
The operator's own RBAC must hold these on pods to grant them."""


class RenderError(ValueError):
    """The plan cannot be rendered (its Router has a blocking problem, or it would not fit)."""


# ---------------------------------------------------------------------------------------------
# Names, labels (planning/names.py has the selector's), references.


def labels(plan: RouterPlan) -> dict[str, str]:
    """Labels on every child and pod: the selector plus network and role, which may change and
    therefore must never be part of the (immutable) StatefulSet selector."""
    return {
        **selector_labels(plan.name),
        "app.kubernetes.io/managed-by": "routernet-operator",
        NETWORK_LABEL: plan.network,
        ROLE_LABEL: plan.mode,
    }


def owner_reference(plan: RouterPlan) -> dict[str, Any]:
    if not plan.decl.uid:
        raise RenderError(f"Router {plan.name!r} has no uid: owner references need one")
    return {
        "apiVersion": API_VERSION,
        "kind": ROUTER_KIND,
        "name": plan.name,
        "uid": plan.decl.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def config_map_name(name: str) -> str:
    return f"{name}-config"


def config_reader_name(name: str) -> str:
    """The Role, and its RoleBinding, that let a Router's pods read their ConfigMap (and
    report on their own Pods)."""
    return f"{name}-config-reader"


def config_digest(mode: str) -> str:
    """Changes exactly when a pod must restart: when the router mode changes."""
    return hashlib.sha256(json.dumps({"mode": mode}).encode()).hexdigest()[:16]


def _metadata(plan: RouterPlan, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": plan.namespace,
        "labels": labels(plan),
        "ownerReferences": [owner_reference(plan)],
    }


def _port_name(port: int, tls: bool = False) -> str:
    # IANA service names: at most 15 characters, lower-case letters, digits and '-'. Unique
    # per Router, as its ports are.
    if tls:
        return "amqps" if port == 5671 else f"amqps-{port}"
    return "amqp" if port == 5672 else f"amqp-{port}"


def _client_ports(plan: RouterPlan) -> list[tuple[str, int]]:
    tls = plan.tls_ports
    ports = [(_port_name(port, port in tls), port) for port in plan.client_ports]
    if plan.gateway_port is not None:
        ports.append((GATEWAY_PORT_NAME, plan.gateway_port))
    return ports


def tls_volume_name(port: int) -> str:
    return f"tls-{port}"


def _router_ports(plan: RouterPlan) -> list[tuple[str, int]]:
    ports = _client_ports(plan)
    if plan.mode == "interior":
        ports += [("inter-router", INTER_ROUTER_PORT), ("edge", EDGE_PORT)]
    return ports


# ---------------------------------------------------------------------------------------------
# Objects.


def render_router(plan: RouterPlan) -> list[dict[str, Any]]:
    """Every child of one Router, in apply order (the ConfigMap, and the Role that lets the pods
    read it, before the StatefulSet)."""
    if not plan.ok:
        reasons = "; ".join(p.message for p in plan.problems) or "a pod has no config"
        raise RenderError(f"Router {plan.name!r} cannot be rendered: {reasons}")
    return [
        render_service_account(plan),
        render_config_map(plan),
        render_config_reader_role(plan),
        render_config_reader_binding(plan),
        render_peers_service(plan),
        render_client_service(plan),
        render_pod_disruption_budget(plan),
        render_stateful_set(plan),
    ]


def config_map_data(plan: RouterPlan) -> dict[str, str]:
    """``<pod>.json`` for every pod: compact JSON without default values, which keeps a large
    network under the ConfigMap size limit and reads back to the same RouterConfig."""
    data: dict[str, str] = {}
    for pod in plan.pods:
        if pod.config is None:
            raise RenderError(f"pod {pod.name} has no config")
        dumped = pod.config.model_dump(mode="json", exclude_defaults=True)
        data[f"{pod.name}.json"] = json.dumps(dumped, separators=(",", ":"))
    if plan.sasl_users_secret is not None:
        data[SASL_CONF_KEY] = sasl_config()
    if plan.link_routes:
        records = {route.name: route.record() for route in plan.link_routes}
        data[LINK_ROUTES_KEY] = json.dumps(records, separators=(",", ":"), sort_keys=True)
    size = sum(len(k.encode()) + len(v.encode()) for k, v in data.items())
    if size > MAX_CONFIG_MAP_BYTES:
        raise RenderError(
            f"Router {plan.name!r}: the configs of its {len(plan.pods)} pods take {size} bytes,"
            f" over the ConfigMap limit of {MAX_CONFIG_MAP_BYTES}; fewer replicas per Router"
            " or fewer addresses and link routes per network"
        )
    return data


def sasl_config() -> str:
    """Cyrus SASL's config for PLAIN against the mounted sasldb. ``mech_list`` allows both; each
    listener then offers only what its saslMechanisms name."""
    return (
        "pwcheck_method: auxprop\n"
        "auxprop_plugin: sasldb\n"
        f"sasldb_path: {SASL_CONFIG_DIR}/{SASLDB_FILE}\n"
        "mech_list: PLAIN ANONYMOUS\n"
    )


def render_config_map(plan: RouterPlan) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(plan, config_map_name(plan.name)),
        "data": config_map_data(plan),
    }


def render_service_account(plan: RouterPlan) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _metadata(plan, plan.name),
    }


def render_config_reader_role(plan: RouterPlan) -> dict[str, Any]:
    """Read access to this Router's ConfigMap only: ``resourceNames`` also restricts list and
    watch, which then need the ``metadata.name`` field selector configsync sends. And get and
    patch on this Router's pods by name, for their reports (none without pods: an empty
    ``resourceNames`` would grant them on every pod)."""
    rules: list[dict[str, Any]] = [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [config_map_name(plan.name)],
            "verbs": list(CONFIG_READER_VERBS),
        }
    ]
    pods = [pod.name for pod in plan.pods]
    if pods:
        rules.append(
            {
                "apiGroups": [""],
                "resources": ["pods"],
                "resourceNames": pods,
                "verbs": list(POD_STATUS_VERBS),
            }
        )
    return {
        "apiVersion": RBAC_API_VERSION,
        "kind": "Role",
        "metadata": _metadata(plan, config_reader_name(plan.name)),
        "rules": rules,
    }


def render_config_reader_binding(plan: RouterPlan) -> dict[str, Any]:
    """The Role to the Router's ServiceAccount (named as the Router, see the StatefulSet)."""
    return {
        "apiVersion": RBAC_API_VERSION,
        "kind": "RoleBinding",
        "metadata": _metadata(plan, config_reader_name(plan.name)),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": config_reader_name(plan.name),
        },
        "subjects": [{"kind": "ServiceAccount", "name": plan.name, "namespace": plan.namespace}],
    }


def render_peers_service(plan: RouterPlan) -> dict[str, Any]:
    """Headless: gives each pod ``<pod>.<name>-peers.<ns>.svc`` for inter-router and edge
    connectors (and for reaching one particular router's client port)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(plan, peers_service_name(plan.name)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector_labels(plan.name),
            "ports": [
                {"name": name, "port": port, "targetPort": name, "protocol": "TCP"}
                for name, port in _router_ports(plan)
            ],
        },
    }


def render_client_service(plan: RouterPlan) -> dict[str, Any]:
    """What applications connect to: the client listeners of ready pods only; and other
    networks' gateway connectors, on the port named ``gateway``, when the pods have the
    Gateway's listener."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(plan, plan.name),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(plan.name),
            "ports": [
                {"name": name, "port": port, "targetPort": name, "protocol": "TCP"}
                for name, port in _client_ports(plan)
            ],
        },
    }


def render_pod_disruption_budget(plan: RouterPlan) -> dict[str, Any]:
    """One router at a time through voluntary disruptions (node drains): the mesh and the edges'
    reserve uplinks always keep the others."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(plan, plan.name),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(plan.name)}},
    }


def render_stateful_set(plan: RouterPlan) -> dict[str, Any]:
    decl = plan.decl
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": decl.image or DEFAULT_ROUTER_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        # The file is the start-up config; the ConfigMap watch (the env below) keeps it current.
        "command": ["routernet-router", "--config", f"{CONFIG_DIR}/$(POD_NAME).json"],
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {
                "name": "POD_NAMESPACE",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
            },
            {"name": CONFIG_MAP_ENV, "value": config_map_name(plan.name)},
        ],
        "ports": [
            {"name": name, "containerPort": port, "protocol": "TCP"}
            for name, port in [*_router_ports(plan), (METRICS_PORT_NAME, METRICS_PORT)]
        ],
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": METRICS_PORT_NAME},
            "periodSeconds": 5,
            "failureThreshold": 2,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": METRICS_PORT_NAME},
            "initialDelaySeconds": 10,
            "periodSeconds": 10,
            "failureThreshold": 6,
        },
        "lifecycle": {"preStop": {"sleep": {"seconds": DRAIN_SECONDS}}},
        "resources": copy.deepcopy(dict(decl.resources or DEFAULT_RESOURCES)),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}],
    }
    template: dict[str, Any] = {
        "metadata": {
            "labels": labels(plan),
            "annotations": {DIGEST_ANNOTATION: config_digest(plan.mode)},
        },
        "spec": {
            "serviceAccountName": plan.name,
            # Config-sync talks to the API with the ServiceAccount's token.
            "automountServiceAccountToken": True,
            "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
            "enableServiceLinks": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": RUN_AS,
                "runAsGroup": RUN_AS,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": "kubernetes.io/hostname",
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": {"matchLabels": selector_labels(plan.name)},
                }
            ],
            "containers": [container],
            "volumes": [{"name": "config", "configMap": {"name": config_map_name(plan.name)}}],
        },
    }
    secret = plan.sasl_users_secret
    if secret is not None:
        # Not under CONFIG_DIR: a mount point inside a ConfigMap volume is not portable.
        container["volumeMounts"].append(
            {"name": "sasl", "mountPath": SASL_CONFIG_DIR, "readOnly": True}
        )
        template["spec"]["volumes"].append(
            {
                "name": "sasl",
                "projected": {
                    "sources": [
                        {
                            "configMap": {
                                "name": config_map_name(plan.name),
                                "items": [
                                    {"key": SASL_CONF_KEY, "path": f"{SASL_CONFIG_NAME}.conf"}
                                ],
                            }
                        },
                        {
                            "secret": {
                                "name": secret,
                                "items": [{"key": SASLDB_FILE, "path": SASLDB_FILE}],
                            }
                        },
                    ]
                },
            }
        )
    for port, tls_secret in plan.tls_secrets:
        container["volumeMounts"].append(
            {"name": tls_volume_name(port), "mountPath": listener_tls_dir(port), "readOnly": True}
        )
        template["spec"]["volumes"].append(
            {
                "name": tls_volume_name(port),
                "secret": {"secretName": tls_secret, "optional": False},
            }
        )
    for mount in (*plan.link_route_secrets, *plan.gateway_secrets):
        container["volumeMounts"].append(
            {"name": mount.volume, "mountPath": mount.path, "readOnly": True}
        )
        template["spec"]["volumes"].append(
            {
                "name": mount.volume,
                "secret": {
                    "secretName": mount.secret,
                    "items": [{"key": key, "path": key} for key in mount.keys],
                    "optional": False,
                },
            }
        )
    if plan.internal_tls:  # whole: a pod a scale-out adds finds its pair there
        container["volumeMounts"].append(
            {"name": internal_tls.VOLUME, "mountPath": internal_tls.DIR, "readOnly": True}
        )
        template["spec"]["volumes"].append(
            {
                "name": internal_tls.VOLUME,
                "secret": {"secretName": internal_tls.secret_name(decl.name), "optional": False},
            }
        )
    if decl.store is not None:
        container["volumeMounts"].append({"name": STORE_VOLUME, "mountPath": STORE_PATH})
        template["spec"]["securityContext"]["fsGroup"] = RUN_AS
        template["spec"]["securityContext"]["fsGroupChangePolicy"] = "OnRootMismatch"
    if decl.pod_template:
        template = merge(template, decl.pod_template)
        # The user may add labels and annotations, never take over ours: the selector must keep
        # matching and the digest must stay the operator's.
        template["metadata"]["labels"].update(labels(plan))
        template["metadata"].setdefault("annotations", {})[DIGEST_ANNOTATION] = config_digest(
            plan.mode
        )
    spec: dict[str, Any] = {
        "serviceName": peers_service_name(plan.name),
        "replicas": len(plan.pods),
        "podManagementPolicy": "Parallel",
        # Partition 0, said: a pod re-created during a rollout (kubernetes/rollout.py deletes stuck
        # ones) then always gets the new revision; without rollingUpdate, the controller gives
        # ordinals below status.currentReplicas the old one.
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
        "selector": {"matchLabels": selector_labels(plan.name)},
        "template": template,
    }
    if decl.store is not None:
        claim: dict[str, Any] = {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": decl.store.size}},
        }
        if decl.store.storage_class is not None:
            claim["storageClassName"] = decl.store.storage_class
        spec["volumeClaimTemplates"] = [
            {
                "metadata": {"name": STORE_VOLUME, "labels": selector_labels(plan.name)},
                "spec": claim,
            }
        ]
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _metadata(plan, plan.name),
        "spec": spec,
    }


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """The pod template overrides over ours: mappings merge recursively, lists of named items
    (containers, env, volumes, ports) merge by name, anything else is replaced. Close enough to
    a strategic merge patch for overrides, without a server."""
    result = copy.deepcopy(dict(base))
    for key, value in override.items():
        current = result.get(key)
        if isinstance(current, Mapping) and isinstance(value, Mapping):
            result[key] = merge(current, value)
        elif _named_list(current) and _named_list(value):
            merged = list(current)
            position = {item["name"]: index for index, item in enumerate(merged)}
            for item in value:
                if item["name"] in position:
                    index = position[item["name"]]
                    merged[index] = merge(merged[index], item)
                else:
                    position[item["name"]] = len(merged)
                    merged.append(copy.deepcopy(dict(item)))
            result[key] = merged
        else:
            result[key] = copy.deepcopy(value)
    return result


def _named_list(value: object) -> bool:
    return isinstance(value, list) and all(
        isinstance(item, Mapping) and isinstance(item.get("name"), str) for item in value
    )
