"""`kafkalens watch`: one-minute aggregates by api and by client software, streaming.

What it reads (rotated files, staged in a spool: spool.py), when a window is emitted
and what it says while it runs: pipeline/README.md, "Watch".
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if not __package__:  # spark-submit pipeline/watch.py: import the package, not its files
    # (run as a file, this directory heads sys.path and pipeline/html.py would hide the
    # standard library's html), so the repository root takes its place.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from pyspark.sql import Column, DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.streaming import StreamingQuery  # noqa: E402
from pyspark.sql.types import StructType  # noqa: E402

from pipeline.fsio import hadoop_file, is_local  # noqa: E402
from pipeline.schema import CORRUPT, JSON_OPTIONS, LINE_SCHEMA, REQUEST_EVENTS  # noqa: E402
from pipeline.semantics import failed  # noqa: E402
from pipeline.spool import LEDGER, Spool  # noqa: E402

DEFAULT_PATTERN = "*.log.[0-9]*"  # rotated files: requests.log.1, requests.log.7.gz
DEFAULT_WATERMARK = "2 minutes"
MAX_FILES_PER_TRIGGER = 2  # ~2 rotated files a batch keeps the watermark moving smoothly
WINDOW = "1 minute"
POLL_SECONDS = 1  # how soon a stop request or a finished query is noticed
STOP_PATIENCE_SECONDS = 60.0  # how long a stop waits for the running batch
NOTICE_SECONDS = 30.0  # how often to say what the watch waits for while nothing arrives
# The fields the watch reads, typed as the log's contract (LINE_SCHEMA) says.
FIELDS = ("ts", "event", "api", "client_software_name", "client_software_version",
          "latency_ms", "errors", "max_wait_ms", CORRUPT)
DIMENSIONS = {"api": ("by_api", ["api"]),
              "software": ("by_software", ["client_software_name", "client_software_version"])}


@dataclass(frozen=True)
class WatchOptions:
    logdir: str
    out: str = "kafkalens-watch"
    checkpoint: str | None = None
    spool: str | None = None
    use_spool: bool = True
    pattern: str = DEFAULT_PATTERN
    once: bool = False
    interval: float = 10.0
    watermark: str = DEFAULT_WATERMARK
    max_files_per_trigger: int = MAX_FILES_PER_TRIGGER
    notice_every: float = NOTICE_SECONDS

    @property
    def checkpoint_dir(self) -> str:
        return self.checkpoint or f"{self.out.rstrip('/')}/_checkpoint"

    @property
    def spool_dir(self) -> str:
        return self.spool or f"{self.out.rstrip('/')}/_spool"


def _keys(dimension: str) -> list[Column]:
    """(key1, key2) of a line for one dimension, as a struct to explode."""
    if dimension == "api":
        return [F.col("api"), F.lit(None).cast("string")]
    return [F.coalesce("client_software_name", F.lit("unknown")), F.col("client_software_version")]


def waited_by_design() -> Column:
    """A JoinGroup (answered when the rebalance completes) or a Fetch that ran out its
    long poll (max_wait_ms): their latency is the protocol waiting, not the broker."""
    long_poll = (F.col("max_wait_ms") > 0) & (F.col("latency_ms") >= F.col("max_wait_ms"))
    return (F.col("api") == "JoinGroup") | (F.col("api").isin("Fetch", "ShareFetch") & long_poll)


def windowed(lines: DataFrame, watermark: str) -> DataFrame:
    """Per one-minute window, dimension and key: requests, failed requests, requests
    that waited by design, and the latency (avg, p99) of the others."""
    schema = StructType([LINE_SCHEMA[name] for name in FIELDS])
    j = lines.select(F.from_json("value", schema, JSON_OPTIONS).alias("j")).select("j.*")
    requests = j.where(F.col("event").isin(*REQUEST_EVENTS) & F.col("ts").isNotNull()
                       & F.col(CORRUPT).isNull())
    dims = F.array(*[F.struct(F.lit(d).alias("dimension"), k1.alias("key1"), k2.alias("key2"))
                     for d in DIMENSIONS for k1, k2 in [_keys(d)]])
    waited = F.coalesce(waited_by_design(), F.lit(False))
    exploded = requests.select(
        "ts", failed(F.col("errors"), F.col("api")).alias("failed"), waited.alias("waited"),
        F.when(~waited, F.col("latency_ms")).alias("service_ms"), F.explode(dims).alias("d"))
    agg = exploded.withWatermark("ts", watermark).groupBy(
        F.window("ts", WINDOW), "d.dimension", "d.key1", "d.key2"
    ).agg(
        F.count(F.lit(1)).alias("requests"),
        F.sum("failed").alias("errors"),
        F.sum(F.col("waited").cast("long")).alias("waited"),
        F.avg("service_ms").alias("avg_latency_ms"),
        F.percentile_approx("service_ms", 0.99).alias("p99_latency_ms"),
    )
    return agg.select(F.col("window.start").alias("window_start"),
                      F.col("window.end").alias("window_end"), "*").drop("window")


def _as_table(batch: DataFrame, dimension: str) -> DataFrame:
    _, names = DIMENSIONS[dimension]
    keys = [F.col(k).alias(n) for k, n in zip(("key1", "key2"), names, strict=False)]
    return batch.where(F.col("dimension") == dimension).select(
        "window_start", "window_end", *keys, "requests", "errors", "waited", "avg_latency_ms",
        "p99_latency_ms")


def _print_batch(batch_id: int, rows: list) -> None:
    print(f"kafkalens watch: batch {batch_id}, {len(rows)} finished window rows")
    for r in sorted(rows, key=lambda r: (r["window_start"], r["dimension"], -r["requests"])):
        key = " ".join(k for k in (r["key1"], r["key2"]) if k)
        p99 = "-" if r["p99_latency_ms"] is None else f"{r['p99_latency_ms']:.1f}"
        print(f"  {r['window_start']:%Y-%m-%d %H:%M} {r['dimension']:8} {key:40.40} "
              f"{r['requests']:>8} req {r['errors']:>5} err {r['waited']:>5} waited  "
              f"p99 {p99} ms", flush=True)


def batch_writer(out: str) -> Callable[[DataFrame, int], None]:
    """Writes a batch's finished windows to OUT/TABLE/batch_id=N, overwriting it: a
    batch re-run after a crash replaces its own output instead of adding to it."""
    def write(batch: DataFrame, batch_id: int) -> None:
        batch.persist()
        try:
            rows = batch.collect()  # finished windows only: a few rows per key and minute
            if not rows:
                return
            for dimension, (table, _) in DIMENSIONS.items():
                path = f"{out.rstrip('/')}/{table}/batch_id={batch_id}"
                _as_table(batch, dimension).write.mode("overwrite").parquet(path)
            _print_batch(batch_id, rows)
        finally:
            batch.unpersist()

    return write


def start(spark: SparkSession, o: WatchOptions) -> StreamingQuery:
    reader = spark.readStream.format("text").option("maxFilesPerTrigger", o.max_files_per_trigger)
    if o.use_spool:
        # Staged files are hard links or copies: delete them once committed.
        reader = reader.option("cleanSource", "delete")
        source = o.spool_dir
    else:
        reader = reader.option("pathGlobFilter", o.pattern)
        source = o.logdir
    writer = windowed(reader.load(source), o.watermark).writeStream.outputMode("append")
    writer = writer.foreachBatch(batch_writer(o.out)).option("checkpointLocation",
                                                               o.checkpoint_dir)
    trigger = {"availableNow": True} if o.once else {"processingTime": f"{o.interval} seconds"}
    return writer.trigger(**trigger).queryName("kafkalens_watch").start()


class Stop:
    """SIGINT/SIGTERM ask the watch to stop between polls (PySpark's own SIGINT handler
    would raise KeyboardInterrupt inside a call to the JVM); a second one exits now."""

    requested = False

    def __call__(self, signum: int, frame: Any) -> None:
        if self.requested:
            print("kafkalens watch: stopped without waiting for the batch", file=sys.stderr,
                  flush=True)
            os._exit(130)
        self.requested = True
        print("kafkalens watch: stopping after the running batch (Ctrl-C again to quit now)",
              file=sys.stderr, flush=True)


@contextmanager
def stop_on_signals() -> Iterator[Stop]:
    stop = Stop()
    # Signal handlers belong to the main thread (tests run the watch in threads).
    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM) if main}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@dataclass
class Waiting:
    """Says, every `every` seconds while no batch brings lines, what the watch waits for."""

    o: WatchOptions
    spark: SparkSession
    every: float
    last_data: float = 0.0
    last_notice: float = 0.0
    last_batch: int = -1
    last_seen: str = ""  # the timestamp of the newest progress seen

    def __post_init__(self) -> None:
        self.last_data = self.last_notice = time.monotonic()

    def update(self, recent: Sequence[dict[str, Any]], busy: bool = False) -> None:
        """`recent`: progress reports, oldest first, at least those since the last poll;
        `busy`: a batch is running (not waiting then). Reports are told apart by their
        timestamps: while idle Spark reports every 10 s under the id of the batch to
        come, which then reads the lines under that same id, and a batch that read lines
        is followed at once by one without input that moves the watermark on."""
        if not recent:  # the first batch has not finished: not waiting yet
            self.last_data = time.monotonic()
            return
        new = [p for p in recent if p.get("timestamp", "") > self.last_seen]
        if new:
            self.last_seen = new[-1]["timestamp"]
            self.last_batch = new[-1]["batchId"]
            if any(p.get("numInputRows") for p in new):
                self.last_data = time.monotonic()
        now = time.monotonic()
        if not busy and now - max(self.last_data, self.last_notice) >= self.every:
            self.last_notice = now
            print(f"kafkalens watch: no new lines for {now - self.last_data:.0f} s; "
                  f"{self.what()}", file=sys.stderr, flush=True)

    def what(self) -> str:
        o = self.o
        where = f"{o.pattern} in {o.logdir}"
        if o.use_spool:
            matching = len(list(Path(o.logdir).glob(o.pattern)))
            ledger = Path(o.spool_dir) / LEDGER
            staged = len(ledger.read_text().splitlines()) if ledger.exists() else 0
            return (f"waiting for rotated files matching {where} ({matching} there now, "
                    f"{staged} read so far); the active log is read once it rotates")
        return (f"waiting for new files matching {where} "
                f"({_hadoop_glob_count(self.spark, o.logdir, o.pattern)} there now)")


def progress_since(query: StreamingQuery, last_batch: int) -> Sequence[dict[str, Any]]:
    """The last progress report while no batch ran since `last_batch` (an idle report,
    or that batch itself), else the recent ones (up to 100, parsed from the JVM)."""
    last = query.lastProgress
    if last is None:
        return []
    if last["batchId"] == last_batch:
        return [last]
    return query.recentProgress


def _hadoop_glob_count(spark: SparkSession, directory: str, pattern: str) -> int | str:
    """Files matching, through Hadoop's FileSystem (hdfs://, s3a:// ...), on the driver."""
    try:
        fs, path = hadoop_file(spark, f"{directory.rstrip('/')}/{pattern}")
        found = fs.globStatus(path)
        return 0 if found is None else len(found)
    except Exception as exc:  # the notice must not stop the watch: say why it cannot count
        return f"cannot list: {str(exc).splitlines()[0][:200]}"


