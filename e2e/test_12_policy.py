"""Router.spec.policy on the cluster: a Router whose vhost admits tenant-a's clients to its own
addresses only, checked from a pod through the Router's client Service (a connection naming no
vhost refused, one naming tenant-a admitted, a sender outside its addresses refused); then the
vhost changed in the Router, applied by the running pod without a restart."""

from __future__ import annotations

import json
from typing import Any

import kube
from conftest import say

ROUTER = "guarded"
URL = f"amqp://{ROUTER}:5672"
POLICY: dict[str, Any] = {
    "enableVhostPolicy": True,
    "defaultVhost": "",
    "vhosts": [
        {
            "hostname": "tenant-a",
            "allowUnknownUser": True,
            "groups": {"$default": {"remoteHosts": ["*"], "targetPattern": ["tenant-a.#"]}},
        }
    ],
}
REFUSED = "Condition('amqp:resource-limit-exceeded', 'connection disallowed by local policy')"


def refused(said: dict[str, Any]) -> bool:
    return said["connection"].startswith("refused") and REFUSED in said["connection"]


def guarded(policy: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "routernet.io/v1alpha1",
        "kind": "Router",
        "metadata": {"name": ROUTER},
        "spec": {"replicas": 1, "network": ROUTER, "policy": policy},
    }


def probe(network: str, image: str, clients: str, name: str, *args: str) -> dict[str, Any]:
    pod = kube.peer(network, name, image, clients, "vhost", URL, *args)
    return dict(json.loads(kube.finish(network, pod, kube.CLIENT_ATTACH_SECONDS).splitlines()[-1]))


def pod_uid(network: str) -> str:
    return str(kube.get(network, "pod", f"{ROUTER}-0")["metadata"]["uid"])


def test_a_routers_policy_admits_its_tenants_to_their_addresses_only(
    network: str, images: dict[str, str], clients: str
) -> None:
    image = images["router"]
    kube.apply(network, guarded(POLICY))
    kube.wait_for(f"{ROUTER} Ready", lambda: kube.ready_routers(network, [ROUTER]), 180)
    uid = pod_uid(network)
    try:
        nobody = probe(network, image, clients, "vhost-none", "nobody.example")
        assert refused(nobody), nobody
        tenant = probe(network, image, clients, "vhost-a", "tenant-a", "tenant-a.orders", "b.x")
        assert tenant["links"] == {
            "tenant-a.orders": "ok",
            "b.x": "amqp:unauthorized-access: link disallowed by local policy",
        }, tenant

        closed = {**POLICY, "vhosts": [{**POLICY["vhosts"][0], "maxConnections": 0}]}
        kube.apply(network, guarded(closed))

        def refused_now() -> bool:
            return refused(probe(network, image, clients, "vhost-a2", "tenant-a"))

        kube.wait_for("the vhost's new limit applied", refused_now, 180, every=5)
        assert pod_uid(network) == uid  # applied live: the same pod
    finally:
        kube.kubectl("-n", network, "delete", "rtr", ROUTER, "--wait=true", timeout=120)
    say(
        f"Router {ROUTER} with spec.policy: an Open naming no vhost refused ({REFUSED});"
        " tenant-a admitted, a sender to tenant-a.orders attached and one to b.x refused;"
        " tenant-a's maxConnections set to 0 in the Router: refused by the same pod"
    )
