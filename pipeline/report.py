"""The batch report: log files in, Parquet tables + report.html out.

Runs the same locally and on a cluster:
    kafkalens report LOGS... --out DIR [--master URL]
    python -m pipeline.report LOGS... --out DIR
    spark-submit --master yarn pipeline/report.py hdfs:///logs/kafkalens --out hdfs:///reports/x
(run as a file, this module makes its package importable itself, and ships it to the
Python workers, which parse and fold the lines (mapInArrow): executors need Python
with pyarrow, pandas and msgspec, see pipeline/README.md.)
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

if not __package__:  # spark-submit pipeline/report.py: import the package, not its files
    # (run as a file, this directory heads sys.path and pipeline/html.py would hide the
    # standard library's html), so the repository root takes its place.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from pyspark import StorageLevel  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402

from pipeline import charts, html  # noqa: E402
from pipeline.clients import connection_usage, request_groups  # noqa: E402
from pipeline.fsio import write_text  # noqa: E402
from pipeline.read import expand_inputs, line_partials, read_lines, text_partials  # noqa: E402
from pipeline.shipping import ship_package  # noqa: E402
from pipeline.summary import ReportResult, summary_lines  # noqa: E402
from pipeline.tables import (  # noqa: E402
    TABLE_ORDER,
    build_tables,
    counts,
    kind,
    sort_columns,
)

HTML_ROWS = 50
# Tables are written from a few threads at once: each job is small next to Spark's
# per-job latency, and concurrent jobs keep the cores busy while another is scheduled.
PARALLEL_JOBS = 4


def table_path(out: str, name: str) -> str:
    return f"{out.rstrip('/')}/{name}"


def write_table(df: DataFrame, out: str, name: str) -> None:
    # One sorted file per table: the tables are aggregates, small next to the logs, so
    # their last stage can run as one task (coalesce: no extra shuffle).
    sorted_df = df.coalesce(1).sortWithinPartitions(*sort_columns(name))
    sorted_df.write.mode("overwrite").parquet(table_path(out, name))


def _read_back(spark: SparkSession, out: str, name: str) -> tuple[int, list[dict]]:
    """A written table's row count and first rows (for the html and the console)."""
    table = spark.read.parquet(table_path(out, name))
    limit = 5000 if name in ("latency_over_time", "api_usage") else HTML_ROWS
    rows = table.orderBy(*sort_columns(name)).limit(limit + 1).collect()
    # Counting costs another job; only a table longer than what we show needs it.
    total = len(rows) if len(rows) <= limit else table.count()
    return total, [row.asDict(recursive=True) for row in rows[:limit]]


def render_html(result: ReportResult) -> str:
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


def run_report(spark: SparkSession, inputs: list[str], out: str) -> ReportResult:
    started = time.monotonic()
    found, missing = expand_inputs(spark, inputs)
    ship_package(spark)
    # One Python pass folds every line into small partial aggregates (partials.py);
    # the tables merge those instead of caching and scanning every parsed line.
    text = text_partials(read_lines(spark, found)).persist(StorageLevel.MEMORY_AND_DISK)
    partials = line_partials(text).persist(StorageLevel.MEMORY_AND_DISK)
    # Small (a row per connection, api version and identity): four tables start there.
    groups = request_groups(kind(partials, "g")).persist(StorageLevel.MEMORY_AND_DISK)
    usage = connection_usage(groups).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        line_counts = counts(partials)  # fills the partials' cache: the pass over the lines
        text.unpersist()
        # Filled before the tables' jobs start: concurrent jobs reaching an unfilled
        # cache would each compute it.
        usage.count()
        built = build_tables(spark, partials, line_counts, groups, usage)
        with ThreadPoolExecutor(PARALLEL_JOBS) as pool:
            list(pool.map(lambda item: write_table(item[1], out, item[0]), built.items()))
    finally:
        usage.unpersist()
        groups.unpersist()
        partials.unpersist()
        text.unpersist()
    result = ReportResult(out, found, missing, line_counts, time.monotonic() - started)
    with ThreadPoolExecutor(PARALLEL_JOBS) as pool:
        for name, (total, rows) in zip(
            TABLE_ORDER, pool.map(lambda n: _read_back(spark, out, n), TABLE_ORDER), strict=True
        ):
            result.table_rows[name], result.shown[name] = total, rows
    write_text(spark, f"{out.rstrip('/')}/report.html", render_html(result))
    return result


if __name__ == "__main__":
    from pipeline.cli import report_main

    raise SystemExit(report_main(sys.argv[1:]))
