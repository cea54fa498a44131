"""The pipeline image's entry point (Dockerfile.pipeline): the pipeline's commands, and the
driver and executors of Spark on Kubernetes.

`spark-submit --master k8s://... --deploy-mode cluster` starts the job's image as a driver pod
with the arguments ``driver --properties-file <conf> --class ... <app> <args>``, and the driver
starts it as executor pods with the argument ``executor`` and the rest in the environment
(``SPARK_DRIVER_URL``, ``SPARK_EXECUTOR_ID``, ...: Spark's deploy/k8s/Constants). Spark's own
images answer those with a shell script; this image is the pipeline's, built on pip's
pyspark, so it answers them here: the driver runs spark-submit in client mode bound to the
pod's address, an executor runs Spark's Kubernetes executor backend with the JVM options and
class path Spark gave it. Any other arguments are the pipeline's own
(``python -m pipeline analyze DATASET ...``).

`driver_command` and `executor_command` are pure: the tests check them without a cluster, and
make e2e runs them in one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

EXECUTOR_BACKEND = "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
JAVA_OPT_PREFIX = "SPARK_JAVA_OPT_"


class MissingSetting(Exception):
    """The environment lacks what Spark should have set for an executor pod."""


def spark_home() -> Path:
    """pip's pyspark is a Spark distribution: bin/, jars/."""
    import pyspark

    return Path(pyspark.__file__).parent


def driver_command(args: Sequence[str], env: Mapping[str, str], home: Path) -> list[str]:
    """spark-submit in client mode in the driver pod, on the pod's address, which the
    executors are told as their driver's."""
    address = env.get("SPARK_DRIVER_BIND_ADDRESS", "0.0.0.0")
    return [
        str(home / "bin" / "spark-submit"),
        "--deploy-mode",
        "client",
        "--conf",
        f"spark.driver.bindAddress={address}",
        "--conf",
        f"spark.executorEnv.SPARK_DRIVER_POD_IP={address}",
        *args,
    ]


def executor_command(env: Mapping[str, str], home: Path) -> list[str]:
    """The executor backend's JVM, as Spark's settings for this pod say."""

    def need(name: str) -> str:
        value = env.get(name)
        if not value:
            raise MissingSetting(f"{name} is not set: this pod was not started by a Spark driver")
        return value

    options = [
        env[name]
        for name in sorted(
            (n for n in env if n.startswith(JAVA_OPT_PREFIX)),
            key=lambda n: int(n.removeprefix(JAVA_OPT_PREFIX) or 0),
        )
    ]
    memory = need("SPARK_EXECUTOR_MEMORY")
    extra = env.get("SPARK_CLASSPATH")
    classpath = ":".join(filter(None, [extra, str(home / "jars" / "*")]))
    return [
        os.path.join(env["JAVA_HOME"], "bin", "java") if env.get("JAVA_HOME") else "java",
        *options,
        f"-Xms{memory}",
        f"-Xmx{memory}",
        "-cp",
        classpath,
        EXECUTOR_BACKEND,
        "--driver-url",
        need("SPARK_DRIVER_URL"),
        "--executor-id",
        need("SPARK_EXECUTOR_ID"),
        "--cores",
        need("SPARK_EXECUTOR_CORES"),
        "--app-id",
        need("SPARK_APPLICATION_ID"),
        "--hostname",
        need("SPARK_EXECUTOR_POD_IP"),
        "--resourceProfileId",
        env.get("SPARK_RESOURCE_PROFILE_ID", "0"),
        "--podName",
        need("SPARK_EXECUTOR_POD_NAME"),
    ]


def main(argv: Sequence[str]) -> int:
    if argv and argv[0] in ("driver", "executor"):
        try:
            if argv[0] == "driver":
                command = driver_command(argv[1:], os.environ, spark_home())
            else:
                command = executor_command(os.environ, spark_home())
        except MissingSetting as err:
            print(f"pipeline: {err}", file=sys.stderr)
            return 2
        sys.stdout.flush()
        os.execvp(command[0], command)  # a path, or java found on PATH
    from pipeline.cli import main as pipeline_main

    return pipeline_main(argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
