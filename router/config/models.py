"""Router configuration: the one definition the file loader, the CLI and the engine all share.

Keys are Qpid Dispatch's entity attribute names (camelCase) so an operator who knows
qdrouterd.conf can read ours. Everything is strict: an unknown key is an error, because a
misspelt ``linkCapasity`` that is silently ignored costs hours in production.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from collections.abc import Hashable
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BeforeValidator,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from router.addressing import rule_tokens
from router.config.base import Strict, check_pattern, check_prefix
from router.config.policy import PolicySettings, Vhost, check_vhosts
from router.config.views import (
    AddressView,
    ConfigError,
    ConnectorView,
    LinkRouteView,
    ListenerView,
    RouterConfigView,
    config_text,
    short_repr,
)
from router.gateway.config import Gateway
from router.nodes.config import NodeSettings, StoreSettings
from router.telemetry.config import Telemetry, check_not_reserved

AMQP_PORT = 5672

Mode = Literal["standalone", "interior", "edge"]
Role = Literal["normal", "inter-router", "edge", "route-container", "gateway"]
SaslMechanism = Literal["ANONYMOUS", "PLAIN", "EXTERNAL"]
StripAnnotations = Literal["in", "out", "both", "no"]
Distribution = Literal["closest", "balanced", "multicast"]
Undeliverable = Literal["drop", "hold", "redirect"]
Direction = Literal["in", "out"]

_HOSTNAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?")
# The names Proton's pn_ssl_domain_set_protocols takes (OpenSSL's).
TLS_PROTOCOLS = ("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")


def _parse_port(value: object) -> int:
    """Accepts "amqp" and numeric strings as well as integers, as Dispatch does."""
    if isinstance(value, str):
        text = value.strip()
        if text.lower() == "amqp":
            return AMQP_PORT
        if text.isascii() and text.isdigit():
            value = int(text)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise ValueError(f'{short_repr(value)} is not a valid port (1..65535 or "amqp")')
    return value


def _parse_sasl(value: object) -> object:
    """Accepts Dispatch's space-separated form ("ANONYMOUS PLAIN") beside a YAML list."""
    if isinstance(value, str):
        value = value.split()
    if isinstance(value, list):
        return [item.upper() if isinstance(item, str) else item for item in value]
    return value


def _parse_strip(value: object) -> object:
    """YAML 1.1 reads a bare ``no`` as false; map booleans back to the words meant."""
    if isinstance(value, bool):
        return "both" if value else "no"
    return value


def _check_host(value: str) -> str:
    """Strips IPv6 brackets so the engine gets a literal it can pass straight to bind()."""
    host = value[1:-1] if value.startswith("[") and value.endswith("]") else value
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not _HOSTNAME.fullmatch(host):
            raise ValueError(
                f"{value!r} is not a valid host (an IPv4/IPv6 literal or a host name)"
            ) from None
    return host


def _check_id(value: str) -> str:
    if not value or any(ch.isspace() or ch == "/" for ch in value):
        raise ValueError(f"{value!r} is not a valid router id (non-empty, no whitespace, no '/')")
    return value


def _check_cost(role: str, cost: int) -> None:
    if cost != 1 and role != "inter-router":
        raise ValueError(f"cost {cost} applies only to role inter-router, not {role}")


Port = Annotated[
    int,
    BeforeValidator(_parse_port),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 1, "maximum": 65535},
                {"type": "string", "pattern": r"^(\d+|amqp)$"},
            ]
        }
    ),
]

SaslMechanisms = Annotated[
    list[SaslMechanism],
    BeforeValidator(_parse_sasl),
    Field(min_length=1),
    WithJsonSchema(
        {
            "anyOf": [
                {
                    "type": "array",
                    "items": {"enum": ["ANONYMOUS", "PLAIN", "EXTERNAL"]},
                    "minItems": 1,
                },
                {"type": "string", "description": "space-separated mechanism names"},
            ]
        }
    ),
]


