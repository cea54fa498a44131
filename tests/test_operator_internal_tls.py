"""Mutual TLS between a network's routers on Kubernetes (planning/internal_tls.py,
kubernetes/internal_tls.py, kubernetes/pki.py): what the pods' configurations say, the
certificates the operator issues (each naming its pod's DNS names, signed by the network's CA,
good for both ends), renewed before they end and when the pods or the CA change, and nothing
read or written when nothing is due."""

from __future__ import annotations

import base64
import datetime
from pathlib import Path
from typing import Any

import pytest
from clients import Management, World
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from harness import NETWORK_TIMERS, RouterProcess
from proton import SSLDomain
from router_operator.kubernetes import pki
from router_operator.kubernetes.internal_tls import apply_internal_tls
from router_operator.planning import internal_tls
from router_operator.planning.planner import RouterDecl, plan_namespace
from test_tls import client_domain, try_connect

NS = "shop"
NOW = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)


def decls(edge_tls: bool = True, core_tls: bool = True) -> list[RouterDecl]:
    return [
        RouterDecl("core", uid="uid-core", replicas=2, inter_router_tls=core_tls),
        RouterDecl("leaf", uid="uid-leaf", replicas=1, role="edge", inter_router_tls=edge_tls),
    ]


def configs(plan: Any) -> dict[str, dict[str, Any]]:
    return {
        pod.name: pod.config.model_dump(mode="json", exclude_defaults=True)  # as pods get it
        for router in plan.networks["default"].routers
        for pod in router.pods
    }


def by_role(entries: list[dict[str, Any]], role: str) -> list[dict[str, Any]]:
    return [e for e in entries if e.get("role", "normal") == role]


def test_router_listeners_take_mutual_tls_and_connectors_present_their_pods_certificate() -> None:
    got = configs(plan_namespace(NS, decls(), internal_tls=True))
    for pod, config in got.items():
        assert internal_tls.ssl_profile(pod) in [p for p in config["sslProfiles"]]
        for connector in config.get("connectors", []):
            assert connector["sslProfile"] == internal_tls.PROFILE, (pod, connector)
            assert connector["saslMechanisms"] == ["EXTERNAL"]
            assert connector.get("verifyHostname", True)  # the peer's certificate names its host
    for pod in ("core-0", "core-1"):
        for listener in by_role(got[pod]["listeners"], "inter-router") + by_role(
            got[pod]["listeners"], "edge"
        ):
            assert listener["sslProfile"] == internal_tls.PROFILE
            assert listener["saslMechanisms"] == ["EXTERNAL"] and listener["authenticatePeer"]
            assert listener["requireSsl"]
        clients = by_role(got[pod]["listeners"], "normal")
        assert clients and all("sslProfile" not in c for c in clients)  # clients: as declared
    profile = internal_tls.ssl_profile("core-1")
    assert profile["certFile"] == f"{internal_tls.DIR}/core-1.crt"
    assert profile["caCertFile"] == f"{internal_tls.DIR}/ca.crt"


def test_off_outside_kubernetes_and_for_a_router_that_disables_it() -> None:
    local = configs(plan_namespace(NS, decls()))
    assert all("sslProfiles" not in c for c in local.values())
    assert not any(r.internal_tls for r in plan_namespace(NS, decls()).networks["default"].routers)
    # core disables it: its listeners are plain, and so are connections to it; its pods still
    # have certificates (a connection follows the Router it dials).
    mixed = configs(plan_namespace(NS, decls(core_tls=False), internal_tls=True))
    for listener in by_role(mixed["core-0"]["listeners"], "inter-router"):
        assert "sslProfile" not in listener
    assert mixed["leaf-0"]["connectors"] and all(
        "sslProfile" not in c for c in mixed["leaf-0"]["connectors"]
    )
    assert internal_tls.ssl_profile("core-0") in mixed["core-0"]["sslProfiles"]
    none = plan_namespace(NS, decls(core_tls=False, edge_tls=False), internal_tls=True)
    assert not any(r.internal_tls for r in none.networks["default"].routers)


def test_the_pods_mount_their_routers_secret_whole() -> None:
    from router_operator.rendering.router import render_router

    plan = plan_namespace(NS, decls(), internal_tls=True)
    [sts] = [o for o in render_router(plan.router("core")) if o["kind"] == "StatefulSet"]
    spec = sts["spec"]["template"]["spec"]
    assert {
        "name": "internal-tls",
        "secret": {"secretName": "core-internal-tls", "optional": False},
    } in spec["volumes"]
    mounts = spec["containers"][0]["volumeMounts"]
    assert {"name": "internal-tls", "mountPath": internal_tls.DIR, "readOnly": True} in mounts
    # Scaling out changes nothing in the template: no rolling restart.
    more = plan_namespace(
        NS, [RouterDecl("core", uid="uid-core", replicas=5), decls()[1]], internal_tls=True
    )
    [bigger] = [o for o in render_router(more.router("core")) if o["kind"] == "StatefulSet"]
    assert bigger["spec"]["template"] == sts["spec"]["template"]


