"""The network console on the cluster: helm upgrade with console.enabled and basic auth from a
Secret made here; its pod Ready; from a pod in the cluster, through its Service as a user's
script would go, /api/topology refused without credentials and, with them, listing every router
of the examples/ network up and linked, /api/health answering, and /api/flows adding up what the
network's collector (asked through its Service: the dataset is on its ReadWriteOnce claim)
wrote of the last hour; then console.enabled off again, its Deployment gone."""

from __future__ import annotations

import secrets
import time

import kube
from conftest import RELEASE, ROOT, SYSTEM, say

CONSOLE = f"{RELEASE}-routernet-console"
SECRET = "e2e-console-users"
USER = "e2e"


def helm_upgrade(*values: str) -> None:
    command = ["helm", "upgrade", RELEASE, str(ROOT / "helm/routernet"), "-n", SYSTEM,
               "--reuse-values", "--wait", "--timeout", "3m"]  # fmt: skip
    for value in values:
        command += ["--set", value]
    kube.run(command, timeout=240)


def expected_routers(network: str) -> dict[str, list[str]]:
    """The pods the examples' Routers run now (core was scaled to 2 by an earlier step)."""
    return {
        name: [
            f"{name}-{i}" for i in range(kube.get(network, "statefulset", name)["spec"]["replicas"])
        ]
        for name in ("core", "edge")
    }


def test_the_console_shows_the_network_to_its_users_only(
    network: str, images: dict[str, str], clients: str
) -> None:
    password = secrets.token_urlsafe(16)
    kube.kubectl(
        "-n", SYSTEM, "create", "secret", "generic", SECRET,
        f"--from-literal=auth={USER}:{password}",
    )  # fmt: skip
    started = time.monotonic()
    try:
        helm_upgrade("console.enabled=true", f"console.auth.basic.existingSecret={SECRET}")
        kube.wait_for(
            "the console's pod Ready",
            lambda: kube.kubectl(
                "-n", SYSTEM, "get", "deployment", CONSOLE,
                "-o", "jsonpath={.status.readyReplicas}",
            ) == "1",
            120,
        )  # fmt: skip
        ready = time.monotonic() - started
        routers = expected_routers(network)
        ids = [pod for pods in routers.values() for pod in pods]
        url = f"http://{CONSOLE}.{SYSTEM}.svc:8080"
        command = ["python", f"{kube.CLIENTS_MOUNT}/console_probe.py", url, USER, password,
                   "90", *ids]  # fmt: skip
        volume = ("clients", {"configMap": {"name": clients}}, kube.CLIENTS_MOUNT)
        probe = kube.start(
            network, kube.client_pod(network, "console-probe", images["router"], command, [volume])
        )
        found = kube.summary(kube.finish(network, probe, 180))

        refused = found["unauthenticated"]
        assert refused["status"] == 401, refused
        assert refused["challenge"].startswith("Basic"), refused

        topology = found["topology"]
        shown = {r["id"]: r for r in topology["routers"] if r["namespace"] == network}
        missing = sorted(set(ids) - set(shown))
        assert not missing, f"not in the console: {missing}; it shows {sorted(shown)}"
        down = {i: shown[i].get("error") for i in ids if shown[i]["state"] != "up"}
        assert not down, f"shown down: {down}"
        for pod in routers["core"]:
            assert shown[pod]["mode"] == "interior" and shown[pod]["network"] == "default"
        for pod in routers["edge"]:
            assert shown[pod]["mode"] == "edge", shown[pod]
        # The interiors' mesh, each pair once; every edge on an interior.
        links = {(lk["source"], lk["target"]): lk["kind"] for lk in topology["links"]}
        cores = routers["core"]
        for i, a in enumerate(cores):
            for b in cores[i + 1 :]:
                assert links.get(tuple(sorted((a, b)))) == "inter-router", (a, b, links)
        for edge in routers["edge"]:
            uplinks = [pair for pair, kind in links.items() if kind == "edge" and edge in pair]
            assert any(set(pair) & set(cores) for pair in uplinks), (edge, links)

        health = found["health"]
        assert health["routers"]["up"] >= len(ids), health
        assert health["routers"]["total"] >= len(ids), health
        errors = [
            p for p in health["problems"]
            if p["severity"] == "error" and p["subject"].get("router") in ids
        ]  # fmt: skip
        assert not errors, errors
        flows = found["flows"]
        assert flows["available"], flows
        assert flows["unanswered"] == [], flows["unanswered"]
        assert flows["records"] > 0, flows
        # The network's routers in it (and perhaps pods scaled away since, within the hour).
        assert set(flows["routers"]) & set(ids), (flows["routers"], ids)
        assert sum(cell["deliveries"] for cell in flows["matrix"]) > 0, flows["matrix"]
        say(
            f"/api/flows?minutes=60 from the collector's Service: {flows['records']} records,"
            f" {len(flows['matrix'])} matrix cells, routers {', '.join(flows['routers'])}"
        )
        say(
            f"console.enabled with basic auth: pod Ready {ready:.0f} s after helm upgrade;"
            f" /api/topology 401 without credentials, with them {', '.join(ids)} up"
            f" ({len(topology['routers'])} routers, {len(topology['links'])} links in all,"
            f" {found['seconds']:.0f} s to settle); /api/health: {health['routers']['up']}"
            f"/{health['routers']['total']} up, {len(health['problems'])} problems"
        )
    finally:
        helm_upgrade("console.enabled=false")
        kube.kubectl("-n", SYSTEM, "delete", "secret", SECRET, "--ignore-not-found")
    assert not kube.exists(SYSTEM, "deployment", CONSOLE)
    say("console.enabled=false: its Deployment, Service and RBAC gone")
