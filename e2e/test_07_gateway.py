"""Two networks in two namespaces joined by a Gateway with mutual TLS (examples/gateway-tls/,
in the suite's namespaces): a message for ()/atm with branch=34 sent in east reaches the
container branch-34 connected in west."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kube
import yaml
from conftest import PREFIX, ROOT, say
from test_tls import make_ca, make_cert

WEST, EAST = f"{PREFIX}-west", f"{PREFIX}-east"


def example(name: str) -> list[dict[str, Any]]:
    """examples/gateway-tls/<name>.yaml in the suite's namespaces."""
    text = (ROOT / f"examples/gateway-tls/{name}.yaml").read_text()
    docs = [d for d in yaml.safe_load_all(text) if d]
    for doc in docs:
        doc["metadata"]["namespace"] = {"west": WEST, "east": EAST}[doc["metadata"]["namespace"]]
        for connector in (doc.get("spec") or {}).get("connectors") or []:
            assert connector["host"] == "west.west.svc"
            connector["host"] = f"west.{WEST}.svc"
    return docs


def gateway_ready(namespace: str, name: str) -> bool:
    found = kube.get(namespace, "gateway", name)
    return kube.condition(found, "Ready").get("status") == "True"


def test_two_namespaces_joined_by_a_gateway_with_mutual_tls(
    operator: str, images: dict[str, str], tmp_path: Path
) -> None:
    make_ca(tmp_path, "west-ca")
    make_ca(tmp_path, "peers-ca")
    make_cert(tmp_path, "west", "west-ca", [f"west.{WEST}.svc"])
    make_cert(tmp_path, "east", "peers-ca")
    for namespace in (WEST, EAST):
        kube.kubectl("create", "namespace", namespace)
    pem = {name: str(tmp_path / f"{name}.pem") for name in ("west", "east", "west-ca", "peers-ca")}
    key = {name: str(tmp_path / f"{name}.key") for name in ("west", "east")}
    kube.kubectl(
        "-n",
        WEST,
        "create",
        "secret",
        "tls",
        "west-gateway",
        f"--cert={pem['west']}",
        f"--key={key['west']}",
    )
    kube.kubectl(
        "-n",
        WEST,
        "create",
        "secret",
        "generic",
        "gateway-peers-ca",
        f"--from-file=ca.crt={pem['peers-ca']}",
    )
    kube.kubectl(
        "-n",
        EAST,
        "create",
        "secret",
        "tls",
        "east-gateway",
        f"--cert={pem['east']}",
        f"--key={key['east']}",
    )
    kube.kubectl(
        "-n", EAST, "create", "secret", "generic", "west-ca", f"--from-file=ca.crt={pem['west-ca']}"
    )
    kube.apply(WEST, example("west"))
    kube.apply(EAST, example("east"))
    kube.wait_for(
        "west and east Ready",
        lambda: kube.ready_routers(WEST, ["west"]) and kube.ready_routers(EAST, ["east"]),
        240,
    )
    kube.wait_for(
        "both Gateways Ready",
        lambda: gateway_ready(WEST, "west") and gateway_ready(EAST, "to-west"),
        120,
    )

    image = images["router"]
    kube.kubectl(
        "-n",
        WEST,
        "create",
        "configmap",
        "e2e-clients",
        f"--from-file={ROOT / 'e2e/clients/peer.py'}",
    )
    branch = kube.peer(
        WEST,
        "branch-34",
        image,
        "e2e-clients",
        "consume",
        "amqp://west:5672",
        "atm",
        "branch-34",
        "5",
        "120",
    )
    kube.wait_for("branch-34 consuming", lambda: kube.log_has(WEST, branch, "consuming atm"), 60)
    tx = kube.routernet(
        EAST, "tx-branch", image, "send", "()/atm", "--url", "amqp://east:5672",
        "--property", "branch=34", "--count", "5", "--body", "balance",
    )  # fmt: skip
    sent = kube.summary(kube.finish(EAST, tx, 120))
    received = kube.summary(kube.finish(WEST, branch, 120))
    assert (sent["accepted"], sent["unresolved"]) == (5, 0), sent
    assert received == {"received": 5, "bodies": ["balance"] * 5}, received
    say(
        f"()/atm with branch=34 sent in {EAST}: through the gateway (mutual TLS) to container"
        f" branch-34 in {WEST}, 5 of 5"
    )
