"""The report's Python pass: fastparse against Spark's parser, the fold, the sketch.

fastparse decides a line only where Spark's from_json must agree; every line it
leaves undecided goes to Spark. So each line of a corpus of awkward lines is parsed
both ways and, where fastparse decided, compared field by field; the report over the
corpus must count and explain bad lines exactly as Spark's parser does.
"""

from __future__ import annotations

import bz2
import gzip
import json
import math
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipeline import fastparse, partials, sketch, splits
from pipeline.read import parse_lines
from pipeline.report import run_report

GOOD = {"ts": "2025-03-01T12:00:00.500000Z", "event": "request", "conn": "c1",
        "listener": "plaintext", "client_address": "10.0.0.1:5555", "api_key": 0,
        "api": "Produce", "api_version": 9, "client_id": "x", "latency_ms": 1.5, "errors": [],
        "record_stats": {"per_topic": {"t1": {"batches": 1, "records": 2, "bytes": 30}}}}


def good(**changes: Any) -> str:
    return json.dumps({**GOOD, **changes})


CORPUS = [
    good(), good(client_id=123), good(client_id=1.5), good(client_id={"a": 1}),
    good(client_id=True), good(api_key="0"), good(api_key=1.0), good(api_key=True),
    good(api_key=2**40), good(api=None, api_key=7), good(latency_ms="NaN"),
    good(latency_ms="1.5"), good(latency_ms=3), good(latency_ms=0), good(latency_ms=-2.0),
    good(latency_ms=True), good(latency_ms=None, event="request_no_response"),
    good(ts="2025-03-01 12:00:00"), good(ts=1740830400), good(ts="2025-03-01T12:00:00Z"),
    good(ts="2025-03-01T12:00:00.5Z"), good(ts="2025-02-30T12:00:00Z"),
    good(ts="2025-03-01T12:00:00.1234567Z"), good(ts="2025-03-01T12:00:00+01:00"),
    good(ts=""), good(ts=None), good(event=None), good(event=5), good(event="connection_open"),
    good(event="kip1313_violation", errors=42), good(errors=42), good(errors="x"),
    good(errors=None), good(errors=["A"]), good(errors=[1, None]), good(record_stats=None),
    good(record_stats=5), good(record_stats={"per_topic": None}),
    good(record_stats={"per_topic": 3}), good(record_stats={"per_topic": {"t2": None}}),
    good(record_stats={"per_topic": {"t3": {"bytes": "x"}}}),
    good(record_stats={"per_topic": {"t4": {"bytes": 5}}}),
    good(record_stats={"per_topic": {"t5": {"bytes": 1.5}}}), good(members="3"),
    good(generation_id=2**33), good(members=4), good(unknown_field={"deep": [1, "x"]}),
    "{'ts': '2025-03-01T12:00:00Z', 'event': 'request', 'api': 'Produce'}",
    '{"ts":"2025-03-01T12:00:01Z","event":"request","api":"Produce","latency_ms":NaN}',
    '{"ts":"2025-03-01T12:00:01Z","event":"request","api":"Produce"} trailing',
    '{"ts":"2025-03-01T12:00:01Z","event":"request","api":"Produce","latency_ms":1e400}',
    '{"ts":"2025-03-01T12:00:01Z","event":"request","api":"Pr\\ud800"}',
    '{"ts":"2025-03-01T12:00:01Z","event":"request","api":1,"api":"Produce"}',
    '{"ts":"2025-03-01T12:00:01Z","event":"request","api_key":01}',
    '{"ts":"2025-03-01T12:00:01Z","event":"request","api":"Fetch","_corrupt_record":"x"}',
    '{"ts":"2025-03-01T12:00:01.000001Z","event":"reque',  # truncated
    "[1, 2, 3]", '"a string"', "42", "null", "{}", "\t", "not json at all",
]




