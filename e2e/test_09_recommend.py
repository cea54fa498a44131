"""Recommendations made on the cluster: with recommend.enabled, the operator gives the network a
CronJob that runs the pipeline's recommend --compact on the collector's claim and writes the
ConfigMap predictive autoscaling reads; its schedule runs it, and the CronJob's status and the
ConfigMap's annotations say when it last ran and what it found."""

from __future__ import annotations

import json
import time

import kube
from conftest import RELEASE, ROOT, SYSTEM, say

CRON = "routernet-recommend-default"
CONFIG_MAP = "routernet-recommendation-default"


def test_the_cronjob_writes_the_recommendation_configmap(network: str) -> None:
    started = time.monotonic()
    kube.run(
        ["helm", "upgrade", RELEASE, str(ROOT / "helm/routernet"), "-n", SYSTEM, "--reuse-values",
         "--set", "recommend.enabled=true", "--set", "recommend.schedule=* * * * *", "--wait"],
        timeout=240,
    )  # fmt: skip
    kube.wait_for(
        "the operator to make the CronJob", lambda: kube.exists(network, "cronjob", CRON), 120
    )
    try:
        cron = kube.wait_for(
            "a scheduled run to succeed",
            lambda: (
                (c := kube.get(network, "cronjob", CRON))["status"].get("lastSuccessfulTime") and c
            ),
            300,
            every=5,
        )
        made = kube.get(network, "configmap", CONFIG_MAP)
        annotations = made["metadata"]["annotations"]
        rec = json.loads(made["data"]["recommendation.json"])
        assert rec["kind"] == "Recommendation"
        assert {r["name"] for r in rec["routers"]} >= {"core", "edge"}, rec["routers"]
        found = annotations["routernet.io/recommendation"]
        assert "core " in found and "edge " in found, found
        jobs = kube.kubectl(
            "-n", network, "get", "pods", "-l", "app.kubernetes.io/component=recommend",
            "-o", "name",
        )  # fmt: skip
        log = kube.kubectl("-n", network, "logs", jobs.split()[0])
        assert f"wrote ConfigMap {network}/{CONFIG_MAP}" in log, log
    finally:
        # Every minute is for this test, in every network: the rest of the suite runs without
        # it (a Spark job a minute per network starved the autoscaling step's load).
        kube.run(
            ["helm", "upgrade", RELEASE, str(ROOT / "helm/routernet"), "-n", SYSTEM,
             "--reuse-values", "--set", "recommend.enabled=false", "--wait"],
            timeout=240,
        )  # fmt: skip
    kube.wait_for(
        "every recommend CronJob removed once recommend.enabled is off",
        lambda: (
            not kube.kubectl(
                "get", "cronjobs", "-A", "-l", "app.kubernetes.io/component=recommend", "-o", "name"
            ).strip()
        ),
        120,
    )
    say(
        f"CronJob {CRON} (every minute for this test): last success"
        f" {cron['status']['lastSuccessfulTime']}, {time.monotonic() - started:.0f} s after"
        f" recommend.enabled; ConfigMap {CONFIG_MAP} made at"
        f" {annotations['routernet.io/recommended-at']}: {found}; recommend.enabled off:"
        " every network's CronJob removed"
    )
