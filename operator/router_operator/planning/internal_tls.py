"""Mutual TLS between the routers of a network on Kubernetes: what their configurations and
pods get, planned here; the certificates are issued by kubernetes/internal_tls.py.

A Router with ``interRouterTLS: enabled`` (the default) serves its inter-router and edge
listeners with TLS only, and admits on them only peers presenting a certificate its network's
CA signed (SASL EXTERNAL): a pod that is not one of the network's routers cannot join the mesh
or pose as an edge. Each connection follows the Router it dials: to one with TLS, the dialling
router presents its own certificate and checks that the peer's names the host it dialled. So
every router pod of such a network has a certificate (the Secret ``<router>-internal-tls``,
one pair per pod, with the CA), mounted whole at DIR: a pod added by a scale-out finds its pair
there, as the Secret is written before the StatefulSet grows. The pairs come from the
network's own CA, or from a cert-manager issuer the Routers name (`Issuer`): the pods see the
same files either way. ``routernet up`` runs its routers
on one machine's loopback and plans without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CERT_DAYS = 90
RENEW_DAYS = 30
"""A pod's certificate is good for CERT_DAYS and issued again RENEW_DAYS before its end,
whichever CA signs it."""
DIR = "/etc/routernet/internal-tls"
PROFILE = "internal-tls"
CA_FILE = "ca.crt"
VOLUME = "internal-tls"


@dataclass(frozen=True)
class Issuer:
    """A cert-manager Issuer or ClusterIssuer that signs a network's pod certificates in place
    of the operator's CA (Router.spec.interRouterIssuer): where an organisation's PKI must be
    the one that issues, and renews, what its routers present."""

    name: str
    kind: str = "Issuer"
    group: str = "cert-manager.io"

    def describe(self) -> str:
        return f"{self.kind} {self.name} ({self.group})"


def secret_name(router: str) -> str:
    """The Secret holding the certificates of a Router's pods."""
    return f"{router}-internal-tls"


def issued_name(pod: str) -> str:
    """The cert-manager Certificate of a pod, and the Secret cert-manager writes it to. Never a
    Router's ``secret_name``: the suffixes differ."""
    return f"{pod}-issued-tls"


def ca_secret_name(network: str) -> str:
    """The Secret holding a network's CA."""
    return f"routernet-ca-{network}"


def cert_file(pod: str) -> str:
    return f"{pod}.crt"


def key_file(pod: str) -> str:
    return f"{pod}.key"


def dns_names(pod: str, peers_service: str, namespace: str, domain: str) -> list[str]:
    """What a pod's certificate names: its stable DNS name through the headless Service, whole
    (what the planner's connectors dial) and in its shorter forms."""
    base = f"{pod}.{peers_service}"
    return [f"{base}.{namespace}.svc.{domain}", f"{base}.{namespace}.svc", f"{base}.{namespace}"]


def ssl_profile(pod: str) -> dict[str, Any]:
    return {
        "name": PROFILE,
        "certFile": f"{DIR}/{cert_file(pod)}",
        "privateKeyFile": f"{DIR}/{key_file(pod)}",
        "caCertFile": f"{DIR}/{CA_FILE}",
    }


def listener_settings() -> dict[str, Any]:
    """An inter-router or edge listener of a Router with TLS: certificates from the CA only."""
    return {
        "sslProfile": PROFILE,
        "requireSsl": True,
        "saslMechanisms": ["EXTERNAL"],
        "authenticatePeer": True,
    }


def connector_settings() -> dict[str, Any]:
    """A connector to a Router with TLS: this pod's certificate, the peer's checked."""
    return {"sslProfile": PROFILE, "saslMechanisms": ["EXTERNAL"], "verifyHostname": True}
