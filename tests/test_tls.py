"""TLS on listeners and connectors, configured as in Qpid Dispatch: ``sslProfiles`` hold the
certificates, listeners and connectors name theirs (router/transport/tls.py).

A throwaway CA, server and client certificates are made with the ``openssl`` command (Debian's
openssl, scripts/system-deps.sh). The server certificate names the loopback addresses the
routers use both as IP and as DNS subjectAltNames: Proton (0.40) checks a host name against
DNS entries and the CN only, so an IP literal must appear as a DNS entry to verify.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from clients import Management, World
from harness import NETWORK_TIMERS, RouterProcess, config_error
from proton import Message, SSLDomain

from router.cli import main
from router.config.models import config_schema, validate_config
from router.transport import tls
from router.transport.pn import lib

REPO = Path(__file__).resolve().parent.parent
KEY_PASSWORD = "s3cret pass"
# The addresses the routers of these tests listen on; 127.0.0.9 is left out on purpose.
SERVER_NAMES = ["localhost", "127.0.0.1", "127.0.0.2", "127.0.0.3"]


# ----- a throwaway PKI -----------------------------------------------------------------------


@dataclass
class Pki:
    dir: Path
    ca: Path
    server_cert: Path
    server_key: Path
    server_key_encrypted: Path
    client_cert: Path
    client_key: Path
    other_ca: Path  # a CA that signed nothing here
    stranger_cert: Path  # signed by the CA, but names none of SERVER_NAMES
    stranger_key: Path


def openssl(*args: str, cwd: Path) -> None:
    found = shutil.which("openssl")
    assert found, "openssl is missing: install Debian's openssl (scripts/system-deps.sh)"
    subprocess.run([found, *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def make_ca(directory: Path, name: str) -> tuple[Path, Path]:
    openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}",
        cwd=directory,
    )  # fmt: skip
    return directory / f"{name}.pem", directory / f"{name}.key"


def make_cert(directory: Path, name: str, ca: str, sans: list[str] | None = None) -> Path:
    """``name``.pem and ``name``.key, signed by ``ca``, with DNS and IP subjectAltNames."""
    openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/O=Routernet/CN={name}",
        cwd=directory,
    )  # fmt: skip
    entries = []
    for san in sans or []:
        entries.append(f"DNS:{san}")
        if san[0].isdigit():
            entries.append(f"IP:{san}")
    ext = directory / f"{name}.ext"
    ext.write_text(f"subjectAltName={','.join(entries)}\n" if entries else "\n")
    openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-set_serial", str(time.time_ns() % 2**63), "-out", f"{name}.pem", "-days", "2",
        "-extfile", ext.name,
        cwd=directory,
    )  # fmt: skip
    return directory / f"{name}.pem"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return build_pki(tmp_path_factory.mktemp("pki"))


def build_pki(d: Path) -> Pki:
    """Two CAs, a server, a client and a stranger certificate in directory `d`."""
    ca, _ = make_ca(d, "ca")
    other_ca, _ = make_ca(d, "other-ca")
    make_cert(d, "server", "ca", SERVER_NAMES)
    make_cert(d, "client", "ca")
    make_cert(d, "stranger", "ca", ["stranger.example"])
    openssl(
        "pkey", "-in", "server.key", "-aes256", "-passout", f"pass:{KEY_PASSWORD}",
        "-out", "server-encrypted.key",
        cwd=d,
    )  # fmt: skip
    return Pki(
        dir=d,
        ca=ca,
        server_cert=d / "server.pem",
        server_key=d / "server.key",
        server_key_encrypted=d / "server-encrypted.key",
        client_cert=d / "client.pem",
        client_key=d / "client.key",
        other_ca=other_ca,
        stranger_cert=d / "stranger.pem",
        stranger_key=d / "stranger.key",
    )


def server_profile(pki: Pki, name: str = "server", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "certFile": str(pki.server_cert),
        "privateKeyFile": str(pki.server_key),
        "caCertFile": str(pki.ca),
        **extra,
    }


def client_domain(
    ca: Path, cert: Path | None = None, key: Path | None = None, verify: bool = True
) -> SSLDomain:
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(str(ca))
    if cert is not None:
        domain.set_credentials(str(cert), str(key), None)
    domain.set_peer_authentication(
        SSLDomain.VERIFY_PEER_NAME if verify else SSLDomain.ANONYMOUS_PEER
    )
    return domain


def amqps(router: RouterProcess, index: int) -> str:
    return router.listener_url(index).replace("amqp://", "amqps://", 1)


def try_connect(world: World, url: str, **kwargs: Any) -> Any:
    """A client connection that may fail: returns the Client, opened or failed."""
    from clients import Client

    client = Client(world, url, **kwargs)
    world.clients.append(client)
    world.run_until(lambda: client.opened or client.failed, what=f"connection to {url}")
    return client


def round_trip(world: World, sender_client: Any, receiver_client: Any, address: str) -> None:
    receiver = receiver_client.receiver(address)
    sender = sender_client.sender(address)
    world.run_until(lambda: sender.credit > 0, what=f"credit on {address}")
    sender.send(Message(address=address, body=f"over {address}"))
    world.run_until(sender.all_settled, what=f"the outcome on {address}")
    assert receiver.bodies == [f"over {address}"]
    assert sender.sent[0].outcome == "accepted"
    receiver.close()
    sender.close()


# ----- one router, several listeners ---------------------------------------------------------

PLAIN, TLS_ONLY, TLS_OR_PLAIN, CLIENT_CERTS = range(4)


@pytest.fixture(scope="module")
def router(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterProcess]:
    workdir = tmp_path_factory.mktemp("tls-router")
    listeners = [
        {},  # PLAIN
        {"sslProfile": "server"},  # TLS_ONLY: requireSsl defaults to true
        {"sslProfile": "server", "requireSsl": False},  # TLS_OR_PLAIN
        {  # CLIENT_CERTS: certificates verified, the subject is the user (SASL EXTERNAL)
            "sslProfile": "server",
            "saslMechanisms": "EXTERNAL",
            "authenticatePeer": True,
        },
    ]
    with RouterProcess(
        workdir,
        "TLS",
        listeners=listeners,
        sections={"sslProfiles": [server_profile(pki)]},
    ) as r:
        yield r


def test_a_tls_client_sends_and_receives_and_management_shows_encryption(
    router: RouterProcess, pki: Pki, world: World
) -> None:
    secure = world.connect(amqps(router, TLS_ONLY), ssl_domain=client_domain(pki.ca))
    round_trip(world, secure, secure, "tls.round")
    plain = world.connect(router.url)
    round_trip(world, plain, secure, "tls.across")

    mgmt = Management(plain)
    rows = mgmt.query("connection")
    by_port = {int(row["host"].rsplit(":", 1)[1]): row for row in rows}
    assert len(by_port) == 2
    secure_row = next(r for r in rows if r["isEncrypted"])
    plain_row = next(r for r in rows if not r["isEncrypted"])
    assert secure_row["sslProto"] in ("TLSv1.2", "TLSv1.3")
    assert secure_row["sslCipher"]
    assert secure_row["ssl"] is True
    assert plain_row["sslProto"] is None and plain_row["sslCipher"] is None

    listeners = {
        row["port"]: row for row in mgmt.query("listener", ["port", "sslProfile", "requireSsl"])
    }
    assert listeners[str(router.listeners[TLS_ONLY]["port"])]["requireSsl"] is True
    assert listeners[str(router.listeners[TLS_OR_PLAIN]["port"])]["requireSsl"] is False
    assert listeners[str(router.port)]["sslProfile"] is None
    profiles = mgmt.query("sslProfile")
    assert [(p["name"], p["certFile"], p["caCertFile"]) for p in profiles] == [
        ("server", str(pki.server_cert), str(pki.ca))
    ]
    assert "password" not in profiles[0]


def test_a_plain_client_is_refused_where_tls_is_required(
    router: RouterProcess, pki: Pki, world: World
) -> None:
    refused = try_connect(world, router.listener_url(TLS_ONLY))
    assert refused.failed and not refused.opened
    assert router.alive()
    # The router goes on serving TLS and plain clients.
    secure = world.connect(amqps(router, TLS_ONLY), ssl_domain=client_domain(pki.ca))
    plain = world.connect(router.url)
    round_trip(world, plain, secure, "tls.after-refusal")


def test_require_ssl_false_accepts_tls_and_plain_clients(
    router: RouterProcess, pki: Pki, world: World
) -> None:
    secure = world.connect(amqps(router, TLS_OR_PLAIN), ssl_domain=client_domain(pki.ca))
    plain = world.connect(router.listener_url(TLS_OR_PLAIN))
    round_trip(world, plain, secure, "tls.mixed")
    rows = Management(plain).query("connection", ["host", "isEncrypted"])
    assert sorted(row["isEncrypted"] for row in rows) == [False, True]


def test_a_client_that_does_not_trust_the_routers_ca_fails(
    router: RouterProcess, pki: Pki, world: World
) -> None:
    client = try_connect(world, amqps(router, TLS_ONLY), ssl_domain=client_domain(pki.other_ca))
    assert client.failed and not client.opened
    assert any("certificate verify failed" in e for e in client.errors), client.errors


def test_client_certificates_authenticate_with_external(
    router: RouterProcess, pki: Pki, world: World
) -> None:
    domain = client_domain(pki.ca, pki.client_cert, pki.client_key)
    client = world.connect(amqps(router, CLIENT_CERTS), ssl_domain=domain, allowed_mechs="EXTERNAL")
    round_trip(world, client, client, "tls.external")
    rows = Management(client).query("connection", ["sasl", "user", "isAuthenticated"])
    assert rows == [{"sasl": "EXTERNAL", "user": "CN=client,O=Routernet", "isAuthenticated": True}]


def test_a_client_without_a_certificate_is_refused_where_they_are_verified(
    router: RouterProcess, pki: Pki, world: World
) -> None:
    client = try_connect(world, amqps(router, CLIENT_CERTS), ssl_domain=client_domain(pki.ca))
    assert client.failed and not client.opened
    assert router.alive()


# ----- inter-router connections over TLS -----------------------------------------------------


def interior(
    workdir: Path, name: str, host: str, pki: Pki, connectors: list[dict[str, Any]] | None = None
) -> RouterProcess:
    return RouterProcess(
        workdir / name,
        name,
        host=host,
        listeners=[{}, {"role": "inter-router", "sslProfile": "inter-router"}],
        router={"mode": "interior", **NETWORK_TIMERS},
        sections={
            "sslProfiles": [
                server_profile(pki, "inter-router"),
                {"name": "trust-only", "caCertFile": str(pki.ca)},
            ],
            "connectors": connectors or [],
        },
    )


def connector_status(world: World, router: RouterProcess) -> list[dict[str, Any]]:
    client = world.connect(router.url)
    try:
        return Management(client).query(
            "connector", ["name", "connectionStatus", "connectionMsg", "verifyHostname"]
        )
    finally:
        client.close()


def test_two_routers_route_a_message_over_an_inter_router_tls_connection(
    tmp_path: Path, pki: Pki, world: World
) -> None:
    b = interior(tmp_path, "B", "127.0.0.3", pki)
    b.start()
    try:
        connector = {
            "name": "to-B",
            "host": b.host,
            "port": b.listeners[1]["port"],
            "role": "inter-router",
            "sslProfile": "inter-router",  # presents the server certificate as its client one
        }
        with interior(tmp_path, "A", "127.0.0.2", pki, [connector]) as a:
            receiver_client = world.connect(b.url)
            sender_client = world.connect(a.url)
            round_trip(world, sender_client, receiver_client, "tls.between")
            [status] = connector_status(world, a)
            assert status["connectionStatus"] == "SUCCESS"
            assert "encrypted=yes" in status["connectionMsg"]
            assert status["verifyHostname"] is True
            rows = Management(receiver_client).query("connection", ["role", "isEncrypted"])
            assert {"role": "inter-router", "isEncrypted": True} in rows
    finally:
        b.stop()


def test_a_connector_verifies_the_host_name_unless_told_not_to(
    tmp_path: Path, pki: Pki, world: World
) -> None:
    """B presents a certificate from the trusted CA that names another host: a connector
    that verifies host names refuses it, one with verifyHostname false takes it."""
    b = interior(tmp_path, "B", "127.0.0.3", pki)
    b.config["sslProfiles"][0] |= {
        "certFile": str(pki.stranger_cert),
        "privateKeyFile": str(pki.stranger_key),
    }
    b.start()
    try:
        port = b.listeners[1]["port"]
        connectors = [
            {"name": name, "host": b.host, "port": port, "role": "inter-router", **extra}
            for name, extra in (
                ("strict", {"sslProfile": "trust-only"}),
                ("lenient", {"sslProfile": "trust-only", "verifyHostname": False}),
            )
        ]
        with interior(tmp_path, "A", "127.0.0.2", pki, connectors) as a:

            def settled() -> dict[str, dict[str, Any]] | None:
                rows = {row["name"]: row for row in connector_status(world, a)}
                statuses = {row["connectionStatus"] for row in rows.values()}
                return rows if "CONNECTING" not in statuses else None

            world.run_until(settled, timeout=10, what="both connectors to try")
            rows = settled()
            assert rows is not None
            assert rows["lenient"]["connectionStatus"] == "SUCCESS"
            assert rows["strict"]["connectionStatus"] == "FAILED"
            assert "certificate verify failed" in rows["strict"]["connectionMsg"]
    finally:
        b.stop()


# ----- live changes --------------------------------------------------------------------------


def test_tls_is_added_live_and_a_profile_that_cannot_load_is_refused(
    tmp_path: Path, pki: Pki, world: World
) -> None:
    with RouterProcess(tmp_path, "LIVE", listeners=[{}, {}]) as router:
        # A plain listener starts TLS: connections it accepts from now on need it.
        router.config["sslProfiles"] = [server_profile(pki)]
        router.config["listeners"][1]["sslProfile"] = "server"
        router.rewrite_config()
        router.wait_log(r"config.applied .*sslProfile \+server")
        secure = world.connect(amqps(router, 1), ssl_domain=client_domain(pki.ca))
        assert try_connect(world, router.listener_url(1)).failed

        # A certificate Proton cannot load is refused whole; the running profile stays.
        junk = tmp_path / "junk.pem"
        junk.write_text("not a certificate\n")
        router.config["sslProfiles"][0]["certFile"] = str(junk)
        router.rewrite_config()
        router.wait_log(r"config.invalid .*cannot load certFile")
        again = world.connect(amqps(router, 1), ssl_domain=client_domain(pki.ca))
        round_trip(world, secure, again, "tls.live")

        # A changed profile: new connections get it, and the old one's domain is freed while
        # connections made with it go on (Proton counts its users).
        router.config["sslProfiles"][0] = server_profile(pki, protocols="TLSv1.2")
        router.rewrite_config()
        router.wait_log(r"config.applied .*sslProfile ~server")
        newer = world.connect(amqps(router, 1), ssl_domain=client_domain(pki.ca))
        round_trip(world, secure, newer, "tls.changed")
        rows = Management(newer).query("connection", ["sslProto"])
        assert sorted(row["sslProto"] for row in rows) == ["TLSv1.2", "TLSv1.3", "TLSv1.3"]


def common_name(client: Any) -> str:
    """The CN of the certificate the router presented to ``client``."""
    return str(client.conn.transport.ssl().get_cert_common_name())


def test_a_renewed_certificate_is_served_to_new_connections_without_a_restart(
    tmp_path: Path, world: World
) -> None:
    """New content under the profile's paths (as a Kubernetes Secret volume swaps its files):
    the next connection gets the new certificate, connections made before go on; content
    that cannot be loaded keeps the last good certificate."""
    pki = build_pki(tmp_path)
    live = tmp_path / "live"
    live.mkdir()
    for name in ("server.pem", "server.key"):
        shutil.copy(tmp_path / name, live / name)
    profile = server_profile(
        pki, certFile=str(live / "server.pem"), privateKeyFile=str(live / "server.key")
    )
    with RouterProcess(
        tmp_path,
        "RENEW",
        listeners=[{}, {"sslProfile": "server"}],
        sections={"sslProfiles": [profile]},
    ) as router:
        before = world.connect(amqps(router, 1), ssl_domain=client_domain(pki.ca))
        assert common_name(before) == "server"
        make_cert(tmp_path, "renewed", "ca", SERVER_NAMES)
        for name in ("pem", "key"):
            os.replace(tmp_path / f"renewed.{name}", live / f"server.{name}.new")
            os.replace(live / f"server.{name}.new", live / f"server.{name}")
        after = world.connect(amqps(router, 1), ssl_domain=client_domain(pki.ca))
        assert common_name(after) == "renewed"
        round_trip(world, before, after, "tls.renewed")  # the old connection goes on
        router.wait_log(r"tls\.reloaded profile=server")

        (live / "server.pem").write_text("half written\n")
        again = world.connect(amqps(router, 1), ssl_domain=client_domain(pki.ca))
        assert common_name(again) == "renewed"
        router.wait_log(r"tls\.reload_failed profile=server")


# ----- configuration errors at start-up ------------------------------------------------------


def write_config(path: Path, profile: dict[str, Any], **listener: Any) -> Path:
    config = {
        "router": {"id": "T"},
        "sslProfiles": [profile],
        "listeners": [{"host": "127.0.0.1", "port": 5999, "sslProfile": profile["name"]}],
    }
    config["listeners"][0].update(listener)
    path.write_text(json.dumps(config))
    return path


def test_a_missing_certificate_file_stops_the_router_with_one_line(
    tmp_path: Path, pki: Pki
) -> None:
    missing = tmp_path / "nowhere" / "server.pem"
    path = write_config(tmp_path / "bad.json", server_profile(pki, certFile=str(missing)))
    result = subprocess.run(
        [sys.executable, "-m", "router", "--config", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert result.stderr == (
        f"routernet-router: sslProfiles[0].certFile: {str(missing)!r} does not exist\n"
    )


def check_error(capsys: pytest.CaptureFixture[str], path: Path) -> str:
    assert main(["--check", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    return err


def test_a_file_that_is_not_a_certificate_is_a_config_error(
    tmp_path: Path, pki: Pki, capsys: pytest.CaptureFixture[str]
) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    path = write_config(tmp_path / "c.json", server_profile(pki, certFile=str(junk)))
    assert check_error(capsys, path) == (
        f"routernet-router: sslProfile 'server': cannot load certFile {str(junk)!r} with"
        f" privateKeyFile {str(pki.server_key)!r} (not PEM, a key that does not match the"
        " certificate, or a wrong or missing password)\n"
    )
    path = write_config(tmp_path / "c.json", server_profile(pki, caCertFile=str(junk)))
    assert check_error(capsys, path) == (
        f"routernet-router: sslProfile 'server': cannot load caCertFile {str(junk)!r}"
        " (not PEM certificates)\n"
    )


def test_a_key_that_does_not_match_the_certificate_is_a_config_error(
    tmp_path: Path, pki: Pki, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(
        tmp_path / "c.json", server_profile(pki, privateKeyFile=str(pki.client_key))
    )
    assert "cannot load certFile" in check_error(capsys, path)


@pytest.mark.parametrize(
    "password",
    [KEY_PASSWORD, f"pass:{KEY_PASSWORD}", "env:ROUTERNET_TEST_KEY_PASSWORD", "file:{dir}/pw"],
)
def test_an_encrypted_key_loads_with_its_password_in_any_form(
    tmp_path: Path,
    pki: Pki,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    password: str,
) -> None:
    monkeypatch.setenv("ROUTERNET_TEST_KEY_PASSWORD", KEY_PASSWORD)
    (tmp_path / "pw").write_text(f"{KEY_PASSWORD}\n")
    profile = server_profile(
        pki,
        privateKeyFile=str(pki.server_key_encrypted),
        password=password.format(dir=tmp_path),
    )
    path = write_config(tmp_path / "c.json", profile)
    assert main(["--check", "--config", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["sslProfiles"][0]["name"] == "server"


@pytest.mark.parametrize(
    ("password", "message"),
    [
        (None, "cannot load certFile"),
        ("wrong", "cannot load certFile"),
        ("env:ROUTERNET_TEST_UNSET", "password: environment variable 'ROUTERNET_TEST_UNSET'"),
        ("file:/nonexistent/pw", "password: cannot read '/nonexistent/pw'"),
    ],
)
def test_a_wrong_or_missing_password_is_a_config_error(
    tmp_path: Path,
    pki: Pki,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    password: str | None,
    message: str,
) -> None:
    monkeypatch.delenv("ROUTERNET_TEST_UNSET", raising=False)
    profile = server_profile(pki, privateKeyFile=str(pki.server_key_encrypted))
    if password is not None:
        profile["password"] = password
    path = write_config(tmp_path / "c.json", profile)
    assert message in check_error(capsys, path)


def test_protocols_and_ciphers_reach_openssl(
    tmp_path: Path, pki: Pki, capsys: pytest.CaptureFixture[str]
) -> None:
    good = server_profile(pki, protocols="TLSv1.2 TLSv1.3", ciphers="ECDHE-ECDSA-AES128-GCM-SHA256")
    assert main(["--check", "--config", str(write_config(tmp_path / "c.json", good))]) == 0
    capsys.readouterr()
    bad = server_profile(pki, ciphers="NO-SUCH-CIPHER")
    err = check_error(capsys, write_config(tmp_path / "c.json", bad))
    assert "OpenSSL accepts none of ciphers 'NO-SUCH-CIPHER'" in err


# ----- the domain cache ----------------------------------------------------------------------


def test_domains_are_built_once_per_use_and_freed_when_unused(pki: Pki) -> None:
    config = validate_config(
        {
            "router": {"id": "R", "mode": "interior"},
            "sslProfiles": [server_profile(pki)],
            "listeners": [
                {"port": 1, "sslProfile": "server"},
                {"port": 2, "sslProfile": "server"},  # the same use: the same domain
                {"port": 3, "sslProfile": "server", "requireSsl": False},
            ],
            "connectors": [{"sslProfile": "server", "role": "inter-router"}],
        }
    )
    domains = tls.Domains()
    try:
        tls.check(config, domains)
        assert len(domains) == 3
        first = domains.get(config.listeners[0].ssl, tls.listener_use(config.listeners[0]))
        again = domains.get(config.listeners[1].ssl, tls.listener_use(config.listeners[1]))
        assert first == again
        fewer = validate_config(
            {
                "router": {"id": "R"},
                "sslProfiles": [server_profile(pki)],
                "listeners": [{"port": 1, "sslProfile": "server"}],
            }
        )
        domains.retain(fewer)
        assert len(domains) == 1
        assert domains.get(fewer.listeners[0].ssl, tls.listener_use(fewer.listeners[0])) == first
        # A changed profile is another domain; the old one goes at the next retain.
        changed = validate_config(
            {
                "router": {"id": "R"},
                "sslProfiles": [server_profile(pki, protocols="TLSv1.3")],
                "listeners": [{"port": 1, "sslProfile": "server"}],
            }
        )
        assert changed.listeners[0] != fewer.listeners[0]
        tls.check(changed, domains)
        domains.retain(changed)
        assert len(domains) == 1
    finally:
        domains.clear()
    assert len(domains) == 0


def test_a_transport_keeps_its_domain_after_the_cache_frees_it(pki: Pki) -> None:
    """Proton counts the domain's users: freeing it in the cache leaves a live transport's,
    which goes with the transport (a double free would abort the process)."""
    config = validate_config(
        {
            "router": {"id": "R"},
            "sslProfiles": [server_profile(pki)],
            "listeners": [{"port": 1, "sslProfile": "server"}],
        }
    )
    transport = lib.pn_transport()
    try:
        lib.pn_transport_set_server(transport)
        ssl = tls.start(transport, config.listeners[0], server=True)
        tls.DOMAINS.retain(validate_config({"router": {"id": "R"}}))
        assert tls.describe(ssl) == (None, None)  # no handshake yet; the domain still there
    finally:
        lib.pn_decref(transport)


# ----- validation ----------------------------------------------------------------------------


def config(pki: Pki, **sections: Any) -> dict[str, Any]:
    return {"router": {"id": "R1"}, "sslProfiles": [server_profile(pki)], **sections}


def test_defaults(pki: Pki) -> None:
    cfg = validate_config(
        config(
            pki,
            listeners=[{"port": 1}, {"port": 2, "sslProfile": "server"}],
            connectors=[{"sslProfile": "server"}],
        )
    )
    plain, secure = cfg.listeners
    assert (plain.sslProfile, plain.requireSsl, plain.ssl) == (None, False, None)
    assert (secure.requireSsl, secure.ssl) == (True, cfg.sslProfiles[0])
    assert cfg.connectors[0].verifyHostname is True
    assert cfg.connectors[0].ssl == cfg.sslProfiles[0]
    # What --check prints is a config that reads back the same.
    assert validate_config(json.loads(cfg.model_dump_json())) == cfg
    # A connector's profile may be empty: TLS, the system's CAs, no client certificate.
    public = validate_config(
        {
            "router": {"id": "R1"},
            "sslProfiles": [{"name": "public"}],
            "connectors": [{"sslProfile": "public"}],
        }
    )
    tls.check(public, domains := tls.Domains())
    assert len(domains) == 1
    domains.clear()


def test_schema_lists_ssl_profiles() -> None:
    schema = config_schema()
    assert "sslProfiles" in schema["properties"]
    assert {"name", "certFile", "privateKeyFile", "caCertFile", "password"} <= set(
        schema["$defs"]["SslProfile"]["properties"]
    )
    assert {"sslProfile", "requireSsl"} <= set(schema["$defs"]["Listener"]["properties"])
    assert {"sslProfile", "verifyHostname"} <= set(schema["$defs"]["Connector"]["properties"])


def test_validation_errors(pki: Pki, tmp_path: Path) -> None:
    cert, key, ca = str(pki.server_cert), str(pki.server_key), str(pki.ca)
    missing = str(tmp_path / "missing.pem")
    cases = [
        (
            config(pki, listeners=[{"sslProfile": "nope"}]),
            "listeners[0].sslProfile: no sslProfile named 'nope' ('server')",
        ),
        (
            {"router": {"id": "R1"}, "connectors": [{"sslProfile": "nope"}]},
            "connectors[0].sslProfile: no sslProfile named 'nope' (none are defined)",
        ),
        (
            config(pki, listeners=[{"sslProfile": ""}]),
            "listeners[0].sslProfile: '' is not a valid sslProfile name",
        ),
        (
            {"router": {"id": "R1"}, "sslProfiles": [{"name": "p", "caCertFile": missing}]},
            f"sslProfiles[0].caCertFile: {missing!r} does not exist",
        ),
        (
            {"router": {"id": "R1"}, "sslProfiles": [{"name": "p", "caCertFile": str(tmp_path)}]},
            f"sslProfiles[0].caCertFile: {str(tmp_path)!r} is not a file",
        ),
        (
            {"router": {"id": "R1"}, "sslProfiles": [{"name": "p", "certFile": cert}]},
            "sslProfiles[0]: certFile and privateKeyFile go together",
        ),
        (
            {
                "router": {"id": "R1"},
                "sslProfiles": [{"name": "p", "caCertFile": ca, "password": "x"}],
            },
            "sslProfiles[0]: password is the pass phrase of privateKeyFile, which is not set",
        ),
        (
            {"router": {"id": "R1"}, "sslProfiles": [{"name": " ", "caCertFile": ca}]},
            "sslProfiles[0].name: ' ' is not a valid name",
        ),
        (
            {"router": {"id": "R1"}, "sslProfiles": [{"caCertFile": ca}]},
            "sslProfiles[0].name: required",
        ),
        (
            {
                "router": {"id": "R1"},
                "sslProfiles": [{"name": "p", "caCertFile": ca, "protocols": "TLSv1.3 SSLv3"}],
            },
            "sslProfiles[0].protocols: 'TLSv1.3 SSLv3' is not a valid protocol list",
        ),
        (
            {
                "router": {"id": "R1"},
                "sslProfiles": [
                    {"name": "p", "caCertFile": ca},
                    {"name": "p", "certFile": cert, "privateKeyFile": key},
                ],
            },
            "sslProfiles[1]: duplicate name 'p' (also sslProfiles[0])",
        ),
        (
            {"router": {"id": "R1"}, "sslProfiles": [{"name": "p", "caCertFile": ca, "x": 1}]},
            "sslProfiles[0].x: unknown key",
        ),
        (
            config(pki, listeners=[{"requireSsl": True}]),
            "listeners[0]: requireSsl needs an sslProfile",
        ),
        (
            {
                "router": {"id": "R1"},
                "sslProfiles": [{"name": "trust", "caCertFile": ca}],
                "listeners": [{"sslProfile": "trust"}],
            },
            "listeners[0]: sslProfile 'trust' has no certFile and privateKeyFile",
        ),
        (
            config(pki, listeners=[{"saslMechanisms": "EXTERNAL"}]),
            "listeners[0]: EXTERNAL needs an sslProfile (with caCertFile) to verify clients",
        ),
        (
            {
                "router": {"id": "R1"},
                "sslProfiles": [{"name": "p", "certFile": cert, "privateKeyFile": key}],
                "listeners": [{"sslProfile": "p", "saslMechanisms": "EXTERNAL"}],
            },
            "listeners[0]: EXTERNAL needs sslProfile 'p' to have caCertFile",
        ),
        (
            config(pki, connectors=[{"saslMechanisms": "EXTERNAL"}]),
            "connectors[0]: EXTERNAL needs an sslProfile with the client certificate",
        ),
        (
            {
                "router": {"id": "R1"},
                "sslProfiles": [{"name": "trust", "caCertFile": ca}],
                "connectors": [{"sslProfile": "trust", "saslMechanisms": "EXTERNAL"}],
            },
            "connectors[0]: EXTERNAL needs sslProfile 'trust' to have certFile",
        ),
    ]
    for data, message in cases:
        assert config_error(data).startswith(message), (data, config_error(data))
