"""The pipeline as a Spark application on the cluster, as docs/telemetry.md ("On Kubernetes")
runs it: pyspark's own spark-submit on this machine, --master k8s:// in cluster mode, the
pipeline image as the driver and two executors, reading the collector's dataset from its claim
and writing the analysis back to it; then the same analysis in local mode, in a pod, on the
same data: the same tables."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import kube
import pyspark
from conftest import NETWORK, say

CLAIM = "routernet-telemetry-default"
MOUNT = "/telemetry"
SNAPSHOT = f"{MOUNT}/e2e-snapshot"
DRIVER = "e2e-analyze-driver"


def pipeline_pod(name: str, image: str, command: list[str], clients: bool = False) -> str:
    """A pod of the pipeline image with the collector's claim at MOUNT and a writable /tmp."""
    volumes = [
        ("telemetry", {"persistentVolumeClaim": {"claimName": CLAIM}}, MOUNT),
        ("tmp", {"emptyDir": {}}, "/tmp"),
    ]
    if clients:
        volumes.append(("clients", {"configMap": {"name": "e2e-clients"}}, kube.CLIENTS_MOUNT))
    pod = kube.client_pod(NETWORK, name, image, command, volumes)
    for mount in pod["spec"]["containers"][0]["volumeMounts"]:
        mount["readOnly"] = mount["name"] == "clients"
    return kube.start(NETWORK, pod)


def api_server() -> str:
    return kube.kubectl(
        "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"
    )


def spark_submit(image: str) -> list[str]:
    home = Path(pyspark.__file__).parent
    volume = "spark.kubernetes.{}.volumes.persistentVolumeClaim.telemetry"
    confs = {
        "spark.kubernetes.container.image": image,
        "spark.kubernetes.container.image.pullPolicy": "IfNotPresent",
        "spark.kubernetes.namespace": NETWORK,
        "spark.kubernetes.authenticate.driver.serviceAccountName": "routernet-spark",
        "spark.kubernetes.driver.pod.name": DRIVER,
        "spark.kubernetes.executor.podNamePrefix": "e2e-analyze",
        "spark.executor.instances": "2",
        "spark.kubernetes.driver.request.cores": "0.25",
        "spark.kubernetes.executor.request.cores": "0.25",
        # The kit's etcd (Debian 12's 3.4) cannot serve the watch spark-submit follows its
        # driver with: it returns at once, and the driver pod is watched here instead.
        "spark.kubernetes.submission.waitAppCompletion": "false",
    }
    for role in ("driver", "executor"):
        confs[f"{volume.format(role)}.options.claimName"] = CLAIM
        confs[f"{volume.format(role)}.mount.path"] = MOUNT
    return [
        str(home / "bin" / "spark-submit"),
        "--master", f"k8s://{api_server()}",
        "--deploy-mode", "cluster",
        "--name", "routernet-analyze",
        *(arg for name, value in confs.items() for arg in ("--conf", f"{name}={value}")),
        "local:///opt/routernet/job.py", "analyze", SNAPSHOT, "--output", f"{MOUNT}/e2e-k8s",
    ]  # fmt: skip


def executors() -> set[str]:
    listed = kube.kubectl("-n", NETWORK, "get", "pods", "-l", "spark-role=executor", "-o", "name")
    return {name.removeprefix("pod/") for name in listed.split()}


def test_the_pipeline_runs_as_a_spark_application_on_the_cluster(
    network: str, images: dict[str, str], clients: str
) -> None:
    image = images["pipeline"]
    copy = f"rm -rf {MOUNT}/e2e-* && cp -r {MOUNT}/telemetry {SNAPSHOT} && ls {SNAPSHOT}"
    snapshot = pipeline_pod("snapshot", image, ["sh", "-c", copy])
    kube.finish(network, snapshot, 120)

    started = time.monotonic()
    env = {**os.environ, "SPARK_HOME": str(Path(pyspark.__file__).parent)}
    submitted = subprocess.run(
        spark_submit(image), env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    seen: set[str] = set()

    def driver_done() -> str | None:
        seen.update(executors())
        phase = kube.phase(network, DRIVER)
        return phase if phase in ("Succeeded", "Failed") else None

    ended = kube.wait_for("the Spark driver pod to finish", driver_done, 600, every=1)
    log = kube.kubectl("-n", network, "logs", DRIVER)
    assert ended == "Succeeded", "\n".join(log.splitlines()[-40:])
    analyzed = next(line for line in log.splitlines() if line.startswith("analyzed "))
    assert len(seen) >= 2, f"executor pods seen: {sorted(seen)}"
    took = time.monotonic() - started

    local = pipeline_pod(
        "analyze-local", image,
        ["python", "-m", "pipeline", "analyze", SNAPSHOT, "--output", f"{MOUNT}/e2e-local",
         "--master", "local[2]", "--quiet"],
    )  # fmt: skip
    kube.finish(network, local, 300)
    script = f"{kube.CLIENTS_MOUNT}/same_tables.py"
    compare = pipeline_pod(
        "same-tables", image, ["python", script, f"{MOUNT}/e2e-local", f"{MOUNT}/e2e-k8s"], True
    )
    found: dict[str, Any] = json.loads(kube.finish(network, compare, 120).strip().splitlines()[-1])
    assert found["different"] == [], found
    assert found["plots_with_report"] == 3, found
    say(
        f"spark-submit --master k8s://: driver {DRIVER} and {len(seen)} executor pods"
        f" ({', '.join(sorted(seen))}) in {took:.0f} s: {analyzed}"
    )
    say(f"local mode in a pod on the same snapshot: the same tables {found['rows']}")
