"""The Secrets of mutual TLS between a network's routers (planning/internal_tls.py says what
the pods do with them): the network's CA, ``routernet-ca-<network>``, owned by the network's
Routers, and per Router ``<router>-internal-tls`` with a certificate and key per pod and the CA
certificate, owned by its Router.

Each pass reads the Secrets back and issues what is missing, no longer current (names, CA) or
near its end (kubernetes/pki.py), before the StatefulSets are applied, so that a pod a
scale-out adds finds its certificate. What it found is remembered until the earliest renewal is
due or the pods change, so that a pass where nothing is due reads no Secret. A CA that cannot
be read back (edited by hand, expiring) is replaced, and with it every certificate of the
network; connections made with the old ones go on until they close.
"""

from __future__ import annotations

import base64
import datetime
import logging
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from cryptography import x509

from router_operator.kubernetes import pki
from router_operator.kubernetes.api import Api, ApiError
from router_operator.planning import internal_tls
from router_operator.planning.planner import NetworkPlan, RouterPlan
from router_operator.rendering.collector import owner_references

log = logging.getLogger(__name__)

CA_CERT_KEY = "ca.crt"
CA_KEY_KEY = "ca.key"


@dataclass
class Outcome:
    applied: int = 0
    failures: list[str] = field(default_factory=list)
    transient: bool = False


def _labels(network: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "routernet",
        "app.kubernetes.io/component": "internal-tls",
        "routernet.io/network": network,
        "app.kubernetes.io/managed-by": "routernet-operator",
    }


def _secret(
    name: str, namespace: str, network: str, owners: list[dict[str, Any]], data: Mapping[str, bytes]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": _labels(network),
            "ownerReferences": owners,
        },
        "type": "Opaque",
        "data": {key: base64.b64encode(value).decode() for key, value in sorted(data.items())},
    }


def _data(found: Mapping[str, Any] | None) -> dict[str, bytes]:
    raw = (found or {}).get("data") or {}
    out = {}
    for key, value in raw.items():
        try:
            out[key] = base64.b64decode(value)
        except ValueError:
            continue
    return out


def _not_after(cert: bytes) -> datetime.datetime:
    return x509.load_pem_x509_certificate(cert).not_valid_after_utc


def apply_internal_tls(
    network: NetworkPlan,
    namespace: str,
    api: Api,
    memory: MutableMapping[str, str],
    now: datetime.datetime,
) -> Outcome:
    """The network's CA and its Routers' certificate Secrets, current; ``memory`` keeps what a
    pass found (Memory.applied)."""
    outcome = Outcome()
    routers = [r for r in network.routers if r.internal_tls and r.ok]
    if not routers:
        return outcome
    wanted = {r.name: _wanted(r, namespace) for r in routers}
    key = f"network/{network.name}/internal-tls"
    fingerprint = repr(sorted((name, sorted(pods)) for name, pods in wanted.items()))
    remembered = memory.get(key, "")
    due, _, seen = remembered.partition("|")
    if seen == fingerprint and due and now.timestamp() < float(due):
        return outcome
    try:
        ca = _ca(network, namespace, api, now, outcome)
        earliest = None
        for router in routers:
            ends = _router_secret(
                router, namespace, network.name, ca, wanted[router.name], api, now, outcome
            )
            earliest = ends if earliest is None else min(earliest, ends)
    except ApiError as err:
        log.warning("namespace %s: internal TLS of network %s: %s", namespace, network.name, err)
        outcome.failures.append(f"internal TLS of network {network.name}: {err}")
        outcome.transient |= err.transient
        memory.pop(key, None)
        return outcome
    assert earliest is not None
    renew = earliest - datetime.timedelta(days=pki.RENEW_DAYS)
    memory[key] = f"{renew.timestamp()}|{fingerprint}"
    return outcome


def _wanted(router: RouterPlan, namespace: str) -> dict[str, list[str]]:
    """Each pod's certificate names."""
    return {
        pod.name: internal_tls.dns_names(
            pod.name, router.peers_service, namespace, router.cluster_domain
        )
        for pod in router.pods
    }


def _ca(
    network: NetworkPlan, namespace: str, api: Api, now: datetime.datetime, outcome: Outcome
) -> pki.Pair:
    name = internal_tls.ca_secret_name(network.name)
    data = _data(api.get("v1", "Secret", namespace, name))
    if CA_CERT_KEY in data and CA_KEY_KEY in data:
        found = pki.Pair(data[CA_CERT_KEY], data[CA_KEY_KEY])
        if pki.ca_good(found, now):
            return found
        log.warning(
            "namespace %s: the CA of network %s is replaced (unreadable or expiring)",
            namespace,
            network.name,
        )
    ca = pki.new_ca(namespace, network.name, now)
    owners = owner_references(network.routers)
    api.apply(
        _secret(name, namespace, network.name, owners, {CA_CERT_KEY: ca.cert, CA_KEY_KEY: ca.key})
    )
    outcome.applied += 1
    log.info("namespace %s: made the CA of network %s (Secret %s)", namespace, network.name, name)
    return ca


def _router_secret(
    router: RouterPlan,
    namespace: str,
    network: str,
    ca: pki.Pair,
    wanted: Mapping[str, list[str]],
    api: Api,
    now: datetime.datetime,
    outcome: Outcome,
) -> datetime.datetime:
    """The Router's Secret, current; returns when its earliest certificate ends."""
    name = internal_tls.secret_name(router.name)
    found = _data(api.get("v1", "Secret", namespace, name))
    data: dict[str, bytes] = {internal_tls.CA_FILE: ca.cert}
    issued = []
    for pod, names in wanted.items():
        cert_key, key_key = internal_tls.cert_file(pod), internal_tls.key_file(pod)
        pair = pki.Pair(found.get(cert_key, b""), found.get(key_key, b""))
        if not pki.current(pair, ca, names, now):
            pair = pki.issue(ca, pod, f"{namespace}/{network}", names, now)
            issued.append(pod)
        data[cert_key], data[key_key] = pair.cert, pair.key
    if data != found:
        owners = owner_references([router])
        api.apply(_secret(name, namespace, network, owners, data))
        outcome.applied += 1
        log.info(
            "namespace %s: Secret %s: certificates issued for %s",
            namespace,
            name,
            ", ".join(issued) or "none (pods gone)",
        )
    ends = [_not_after(data[internal_tls.cert_file(pod)]) for pod in wanted]
    return min(ends) if ends else now + datetime.timedelta(days=pki.CERT_DAYS)
