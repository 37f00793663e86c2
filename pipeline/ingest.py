"""`kafkalens ingest`: the JSON logs parsed once, into a Delta Lake table partitioned by
time that `report --table` and `watch --table` read instead of the logs.

A Structured Streaming query: Spark's JSON source over the rotated files (staged in a
spool as `watch` stages them, follow.py), each line parsed as the report parses it
(read.parse_lines), written by Delta's streaming sink as zstd Parquet partitioned by
`kind` (`lines`, or `bad_lines`: the quarantine, each bad line with its file and
reason), `date` and `hour` (UTC, of the line's ts; of its file's modification time when
the line has none). Delta's transaction log (TABLE/_delta_log) says which files make
the table; a batch is one transaction, recorded with the query's id and the batch's
number, so a batch Spark runs again after a crash is not written twice; every reader
of the log (Spark, delta-rs and what reads through it: DuckDB, pyarrow, Trino ...)
sees whole batches only. Small files are compacted by the ingest as they pile up
(Delta's auto compaction) and by `--compact`, which also vacuums (pipeline/README.md,
"Ingest").
"""

from __future__ import annotations

import glob
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from pipeline import follow, fsio
from pipeline.evolve import RETYPED, Evolution, described
from pipeline.read import PARSED_EXTRA, PARSED_FIELDS, normal_path, parse_lines, parsed_columns
from pipeline.schema import LINE_SCHEMA
from pipeline.session import session_conf
from pipeline.spool import Unreadable

PARTITIONS = ["kind", "date", "hour"]
LINES, BAD_LINES = "lines", "bad_lines"  # the `kind` partitions (bad_lines: the quarantine)
UNREADABLE_FILES = "_unreadable_files.jsonl"  # files the ingest left out, and why
DELTA_LOG = "_delta_log"
OLD_SINK_LOG = "_spark_metadata"  # the Parquet table of an older kafkalens (--convert)
# A batch run reads several rotated files per micro-batch: fewer, larger Parquet files.
FILES_PER_TRIGGER = 8
INTERVAL_SECONDS = 60.0
COMPRESSION = "zstd"  # the table's Parquet files
# A task's lines span a few partitions (kind, date, hour): a Parquet writer open for
# each as its rows come, instead of Spark's default of sorting every row of the task
# by partition before writing (up to this many open at once; more: it sorts).
# Optimized writes (Delta's optimizeWrite): a batch's rows are gathered by partition
# (one shuffle) before they are written, so a batch adds one file to each partition
# its lines fall in, not one per task (a file per rotated file read: gzip files are
# not split). Without it, a --once run of 1M lines over 7 hours wrote 42 files and auto
# compaction then read and wrote all of them again: 15.9 s of tasks' CPU and 14.5 s of
# wall time against the shuffle's few seconds (bench/PIPELINE.md, "Where the ingest's
# time goes").
# Auto compaction (the table's delta.autoOptimize.autoCompact): after a batch commits,
# a partition it wrote to that holds at least this many files under Delta's small-file
# size is compacted into fewer, in a transaction of its own (readers are not disturbed:
# it changes no row, and `watch --table` skips it). Each micro-batch adds a file to
# each partition its rows fall in, so a continuous ingest would otherwise add
# hundreds a day (the quarantine's among them: a few bad lines each).
COMPACT_AFTER_FILES = 16
WRITE_CONF = {"spark.sql.maxConcurrentOutputFileWriters": "16",
              "spark.sql.parquet.compression.codec": COMPRESSION,
              "spark.databricks.delta.optimizeWrite.enabled": "true",
              "spark.databricks.delta.autoCompact.minNumFiles": str(COMPACT_AFTER_FILES)}
# File statistics (min, max, nulls per column, in each file's log entry) on the first
# column only, `ts`: what a reader skips files by beside the partitions. Delta's default,
# the first 32 columns (long text and nested values among them), is work on every row
# for statistics no reader of this table uses (its measured cost: bench/PIPELINE.md,
# "Where the ingest's time goes").
STATS_COLUMNS = 1
TABLE_PROPERTIES = {"delta.autoOptimize.autoCompact": "true",
                    "delta.dataSkippingNumIndexedCols": str(STATS_COLUMNS)}
