"""Secrets the router pods mount for the connections the planner puts into their configs (a
LinkRoute's broker, a Gateway's listener and connectors): which keys, where, and the volume's
name. A description at the level of the spec, beside the resources that ask for it:
resources/gateway.py and the planner both describe mounts (resources/gateway.py cannot import the
planner, which imports it), and the renderer turns them into volumes.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Literal

Family = Literal["lr", "gw", "gwc"]
"""Whose Secret: a LinkRoute connection's (owner: the LinkRoute), the Gateway listener's (owner:
``listener``) or a Gateway connector's (owner: the connector). Each family is a volume-name
prefix of its own, so two owners of different families never share a volume."""
SecretKind = Literal["tls", "ca", "sasl"]
"""What the Secret is for: a certificate and key, a CA, credentials."""

TLS_CERT_FILE = "tls.crt"
TLS_KEY_FILE = "tls.key"
"""The keys of a kubernetes.io/tls Secret: a certificate and its key. A listener's tlsSecret
may also hold a ca.crt, which is not used: the operator cannot read the Secret to know whether
it is there, and a caCertFile that is missing would stop the router (its config is refused);
a CA is a Secret named for it (a LinkRoute connection's tlsSecret, a Gateway's caSecret)."""
CA_CERT_FILE = "ca.crt"
"""The key of a Secret named for its CA: the one that signed the peer's certificate."""

MAX_VOLUME_NAME = 63
_VOLUME_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


@dataclass(frozen=True)
class SecretMount:
    """``keys`` of ``secret`` as files of the directory ``path`` of a router pod. Listing the
    keys makes a Secret without one a FailedMount (the pod waits, saying which key is missing)
    rather than a router refusing its config."""

    family: Family
    owner: str
    kind: SecretKind
    secret: str
    path: str
    keys: tuple[str, ...]

    @property
    def volume(self) -> str:
        return secret_volume_name(self.family, self.owner, self.kind)


def secret_volume_name(family: Family, owner: str, kind: SecretKind) -> str:
    """A DNS label (what volume names must be) of at most 63 characters: ``<family>-<kind>-
    <owner>`` when that is one; otherwise (LinkRoute names may be 253 characters and have dots)
    ``<family>h-<kind>-`` the owner's start, dots as '-', then 12 hex digits of its SHA-256. The
    prefixes differ, so the two forms never meet; nor do they meet ``config``, ``sasl`` and
    ``tls-<port>``, the renderer's other volumes."""
    readable = f"{family}-{kind}-{owner}"
    if len(readable) <= MAX_VOLUME_NAME and _VOLUME_NAME.fullmatch(readable):
        return readable
    digest = hashlib.sha256(owner.encode()).hexdigest()[:12]
    room = MAX_VOLUME_NAME - len(f"{family}h-{kind}--{digest}")
    stem = re.sub(r"[^a-z0-9-]", "-", owner.lower())[:room].strip("-")
    return f"{family}h-{kind}-{stem}-{digest}" if stem else f"{family}h-{kind}-{digest}"
