"""The SparkSession for the pipeline's jobs, the same locally and on a cluster."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from pyspark import SparkConf
from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
SPLIT_BYTES = 32 * 2**20


def local_driver_memory() -> str:
    """A quarter of the machine's memory, 1 to 8 GiB: in local mode the driver's heap
    holds every task (Spark's default 1g failed at ~10M lines when Spark built the
    tables; the JVM only reserves what it uses)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return f"{max(1, min(8, total // 4 // 2**30))}g"


# The driver's JVM. Locally it is also the executor: the tasks' code (Spark's JSON
# parser, generated code) needs the C2 compiler (C1 alone tripled the scan's CPU:
# bench/PIPELINE.md, "A cluster's cached plan, and the local JVM's compilers"). The serial GC: one heap, no parallel GC threads competing
# with the tasks. The web UI is not looked at by a batch job.
# Every JVM that runs tasks compiles methods of any size: the scan's generated code
# (read, explode, partial aggregation fused into one function) would otherwise run
# interpreted once a method of it outgrew HotSpot's 8,000 bytes (bench/PIPELINE.md,
# "The scan: one generated stage, every method compiled"), which one more field can do.
COMPILE_HUGE_METHODS = "-XX:-DontCompileHugeMethods"
LOCAL_JAVA_OPTIONS = f"-XX:+UseSerialGC {COMPILE_HUGE_METHODS}"
EXECUTOR_JAVA_OPTIONS = "spark.executor.extraJavaOptions"
LOCAL_CONF = {"spark.ui.enabled": "false"}
# What a user of `kafkalens report`/`watch` reads on the terminal is the report's
# summary and real warnings, not a progress bar per stage (a report runs ~100 small
# stages) nor Spark's start-up notices (log4j2.properties says which are quietened).
QUIET_CONF = {"spark.ui.showConsoleProgress": "false"}
LOG4J2_FILE = Path(__file__).with_name("log4j2.properties")
SPARK_LOG_PROPERTY = "kafkalens.spark.log"  # log4j2.properties' level: off unless asked
# Spark's launcher adds --add-modules=jdk.incubator.vector to every JVM it starts, and
# the JVM then prints this on stderr, whatever else is configured: the driver's JVM is
# started with its stderr through a pipe that drops this one line (relay_stderr).
INCUBATOR_NOTICE = b"WARNING: Using incubator modules:"
# PySpark otherwise hands the JVM the Python call site of every DataFrame function
# and Column method called (the context of an error in a user's own DataFrame code),
# six py4j round trips each: off, building the report's tables' plans took 5,001 calls
# instead of 10,589 (bench/PIPELINE.md, "The tables' plans: one query per family"). A
# static setting: set when this process starts the JVM.
DEBUGGING = "spark.python.sql.dataFrameDebugging.enabled"
# A cluster's driver runs no tasks: C1 alone and the serial GC cut its CPU
# (bench/PIPELINE.md, "A cluster's cached plan, and the local JVM's compilers"). The executors keep the JVM's defaults: they run the tasks C2 pays off on.
CLUSTER_DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# Class-data sharing: the JVM maps the classes a former run loaded from an archive
# instead of loading and verifying them from Spark's jars again; the first run records
# them, once (bench/PIPELINE.md, "Class-data sharing's start-up times"). A JVM that finds the archive
# stale (another classpath or JDK) or damaged ignores it, silently.
_QUIET_CDS = "-Xlog:cds=off -Xlog:cds+dynamic=off"
CDS_ENV = "KAFKALENS_SPARK_CDS"  # "0": neither write nor use an archive
_PROMOTE_AFTER_S = 60  # an archive being written is this young at most


