"""`kafkalens ingest`: the logs parsed once into a Parquet table partitioned by time.

Killed (SIGKILL) after its first micro-batch and run again, it holds every line of
every rotated file exactly once (counted per file against the files themselves); the
report and the watch over the table give the tables they give over the logs; bad lines
are kept apart with their file and reason. The same kill and restart on a standalone
cluster: tests/pipeline/test_pipeline_cluster.py.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from support.ingest_run import (
    ingest_args,
    kill_after_first_batch,
    lines_per_file,
    rotated_logs,
    run_to_the_end,
)
from support.parquet_tables import tables

from pipeline.ingest import IngestOptions, run_ingest
from pipeline.report import run_report
from pipeline.watch import WatchOptions, run_watch


def test_killed_mid_run_and_restarted_every_line_once(
        spark: SparkSession, tmp_path: Path) -> None:
    logs, table = tmp_path / "logs", tmp_path / "table"
    want = rotated_logs(logs, files=6, lines_per_file=150)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    args = ingest_args(logs, table, "--master", "local[2]")
    kill_after_first_batch(args, env, table, tmp_path, len(want))
    before = lines_per_file(spark, table)  # what the killed run committed
    said = run_to_the_end(args, env, tmp_path)
    assert lines_per_file(spark, table) == want, said[-3000:]
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
    data = [p for p in table.rglob("*.parquet") if not p.name.startswith(".")]
    assert data and all(p.name.endswith(".zstd.parquet") for p in data)
    layout = {p.relative_to(table).parent.as_posix() for p in data}
    assert layout == {"kind=lines/date=2025-03-01/hour=12",
                      "kind=bad_lines/date=2025-03-01/hour=12"}, layout
    bad = spark.read.parquet(str(table)).where(F.col("kind") == "bad_lines")
    rows = bad.select("file", "bad_reason", "line").collect()
    assert rows and all(r["bad_reason"] and r["line"] and r["file"].startswith(
        f"file:{logs}/requests.log.") for r in rows)
    assert spark.read.parquet(str(table)).where(
        (F.col("kind") == "lines") & F.col("bad_reason").isNotNull()).count() == 0


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


def test_retention_drops_old_files_from_the_table(spark: SparkSession, tmp_path: Path) -> None:
    """--retention: the sink's log stops listing files that long after they were
    written, when it compacts (every third batch here: of the four batches, the files
    of the first three were written more than 1 ms before the third compacted), so they
    can be deleted and the table still reads (`spark.read.parquet` reads what the log
    lists)."""
    from pipeline.session import session_conf

    logs, table = tmp_path / "logs", tmp_path / "table"
    want = rotated_logs(logs, files=3, lines_per_file=100, seed=3)
    options = IngestOptions(str(logs), str(table), once=True, max_files_per_trigger=1,
                            retention="1ms")
    with session_conf(spark, {"spark.sql.streaming.fileSink.log.compactInterval": "3"}):
        assert run_ingest(spark, options) == 0
    assert len(want) == 4  # four rotated files, a batch each
    kept = lines_per_file(spark, table)
    assert len(kept) == 1 and kept.items() <= want.items(), (kept, want)
    listed = {Path(p.split(":", 1)[1]) for p in
              spark.read.parquet(str(table)).inputFiles()}
    data = {p for p in table.rglob("*.parquet") if not p.name.startswith(".")}
    assert listed < data
    for old in data - listed:
        old.unlink()
    assert lines_per_file(spark, table) == kept


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