def spark_parsed(spark: SparkSession, lines: list[str]) -> list[dict[str, Any]]:
    """What Spark's parser (read.parse_lines) makes of each line, in order."""
    frame = spark.createDataFrame([(line, "f", i) for i, line in enumerate(lines)],
                                  "value string, file string, i int")
    parsed = parse_lines(frame)  # a local frame: rows stay in order
    rows = parsed.withColumn("ts", F.unix_micros("ts")).collect()
    return [r.asDict(recursive=True) for r in rows]


def test_fastparse_agrees_with_spark_where_it_decides(spark: SparkSession) -> None:
    lines = [line for line in CORPUS if line.strip(" ")]
    expected = {i: row for i, row in enumerate(spark_parsed(spark, lines))}
    assert len(expected) == len(lines)  # no blank line in it: one row per line, in order
    decided = 0
    for i, line in enumerate(lines):
        got = fastparse.parse(line.encode())
        want = expected[i]
        if got is None:
            continue
        decided += 1
        assert want["bad_reason"] in (None, "missing or invalid ts/event"), line
        for name in got.__struct_fields__:
            if name in ("errors", "record_stats"):
                continue
            assert getattr(got, name) == want[name], (line, name)
        assert (1 if got.errors else 0) == want["error"], line
        per_topic = got.record_stats.per_topic if got.record_stats else None
        if per_topic is not None:
            per_topic = {t: c and {f: getattr(c, f) for f in c.__struct_fields__}
                         for t, c in per_topic.items()}
        assert per_topic == want["per_topic"], line
    assert decided >= 15  # the fast path does take the well-formed lines


def test_fastparse_leaves_the_edges_to_spark() -> None:
    undecided = [good(client_id=123), good(api_key=True), good(latency_ms="NaN"),
                 good(ts="2025-03-01 12:00:00"), good(ts="2025-02-30T12:00:00Z"),
                 good(errors=42), good(record_stats={"per_topic": {"t": {"bytes": 1.5}}}),
                 "{'ts': 1}", '{"a":1} x', "[1]", '{"ts":"2025-03-01T12:00:01Z","ev']
    assert [fastparse.parse(line.encode()) for line in undecided] == [None] * len(undecided)
    assert fastparse.parse(b'{"api":"\xff"}') is None  # invalid UTF-8
    line = fastparse.parse(good(ts="2025-03-01T12:00:00.5Z", latency_ms=3).encode())
    assert line.ts == 1740830400_500000 and line.latency_ms == 3.0


def fold(lines: list[bytes], file: str = "f") -> dict[str, list[dict[str, Any]]]:
    batch = pa.RecordBatch.from_pydict({"value": pa.array(lines, pa.binary()).cast(pa.string()),
                                        "file": [file] * len(lines)})
    out = pa.Table.from_batches(list(partials.fold_text(iter([batch])))).to_pylist()
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for row in out:
        by_kind.setdefault(row["kind"], []).append(row)
    return by_kind


def test_fold_counts_and_keeps_lines() -> None:
    lines = [good().encode(), good(ts="2025-03-01T12:01:00.000001Z", latency_ms=None,
                                   errors=["X"]).encode(),
             good(event="connection_close").encode(), good(event="other").encode(),
             good(ts=None).encode(), b"   ", b"", b"not json", b'{"ts":"2025-03-01T1',
             good(client_id=5).encode()]
    rows = fold(lines, "file:/logs/a.log")
    (n,) = rows["n"]
    # Blank lines are no lines; the two undecided and the malformed ones wait for Spark.
    assert (n["lines"], n["bad"], n["requests"], n["conn_events"]) == (5, 1, 2, 1)
    assert (n["first_us"], n["last_us"]) == (1740830400_500000, 1740830460_000001)
    assert [(r["file"], r["reason"]) for r in rows["b"]] == [
        ("file:/logs/a.log", "missing or invalid ts/event")]
    assert [r["line"] for r in rows["r"]] == [b"not json", b'{"ts":"2025-03-01T1',
                                              good(client_id=5).encode()]
    (g,) = rows["g"]  # both requests: same connection, api version and identity
    assert (g["requests"], g["errors"], g["api"], g["conn"]) == (2, 1, "Produce", "c1")
    latency = sorted(rows["l"], key=lambda r: r["minute"])
    assert [(r["minute"], r["requests"], r["errors"], r["lat_n"]) for r in latency] == [
        (29013840, 1, 0, 1), (29013841, 1, 1, 0)]
    assert latency[0]["bin_lo"] == latency[0]["bin_hi"] == [1.5]
    (t,) = rows["t"]
    assert (t["topic"], t["produced_bytes"], t["fetched_bytes"]) == ("t1", 60, 0)