FILES_CONTEXT_KEY = "files"
"""Validation context: ``RouterConfig.model_validate(data, context={"files": False})`` checks
everything but whether the files and directories the router reads exist (sslProfiles'
certFile, privateKeyFile and caCertFile; router.saslConfigDir and its SASL config file). For a
configuration written here but run elsewhere: the operator validates pod configs whose files
exist only in the pod (mounted Secrets). The router's own loading (``validate_config``) passes
no context, so it keeps checking."""


def _checks_files(info: ValidationInfo) -> bool:
    context = info.context
    return not (isinstance(context, dict) and context.get(FILES_CONTEXT_KEY) is False)


def _check_file(value: str | None, info: ValidationInfo) -> str | None:
    """A file the router reads at start-up (and whenever a connection needs it): it must be
    there now, so that a typo is a config error rather than every connection failing."""
    if value is None:
        return value
    if not value.strip():
        raise ValueError(f"{value!r} is not a file name (leave it out instead)")
    if not _checks_files(info):
        return value
    path = Path(value)
    if not path.exists():
        raise ValueError(f"{value!r} does not exist")
    if not path.is_file():
        raise ValueError(f"{value!r} is not a file")
    if not os.access(path, os.R_OK):
        raise ValueError(f"{value!r} is not readable")
    return value


class SslProfile(Strict):
    """TLS credentials and trust for listeners and connectors, Dispatch's ``sslProfile``
    entity. Files are PEM; they must exist when the configuration is loaded, and Proton
    (OpenSSL) reads them then and whenever the profile's settings change. New content under
    the same paths (a renewed certificate) is read at the next change or restart.

    A listener's profile needs certFile and privateKeyFile; a connector's may be empty (TLS
    with the system's CAs and no client certificate)."""

    name: str = Field(description="What listeners' and connectors' sslProfile refers to.")
    certFile: str | None = Field(
        default=None,
        description=(
            "This router's certificate (PEM; may include the chain): what a listener presents,"
            " and a connector's client certificate. Needs privateKeyFile."
        ),
    )
    privateKeyFile: str | None = Field(
        default=None, description="The private key of certFile (PEM, encrypted or not)."
    )
    password: str | None = Field(
        default=None,
        description=(
            "Pass phrase of an encrypted privateKeyFile: 'env:VAR' (an environment variable),"
            " 'file:/abs/path' (a file's first line, e.g. a mounted Secret), 'pass:TEXT' or"
            " plain TEXT."
        ),
    )
    caCertFile: str | None = Field(
        default=None,
        description=(
            "CA certificates (PEM) trusted to sign the peer's certificate: a connector verifies"
            " its server with them (the system's CAs when unset), a listener its clients' when"
            " it authenticates them (authenticatePeer or EXTERNAL)."
        ),
    )
    ciphers: str | None = Field(
        default=None,
        description=(
            "OpenSSL cipher list for TLS 1.2 and below, e.g. 'ECDHE-RSA-AES256-GCM-SHA384:"
            "ECDHE-RSA-AES128-GCM-SHA256'; OpenSSL's default when unset."
        ),
    )
    protocols: str | None = Field(
        default=None,
        description=(
            "Space-separated TLS versions allowed, of TLSv1 TLSv1.1 TLSv1.2 TLSv1.3; OpenSSL's"
            " default when unset."
        ),
    )

    _files = field_validator("certFile", "privateKeyFile", "caCertFile")(_check_file)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not value.strip():
            raise ValueError(f"{value!r} is not a valid name (non-empty)")
        return value

    @field_validator("password", "ciphers")
    @classmethod
    def _not_empty(cls, value: str | None) -> str | None:
        if value is not None and not value:
            raise ValueError("must not be empty (leave it out instead)")
        return value

    @field_validator("protocols")
    @classmethod
    def _protocols(cls, value: str | None) -> str | None:
        if value is None:
            return value
        names = value.split()
        unknown = [name for name in names if name not in TLS_PROTOCOLS]
        if not names or unknown:
            raise ValueError(
                f"{value!r} is not a valid protocol list: space-separated names of"
                f" {' '.join(TLS_PROTOCOLS)}"
            )
        return " ".join(names)

    @model_validator(mode="after")
    def _consistency(self) -> Self:
        if (self.certFile is None) != (self.privateKeyFile is None):
            raise ValueError("certFile and privateKeyFile go together: give both or neither")
        if self.password is not None and self.privateKeyFile is None:
            raise ValueError("password is the pass phrase of privateKeyFile, which is not set")
        return self