def cds_archive(cache: Path | None = None, delta: bool = False) -> Path:
    """Where the archive of this Spark and JDK lives (their paths in its name: an
    upgrade gets a new one; with Delta's jars, another)."""
    import pyspark

    home = os.environ.get("JAVA_HOME")
    java = (shutil.which("java", path=os.path.join(home, "bin")) if home else None) or \
        shutil.which("java") or "java"
    key = f"{pyspark.__file__}|{pyspark.__version__}|{os.path.realpath(java)}"
    if delta:
        key += f"|{delta_package()}"
    base = cache or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "kafkalens" / f"spark-cds-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def cds_options(archive: Path, now: float | None = None) -> str:
    """The JVM options to use the archive, or to write it at exit when there is none.

    Each run writes its own file (`<archive>.<pid>.tmp`), made the archive by a later
    run once it is old enough to be whole, so that no JVM maps a half-written one."""
    if os.environ.get(CDS_ENV) == "0":
        return ""
    now = time.time() if now is None else now
    for written in sorted(archive.parent.glob(f"{archive.name}.*.tmp")):
        with contextlib.suppress(OSError):
            if now - written.stat().st_mtime > _PROMOTE_AFTER_S:
                if archive.exists():  # another run's, written meanwhile: not needed
                    written.unlink()
                else:
                    os.replace(written, archive)
    if archive.exists():
        return f"-XX:SharedArchiveFile={archive} {_QUIET_CDS}"
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return ""
    if not os.access(archive.parent, os.W_OK):
        return ""
    return f"-XX:ArchiveClassesAtExit={archive}.{os.getpid()}.tmp {_QUIET_CDS}"


# The ingested table is a Delta Lake table (pipeline/ingest.py). Delta's Spark jars
# are matched to the PySpark that runs (their artifact names carry Spark's major and
# minor version; `delta-spark` from PyPI pins the PySpark it supports, pyproject.toml),
# and fetched by Spark from Maven Central at the first start that needs them (cached
# in ~/.ivy2.5.2 from then on). Only the commands that read or write the table start
# with them (`report` over logs does not need them).
DELTA_CONF = {"spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
              "spark.sql.catalog.spark_catalog":
              "org.apache.spark.sql.delta.catalog.DeltaCatalog"}
# Delta's own dependencies that Spark ships already (its classes are loaded first
# anyway): not fetched, half of the download.
DELTA_EXCLUDES = ",".join([
    "com.fasterxml.jackson.core:jackson-annotations", "com.fasterxml.jackson.core:jackson-core",
    "com.fasterxml.jackson.core:jackson-databind", "com.github.luben:zstd-jni",
    "com.google.code.findbugs:jsr305", "commons-pool:commons-pool", "io.airlift:aircompressor",
    "org.apache.hadoop:hadoop-client-api", "org.apache.hadoop:hadoop-client-runtime",
    "org.apache.logging.log4j:log4j-api", "org.apache.logging.log4j:log4j-core",
    "org.apache.logging.log4j:log4j-slf4j2-impl", "org.apache.parquet:parquet-column",
    "org.apache.parquet:parquet-common", "org.apache.parquet:parquet-encoding",
    "org.apache.parquet:parquet-format-structures", "org.apache.parquet:parquet-hadoop",
    "org.apache.parquet:parquet-jackson", "org.locationtech.jts:jts-core",
    "org.roaringbitmap:RoaringBitmap", "org.slf4j:slf4j-api", "org.xerial.snappy:snappy-java",
])


class DeltaMissing(RuntimeError):
    """The session runs without Delta's classes (a running session started without
    them, or spark-submit without --packages): one line for the user."""


def delta_package() -> str:
    """The Maven coordinate of Delta's Spark jar for this PySpark and delta-spark."""
    from importlib.metadata import PackageNotFoundError, version

    import pyspark

    try:
        delta = version("delta-spark")
    except PackageNotFoundError as e:
        raise DeltaMissing("the table needs delta-spark: pip install -e '.[pipeline]' "
                           "(or 'kafkalens[pipeline]')") from e
    spark = ".".join(pyspark.__version__.split(".")[:2])
    return f"io.delta:delta-spark_{spark}_2.13:{delta}"