def test_latency_rows_join_the_groups_of_one_minute() -> None:
    # Two connections (two groups) in one minute, one of them also in the next: the
    # latency rows are per (api, api_key, minute) whatever the group.
    lines = [good(conn="c1", latency_ms=1.0), good(conn="c2", latency_ms=2.0, errors=["X"]),
             good(conn="c2", ts="2025-03-01T12:01:00.000001Z", latency_ms=None)]
    rows = fold([line.encode() for line in lines])
    groups = {g["conn"]: (g["requests"], g["errors"], g["first_us"], g["last_us"])
              for g in rows["g"]}
    assert groups == {"c1": (1, 0, 1740830400_500000, 1740830400_500000),
                      "c2": (2, 1, 1740830400_500000, 1740830460_000001)}
    latency = sorted(rows["l"], key=lambda r: r["minute"])
    assert [(r["minute"], r["requests"], r["errors"], r["lat_n"], r["lat_sum"])
            for r in latency] == [(29013840, 2, 1, 2, 3.0), (29013841, 1, 0, 0, 0.0)]
    assert rows["n"][0]["requests"] == 3


def test_batch_can_be_taken_twice() -> None:
    p = partials.Partials()
    partials._fold_lines(p, [good().encode(), good(conn="c2").encode()], lambda _: "f")
    assert p.batch().to_pylist() == p.batch().to_pylist()


def test_fold_of_nothing() -> None:
    rows = fold([])
    assert list(rows) == ["n"]
    assert rows["n"][0]["lines"] == 0 and rows["n"][0]["first_us"] is None


def test_topic_sums_follow_sparks_nulls() -> None:
    counts = {"batches": None, "records": 4, "bytes": 7}
    rows = fold([good(record_stats={"per_topic": {"a": counts, "b": None}}).encode(),
                 good(api_key=1, api="Fetch", record_stats={"per_topic": {"b": None}}).encode()])
    got = {r["topic"]: {k: r[k] for k in partials.TOPIC_FIELDS} for r in rows["t"]}
    assert got["a"] == {"produced_bytes": 7, "produced_records": 4, "produced_batches": None,
                        "fetched_bytes": 0, "fetched_records": 0, "fetched_batches": 0}
    # b's counts are null on both lines, but each line adds a 0 to the other side.
    assert set(got["b"].values()) == {0}


