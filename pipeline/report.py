"""The batch report: log files in, Parquet tables + report.html out.

Runs the same locally and on a cluster:
    kafkalens report LOGS... --out DIR [--master URL]
    python -m pipeline.report LOGS... --out DIR
    spark-submit --master spark://host:7077 pipeline/report.py LOGS... --out DIR
(run as a file, this module makes its package importable itself.) Spark does the
work: its text source reads the logs, from_json parses each line once, one hash
aggregation folds the lines at a fine grain (fine.py, cached), DataFrame operations
derive every table from it and the executors write them. No
Python runs on the executors (no UDFs, no RDD functions, no Arrow maps), so a stock
cluster runs it; the driver collects only the rows report.html shows.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

if not __package__:  # spark-submit pipeline/report.py: import the package, not its files
    # (run as a file, this directory heads sys.path and pipeline/html.py would hide the
    # standard library's html), so the repository root takes its place.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from py4j.protocol import Py4JJavaError  # noqa: E402
from pyspark import StorageLevel  # noqa: E402
from pyspark.errors import PySparkException  # noqa: E402
from pyspark.sql import DataFrame, Observation, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from pipeline import html  # noqa: E402
from pipeline.clients import connection_usage, groups_of  # noqa: E402
from pipeline.fine import fine_rows  # noqa: E402
from pipeline.fsio import write_text  # noqa: E402
from pipeline.read import InputError, expand_inputs, first_line, parse_lines, read_logs  # noqa: E402
from pipeline.summary import ReportResult, summary_lines  # noqa: E402
from pipeline.tables import (  # noqa: E402
    TABLE_ORDER,
    Counts,
    bucket_seconds,
    build_tables,
    counts,
    sort_columns,
)

HTML_ROWS = 50
CHART_APIS = 6  # the busiest apis drawn in the latency chart
CHART_BARS = 15  # client software bars
# Tables are written from a few threads at once: each job is small next to Spark's
# per-job latency, and concurrent jobs keep the cores busy while another is scheduled.
PARALLEL_JOBS = 4


def table_path(out: str, name: str) -> str:
    return f"{out.rstrip('/')}/{name}"


def _rows(df: DataFrame) -> list[dict[str, Any]]:
    return [row.asDict(recursive=True) for row in df.collect()]


def write_table(table: DataFrame, out: str, name: str) -> tuple[int, list[dict[str, Any]]]:
    """Writes a table and gives back its row count and the first rows the html shows.

    `table` is persisted (small: an aggregate). Its first action, the bounded top-N
    collect, computes it from the fine aggregation's cache and fills its own; the write
    then reads that cache in one task (coalesce: no shuffle) and counts the rows as
    they pass (an observed metric: no count job, no reading the table back)."""
    shown = _rows(table.orderBy(*sort_columns(name)).limit(HTML_ROWS))
    rows = Observation(f"rows_{name}")
    # One sorted file per table: the tables are aggregates, small next to the logs, and
    # one file reads well downstream.
    ordered = table.observe(rows, F.count(F.lit(1)).alias("n")).coalesce(1)
    ordered.sortWithinPartitions(*sort_columns(name)).write.mode("overwrite").parquet(
        table_path(out, name))
    return int(rows.get["n"]), shown


def chart_series(tables: dict[str, DataFrame], result: ReportResult) -> None:
    """The charts' points, bounded: the busiest apis' buckets, the top software (from
    the tables' caches, not read back from what was written)."""
    apis = [row["api"] for row in result.shown["latency_by_api"][:CHART_APIS]]
    over_time = tables["latency_over_time"]
    usage = tables["api_usage"]
    software = usage.groupBy("client_software_name", "client_software_version").agg(
        F.sum("requests").alias("requests"))
    with ThreadPoolExecutor(2) as pool:
        points = pool.submit(_rows, over_time.where(F.col("api").isin(apis))
                             .orderBy("bucket", "api"))
        bars = pool.submit(_rows, software.orderBy(
            F.desc("requests"), "client_software_name", "client_software_version")
            .limit(CHART_BARS))
        result.series["latency_over_time"], result.series["software"] = (
            points.result(), bars.result())


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


def _scan(spark: SparkSession, found: list[str]) -> tuple[DataFrame, Counts]:
    """The lines' one aggregation (fine.fine_rows), cached, and the line counts: the
    only job that reads the files. A failure to read them (the cluster cannot see a
    file, no permission) is an InputError: one line for the user, not a Java stack."""
    try:
        fine = fine_rows(parse_lines(read_logs(spark, found)))
        fine = fine.persist(StorageLevel.MEMORY_AND_DISK)
        return fine, counts(fine)  # fills the cache
    except (Py4JJavaError, PySparkException) as e:
        raise InputError(f"cannot read the inputs: {first_line(e)}") from e


def run_report(spark: SparkSession, inputs: list[str], out: str) -> ReportResult:
    started = time.monotonic()
    found = expand_inputs(spark, inputs)
    fine, line_counts = _scan(spark, found)
    # Three tables start from the connections' usage: computed once.
    usage = connection_usage(groups_of(fine)).persist(StorageLevel.MEMORY_AND_DISK)
    # Every table is cached before any runs: a table derived from another (the topic
    # lag from the partition lag) and the charts read the cache, not the fine rows.
    built = {name: df.persist(StorageLevel.MEMORY_AND_DISK)
             for name, df in build_tables(fine, line_counts, usage).items()}
    result = ReportResult(out, found, line_counts, 0.0)
    result.bucket_seconds = bucket_seconds(line_counts)
    try:
        with ThreadPoolExecutor(PARALLEL_JOBS) as pool:
            done = pool.map(lambda item: write_table(item[1], out, item[0]), built.items())
            for name, (total, rows) in zip(built, done, strict=True):
                result.table_rows[name], result.shown[name] = total, rows
        chart_series(built, result)
    finally:
        for df in (*built.values(), usage, fine):
            df.unpersist()
    result.seconds = time.monotonic() - started
    write_text(spark, f"{out.rstrip('/')}/report.html", render_html(result))
    return result


if __name__ == "__main__":
    from pipeline.cli import report_main

    raise SystemExit(report_main(sys.argv[1:]))
