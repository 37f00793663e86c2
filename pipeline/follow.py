"""Following a log directory as the proxy writes and rotates it: what `watch` and
`ingest` share. Rotated files are staged in a spool (spool.py) that a Structured
Streaming query reads (or, with --no-spool, files of unique names are read where they
are); the loop stages what rotated, says what it waits for, stops on Ctrl-C between
batches, and never passes over a file it cannot read in silence (pipeline/README.md,
"Following the logs").
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import StructType

from pipeline import fsio
from pipeline.read import first_line, normal_path, parse_lines, read_failure
from pipeline.schema import JSON_OPTIONS, LINE_SCHEMA
from pipeline.spool import LEDGER, SUBDIR, Spool, Unreadable

DEFAULT_PATTERN = "*.log.[0-9]*"  # rotated files: requests.log.1, requests.log.7.gz
MAX_FILES_PER_TRIGGER = 2  # ~2 rotated files a batch keeps the watermark moving smoothly
POLL_SECONDS = 1  # how soon a stop request or a finished query is noticed
STOP_PATIENCE_SECONDS = 60.0  # how long a stop waits for the running batch
NOTICE_SECONDS = 30.0  # how often to say what is awaited while nothing arrives
EXIT_UNREADABLE = 1
EXIT_USAGE = 2


_DURATION = re.compile(
    r"^\s*(\d+(?:\.\d+)?)\s*(?:(sec|second|min|minute|hour|day)s?|(s|m|h|d))\s*$", re.I)
_UNIT = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60,
         "h": 3600, "hour": 3600, "d": 86400, "day": 86400}


def duration_seconds(text: str, option: str) -> float:
    """A duration as seconds: "2 minutes", "10 seconds", "90s", "1 hour", "30d" (Spark's
    form too). ValueError naming `option` if it is none."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"{option}: {text!r} is not a number of seconds, minutes, hours or "
                         "days (e.g. '2 minutes')")
    return float(match.group(1)) * _UNIT[(match.group(2) or match.group(3)).lower()]


class Followed(Protocol):
    """The options of a command that follows a log directory (WatchOptions, IngestOptions)."""

    @property
    def logdir(self) -> str | None: ...
    @property
    def use_spool(self) -> bool: ...
    @property
    def pattern(self) -> str: ...
    @property
    def once(self) -> bool: ...
    @property
    def interval(self) -> float: ...
    @property
    def max_files_per_trigger(self) -> int: ...
    @property
    def notice_every(self) -> float: ...
    @property
    def skip_unreadable(self) -> bool: ...
    @property
    def spool_dir(self) -> str: ...
    @property
    def spooled(self) -> bool: ...
    @property
    def table_source(self) -> str | None: ...


def original_file(file: Column, o: Followed) -> Column:
    """A staged file's path as the log directory named it when it was staged
    (`<spool>/<hash>.requests.log.3.gz` -> `<logdir>/requests.log.3.gz`,
    `<spool>/<hash>.proxy-a~requests.log.1` -> `<logdir>/proxy-a/requests.log.1`)."""
    if not o.spooled:
        return file
    logdir = normal_path(Path(str(o.logdir)).resolve().as_posix())
    name = F.translate(F.regexp_extract(file, r"/[0-9a-f]{32}\.([^/]+)$", 1), SUBDIR, "/")
    return F.when(name != "", F.concat(F.lit(logdir.rstrip("/") + "/"), name)).otherwise(file)


def raw_stream(spark: SparkSession, o: Followed, schema: StructType = LINE_SCHEMA
               ) -> DataFrame:
    """read.read_logs' columns (and `file_mtime`), streaming: the staged files, or the
    files matching the pattern (--no-spool); read with `schema` (the ingest's may hold
    new fields: evolve.py)."""
    reader = spark.readStream.schema(schema).options(**JSON_OPTIONS).option(
        "maxFilesPerTrigger", o.max_files_per_trigger)
    if o.spooled:
        # Staged files are hard links or copies: delete them once committed.
        reader = reader.option("cleanSource", "delete")
        source = o.spool_dir
    else:
        assert o.logdir is not None
        reader = reader.option("pathGlobFilter", o.pattern)
        source = o.logdir
    return reader.json(source).select(
        "*", original_file(F.col("_metadata.file_path"), o).alias("file"),
        F.col("_metadata.file_modification_time").alias("file_mtime"))


def parsed_stream(spark: SparkSession, o: Followed, schema: StructType | None = None
                  ) -> DataFrame:
    """read.parse_lines' columns and `file_mtime`, streaming. With `schema` (the
    ingest's), its fields beyond LINE_SCHEMA's are kept too, and a field of another
    type is kept as text (`retyped`, evolve.py)."""
    if schema is None:
        return parse_lines(raw_stream(spark, o), keep=("file_mtime",))
    extra = [name for name in schema.fieldNames() if name not in LINE_SCHEMA.fieldNames()]
    return parse_lines(raw_stream(spark, o, schema), keep=("file_mtime", *extra),
                       retype=schema)