def test_report_counts_bad_lines_as_sparks_parser_does(
        spark: SparkSession, tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.log").write_text("\n".join(CORPUS) + "\n\n  \n")
    (tmp_path / "logs" / "b.log").write_bytes(b'{"ts":"2025-03-01T12:00:01Z","api":"\xff"}\n')
    result = run_report(spark, [str(tmp_path / "logs")], str(tmp_path / "out"))
    reference = parse_lines(spark.read.text(str(tmp_path / "logs")).select(
        "value", F.col("_metadata.file_path").alias("file")))
    want = Counter((r["file"], r["bad_reason"]) for r in reference.collect()
                   if r["bad_reason"] is not None)
    got = {(r["file"], r["reason"]): r["bad_lines"]
           for r in spark.read.parquet(str(tmp_path / "out" / "bad_lines")).collect()}
    assert got == dict(want)
    assert {reason for _, reason in want} == {
        "invalid JSON", "missing or invalid ts/event", "field of the wrong type"}
    # Blank lines are not lines; "\t" is one (Spark's trim() drops spaces only).
    assert result.counts.lines == reference.count() == len(CORPUS) + 1
    assert result.counts.bad == sum(want.values())


@pytest.mark.parametrize("n", [1, 2, 3, 10, 101, 5000])
def test_percentiles_are_latencies_seen_within_one_percent(n: int) -> None:
    rng = random.Random(n)
    values = [round(rng.lognormvariate(1, 1.2), 3) for _ in range(n)] + [0.0] * (n // 50)
    bins: dict[int, list] = {}
    for x in values:
        c = bins.setdefault(sketch.bin_of(x), [0, x, x])
        c[0], c[1], c[2] = c[0] + 1, min(c[1], x), max(c[2], x)
    hist = [(b, c[0], c[1], c[2]) for b, c in sorted(bins.items())]
    ordered = sorted(values)
    for q in (0.01, 0.5, 0.95, 0.99, 1.0):
        exact = ordered[max(1, math.ceil(q * len(values))) - 1]
        got = sketch.percentile(hist, len(values), q)
        assert got in values and abs(got - exact) <= 0.01 * exact, (q, got, exact)
    assert sketch.percentile([], 0, 0.5) is None


def test_local_reader_reads_what_spark_reads(
        spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers' reader of local files (splits.py) against Spark's text source: the
    same lines, counted and explained the same, whatever the line ends and cuts."""
    monkeypatch.setattr(splits, "SPLIT_BYTES", 1000)  # many cuts, mid-line and mid-\r\n
    logs = tmp_path / "logs"
    (logs / "sub dir").mkdir(parents=True)
    lines = [good(ts=f"2025-03-01T12:00:{i % 60:02d}.{i:06d}Z", conn=f"c{i % 7}")
             for i in range(300)] + CORPUS
    body = "\n".join(lines).encode()
    (logs / "crlf.log").write_bytes(body.replace(b"\n", b"\r\n") + b"\r\n")
    (logs / "cr.log").write_bytes(body.replace(b"\n", b"\r"))  # and no final newline
    (logs / "bom.log").write_bytes(b"\xef\xbb\xbf" + body + b"\n")
    packed = gzip.compress("\n".join(CORPUS + lines).encode())  # bad lines first
    (logs / "sub dir" / "cut [1].log.gz").write_bytes(packed[: len(packed) // 2])
    (logs / "two members.log.gz").write_bytes(gzip.compress(body[:5000])
                                              + gzip.compress(body[5000:]))
    (logs / "bz 2%.log.bz2").write_bytes(bz2.compress(body))  # Spark's reader reads it
    (logs / ".hidden.log").write_bytes(body)  # Spark skips these: so must the report
    (logs / "_temporary.log").write_bytes(body)
    result = run_report(spark, [str(logs)], str(tmp_path / "out"))
    text = spark.read.options(recursiveFileLookup="true", ignoreCorruptFiles="true").text(
        str(logs))
    reference = parse_lines(text.select("value", F.col("_metadata.file_path").alias("file")))
    assert result.counts.lines == reference.count() > 6 * len(lines) // 2
    want = Counter((r["file"], r["bad_reason"]) for r in reference.collect()
                   if r["bad_reason"] is not None)
    got = {(r["file"], r["reason"]): r["bad_lines"]
           for r in spark.read.parquet(str(tmp_path / "out" / "bad_lines")).collect()}
    assert got == dict(want)
    assert len({file for file, _ in got}) == 6
    requests = reference.where(F.col("bad_reason").isNull()
                               & F.col("event").isin("request", "request_no_response"))
    assert result.counts.requests == requests.count()
