"""The batch report: log files in, Parquet tables + report.html out, the same locally and
on a cluster (`kafkalens report`, or `spark-submit pipeline/cli.py report`: the command
lines are pipeline/cli.py's, the top of the package). Spark does the work, with no
Python on the executors: pipeline/README.md, "Report".
"""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark import StorageLevel
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from pipeline import html, utc
from pipeline.fine import fine_rows
from pipeline.fsio import write_text
from pipeline.read import (
    InputError,
    ReadFailure,
    UnreadableFiles,
    expand_inputs,
    find_unreadable,
    first_line,
    normal_path,
    parse_lines,
    read_failure,
    read_logs,
)
from pipeline.session import session_conf
from pipeline.summary import ReportResult, summary_lines
from pipeline.tables import (
    FAMILIES,
    TABLE_ORDER,
    Counts,
    bucket_seconds,
    build_tables,
    count_columns,
    counts_of,
    sort_columns,
)

HTML_ROWS = 50
CHART_APIS = 6  # the busiest apis drawn in the latency chart
CHART_BARS = 15  # client software bars
# Tables are written from a few threads at once (a family of tables each, FAMILIES):
# each job is small next to Spark's per-job latency, and concurrent jobs keep the cores
# busy while another is scheduled.
PARALLEL_JOBS = len(FAMILIES)
# The tables are computed from the fine aggregation in one partition per this many of
# its rows (at least one, at most the cluster's cores): one partition needs no shuffle
# for any aggregation, window or join, so a small report's table is one job of one
# task; a larger one's are spread by shuffles into that many partitions. Adaptive
# execution is off meanwhile (it would make each shuffle a job of its own, and read
# the cache in a job of its own), and so are broadcast joins (each a job to collect a
# side). README, "How the report works".
ROWS_PER_PARTITION = 500_000
# The tables' queries are also interpreted, not compiled: no whole-stage code, and no
# generated code for their expressions, projections and orderings (factoryMode, a
# setting Spark marks internal and its own test suites use to run the interpreted
# path). Each of the ~20 queries generated classes of its own (426 for a small
# report's tables, 49 without: Spark generates those whatever the setting), which
# Janino compiled and the JVM then interpreted and JIT-compiled, a cost per query that
# their few rows never earned back. Measured with the arms interleaved
# (bench/PIPELINE.md): tables 25.5 and 25.1 s -> 17.9 and 17.1 s at 5M lines,
# 25.1 and 28.9 -> 18.6 and 23.0 s over the ingested table, the same Parquet tables;
# on fine aggregations of 3M and 200k rows (bench.pipeline.report_inputs) a wash (37.5-48.7 s
# either way). tests/pipeline/test_pipeline_tables_codegen.py holds it: a Spark that drops
# the setting fails it.
TABLES_CONF = {"spark.sql.adaptive.enabled": "false",
               "spark.sql.autoBroadcastJoinThreshold": "-1",
               "spark.sql.codegen.wholeStage": "false",
               "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
_ROW = "_kafkalens_row"


def _rows(df: DataFrame) -> list[dict[str, Any]]:
    return utc.collect(df)  # timestamps as UTC, whatever the driver's zone


def write_table(table: DataFrame, out: str, name: str) -> tuple[int, list[dict[str, Any]]]:
    """Writes a table, sorted, from one task (one file; the tables are aggregates), and
    gives back its row count and first HTML_ROWS rows, observed as they pass (no count
    or top-N job)."""
    ordered = table.coalesce(1).sortWithinPartitions(*sort_columns(name)).withColumn(
        _ROW, F.monotonically_increasing_id())  # 0, 1, ... in the one task's order
    seen = Observation(f"rows_{name}")
    columns, times = utc.crossing_columns(table.schema)  # timestamps as epoch micros
    first = F.collect_list(F.when(F.col(_ROW) < HTML_ROWS, F.struct(_ROW, *columns)))
    ordered.observe(seen, F.count(F.lit(1)).alias("n"), first.alias("first")).drop(
        _ROW).write.mode("overwrite").parquet(f"{out.rstrip('/')}/{name}")
    got = seen.get
    shown = [utc.restore(row.asDict(recursive=True), times)
             for row in sorted(got["first"], key=lambda r: r[_ROW])]
    return int(got["n"]), [{k: v for k, v in row.items() if k != _ROW} for row in shown]


def software_bars(usage: DataFrame) -> DataFrame:
    """The software chart's bars: requests per client software, the busiest first."""
    software = usage.groupBy("client_software_name", "client_software_version").agg(
        F.sum("requests").alias("requests"))
    return software.orderBy(F.desc("requests"), "client_software_name",
                            "client_software_version").limit(CHART_BARS)


def latency_points(tables: dict[str, DataFrame], result: ReportResult) -> DataFrame:
    """The latency chart's points: the busiest apis' buckets (bounded)."""
    apis = [row["api"] for row in result.shown["latency_by_api"][:CHART_APIS]]
    return tables["latency_over_time"].where(F.col("api").isin(apis)).orderBy("bucket", "api")


def render_html(result: ReportResult) -> str:
    from pipeline import charts  # matplotlib: preload_charts imports it at start

    apis = [row["api"] for row in result.shown["latency_by_api"][:CHART_APIS]]
    chart_list = [
        ("Service latency by api over time",
         charts.latency_chart(result.series["latency_over_time"], apis, result.bucket_seconds)),
        ("Requests by client software", charts.software_chart(result.series["software"])),
    ]
    tables = [
        (name, result.shown[name], result.table_rows[name])
        for name in TABLE_ORDER
        if name != "latency_over_time"
    ]
    return html.render(summary_lines(result), chart_list, tables)


def preload_charts() -> None:
    """Imports matplotlib (~0.7 s of one core) in a thread while the JVM starts, when
    the driver waits and one core is idle; render_html's import then finds it done."""

    def load() -> None:
        with contextlib.suppress(Exception):  # render_html imports it again and says why
            import pipeline.charts  # noqa: F401

    threading.Thread(target=load, name="kafkalens-preload-charts", daemon=True).start()


class ScanReadFailed(Exception):
    def __init__(self, failure: ReadFailure) -> None:
        super().__init__(f"{failure.path}: {failure.reason}")
        self.failure = failure


def _scan(spark: SparkSession, parsed: DataFrame, fine: DataFrame | None = None
          ) -> tuple[DataFrame, Counts, int]:
    """The lines' one aggregation (fine.fine_rows), cached, the line counts and its
    number of rows: one pass that fills the cache and observes the counts as they
    pass (no count job), the only job that reads the files. A file it cannot read to
    its end raises ScanReadFailed (naming it); another failure is an InputError: one
    line for the user, not a Java stack. `fine`: the aggregation made otherwise (an
    ingested table's, from its rollup and its lines: rollup.py)."""
    try:
        fine = fine_rows(parsed) if fine is None else fine
        # On disk only: the aggregation is small for most logs but as large as the input
        # for logs of distinct bad lines (a row each), and built in the heap it made a
        # 1g driver collect garbage for 12+ minutes on 3M of them (on disk: 159-314 s).
        fine = fine.persist(StorageLevel.DISK_ONLY)
        seen = Observation("lines")
        # The cached plan adapts its shuffle (planned by persist); reading it back does
        # not need to: adaptive there, the cache was filled by a job of its own.
        with session_conf(spark, {"spark.sql.adaptive.enabled": "false"}):
            fine.observe(seen, *count_columns()).write.format("noop").mode("overwrite").save()
        got = seen.get
        return fine, counts_of(got), int(got["rows"])
    except (Py4JJavaError, PySparkException) as e:
        failure = read_failure(e)
        if failure is not None:
            raise ScanReadFailed(failure) from e
        raise InputError(f"cannot read the inputs: {first_line(e)}") from e


def _read_all(spark: SparkSession, inputs: list[str], skip_unreadable: bool
              ) -> tuple[list[str], dict[str, str], tuple[DataFrame, Counts, int]]:
    """The input files, those left out (file -> why) and the scan of the others. A
    file that cannot be read to its end stops the report (UnreadableFiles, every such
    file named) unless `skip_unreadable`; then the others are read again without it."""
    logs = read_logs(spark, expand_inputs(spark, inputs))
    files = [normal_path(path) for path in logs.inputFiles()]
    try:
        return files, {}, _scan(spark, parse_lines(logs))
    except ScanReadFailed as e:
        left_out = find_unreadable(spark, files, e.failure)
    if not skip_unreadable:
        raise UnreadableFiles(left_out)
    readable = [path for path in files if path not in left_out]
    rest = read_logs(spark, readable, recursive=False) if readable else no_lines(spark)
    try:
        return files, left_out, _scan(spark, parse_lines(rest))
    except ScanReadFailed as e:  # a file that failed now, not before: say so, stop
        raise UnreadableFiles({**left_out, e.failure.path: e.failure.reason}) from e


def no_lines(spark: SparkSession) -> DataFrame:
    """read_logs' columns, no rows (every input file left out)."""
    from pipeline.schema import LINE_SCHEMA

    return spark.range(0).select(*[F.lit(None).cast(f.dataType).alias(f.name)
                                   for f in LINE_SCHEMA.fields],
                                 F.lit(None).cast("string").alias("file"))


def table_partitions(spark: SparkSession, fine_rows_n: int) -> int:
    """How many partitions the tables are computed in (ROWS_PER_PARTITION)."""
    cores = spark.sparkContext.defaultParallelism
    return max(1, min(cores, -(-fine_rows_n // ROWS_PER_PARTITION)))


def _tables(spark: SparkSession, fine: DataFrame, result: ReportResult, files: list[str],
            partitions: int) -> None:
    """Writes every table and fills `result` with what the html shows."""
    conf = {**TABLES_CONF, "spark.sql.shuffle.partitions": str(partitions)}
    with session_conf(spark, conf):
        built = build_tables(fine.coalesce(partitions), result.bucket_seconds, files,
                             result.counts, result.left_out)
        try:
            def family(names: tuple[str, ...]) -> list[tuple[int, list[dict[str, Any]]]]:
                return [write_table(built.tables[name], result.out, name) for name in names]

            with ThreadPoolExecutor(PARALLEL_JOBS) as pool:
                done = list(pool.map(family, FAMILIES))
                for names, written in zip(FAMILIES, done, strict=True):
                    for name, (total, rows) in zip(names, written, strict=True):
                        result.table_rows[name], result.shown[name] = total, rows
            usage = built.shared[0]
            result.series["software"] = _rows(software_bars(usage))
            result.series["latency_over_time"] = _rows(latency_points(built.tables, result))
        finally:
            for df in built.shared:
                df.unpersist()


def _read_table(spark: SparkSession, table: str
                ) -> tuple[list[str], dict[str, str], tuple[DataFrame, Counts, int]]:
    """As _read_all, over a table `kafkalens ingest` wrote: its lines are parsed
    already; the files are those its lines came from and those the ingest left out."""
    from pipeline.ingest import TableError, read_table, unreadable_files
    from pipeline.rollup import fine_of_table

    try:
        rows = read_table(spark, table)
        fine, _ = fine_of_table(spark, table)
    except TableError as e:
        raise InputError(str(e)) from e
    except (Py4JJavaError, PySparkException) as e:
        raise InputError(f"cannot read the table {table}: {first_line(e)}") from e
    left_out = unreadable_files(spark, table)
    scanned = _scan(spark, rows, fine)
    files = sorted(scanned[1].files_with_lines | set(left_out))
    return files, left_out, scanned


def run_report(spark: SparkSession, inputs: list[str], out: str,
               skip_unreadable: bool = False, table: str | None = None) -> ReportResult:
    """The report over log files (`inputs`) or over an ingested table (`table`)."""
    started = time.monotonic()
    files, left_out, (cached, line_counts, fine_rows_n) = (
        _read_table(spark, table) if table else _read_all(spark, inputs, skip_unreadable))
    result = ReportResult(out, [table] if table else inputs, line_counts, 0.0, files=len(files),
                          left_out=left_out)
    result.scan_seconds = time.monotonic() - started
    result.bucket_seconds = bucket_seconds(line_counts)
    try:
        _tables(spark, cached, result, files, table_partitions(spark, fine_rows_n))
    finally:
        cached.unpersist()
    result.seconds = time.monotonic() - started
    write_text(spark, f"{out.rstrip('/')}/report.html", render_html(result))
    result.seconds = time.monotonic() - started
    return result

