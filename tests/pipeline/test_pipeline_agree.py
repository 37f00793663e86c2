"""`report` and `watch` read a line the same way and define what it means the same way.

Inputs made explicit: a numeric `ts`, a date or year alone, a `ts` with an offset or
with none, a line holding a JSON array: each is read as pipeline/README.md says, or is
a bad line with its reason, in both. On the benchmark's mix of lines, the watch's
windows and the report's latency over time (one-minute buckets) give the same request
and error counts per minute and api, and their p99 is within the stated bound of the
nearest-rank p99 of the lines (computed here in Python): x <= p99 < 1.01 x.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from support.logs import age_like_proxy, file_lines
from support.report_oracle import failed, waits
from support.synth import Synth, to_line, write_rotated

from pipeline.read import BadReason
from pipeline.report import run_report
from pipeline.watch import WatchOptions, run_watch

REQUEST = {"event": "request", "api": "Metadata", "api_key": 3, "errors": [],
           "latency_ms": 2.0}
# (line, what it must be read as: a reason if bad, else the UTC time it stands for)
EXPLICIT: list[tuple[str, str]] = [
    (json.dumps({**REQUEST, "ts": "2025-03-01T12:00:01.250000Z"}), "2025-03-01 12:00:01.25"),
    (json.dumps({**REQUEST, "ts": "2025-03-01T14:00:02+02:00"}), "2025-03-01 12:00:02"),
    (json.dumps({**REQUEST, "ts": "2025-03-01T12:00:03"}), "2025-03-01 12:00:03"),  # UTC
    (json.dumps({**REQUEST, "ts": "2025-03-01 12:00:04Z"}), "2025-03-01 12:00:04"),
    (json.dumps({**REQUEST, "ts": 1740830405}), BadReason.INVALID_TS),
    (json.dumps({**REQUEST, "ts": 1740830405.5}), BadReason.INVALID_TS),
    (json.dumps({**REQUEST, "ts": "1740830405"}), BadReason.INVALID_TS),
    (json.dumps({**REQUEST, "ts": "2025-03-01"}), BadReason.INVALID_TS),
    (json.dumps({**REQUEST, "ts": "2025"}), BadReason.INVALID_TS),
    (json.dumps({**REQUEST, "ts": "2025-03-01T25:00:00Z"}), BadReason.INVALID_TS),
    (json.dumps({**REQUEST}), BadReason.MISSING_TS),
    (json.dumps({"ts": "2025-03-01T12:00:06Z", "api": "Metadata"}), BadReason.MISSING_EVENT),
    ("[1, 2, 3]", BadReason.NOT_AN_OBJECT),
    ("not json", BadReason.INVALID_JSON),
]
# A line holding an array of objects is read as one line per object; an empty array
# holds none (Spark's JSON reader, documented).
ARRAY = json.dumps([{**REQUEST, "ts": "2025-03-01T12:00:07Z"},
                    {**REQUEST, "ts": "2025-03-01T12:00:08Z"}])
EMPTY_ARRAY = "[]"
LATER = json.dumps({**REQUEST, "ts": "2025-03-01T12:09:00Z"})  # moves the watermark on


@pytest.fixture(scope="module")
def explicit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logs = tmp_path_factory.mktemp("explicit") / "logs"
    logs.mkdir()
    lines = [line for line, _ in EXPLICIT] + [ARRAY, EMPTY_ARRAY, LATER]
    (logs / "requests.log.1").write_text("\n".join(lines) + "\n")
    age_like_proxy(logs, "requests.log.1")
    return logs


def test_the_report_reads_each_explicit_line_as_documented(
        spark: SparkSession, explicit: Path, tmp_path: Path) -> None:
    result = run_report(spark, [str(explicit)], str(tmp_path / "out"))
    bad = Counter(want for _, want in EXPLICIT if not want.startswith("2025"))
    good = [want for _, want in EXPLICIT if want.startswith("2025")]
    assert result.counts.bad == sum(bad.values())
    # the good lines, the array's two objects and the later line; not the empty array
    assert result.counts.requests == len(good) + 2 + 1
    assert result.counts.lines == len(EXPLICIT) + 2 + 1
    rows = spark.read.parquet(str(tmp_path / "out" / "bad_lines")).collect()
    assert Counter({r["reason"]: r["bad_lines"] for r in rows}) == bad
    files = spark.read.parquet(str(tmp_path / "out" / "input_files")).collect()
    assert [(r["lines"], r["bad_lines"]) for r in files] == [(result.counts.lines,
                                                              sum(bad.values()))]
    # each good line's time, offsets converted to UTC
    times = spark.read.parquet(str(tmp_path / "out" / "api_usage")).select(
        F.date_format("first_seen", "yyyy-MM-dd HH:mm:ss.SS").alias("t")).collect()
    assert times[0]["t"] == "2025-03-01 12:00:01.25"
    assert result.counts.last_ts == dt.datetime(2025, 3, 1, 12, 9, tzinfo=dt.UTC)
    assert result.counts.first_ts == dt.datetime(2025, 3, 1, 12, 0, 1, 250000, tzinfo=dt.UTC)


def test_the_watch_reads_them_the_same(spark: SparkSession, explicit: Path,
                                       tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run_watch(spark, WatchOptions(str(explicit), out=str(out), once=True)) == 0
    bad = Counter(want for _, want in EXPLICIT if not want.startswith("2025"))
    rows = spark.read.parquet(str(out / "bad_lines")).collect()
    assert Counter({r["reason"]: r["bad_lines"] for r in rows}) == bad
    [window] = spark.read.parquet(str(out / "by_api")).collect()  # 12:00, Metadata
    good = sum(want.startswith("2025") for _, want in EXPLICIT)
    assert (window["api"], window["requests"]) == ("Metadata", good + 2)
    [files] = spark.read.parquet(str(out / "input_files")).collect()
    assert (files["lines"], files["bad_lines"]) == (len(EXPLICIT) + 3, sum(bad.values()))


# --- the same definitions on the benchmark's mix -------------------------------------


@pytest.fixture(scope="module")
def mix(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    logs = tmp_path_factory.mktemp("mix") / "logs"
    synth = Synth(seed=23, rate=20, bad_every=101, other_every=61, telemetry_every=29)
    events = list(synth.events(6000))
    write_rotated(logs, map(to_line, events), 2000)
    (logs / "requests.log").unlink()  # the active file: the watch would not read it
    age_like_proxy(logs)
    lines = []
    for path in logs.iterdir():
        for text in file_lines(path):
            try:
                e = json.loads(text)
            except ValueError:
                continue
            if isinstance(e, dict) and "event" in e and str(e.get("ts")).startswith("20"):
                lines.append(e)
    return logs, lines


def _time(ts: str) -> dt.datetime:
    return dt.datetime.fromisoformat(ts.replace("Z", "+00:00")).replace(tzinfo=None)


def _minute(ts: str) -> dt.datetime:
    return _time(ts).replace(second=0, microsecond=0)


def nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def test_watch_and_report_agree_within_the_estimators_bound(
        spark: SparkSession, mix: tuple, tmp_path: Path) -> None:
    logs, lines = mix
    report_out, watch_out = tmp_path / "report", tmp_path / "watch"
    result = run_report(spark, [str(logs)], str(report_out))
    assert result.bucket_seconds == 60
    assert run_watch(spark, WatchOptions(str(logs), out=str(watch_out), once=True,
                                         max_files_per_trigger=10)) == 0
    requests = [e for e in lines if e["event"] in ("request", "request_no_response")]
    watermark = max(_time(e["ts"]) for e in lines) - dt.timedelta(minutes=2)
    service: dict[tuple, list[float]] = defaultdict(list)
    counts: Counter = Counter()
    for e in requests:
        key = (_minute(e["ts"]), e["api"])
        counts[key, "requests"] += 1
        counts[key, "errors"] += failed(e)
        if e["latency_ms"] is not None and not waits(e):
            service[key].append(e["latency_ms"])

    def keyed(path: Path) -> dict[tuple, Any]:
        df = spark.read.parquet(str(path)).withColumn(
            "m", F.date_format(F.col("bucket" if "bucket" in spark.read.parquet(
                str(path)).columns else "window_start"), "yyyy-MM-dd HH:mm"))
        return {(dt.datetime.strptime(r["m"], "%Y-%m-%d %H:%M"), r["api"]): r
                for r in df.collect()}

    over_time = keyed(report_out / "latency_over_time")
    windows = keyed(watch_out / "by_api")
    final = {k for k in over_time if k[0] + dt.timedelta(minutes=1) <= watermark}
    assert final and set(windows) == final  # the watch wrote its final windows only
    for key in final:
        w, r = windows[key], over_time[key]
        want = (counts[key, "requests"], counts[key, "errors"])
        assert (w["requests"], w["errors"]) == (r["requests"], r["errors"]) == want, key
        assert w["p99_ms"] == r["p99_ms"], key  # one estimator
        if service[key]:
            x = nearest_rank(service[key], 0.99)
            assert x <= w["p99_ms"] < 1.01 * x, (key, x, w["p99_ms"])
        else:
            assert w["p99_ms"] is None