# ----- the Secrets -------------------------------------------------------------------------------


class SecretsApi:
    """Keeps the Secrets (and cert-manager Certificates) applied, answers get from them,
    counts the calls."""

    def __init__(self) -> None:
        self.secrets: dict[str, dict[str, Any]] = {}
        self.certificates: dict[str, dict[str, Any]] = {}
        self.gets = 0
        self.applies: list[str] = []

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        assert (kind, namespace) == ("Secret", NS)
        self.gets += 1
        return self.secrets.get(name)

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.applies.append(obj["metadata"]["name"])
        if obj["kind"] == "Certificate":
            assert obj["apiVersion"] == "cert-manager.io/v1"
            self.certificates[obj["metadata"]["name"]] = obj
        else:
            self.secrets[obj["metadata"]["name"]] = obj
        return obj


def data(api: SecretsApi, name: str) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in api.secrets[name]["data"].items()}


def run(api: SecretsApi, plan: Any, memory: dict[str, str], now: datetime.datetime = NOW) -> None:
    outcome = apply_internal_tls(plan.networks["default"], NS, api, memory, now)  # type: ignore[arg-type]
    assert outcome.failures == []


def test_the_operator_issues_a_ca_and_a_certificate_per_pod() -> None:
    api, memory = SecretsApi(), {}
    plan = plan_namespace(NS, decls(), internal_tls=True)
    run(api, plan, memory)
    ca_data = data(api, "routernet-ca-default")
    ca = x509.load_pem_x509_certificate(ca_data["ca.crt"])
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    owners = api.secrets["routernet-ca-default"]["metadata"]["ownerReferences"]
    assert [o["name"] for o in owners] == ["core", "leaf"]
    core = data(api, "core-internal-tls")
    assert sorted(core) == ["ca.crt", "core-0.crt", "core-0.key", "core-1.crt", "core-1.key"]
    assert core["ca.crt"] == ca_data["ca.crt"]
    cert = x509.load_pem_x509_certificate(core["core-1.crt"])
    public = ca.public_key()
    assert isinstance(public, ec.EllipticCurvePublicKey)
    assert cert.signature_hash_algorithm is not None
    public.verify(
        cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm)
    )
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"core-1.core-peers.{NS}.svc.cluster.local" in names.get_values_for_type(x509.DNSName)
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert {u.dotted_string for u in usage} == {"1.3.6.1.5.5.7.3.1", "1.3.6.1.5.5.7.3.2"}
    assert cert.not_valid_after_utc - NOW > datetime.timedelta(days=pki.CERT_DAYS - 1)
    assert sorted(data(api, "leaf-internal-tls")) == ["ca.crt", "leaf-0.crt", "leaf-0.key"]


def test_nothing_is_read_or_written_until_a_renewal_is_due_or_the_pods_change() -> None:
    api, memory = SecretsApi(), {}
    plan = plan_namespace(NS, decls(), internal_tls=True)
    run(api, plan, memory)
    gets, applies = api.gets, len(api.applies)
    run(api, plan, memory, NOW + datetime.timedelta(days=10))
    assert (api.gets, len(api.applies)) == (gets, applies)
    # A new process (no memory) reads them back and finds nothing to do.
    run(api, plan, {}, NOW + datetime.timedelta(days=10))
    assert api.gets > gets and len(api.applies) == applies
    # Scaled out: the new pod's certificate, the others kept.
    before = data(api, "core-internal-tls")
    more = plan_namespace(
        NS, [RouterDecl("core", uid="uid-core", replicas=3), decls()[1]], internal_tls=True
    )
    run(api, more, memory, NOW + datetime.timedelta(days=10))
    after = data(api, "core-internal-tls")
    assert after["core-0.crt"] == before["core-0.crt"] and "core-2.crt" in after


