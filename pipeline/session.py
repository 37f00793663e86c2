"""The SparkSession for the pipeline's jobs, the same locally and on a cluster."""

from __future__ import annotations

import contextlib
import os
import sys

from pyspark import SparkConf
from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
SPLIT_BYTES = 32 * 2**20


def default_master() -> str | None:
    """local[*], unless spark-submit launched us: then it has already chosen the master."""
    # spark-submit starts the JVM first and hands PySpark its gateway port; forcing a
    # master here would override --master given to spark-submit.
    return None if os.environ.get("PYSPARK_GATEWAY_PORT") else DEFAULT_MASTER


def local_driver_memory() -> str:
    """A quarter of the machine's memory, 1 to 8 GiB: in local mode the driver's heap
    holds every task (Spark's default 1g failed at ~10M lines when Spark built the
    tables; the JVM only reserves what it uses)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return f"{max(1, min(8, total // 4 // 2**30))}g"


# A local report's JVM mostly starts up, plans two jobs and hands files to the Python
# workers: the C2 compiler's and parallel GC's threads cost more CPU than they save
# (bare session + first job, measured back to back: 28.0 -> 15.9 s wall, JVM CPU
# 19.3 -> 9.4 s), and the web UI is not looked at by a batch job.
LOCAL_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
LOCAL_CONF = {"spark.ui.enabled": "false", "spark.driver.extraJavaOptions": LOCAL_JAVA_OPTIONS}


def _user_conf_keys() -> str:
    """What the user configured before us: PYSPARK_SUBMIT_ARGS and spark-defaults.conf."""
    text = os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    conf_dir = os.environ.get("SPARK_CONF_DIR") or os.path.join(
        os.environ.get("SPARK_HOME", ""), "conf")
    defaults = os.path.join(conf_dir, "spark-defaults.conf")
    with contextlib.suppress(OSError), open(defaults, encoding="utf-8") as f:
        text += f.read()
    return text


def build_session(app_name: str, master: str | None = None) -> SparkSession:
    builder = SparkSession.builder.appName(app_name)
    chosen = master or default_master()
    if chosen:
        builder = builder.master(chosen)
    # Only when this call starts the JVM, and nobody chose a size already.
    launching = SparkSession.getActiveSession() is None
    sized = "driver-memory" in os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    if launching and not sized and (chosen or "").startswith("local"):
        builder = builder.config("spark.driver.memory", local_driver_memory())
    if launching and (chosen or "").startswith("local"):
        # The report's Python workers need this interpreter's packages (pyarrow,
        # msgspec); PySpark would start whatever `python3` is first on PATH.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        configured = _user_conf_keys()
        for key, value in LOCAL_CONF.items():
            if key not in configured and "driver-java-options" not in configured:
                builder = builder.config(key, value)
    # Log timestamps are UTC; so are windows, buckets and the tables written.
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    spark = builder.getOrCreate()
    conf = spark.sparkContext.getConf()
    if (spark.sparkContext.master or "").startswith("local"):
        # 200 shuffle partitions is a cluster default; on one machine it only adds tasks.
        _default(spark, conf, "spark.sql.shuffle.partitions", "8")
    # (For the files Spark's text source reads: not local ones, see read.py.)
    # Spark packs small files into one task by their size on disk, but a rotated .gz
    # holds ~19x more lines than its size says: with the defaults (128 MiB, 4 MiB per
    # file) a task got a dozen .gz files while another had one plain file, and the
    # cores sat idle at the end. Opening a file now costs as much as a whole split, so
    # each .gz is a task of its own and a plain file is cut into 32 MiB splits.
    _default(spark, conf, "spark.sql.files.maxPartitionBytes", str(SPLIT_BYTES))
    _default(spark, conf, "spark.sql.files.openCostInBytes", str(SPLIT_BYTES))
    return spark


def _default(spark: SparkSession, conf: SparkConf, key: str, value: str) -> None:
    """Set a SQL option unless whoever launched Spark chose it."""
    if not conf.contains(key):
        spark.conf.set(key, value)