def check_delta(spark: SparkSession) -> None:
    """Raises DeltaMissing unless this session can read and write Delta tables."""
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    if "DeltaSparkSessionExtension" in extensions:
        try:
            spark._jvm.java.lang.Class.forName(  # type: ignore[union-attr]
                "io.delta.tables.DeltaTable", True,
                spark._jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader())  # type: ignore[union-attr]
            return
        except Exception:  # noqa: BLE001 - the jar is not there: say how to add it
            pass
    raise DeltaMissing(
        f"this Spark session cannot read or write Delta tables: start it with --packages "
        f"{delta_package()} --conf spark.sql.extensions={DELTA_CONF['spark.sql.extensions']}"
        f" --conf spark.sql.catalog.spark_catalog="
        f"{DELTA_CONF['spark.sql.catalog.spark_catalog']} (kafkalens sets these itself "
        "when it starts Spark)")


def _user_conf_keys() -> str:
    """What the user configured before us: PYSPARK_SUBMIT_ARGS and spark-defaults.conf."""
    text = os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    conf_dir = os.environ.get("SPARK_CONF_DIR") or os.path.join(
        os.environ.get("SPARK_HOME", ""), "conf")
    defaults = os.path.join(conf_dir, "spark-defaults.conf")
    with contextlib.suppress(OSError), open(defaults, encoding="utf-8") as f:
        text += f.read()
    return text


def relay_stderr(pipe: IO[bytes], out_fd: int = 2) -> None:
    """Copies the JVM's stderr to ours, line by line, but for INCUBATOR_NOTICE."""
    for line in iter(pipe.readline, b""):
        if not line.startswith(INCUBATOR_NOTICE):
            with contextlib.suppress(OSError):
                os.write(out_fd, line)
    pipe.close()


def _launch_jvm(conf: SparkConf) -> None:
    """Starts the driver's JVM as PySpark would, its stderr relayed (relay_stderr)."""
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})
    threading.Thread(target=relay_stderr, args=(gateway.proc.stderr,), daemon=True,
                     name="kafkalens-jvm-stderr").start()
    SparkContext._ensure_initialized(gateway=gateway)


