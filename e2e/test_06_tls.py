"""examples/tls/ as its comments say: a Secret with the certificate, the Router applied; a
client in the cluster sends over AMQPS, verifying the certificate against its CA and the
Service's name."""

from __future__ import annotations

from pathlib import Path

import kube
from conftest import ROOT, say
from test_tls import make_ca, make_cert


def test_clients_send_over_tls_to_the_tls_example(
    network: str, images: dict[str, str], tmp_path: Path
) -> None:
    make_ca(tmp_path, "ca")
    names = ["secure", f"secure.{network}.svc", f"secure.{network}.svc.cluster.local"]
    make_cert(tmp_path, "secure", "ca", names)
    kube.kubectl(
        "-n", network, "create", "secret", "tls", "secure-tls",
        f"--cert={tmp_path / 'secure.pem'}", f"--key={tmp_path / 'secure.key'}",
    )  # fmt: skip
    kube.kubectl(
        "-n", network, "create", "configmap", "e2e-ca", f"--from-file={tmp_path / 'ca.pem'}"
    )
    kube.apply(network, (ROOT / "examples/tls/router.yaml").read_text())
    kube.wait_for("Router secure Ready", lambda: kube.ready_routers(network, ["secure"]), 240)
    endpoints = kube.get(network, "router", "secure")["status"]["endpoints"]
    assert f"amqps://secure.{network}.svc.cluster.local:5671" in endpoints, endpoints

    image = images["router"]
    rx = kube.routernet(
        network, "rx-tls", image, "receive", "orders.tls", "--url", "amqp://secure:5672",
        "--count", "20",
    )  # fmt: skip
    volume = ("ca", {"configMap": {"name": "e2e-ca"}}, "/e2e-ca")
    command = [
        "routernet", "send", f"amqps://secure.{network}.svc:5671/orders.tls",
        "--ca", "/e2e-ca/ca.pem", "--count", "20",
    ]  # fmt: skip
    tx = kube.start(network, kube.client_pod(network, "tx-tls", image, command, [volume]))
    sent = kube.summary(kube.finish(network, tx, 120))
    received = kube.summary(kube.finish(network, rx, 120))
    assert (sent["accepted"], sent["unresolved"]) == (20, 0), sent
    assert (received["distinct"], received["duplicates"]) == (20, 0), received
    say(
        f"examples/tls: 20 messages over AMQPS to secure.{network}.svc:5671 (certificate"
        " verified), received once each"
    )
    kube.kubectl("-n", network, "delete", "rtr", "secure", "--wait=true", timeout=120)
