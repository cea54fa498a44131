"""Mutual TLS between the routers, on by default: the examples/ network's interiors and edges
connect to each other with TLS and SASL EXTERNAL, each presenting the certificate the operator
issued its pod; a pod that is not one of the network's routers, dialling an interior's
inter-router port in the clear or with TLS but no certificate, is refused."""

from __future__ import annotations

import json

import kube
from conftest import say

CORE = "amqp://core:5672"
INTER_ROUTER = "55672"


def test_the_routers_know_each_other_by_certificate_and_strangers_are_refused(
    network: str, images: dict[str, str], clients: str
) -> None:
    image = images["router"]
    pod = kube.peer(
        network, "tls-query", image, clients, "query", CORE, "org.apache.qpid.dispatch.connection",
        "role", "dir", "isEncrypted", "sasl", "user", "container",
    )  # fmt: skip
    rows = json.loads(kube.finish(network, pod, kube.CLIENT_ATTACH_SECONDS).splitlines()[-1])
    routers = [r for r in rows if r["role"] in ("inter-router", "edge")]
    assert routers, rows
    for row in routers:
        assert row["isEncrypted"] is True and row["sasl"] == "EXTERNAL", row
        if row["dir"] == "in":  # the peer that dialled is known by its own pod's certificate
            assert f"CN={row['container']}" in row["user"], row
    assert any(row["dir"] == "in" for row in routers), routers
    host = f"core-0.core-peers.{network}.svc.cluster.local"
    pod = kube.peer(network, "intruder", image, clients, "intrude", host, INTER_ROUTER)
    said = json.loads(kube.finish(network, pod, kube.CLIENT_ATTACH_SECONDS).splitlines()[-1])
    assert said["plain"].startswith("refused"), said
    assert said["tls-without-certificate"].startswith("refused"), said
    say(
        f"{len(routers)} router connections seen from the core pod it reached: TLS, SASL EXTERNAL,"
        " each peer named by its own pod's certificate; a stranger pod on core-0's"
        f" inter-router port: {said}"
    )
