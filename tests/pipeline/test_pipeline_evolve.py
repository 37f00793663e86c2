"""The ingested table as the log's fields change (pipeline/evolve.py).

A log with fields the schema does not name (new ones): each is stored as a column of its own (the type its values
have), read back by Spark and by a reader that is not Spark (delta-rs into Arrow); a
later run adds the next new field to the same table, a field once stored keeps its
type, and a continuous ingest that meets a new field in a file rotated while it runs
stores it too. A log with retyped fields (a number as a string, an object for a
number, a nested value of another type): each such line is a line, not a bad line,
its typed column null and the value's text in `retyped`, counted per field on stderr;
a line cut short stays a bad line. The report over the table still runs, and a
`watch --table` reads on when the ingest adds a column under it. Checked against the
lines written, not against the pipeline's own reading of them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gzip
import io
import itertools
import json
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType
from support.logs import age_like_proxy
from support.parquet_tables import tables
from support.synth import Synth, to_line, write_rotated

from pipeline.evolve import SAMPLE_LINES, Evolution, column_type, sample_keys
from pipeline.ingest import IngestOptions, run_ingest
from pipeline.report import run_report
from pipeline.watch import WatchOptions, run_watch

TS = "2025-03-01T12:00:{:02d}Z"


def _request(second: int, **fields: Any) -> dict[str, Any]:
    line = {"ts": TS.format(second), "event": "request", "conn": f"e{second}", "api_key": 3,
            "api": "Metadata", "api_version": 12, "client_id": "evolving", "latency_ms": 1.5}
    line.update(fields)
    return line


# New fields, each with the type its values have.
NEW = [_request(1, tenant="blue", queue_depth=3, sampled=True, detail={"a": [1, 2]}),
       _request(2, tenant="green", queue_depth=5, sampled=False, detail={"a": []})]
# Known fields of another type: (line, field, its text in `retyped`).
RETYPED = [
    (_request(3, latency_ms="12.5"), "latency_ms", "12.5"),
    (_request(4, api_key={"k": 1}), "api_key", '{"k":1}'),
    (_request(5, positions=[{"topic": "t", "partition": "zero", "lag": 1}]), "positions",
     '[{"topic":"t","partition":"zero","lag":1}]'),
]
CUT = '{"ts": "2025-03-01T12:00:06Z", "event": "request", "api_key": 1, "ap'


_TAILS = itertools.count()


def _write(logs: Path, lines: list[str], name: str = "requests.log") -> None:
    """The lines into the active log, rotated; a line of its own left active after."""
    write_rotated(logs, lines, len(lines), name=name)
    tail = _request(59, conn=f"tail{next(_TAILS)}")  # unique: a staged file's fingerprint
    write_rotated(logs, [to_line(tail)], 1, name=name)  # rotates the file above
    age_like_proxy(logs, f"{name}*")


def _delta(spark: SparkSession, table: Path) -> Any:
    return spark.read.format("delta").load(str(table))


@pytest.fixture(scope="module")
def evolved(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("evolved")
    logs, table = root / "logs", root / "table"
    synth = Synth(seed=3, rate=5)
    plain = [to_line(e) for e in synth.events(300)]
    lines = plain[:100] + [to_line(e) for e in NEW] + plain[100:200] + [
        to_line(line) for line, _, _ in RETYPED] + [CUT] + plain[200:]
    _write(logs, lines)
    runs = []
    for n in range(2):
        if n:  # the second run: a field new then, and a stored one of another type
            _write(logs, [to_line(_request(7, zone="eu-1")),
                          to_line(_request(8, queue_depth="many"))])
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = run_ingest(spark, IngestOptions(str(logs), str(table), once=True))
        runs.append((code, err.getvalue()))
    return {"logs": logs, "table": table, "runs": runs, "root": root}


def test_new_fields_are_stored_as_columns_of_their_type(
        spark: SparkSession, evolved: dict[str, Any]) -> None:
    table = evolved["table"]
    code, said = evolved["runs"][0]
    assert code == 0, said
    stored = said[said.index("stored as new columns of "):].splitlines()[0]
    for field in ("detail (string)", "queue_depth (bigint)", "sampled (boolean)",
                  "tenant (string)"):
        assert field in stored, said
    types = {f.name: f.dataType.simpleString() for f in _delta(spark, table).schema.fields}
    assert types["tenant"] == "string" and types["queue_depth"] == "bigint"
    assert types["sampled"] == "boolean" and types["detail"] == "string"
    rows = _delta(spark, table).where(F.col("tenant").isNotNull()).orderBy("ts").collect()
    got = [(r["tenant"], r["queue_depth"], r["sampled"], json.loads(r["detail"])) for r in rows]
    assert got == [(e["tenant"], e["queue_depth"], e["sampled"], e["detail"]) for e in NEW]
    # A reader that is not Spark reads the new columns through the Delta log.
    from deltalake import DeltaTable

    arrow = DeltaTable(str(table)).to_pyarrow_table(columns=["tenant", "queue_depth", "kind"])
    stored = sorted((t, q) for t, q in zip(arrow.column("tenant").to_pylist(),
                                           arrow.column("queue_depth").to_pylist(),
                                           strict=True) if t is not None)
    assert stored == [("blue", 3), ("green", 5)]


def test_retyped_fields_are_kept_as_text_and_counted_not_bad(
        spark: SparkSession, evolved: dict[str, Any]) -> None:
    table = evolved["table"]
    _, said = evolved["runs"][0]
    assert ("kept as text in the `retyped` column (the typed column null): api_key 1 line, "
            "latency_ms 1 line, positions 1 line") in said, said
    rows = {r["conn"]: r for r in _delta(spark, table).where(
        F.col("retyped").isNotNull()).collect() if r["conn"] in {"e3", "e4", "e5"}}
    for line, field, text in RETYPED:
        row = rows[line["conn"]]
        assert row["kind"] == "lines" and row["bad_reason"] is None, row
        assert row["retyped"] == {field: text}, row
        assert row[field] is None, row
        assert row["api"] == "Metadata" and row["client_id"] == "evolving"  # the rest kept
    bad = _delta(spark, table).where(F.col("kind") == "bad_lines").collect()
    assert [r["line"] for r in bad if "12:00:06" in (r["line"] or "")] == [CUT]
    assert all(r["retyped"] is None for r in bad)
    # every line of the log is in the table once (Synth's good lines, ours, the cut one)
    written = sum(1 for p in evolved["logs"].glob("requests.log.*") for _ in p.open())
    assert _delta(spark, table).count() == written


def test_a_later_run_adds_its_new_field_and_keeps_stored_types(
        spark: SparkSession, evolved: dict[str, Any]) -> None:
    table = evolved["table"]
    code, said = evolved["runs"][1]
    assert code == 0, said
    assert f"stored as new columns of {table}: zone (string)\n" in said, said
    assert "queue_depth 1 line" in said, said
    types = {f.name: f.dataType.simpleString() for f in _delta(spark, table).schema.fields}
    assert types["zone"] == "string" and types["queue_depth"] == "bigint"
    zone = _delta(spark, table).where(F.col("conn") == "e7").collect()
    assert [r["zone"] for r in zone] == ["eu-1"]
    many = _delta(spark, table).where(F.col("conn") == "e8").collect()
    assert [(r["queue_depth"], r["retyped"], r["kind"]) for r in many] == [
        (None, {"queue_depth": "many"}, "lines")]


def test_the_report_over_the_evolved_table_runs(
        spark: SparkSession, evolved: dict[str, Any], tmp_path: Path) -> None:
    table = evolved["table"]
    result = run_report(spark, [], str(tmp_path / "report"), table=str(table))
    bad = _delta(spark, table).where(F.col("kind") == "bad_lines").count()
    assert (result.counts.lines, result.counts.bad) == (_delta(spark, table).count(), bad)


def test_the_report_over_the_logs_is_the_report_over_their_evolved_table(
        spark: SparkSession, tmp_path: Path) -> None:
    """One log with new fields, retyped known fields, a stored new field retyped (its
    type sampled from the file's first lines, another type later on) and a line cut
    short: the report over the raw logs and over their ingested table give the same
    tables and the same counts; a retyped line is a line in both, counted per field
    (the report's fields only: the new field's retyped value is the table's alone)."""
    logs, table = tmp_path / "logs", tmp_path / "table"
    plain = [to_line(e) for e in Synth(seed=8, rate=5).events(1200)]
    late = _request(9, queue_depth="many")  # past the sample: the column is bigint
    lines = plain[:100] + [to_line(e) for e in NEW] + plain[100:200] + [
        to_line(line) for line, _, _ in RETYPED] + [CUT] + plain[200:] + [to_line(late)]
    assert len(lines) > SAMPLE_LINES
    _write(logs, lines)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert run_ingest(spark, IngestOptions(str(logs), str(table), once=True)) == 0
    said = err.getvalue()
    assert "queue_depth (bigint)" in said and "queue_depth 1 line" in said, said
    raw = run_report(spark, [str(logs / "requests.log.*")], str(tmp_path / "raw"))
    over = run_report(spark, [], str(tmp_path / "over"), table=str(table))
    assert raw.counts.retyped_fields == tuple(sorted((f, 1) for _, f, _ in RETYPED))
    assert (raw.counts.retyped, raw.counts.bad) == (len(RETYPED), 1)  # the cut line
    assert raw.counts.lines == len(lines)
    assert over.counts == raw.counts
    assert over.table_rows == raw.table_rows
    assert tables(tmp_path / "over") == tables(tmp_path / "raw")
    bad = pq.read_table(tmp_path / "raw" / "bad_lines").to_pylist()
    assert [(r["reason"], r["bad_lines"]) for r in bad] == [("invalid JSON", 1)]


def test_a_running_ingest_stores_a_field_first_seen_in_a_later_rotated_file(
        spark: SparkSession, tmp_path: Path) -> None:
    logs, table = tmp_path / "logs", tmp_path / "table"
    _write(logs, [to_line(_request(s)) for s in range(10)])
    options = IngestOptions(str(logs), str(table), interval=1.0)
    runner = threading.Thread(target=run_ingest, args=(spark, options), daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + 120

        def wait_for(check: Any) -> None:
            while time.monotonic() < deadline:
                try:
                    if check():
                        return
                except Exception:  # noqa: BLE001 - no table yet, or a batch being written
                    pass
                time.sleep(1)
            raise AssertionError("not in the table in time")

        wait_for(lambda: _delta(spark, table).where(F.col("conn") == "e9").count() == 1)
        _write(logs, [to_line(_request(20, region="north")), to_line(_request(21))])
        wait_for(lambda: "region" in _delta(spark, table).columns and _delta(
            spark, table).where(F.col("region") == "north").count() == 1)
    finally:
        for query in spark.streams.active:
            query.stop()
        runner.join(60)
    conns = [r["conn"] for r in _delta(spark, table).where(F.col("kind") == "lines").collect()]
    ours = sorted(c for c in conns if c.startswith("e"))
    assert ours == sorted([f"e{s}" for s in range(10)] + ["e20", "e21"])  # each once


def test_new_fields_are_found_in_a_sample_with_their_types(tmp_path: Path) -> None:
    path = tmp_path / "requests.log.1.gz"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps(_request(1, n=1, x=1.5, flag=True, obj={"a": 1})) + "\n")
        f.write("not json\n")
        f.write(json.dumps(_request(2, n=2, x=2, flag=None, obj=[1])) + "\n")
    keys = sample_keys(path)
    assert column_type(keys["n"]).simpleString() == "bigint"
    assert column_type(keys["x"]).simpleString() == "double"  # an integer and a fraction
    assert column_type(keys["flag"]).simpleString() == "boolean"  # null is no kind
    assert column_type(keys["obj"]).simpleString() == "string"  # the JSON text
    evolution = Evolution(["file", "kind"], StructType())
    assert evolution.sample([path])
    added, left = evolution.widen()
    assert sorted(added) == ["flag", "n", "obj", "x"] and left == []
    assert not evolution.sample([path])  # sampled once, its fields known now


def test_the_sampled_files_remembered_are_those_still_waiting(tmp_path: Path) -> None:
    """A continuous ingest samples every rotated file for months: what it remembers of
    them is bounded by the files waiting, not by all it ever saw."""
    paths = []
    for i in range(3):
        path = tmp_path / f"requests.log.{i}"
        path.write_text(json.dumps(_request(i, **{f"f{i}": i})) + "\n")
        paths.append(path)
    evolution = Evolution(["file", "kind"], StructType())
    assert evolution.sample(paths)
    assert sorted(evolution.widen()[0]) == ["f0", "f1", "f2"]
    assert len(evolution.sampled) == 3
    paths[0].unlink()
    paths[1].unlink()  # read and gone
    assert not evolution.sample(paths[2:])  # still known: not sampled again
    assert len(evolution.sampled) == 1
    later = tmp_path / "requests.log.9"
    later.write_text(json.dumps(_request(9, f9=9)) + "\n")
    assert evolution.sample([paths[2], later]) and list(evolution.widen()[0]) == ["f9"]
    assert len(evolution.sampled) == 2


def test_a_watch_over_the_table_reads_on_when_the_ingest_adds_a_column(
        spark: SparkSession, tmp_path: Path) -> None:
    """Delta's streaming source stops at a schema change; `watch --table` starts its
    query again (from its checkpoint) and reads the lines that brought the column."""
    logs, table, out = tmp_path / "logs", tmp_path / "table", tmp_path / "out"
    _write(logs, [to_line(_request(s)) for s in range(10)])
    assert run_ingest(spark, IngestOptions(str(logs), str(table), once=True)) == 0
    options = WatchOptions(None, out=str(out), table=str(table), interval=1.0)
    codes: list[int] = []
    runner = threading.Thread(target=lambda: codes.append(run_watch(spark, options)),
                              daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + 120

        def read_by_watch(since: str = "") -> int:
            """Lines the watch's batches read (those started at `since` or later)."""
            return sum(p.get("numInputRows", 0) for q in spark.streams.active
                       if q.name == "kafkalens_watch" for p in q.recentProgress
                       if p["timestamp"] >= since)

        while read_by_watch() < 10 and time.monotonic() < deadline:
            time.sleep(1)
        assert read_by_watch() == 10  # the first run's lines (the active log's wait)
        since = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _write(logs, [to_line(_request(30, shard=4)), to_line(_request(31))])
        assert run_ingest(spark, IngestOptions(str(logs), str(table), once=True)) == 0
        assert "shard" in _delta(spark, table).columns
        while read_by_watch(since) < 3 and time.monotonic() < deadline:
            time.sleep(1)
        assert not codes, codes  # still running: it did not stop at the new column
        assert read_by_watch(since) == 3  # e30, e31 and the line left active before
    finally:
        for query in spark.streams.active:
            query.stop()
        runner.join(60)


def test_the_watch_reads_a_retyped_line_as_a_line_over_the_logs_and_over_the_table(
        spark: SparkSession, evolved: dict[str, Any], tmp_path: Path, capsys: Any) -> None:
    """`watch` over the raw logs and `watch --table` over their ingested table count
    the same retyped lines (the report's fields only: a new field's retyped value is
    the table's alone) and no bad line for them: each is folded into its window, a
    line without the retyped field."""
    counts = {}
    for name, options in (
            ("logs", WatchOptions(str(evolved["logs"]), out=str(tmp_path / "logs"), once=True)),
            ("table", WatchOptions(None, out=str(tmp_path / "table"), once=True,
                                   table=str(evolved["table"])))):
        assert run_watch(spark, options) == 0
        said = capsys.readouterr().out
        files = spark.read.parquet(str(tmp_path / name / "input_files")).collect()
        bad = spark.read.parquet(str(tmp_path / name / "bad_lines")).collect()
        counts[name] = (sum(r["retyped_lines"] or 0 for r in files),
                        sorted((r["reason"], r["bad_lines"]) for r in bad))
        assert (f"{len(RETYPED)} with a field of another type than the schema's: read "
                "without it") in said, said
    # the three retyped lines; the line cut short the only bad one
    assert counts["logs"] == counts["table"] == (len(RETYPED), [("invalid JSON", 1)])
