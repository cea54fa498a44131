"""The cert-manager Certificate of a router pod, when its network's Routers name an issuer
(planning/internal_tls.py's `Issuer`; kubernetes/internal_tls.py applies them and gives the
pods what cert-manager writes).

It asks for what the operator's own CA issues (kubernetes/pki.py): the pod as common name
and the network as unit, its stable DNS names, good for both ends of a connection (a router
listens and dials), for CERT_DAYS and renewed RENEW_DAYS before its end, a new key each time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from router_operator.planning.internal_tls import CERT_DAYS, RENEW_DAYS, Issuer, issued_name

API_VERSION = "cert-manager.io/v1"


def render_certificate(
    pod: str,
    namespace: str,
    network: str,
    dns_names: Sequence[str],
    issuer: Issuer,
    owners: list[dict[str, Any]],
    labels: dict[str, str],
) -> dict[str, Any]:
    name = issued_name(pod)
    return {
        "apiVersion": API_VERSION,
        "kind": "Certificate",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": owners,
        },
        "spec": {
            "secretName": name,
            "secretTemplate": {"labels": labels},
            "commonName": pod,
            "subject": {
                "organizations": ["Routernet"],
                "organizationalUnits": [f"{namespace}/{network}"],
            },
            "dnsNames": list(dns_names),
            "duration": f"{CERT_DAYS * 24}h",
            "renewBefore": f"{RENEW_DAYS * 24}h",
            "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
            "usages": ["digital signature", "key encipherment", "server auth", "client auth"],
            "issuerRef": {"name": issuer.name, "kind": issuer.kind, "group": issuer.group},
        },
    }