# How long VACUUM keeps the files compaction replaced (for readers still on an older
# version, and time travel), unless --retention says: Delta's own default.
DEFAULT_RETENTION = "7d"
# Parquet's row groups (its writer's `parquet.block.size`, as its writer estimates the
# rows' size in memory) of at most this much: a Parquet file is split between tasks only
# at row groups, and a compacted hour is one file, which Parquet's default of 128 MB
# made one row group for the benchmark's logs, so the report aggregated the hour it
# reads from lines (the newest, not rolled up) in one task, on one core; in row groups
# of this size the report's tasks share it (rollup.READ_CONF), for files a little
# larger (bench/PIPELINE.md, "The report over the table, step by step").
ROW_GROUP_BYTES = 4 * 2**20
WRITE_CONF["parquet.block.size"] = str(ROW_GROUP_BYTES)


class TableError(Exception):
    """TABLE is not a table the ingest can write (one line for the user)."""


@dataclass(frozen=True)
class IngestOptions:
    logdir: str | None
    table: str
    checkpoint: str | None = None
    spool: str | None = None
    use_spool: bool = True
    pattern: str = follow.DEFAULT_PATTERN
    once: bool = False
    interval: float = INTERVAL_SECONDS
    max_files_per_trigger: int = FILES_PER_TRIGGER
    notice_every: float = follow.NOTICE_SECONDS
    skip_unreadable: bool = False
    retention: str | None = None
    compact: bool = False
    convert: bool = False

    @property
    def checkpoint_dir(self) -> str:
        return self.checkpoint or f"{self.table.rstrip('/')}/_checkpoint"

    @property
    def spool_dir(self) -> str:
        return self.spool or f"{self.table.rstrip('/')}/_spool"

    @property
    def spooled(self) -> bool:
        return self.use_spool

    @property
    def table_source(self) -> str | None:
        return None


def table_rows(parsed: DataFrame, extra: list[str] | None = None) -> DataFrame:
    """parse_lines' columns (with `file_mtime`) as the table holds them: the partition
    columns added, `file_mtime` dropped; with `extra` (the new fields, evolve.py),
    `retyped` and those fields too."""
    when = F.coalesce(F.col("ts"), F.col("file_mtime"))
    evolved = [] if extra is None else [RETYPED, *extra]
    return parsed.select(
        *PARSED_FIELDS, *PARSED_EXTRA, *evolved,
        F.when(F.col("bad_reason").isNull(), F.lit(LINES)).otherwise(F.lit(BAD_LINES))
        .alias("kind"),
        F.date_format(when, "yyyy-MM-dd").alias("date"),
        F.hour(when).alias("hour"))


def table_schema(spark: SparkSession) -> StructType:
    """The table's schema: parse_lines' columns (`retyped` among them), then the
    partition columns (new fields come after them: evolve.py)."""
    empty = spark.range(0).select(*[F.lit(None).cast(f.dataType).alias(f.name)
                                    for f in LINE_SCHEMA.fields],
                                  F.lit(None).cast("string").alias("file"))
    parsed = parse_lines(empty, retype=LINE_SCHEMA).schema
    return StructType([*parsed.fields, StructField("kind", StringType()),
                       StructField("date", StringType()), StructField("hour", IntegerType())])


def is_delta(spark: SparkSession, table: str) -> bool:
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, table))


def _exists(spark: SparkSession, path: str) -> bool:
    fs, hadoop_path = fsio.hadoop_file(spark, path)
    return bool(fs.exists(hadoop_path))


def read_table(spark: SparkSession, table: str) -> DataFrame:
    """The ingested lines as parse_lines gives them, `retyped` too (the table's current
    version)."""
    if not is_delta(spark, table):
        raise TableError(_not_delta(spark, table))
    rows = spark.read.format("delta").load(table)
    return rows.select(*parsed_columns(rows))


def table_stream(spark: SparkSession, table: str, max_files: int) -> DataFrame:
    """The ingested lines as they are committed, streaming (Delta's source: whole
    transactions, and none of compaction's, which change no row), as parse_lines
    gives them (`retyped` too)."""
    if not is_delta(spark, table):
        raise TableError(_not_delta(spark, table))
    rows = spark.readStream.format("delta").option("maxFilesPerTrigger", max_files).load(table)
    return rows.select(*parsed_columns(rows))