def test_certificates_are_renewed_before_they_end_and_when_the_ca_changes() -> None:
    api, memory = SecretsApi(), {}
    plan = plan_namespace(NS, decls(), internal_tls=True)
    run(api, plan, memory)
    first = data(api, "core-internal-tls")
    late = NOW + datetime.timedelta(days=pki.CERT_DAYS - pki.RENEW_DAYS + 1)
    run(api, plan, memory, late)  # due: memory says so, no waiting for a restart
    renewed = data(api, "core-internal-tls")
    assert renewed["core-0.crt"] != first["core-0.crt"]
    assert renewed["ca.crt"] == first["ca.crt"]
    # A CA edited by hand (its key gone) is replaced, and every certificate with it.
    api.secrets["routernet-ca-default"]["data"]["ca.key"] = base64.b64encode(b"junk").decode()
    run(api, plan, {}, late)
    replaced = data(api, "core-internal-tls")
    assert replaced["ca.crt"] != first["ca.crt"] and replaced["core-0.crt"] != renewed["core-0.crt"]
    assert pki.current(
        pki.Pair(replaced["core-0.crt"], replaced["core-0.key"]),
        pki.Pair(replaced["ca.crt"], data(api, "routernet-ca-default")["ca.key"]),
        internal_tls.dns_names("core-0", "core-peers", NS, "cluster.local"),
        late,
    )


# ----- certificates from a cert-manager issuer ----------------------------------------------------

ISSUER = internal_tls.Issuer("corp-ca", "ClusterIssuer")


def issued_decls(core: internal_tls.Issuer | None = ISSUER) -> list[RouterDecl]:
    return [
        RouterDecl("core", uid="uid-core", replicas=2, tls_issuer=core),
        RouterDecl("leaf", uid="uid-leaf", replicas=1, role="edge", tls_issuer=ISSUER),
    ]


def cert_manager_issues(
    api: SecretsApi, ca: pki.Pair, now: datetime.datetime, give_ca: bool = True
) -> None:
    """What cert-manager does with each Certificate: its Secret, signed by ``ca``."""
    for cert in api.certificates.values():
        spec = cert["spec"]
        pair = pki.issue(ca, spec["commonName"], "corp", spec["dnsNames"], now)
        written = {
            "tls.crt": pair.cert,
            "tls.key": pair.key,
            **({"ca.crt": ca.cert} if give_ca else {}),
        }
        api.secrets[spec["secretName"]] = {
            "data": {k: base64.b64encode(v).decode() for k, v in written.items()}
        }


def test_with_an_issuer_each_pod_asks_cert_manager_and_gets_what_it_issued() -> None:
    api, memory = SecretsApi(), {}
    plan = plan_namespace(NS, issued_decls(), internal_tls=True)
    network = plan.networks["default"]
    waiting = apply_internal_tls(network, NS, api, memory, NOW)  # type: ignore[arg-type]
    pods = ["core-0", "core-1", "leaf-0"]
    assert sorted(api.certificates) == [f"{pod}-issued-tls" for pod in pods]
    asked = api.certificates["core-1-issued-tls"]
    assert asked["metadata"]["ownerReferences"][0]["name"] == "core"
    spec = asked["spec"]
    assert spec["issuerRef"] == {
        "name": "corp-ca",
        "kind": "ClusterIssuer",
        "group": "cert-manager.io",
    }
    assert spec["secretName"] == "core-1-issued-tls" and spec["commonName"] == "core-1"
    assert spec["dnsNames"] == internal_tls.dns_names("core-1", "core-peers", NS, "cluster.local")
    assert {"server auth", "client auth"} <= set(spec["usages"])
    assert (spec["duration"], spec["renewBefore"]) == ("2160h", "720h")
    # Nothing issued yet: the operator makes no CA of its own and waits, looking again soon.
    assert waiting.transient and waiting.failures == []
    assert sorted(api.secrets) == []
    corp = pki.new_ca("corp", "pki", NOW)
    cert_manager_issues(api, corp, NOW)
    run(api, plan, memory)
    core = data(api, "core-internal-tls")
    assert sorted(core) == ["ca.crt", "core-0.crt", "core-0.key", "core-1.crt", "core-1.key"]
    assert core["ca.crt"] == corp.cert
    assert core["core-1.crt"] == data(api, "core-1-issued-tls")["tls.crt"]
    assert sorted(data(api, "leaf-internal-tls")) == ["ca.crt", "leaf-0.crt", "leaf-0.key"]
    # Nothing read again until cert-manager is due to renew (30 days before the end).
    gets = api.gets
    run(api, plan, memory, NOW + datetime.timedelta(days=10))
    assert api.gets == gets
    due = NOW + datetime.timedelta(days=pki.CERT_DAYS - pki.RENEW_DAYS + 1)
    before = apply_internal_tls(network, NS, api, memory, due)  # type: ignore[arg-type]
    assert before.transient and data(api, "core-internal-tls") == core  # kept meanwhile
    cert_manager_issues(api, corp, due)
    run(api, plan, memory, due)
    renewed = data(api, "core-internal-tls")
    assert renewed["core-0.crt"] != core["core-0.crt"]
    assert renewed["core-0.crt"] == data(api, "core-0-issued-tls")["tls.crt"]


