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

When the network's Routers name a cert-manager issuer (Router.spec.interRouterIssuer), there
is no CA Secret: each pod's Certificate is applied (rendering/certificates.py) and the Router's
Secret is made of what cert-manager writes, read back until every pod has its certificate and
again once cert-manager is due to renew one.
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
from router_operator.rendering.certificates import render_certificate
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
    issuers = {r.decl.tls_issuer for r in routers}
    if len(issuers) > 1:
        named = ", ".join(
            f"{r.name}: {r.decl.tls_issuer.describe() if r.decl.tls_issuer else 'none'}"
            for r in routers
        )
        outcome.failures.append(
            f"network {network.name}: its Routers name different interRouterIssuers ({named});"
            " a network has one CA: name the same issuer on each, or none"
        )
        return outcome
    issuer = issuers.pop()
    wanted = {r.name: _wanted(r, namespace) for r in routers}
    key = f"network/{network.name}/internal-tls"
    fingerprint = repr((issuer, sorted((name, sorted(pods)) for name, pods in wanted.items())))
    remembered = memory.get(key, "")
    due, _, seen = remembered.partition("|")
    if seen == fingerprint and due and now.timestamp() < float(due):
        return outcome
    try:
        if issuer is None:
            ca = _ca(network, namespace, api, now, outcome)
            earliest: datetime.datetime | None = None
            for router in routers:
                ends = _router_secret(
                    router, namespace, network.name, ca, wanted[router.name], api, now, outcome
                )
                earliest = ends if earliest is None else min(earliest, ends)
        else:
            earliest = _issued(network, namespace, issuer, routers, wanted, api, now, outcome)
    except ApiError as err:
        log.warning("namespace %s: internal TLS of network %s: %s", namespace, network.name, err)
        outcome.failures.append(f"internal TLS of network {network.name}: {err}")
        outcome.transient |= err.transient
        memory.pop(key, None)
        return outcome
    renew = None if earliest is None else earliest - datetime.timedelta(days=pki.RENEW_DAYS)
    if renew is None or renew <= now:
        memory.pop(key, None)  # waiting for cert-manager: read again on the next pass
    else:
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


# ----- certificates from cert-manager ----------------------------------------------------------

ISSUED_CERT, ISSUED_KEY, ISSUED_CA = "tls.crt", "tls.key", "ca.crt"
"""What cert-manager writes to a Certificate's Secret."""


def _issued(
    network: NetworkPlan,
    namespace: str,
    issuer: internal_tls.Issuer,
    routers: list[RouterPlan],
    wanted: Mapping[str, Mapping[str, list[str]]],
    api: Api,
    now: datetime.datetime,
    outcome: Outcome,
) -> datetime.datetime | None:
    """A Certificate per pod for cert-manager to issue, and each Router's Secret made of what
    it wrote: each pod's pair, and as the CA every ca.crt the issuer gave (two while it changes
    CA). Returns when the earliest certificate ends; None while one is still to come (the pass
    is then transient, so the next one looks again soon), and a pod keeps the pair it had."""
    labels = _labels(network.name)
    pairs: dict[str, pki.Pair] = {}
    cas: set[bytes] = set()
    ends: list[datetime.datetime] = []
    waiting: list[str] = []
    for router in routers:
        owners = owner_references([router])
        for pod, names in wanted[router.name].items():
            api.apply(
                render_certificate(pod, namespace, network.name, names, issuer, owners, labels)
            )
            outcome.applied += 1
            found = _data(api.get("v1", "Secret", namespace, internal_tls.issued_name(pod)))
            pair = pki.Pair(found.get(ISSUED_CERT, b""), found.get(ISSUED_KEY, b""))
            until = pki.issued_until(pair, names, now)
            ca = found.get(ISSUED_CA)
            if until is None or not ca:
                waiting.append(pod)
                if until is not None:
                    outcome.failures.append(
                        f"network {network.name}: {issuer.describe()} gives no {ISSUED_CA} with"
                        f" the certificate of {pod}: the routers need the CA that signs their peers"
                    )
                continue
            pairs[pod] = pair
            cas.add(ca if ca.endswith(b"\n") else ca + b"\n")
            ends.append(until)
            if until - now <= datetime.timedelta(days=pki.RENEW_DAYS):
                waiting.append(pod)  # cert-manager is due to renew it: look again soon
    if cas:
        bundle = b"".join(sorted(cas))
        for router in routers:
            _issued_secret(router, namespace, network.name, bundle, pairs, wanted, api, outcome)
    if waiting:
        outcome.transient = True
        log.info(
            "namespace %s: network %s: waiting for %s to issue or renew the certificates of %s",
            namespace,
            network.name,
            issuer.describe(),
            ", ".join(waiting),
        )
        return None
    return min(ends) if ends else None


def _issued_secret(
    router: RouterPlan,
    namespace: str,
    network: str,
    bundle: bytes,
    pairs: Mapping[str, pki.Pair],
    wanted: Mapping[str, Mapping[str, list[str]]],
    api: Api,
    outcome: Outcome,
) -> None:
    name = internal_tls.secret_name(router.name)
    found = _data(api.get("v1", "Secret", namespace, name))
    data: dict[str, bytes] = {internal_tls.CA_FILE: bundle}
    for pod in wanted[router.name]:
        cert_key, key_key = internal_tls.cert_file(pod), internal_tls.key_file(pod)
        pair = pairs.get(pod)
        if pair is not None:
            data[cert_key], data[key_key] = pair.cert, pair.key
        elif cert_key in found and key_key in found:  # until cert-manager has issued anew
            data[cert_key], data[key_key] = found[cert_key], found[key_key]
    if data != found:
        api.apply(_secret(name, namespace, network, owner_references([router]), data))
        outcome.applied += 1
        log.info("namespace %s: Secret %s: certificates from cert-manager", namespace, name)
