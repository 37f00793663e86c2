"""`kafkalens watch` with a watermark per source: a log directory per proxy, the
windows closing on the slowest live source, a line dated past its arrival clamped
and counted.

The logs lie as a fleet's do when collected: LOGDIR/<proxy>/requests.log.N, read with
`--pattern '*/requests.log.[0-9]*'`. A single watermark (the newest line of all)
drops a quiet proxy's lines as late when its file rotates after a busy one's; the
per-source watermark holds the windows for it, lets go of a source silent longer
than --idle-source, and never moves back.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from support.logs import age_like_proxy

from pipeline.watch import Source, WatchOptions, run_watch, watermark_of

PATTERN = "*/requests.log.[0-9]*"
DAY = "2025-03-01"


def _requests(minutes: list[int], day: str = DAY) -> str:
    return "".join(json.dumps({
        "event": "request", "ts": f"{day}T12:{m:02d}:00.000000Z", "api": "Metadata",
        "client_software_name": "x", "client_software_version": "1", "errors": [],
        "latency_ms": 1.0}) + "\n" for m in minutes)


def _by_minute(spark: SparkSession, out: Path) -> Counter:
    rows = spark.read.parquet(str(out / "by_api")).collect()
    return Counter({r["window_start"].minute: r["requests"] for r in rows})


def _input_files(spark: SparkSession, out: Path) -> dict[str, Any]:
    return {"/".join(r["file"].rsplit("/", 2)[-2:]): r
            for r in spark.read.parquet(str(out / "input_files")).collect()}


def _write(logs: Path, name: str, minutes: list[int]) -> None:
    path = logs / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_requests(minutes))
    age_like_proxy(path.parent)


def test_the_slowest_live_source_holds_the_windows_and_an_idle_one_lets_go(
    spark: SparkSession, tmp_path: Path, capsys: Any
) -> None:
    """Proxy a logs a minute ahead of proxy b's rotation: b's later lines are folded
    in, not dropped as late (one watermark for both drops 3); once b is silent longer
    than --idle-source, a alone moves the watermark."""
    logs, out = tmp_path / "logs", tmp_path / "out"
    _write(logs, "a/requests.log.1", list(range(0, 11)))  # 12:00 .. 12:10
    _write(logs, "b/requests.log.1", [0, 1, 2])
    options = WatchOptions(str(logs), out=str(out), once=True, pattern=PATTERN,
                           max_files_per_trigger=10)
    assert run_watch(spark, options) == 0
    said = capsys.readouterr().out
    b = f"file:{(logs / 'b').resolve()}"  # as the tables' `file` names it
    # b's newest line (12:02) minus the watermark (2 minutes)
    assert f"watermark {DAY} 12:00:00 UTC (slowest of 2 live sources: {b})" in said

    _write(logs, "b/requests.log.2", [3, 4, 5])  # b rotates: behind a's newest line
    assert run_watch(spark, options) == 0
    said = capsys.readouterr().out
    assert "late" not in said
    assert f"watermark {DAY} 12:03:00 UTC (slowest of 2 live sources: {b})" in said

    time.sleep(1.5)  # b is now silent longer than --idle-source
    _write(logs, "a/requests.log.2", list(range(11, 21)))  # 12:11 .. 12:20
    idle = WatchOptions(str(logs), out=str(out), once=True, pattern=PATTERN,
                        max_files_per_trigger=10, idle_source="1 second")
    assert run_watch(spark, idle) == 0
    said = capsys.readouterr().out
    a = f"file:{(logs / 'a').resolve()}"
    assert f"watermark {DAY} 12:18:00 UTC (slowest of 1 live source, 1 idle: {a})" in said

    # every line once, in the windows the watermark (12:18) closed: 12:00 .. 12:17
    want = Counter({m: (2 if m <= 5 else 1) for m in range(0, 18)})
    assert _by_minute(spark, out) == want
    files = _input_files(spark, out)
    assert sorted(files) == ["a/requests.log.1", "a/requests.log.2", "b/requests.log.1",
                             "b/requests.log.2"]
    assert all(r["late_lines"] == 0 and r["clamped_lines"] == 0 for r in files.values())


def test_a_line_dated_past_its_arrival_is_clamped_counted_and_moves_nothing_further(
    spark: SparkSession, tmp_path: Path, capsys: Any
) -> None:
    """A proxy whose clock is decades ahead: its line is clamped to the batch's time
    plus --max-skew, counted per file and said; the watermark stops there instead of
    at 2099, and the other lines' windows are counted as before."""
    logs, out = tmp_path / "logs", tmp_path / "out"
    logs.mkdir()
    path = logs / "requests.log.1"
    path.write_text(_requests([0, 1, 2, 3, 4, 5]) + _requests([0], day="2099-01-01"))
    t = dt.datetime(2025, 3, 1, 12, 6, tzinfo=dt.UTC).timestamp()
    os.utime(path, (t, t))
    started = time.time()
    assert run_watch(spark, WatchOptions(str(logs), out=str(out), once=True)) == 0
    said = capsys.readouterr().out
    assert "1 dated past their arrival + --max-skew 1 minute: clamped" in said
    assert "2099" not in said
    watermark = said.split("watermark ", 1)[1][:23]
    mark = dt.datetime.strptime(watermark, "%Y-%m-%d %H:%M:%S UTC").replace(tzinfo=dt.UTC)
    # the batch's time + 1 minute (skew) - 2 minutes (watermark), to the second
    assert started - 61 <= mark.timestamp() <= time.time() - 59
    assert _by_minute(spark, out) == Counter({m: 1 for m in range(6)})
    [row] = _input_files(spark, out).values()
    assert (row["lines"], row["clamped_lines"], row["late_lines"]) == (7, 1, 0)


