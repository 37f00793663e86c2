"""`kafkalens watch`: one-minute aggregates by api and by client software, streaming.

What the watch sees. Spark's file source reads whole files and only files it has not
seen (by path). So the watch never reads the active requests.log, which is still
growing: a line is counted once its file has been rotated. With the proxy's default
rotation (requests.log -> .1 -> .2 ..., gzip optional) names are reused and renamed,
so rotated files are first staged in a spool under content-derived names (see
spool.py); each line is then counted exactly once, across restarts too. For results
within a minute or two, rotate often (request_log.max_bytes of a few MB): the watch
lags by one file. A proxy that rotates to unique, never-reused names (and writes them
atomically) can be read directly with --no-spool --pattern GLOB; that also works for
a log directory on hdfs:// or s3a://, where the spool (a local directory) cannot.

Windows are emitted once final: when the watermark (latest event time seen minus
--watermark) passes their end. Lines later than that are dropped, and the newest
windows appear only after later lines arrive.

Each micro-batch's finished windows are written to OUT/by_api/batch_id=N and
OUT/by_software/batch_id=N, overwriting that batch's directory: a batch that is re-run
after a crash replaces its own output instead of adding to it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

if not __package__:  # spark-submit pipeline/watch.py: import the package, not its files
    # (run as a file, this directory heads sys.path and pipeline/html.py would hide the
    # standard library's html), so the repository root takes its place.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from pyspark.sql import Column, DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.streaming import StreamingQuery  # noqa: E402

from pipeline.fsio import is_local  # noqa: E402
from pipeline.schema import CORRUPT, JSON_OPTIONS, LINE_SCHEMA, REQUEST_EVENTS  # noqa: E402
from pipeline.spool import Spool  # noqa: E402

DEFAULT_PATTERN = "*.log.[0-9]*"  # rotated files: requests.log.1, requests.log.7.gz
DEFAULT_WATERMARK = "2 minutes"
MAX_FILES_PER_TRIGGER = 2  # ~2 rotated files a batch keeps the watermark moving smoothly
WINDOW = "1 minute"
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

    @classmethod
    def from_args(cls, a: argparse.Namespace) -> WatchOptions:
        return cls(a.logdir, a.out, a.checkpoint, a.spool, not a.no_spool, a.pattern, a.once,
                   a.interval, a.watermark, a.max_files_per_trigger)

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


def windowed(lines: DataFrame, watermark: str) -> DataFrame:
    """Per one-minute window, dimension and key: requests, errors, latency avg and p99."""
    j = lines.select(F.from_json("value", LINE_SCHEMA, JSON_OPTIONS).alias("j")).select("j.*")
    requests = j.where(F.col("event").isin(*REQUEST_EVENTS) & F.col("ts").isNotNull()
                       & F.col(CORRUPT).isNull())
    dims = F.array(*[F.struct(F.lit(d).alias("dimension"), k1.alias("key1"), k2.alias("key2"))
                     for d in DIMENSIONS for k1, k2 in [_keys(d)]])
    exploded = requests.select("ts", "errors", "latency_ms", F.explode(dims).alias("d"))
    agg = exploded.withWatermark("ts", watermark).groupBy(
        F.window("ts", WINDOW), "d.dimension", "d.key1", "d.key2"
    ).agg(
        F.count(F.lit(1)).alias("requests"),
        F.sum(F.when(F.size("errors") > 0, 1).otherwise(0)).alias("errors"),
        F.avg("latency_ms").alias("avg_latency_ms"),
        F.percentile_approx("latency_ms", 0.99).alias("p99_latency_ms"),
    )
    return agg.select(F.col("window.start").alias("window_start"),
                      F.col("window.end").alias("window_end"), "*").drop("window")


def _as_table(batch: DataFrame, dimension: str) -> DataFrame:
    _, names = DIMENSIONS[dimension]
    keys = [F.col(k).alias(n) for k, n in zip(("key1", "key2"), names, strict=False)]
    return batch.where(F.col("dimension") == dimension).select(
        "window_start", "window_end", *keys, "requests", "errors", "avg_latency_ms",
        "p99_latency_ms")


def _print_batch(batch_id: int, rows: list) -> None:
    print(f"kafkalens watch: batch {batch_id}, {len(rows)} finished window rows")
    for r in sorted(rows, key=lambda r: (r["window_start"], r["dimension"], -r["requests"])):
        key = " ".join(k for k in (r["key1"], r["key2"]) if k)
        p99 = "-" if r["p99_latency_ms"] is None else f"{r['p99_latency_ms']:.1f}"
        print(f"  {r['window_start']:%Y-%m-%d %H:%M} {r['dimension']:8} {key:40.40} "
              f"{r['requests']:>8} req {r['errors']:>5} err  p99 {p99} ms")


def batch_writer(out: str) -> Callable[[DataFrame, int], None]:
    def write(batch: DataFrame, batch_id: int) -> None:
        rows = batch.collect()  # finished windows only: small; one action runs the batch once
        if not rows:
            return
        _print_batch(batch_id, rows)
        spark = batch.sparkSession
        collected = spark.createDataFrame(rows, batch.schema)
        for dimension, (table, _) in DIMENSIONS.items():
            path = f"{out.rstrip('/')}/{table}/batch_id={batch_id}"
            _as_table(collected, dimension).write.mode("overwrite").parquet(path)

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


def run_watch(spark: SparkSession, o: WatchOptions) -> int:
    if o.use_spool and not (is_local(o.logdir) and is_local(o.spool_dir)):
        print("kafkalens watch: the spool needs local directories; for hdfs:// or s3a:// "
              "logs rotated to unique names use --no-spool --pattern GLOB", file=sys.stderr)
        return 2
    spool = Spool(Path(o.logdir), Path(o.spool_dir), o.pattern) if o.use_spool else None
    if spool:
        spool.collect()
    query = start(spark, o)
    try:
        while not query.awaitTermination(max(1, round(o.interval))):
            if spool:
                spool.collect()
    except KeyboardInterrupt:
        query.stop()
    return 0


if __name__ == "__main__":
    from pipeline.cli import watch_main

    raise SystemExit(watch_main(sys.argv[1:]))
