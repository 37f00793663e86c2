"""`kafkalens watch`: one-minute windows by api and by client software, streaming.

What it reads (rotated files staged in a spool, spool.py, or an ingested table), when a
window is final, what it writes and what it says while it runs: pipeline/README.md,
"Watch".

Each micro-batch's lines are folded, in Spark, into the windows' latency histograms
with the report's definitions (semantics.py) and estimator (traffic.quantile). The
windows still open are kept with the newest event time seen as state under the
checkpoint, a version per batch: a batch Spark runs again after a crash reads the
state its predecessor left and writes the same files under the same names, so every
line counts once.

The watermark is kept per source (the directory a file came from: a proxy's log
directory): the source's newest event time minus --watermark. A window is final once
the watermark of the slowest live source passes its end (a source is live while its
newest lines arrived within --idle-source of the newest any source brought), and the
watermark never moves back. A line's time is clamped to its arrival (the batch's
time, which Spark keeps for a batch it runs again) plus --max-skew, so a proxy whose
clock runs ahead cannot close windows early. A clamped line is counted, per file; a
line of a window already final is counted as dropped (late), per file; neither is
passed over in silence. A line whose known field has another type than the schema's is
read as the report and the ingest read it (a line without that field) and counted as
retyped, per file.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from pipeline import follow, fsio, semantics, utc
from pipeline.fine import retyped_names
from pipeline.read import parse_lines
from pipeline.schema import LINE_SCHEMA, REQUEST_EVENTS
from pipeline.spool import Unreadable
from pipeline.tables import literal_rows
from pipeline.traffic import latency_stats
from pipeline.utc import from_micros, micros

DEFAULT_WATERMARK = "2 minutes"
DEFAULT_MAX_SKEW = "1 minute"  # a line's time at most this far past its arrival
DEFAULT_IDLE_SOURCE = "10 minutes"  # a source silent this long stops holding windows
WINDOW_SECONDS = 60
STATE_VERSIONS_KEPT = 3
SHOWN_KEYS = 8  # per window and dimension on the console (the busiest)
QUANTILES = (0.5, 0.95, 0.99)
WAITING_QUANTILES = (0.99,)
DIMENSIONS = {"api": ("by_api", ["api"]),
              "software": ("by_software", ["client_software_name", "client_software_version"])}
BIN_KEYS = ["window_start", "dimension", "key1", "key2", "waits", "lat_bin"]
BIN_VALUES = ["n", "errors", "expected_errors", "lat_n", "lat_sum"]


@dataclass(frozen=True)
class WatchOptions:
    logdir: str | None
    out: str = "kafkalens-watch"
    checkpoint: str | None = None
    spool: str | None = None
    use_spool: bool = True
    pattern: str = follow.DEFAULT_PATTERN
    once: bool = False
    interval: float = 10.0
    watermark: str = DEFAULT_WATERMARK
    max_skew: str = DEFAULT_MAX_SKEW
    idle_source: str = DEFAULT_IDLE_SOURCE
    max_files_per_trigger: int = follow.MAX_FILES_PER_TRIGGER
    notice_every: float = follow.NOTICE_SECONDS
    table: str | None = None  # an ingested table instead of LOGDIR (pipeline/ingest.py)
    skip_unreadable: bool = False

    @property
    def checkpoint_dir(self) -> str:
        return self.checkpoint or f"{self.out.rstrip('/')}/_checkpoint"

    @property
    def spool_dir(self) -> str:
        return self.spool or f"{self.out.rstrip('/')}/_spool"

    @property
    def spooled(self) -> bool:
        return self.use_spool and self.table is None

    @property
    def table_source(self) -> str | None:
        return self.table


def delay_seconds(text: str, option: str = "--watermark") -> float:
    """`--watermark` (or `option`) as seconds: "2 minutes", "10 seconds", "90s", "1 hour"."""
    return follow.duration_seconds(text, option)


def source_of(file: str) -> str:
    """The source a file's lines come from: its directory (a proxy's log directory)."""
    return file.rsplit("/", 1)[0] if "/" in file else ""


def per_line(parsed: DataFrame, max_skew: float = 60.0) -> DataFrame:
    """What the watch needs of each parsed line (read.parse_lines' columns), with the
    report's definitions: a request's api name, failure, waiting by design, latency
    bin; its time clamped to its arrival plus `max_skew` seconds (`clamped`: it was)
    and its one-minute window."""
    api = semantics.api_name(F.col("api"), F.col("api_key"))
    failure = semantics.failed(F.col("errors"), api)
    request = F.col("bad_reason").isNull() & F.col("event").isin(*REQUEST_EVENTS)
    # In a streaming query current_timestamp() is the batch's time, kept in the offset
    # log: a batch run again after a crash clamps as it did.
    latest = F.timestamp_micros(F.unix_micros(F.current_timestamp()) + int(max_skew * 1e6))
    clamped = F.col("bad_reason").isNull() & (F.col("ts") > latest)
    ts = F.when(clamped, latest).otherwise(F.col("ts"))
    names = retyped_names(parsed)  # the report's fields only, as the report counts them
    retyped = F.lit(False) if names is None else F.coalesce(names != "", F.lit(False))
    return parsed.select(
        ts.alias("ts"), "file", "bad_reason", "line", request.alias("request"),
        F.coalesce(clamped, F.lit(False)).alias("clamped"), retyped.alias("retyped"),
        micros(F.current_timestamp()).alias("arrival"),
        F.date_trunc("minute", ts).alias("window_start"),
        api.alias("api"), "client_software_name", "client_software_version",
        failure.alias("failed"),
        semantics.expected_only(F.col("errors"), failure).alias("expected"),
        semantics.waits_by_design(F.col("api_key"), F.col("max_wait_ms"),
                                  F.col("api")).alias("waits"),
        F.col("latency_ms").alias("latency"),
        semantics.latency_bin(F.col("latency_ms")).alias("lat_bin"),
    )


def lines_stream(spark: SparkSession, o: WatchOptions) -> DataFrame:
    """The streaming source, parsed as the report parses: the staged or matching
    files (a line with a field of another type read as a line, `retyped`), or the rows
    of an ingested table (its `retyped` column)."""
    if o.table is not None:
        from pipeline.ingest import table_stream

        return table_stream(spark, o.table, o.max_files_per_trigger)
    return parse_lines(follow.raw_stream(spark, o), retype=LINE_SCHEMA)


def _bins(lines: DataFrame) -> DataFrame:
    """The lines' histogram rows per window, dimension and key (BIN_KEYS)."""
    dims = F.array(
        F.struct(F.lit("api").alias("dimension"), F.col("api").alias("key1"),
                 F.lit(None).cast("string").alias("key2")),
        F.struct(F.lit("software").alias("dimension"),
                 F.col("client_software_name").alias("key1"),
                 F.col("client_software_version").alias("key2")))
    exploded = lines.select("*", F.explode(dims).alias("d")).select(
        "window_start", "d.dimension", "d.key1", "d.key2", "waits", "lat_bin", "failed",
        "expected", "latency")
    return exploded.groupBy(*BIN_KEYS).agg(
        F.count(F.lit(1)).alias("n"), F.sum("failed").alias("errors"),
        F.sum("expected").alias("expected_errors"), F.count("latency").alias("lat_n"),
        F.sum("latency").alias("lat_sum"), F.max("latency").alias("lat_max"))


def merge_bins(bins: DataFrame) -> DataFrame:
    """Histogram rows of the same window, key and bin added up (state + a batch)."""
    return bins.groupBy(*BIN_KEYS).agg(*[F.sum(c).alias(c) for c in BIN_VALUES],
                                       F.max("lat_max").alias("lat_max"))


def window_table(rows: DataFrame, dimension: str) -> DataFrame:
    """A dimension's table (by_api, by_software) from window_rows' rows: requests,
    failures, service latency and waiting requests per window, as the report's latency
    tables define them, partitioned by `window_date`."""
    _, names = DIMENSIONS[dimension]
    keys = [F.col(k).alias(n) for k, n in zip(("key1", "key2"), names, strict=False)]
    return rows.where(F.col("dimension") == dimension).select(
        "window_start", "window_end", *keys, "requests", "errors", "expected_errors",
        "p50_ms", "p95_ms", "p99_ms", "avg_ms", "max_ms", "waiting_requests",
        "waiting_p99_ms", "window_date")


@dataclass
class Source:
    """A source's newest (clamped) event time and the arrival of its newest batch,
    epoch seconds."""

    max_ts: float
    arrival: float | None  # None: a state written before sources were kept


@dataclass
class Watermark:
    """The watermark a batch leaves: the slowest live source's, never moving back."""

    value: float | None
    slowest: str | None = None
    live: int = 0
    idle: int = 0


def watermark_of(sources: dict[str, Source], before: float | None, delay: float,
                 idle: float) -> Watermark:
    """The slowest live source's newest time minus `delay`, or `before` if that is
    later. Live: its newest lines arrived within `idle` of the newest any source
    brought (a source of unknown arrival counts as idle once others have one)."""
    arrivals = [s.arrival for s in sources.values() if s.arrival is not None]
    newest = max(arrivals, default=None)
    live = {name: s for name, s in sources.items()
            if newest is None or (s.arrival is not None and s.arrival >= newest - idle)}
    mark = Watermark(before, None, len(live), len(sources) - len(live))
    if live:
        slowest = min(live, key=lambda name: (live[name].max_ts, name))
        value = live[slowest].max_ts - delay
        if before is None or value > before:
            mark.value, mark.slowest = value, slowest
        else:
            mark.slowest = slowest
    return mark


@dataclass
class WindowState:
    """The open windows' histogram rows, each source's newest event time and arrival,
    and the watermark, as batch `batch` left them (under CHECKPOINT/kafkalens_windows:
    N.parquet, then N.json, which marks the version whole)."""

    batch: int
    sources: dict[str, Source]
    watermark: float | None  # epoch seconds
    bins: DataFrame | None


class WindowStore:
    def __init__(self, spark: SparkSession, checkpoint: str) -> None:
        self.spark = spark
        self.root = f"{checkpoint.rstrip('/')}/kafkalens_windows"

    def _versions(self) -> list[int]:
        return sorted(int(n[:-5]) for n in fsio.list_names(self.spark, self.root)
                      if n.endswith(".json") and n[:-5].isdigit())

    def before(self, batch: int, delay: float) -> WindowState:
        """The state the batch before `batch` left (none: empty); `delay`: --watermark,
        for a state an older watch left (its newest time, no watermark)."""
        older = [v for v in self._versions() if v < batch]
        if not older:
            return WindowState(-1, {}, None, None)
        version = older[-1]
        meta = json.loads(fsio.read_text(self.spark, f"{self.root}/{version}.json"))
        bins = (self.spark.read.parquet(f"{self.root}/{version}.parquet")
                if meta["open_bins"] else None)
        if "sources" not in meta:  # one watermark for all, as an older watch kept it
            sources = ({} if meta["max_ts"] is None
                       else {"(all, before sources were kept)": Source(meta["max_ts"], None)})
            legacy = None if meta["max_ts"] is None else meta["max_ts"] - delay
            return WindowState(version, sources, legacy, bins)
        return WindowState(version, {k: Source(**v) for k, v in meta["sources"].items()},
                           meta["watermark"], bins)

    def save(self, batch: int, sources: dict[str, Source], watermark: float | None,
             open_bins: DataFrame, open_windows: int) -> None:
        if open_windows:
            open_bins.coalesce(1).write.mode("overwrite").parquet(
                f"{self.root}/{batch}.parquet")
        meta = {"sources": {k: vars(v) for k, v in sorted(sources.items())},
                "watermark": watermark, "open_bins": open_windows,
                "max_ts": max((s.max_ts for s in sources.values()), default=None)}
        fsio.write_text(self.spark, f"{self.root}/{batch}.json", json.dumps(meta))
        for version in self._versions()[:-STATE_VERSIONS_KEPT]:
            fsio.delete(self.spark, f"{self.root}/{version}.parquet")
            fsio.delete(self.spark, f"{self.root}/{version}.json")


def write_batch(df: DataFrame, out: str, table: str, name: str | int,
                partition: str | None = None) -> None:
    """Append `df` to OUT/TABLE as one file per partition named `name` (a batch's id:
    `batch-<id>`): a batch run again replaces its own files instead of adding to them."""
    name = f"batch-{name:010d}" if isinstance(name, int) else name
    staging = f"{out.rstrip('/')}/_staging/{table}/{name}"
    writer = df.coalesce(1).write.mode("overwrite").option("compression", "zstd")
    if partition:
        writer = writer.partitionBy(partition)
    writer.parquet(staging)
    fsio.move_files(df.sparkSession, staging, f"{out.rstrip('/')}/{table}",
                    f"{name}.zstd.parquet")


def _epoch(value: dt.datetime | None) -> float | None:
    """An aware datetime (utc.py: none reaches the driver naive) as epoch seconds."""
    if value is None:
        return None
    if value.tzinfo is None:
        raise ValueError(f"a naive datetime ({value}) would be read in the driver's zone")
    return value.timestamp()


def _clock(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass
class BatchSummary:
    """What a batch did, as printed (tests read it too)."""

    batch: int
    files: int = 0
    lines: int = 0
    bad: int = 0
    late: int = 0
    clamped: int = 0
    retyped: int = 0  # lines read without a field of another type than the schema's
    watermark: float | None = None
    slowest: str | None = None  # the source that holds the watermark
    live: int = 0
    idle: int = 0
    final: list[dict[str, Any]] = field(default_factory=list)  # by_api/by_software rows
    provisional: list[dict[str, Any]] = field(default_factory=list)


class Batches:
    """The foreachBatch function: a micro-batch of per_line rows in, the final windows,
    the files' accounting and the new state out (module docstring)."""

    def __init__(self, spark: SparkSession, o: WatchOptions) -> None:
        self.o = o
        self.delay = delay_seconds(o.watermark)
        self.idle = delay_seconds(o.idle_source, "--idle-source")
        self.store = WindowStore(spark, o.checkpoint_dir)
        self.last: BatchSummary | None = None
        self.provisional_from: float | None = None  # the oldest open window's start

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        rows = batch.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            self.last = self._process(rows, batch_id)
            _print(self.last, self.o, self.delay)
        finally:
            rows.unpersist()

    def _process(self, rows: DataFrame, batch_id: int) -> BatchSummary:
        """Spark jobs: the files' accounting (collected: a row per file), the windows'
        rows (collected: the busiest SHOWN_KEYS of each), then at once the writes of
        input_files, bad_lines, the final windows and the new state."""
        before = self.store.before(batch_id, self.delay)
        watermark = before.watermark
        window_end = F.unix_seconds("window_start") + WINDOW_SECONDS
        late = (F.col("request") & (window_end <= F.lit(watermark))
                if watermark is not None else F.lit(False))
        marked = rows.select("*", late.alias("late"))
        files = marked.groupBy("file").agg(
            F.count(F.lit(1)).alias("lines"),
            F.count("bad_reason").alias("bad_lines"),
            F.sum(F.col("late").cast("long")).alias("late_lines"),
            F.sum(F.col("clamped").cast("long")).alias("clamped_lines"),
            F.sum(F.col("retyped").cast("long")).alias("retyped_lines"),
            # epoch micros: a timestamp would reach the driver in its local zone (utc.py)
            micros(F.max(F.when(F.col("bad_reason").isNull(), F.col("ts")))).alias("max_ts"),
            F.max("arrival").alias("arrival"),
        ).persist()
        accounted = files.collect()  # a row per file of the batch
        summary = BatchSummary(batch_id, len(accounted), sum(r["lines"] for r in accounted),
                               sum(r["bad_lines"] for r in accounted),
                               sum(r["late_lines"] or 0 for r in accounted),
                               sum(r["clamped_lines"] or 0 for r in accounted),
                               sum(r["retyped_lines"] or 0 for r in accounted))
        sources = dict(before.sources)
        for row in accounted:
            newest = _epoch(from_micros(row["max_ts"]))
            if newest is None:
                continue  # only bad lines: no time to go by
            name, arrival = source_of(row["file"]), row["arrival"] / 1e6
            known = sources.get(name)
            sources[name] = Source(newest, arrival) if known is None else Source(
                max(known.max_ts, newest), max(known.arrival or arrival, arrival))
        mark = watermark_of(sources, watermark, self.delay, self.idle)
        summary.watermark, summary.slowest = mark.value, mark.slowest
        summary.live, summary.idle = mark.live, mark.idle
        cut = F.lit(summary.watermark if summary.watermark is not None else float("-inf"))
        new_bins = _bins(marked.where(F.col("request") & ~F.col("late")))
        merged = merge_bins(new_bins if before.bins is None
                            else before.bins.unionByName(new_bins))
        merged = merged.withColumn(
            "final", (F.unix_seconds("window_start") + WINDOW_SECONDS) <= cut).persist()
        tables = window_rows(merged).persist()
        try:
            for r in _shown(tables):
                (summary.final if r["final"] else summary.provisional).append(r)
            writes: list[Callable[[], None]] = []
            if summary.lines:
                writes.append(lambda: write_batch(files.select(
                    "file", "lines", "bad_lines", "late_lines", "clamped_lines", "retyped_lines",
                    F.lit("read").alias("status"), F.lit(None).cast("string").alias("reason"),
                    _batch(batch_id)), self.o.out, "input_files", batch_id))
            if summary.bad:
                writes.append(lambda: write_batch(_bad_lines(marked, batch_id), self.o.out,
                                                  "bad_lines", batch_id))
            if summary.final:
                for dimension, (table, _) in DIMENSIONS.items():
                    writes.append(partial(write_batch, window_table(
                        tables.where(F.col("final")), dimension), self.o.out, table,
                        batch_id, "window_date"))
            open_windows = len({r["window_start"] for r in summary.provisional})
            open_bins = merged.where(~F.col("final")).drop("final")
            writes.append(lambda: self.store.save(batch_id, sources, summary.watermark,
                                                  open_bins, open_windows))
            with ThreadPoolExecutor(len(writes)) as pool:
                for done in [pool.submit(w) for w in writes]:
                    done.result()
            starts = [r["window_start"] for r in summary.provisional]
            self.provisional_from = _epoch(min(starts)) if starts else None
        finally:
            for df in (tables, merged, files):
                df.unpersist()
        return summary


def _bad_lines(marked: DataFrame, batch_id: int) -> DataFrame:
    """Per file and reason: the batch's bad lines and up to two samples (as the
    report's bad_lines)."""
    return marked.where(F.col("bad_reason").isNotNull()).groupBy(
        "file", F.col("bad_reason").alias("reason")).agg(
        F.count(F.lit(1)).alias("bad_lines"),
        F.array_distinct(F.array(F.min("line"), F.max("line"))).alias("samples"),
    ).select("*", _batch(batch_id))


def _batch(batch_id: int) -> Column:
    # bigint, as in the rows of files left out: a Python int is an int literal, and
    # Parquet files of one table with int and bigint columns cannot be read together.
    return F.lit(batch_id).cast("bigint").alias("batch_id")


def window_rows(merged: DataFrame) -> DataFrame:
    """Both dimensions' rows per window (window_table's, keyed by `dimension`, `key1`,
    `key2`), and whether the window is final."""
    stats = latency_stats(merged, ["window_start", "final", "dimension", "key1", "key2"],
                          QUANTILES, WAITING_QUANTILES)
    end = F.timestamp_seconds(F.unix_seconds("window_start") + WINDOW_SECONDS)
    return stats.select(
        "window_start", end.alias("window_end"), "final", "dimension", "key1", "key2",
        "requests", "errors", "expected_errors", "p50_ms", "p95_ms", "p99_ms", "avg_ms",
        "max_ms", "waiting_requests", "waiting_p99_ms",
        F.date_format("window_start", "yyyy-MM-dd").alias("window_date"))


def _shown(rows: DataFrame) -> list[dict[str, Any]]:
    """The busiest SHOWN_KEYS rows of each window and dimension, for the console."""
    from pyspark.sql import Window

    busiest = Window.partitionBy("window_start", "dimension").orderBy(
        F.desc("requests"), "key1", "key2")
    top = rows.withColumn("_rank", F.row_number().over(busiest)).where(
        F.col("_rank") <= SHOWN_KEYS)
    shown = utc.collect(top.orderBy("window_start", "dimension", "_rank"))
    for r in shown:
        r["key"] = " ".join(str(r[k]) for k in ("key1", "key2") if r.get(k)) or "-"
    return shown


def _print(s: BatchSummary, o: WatchOptions, delay: float) -> None:
    retyped = (f", {s.retyped:,} with a field of another type than the schema's: read "
               f"without it") if s.retyped else ""
    clamped = (f", {s.clamped:,} dated past their arrival + --max-skew {o.max_skew}: "
               f"clamped") if s.clamped else ""
    late = (f", {s.late:,} of windows already final: dropped (late by more than "
            f"--watermark {o.watermark})") if s.late else ""
    files = follow.counted(s.files, "file")
    held = ""
    if s.slowest is not None and s.live + s.idle > 1:  # which of several holds it
        idle = f", {s.idle} idle" if s.idle else ""
        held = (f" (slowest of {follow.counted(s.live, 'live source')}{idle}: "
                f"{s.slowest or '.'})")
    print(f"kafkalens watch: batch {s.batch}: {s.lines:,} lines from {files} ({s.bad:,} "
          f"bad{retyped}{clamped}{late}); watermark {_clock(s.watermark)}{held}", flush=True)
    for label, rows in (("final", s.final), ("provisional", s.provisional)):
        for r in rows:  # window_rows' rows
            p99 = "-" if r["p99_ms"] is None else f"{r['p99_ms']:.1f}"
            print(f"  {r['window_start']:%Y-%m-%d %H:%M} {label:11} {r['dimension']:8} "
                  f"{r['key']:40.40} {r['requests']:>8} req {r['errors']:>5} err "
                  f"{r['waiting_requests']:>5} waiting  p99 {p99} ms", flush=True)
    if s.provisional:
        print(f"  (provisional: still filling; final and written to {o.out} once every "
              f"live source's newest line is {o.watermark} past the window's end)",
              flush=True)


def start(spark: SparkSession, o: WatchOptions, batches: Batches) -> StreamingQuery:
    lines = per_line(lines_stream(spark, o), delay_seconds(o.max_skew, "--max-skew"))
    writer = lines.writeStream.foreachBatch(batches)
    writer = writer.option("checkpointLocation", o.checkpoint_dir)
    trigger = {"availableNow": True} if o.once else {"processingTime": f"{o.interval} seconds"}
    return writer.trigger(**trigger).queryName("kafkalens_watch").start()


def announce(o: WatchOptions) -> None:
    if o.table is not None:
        source = f"the ingested table {o.table}"
    elif o.spooled:
        source = f"rotated files matching {o.pattern} in {o.logdir}, staged in {o.spool_dir}"
    else:
        source = f"files matching {o.pattern} in {o.logdir}"
    print(f"kafkalens watch: reading {source}; one-minute windows, final once the newest "
          f"line of every live source (directory) is {o.watermark} past their end, to "
          f"{o.out} (checkpoint {o.checkpoint_dir})", file=sys.stderr, flush=True)


def record_unreadable(spark: SparkSession, o: WatchOptions, found: list[Unreadable]) -> None:
    """Files the spool will not stage, in OUT/input_files (status `left out`)."""
    rows = [(str(u.path), None, None, None, None, None, "left out", u.reason, None)
            for u in found]
    df = literal_rows(spark, INPUT_FILES_SCHEMA, rows)
    write_batch(df, o.out, "input_files", f"unreadable-{time.time_ns()}")


INPUT_FILES_SCHEMA = ("file string, lines bigint, bad_lines bigint, late_lines bigint, "
                      "clamped_lines bigint, retyped_lines bigint, status string, reason string, "
                      "batch_id bigint")


def held_back(o: WatchOptions, batches: Batches) -> str:
    """What the watch shows but has not written yet, and why (for the waiting notice)."""
    start = batches.provisional_from
    if start is None:
        return ""
    return (f"; windows from {_clock(start)} are provisional (shown, not written) until "
            f"lines {o.watermark} past their end arrive")


def run_watch(spark: SparkSession, o: WatchOptions) -> int:
    try:
        delay_seconds(o.watermark)
        delay_seconds(o.max_skew, "--max-skew")
        delay_seconds(o.idle_source, "--idle-source")
    except ValueError as e:
        print(f"kafkalens watch: {e}", file=sys.stderr)
        return follow.EXIT_USAGE
    problem = follow.check(o)
    if o.table is not None and not problem:
        from pipeline.ingest import TableError, read_table

        try:
            read_table(spark, o.table)
        except TableError as e:
            problem = str(e)
    if problem:
        print(f"kafkalens watch: {problem}", file=sys.stderr)
        return follow.EXIT_USAGE
    batches = Batches(spark, o)
    announce(o)
    read: list[int] = []  # the lines of each batch that read some
    code = follow.follow(spark, o, "watch", lambda: start(spark, o, batches),
                         lambda found: record_unreadable(spark, o, found),
                         lambda: held_back(o, batches),
                         lambda reports: read.extend(n for p in reports
                                                     if (n := p.get("numInputRows"))))
    if code == 0 and o.once:
        what = f"{sum(read):,} lines read" if read else "nothing new to read"
        print(f"kafkalens watch: done: {what}{follow.not_read_yet(o)}", file=sys.stderr,
              flush=True)
    return code