def announce(o: WatchOptions) -> None:
    source = (f"rotated files matching {o.pattern} in {o.logdir}, staged in {o.spool_dir}"
              if o.use_spool else f"files matching {o.pattern} in {o.logdir}")
    print(f"kafkalens watch: reading {source}; one-minute windows to {o.out} "
          f"(checkpoint {o.checkpoint_dir})", file=sys.stderr, flush=True)


def run_watch(spark: SparkSession, o: WatchOptions) -> int:
    if o.use_spool and not (is_local(o.logdir) and is_local(o.spool_dir)):
        print("kafkalens watch: the spool needs local directories; for hdfs:// or s3a:// "
              "logs rotated to unique names use --no-spool --pattern GLOB", file=sys.stderr)
        return 2
    if o.use_spool and not Path(o.logdir).is_dir():
        print(f"kafkalens watch: {o.logdir} is not a directory (give the directory "
              "request_log.path writes into)", file=sys.stderr)
        return 2
    spool = Spool(Path(o.logdir), Path(o.spool_dir), o.pattern) if o.use_spool else None
    with stop_on_signals() as stop:
        announce(o)
        if spool:
            spool.collect()
        query = start(spark, o)
        waiting = Waiting(o, spark, o.notice_every)
        collected = time.monotonic()
        while not stop.requested and not query.awaitTermination(POLL_SECONDS):
            if spool and time.monotonic() - collected >= o.interval:
                spool.collect()
                collected = time.monotonic()
            recent = progress_since(query, waiting.last_batch)
            waiting.update(recent, bool(query.status.get("isTriggerActive")))
        if query.isActive:
            _stop_between_batches(query)
        if stop.requested:
            print("kafkalens watch: stopped; a restart resumes from the checkpoint",
                  file=sys.stderr, flush=True)
    return 0


def _stop_between_batches(query: StreamingQuery, patience: float = STOP_PATIENCE_SECONDS) -> None:
    """Let a running batch finish first (stopping interrupts it: it would be redone)."""
    deadline = time.monotonic() + patience
    while query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()


if __name__ == "__main__":
    from pipeline.cli import watch_main

    raise SystemExit(watch_main(sys.argv[1:]))
