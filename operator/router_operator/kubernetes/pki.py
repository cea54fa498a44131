"""The certificates of mutual TLS between a network's routers: a CA per network and a
certificate per router pod, as PEM, made and judged here with no I/O (kubernetes/internal_tls.py
reads and writes the Secrets that hold them).

A pod's certificate names the pod (CN) and its stable DNS names (the names the other routers
dial: ``<pod>.<router>-peers.<namespace>.svc[.<domain>]``), and is good for both ends of a
connection (server and client auth), since a router both listens and dials. It is issued for
CERT_DAYS and issued again once fewer than RENEW_DAYS are left, or when its names or its CA are
not the ones wanted any more; the routers load a renewed one for new connections without a
restart (router/transport/tls.py) and keep the connections they have.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from router_operator.planning.internal_tls import CERT_DAYS, RENEW_DAYS

CA_DAYS = 3650
_ORGANIZATION = "Routernet"


@dataclass(frozen=True)
class Pair:
    """A certificate and its private key, PEM."""

    cert: bytes
    key: bytes


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common: str, unit: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, _ORGANIZATION),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit),
            x509.NameAttribute(NameOID.COMMON_NAME, common),
        ]
    )


def new_ca(namespace: str, network: str, now: datetime.datetime) -> Pair:
    """A network's CA: it signs its routers' certificates, and each router trusts only it on
    its inter-router and edge listeners."""
    key = _key()
    name = _name(f"{network} CA", f"{namespace}/{network}")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _alt_names(names: Sequence[str]) -> list[x509.GeneralName]:
    """DNS names; an IP address (a router dialled by address, as in tests) both as an address
    and as a DNS name, which is what Proton's host name check compares."""
    out: list[x509.GeneralName] = []
    for name in names:
        out.append(x509.DNSName(name))
        with contextlib.suppress(ValueError):
            out.append(x509.IPAddress(ipaddress.ip_address(name)))
    return out


def issue(ca: Pair, pod: str, unit: str, dns_names: Sequence[str], now: datetime.datetime) -> Pair:
    """A router pod's certificate, signed by the network's ``ca``."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert)
    ca_key = serialization.load_pem_private_key(ca.key, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = _key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(pod, unit))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CERT_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(_alt_names(dns_names)), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def ca_good(ca: Pair, now: datetime.datetime) -> bool:
    """Whether a CA read back from its Secret can go on signing: it parses, its key is its
    own, and it is not near its end."""
    try:
        cert = x509.load_pem_x509_certificate(ca.cert)
        key = serialization.load_pem_private_key(ca.key, password=None)
    except ValueError:
        return False
    if key.public_key() != cert.public_key():
        return False
    return cert.not_valid_after_utc - now > datetime.timedelta(days=CERT_DAYS + RENEW_DAYS)


def current(pair: Pair, ca: Pair, dns_names: Sequence[str], now: datetime.datetime) -> bool:
    """Whether a pod's certificate may stay: signed by ``ca``, naming exactly ``dns_names``,
    and more than RENEW_DAYS from its end."""
    try:
        cert = x509.load_pem_x509_certificate(pair.cert)
        ca_cert = x509.load_pem_x509_certificate(ca.cert)
        serialization.load_pem_private_key(pair.key, password=None)
    except ValueError:
        return False
    if cert.issuer != ca_cert.subject:
        return False
    public = ca_cert.public_key()
    assert isinstance(public, ec.EllipticCurvePublicKey)
    try:
        assert cert.signature_hash_algorithm is not None
        public.verify(
            cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm)
        )
    except InvalidSignature:
        return False
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    if set(names.get_values_for_type(x509.DNSName)) != set(dns_names):
        return False
    return cert.not_valid_after_utc - now > datetime.timedelta(days=RENEW_DAYS)


def issued_until(
    pair: Pair, dns_names: Sequence[str], now: datetime.datetime
) -> datetime.datetime | None:
    """When a certificate another issuer wrote (cert-manager's tls.crt, first of its chain)
    ends, if the pods may use it: it and its key parse, it names exactly ``dns_names`` and it
    has not ended. Its issuer decides when to renew it; its signer is the CA it gives."""
    try:
        cert = x509.load_pem_x509_certificate(pair.cert)
        serialization.load_pem_private_key(pair.key, password=None)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, TypeError, x509.ExtensionNotFound):
        return None
    if set(names.get_values_for_type(x509.DNSName)) != set(dns_names):
        return None
    ends = cert.not_valid_after_utc
    return ends if ends > now else None
