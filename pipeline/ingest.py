"""`kafkalens ingest`: the JSON logs parsed once, into a Parquet table partitioned by
time that `report --table` and `watch --table` read instead of the logs.

A Structured Streaming query: Spark's JSON source over the rotated files (staged in a
spool as `watch` stages them, follow.py), each line parsed as the report parses it
(read.parse_lines), written by Spark's file sink as zstd Parquet partitioned by
`kind` (`lines`, or `bad_lines`: a bad line with its file and reason, kept apart),
`date` and `hour` (UTC, of the line's ts; of its file's modification time when the
line has none). The sink's log (TABLE/_spark_metadata) and the checkpoint make every
line land once, across crashes and restarts: read the table through Spark, which
reads that log (pipeline/README.md, "Ingest").
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from pipeline import follow, fsio
from pipeline.read import PARSED_EXTRA, PARSED_FIELDS, normal_path, parse_lines
from pipeline.schema import LINE_SCHEMA
from pipeline.session import session_conf
from pipeline.spool import Unreadable

PARTITIONS = ["kind", "date", "hour"]
LINES, BAD_LINES = "lines", "bad_lines"  # the `kind` partitions
UNREADABLE_FILES = "_unreadable_files.jsonl"  # files the ingest left out, and why
# A batch run reads several rotated files per micro-batch: fewer, larger Parquet files.
FILES_PER_TRIGGER = 8
INTERVAL_SECONDS = 60.0
# A task's lines span a few partitions (kind, date, hour): a Parquet writer open for
# each as its rows come, instead of Spark's default of sorting every row of the task
# by partition before writing (up to this many open at once; more: it sorts).
WRITE_CONF = {"spark.sql.maxConcurrentOutputFileWriters": "16"}
COMPRESSION = "zstd"  # the table's Parquet files


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


def table_rows(parsed: DataFrame) -> DataFrame:
    """parse_lines' columns (with `file_mtime`) as the table holds them: the partition
    columns added, `file_mtime` dropped."""
    when = F.coalesce(F.col("ts"), F.col("file_mtime"))
    return parsed.select(
        *PARSED_FIELDS, *PARSED_EXTRA,
        F.when(F.col("bad_reason").isNull(), F.lit(LINES)).otherwise(F.lit(BAD_LINES))
        .alias("kind"),
        F.date_format(when, "yyyy-MM-dd").alias("date"),
        F.hour(when).alias("hour"))


def table_schema(spark: SparkSession) -> StructType:
    """The table's schema: parse_lines' columns, then the partition columns."""
    empty = spark.range(0).select(*[F.lit(None).cast(f.dataType).alias(f.name)
                                    for f in LINE_SCHEMA.fields],
                                  F.lit(None).cast("string").alias("file"))
    parsed = parse_lines(empty).schema
    return StructType([*parsed.fields, StructField("kind", StringType()),
                       StructField("date", StringType()), StructField("hour", IntegerType())])


def read_table(spark: SparkSession, table: str) -> DataFrame:
    """The ingested lines as parse_lines gives them (through the sink's log)."""
    return spark.read.schema(table_schema(spark)).parquet(table).select(
        *PARSED_FIELDS, *PARSED_EXTRA)


def table_stream(spark: SparkSession, table: str, max_files: int) -> DataFrame:
    """The ingested lines as they are committed, streaming (Spark's file source reads
    the sink's log: only whole batches)."""
    return spark.readStream.schema(table_schema(spark)).option(
        "maxFilesPerTrigger", max_files).parquet(table).select(*PARSED_FIELDS, *PARSED_EXTRA)


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


def start(spark: SparkSession, o: IngestOptions) -> StreamingQuery:
    rows = table_rows(follow.parsed_stream(spark, o))
    writer = rows.writeStream.format("parquet").option("compression", COMPRESSION).partitionBy(
        *PARTITIONS).option("checkpointLocation", o.checkpoint_dir).option("path", o.table)
    if o.retention:
        writer = writer.option("retention", o.retention)
    trigger: dict[str, Any] = ({"availableNow": True} if o.once
                               else {"processingTime": f"{o.interval} seconds"})
    # The query takes the session's settings as they are when it starts.
    with session_conf(spark, WRITE_CONF):
        return writer.trigger(**trigger).queryName("kafkalens_ingest").start()


def announce(o: IngestOptions) -> None:
    source = (f"rotated files matching {o.pattern} in {o.logdir}, staged in {o.spool_dir}"
              if o.spooled else f"files matching {o.pattern} in {o.logdir}")
    mode = "what is there now, then stop" if o.once else f"every {o.interval:g} s"
    print(f"kafkalens ingest: reading {source} ({mode}); Parquet to {o.table} (checkpoint "
          f"{o.checkpoint_dir})", file=sys.stderr, flush=True)


def run_ingest(spark: SparkSession, o: IngestOptions) -> int:
    problem = follow.check(o)
    if problem:
        print(f"kafkalens ingest: {problem}", file=sys.stderr)
        return follow.EXIT_USAGE
    announce(o)
    tally = Tally(o.table)
    code = follow.follow(spark, o, "ingest", lambda: start(spark, o),
                         lambda found: record_unreadable(spark, o, found), progress=tally.add)
    if code == 0 and o.once:
        print(tally.done(o), file=sys.stderr, flush=True)
    return code