def _not_delta(spark: SparkSession, table: str) -> str:
    if _exists(spark, f"{table.rstrip('/')}/{OLD_SINK_LOG}"):
        return (f"{table} is a table of an older kafkalens (Parquet files and Spark's sink "
                f"log): convert it once, in place, with `kafkalens ingest --convert --table "
                f"{table}`")
    return f"{table} is not a table `kafkalens ingest` wrote (no {DELTA_LOG} there)"


def create_table(spark: SparkSession, table: str) -> None:
    """An empty table with the ingest's schema, partitions and properties (if none is
    there); TableError if TABLE holds something else."""
    from delta.tables import DeltaTable

    if is_delta(spark, table):
        return
    if _exists(spark, f"{table.rstrip('/')}/{OLD_SINK_LOG}"):
        raise TableError(_not_delta(spark, table))
    builder = DeltaTable.createIfNotExists(spark).location(table).addColumns(
        table_schema(spark)).partitionedBy(*PARTITIONS)
    for key, value in TABLE_PROPERTIES.items():
        builder = builder.property(key, value)
    builder.execute()


def unreadable_files(spark: SparkSession, table: str) -> dict[str, str]:
    """The files the ingest left out (--skip-unreadable): file -> why."""
    path = f"{table.rstrip('/')}/{UNREADABLE_FILES}"
    fs, hadoop_path = fsio.hadoop_file(spark, path)
    if not fs.exists(hadoop_path):
        return {}
    entries = [json.loads(line) for line in fsio.read_text(spark, path).splitlines() if line]
    return {e["file"]: e["reason"] for e in entries}


def record_unreadable(spark: SparkSession, o: IngestOptions, found: list[Unreadable]) -> None:
    """Add files left out to TABLE/_unreadable_files.jsonl (a file of the driver's:
    a handful of lines, rewritten whole)."""
    known = unreadable_files(spark, o.table)
    for u in found:
        known[normal_path(str(Path(u.path).resolve()))] = u.reason
    text = "".join(json.dumps({"file": f, "reason": r, "recorded": time.time()}) + "\n"
                   for f, r in sorted(known.items()))
    fsio.write_text(spark, f"{o.table.rstrip('/')}/{UNREADABLE_FILES}", text)


@dataclass
class Tally:
    """What this run wrote: a line per batch that wrote lines, the sum at the end. The
    counts are the batches' progress reports' (`numInputRows`): counting bad lines or
    files as they pass (Spark's `observe`) cost the ingest more than it is worth
    (bench/PIPELINE.md, "Counting what the ingest writes"), so the report over the table
    says those."""

    table: str
    lines: int = 0
    batches: int = 0

    def add(self, reports: list[dict[str, Any]]) -> None:
        for report in reports:
            lines = report.get("numInputRows") or 0
            if not lines:
                continue
            self.lines += lines
            self.batches += 1
            print(f"kafkalens ingest: batch {report['batchId']}: {lines:,} lines written to "
                  f"{self.table}", file=sys.stderr, flush=True)

    def done(self, o: IngestOptions) -> str:
        """The --once run's last line: what it wrote, and what it did not read and why."""
        if self.lines:
            batches = follow.counted(self.batches, "batch")
            wrote = (f"{self.lines:,} lines in {batches} written to {o.table}; `kafkalens "
                     f"report --table {o.table}` reads them")
        else:
            wrote = (f"nothing new to read (no file matching {o.pattern} in {o.logdir} that "
                     f"an earlier run has not read)")
        return f"kafkalens ingest: done: {wrote}{follow.not_read_yet(o)}"


def evolution(spark: SparkSession, table: str) -> Evolution:
    """The read schema's state: the table's columns, those beyond the ingest's own
    being new fields stored before."""
    own = table_schema(spark)
    columns = spark.read.format("delta").load(table).schema
    names = {name.lower() for name in own.fieldNames()}
    stored = StructType([f for f in columns.fields if f.name.lower() not in names])
    return Evolution(own.fieldNames(), stored)


def waiting_files(o: IngestOptions) -> list[Path]:
    """The files the query may read next, where the driver can sample them: LOGDIR's
    rotated files (when local) and the spool's staged ones."""
    rotated: list[Path] = []
    if o.logdir is not None and fsio.is_local(o.logdir):
        # LOGDIR may be a glob of directories (--no-spool 'logs/*'), as Spark reads it
        for found in sorted(glob.glob(o.logdir.removeprefix("file:"))):
            folder = Path(found)
            if folder.is_dir():
                rotated += sorted(p for p in folder.glob(o.pattern) if p.is_file())
    spool = Path(o.spool_dir)
    if not o.spooled or not spool.is_dir():
        return rotated
    return rotated + sorted(p for p in spool.iterdir() if p.is_file()
                            and not p.name.startswith(("_", ".")))


