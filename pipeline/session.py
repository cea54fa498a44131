"""The SparkSession: found Java first, settings for small local jobs, progress on.

Java is looked for before pyspark starts one (JAVA_HOME, then PATH), so a machine without it
gets one line saying so instead of a gateway traceback; and PySpark itself, which `pip install
routernet` leaves out (the pipeline is the optional group [pipeline]), before anything else.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline import PipelineError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"


def prerequisites() -> None:
    """PySpark installed and Java found; PipelineError saying which is not."""
    try:
        import pyspark  # noqa: F401
    except ModuleNotFoundError as err:
        raise PipelineError(
            f"{err.name} is not installed: the pipeline is routernet's optional group"
            " [pipeline] (pip install 'routernet[pipeline]')"
        ) from None
    find_java()


def find_java() -> str:
    """The java executable Spark will use; PipelineError when there is none."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        if os.access(java, os.X_OK):
            return str(java)
        raise PipelineError(
            f"no Java: JAVA_HOME={home} has no bin/java (Spark needs Java 17:"
            " apt-get install openjdk-17-jre-headless)"
        )
    java = shutil.which("java")
    if java is None:
        raise PipelineError(
            "no Java: java is not on PATH and JAVA_HOME is unset (Spark needs Java 17:"
            " apt-get install openjdk-17-jre-headless)"
        )
    return java


def spark_session(
    master: str | None = DEFAULT_MASTER,
    app: str = "routernet-pipeline",
    *,
    shuffle_partitions: int | None = None,
    progress: bool = True,
    driver_memory: str = "2g",
    extra: dict[str, str] | None = None,
) -> SparkSession:
    """A session for the pipeline's jobs.

    The shuffles the jobs do are over small, pre-aggregated data, so a few shuffle
    partitions (default: 2 per local core, 8 on a cluster) beat Spark's 200; the UI is off
    for tests and local runs; timestamps are UTC like the dataset."""
    find_java()
    from pyspark.sql import SparkSession

    # Under spark-submit (its gateway is already up) the master is spark-submit's.
    submitted = master is None and "PYSPARK_GATEWAY_PORT" in os.environ
    if master is None and not submitted:
        master = DEFAULT_MASTER
    if shuffle_partitions is None:
        local = master is not None and master.startswith("local")
        shuffle_partitions = 2 * (os.cpu_count() or 1) if local else 8
    builder = SparkSession.builder if submitted else SparkSession.builder.master(master or "")
    builder = (
        builder.appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "true" if progress else "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.sources.partitionOverwriteMode", "dynamic")
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.adaptive.enabled", "true")
    )
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as err:  # the gateway's own errors are long; keep the first line
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise PipelineError(f"could not start Spark ({master}): {first}") from None
    spark.sparkContext.setLogLevel("ERROR")
    return spark