class _Endpoint(Strict):
    """What listeners and connectors validate alike: a host to bind or dial, a name, and the
    sslProfile they use (resolved by RouterConfig into ``ssl``, EndpointView)."""

    # The SslProfile named by sslProfile, set when a whole RouterConfig is validated (the
    # Connection reads it); part of equality, so a changed profile changes its users.
    _ssl: SslProfile | None = PrivateAttr(default=None)

    @field_validator("sslProfile", check_fields=False)
    @classmethod
    def _ssl_profile(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError(f"{value!r} is not a valid sslProfile name (leave it out instead)")
        return value

    @field_validator("host", check_fields=False)
    @classmethod
    def _host(cls, value: str) -> str:
        return _check_host(value)

    @field_validator("name", check_fields=False)
    @classmethod
    def _name(cls, value: str) -> str:
        if not value.strip():
            raise ValueError(f"{value!r} is not a valid name (leave it out to get the default)")
        return value


class Listener(_Endpoint, ListenerView):
    """An AMQP listening socket, Dispatch's ``listener`` entity."""

    name: str = Field(
        default="",
        description='Management name; defaults to "listener/HOST:PORT".',
    )
    host: str = Field(default="0.0.0.0", description="IP literal or host name to bind.")
    port: Port = Field(default=AMQP_PORT, description='1..65535, or "amqp" for 5672.')
    role: Role = Field(default="normal", description="Who is expected to connect.")
    cost: int = Field(
        default=1,
        ge=1,
        description=(
            "Role inter-router only: the cost of connections through this listener; a"
            " connection costs the larger of both ends' values."
        ),
    )
    linkCapacity: int = Field(default=250, gt=0, description="Credit granted per incoming link.")
    saslMechanisms: SaslMechanisms = Field(
        default_factory=lambda: ["ANONYMOUS"],
        description="Mechanisms offered to clients.",
    )
    authenticatePeer: bool = Field(
        default=False,
        description=(
            "Refuse clients that authenticate as ANONYMOUS; with an sslProfile that has"
            " caCertFile, TLS clients must also present a certificate it signed."
        ),
    )
    idleTimeoutSeconds: int = Field(
        default=16, ge=0, description="Idle timeout advertised in Open; 0 disables it."
    )
    maxFrameSize: int = Field(
        default=16384, ge=512, le=2**32 - 1, description="Largest frame accepted, in bytes."
    )
    stripAnnotations: Annotated[StripAnnotations, BeforeValidator(_parse_strip)] = Field(
        default="both",
        description="Strip router message annotations on the way in, out, both or no.",
    )
    sslProfile: str | None = Field(
        default=None,
        description=(
            "Name of the sslProfile whose certFile this listener presents to TLS clients; its"
            " caCertFile verifies client certificates when authenticatePeer is set or EXTERNAL"
            " is offered (a client without a valid certificate is then refused)."
        ),
    )
    requireSsl: bool = Field(
        default=False,
        description=(
            "Refuse clients that do not start TLS; true by default when sslProfile is set."
            " False with an sslProfile: TLS and plain clients both accepted."
        ),
    )
    policyVhost: str | None = Field(
        default=None,
        description=(
            "With policy.enableVhostPolicy: the vhost of every connection to this listener,"
            " whatever hostname its Open names."
        ),
    )

    @model_validator(mode="after")
    def _defaults_and_consistency(self) -> Self:
        if "name" not in self.model_fields_set:
            self.name = f"listener/{self.address}"
        if "requireSsl" not in self.model_fields_set:
            self.requireSsl = self.sslProfile is not None
        elif self.requireSsl and self.sslProfile is None:
            raise ValueError("requireSsl needs an sslProfile")
        if self.authenticatePeer and set(self.saslMechanisms) <= {"ANONYMOUS"}:
            raise ValueError(
                "authenticatePeer requires a mechanism other than ANONYMOUS in saslMechanisms"
            )
        if "EXTERNAL" in self.saslMechanisms and self.sslProfile is None:
            raise ValueError("EXTERNAL needs an sslProfile (with caCertFile) to verify clients")
        _check_cost(self.role, self.cost)
        return self


class Connector(_Endpoint, ConnectorView):
    """An outgoing connection the router keeps up, Dispatch's ``connector`` entity.

    The host is resolved again on every attempt, and a name that does not resolve yet is
    accepted: on Kubernetes the peer's pod and its DNS record may appear after this router.
    """

    name: str = Field(
        default="",
        description='Management name; defaults to "connector/HOST:PORT".',
    )
    host: str = Field(
        default="127.0.0.1",
        description="IP literal or host name to dial; resolved again before every attempt.",
    )
    port: Port = Field(default=AMQP_PORT, description='1..65535, or "amqp" for 5672.')
    role: Role = Field(
        default="normal",
        description=(
            "What is at the other end: inter-router (an interior router; needs router mode"
            " interior), edge (an interior router, dialled by an edge router), route-container"
            " (a broker), gateway (another router network's gateway listener), normal."
        ),
    )
    cost: int = Field(
        default=1,
        ge=1,
        description=(
            "Role inter-router only: the cost of this connection for path computation; the"
            " larger of both ends' values counts."
        ),
    )
    saslMechanisms: SaslMechanisms = Field(
        default_factory=lambda: ["ANONYMOUS"],
        description="Mechanisms the router may use; default PLAIN when saslUsername is set.",
    )
    saslUsername: str | None = Field(
        default=None,
        description=(
            "User name sent with PLAIN (USER@REALM for a Cyrus sasldb); like saslPassword it may"
            " be env:VAR or file:PATH, so that both can come from a mounted Secret."
        ),
    )
    saslPassword: str | None = Field(
        default=None,
        description=(
            "Password sent with PLAIN, read at every attempt: 'env:VAR' (an environment"
            " variable), 'file:/abs/path' (a file's first line, e.g. a mounted Secret),"
            " 'pass:TEXT' or plain TEXT."
        ),
    )
    idleTimeoutSeconds: int = Field(
        default=16,
        ge=0,
        description=(
            "Idle timeout advertised in Open; 0 disables it. Also how long an attempt may take"
            " to get the peer's Open (16 s when 0)."
        ),
    )
    maxFrameSize: int = Field(
        default=16384, ge=512, le=2**32 - 1, description="Largest frame accepted, in bytes."
    )
    stripAnnotations: Annotated[StripAnnotations, BeforeValidator(_parse_strip)] = Field(
        default="both",
        description=(
            "Strip router message annotations on the way in, out, both or no; ignored (never"
            " stripped) for roles inter-router and edge, as in Dispatch."
        ),
    )
    linkCapacity: int = Field(default=250, gt=0, description="Credit granted per incoming link.")
    sslProfile: str | None = Field(
        default=None,
        description=(
            "Name of the sslProfile to connect with TLS: its caCertFile verifies the server"
            " (the system's CAs when unset), its certFile is the client certificate."
        ),
    )
    verifyHostname: bool = Field(
        default=True,
        description=(
            "With sslProfile: the server's certificate must name host, as Proton checks it:"
            " against its DNS subjectAltNames and CN only, so for an IP-literal host the"
            " certificate needs a DNS:<ip> entry (an IP:<ip> one alone does not match). False"
            " still verifies the certificate against caCertFile when the profile has one;"
            " without one, any certificate is accepted."
        ),
    )

    @field_validator("saslUsername", "saslPassword")
    @classmethod
    def _credential(cls, value: str | None) -> str | None:
        if value is not None and not value:
            raise ValueError("must not be empty (leave it out instead)")
        return value

    @model_validator(mode="after")
    def _defaults_and_consistency(self) -> Self:
        if "name" not in self.model_fields_set:
            self.name = f"connector/{self.address}"
        if "saslMechanisms" not in self.model_fields_set and self.saslUsername is not None:
            self.saslMechanisms = ["PLAIN"]
        plain = "PLAIN" in self.saslMechanisms
        if plain and (self.saslUsername is None or self.saslPassword is None):
            raise ValueError("PLAIN needs both saslUsername and saslPassword")
        if not plain and (self.saslUsername is not None or self.saslPassword is not None):
            raise ValueError("saslUsername and saslPassword are only sent with PLAIN")
        if "EXTERNAL" in self.saslMechanisms and self.sslProfile is None:
            raise ValueError("EXTERNAL needs an sslProfile with the client certificate (certFile)")
        _check_cost(self.role, self.cost)
        return self


class Address(Strict, AddressView):
    """Routing semantics for a family of addresses, Dispatch's ``address`` entity."""

    prefix: str | None = Field(
        default=None,
        description="Matches this address and any below it, whole tokens split by '.' or '/'.",
    )
    pattern: str | None = Field(
        default=None,
        description="Tokens split by '.' or '/'; '*' matches one token, '#' zero or more.",
    )
    distribution: Distribution = Field(default="balanced")
    undeliverable: Undeliverable = Field(
        default="drop",
        description=(
            "With no consumer: drop (pre-settled discarded and counted, unsettled released),"
            " hold until one attaches, or redirect to fallbackAddress."
        ),
    )
    holdTimeoutSeconds: float = Field(
        default=30.0, gt=0, description="How long held messages wait (undeliverable: hold)."
    )
    fallbackAddress: str | None = Field(
        default=None, description="Where messages go when undeliverable is redirect."
    )
    priority: int = Field(
        default=-1, ge=-1, le=9, description="Delivery priority 0..9; -1 keeps the message's."
    )
    node: NodeSettings | None = Field(
        default=None,
        description="A queue or topic the network stores for each address matched"
        " (router/nodes/); absent: routed to consumers as they are.",
    )

    _prefix = field_validator("prefix")(check_prefix)
    _pattern = field_validator("pattern")(check_pattern)

    @field_validator("prefix", "pattern")
    @classmethod
    def _not_reserved(cls, value: str | None, info: ValidationInfo) -> str | None:
        return check_not_reserved(value, str(info.field_name))

    @field_validator("fallbackAddress")
    @classmethod
    def _fallback(cls, value: str | None) -> str | None:
        if value is not None and (not value or any(ch.isspace() for ch in value)):
            raise ValueError(f"{value!r} is not a valid address (non-empty, no whitespace)")
        return value

    @model_validator(mode="after")
    def _consistency(self) -> Self:
        if (self.prefix is None) == (self.pattern is None):
            raise ValueError("exactly one of prefix or pattern is required")
        if self.undeliverable == "redirect" and self.fallbackAddress is None:
            raise ValueError("fallbackAddress is required when undeliverable is redirect")
        if self.undeliverable != "redirect" and self.fallbackAddress is not None:
            raise ValueError(
                f"fallbackAddress {self.fallbackAddress!r} is only allowed when undeliverable"
                f" is redirect, not {self.undeliverable}"
            )
        return self


class LinkRoute(Strict, LinkRouteView):
    """Links whose address matches go, attach and all, to a container such as a broker:
    Dispatch's ``linkRoute`` entity."""

    prefix: str | None = Field(
        default=None,
        description="Matches this address and any below it, whole tokens split by '.' or '/'.",
    )
    pattern: str | None = Field(
        default=None,
        description="Tokens split by '.' or '/'; '*' matches one token, '#' zero or more.",
    )
    direction: Direction = Field(
        description="in: links on which clients send (to the container); out: links on which"
        " clients receive (from it)."
    )
    containerId: str | None = Field(
        default=None,
        description="The container the links go to: the container-id its AMQP Open announces,"
        " on a route-container connection.",
    )
    connection: str | None = Field(
        default=None,
        description="The links go over this route-container connector or listener (its name).",
    )
    addExternalPrefix: str | None = Field(
        default=None, description="Put in front of the address on the container's side."
    )
    delExternalPrefix: str | None = Field(
        default=None, description="Taken off the front of the address on the container's side."
    )

    _prefix = field_validator("prefix")(check_prefix)
    _pattern = field_validator("pattern")(check_pattern)

    @model_validator(mode="after")
    def _consistency(self) -> Self:
        if (self.prefix is None) == (self.pattern is None):
            raise ValueError("exactly one of prefix or pattern is required")
        if (self.containerId is None) == (self.connection is None):
            raise ValueError("exactly one of containerId or connection is required")
        for field, value in (("containerId", self.containerId), ("connection", self.connection)):
            if value is not None and not value.strip():
                raise ValueError(f"{field} {value!r} is empty: name the container or connection")
        return self


class RouterSettings(Strict):
    """Dispatch's ``router`` entity: who this router is and how it joins a network."""

    id: str = Field(description="Unique router identity: non-empty, no whitespace, no '/'.")
    mode: Mode = Field(default="standalone")
    helloIntervalSeconds: int = Field(
        default=1, gt=0, description="Seconds between HELLOs to each neighbor router."
    )
    helloMaxAgeSeconds: int = Field(
        default=3,
        gt=0,
        description="A neighbor not heard from for this long is lost; above helloIntervalSeconds.",
    )
    raIntervalSeconds: int = Field(
        default=30, gt=0, description="Seconds between router advertisements in a stable network."
    )
    raIntervalFluxSeconds: int = Field(
        default=4,
        gt=0,
        description="Seconds between router advertisements while the topology is changing.",
    )
    remoteLsMaxAgeSeconds: int = Field(
        default=60,
        gt=0,
        description=(
            "A remote router's link state is dropped when no advertisement refreshed it for"
            " this long; above raIntervalSeconds."
        ),
    )
    drainTimeoutSeconds: float = Field(
        default=10.0,
        ge=0,
        description=(
            "On SIGTERM/SIGINT the router drains before it closes: it stops listening, refuses"
            " new links from clients, gives their senders no more credit, and waits up to this"
            " long for the deliveries it holds to be settled; what is left is then released to"
            " its senders. A second signal ends the wait at once. Keep it, plus a few seconds,"
            " within the pod's termination grace period (after preStop). 0: no wait."
            " Changes apply live."
        ),
    )
    managementWriters: list[str] = Field(
        default_factory=list,
        description=(
            "Users who may CREATE, UPDATE and DELETE through this router's $management (reads"
            " stay open to whoever may connect): a connection's SASL user (PLAIN as"
            " USER@REALM, EXTERNAL the certificate's subject), else its TLS client"
            " certificate's subject, else 'anonymous' (listing it allows every client that did"
            " not authenticate). The routers of the network may always, on a link to this"
            " router's $management of their own. Others get 403. Changes apply live."
        ),
    )
    saslConfigDir: str | None = Field(
        default=None,
        description=(
            "Directory holding the Cyrus SASL config file <saslConfigName>.conf, which says"
            " how listeners verify credentials, e.g. 'pwcheck_method: auxprop',"
            " 'auxprop_plugin: sasldb', 'sasldb_path: /abs/path/users.sasldb' (absolute),"
            " 'mech_list: PLAIN ANONYMOUS'. A listener offers only the mechanisms in both its"
            " saslMechanisms and mech_list. Users go in the sasldb with"
            " 'saslpasswd2 -c -f users.sasldb -u REALM USER' and are stored as USER@REALM;"
            " a PLAIN client must send the user name USER@REALM (a bare USER is looked up as"
            " USER@<the router's host name>, which differs per pod, so always give -u), and"
            " that name is the connection's 'user' in management. The file is read once, at"
            " start-up; the sasldb at every login. Unset: Cyrus's default search path"
            " (/etc/sasl2 on Debian)."
        ),
    )
    saslConfigName: str = Field(
        default="routernet",
        description=(
            "Name of the Cyrus SASL config file, without '.conf', in saslConfigDir"
            " (Dispatch's default is qdrouterd)."
        ),
    )

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        return _check_id(value)

    @field_validator("saslConfigDir")
    @classmethod
    def _sasl_config_dir(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return value
        if not value.strip():
            raise ValueError(f"{value!r} is not a directory (leave it out for Cyrus's default)")
        if not _checks_files(info):
            return value
        if not Path(value).exists():
            raise ValueError(f"{value!r} does not exist")
        if not Path(value).is_dir():
            raise ValueError(f"{value!r} is not a directory")
        return value

    @field_validator("saslConfigName")
    @classmethod
    def _sasl_config_name(cls, value: str) -> str:
        if not value or value.startswith(".") or any(ch.isspace() or ch == "/" for ch in value):
            raise ValueError(
                f"{value!r} is not a valid SASL config name (a file name without '.conf':"
                " non-empty, no whitespace, no '/', not starting with '.')"
            )
        return value

    @model_validator(mode="after")
    def _timers(self) -> Self:
        if self.helloMaxAgeSeconds <= self.helloIntervalSeconds:
            raise ValueError(
                f"helloMaxAgeSeconds {self.helloMaxAgeSeconds} must be greater than"
                f" helloIntervalSeconds {self.helloIntervalSeconds}, or neighbors are lost"
                " between two HELLOs"
            )
        if self.remoteLsMaxAgeSeconds <= self.raIntervalSeconds:
            raise ValueError(
                f"remoteLsMaxAgeSeconds {self.remoteLsMaxAgeSeconds} must be greater than"
                f" raIntervalSeconds {self.raIntervalSeconds}, or link state expires between"
                " two advertisements"
            )
        return self

    @model_validator(mode="after")
    def _sasl_config_file(self, info: ValidationInfo) -> Self:
        if self.saslConfigDir is not None and _checks_files(info):
            path = Path(self.saslConfigDir) / f"{self.saslConfigName}.conf"
            if not path.is_file():
                raise ValueError(
                    f"saslConfigDir {self.saslConfigDir!r} has no {path.name}"
                    f" (the Cyrus SASL config file named by saslConfigName)"
                )
        return self


class RouterConfig(Strict, RouterConfigView):
    """A whole router's configuration, as loaded from a file and overridden by flags."""

    router: RouterSettings
    sslProfiles: list[SslProfile] = Field(default_factory=list)
    listeners: list[Listener] = Field(default_factory=list)
    connectors: list[Connector] = Field(default_factory=list)
    addresses: list[Address] = Field(default_factory=list)
    linkRoutes: list[LinkRoute] = Field(default_factory=list)
    telemetry: Telemetry = Field(default_factory=Telemetry)
    gateway: Gateway = Field(default_factory=Gateway)
    store: StoreSettings = Field(default_factory=StoreSettings)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    vhosts: list[Vhost] = Field(default_factory=list)

    @model_validator(mode="after")
    def _vhosts(self) -> Self:
        check_vhosts(self.vhosts)
        return self

    @model_validator(mode="after")
    def _store_for_nodes(self) -> Self:
        me = self.router.id
        for address in self.addresses:
            node = address.node
            if node is not None and (not node.hosts or me in node.hosts) and not self.store.path:
                raise ValueError(
                    f"address {address.key} has nodes hosted on this router ({me}):"
                    " store.path must say where their messages are kept"
                )
        return self

    @model_validator(mode="after")
    def _no_duplicates(self) -> Self:
        _reject_duplicates(
            "listeners", [(lsn.address.lower(), lsn.address) for lsn in self.listeners]
        )
        _reject_duplicates(
            "listeners", [(lsn.name, f"name {lsn.name!r}") for lsn in self.listeners]
        )
        _reject_duplicates(
            "connectors", [(ctr.name, f"name {ctr.name!r}") for ctr in self.connectors]
        )
        _reject_duplicates("sslProfiles", [(p.name, f"name {p.name!r}") for p in self.sslProfiles])
        _reject_duplicates("addresses", [(a.key, a.key) for a in self.addresses])
        # Equivalent spellings ("a.b" and "a/b") are one route, as in the routers' tables.
        _reject_duplicates(
            "linkRoutes",
            [((r.direction, rule_tokens(r.prefix, r.pattern)), r.key) for r in self.linkRoutes],
        )
        return self

    @model_validator(mode="after")
    def _ssl_profiles(self) -> Self:
        """Resolve every sslProfile reference, which must name a profile fit for its use."""
        self.resolve_ssl()  # as records are resolved (RouterConfigView)
        profiles = {p.name: p for p in self.sslProfiles}
        for field, entries in (("listeners", self.listeners), ("connectors", self.connectors)):
            for index, entry in enumerate(entries):
                name = entry.sslProfile
                profile = entry.ssl
                if name is not None and profile is None:
                    known = ", ".join(repr(n) for n in profiles) or "none are defined"
                    raise ValueError(
                        f"{field}[{index}].sslProfile: no sslProfile named {name!r} ({known})"
                    )
                if profile is None:
                    continue
                if isinstance(entry, Listener):
                    if profile.certFile is None:
                        raise ValueError(
                            f"{field}[{index}]: sslProfile {name!r} has no certFile and"
                            " privateKeyFile, which a listener presents to its clients"
                        )
                    if "EXTERNAL" in entry.saslMechanisms and profile.caCertFile is None:
                        raise ValueError(
                            f"{field}[{index}]: EXTERNAL needs sslProfile {name!r} to have"
                            " caCertFile, which verifies client certificates"
                        )
                elif "EXTERNAL" in entry.saslMechanisms and profile.certFile is None:
                    raise ValueError(
                        f"{field}[{index}]: EXTERNAL needs sslProfile {name!r} to have certFile"
                        " and privateKeyFile (the client certificate)"
                    )
        return self

    @model_validator(mode="after")
    def _roles_fit_the_mode(self) -> Self:
        """Dispatch's rules: only interior routers join the inter-router network or accept
        edge routers, and only an edge router dials an interior as an edge."""
        mode = self.router.mode
        for field, entries in (("listeners", self.listeners), ("connectors", self.connectors)):
            for index, entry in enumerate(entries):
                if entry.role == "inter-router" and mode != "interior":
                    need, why = "interior", ""
                elif entry.role == "edge" and field == "listeners" and mode != "interior":
                    need, why = "interior", " (edge routers connect to interior routers)"
                elif entry.role == "edge" and field == "connectors" and mode != "edge":
                    need, why = "edge", " (interior routers dial each other as inter-router)"
                elif entry.role == "gateway" and mode == "edge":
                    need, why = "interior or standalone", " (edges join no other network)"
                else:
                    continue
                raise ValueError(
                    f"{field}[{index}]: role {entry.role} needs router.mode {need}, not {mode}{why}"
                )
        return self

    @model_validator(mode="after")
    def _gateway_connectors(self) -> Self:
        """A hand-made container route must name a connector that reaches a gateway."""
        roles = {ctr.name: ctr.role for ctr in self.connectors}
        for index, route in enumerate(self.gateway.containers):
            role = roles.get(route.connector)
            if role != "gateway":
                why = "no such connector" if role is None else f"its role is {role}"
                raise ValueError(
                    f"gateway.containers[{index}].connector: {route.connector!r} must name a"
                    f" connector with role gateway ({why})"
                )
        return self


def _reject_duplicates(field: str, keys: list[tuple[Hashable, str]]) -> None:
    first: dict[Hashable, int] = {}
    for index, (key, shown) in enumerate(keys):
        if key in first:
            raise ValueError(f"{field}[{index}]: duplicate {shown} (also {field}[{first[key]}])")
        first[key] = index


def _unique_json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Parses without validating, so the CLI can apply flag overrides before validation."""
    return parse_config_text(config_text(path), path)


def parse_config_text(text: str, path: str | Path) -> dict[str, Any]:
    """Parses a config file's text (JSON if ``path`` ends in .json, YAML otherwise) without
    validating; ``path`` also names the source in error messages (a ConfigMap key, say)."""
    path = Path(path)
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(text, object_pairs_hook=_unique_json_object)
        else:
            from router.config.yamlfiles import load_yaml  # PyYAML only for YAML

            data = load_yaml(text, path)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}:{err.lineno}:{err.colno}: invalid JSON: {err.msg}") from None
    except ValueError as err:  # from _unique_json_object
        raise ConfigError(f"{path}: invalid JSON: {err}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping, not {type(data).__name__}")
    return data


def validate_config(data: dict[str, Any]) -> RouterConfig:
    """Validates already-parsed data, reporting problems as a one-line ConfigError."""
    try:
        return RouterConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError.from_validation(err) from None


def load_config(path: str | Path) -> RouterConfig:
    """Reads and validates a config file (JSON if it ends in .json, YAML otherwise)."""
    return validate_config(read_config_file(path))


def config_schema() -> dict[str, Any]:
    """JSON schema of the config file, for documentation and editor completion."""
    return RouterConfig.model_json_schema()
