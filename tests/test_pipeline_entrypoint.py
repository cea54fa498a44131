"""The pipeline image's entry point (pipeline/entrypoint.py): what Spark on Kubernetes starts as
driver and executor pods, checked here as command lines; make e2e runs them on a cluster."""

from __future__ import annotations

from pathlib import Path

import pyspark
import pytest
import yaml
from router_operator.rendering.collector import claim_name

import router
from pipeline.cli import parser as pipeline_parser
from pipeline.entrypoint import EXECUTOR_BACKEND, MissingSetting, driver_command, executor_command
from pipeline.entrypoint import main as entrypoint

ROOT = Path(__file__).resolve().parents[1]

HOME = Path("/opt/routernet/lib/python3.11/site-packages/pyspark")
EXECUTOR_ENV = {
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@driver-svc.ns.svc:7078",
    "SPARK_EXECUTOR_ID": "2",
    "SPARK_EXECUTOR_CORES": "1",
    "SPARK_EXECUTOR_MEMORY": "1024m",
    "SPARK_APPLICATION_ID": "spark-1f2e",
    "SPARK_EXECUTOR_POD_IP": "10.244.0.9",
    "SPARK_EXECUTOR_POD_NAME": "analyze-exec-2",
    "SPARK_RESOURCE_PROFILE_ID": "0",
    "SPARK_JAVA_OPT_10": "-Dspark.last=1",
    "SPARK_JAVA_OPT_2": "-Dspark.driver.port=7078",
    "SPARK_JAVA_OPT_0": "-Djava.net.preferIPv6Addresses=false",
    "SPARK_CLASSPATH": "/extra/*",
}


def test_the_driver_pod_runs_spark_submit_in_client_mode_on_its_address() -> None:
    args = [
        "--properties-file", "/opt/spark/conf/spark.properties",
        "--class", "org.apache.spark.deploy.PythonRunner",
        "local:///opt/routernet/job.py", "analyze",
    ]  # fmt: skip
    command = driver_command(args, {"SPARK_DRIVER_BIND_ADDRESS": "10.244.0.7"}, HOME)
    assert command == [
        str(HOME / "bin/spark-submit"),
        "--deploy-mode", "client",
        "--conf", "spark.driver.bindAddress=10.244.0.7",
        "--conf", "spark.executorEnv.SPARK_DRIVER_POD_IP=10.244.0.7",
        *args,
    ]  # fmt: skip


def test_an_executor_pod_runs_the_backend_as_its_settings_say() -> None:
    command = executor_command(EXECUTOR_ENV, HOME)
    backend = command.index(EXECUTOR_BACKEND)
    # JVM options in Spark's order (numeric: 10 after 2), then the heap, then the class path.
    assert command[:backend] == [
        "java",
        "-Djava.net.preferIPv6Addresses=false",
        "-Dspark.driver.port=7078",
        "-Dspark.last=1",
        "-Xms1024m",
        "-Xmx1024m",
        "-cp",
        f"/extra/*:{HOME}/jars/*",
    ]
    arguments = dict(zip(command[backend + 1 :: 2], command[backend + 2 :: 2], strict=True))
    assert arguments == {
        "--driver-url": EXECUTOR_ENV["SPARK_DRIVER_URL"],
        "--executor-id": "2",
        "--cores": "1",
        "--app-id": "spark-1f2e",
        "--hostname": "10.244.0.9",
        "--resourceProfileId": "0",
        "--podName": "analyze-exec-2",
    }
    assert executor_command({**EXECUTOR_ENV, "JAVA_HOME": "/usr/lib/jvm/j17"}, HOME)[0] == (
        "/usr/lib/jvm/j17/bin/java"
    )


def test_an_executor_pod_without_its_settings_says_so() -> None:
    env = {k: v for k, v in EXECUTOR_ENV.items() if k != "SPARK_DRIVER_URL"}
    with pytest.raises(MissingSetting, match=r"^SPARK_DRIVER_URL is not set"):
        executor_command(env, HOME)
    assert entrypoint(["executor"]) == 2  # this test's environment has none of them


def test_anything_else_is_the_pipelines_command_line(tmp_path: Path) -> None:
    assert entrypoint(["generate", str(tmp_path), "--rows", "20", "--hours", "1"]) == 0
    assert list((tmp_path / "flow").rglob("*.parquet"))


def test_the_spark_operator_example_runs_the_job_make_e2e_submits() -> None:
    """examples/spark/analyze.yaml (not run here: no Spark Operator) says what the spark-submit
    that make e2e runs says: the image and its application file, the chart's account for the
    driver, the collector's claim, two executors, and a command line the pipeline takes."""
    app = yaml.safe_load((ROOT / "examples/spark/analyze.yaml").read_text())
    assert (app["apiVersion"], app["kind"]) == ("sparkoperator.k8s.io/v1beta2", "SparkApplication")
    spec = app["spec"]
    assert (spec["type"], spec["mode"], spec["sparkVersion"]) == (
        "Python",
        "cluster",
        pyspark.__version__,
    )
    assert spec["image"] == f"routernet/pipeline:{router.__version__}"
    job = spec["mainApplicationFile"].removeprefix("local://")
    assert (
        f"COPY --from=build /src/pipeline/job.py {job}"
        in (ROOT / "Dockerfile.pipeline").read_text()
    )
    args = pipeline_parser().parse_args(spec["arguments"])
    assert args.command == "analyze"
    [volume] = spec["volumes"]
    assert volume["persistentVolumeClaim"]["claimName"] == claim_name("default")
    for role in ("driver", "executor"):
        [mount] = spec[role]["volumeMounts"]
        assert mount["name"] == volume["name"]
        assert str(args.dataset).startswith(mount["mountPath"])
    assert spec["driver"]["serviceAccount"] == "routernet-spark"  # the chart's spark.enabled
    assert spec["executor"]["instances"] == 2