def test_routers_of_one_network_naming_different_issuers_are_refused() -> None:
    api = SecretsApi()
    plan = plan_namespace(NS, issued_decls(core=None), internal_tls=True)
    outcome = apply_internal_tls(plan.networks["default"], NS, api, {}, NOW)  # type: ignore[arg-type]
    assert api.applies == []
    assert len(outcome.failures) == 1
    assert (
        "different interRouterIssuers (core: none, leaf: ClusterIssuer corp-ca"
        in (outcome.failures[0])
    )


def test_an_issuer_that_gives_no_ca_is_named() -> None:
    api, memory = SecretsApi(), {}
    plan = plan_namespace(NS, issued_decls(), internal_tls=True)
    network = plan.networks["default"]
    apply_internal_tls(network, NS, api, memory, NOW)  # type: ignore[arg-type]
    cert_manager_issues(api, pki.new_ca("corp", "pki", NOW), NOW, give_ca=False)
    outcome = apply_internal_tls(network, NS, api, memory, NOW)  # type: ignore[arg-type]
    assert outcome.transient and "core-internal-tls" not in api.secrets
    assert "ClusterIssuer corp-ca (cert-manager.io) gives no ca.crt" in outcome.failures[0]


# ----- the settings, on real routers -------------------------------------------------------------


def write_pair(directory: Path, pod: str, pair: pki.Pair) -> None:
    (directory / internal_tls.cert_file(pod)).write_bytes(pair.cert)
    (directory / internal_tls.key_file(pod)).write_bytes(pair.key)


def profile_in(directory: Path, pod: str) -> dict[str, Any]:
    profile = internal_tls.ssl_profile(pod)
    for key in ("certFile", "privateKeyFile", "caCertFile"):
        profile[key] = profile[key].replace(internal_tls.DIR, str(directory))
    return profile


@pytest.mark.network
def test_routers_with_these_settings_mesh_and_strangers_are_refused(
    tmp_path: Path, world: World
) -> None:
    """Two interiors configured as the planner configures pods (the listener and connector
    settings and profile above, files from the operator's CA): they connect with TLS and SASL
    EXTERNAL, each knowing the other by its certificate; a client without a certificate of
    that CA, or without TLS, is refused on the inter-router port."""
    ca = pki.new_ca(NS, "default", NOW)
    (tmp_path / internal_tls.CA_FILE).write_bytes(ca.cert)
    for pod, host in (("core-0", "127.0.0.2"), ("core-1", "127.0.0.3")):
        write_pair(tmp_path, pod, pki.issue(ca, pod, f"{NS}/default", [host], NOW))

    def interior(pod: str, host: str, connectors: list[dict[str, Any]]) -> RouterProcess:
        inter_router = {"role": "inter-router", **internal_tls.listener_settings()}
        return RouterProcess(
            tmp_path / pod,
            pod,
            host=host,
            listeners=[{}, inter_router],
            router={"mode": "interior", **NETWORK_TIMERS},
            sections={"sslProfiles": [profile_in(tmp_path, pod)], "connectors": connectors},
        )

    first = interior("core-0", "127.0.0.2", [])
    with first:
        port = first.listeners[1]["port"]
        dial = {"host": "127.0.0.2", "port": port, "role": "inter-router"}
        with interior("core-1", "127.0.0.3", [{**dial, **internal_tls.connector_settings()}]):
            client = world.connect(first.url)
            management = Management(client)
            world.run_until(
                lambda: any(
                    r["role"] == "inter-router" and r["isAuthenticated"]
                    for r in management.query("connection")
                ),
                what="the inter-router connection",
                timeout=20,
            )
            [row] = [r for r in management.query("connection") if r["role"] == "inter-router"]
            assert (row["isEncrypted"], row["sasl"], row["isAuthenticated"]) == (
                True,
                "EXTERNAL",
                True,
            )
            assert "CN=core-1" in row["user"]
            url = f"127.0.0.2:{port}"
            assert try_connect(world, f"amqp://{url}").failed  # in the clear
            stranger = SSLDomain(SSLDomain.MODE_CLIENT)
            stranger.set_peer_authentication(SSLDomain.ANONYMOUS_PEER)
            assert try_connect(world, f"amqps://{url}", ssl_domain=stranger).failed
            other = pki.new_ca(NS, "other", NOW)  # a certificate, but of another network's CA
            write_pair(tmp_path, "intruder", pki.issue(other, "intruder", "x", ["127.0.0.9"], NOW))
            forged = client_domain(
                tmp_path / internal_tls.CA_FILE,
                tmp_path / "intruder.crt",
                tmp_path / "intruder.key",
                verify=False,
            )
            assert try_connect(
                world, f"amqps://{url}", ssl_domain=forged, allowed_mechs="EXTERNAL"
            ).failed
            assert first.alive()
