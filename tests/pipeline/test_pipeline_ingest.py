"""`kafkalens ingest`: the logs parsed once into a Delta table partitioned by time.

Killed (SIGKILL) after its first micro-batch and run again, it holds every line of
every rotated file exactly once (counted per file against the files themselves), as
Spark reads it and as a reader that is not Spark reads it (delta-rs, from PyPI, hands
the log's current files to DuckDB as Arrow); the report and the watch over the table
give the tables they give over the logs; bad lines are kept apart with their file and
reason; small files are compacted as they pile up and by --compact, which also
vacuums; a table an older kafkalens wrote (Parquet and Spark's sink log) converts in
place and the ingest goes on from its checkpoint. The same kill and restart on a
standalone cluster: tests/pipeline/test_pipeline_cluster.py.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from support.ingest_run import (
    active_files,
    duckdb_lines_per_file,
    ingest_args,
    is_hidden,
    kill_after_first_batch,
    lines_per_file,
    old_format_ingest,
    operation,
    rotated_logs,
    run_to_the_end,
)
from support.logs import age_like_proxy
from support.parquet_tables import tables
from support.synth import Synth, to_line, write_rotated

from pipeline import ingest, rollup
from pipeline.convert import run_convert
from pipeline.ingest import IngestOptions, read_table, run_ingest
from pipeline.read import PARSED_FIELDS
from pipeline.report import run_report
from pipeline.tables import ladder_seconds, span_bucket_seconds
from pipeline.watch import WatchOptions, run_watch


def test_killed_mid_run_and_restarted_every_line_once(
        spark: SparkSession, tmp_path: Path) -> None:
    logs, table = tmp_path / "logs", tmp_path / "table"
    want = rotated_logs(logs, files=2, lines_per_file=150)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    args = ingest_args(logs, table, "--master", "local[2]")
    kill_after_first_batch(args, env, table, tmp_path, len(want))
    before = lines_per_file(spark, table)  # what the killed run committed
    assert duckdb_lines_per_file(table) == before  # its cut batch's files in no version
    said = run_to_the_end(args, env, tmp_path)
    assert lines_per_file(spark, table) == want, said[-3000:]
    assert duckdb_lines_per_file(table) == want
    assert "telemetry.log.1" in want
    # The restart says it wrote the lines the killed run had not committed, no more.
    rest = f"{sum(want.values()) - sum(before.values()):,} lines in "
    assert said.splitlines()[-1].startswith(f"kafkalens ingest: done: {rest}"), said[-3000:]


@pytest.fixture(scope="module")
def ingested(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[Path, Path, Counter]:
    root = tmp_path_factory.mktemp("ingested")
    logs, table = root / "logs", root / "table"
    want = rotated_logs(logs, files=3, lines_per_file=400, seed=7)
    assert run_ingest(spark, IngestOptions(str(logs), str(table), once=True)) == 0
    return logs, table, want


def test_the_table_is_partitioned_by_time_and_keeps_bad_lines_apart(
        spark: SparkSession, ingested: tuple) -> None:
    logs, table, want = ingested
    assert lines_per_file(spark, table) == want
    assert duckdb_lines_per_file(table) == want
    data = active_files(table)
    assert data and all(p.name.endswith(".zstd.parquet") for p in data)
    layout = {p.relative_to(table).parent.as_posix() for p in data}
    assert layout == {"kind=lines/date=2025-03-01/hour=12",
                      "kind=bad_lines/date=2025-03-01/hour=12"}, layout
    # One batch of four files (a task each): one file a partition (optimized writes),
    # each with statistics on `ts` alone, which its log entry holds.
    assert sorted(Counter(p.parent for p in data).values()) == [1, 1], data
    stats = [json.loads(json.loads(line)["add"]["stats"])
             for log in sorted((table / "_delta_log").glob("*.json"))
             for line in log.read_text().splitlines() if '"add"' in line]
    # (a file of bad lines without a ts has its null count alone)
    assert stats and all(s["numRecords"] > 0 and set(s["nullCount"]) == {"ts"} >= set(
        s["minValues"]) | set(s["maxValues"]) for s in stats), stats
    bad = read_table(spark, str(table)).where(F.col("bad_reason").isNotNull())
    rows = bad.select("file", "bad_reason", "line").collect()
    assert rows and all(r["bad_reason"] and r["line"] and r["file"].startswith(
        f"file:{logs}/requests.log.") for r in rows)
    kinds = spark.read.format("delta").load(str(table)).groupBy(
        "kind", F.col("bad_reason").isNull().alias("good")).count().collect()
    assert {(r["kind"], r["good"]) for r in kinds} == {("lines", True), ("bad_lines", False)}
    # Timestamps as INT64 microseconds (the log's precision), not INT96.
    ts = pq.ParquetFile(data[0]).schema.column(PARSED_FIELDS.index("ts"))
    assert (ts.name, ts.physical_type, str(ts.logical_type)) == (
        "ts", "INT64", "Timestamp(isAdjustedToUTC=true, timeUnit=microseconds, "
        "is_from_converted_type=false, force_set_converted_type=false)")


def test_the_report_over_the_table_is_the_report_over_the_logs(
        spark: SparkSession, ingested: tuple, tmp_path: Path) -> None:
    logs, table, _ = ingested
    raw, parsed = tmp_path / "raw", tmp_path / "table"
    over_logs = run_report(spark, [str(logs / "*.log.[0-9]*")], str(raw))
    over_table = run_report(spark, [], str(parsed), table=str(table))
    assert over_table.counts == over_logs.counts
    assert over_table.table_rows == over_logs.table_rows
    assert tables(parsed) == tables(raw)


def test_the_watch_over_the_table_is_the_watch_over_the_logs(
        spark: SparkSession, ingested: tuple, tmp_path: Path) -> None:
    logs, table, _ = ingested
    raw, parsed = tmp_path / "raw", tmp_path / "table"
    assert run_watch(spark, WatchOptions(str(logs), out=str(raw), once=True,
                                         max_files_per_trigger=10)) == 0
    assert run_watch(spark, WatchOptions(None, out=str(parsed), once=True,
                                         table=str(table), max_files_per_trigger=100)) == 0
    got, want = tables(parsed), tables(raw)
    assert set(got) == set(want) >= {"by_api", "by_software"} and want["by_api"]
    for name in ("by_api", "by_software"):
        assert got[name] == want[name], name


def test_the_ingest_says_what_it_wrote_and_what_waits_for_rotation(
        spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A cron run says, per batch and in all, how many lines it wrote (counted here in
    the files themselves) and ends naming the active logs it leaves until they rotate;
    run again with nothing new, it says so."""
    logs, table = tmp_path / "logs", tmp_path / "table"
    want = rotated_logs(logs, files=3, lines_per_file=120, seed=5)
    assert sorted(p.name for p in logs.iterdir() if p.suffix == ".log") == [
        "requests.log", "telemetry.log"]
    options = IngestOptions(str(logs), str(table), once=True, max_files_per_trigger=2)
    capsys.readouterr()
    assert run_ingest(spark, options) == 0
    said = capsys.readouterr().err.splitlines()
    batches = [re.fullmatch(rf"kafkalens ingest: batch (\d): ([\d,]+) lines written to {table}",
                            line) for line in said if line.startswith("kafkalens ingest: batch ")]
    assert len(batches) == 2 and all(batches), said  # four rotated files, two a batch
    lines = sum(int(m[2].replace(",", "")) for m in batches if m)
    assert lines == sum(want.values())
    assert said[-1] == (
        f"kafkalens ingest: done: {lines:,} lines in 2 batches written to {table}; "
        f"`kafkalens report --table {table}` reads them; not read until they rotate: "
        "requests.log, telemetry.log")
    assert run_ingest(spark, options) == 0
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"kafkalens ingest: done: nothing new to read (no file matching *.log.[0-9]* in "
        f"{logs} that an earlier run has not read); not read until they rotate: "
        "requests.log, telemetry.log")
    assert lines_per_file(spark, table) == want


