"""The batch report: log files in, Parquet tables + report.html out, the same locally and
on a cluster (`kafkalens report`, `python -m pipeline.report`, or `spark-submit
pipeline/report.py`: run as a file, it makes its package importable itself). Spark does
the work, with no Python on the executors: pipeline/README.md, "Report".
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
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
    count_columns,
    counts_of,
    sort_columns,
)

HTML_ROWS = 50
CHART_APIS = 6  # the busiest apis drawn in the latency chart
CHART_BARS = 15  # client software bars
# Tables are written from a few threads at once: each job is small next to Spark's
# per-job latency, and concurrent jobs keep the cores busy while another is scheduled.
PARALLEL_JOBS = 4
# Up to this many rows in the fine aggregation, every table is computed in one task from
# one partition of its cache: no shuffle, nothing to adapt or broadcast, each a job of
# its own otherwise (README, "One job per table"). Above it, shuffles spread the tables.
GATHER_ROWS = 2_000_000
GATHERED_CONF = {"spark.sql.adaptive.enabled": "false",
                 "spark.sql.autoBroadcastJoinThreshold": "-1"}
_ROW = "_kafkalens_row"


def _rows(df: DataFrame) -> list[dict[str, Any]]:
    return [row.asDict(recursive=True) for row in df.collect()]


def write_table(table: DataFrame, out: str, name: str,
                spread: bool = False) -> tuple[int, list[dict[str, Any]]]:
    """Writes a table, sorted, from one task (one file; the tables are aggregates), and
    gives back its row count and first HTML_ROWS rows, observed as they pass (no count
    or top-N job). A table computed by shuffles (`spread`) is shuffled to that task; one
    computed in one task already (GATHER_ROWS) goes on in it."""
    one = table.repartition(1) if spread else table.coalesce(1)
    ordered = one.sortWithinPartitions(*sort_columns(name)).withColumn(
        _ROW, F.monotonically_increasing_id())  # 0, 1, ... in the one task's order
    seen = Observation(f"rows_{name}")
    first = F.collect_list(F.when(F.col(_ROW) < HTML_ROWS, F.struct(_ROW, *table.columns)))
    ordered.observe(seen, F.count(F.lit(1)).alias("n"), first.alias("first")).drop(
        _ROW).write.mode("overwrite").parquet(f"{out.rstrip('/')}/{name}")
    got = seen.get
    shown = [row.asDict(recursive=True) for row in sorted(got["first"], key=lambda r: r[_ROW])]
    return int(got["n"]), [{k: v for k, v in row.items() if k != _ROW} for row in shown]


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


def _scan(spark: SparkSession, found: list[str]) -> tuple[DataFrame, Counts, int]:
    """The lines' one aggregation (fine.fine_rows), cached, the line counts and its
    number of rows: one pass that fills the cache and observes the counts as they
    pass (no count job), the only job that reads the files. A failure to read them (the
    cluster cannot see a file, no permission) is an InputError: one line for the
    user, not a Java stack."""
    try:
        fine = fine_rows(parse_lines(read_logs(spark, found)))
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
        raise InputError(f"cannot read the inputs: {first_line(e)}") from e


def _tables(fine: DataFrame, result: ReportResult, spread: bool) -> None:
    """Writes every table and fills `result` with what the html shows. `fine` is the
    cache, or (not `spread`) one partition of it: coalesce(1) of a cache is one task
    with no shuffle, and a plan over one partition needs none (its aggregations,
    windows and joins run in that task)."""
    # Four tables start from the connections' usage: computed once.
    usage = connection_usage(groups_of(fine)).persist(StorageLevel.MEMORY_AND_DISK)
    used = usage if spread else usage.coalesce(1)
    built = build_tables(fine, result.bucket_seconds, used)
    built["latency_over_time"].persist(StorageLevel.MEMORY_AND_DISK)  # the chart reads it
    try:
        with ThreadPoolExecutor(PARALLEL_JOBS) as pool:
            bars = pool.submit(_rows, software_bars(used))
            done = pool.map(lambda item: write_table(item[1], result.out, item[0], spread),
                            built.items())
            for name, (total, rows) in zip(built, done, strict=True):
                result.table_rows[name], result.shown[name] = total, rows
            result.series["software"] = bars.result()
        result.series["latency_over_time"] = _rows(latency_points(built, result))
    finally:
        for df in (*built.values(), usage):
            df.unpersist()


def run_report(spark: SparkSession, inputs: list[str], out: str) -> ReportResult:
    started = time.monotonic()
    found = expand_inputs(spark, inputs)
    cached, line_counts, fine_rows_n = _scan(spark, found)
    spread = fine_rows_n > GATHER_ROWS
    result = ReportResult(out, found, line_counts, 0.0)
    result.bucket_seconds = bucket_seconds(line_counts)
    try:
        with session_conf(spark, {} if spread else GATHERED_CONF):
            _tables(cached if spread else cached.coalesce(1), result, spread)
    finally:
        cached.unpersist()
    result.seconds = time.monotonic() - started
    write_text(spark, f"{out.rstrip('/')}/report.html", render_html(result))
    return result


if __name__ == "__main__":
    from pipeline.cli import report_main

    raise SystemExit(report_main(sys.argv[1:]))