def widened(o: IngestOptions, evolving: Evolution) -> bool:
    """True when files waiting to be read hold fields the read schema lacks (the
    query then starts again with them)."""
    return evolving.sample(waiting_files(o))


def start(spark: SparkSession, o: IngestOptions, evolving: Evolution) -> StreamingQuery:
    evolving.sample(waiting_files(o))
    added, left = evolving.widen()
    if added:
        print(f"kafkalens ingest: log fields the schema does not read, stored as new "
              f"columns of {o.table}: {described(added)}", file=sys.stderr, flush=True)
    if left:
        print("kafkalens ingest: log fields not stored (a column name cannot hold a "
              "space or any of , ; { } ( ) = . `): " + ", ".join(repr(n) for n in left),
              file=sys.stderr, flush=True)
    schema = evolving.schema
    rows = table_rows(follow.parsed_stream(spark, o, schema), evolving.names)
    # mergeSchema: a new field's column is added to the table by the batch that first
    # writes it (Delta's schema evolution, on this query's writes only).
    writer = rows.writeStream.format("delta").outputMode("append").partitionBy(
        *PARTITIONS).option("checkpointLocation", o.checkpoint_dir).option(
        "mergeSchema", "true")
    trigger: dict[str, Any] = ({"availableNow": True} if o.once
                               else {"processingTime": f"{o.interval} seconds"})
    # The query takes the session's settings as they are when it starts.
    with session_conf(spark, WRITE_CONF):
        return writer.trigger(**trigger).queryName("kafkalens_ingest").start(o.table)


def announce(o: IngestOptions) -> None:
    source = (f"rotated files matching {o.pattern} in {o.logdir}, staged in {o.spool_dir}"
              if o.spooled else f"files matching {o.pattern} in {o.logdir}")
    mode = "what is there now, then stop" if o.once else f"every {o.interval:g} s"
    print(f"kafkalens ingest: reading {source} ({mode}); Delta table {o.table} (checkpoint "
          f"{o.checkpoint_dir})", file=sys.stderr, flush=True)


