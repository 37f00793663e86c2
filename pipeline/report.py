"""The batch report: log files in, Parquet tables + report.html out, the same locally and
on a cluster (`kafkalens report`, or `spark-submit pipeline/cli.py report`: the command
lines are pipeline/cli.py's, the top of the package). Spark does the work, with no
Python on the executors: pipeline/README.md, "Report".
"""

from __future__ import annotations

import contextlib
import importlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark import StorageLevel
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from pipeline import html, small_tables, summary, utc
from pipeline.fine import fine_rows
from pipeline.fsio import check_writable, write_text
from pipeline.progress import Phases, duration, human_bytes, plural
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
from pipeline.schema import LINE_SCHEMA
from pipeline.sections import CHARTS, OTHER_APIS, PAGE_ORDER, SECTIONS
from pipeline.session import session_conf
from pipeline.summary import ReportResult
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
CHART_LINES = 6  # the apis (groups) drawn on their own in a chart over time
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
# their few rows never earned back: the tables take less time, over raw logs and over
# the ingested table, the same Parquet tables, and fine aggregations of millions of
# rows (bench.pipeline.report_inputs) take no longer (bench/PIPELINE.md, "The tables
# interpreted, not compiled") tests/pipeline/test_pipeline_tables_codegen.py holds it: a Spark that drops
# the setting fails it.
TABLES_CONF = {"spark.sql.adaptive.enabled": "false",
               "spark.sql.autoBroadcastJoinThreshold": "-1",
               "spark.sql.codegen.wholeStage": "false",
               "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
_ROW = "_kafkalens_row"
DRIVER, SPARK = "driver", "spark"  # who wrote a table (ReportResult.written_by)
Written = tuple[int, list[dict[str, Any]], str]  # rows, the first shown, DRIVER or SPARK


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


def write_small_or_large(table: DataFrame, out: str, name: str, bound: int) -> Written:
    """Writes one table as the report writes a family's (write_family, no charts):
    gives back its row count, its first rows and who wrote it (DRIVER or SPARK)."""
    return write_family({name: table}, (name,), out, bound, {})[0][name]


def chart_apis(by_api: list[dict[str, Any]]) -> list[str]:
    """The apis the charts over time draw on their own: the busiest and those with the
    most failures (latency_by_api's first rows, busiest first)."""
    busiest = [row["api"] for row in by_api[:CHART_LINES]]
    failing = sorted((row for row in by_api if row["errors"]),
                     key=lambda row: (-row["errors"], row["api"]))[:CHART_LINES]
    return list(dict.fromkeys(busiest + [row["api"] for row in failing]))


def over_time_points(tables: dict[str, DataFrame], shown: dict[str, list[dict[str, Any]]]
                     ) -> DataFrame:
    """Requests, failures and p95 per bucket of the chart_apis, the other apis summed."""
    over_time = tables["latency_over_time"]
    apis = chart_apis(shown["latency_by_api"])
    named = over_time.where(F.col("api").isin(apis)).select(
        "bucket", "api", "requests", "errors", "p95_ms")
    other = over_time.where(~F.col("api").isin(apis)).groupBy("bucket").agg(
        F.lit(OTHER_APIS).alias("api"), F.sum("requests").alias("requests"),
        F.sum("errors").alias("errors"), F.lit(None).cast("double").alias("p95_ms"))
    return named.unionByName(other).orderBy("bucket", "api")


def lag_points(tables: dict[str, DataFrame], shown: dict[str, list[dict[str, Any]]]
               ) -> DataFrame:
    """Lag per bucket of the groups with the largest lag."""
    per_group = tables["consumer_topic_lag"].groupBy("bucket", "group_id").agg(
        F.sum("total_lag").alias("lag"), F.max("group_known").alias("group_known"))
    worst = per_group.groupBy("group_id").agg(F.max("lag").alias("_worst")).orderBy(
        F.desc_nulls_last("_worst"), "group_id").limit(CHART_LINES)
    return per_group.join(worst, "group_id").select(
        "bucket", "group_id", "group_known", "lag").orderBy("bucket", "group_id")


def software_points(tables: dict[str, DataFrame], shown: dict[str, list[dict[str, Any]]]
                    ) -> DataFrame:
    """Clients per software version, the most first."""
    software = tables["client_inventory"].groupBy(
        "client_software_name", "client_software_version").agg(
        F.count(F.lit(1)).alias("clients"), F.sum("requests").alias("requests"))
    return software.orderBy(F.desc("clients"), F.desc("requests"), "client_software_name",
                            "client_software_version").limit(CHART_BARS)


# The charts' points, each bounded whatever the input (the tables' rows already
# aggregated), each read from the tables of one family: (how, the tables it reads,
# whether it reads the rows shown of them). Those that do not are rows of their
# family's one query (write_family); the others are collected by the thread that wrote
# that family, once it has, while the other families are still being written.
SERIES: dict[str, tuple[Any, tuple[str, ...], bool]] = {
    "over_time": (over_time_points, ("latency_over_time", "latency_by_api"), True),
    "lag": (lag_points, ("consumer_topic_lag",), False),
    "software": (software_points, ("client_inventory",), False),
}
assert all(any(set(needs) <= set(f) for f in FAMILIES) for _, needs, _ in SERIES.values())


def family_series(names: tuple[str, ...]) -> dict[str, tuple[Any, bool]]:
    """The charts that read only the tables `names` (SERIES: key -> how, whether it
    reads the rows shown)."""
    return {key: (points_of, shown_rows) for key, (points_of, needs, shown_rows)
            in SERIES.items() if set(needs) <= set(names)}


def write_family(tables: dict[str, DataFrame], names: tuple[str, ...], out: str, bound: int,
                 series: dict[str, tuple[Any, bool]]
                 ) -> tuple[dict[str, Written], dict[str, list[dict[str, Any]]]]:
    """Writes a family's tables and collects its charts' points: one query, one job,
    whose rows are every table (at most `bound` + 1 rows of each, sorted in one task)
    and the points of the charts that read only the family's tables
    (small_tables.union_of), collected as Arrow and split by the driver; a table
    within `bound` is written by the driver (small_tables.write_parquet), one past it
    by Spark's writer (write_table: computed again). Then the points of the charts
    that read rows shown of the tables. Without a bound, every table by Spark's
    writer, and each chart a query of its own. `series`: the family's charts (key ->
    how, whether it reads the rows shown: family_series)."""
    inline = [key for key, (_, shown_rows) in series.items() if bound > 0 and not shown_rows]
    written: dict[str, Written] = {}
    points: dict[str, list[dict[str, Any]]] = {}
    if bound > 0:
        ordered = [tables[name].coalesce(1).sortWithinPartitions(*sort_columns(name))
                   .limit(bound + 1) for name in names]
        charts = [series[key][0](tables, {}) for key in inline]
        schemas = [df.schema for df in ordered + charts]
        rows = small_tables.union_of(ordered + charts, schemas).toArrow()
        large = small_tables.large_types(tables[names[0]].sparkSession)
        for i, name in enumerate(names):
            mine = small_tables.branch_rows(rows, i, schemas[i], large)
            if mine.num_rows <= bound:
                small_tables.write_parquet(tables[name], mine, f"{out.rstrip('/')}/{name}")
                first = small_tables.python_rows(mine.slice(0, HTML_ROWS), schemas[i])
                written[name] = (mine.num_rows, first, DRIVER)
        for j, key in enumerate(inline, start=len(names)):
            points[key] = small_tables.python_rows(
                small_tables.branch_rows(rows, j, schemas[j], large), schemas[j])
    for name in names:
        if name not in written:
            written[name] = (*write_table(tables[name], out, name), SPARK)
    shown = {name: first for name, (_, first, _) in written.items()}
    for key, (points_of, _) in series.items():
        if key not in points:
            points[key] = _rows(points_of(tables, shown))
    return {name: written[name] for name in names}, points


def render_html(result: ReportResult) -> str:
    from pipeline import charts  # matplotlib: preload_imports imports it at start

    by_api = result.shown["latency_by_api"]
    busiest = [row["api"] for row in by_api[:CHART_LINES]]
    step = result.bucket_seconds
    over_time = result.series["over_time"]
    drawn = {
        "requests": charts.requests_chart(over_time, busiest, step),
        "errors": charts.errors_chart(over_time, step),
        "percentiles": charts.percentiles_chart(by_api),
        "latency": charts.latency_chart(over_time, busiest, step),
        "topics": charts.topics_chart(result.shown["top_topics"]),
        "lag": charts.lag_chart(result.series["lag"], step),
        "software": charts.software_chart(result.series["software"]),
    }
    story = summary.story(result)
    tables = [html.Table(name, SECTIONS[name], result.shown[name], result.table_rows[name])
              for name in PAGE_ORDER]
    inputs = ", ".join(result.inputs[:5]) + (
        f" and {len(result.inputs) - 5:,} more" if len(result.inputs) > 5 else "")
    footer = (f"kafkalens report over {inputs} ({plural(result.files, 'file')}). Times are UTC. "
              "Each table is also a Parquet directory beside this page, with every row.")
    page = html.Page(story.headline, story.traffic, story.attention, story.all_clear,
                     [(CHARTS[name], svg) for name, svg in drawn.items()], tables, footer)
    return html.render(page)


def preload_imports() -> None:
    """Imports matplotlib and pyarrow's Parquet writer (large imports: ~0.2 s for
    pyarrow.parquet, on the path to the first table otherwise) in a thread while the
    JVM starts, when the driver waits and one core is idle; render_html's and
    small_tables' imports then find them done."""

    def load() -> None:
        # DataFrame.toArrow imports pyspark.sql.pandas.types
        for name in ("pipeline.charts", "pyarrow.parquet", "pyspark.sql.pandas.types"):
            with contextlib.suppress(Exception):  # the users import it again and say why
                importlib.import_module(name)

    threading.Thread(target=load, name="kafkalens-preload-imports", daemon=True).start()


class ScanReadFailed(Exception):
    def __init__(self, failure: ReadFailure) -> None:
        super().__init__(f"{failure.path}: {failure.reason}")
        self.failure = failure


def _scan(spark: SparkSession, parsed: DataFrame, phases: Phases,
          fine: DataFrame | None = None
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
        # for logs of distinct bad lines (a row each), and built in the heap it kept a 1g
        # driver collecting garbage on millions of them (bench/PIPELINE.md, "One job
        # per table").
        fine = fine.persist(StorageLevel.DISK_ONLY)
        seen = Observation("lines")
        # The cached plan adapts its shuffle (planned by persist); reading it back does
        # not need to: adaptive there, the cache was filled by a job of its own.
        with session_conf(spark, {"spark.sql.adaptive.enabled": "false"}), \
                phases.running(spark, "reading and aggregating"):
            fine.observe(seen, *count_columns()).write.format("noop").mode("overwrite").save()
        got = seen.get
        return fine, counts_of(got), int(got["rows"])
    except (Py4JJavaError, PySparkException) as e:
        failure = read_failure(e)
        if failure is not None:
            raise ScanReadFailed(failure) from e
        raise InputError(f"cannot read the inputs: {first_line(e)}") from e


def _input_size(logs: DataFrame) -> str:
    """The input files' size, as Spark's file listing found it (no job), e.g. " (1.2
    GB)"; empty if the plan does not say."""
    try:
        size = int(str(logs._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
    except Exception:  # noqa: BLE001 - only said, never needed
        return ""
    return f" ({human_bytes(size)})"


def report_lines(logs: DataFrame) -> DataFrame:
    """The report's lines from read_logs, parsed as the ingest parses them: a line of a
    known event whose field has another type than the schema's is a line, that field
    null and named in `retyped` (evolve.py), not a bad line. So the report over the
    logs and over their ingested table count the same lines, bad lines and retyped
    ones (the scan's fine.fine_rows counts them in its `r` part)."""
    return parse_lines(logs, retype=LINE_SCHEMA)


def _read_all(spark: SparkSession, inputs: list[str], skip_unreadable: bool, phases: Phases
              ) -> tuple[list[str], dict[str, str], tuple[DataFrame, Counts, int]]:
    """The input files, those left out (file -> why) and the scan of the others. A
    file that cannot be read to its end stops the report (UnreadableFiles, every such
    file named) unless `skip_unreadable`; then the others are read again without it."""
    logs = read_logs(spark, expand_inputs(spark, inputs))
    files = [normal_path(path) for path in logs.inputFiles()]
    phases.say(f"reading {len(files):,} input file{'' if len(files) == 1 else 's'}"
               f"{_input_size(logs)} and aggregating their lines")
    try:
        return files, {}, _scan(spark, report_lines(logs), phases)
    except ScanReadFailed as e:
        phases.say(f"{e.failure.path} cannot be read to its end; looking for every such file")
        left_out = find_unreadable(spark, files, e.failure)
    if not skip_unreadable:
        raise UnreadableFiles(left_out)
    readable = [path for path in files if path not in left_out]
    phases.say(f"reading the {len(readable):,} other files again, without the "
               f"{len(left_out):,} that cannot be read")
    rest = read_logs(spark, readable, recursive=False) if readable else no_lines(spark)
    try:
        return files, left_out, _scan(spark, report_lines(rest), phases)
    except ScanReadFailed as e:  # a file that failed now, not before: say so, stop
        raise UnreadableFiles({**left_out, e.failure.path: e.failure.reason}) from e


def no_lines(spark: SparkSession) -> DataFrame:
    """read_logs' columns, no rows (every input file left out)."""
    return spark.range(0).select(*[F.lit(None).cast(f.dataType).alias(f.name)
                                   for f in LINE_SCHEMA.fields],
                                 F.lit(None).cast("string").alias("file"))


def table_partitions(spark: SparkSession, fine_rows_n: int) -> int:
    """How many partitions the tables are computed in (ROWS_PER_PARTITION)."""
    cores = spark.sparkContext.defaultParallelism
    return max(1, min(cores, -(-fine_rows_n // ROWS_PER_PARTITION)))


def _tables(spark: SparkSession, fine: DataFrame, result: ReportResult, files: list[str],
            partitions: int, bound: int) -> None:
    """Writes every table (those of at most `bound` rows by the driver) and fills
    `result` with what the html shows."""
    conf = {**TABLES_CONF, "spark.sql.shuffle.partitions": str(partitions)}
    with session_conf(spark, conf):
        built = build_tables(fine.coalesce(partitions), result.bucket_seconds, files,
                             result.counts, result.left_out)
        try:
            def family(names: tuple[str, ...]) -> tuple[
                    dict[str, Written], dict[str, list[dict[str, Any]]]]:
                return write_family(built.tables, names, result.out, bound,
                                    family_series(names))

            with ThreadPoolExecutor(PARALLEL_JOBS) as pool:
                done = list(pool.map(family, FAMILIES))
            for written, points in done:
                for name, (total, rows, writer) in written.items():
                    result.table_rows[name], result.shown[name] = total, rows
                    result.written_by[name] = writer
                result.series.update(points)
            result.series = {key: result.series[key] for key in SERIES}
        finally:
            for df in built.shared:
                df.unpersist()


def _read_table(spark: SparkSession, table: str, phases: Phases
                ) -> tuple[list[str], dict[str, str], tuple[DataFrame, Counts, int]]:
    """As _read_all, over a table `kafkalens ingest` wrote: its lines are parsed
    already; the files are those its lines came from and those the ingest left out."""
    from pipeline.ingest import TableError, read_table, unreadable_files
    from pipeline.rollup import READ_CONF, fine_of_table

    try:
        rows = read_table(spark, table)
        fine, _ = fine_of_table(spark, table)
    except TableError as e:
        raise InputError(str(e)) from e
    except (Py4JJavaError, PySparkException) as e:
        raise InputError(f"cannot read the table {table}: {first_line(e)}") from e
    left_out = unreadable_files(spark, table)
    phases.say(f"reading the table {table} and aggregating its lines")
    with session_conf(spark, READ_CONF):  # the files' splits are made as the scan runs
        scanned = _scan(spark, rows, phases, fine)
    files = sorted(scanned[1].files_with_lines | set(left_out))
    return files, left_out, scanned


def run_report(spark: SparkSession, inputs: list[str], out: str,
               skip_unreadable: bool = False, table: str | None = None,
               phases: Phases | None = None) -> ReportResult:
    """The report over log files (`inputs`) or over an ingested table (`table`);
    `phases` says what it is doing (pipeline.progress), silent by default."""
    phases = phases or Phases()
    started = time.monotonic()
    check_writable(spark, out)  # a Hadoop path's: a local one was checked before Spark
    bound = small_tables.driver_rows(spark)  # a bad setting said before the scan
    files, left_out, (cached, line_counts, fine_rows_n) = (
        _read_table(spark, table, phases) if table
        else _read_all(spark, inputs, skip_unreadable, phases))
    result = ReportResult(out, [table] if table else inputs, line_counts, 0.0, files=len(files),
                          left_out=left_out)
    result.scan_seconds = time.monotonic() - started
    result.bucket_seconds = bucket_seconds(line_counts)
    phases.say(f"{line_counts.lines:,} lines read ({line_counts.bad:,} bad) in "
               f"{duration(result.scan_seconds)}; writing {len(TABLE_ORDER)} tables into {out}")
    try:
        with phases.running(spark, "writing the tables"):
            _tables(spark, cached, result, files, table_partitions(spark, fine_rows_n), bound)
    finally:
        cached.unpersist()
    result.seconds = time.monotonic() - started
    by_spark = sum(writer == SPARK for writer in result.written_by.values())
    phases.say(f"tables written in {duration(result.seconds - result.scan_seconds)} "
               f"({len(result.written_by) - by_spark:,} small ones by the driver, "
               f"{by_spark:,} by Spark's writer); writing report.html")
    write_text(spark, f"{out.rstrip('/')}/report.html", render_html(result))
    result.seconds = time.monotonic() - started
    return result

