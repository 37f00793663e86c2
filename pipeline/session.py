"""The SparkSession for the pipeline's jobs, the same locally and on a cluster."""

from __future__ import annotations

import os

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"


def default_master() -> str | None:
    """local[*], unless spark-submit launched us: then it has already chosen the master."""
    # spark-submit starts the JVM first and hands PySpark its gateway port; forcing a
    # master here would override --master given to spark-submit.
    return None if os.environ.get("PYSPARK_GATEWAY_PORT") else DEFAULT_MASTER


def local_driver_memory() -> str:
    """A quarter of the machine's memory, 1 to 8 GiB: in local mode the driver's heap
    holds the parsed-lines cache and every task (Spark's default 1g fails at ~10M lines)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return f"{max(1, min(8, total // 4 // 2**30))}g"


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
    # Log timestamps are UTC; so are windows, buckets and the tables written.
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    spark = builder.getOrCreate()
    explicit = spark.sparkContext.getConf().contains("spark.sql.shuffle.partitions")
    if (spark.sparkContext.master or "").startswith("local") and not explicit:
        # 200 shuffle partitions is a cluster default; on one machine it only adds tasks.
        spark.conf.set("spark.sql.shuffle.partitions", "8")
    return spark