class Stop:
    """SIGINT/SIGTERM ask the command to stop between polls (PySpark's own SIGINT handler
    would raise KeyboardInterrupt inside a call to the JVM); a second one exits now."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.requested = False

    def __call__(self, signum: int, frame: Any) -> None:
        if self.requested:
            print(f"kafkalens {self.command}: stopped without waiting for the batch",
                  file=sys.stderr, flush=True)
            os._exit(130)
        self.requested = True
        print(f"kafkalens {self.command}: stopping after the running batch (Ctrl-C again "
              "to quit now)", file=sys.stderr, flush=True)


@contextmanager
def stop_on_signals(command: str) -> Iterator[Stop]:
    stop = Stop(command)
    # Signal handlers belong to the main thread (tests run the loop in threads).
    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM) if main}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@dataclass
class Waiting:
    """Says, every `every` seconds while no batch brings lines, what is awaited."""

    o: Followed
    spark: SparkSession
    every: float
    command: str = "watch"
    held_back: Callable[[], str] = lambda: ""
    last_data: float = 0.0
    last_notice: float = 0.0
    last_batch: int = -1
    last_seen: str = ""  # the timestamp of the newest progress seen

    def __post_init__(self) -> None:
        self.last_data = self.last_notice = time.monotonic()

    def update(self, recent: Sequence[dict[str, Any]], busy: bool = False
               ) -> list[dict[str, Any]]:
        """`recent`: progress reports, oldest first, at least those since the last poll;
        `busy`: a batch is running (not waiting then). Reports are told apart by their
        timestamps: while idle Spark reports every 10 s under the id of the batch to
        come, which then reads the lines under that same id. Returns the reports not
        seen before."""
        if not recent:  # the first batch has not finished: not waiting yet
            self.last_data = time.monotonic()
            return []
        new = [p for p in recent if p.get("timestamp", "") > self.last_seen]
        if new:
            self.last_seen = new[-1]["timestamp"]
            self.last_batch = new[-1]["batchId"]
            if any(p.get("numInputRows") for p in new):
                self.last_data = time.monotonic()
        now = time.monotonic()
        if not busy and now - max(self.last_data, self.last_notice) >= self.every:
            self.last_notice = now
            print(f"kafkalens {self.command}: no new lines for {now - self.last_data:.0f} s; "
                  f"{self.what()}{self.held_back()}", file=sys.stderr, flush=True)
        return new

    def what(self) -> str:
        o = self.o
        if o.table_source is not None:
            return f"waiting for new rows in the ingested table {o.table_source}"
        where = f"{o.pattern} in {o.logdir}"
        if o.spooled:
            matching = len(list(Path(str(o.logdir)).glob(o.pattern)))
            ledger = Path(o.spool_dir) / LEDGER
            staged = len(ledger.read_text().splitlines()) if ledger.exists() else 0
            return (f"waiting for rotated files matching {where} ({matching} there now, "
                    f"{staged} read so far); the active log is read once it rotates")
        return (f"waiting for new files matching {where} "
                f"({_hadoop_glob_count(self.spark, str(o.logdir), o.pattern)} there now)")


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
        fs, path = fsio.hadoop_file(spark, f"{directory.rstrip('/')}/{pattern}")
        found = fs.globStatus(path)
        return 0 if found is None else len(found)
    except Exception as exc:  # the notice must not stop the command: say why it cannot count
        return f"cannot list: {str(exc).splitlines()[0][:200]}"


def check(o: Followed) -> str | None:
    """Why these options cannot run, or None."""
    if o.table_source is None and o.logdir is None:
        return "give LOGDIR (the directory request_log.path writes into)"
    if o.spooled and not (fsio.is_local(str(o.logdir)) and fsio.is_local(o.spool_dir)):
        return ("the spool needs local directories; for hdfs:// or s3a:// logs rotated to "
                "unique names use --no-spool --pattern GLOB")
    if o.spooled and not Path(str(o.logdir)).is_dir():
        return (f"{o.logdir} is not a directory (give the directory request_log.path "
                "writes into)")
    return None


def follow(spark: SparkSession, o: Followed, command: str,
           start: Callable[[], StreamingQuery],
           left_out: Callable[[list[Unreadable]], None],
           held_back: Callable[[], str] = lambda: "",
           progress: Callable[[list[dict[str, Any]]], None] = lambda reports: None,
           restart_if: Callable[[], bool] = lambda: False) -> int:
    """Runs the query `start` makes until it ends (--once), fails, or a stop is asked,
    staging rotated files every --interval seconds. A file the spool will not stage
    stops it (exit 1) unless --skip-unreadable, which reports it (`left_out`). Each of
    the query's progress reports is given to `progress` once, the last batch's too.
    When `restart_if` says so before files are staged (the ingest: rotated files bring
    new fields), the query is stopped between batches and `start` makes it again
    (from its checkpoint) once they are."""
    spool = Spool(Path(str(o.logdir)), Path(o.spool_dir), o.pattern) if o.spooled else None
    with stop_on_signals(command) as stop:
        if spool and not _collect(o, spool, command, left_out):
            return EXIT_UNREADABLE
        query = start()
        waiting = Waiting(o, spark, o.notice_every, command, held_back)
        collected = time.monotonic()
        try:
            while not stop.requested and not query.awaitTermination(POLL_SECONDS):
                if time.monotonic() - collected >= o.interval:
                    # Asked before staging, so that what is staged next is read by
                    # the query started again.
                    restart = restart_if()
                    if restart:
                        stop_between_batches(query)
                        progress(waiting.update(query.recentProgress, busy=True))
                        query.awaitTermination()  # raises if it failed
                    if spool and not _collect(o, spool, command, left_out):
                        stop_between_batches(query)
                        return EXIT_UNREADABLE
                    collected = time.monotonic()
                    if restart:
                        query = start()
                        continue
                recent = progress_since(query, waiting.last_batch)
                progress(waiting.update(recent, bool(query.status.get("isTriggerActive"))))
        except Exception as e:  # noqa: BLE001 - the query failed: one line, not a stack
            if _table_widened(e, o):
                # The ingest added columns (evolve.py): Delta's source stops at the new
                # schema and reads on once started again, from its checkpoint.
                print(f"kafkalens {command}: the table {o.table_source} has new columns; "
                      "reading on", file=sys.stderr, flush=True)
                return follow(spark, o, command, start, left_out, held_back, progress,
                              restart_if)
            return _failed(e, o, command)
        if query.isActive:
            stop_between_batches(query)
        # The batches that ended since the last poll (the last one's, with --once).
        progress(waiting.update(query.recentProgress, busy=True))
        if stop.requested:
            print(f"kafkalens {command}: stopped; a restart resumes from the checkpoint",
                  file=sys.stderr, flush=True)
    return 0


def active_logs(o: Followed) -> list[str]:
    """The files of the log directory the pattern does not match: the logs the proxy
    is writing, read once they rotate (none without the spool: files of unique names
    are read where they are)."""
    if not o.spooled:
        return []
    directory = Path(str(o.logdir))
    rotated = set(directory.glob(o.pattern))
    # the folders the pattern reads (a pattern such as */*.log.[0-9]* reads a folder
    # per proxy): their files, named as under the log directory
    folders = {p.parent for p in rotated} | {directory}
    return sorted(p.relative_to(directory).as_posix() for folder in folders
                  for p in folder.iterdir()
                  if p.is_file() and p not in rotated and not p.name.startswith("."))


def counted(count: int, noun: str) -> str:
    """`1 file`, `2 files`, `1 batch`, `2 batches`."""
    return f"{count:,} {noun}" + ("" if count == 1 else "es" if noun.endswith("h") else "s")


def not_read_yet(o: Followed) -> str:
    """A --once run's last words on the active logs: "; not read until they rotate: ..."
    (or nothing)."""
    active = active_logs(o)
    return f"; not read until they rotate: {', '.join(active)}" if active else ""


def _collect(o: Followed, spool: Spool, command: str,
             left_out: Callable[[list[Unreadable]], None]) -> bool:
    """Stage what rotated; False when a file will not be staged and that stops us."""
    spool.collect()
    if not spool.unreadable:
        return True
    named = ", ".join(f"{u.path} ({u.reason})" for u in spool.unreadable)
    if not o.skip_unreadable:
        print(f"kafkalens {command}: {len(spool.unreadable)} rotated file(s) cannot be read: "
              f"{named}; stopped (--skip-unreadable goes on without them)", file=sys.stderr,
              flush=True)
        return False
    print(f"kafkalens {command}: left out, not read: {named}", file=sys.stderr, flush=True)
    left_out(spool.unreadable)  # recorded first: a crash between names them again
    spool.leave_out(spool.unreadable)
    return True


def _table_widened(error: BaseException, o: Followed) -> bool:
    """The query over an ingested table stopped because the table's schema changed
    (Delta's DELTA_SCHEMA_CHANGED conditions): the ingest stored a new field."""
    return o.table_source is not None and "DELTA_SCHEMA_CHANGED" in str(error)


def _failed(error: BaseException, o: Followed, command: str) -> int:
    failure = read_failure(error)
    if failure is not None:
        hint = ("replace it with an empty file to go on" if not o.spooled
                else "a restart reads it again")
        print(f"kafkalens {command}: cannot read {failure.path} ({failure.reason}); stopped "
              f"({hint})", file=sys.stderr, flush=True)
    else:
        print(f"kafkalens {command}: stopped: {first_line(error)}", file=sys.stderr, flush=True)
    return EXIT_UNREADABLE


def stop_between_batches(query: StreamingQuery, patience: float = STOP_PATIENCE_SECONDS) -> None:
    """Let a running batch finish first (stopping interrupts it: it would be redone)."""
    deadline = time.monotonic() + patience
    while query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()