def test_small_files_are_compacted_as_they_pile_up_and_by_compact(
        spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A batch per rotated file adds files to the same hour's partitions; once a
    partition holds COMPACT_AFTER_FILES (3 here) the ingest compacts it (Delta's auto
    compaction). --compact then leaves a file per partition and, with --retention 0h,
    deletes the replaced files (VACUUM); every line is still there once, for Spark and
    for DuckDB, and the ingest goes on from its checkpoint afterwards. A compacted
    file's row groups are bounded as the ingest's (ROW_GROUP_BYTES, tiny here), so its
    tasks can share the cores."""
    logs, table = tmp_path / "logs", tmp_path / "table"
    want = rotated_logs(logs, files=8, lines_per_file=60, seed=3)
    monkeypatch.setitem(ingest.WRITE_CONF, "spark.databricks.delta.autoCompact.minNumFiles", "3")
    monkeypatch.setitem(ingest.WRITE_CONF, "parquet.block.size", "4096")
    once = IngestOptions(str(logs), str(table), once=True, max_files_per_trigger=1)
    assert run_ingest(spark, once) == 0
    operations = Counter(operation(c) for c in sorted((table / "_delta_log").glob("*.json")))
    assert operations["STREAMING UPDATE"] == len(want) == 9 and operations["OPTIMIZE"] >= 1
    per_partition = Counter(p.parent for p in active_files(table))
    assert max(per_partition.values()) < 3, per_partition
    assert lines_per_file(spark, table) == want

    on_disk = {p for p in table.rglob("*.parquet") if not is_hidden(table, p)}
    assert len(on_disk) > len(active_files(table))  # the replaced ones, kept for readers
    compact = IngestOptions(None, str(table), compact=True, retention="0h")
    capsys.readouterr()
    assert run_ingest(spark, compact) == 0
    said, rolled = capsys.readouterr().err.strip().splitlines()
    assert re.fullmatch(rf"kafkalens ingest: {table}: compacted \d+ files into \d+; vacuumed "
                        r"\d+ files replaced more than 0h ago", said), said
    assert rolled.startswith("kafkalens ingest: rollup: "), rolled
    assert set(Counter(p.parent for p in active_files(table)).values()) == {1}
    groups = [(m.num_rows, m.num_row_groups)
              for m in (pq.ParquetFile(p).metadata for p in active_files(table))]
    assert any(rows > 200 for rows, _ in groups), groups
    assert all(n > 1 for rows, n in groups if rows > 200), groups  # Parquet checks at 100 rows
    assert {p for p in table.rglob("*.parquet") if not is_hidden(table, p)} == set(
        active_files(table))
    assert lines_per_file(spark, table) == want
    assert duckdb_lines_per_file(table) == want
    # More requests logs rotate (the names shift; the spool knows files by content).
    now = rotated_logs(logs, files=2, lines_per_file=60, seed=4)
    assert run_ingest(spark, once) == 0
    requests = sum(n for name, n in now.items() if name.startswith("requests.log."))
    assert requests > sum(n for name, n in want.items() if name.startswith("requests.log."))
    assert sum(lines_per_file(spark, table).values()) == requests + want["telemetry.log.1"]


def test_a_rotated_file_that_cannot_be_read_stops_the_ingest_or_is_named_in_the_report(
        spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A plain file named .gz among the rotated logs: by default the ingest stops with
    one line naming it (exit 1), and again when restarted; with --skip-unreadable it
    ingests the others, and the report over the table names the file as left out, with
    why, in input_files and bad_lines."""
    logs, table, out = tmp_path / "logs", tmp_path / "table", tmp_path / "out"
    want = rotated_logs(logs, files=2, lines_per_file=50, seed=11)
    misnamed = logs / "requests.log.9.gz"
    misnamed.write_text('{"ts":"2025-03-01T12:00:00Z","event":"request"}\n')
    old = misnamed.stat().st_mtime - 3600
    os.utime(misnamed, (old, old))
    options = IngestOptions(str(logs), str(table), once=True)
    stop = (f"kafkalens ingest: 1 rotated file(s) cannot be read: {misnamed} (not gzip "
            "data, though its name says .gz); stopped (--skip-unreadable goes on without them)")
    for _ in range(2):  # a restart does not pass over what stopped the run before it
        capsys.readouterr()
        assert run_ingest(spark, options) == 1
        assert capsys.readouterr().err.splitlines()[-1] == stop

    skip = IngestOptions(str(logs), str(table), once=True, skip_unreadable=True)
    assert run_ingest(spark, skip) == 0
    assert lines_per_file(spark, table) == want
    result = run_report(spark, [], str(out), table=str(table))
    assert result.left_out == {f"file:{misnamed}": "not gzip data, though its name says .gz"}
    files = {r["file"]: (r["status"], r["reason"])
             for r in spark.read.parquet(str(out / "input_files")).collect()}
    assert files[f"file:{misnamed}"] == ("left out", "not gzip data, though its name says .gz")
    assert {f for f, (status, _) in files.items() if status == "read"} == {
        f"file:{logs}/{name}" for name in want}


def test_a_table_of_the_older_format_converts_in_place_and_the_ingest_goes_on(
        spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A table an older kafkalens ingested (Parquet files listed by Spark's sink log),
    left as a killed run leaves it (its last batch logged by the sink, not recorded by
    the checkpoint): the ingest refuses it and names the command; `--convert` makes it
    a Delta table in place (its files, none copied), leaving that batch out, and the
    ingest then goes on: every line once, for Spark and for DuckDB."""
    logs, table = tmp_path / "logs", tmp_path / "table"
    want = rotated_logs(logs, files=4, lines_per_file=80, seed=9)
    o = IngestOptions(str(logs), str(table), once=True, max_files_per_trigger=1)
    assert old_format_ingest(spark, o) == 0
    commits = table / "_checkpoint" / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    for done in commits.glob(f"*{last}*"):
        done.unlink()
    old_files = {p for p in table.rglob("*.parquet") if not is_hidden(table, p)}

    capsys.readouterr()
    assert run_ingest(spark, o) == 2
    assert capsys.readouterr().err.strip() == (
        f"kafkalens ingest: {table} is a table of an older kafkalens (Parquet files and "
        f"Spark's sink log): convert it once, in place, with `kafkalens ingest --convert "
        f"--table {table}`")
    assert run_convert(spark, IngestOptions(None, str(table), convert=True)) == 0
    said = capsys.readouterr().err.strip()
    assert re.fullmatch(
        rf"kafkalens ingest: {table} is a Delta table now \(\d+ files, none copied; the old "
        rf"sink's log kept as _spark_metadata.converted\); batch {last} \(written, not "
        r"recorded by the checkpoint: a killed run\) left out, the next run writes it again",
        said), said
    assert set(active_files(table)) < old_files  # the same files, but the cut batch's
    assert run_ingest(spark, o) == 0
    assert lines_per_file(spark, table) == want
    assert duckdb_lines_per_file(table) == want
    assert run_convert(spark, IngestOptions(None, str(table), convert=True)) == 0
    assert "is a Delta table already" in capsys.readouterr().err


def test_bucket_sizes_divide_the_larger_ones_and_grow_with_the_span() -> None:
    """What the rollup's grain rests on: a size of the ladder divides every larger one,
    and the bucket for a longer span is never smaller (at most about 120 buckets)."""
    sizes = [ladder_seconds(m * 60) for m in range(1, 6000)]
    assert all(b % a == 0 for a, b in zip(sizes, sizes[1:], strict=False))
    spans = range(0, 90 * 86400, 997)
    buckets = [span_bucket_seconds(s) for s in spans]
    assert buckets == sorted(buckets) and buckets[0] == 60
    assert all(s / b <= 120 for s, b in zip(spans, buckets, strict=True))
    assert 3600 % span_bucket_seconds(7 * 3600) == 0


def test_the_rollup_of_closed_hours_gives_the_reports_the_lines_give(
        spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Logs over seven hours: the --once run rolls up the six closed ones (the newest
    may still fill), their minute rows folded into 6-minute slots (the span already
    calls for buckets of 6 minutes), and the report over the table, from the rollup
    and the newest hour's lines, is the report over the logs table for table. A later
    file with lines of a rolled-up hour makes that hour's rollup stale: the report reads
    its lines until the next run rolls it up again; compaction and VACUUM leave the
    rollup whole."""
    logs, table = tmp_path / "logs", tmp_path / "table"
    synth = Synth(seed=11, rate=0.04, bad_every=53, telemetry_every=7, follower_every=5)
    write_rotated(logs, map(to_line, synth.events(1250)), 250)  # the last 250 not rotated
    age_like_proxy(logs)

    # The report over the logs, the oracle, once for each state of the rotated files
    # (names, sizes, times): the same files give the same report.
    over_logs: dict[tuple, tuple[Any, dict]] = {}

    def same_report(name: str) -> int:
        rotated = sorted(logs.glob("*.log.[0-9]*"))
        state = tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in rotated)
        if state not in over_logs:
            raw = run_report(spark, [str(logs / "*.log.[0-9]*")], str(tmp_path / f"raw-{name}"))
            over_logs[state] = raw, tables(tmp_path / f"raw-{name}")
        raw, raw_tables = over_logs[state]
        over = run_report(spark, [], str(tmp_path / name), table=str(table))
        assert over.counts == raw.counts and over.table_rows == raw.table_rows
        assert tables(tmp_path / name) == raw_tables
        return rollup.fine_of_table(spark, str(table))[1]  # the rows the rollup stood for

    capsys.readouterr()
    assert run_ingest(spark, IngestOptions(str(logs), str(table), once=True)) == 0
    said = capsys.readouterr().err
    assert re.search(r"rollup: \d+ closed hours \([\d,]+ rows\) rolled up into ", said), said
    hours = rollup.rolled_hours(spark, str(table))
    lines = rollup.hour_counts(rollup.table_version(spark, str(table)))
    newest = max((d, h) for k, d, h in lines if k == "lines")
    assert set(hours) == {hour for hour in lines if (hour[1], hour[2]) < newest}
    assert {("lines", "2025-03-01", 12), ("lines", "2025-03-01", 17)} <= set(hours)
    slots = spark.read.format("delta").load(rollup.path_of(str(table))).where(
        F.col("part").isin("l", "p")).select(
        "part", "grain", (F.unix_seconds("minute") % 360).alias("off")).distinct().collect()
    assert {r["part"] for r in slots} == {"l", "p"}
    assert {(r["grain"], r["off"]) for r in slots} == {(360, 0)}
    stood_for = same_report("rolled")
    assert stood_for == sum(hours.values()) > 0
    # The report reads the lines of the hours not rolled up only (the others' partitions
    # pruned from Delta's file listing), and the rollup's rows of the others.
    read: dict[bool, set[tuple[str, str, int]]] = {True: set(), False: set()}
    for uri in rollup.fine_of_table(spark, str(table))[0].inputFiles():
        where = dict(part.split("=", 1) for part in uri.split("/") if "=" in part)
        read[f"/{rollup.ROLLUP}/" in uri].add((where["kind"], where["date"], int(where["hour"])))
    assert read == {True: set(hours), False: set(lines) - set(hours)}, read

    # A file rotated late brings lines of 12:30 into the rolled-up hour 12.
    late = Synth(seed=12, start="2025-03-01T12:30:00", rate=1.0)
    (logs / "late.log.1").write_text("".join(to_line(e) + "\n" for e in late.events(40)))
    age_like_proxy(logs, "late.log*")
    monkeypatch.setattr(rollup, "update", lambda spark, table: (0, 0))
    assert run_ingest(spark, IngestOptions(str(logs), str(table), once=True)) == 0
    assert same_report("stale") == stood_for - hours[("lines", "2025-03-01", 12)]
    monkeypatch.undo()
    assert rollup.update(spark, str(table)) == (1, hours[("lines", "2025-03-01", 12)] + 40)
    assert same_report("again") == stood_for + 40

    assert run_ingest(spark, IngestOptions(None, str(table), compact=True, retention="0h")) == 0
    assert same_report("compacted") == stood_for + 40

    # A rollup an older kafkalens made: every hour's minute rows kept at the minute, no
    # `grain` column. The report uses its hours (a minute divides every bucket), and the
    # next rollup adds a newly closed hour, with its grain, beside them (mergeSchema).
    path = rollup.path_of(str(table))
    monkeypatch.setattr(rollup, "grain", lambda counts: rollup.MINUTE)
    assert rollup.update(spark, str(table)) == (0, 0)  # every closed hour rolled up already
    spark.read.format("delta").load(path).limit(0).write.format("delta").mode("overwrite").save(
        path)  # emptied: update rolls every closed hour up again, at the minute
    assert rollup.rolled_hours(spark, str(table)) == {}
    assert rollup.update(spark, str(table))[0] == len(hours)
    monkeypatch.undo()
    older = spark.read.format("delta").load(path).drop("grain")
    older.write.format("delta").mode("overwrite").option("overwriteSchema", "true").partitionBy(
        *rollup.HOUR).save(path)
    assert "grain" not in spark.read.format("delta").load(path).columns
    assert same_report("older") == stood_for + 40
    assert newest[1] < 23
    later = Synth(seed=13, start=f"{newest[0]}T{newest[1] + 1:02d}:10:00", rate=1.0)
    (logs / "later.log.1").write_text("".join(to_line(e) + "\n" for e in later.events(40)))
    age_like_proxy(logs, "later.log*")
    assert run_ingest(spark, IngestOptions(str(logs), str(table), once=True)) == 0
    grains = {r["grain"] for r in spark.read.format("delta").load(path).select("grain")
              .distinct().collect()}
    assert None in grains and len(grains) == 2, grains  # the older hours' and the new one's
    assert same_report("mixed") > stood_for + 40
