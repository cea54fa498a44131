"""TLS for listeners and connectors: Proton's SSL domains, built from the config's sslProfiles.

As in Qpid Dispatch, an ``sslProfile`` holds credentials and trust (certFile, privateKeyFile,
password, caCertFile, ciphers, protocols) and listeners and connectors name the one they use.
What a Proton ``pn_ssl_domain_t`` needs on top depends on that use: a listener's requireSsl
(plain clients allowed or not) and whether it verifies client certificates, a connector's
verifyHostname. So a domain is built per (profile, use) on first need: when the
configuration is checked (``check``, from the CLI, so a bad file is a config error), else when
the first connection needs it. ``retain`` frees the domains a new configuration no longer uses.
Proton counts a domain's users (``pn_ssl_init`` takes a reference, freeing the transport drops
it), so freeing one here never pulls it from under a live connection: connections keep the
credentials they started with, new ones get the new profile.

A renewed certificate is new content under the same paths (a Kubernetes Secret volume swaps its
files): each new connection compares the files' modification times and sizes with those the
domain was built from and, when they changed, builds the domain again (the old one goes when
its last connection does). Certificates are renewed without a restart and without dropping a
connection; one that cannot be loaded keeps the domain built before, and says so once.

The router is single-threaded, so the cache is a plain process-wide dict (``DOMAINS``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from router.config.views import read_secret
from router.log import get_logger
from router.transport.pn import NULL, cbytes, ffi, lib

if TYPE_CHECKING:
    from router.config.records import Connector, Listener, RouterConfig, SslProfile

log = get_logger("router")

__all__ = [
    "DOMAINS",
    "Domains",
    "TlsError",
    "Use",
    "check",
    "describe",
    "start",
]


class TlsError(Exception):
    """A profile Proton cannot use (a file it cannot load, a wrong password...), worded for
    the operator on one line."""


@dataclass(frozen=True)
class Use:
    """How a profile is used, beyond its own settings: one Proton domain per distinct use."""

    server: bool
    require_ssl: bool = True  # server: plain (non-TLS) clients refused
    verify_peer: bool = False  # server: clients must present a certificate from caCertFile
    verify_hostname: bool = True  # client: the server's certificate must name the host


def listener_use(listener: Listener) -> Use:
    profile = listener.ssl
    return Use(
        server=True,
        require_ssl=listener.requireSsl,
        verify_peer=(
            profile is not None and profile.caCertFile is not None and listener.verifies_clients
        ),
    )


def connector_use(connector: Connector) -> Use:
    return Use(server=False, verify_hostname=connector.verifyHostname)


def _profile_key(profile: SslProfile) -> tuple[Any, ...]:
    return tuple(profile.as_dict().values())


def _build(profile: SslProfile, use: Use) -> Any:
    """A new pn_ssl_domain_t for ``profile`` used as ``use``; raises TlsError."""
    where = f"sslProfile {profile.name!r}"
    mode = lib.PN_SSL_MODE_SERVER if use.server else lib.PN_SSL_MODE_CLIENT
    domain = lib.pn_ssl_domain(mode)
    if domain == NULL:
        raise TlsError(f"{where}: python-qpid-proton was built without TLS support (OpenSSL)")
    try:
        if profile.certFile is not None and profile.privateKeyFile is not None:
            try:
                password = profile.password and read_secret(profile.password, "password")
            except ValueError as e:
                raise TlsError(str(e)) from None
            if lib.pn_ssl_domain_set_credentials(
                domain,
                cbytes(profile.certFile),
                cbytes(profile.privateKeyFile),
                cbytes(password),
            ):
                raise TlsError(
                    f"{where}: cannot load certFile {profile.certFile!r} with privateKeyFile"
                    f" {profile.privateKeyFile!r} (not PEM, a key that does not match the"
                    " certificate, or a wrong or missing password)"
                )
        ca = profile.caCertFile
        if ca is not None and lib.pn_ssl_domain_set_trusted_ca_db(domain, cbytes(ca)):
            raise TlsError(f"{where}: cannot load caCertFile {ca!r} (not PEM certificates)")
        if use.server:
            if use.verify_peer:
                verify, names = lib.PN_SSL_VERIFY_PEER, cbytes(ca)
            else:
                verify, names = lib.PN_SSL_ANONYMOUS_PEER, NULL
        elif use.verify_hostname:
            verify, names = lib.PN_SSL_VERIFY_PEER_NAME, NULL
        elif ca is not None:
            verify, names = lib.PN_SSL_VERIFY_PEER, NULL
        else:
            verify, names = lib.PN_SSL_ANONYMOUS_PEER, NULL
        if lib.pn_ssl_domain_set_peer_authentication(domain, verify, names):
            raise TlsError(f"{where}: cannot set up peer verification with caCertFile {ca!r}")
        if profile.ciphers is not None and lib.pn_ssl_domain_set_ciphers(
            domain, cbytes(profile.ciphers)
        ):
            raise TlsError(f"{where}: OpenSSL accepts none of ciphers {profile.ciphers!r}")
        if profile.protocols is not None and lib.pn_ssl_domain_set_protocols(
            domain, cbytes(profile.protocols)
        ):
            raise TlsError(f"{where}: OpenSSL refuses protocols {profile.protocols!r}")
        if use.server and not use.require_ssl:
            lib.pn_ssl_domain_allow_unsecured_client(domain)
    except BaseException:
        lib.pn_ssl_domain_free(domain)
        raise
    return domain


def _files(profile: SslProfile) -> tuple[tuple[int, int] | None, ...]:
    """The (mtime, size) of the profile's files, None for one not there."""
    found: list[tuple[int, int] | None] = []
    for path in (profile.certFile, profile.privateKeyFile, profile.caCertFile):
        try:
            st = os.stat(path) if path else None
        except OSError:
            st = None
        found.append((st.st_mtime_ns, st.st_size) if st is not None else None)
    return tuple(found)