def test_the_watermark_never_moves_back_and_an_older_state_is_a_source_of_its_own() -> None:
    a, b = Source(1000.0, 50.0), Source(400.0, 45.0)
    assert watermark_of({"a": a, "b": b}, None, 120, 600).value == 280  # b is slowest
    # a new source far behind does not reopen what is final
    mark = watermark_of({"a": a, "b": b, "c": Source(10.0, 50.0)}, 280, 120, 600)
    assert (mark.value, mark.slowest, mark.live) == (280, "c", 3)
    # b silent for longer than idle: a alone
    mark = watermark_of({"a": a, "b": b}, 280, 120, 4)
    assert (mark.value, mark.slowest, mark.live, mark.idle) == (880, "a", 1, 1)
    # an older watch's single watermark (no arrival): idle once sources have one
    old = {"(all)": Source(2000.0, None)}
    assert watermark_of(old, 1880, 120, 600).value == 1880
    assert watermark_of({**old, "a": a}, 1880, 120, 600).value == 1880  # not back to 880
    assert watermark_of({}, None, 120, 600).value is None


def test_the_spool_keeps_a_files_subdirectory_in_its_staged_name(tmp_path: Path) -> None:
    from pipeline.spool import Spool

    logs = tmp_path / "logs"
    for proxy in ("a", "b"):
        _write(logs, f"{proxy}/requests.log.1", [0, 1])
        (logs / proxy / "requests.log").write_text(_requests([2]))  # active: not staged
    staged = Spool(logs, tmp_path / "spool", PATTERN).collect()
    assert sorted(p.relative_to(logs).as_posix() for p in staged) == [
        "a/requests.log.1", "b/requests.log.1"]
    names = sorted(p.name.split(".", 1)[1] for p in (tmp_path / "spool").iterdir()
                   if not p.name.startswith("_"))
    assert names == ["a~requests.log.1", "b~requests.log.1"]
    # what a --once run names as not read until it rotates
    from pipeline.follow import active_logs

    assert active_logs(WatchOptions(str(logs), pattern=PATTERN)) == [
        "a/requests.log", "b/requests.log"]
