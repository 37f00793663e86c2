"""The batch report: log files in, Parquet tables + report.html out.

Runs the same locally and on a cluster:
    kafkalens report LOGS... --out DIR [--master URL]
    python -m pipeline.report LOGS... --out DIR
    spark-submit --master yarn pipeline/report.py hdfs:///logs/kafkalens --out hdfs:///reports/x
(run as a file, this module makes its package importable itself, and ships it to the
Python workers, which read (local files), parse and fold the lines: executors need
Python with pyarrow, pandas, numpy and msgspec, see pipeline/README.md.) The driver
merges the workers' small partial aggregates and builds, writes and renders the
tables itself: two Spark jobs in all, not one per table.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

if not __package__:  # spark-submit pipeline/report.py: import the package, not its files
    # (run as a file, this directory heads sys.path and pipeline/html.py would hide the
    # standard library's html), so the repository root takes its place.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from pyspark.sql import SparkSession  # noqa: E402

from pipeline import html  # noqa: E402
from pipeline.fsio import write_parquet, write_text  # noqa: E402
from pipeline.merge import Merged, undecided_lines  # noqa: E402
from pipeline.read import expand_inputs, fallback_partials, line_partials  # noqa: E402
from pipeline.shipping import ship_package  # noqa: E402
from pipeline.summary import ReportResult, summary_lines  # noqa: E402
from pipeline.tables import TABLE_ORDER, build_tables, counts  # noqa: E402

HTML_ROWS = 50
# The series behind the charts: more rows than a table shows.
CHART_ROWS = {"latency_over_time": 5000, "api_usage": 5000}


def table_path(out: str, name: str) -> str:
    return f"{out.rstrip('/')}/{name}"


def render_html(result: ReportResult) -> str:
    from pipeline import charts  # matplotlib: preload_charts imports it at start

    shown = result.shown
    apis = [row["api"] for row in shown["latency_by_api"]]
    chart_list = [
        ("Latency by api over time", charts.latency_chart(shown["latency_over_time"], apis)),
        ("Requests by client software", charts.software_chart(shown["api_usage"])),
    ]
    tables = [
        (name, shown[name][:HTML_ROWS], result.table_rows[name])
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


def merge_partials(spark: SparkSession, inputs: list[str]) -> Merged:
    """Every line's partials merged in the driver: one job over the lines (the Python
    workers read, parse and fold them), then one small job for the lines only Spark's
    parser can judge. That job runs in the JVM while the driver merges the pass's
    partials (both took ~3 s at 10M lines, one after the other on one core), and its
    cold start is paid during the pass (warm_parser)."""
    merged = Merged()
    passed = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        warm = pool.submit(warm_parser, spark, passed)
        with pass_job_group(spark, passed):
            tables = list(line_partials(spark, inputs))
        warm.result()
        undecided = [line for table in tables for line in undecided_lines(table)]
        fallback = pool.submit(fallback_partials, spark, undecided)
        for table in tables:
            merged.add_table(table)
        merged.add_table(fallback.result())
    return merged


PASS_GROUP = "kafkalens-pass"
# A line of each kind Spark's parser judges: the warm-up plans what the real job runs.
WARM_UP_LINES = [("file:/warm-up", b'{"ts":"2025-03-01T12:00:00Z","event":"request"}'),
                 ("file:/warm-up", b"{")]


@contextmanager
def pass_job_group(spark: SparkSession, passed: threading.Event) -> Iterator[None]:
    """This thread's jobs inside are the pass's (PASS_GROUP); `passed` is set after."""
    spark.sparkContext.setJobGroup(PASS_GROUP, "kafkalens report: the pass over the lines")
    try:
        yield
    finally:
        passed.set()
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]


def pass_running(spark: SparkSession) -> bool:
    tracker = spark.sparkContext.statusTracker()
    return any((job := tracker.getJobInfo(i)) is not None and job.status == "RUNNING"
               for i in tracker.getJobIdsForGroup(PASS_GROUP))


def warm_parser(spark: SparkSession, passed: threading.Event) -> None:
    """Runs Spark's parse of the undecided lines once on lines of our own, its result
    dropped, while the pass over the lines runs. Cold, that job took ~3.8 s (planning
    and code generation on a fresh JVM) against ~0.9 s warm, all of it at the end of
    the report with one core idle; now most of it overlaps the pass. It waits for the
    pass's job to start, so that its tasks queue behind the pass's (FIFO) instead of
    delaying them, and gives up if the pass ends first (no input, or a failure)."""
    while not pass_running(spark):
        if passed.wait(0.05):
            return
    fallback_partials(spark, WARM_UP_LINES)


def run_report(spark: SparkSession, inputs: list[str], out: str) -> ReportResult:
    started = time.monotonic()
    found, missing = expand_inputs(spark, inputs)
    ship_package(spark)
    merged = merge_partials(spark, found)
    line_counts = counts(merged)
    tables = build_tables(merged, line_counts)
    for name, table in tables.items():
        write_parquet(spark, table.arrow(), table_path(out, name))
    result = ReportResult(out, found, missing, line_counts, time.monotonic() - started)
    for name, table in tables.items():
        result.table_rows[name] = len(table.rows)
        result.shown[name] = table.shown(CHART_ROWS.get(name, HTML_ROWS))
    write_text(spark, f"{out.rstrip('/')}/report.html", render_html(result))
    return result


if __name__ == "__main__":
    from pipeline.cli import report_main

    raise SystemExit(report_main(sys.argv[1:]))