class Domains:
    """Proton SSL domains by (profile settings, use), built on first need and again when the
    profile's files change."""

    def __init__(self) -> None:
        self._built: dict[tuple[tuple[Any, ...], Use], Any] = {}
        self._files: dict[tuple[tuple[Any, ...], Use], tuple[tuple[int, int] | None, ...]] = {}

    def __len__(self) -> int:
        return len(self._built)

    def get(self, profile: SslProfile, use: Use) -> Any:
        key = (_profile_key(profile), use)
        domain = self._built.get(key)
        files = _files(profile)
        if domain is None:
            domain = self._built[key] = _build(profile, use)
            self._files[key] = files
        elif files != self._files[key]:
            self._files[key] = files  # tried once per change, whatever comes of it
            try:
                renewed = _build(profile, use)
            except TlsError as e:
                log.warning("tls.reload_failed", profile=profile.name, error=str(e))
                return domain
            lib.pn_ssl_domain_free(domain)  # live connections hold their own reference
            domain = self._built[key] = renewed
            log.info("tls.reloaded", profile=profile.name)
        return domain

    def retain(self, config: RouterConfig) -> None:
        """Free the domains ``config`` does not use (live connections keep theirs)."""
        wanted = {(_profile_key(profile), use) for profile, use in uses(config)}
        for key in [key for key in self._built if key not in wanted]:
            lib.pn_ssl_domain_free(self._built.pop(key))
            del self._files[key]

    def clear(self) -> None:
        for domain in self._built.values():
            lib.pn_ssl_domain_free(domain)
        self._built.clear()
        self._files.clear()


DOMAINS = Domains()


def uses(config: RouterConfig) -> list[tuple[SslProfile, Use]]:
    """Every (profile, use) of ``config``'s listeners and connectors."""
    found: list[tuple[SslProfile, Use]] = []
    for listener in config.listeners:
        if listener.ssl is not None:
            found.append((listener.ssl, listener_use(listener)))
    for connector in config.connectors:
        if connector.ssl is not None:
            found.append((connector.ssl, connector_use(connector)))
    return found


def check(config: RouterConfig, domains: Domains = DOMAINS) -> None:
    """Build every domain ``config`` uses, so that a certificate, key or password Proton cannot
    load is found before the router runs with it; raises TlsError. Profiles no listener or
    connector uses are loaded too (as a client), so that they are known to be good."""
    used = {profile.name for profile, _use in uses(config)}
    for profile, use in uses(config):
        domains.get(profile, use)
    for profile in config.sslProfiles:
        if profile.name not in used:
            lib.pn_ssl_domain_free(_build(profile, Use(server=False, verify_hostname=False)))


def start(transport: Any, endpoint: Listener | Connector, server: bool) -> Any:
    """TLS on a new, not yet bound transport, with the endpoint's sslProfile; returns the
    pn_ssl_t. A connector's host is the name the server's certificate must carry (and the SNI
    sent). Raises TlsError."""
    profile = endpoint.ssl
    assert profile is not None
    use = listener_use(endpoint) if server else connector_use(endpoint)  # type: ignore[arg-type]
    domain = DOMAINS.get(profile, use)
    ssl = lib.pn_ssl(transport)
    if ssl == NULL or lib.pn_ssl_init(ssl, domain, NULL):
        raise TlsError(f"sslProfile {profile.name!r}: Proton cannot start TLS on the connection")
    if not server:
        lib.pn_ssl_set_peer_hostname(ssl, endpoint.host.encode())
    return ssl


_NAME_SIZE = 64


def describe(ssl: Any) -> tuple[str | None, str | None]:
    """(protocol, cipher) of a TLS session, once the handshake is done; (None, None) before."""
    if ssl == NULL:
        return None, None
    return _name(lib.pn_ssl_get_protocol_name, ssl), _name(lib.pn_ssl_get_cipher_name, ssl)


def _name(getter: Any, ssl: Any) -> str | None:
    buf = ffi.new("char[]", _NAME_SIZE)
    return ffi.string(buf).decode() if getter(ssl, buf, _NAME_SIZE) else None