def build_session(app_name: str, master: str | None = None,
                  spark_log: str | None = None, delta: bool = False) -> SparkSession:
    """The session (started now unless one runs already). `spark_log`: the level from
    which Spark's own log is shown (off by default: log4j2.properties). `delta`: with
    Delta Lake (the ingested table), its jars fetched at start; raises DeltaMissing if
    the running session cannot have them."""
    builder = SparkSession.builder.appName(app_name)
    # local[*], unless spark-submit launched us: it starts the JVM first and hands PySpark
    # its gateway port; forcing a master here would override its --master.
    chosen = master or (None if os.environ.get("PYSPARK_GATEWAY_PORT") else DEFAULT_MASTER)
    if chosen:
        builder = builder.master(chosen)
    local = (chosen or "").startswith("local")
    launching = SparkSession.getActiveSession() is None  # this call starts the JVM
    if launching and local:
        if "driver-memory" not in os.environ.get("PYSPARK_SUBMIT_ARGS", ""):  # not sized yet
            builder = builder.config("spark.driver.memory", local_driver_memory())
        # The report runs no Python on the executors; should anything start a
        # Python worker locally, it gets this interpreter, not the first on PATH.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if launching and delta:
        for key, value in DELTA_CONF.items():
            builder = builder.config(key, value)
    if launching and not os.environ.get("PYSPARK_GATEWAY_PORT"):
        # This process starts the driver's JVM (spark-submit's is running already):
        # local, or a cluster's driver.
        configured = _user_conf_keys()
        if delta and "delta-spark" not in configured:
            builder = builder.config("spark.jars.packages", delta_package()).config(
                "spark.jars.excludes", DELTA_EXCLUDES)
        java = LOCAL_JAVA_OPTIONS if local else CLUSTER_DRIVER_JAVA_OPTIONS
        if "log4j" not in configured:
            java += f" -Dlog4j2.configurationFile={LOG4J2_FILE}"
            java += f" -D{SPARK_LOG_PROPERTY}={spark_log or 'off'}"
        driver_conf = {**(LOCAL_CONF if local else {}), **QUIET_CONF,
                       "spark.driver.extraJavaOptions":
                       f"{java} {cds_options(cds_archive(delta=delta))}".strip()}
        for key, value in driver_conf.items():
            if key not in configured and "driver-java-options" not in configured:
                builder = builder.config(key, value)
        if DEBUGGING not in configured:
            builder = builder.config(DEBUGGING, "false")
        from pyspark import SparkContext

        if not local and EXECUTOR_JAVA_OPTIONS not in configured:
            builder = builder.config(EXECUTOR_JAVA_OPTIONS, COMPILE_HUGE_METHODS)
        if SparkContext._gateway is None:  # else a JVM runs already (a session stopped)
            launch = SparkConf()
            for key, value in builder._options.items():
                launch.set(key, value)
            _launch_jvm(launch)
    if launching and os.environ.get("PYSPARK_GATEWAY_PORT") and not (chosen or "").startswith(
            "local") and not SparkConf().contains(EXECUTOR_JAVA_OPTIONS):
        builder = builder.config(EXECUTOR_JAVA_OPTIONS, COMPILE_HUGE_METHODS)  # spark-submit
    # Log timestamps are UTC; so are windows, buckets and the tables written.
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    spark = builder.getOrCreate()
    if delta:
        check_delta(spark)
    if launching and spark_log in ("info", "debug"):  # below the root's warn
        spark.sparkContext.setLogLevel(spark_log.upper())
    conf = spark.sparkContext.getConf()
    if (spark.sparkContext.master or "").startswith("local"):
        # 200 shuffle partitions is a cluster default; on one machine it only adds tasks.
        _default(spark, conf, "spark.sql.shuffle.partitions", "8")
    # Spark keeps a cached plan's shuffle partitions as they are unless this is on: the
    # fine aggregation's cache then had 200 partitions of a few kB on a cluster, each
    # scanned by every table (thousands of tasks: bench/PIPELINE.md, "A cluster's cached
    # plan, and the local JVM's compilers").
    _default(spark, conf, "spark.sql.optimizer.canChangeCachedPlanOutputPartitioning", "true")
    # Spark packs small files into one task by their size on disk, but a rotated .gz
    # holds many times more lines than its size says: opening a file now costs as much
    # as a whole split, so each .gz is a task of its own (bench/PIPELINE.md, "Split
    # sizes and the cached plan's partitions").
    _default(spark, conf, "spark.sql.files.maxPartitionBytes", str(SPLIT_BYTES))
    _default(spark, conf, "spark.sql.files.openCostInBytes", str(SPLIT_BYTES))
    # Timestamps in Parquet as INT64 microseconds (what the log has, and what every
    # reader knows), not Spark's default INT96, which Parquet deprecated.
    _default(spark, conf, "spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    if delta and (spark.sparkContext.master or "").startswith("local"):
        # A Delta snapshot's log is replayed in 50 partitions and VACUUM lists files in
        # 10,000 tasks by default: cluster sizes, seconds of task overhead on one machine.
        _default(spark, conf, "spark.databricks.delta.snapshotPartitions", "2")
        _default(spark, conf, "spark.sql.sources.parallelPartitionDiscovery.parallelism",
                 "8")
    return spark


def _default(spark: SparkSession, conf: SparkConf, key: str, value: str) -> None:
    """Set a SQL option unless whoever launched Spark chose it."""
    if not conf.contains(key):
        spark.conf.set(key, value)


@contextlib.contextmanager
def session_conf(spark: SparkSession, settings: dict[str, str]) -> Iterator[None]:
    """The session with these SQL settings for a while, then as it was."""
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in before.items():
            spark.conf.unset(key) if old is None else spark.conf.set(key, old)