def retention_hours(o: IngestOptions) -> int:
    """--retention (default DEFAULT_RETENTION) in whole hours, as VACUUM takes it."""
    text = o.retention or DEFAULT_RETENTION
    return int(-(-follow.duration_seconds(text, "--retention") // 3600))


def data_files(spark: SparkSession, table: str) -> int:
    """The Parquet files under TABLE, in the log or not (what VACUUM may remove)."""
    fs, root = fsio.hadoop_file(spark, table)
    found = fs.listFiles(root, True)
    count = 0
    while found.hasNext():
        path = found.next().getPath()
        hidden = any(part.startswith(("_", ".")) for part in
                     str(path.toUri().getPath())[len(str(root.toUri().getPath())):].split("/"))
        count += str(path.getName()).endswith(".parquet") and not hidden
    return count


def compact(spark: SparkSession, o: IngestOptions) -> str:
    """OPTIMIZE (small files of each partition into large ones), then VACUUM (files no
    version within the retention needs); what it did, in a line."""
    from delta.tables import DeltaTable

    if not is_delta(spark, o.table):
        raise TableError(_not_delta(spark, o.table))
    table = DeltaTable.forPath(spark, o.table)
    hours = retention_hours(o)
    # VACUUM refuses a retention below the table's own (what readers of older versions
    # rely on): the table's is set to --retention first, so that it is the bound.
    table_retention = f"interval {hours} hours"
    spark.sql(f"ALTER TABLE delta.`{o.table}` SET TBLPROPERTIES "
              f"('delta.deletedFileRetentionDuration' = '{table_retention}')")
    with session_conf(spark, WRITE_CONF):  # its files' row groups as the ingest's
        metrics = table.optimize().executeCompaction().collect()[0]["metrics"]
    before = data_files(spark, o.table)
    with _retention_check(spark, hours):
        table.vacuum(hours)
    removed = before - data_files(spark, o.table)
    return (f"compacted {metrics['numFilesRemoved']:,} files into {metrics['numFilesAdded']:,};"
            f" vacuumed {removed:,} files replaced more than {o.retention or DEFAULT_RETENTION}"
            f" ago")


def _retention_check(spark: SparkSession, hours: int) -> Any:
    """Delta refuses VACUUM below 7 days unless told the retention is meant (it is:
    --retention, and the table's own set to it)."""
    if hours >= 168:
        return session_conf(spark, {})
    return session_conf(spark, {"spark.databricks.delta.retentionDurationCheck.enabled":
                                "false"})


def run_ingest(spark: SparkSession, o: IngestOptions) -> int:
    try:
        if o.compact:
            print(f"kafkalens ingest: {o.table}: {compact(spark, o)}", file=sys.stderr,
                  flush=True)
            print(f"kafkalens ingest: {rolled_up(spark, o.table)}", file=sys.stderr, flush=True)
            return 0
        problem = follow.check(o)
        if problem:
            print(f"kafkalens ingest: {problem}", file=sys.stderr)
            return follow.EXIT_USAGE
        retention_hours(o)
        create_table(spark, o.table)
    except (TableError, ValueError) as e:
        print(f"kafkalens ingest: {e}", file=sys.stderr)
        return follow.EXIT_USAGE
    announce(o)
    tally = Tally(o.table)
    evolving = evolution(spark, o.table)
    retyped = Retyped(o.table, table_version(spark, o.table))

    def progress(reports: list[dict[str, Any]]) -> None:
        tally.add(reports)
        if not o.once and any(r.get("numInputRows") for r in reports):
            retyped.say(spark)

    code = follow.follow(spark, o, "ingest", lambda: start(spark, o, evolving),
                         lambda found: record_unreadable(spark, o, found), progress=progress,
                         restart_if=lambda: not o.once and widened(o, evolving))
    if code == 0 and o.once:
        retyped.say(spark)
        print(f"kafkalens ingest: {rolled_up(spark, o.table)}", file=sys.stderr, flush=True)
        print(tally.done(o), file=sys.stderr, flush=True)
    return code


def table_version(spark: SparkSession, table: str) -> int:
    """The table's newest version: its log's newest commit."""
    return fsio.delta_version(spark, table)


@dataclass
class Retyped:
    """Counts the ingest's retyped values (evolve.py), per field, in the files its own
    commits since `since` added (the driver reads their log entries; Spark reads only
    the `retyped` column of those files: mostly nulls, a few milliseconds a file)."""

    table: str
    since: int

    def count(self, spark: SparkSession) -> Counter:
        root = self.table.rstrip("/")
        newest = table_version(spark, self.table)
        files: list[str] = []
        for version in range(self.since + 1, newest + 1):
            entries = [json.loads(line) for line in fsio.read_text(
                spark, f"{root}/{DELTA_LOG}/{version:020d}.json").splitlines() if line]
            files += [f"{root}/{unquote(e['add']['path'])}" for e in entries
                      if "add" in e and e["add"].get("dataChange", True)]
        self.since = newest
        if not files:
            return Counter()
        rows = (spark.read.schema(f"`{RETYPED}` map<string,string>").parquet(*files)
                .where(F.col(RETYPED).isNotNull())
                .select(F.explode(F.map_keys(RETYPED)).alias("field"))
                .groupBy("field").count().collect())
        return Counter({r["field"]: r["count"] for r in rows})

    def say(self, spark: SparkSession) -> None:
        counts = self.count(spark)
        if counts:
            fields = ", ".join(f"{field} {follow.counted(n, 'line')}"
                               for field, n in sorted(counts.items()))
            print(f"kafkalens ingest: fields of another type than the schema's, kept as "
                  f"text in the `{RETYPED}` column (the typed column null): {fields}",
                  file=sys.stderr, flush=True)


def rolled_up(spark: SparkSession, table: str) -> str:
    """The rollup of the closed hours brought up to date (rollup.py), in a line."""
    from pipeline.rollup import update

    hours, rows = update(spark, table)
    if not hours:
        return "rollup: every closed hour rolled up already"
    return (f"rollup: {follow.counted(hours, 'closed hour')} ({rows:,} rows) rolled up into "
            f"{table.rstrip('/')}/_rollup")
