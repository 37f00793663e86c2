"""`kafkalens watch`: streaming windows over a directory the proxy rotates.

The proxy's rotation renames requests.log -> .1 -> .2 ... and reuses .1; the tests
rotate the same way (plain, then gzip) between runs and check that every line of a
rotated file is counted exactly once across availableNow runs that restart from the
checkpoint, while the active file is left alone.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from support.logs import age_like_proxy, file_lines
from support.paths import REPO as ROOT
from support.synth import Synth, to_line, write_rotated

from pipeline.spool import BAD_AFTER_SECONDS, Spool
from pipeline.watch import WatchOptions, run_watch

WATERMARK = dt.timedelta(minutes=2)




def rotated_lines(logdir: Path) -> list[dict]:
    """The good lines of every rotated file now in logdir (not the active file)."""
    out = []
    for path in logdir.glob("requests.log.*"):
        for line in file_lines(path):
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if isinstance(e, dict) and "event" in e and e.get("ts", "").startswith("20"):
                out.append(e)  # "yesterday" is no timestamp
    return out


def _ts(e: dict) -> dt.datetime:
    return dt.datetime.fromisoformat(e["ts"].replace("Z", "+00:00")).replace(tzinfo=None)


def expected_windows(lines: list[dict]) -> Counter:
    """(window start, api) -> requests, for the windows the watermark has closed: the
    newest good line's time minus the watermark (every event moves it)."""
    watermark = max(map(_ts, lines)) - WATERMARK
    counts: Counter = Counter()
    for e in lines:
        if e["event"] not in ("request", "request_no_response"):
            continue
        start = _ts(e).replace(second=0, microsecond=0)
        if start + dt.timedelta(minutes=1) <= watermark:
            counts[(start, e["api"])] += 1
    return counts


def written(out: Path) -> list[str]:
    """The watch's data files under OUT (not its checkpoint, spool or staging)."""
    return sorted(str(p.relative_to(out)) for p in out.rglob("*.parquet")
                  if not p.name.startswith(".") and not any(
                      part.startswith("_") for part in p.relative_to(out).parts))


def output(spark: SparkSession, out: Path, table: str = "by_api") -> Counter:
    df = spark.read.parquet(str(out / table)).select(
        F.date_format("window_start", "yyyy-MM-dd HH:mm").alias("start"), "*")
    got: Counter = Counter()
    for r in df.collect():
        key = r["api"] if table == "by_api" else (r["client_software_name"],
                                                  r["client_software_version"])
        got[(dt.datetime.strptime(r["start"], "%Y-%m-%d %H:%M"), key)] += r["requests"]
    return got


def test_a_once_run_says_what_it_read_and_what_waits_for_rotation(
        spark: SparkSession, tmp_path: Path, capsys: Any) -> None:
    """--once ends with one line: the lines it read (counted here in the rotated files)
    and the active log it leaves until it rotates; run again, nothing new."""
    logs, out = tmp_path / "logs", tmp_path / "out"
    write_rotated(logs, (to_line(e) for e in Synth(seed=9, rate=5, bad_every=97).events(2300)),
                  1000)
    age_like_proxy(logs)
    rotated = sum(1 for path in logs.glob("requests.log.[0-9]*")
                  for line in file_lines(path) if line.strip())
    assert rotated == 2000 and (logs / "requests.log").exists()
    options = WatchOptions(str(logs), out=str(out), once=True)
    capsys.readouterr()
    assert run_watch(spark, options) == 0
    assert capsys.readouterr().err.splitlines()[-1] == (
        "kafkalens watch: done: 2,000 lines read; not read until they rotate: requests.log")
    assert run_watch(spark, options) == 0
    assert capsys.readouterr().err.splitlines()[-1] == (
        "kafkalens watch: done: nothing new to read; not read until they rotate: requests.log")


def test_rotation_restart_counts_each_line_once(spark: SparkSession, tmp_path: Path) -> None:
    logs, out = tmp_path / "logs", tmp_path / "out"
    synth = Synth(seed=5, rate=5, bad_every=211)  # ~7 minutes of traffic per 2000 lines
    options = WatchOptions(str(logs), out=str(out), once=True)

    write_rotated(logs, (to_line(e) for e in synth.events(2500)), 1000)
    age_like_proxy(logs)
    assert run_watch(spark, options) == 0
    first = output(spark, out)
    assert first == expected_windows(rotated_lines(logs)) and first

    # The proxy goes on: .1 -> .3, .2 -> .4, new .1 and .2, now compressed.
    write_rotated(logs, (to_line(e) for e in synth.events(2000)), 1000, gz=True)
    age_like_proxy(logs)
    assert {p.name for p in logs.iterdir()} == {
        "requests.log", "requests.log.1.gz", "requests.log.2.gz", "requests.log.3",
        "requests.log.4"}
    assert run_watch(spark, options) == 0
    second = output(spark, out)
    assert second == expected_windows(rotated_lines(logs))
    assert len(second) > len(first)
    assert all(second[k] == n for k, n in first.items())  # nothing counted twice
    # A table partitioned by window: a file per batch that closed windows, no directory.
    files = written(out)
    assert files and all(f.startswith(("by_api/window_date=2025-03-01/batch-",
                                       "by_software/window_date=2025-03-01/batch-",
                                       "input_files/batch-", "bad_lines/batch-"))
                         for f in files), files

    # A restart with nothing new writes nothing.
    assert run_watch(spark, options) == 0
    assert written(out) == files

    software = output(spark, out, "by_software")
    assert sum(software.values()) == sum(second.values())
    assert any(key == ("sarama", "1.27.0") for _, key in software)
    # Staged files are deleted once committed (Spark's cleanSource), those of a run's
    # last batch when the next batch starts; the ledger remembers them all.
    staged = [p for p in (out / "_spool").iterdir() if p.name != "_ledger.txt"]
    assert len(staged) <= options.max_files_per_trigger, staged
    assert (out / "_spool" / "_ledger.txt").read_text().count("\n") == 4


def test_unique_names_without_spool(spark: SparkSession, tmp_path: Path) -> None:
    logs, out = tmp_path / "logs", tmp_path / "out"
    synth = Synth(seed=9, rate=5)
    for n in range(3):  # a proxy rotating to never-reused names
        lines = [to_line(e) for e in synth.events(800)]
        (tmp_path / "logs").mkdir(exist_ok=True)
        (logs / f"requests-{n:04d}.log").write_text("\n".join(lines) + "\n")
    (logs / "requests.log").write_text("")  # the active file: not matched
    age_like_proxy(logs, "requests-*.log")
    options = WatchOptions(str(logs), out=str(out), once=True, use_spool=False,
                           pattern="requests-*.log")
    assert run_watch(spark, options) == 0
    lines = [json.loads(x) for p in sorted(logs.glob("requests-*.log")) for x in file_lines(p)]
    assert output(spark, out) == expected_windows(lines)


def test_files_appearing_while_running(spark: SparkSession, tmp_path: Path) -> None:
    logs, out = tmp_path / "logs", tmp_path / "out"
    synth = Synth(seed=13, rate=5)
    write_rotated(logs, (to_line(e) for e in synth.events(1200)), 1000)
    age_like_proxy(logs)
    options = WatchOptions(str(logs), out=str(out), interval=1.0)
    runner = threading.Thread(target=run_watch, args=(spark, options), daemon=True)
    runner.start()
    try:
        write_rotated(logs, (to_line(e) for e in synth.events(2000)), 1000)
        age_like_proxy(logs)
        want = expected_windows(rotated_lines(logs))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if output(spark, out) == want:
                    break
            except Exception:  # nothing written yet, or a batch being written
                pass
            time.sleep(2)
        assert output(spark, out) == want
    finally:
        for query in spark.streams.active:
            query.stop()
        runner.join(30)


def test_spool_stages_renamed_and_recompressed_files_once(tmp_path: Path) -> None:
    logs, spool_dir = tmp_path / "logs", tmp_path / "spool"
    synth = Synth(seed=1)
    write_rotated(logs, (to_line(e) for e in synth.events(300)), 100)
    age_like_proxy(logs)
    spool = Spool(logs, spool_dir, "*.log.[0-9]*")
    assert sorted(p.name for p in spool.collect()) == ["requests.log.1", "requests.log.2"]
    # Shift: .1 -> .2 -> .3, the active file becomes .1; then .3 is compressed.
    write_rotated(logs, (to_line(e) for e in synth.events(100)), 100)
    three = logs / "requests.log.3"
    with gzip.open(logs / "requests.log.3.gz", "wb") as gz:
        gz.write(three.read_bytes())
    three.unlink()
    age_like_proxy(logs)
    assert [p.name for p in spool.collect()] == ["requests.log.1"]
    assert spool.collect() == []
    staged = sorted(staged_files(spool_dir))
    assert len(staged) == 3 and (spool_dir / "_ledger.txt").read_text().count("\n") == 3
    # each under its content's hash and the name it had when staged
    assert sorted(p.name.split(".", 1)[1] for p in staged) == [
        "requests.log.1", "requests.log.1", "requests.log.2"]


def test_spool_stages_each_file_once_when_rotated_while_staging(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The proxy rotates between the spool reading a file's first line and linking it:
    .1 then names the next file. Each rotated file is still staged once, as itself."""
    logs, spool_dir = tmp_path / "logs", tmp_path / "spool"
    synth = Synth(seed=2)
    write_rotated(logs, (to_line(e) for e in synth.events(150)), 100)
    age_like_proxy(logs)
    real_link = os.link
    rotations = []

    def link_after_a_rotation(src: Any, dst: Any, **kw: Any) -> None:
        if not rotations:  # .1 -> .2, the active file -> .1
            rotations.append(src)
            write_rotated(logs, (to_line(e) for e in synth.events(60)), 100)
            age_like_proxy(logs)
        real_link(src, dst, **kw)

    monkeypatch.setattr(os, "link", link_after_a_rotation)
    spool = Spool(logs, spool_dir, "*.log.[0-9]*")
    spool.collect()
    spool.collect()
    assert rotations
    staged = {p.name.split(".", 1)[0]: file_lines(p) for p in staged_files(spool_dir)}
    rotated = sorted(file_lines(p) for p in logs.glob("requests.log.*"))
    assert sorted(staged.values()) == rotated and len(rotated) == 2
    for fingerprint, lines in staged.items():  # each under its own content's name
        assert hashlib.sha256((lines[0] + "\n").encode()).hexdigest()[:32] == fingerprint


def staged_files(spool_dir: Path) -> list[Path]:
    return [p for p in spool_dir.iterdir() if not p.name.startswith(("_", "."))]


def test_spool_skips_unfinished_files(tmp_path: Path) -> None:
    logs, spool_dir = tmp_path / "logs", tmp_path / "spool"
    logs.mkdir()
    whole = gzip.compress(b'{"ts":"2025-01-01T00:00:00Z","event":"request"}\n' * 1000)
    (logs / "requests.log.1.gz").write_bytes(whole[: len(whole) // 2])  # being compressed
    (logs / "requests.log.2").write_text('{"a":1}\n')  # just rotated: not settled yet
    old = time.time() - 10  # settled, not yet given up on (BAD_AFTER_SECONDS)
    os.utime(logs / "requests.log.1.gz", (old, old))
    spool = Spool(logs, spool_dir, "*.log.[0-9]*")
    assert spool.collect() == [] and spool.unreadable == []
    (logs / "requests.log.1.gz").write_bytes(whole)
    os.utime(logs / "requests.log.1.gz", (old, old))
    assert [p.name for p in spool.collect()] == ["requests.log.1.gz"]


def test_spool_names_the_files_it_will_never_stage_until_left_out(tmp_path: Path) -> None:
    """A .gz cut short long after its last write (the compressor died), a plain file
    named .gz: never staged, each named with why, not passed over in silence: on every
    pass and after a restart (a command that stopped on them must stop again), until
    the command goes on without them (--skip-unreadable); then never again."""
    logs, spool_dir = tmp_path / "logs", tmp_path / "spool"
    logs.mkdir()
    whole = gzip.compress(b'{"ts":"2025-01-01T00:00:00Z","event":"request"}\n' * 1000)
    (logs / "requests.log.1.gz").write_bytes(whole[: len(whole) // 2])
    (logs / "requests.log.2.gz").write_text('{"ts":"2025-01-01T00:00:00Z"}\n')
    (logs / "requests.log.3").write_text('{"ts":"2025-01-01T00:00:00Z"}\n')
    old = time.time() - BAD_AFTER_SECONDS - 1
    for path in logs.iterdir():
        os.utime(path, (old, old))
    spool = Spool(logs, spool_dir, "*.log.[0-9]*")
    assert [p.name for p in spool.collect()] == ["requests.log.3"]
    assert {(u.path.name, u.reason) for u in spool.unreadable} == {
        ("requests.log.1.gz", "truncated: the gzip stream is cut short"),
        ("requests.log.2.gz", "not gzip data, though its name says .gz")}
    named = {(u.path.name, u.reason) for u in spool.unreadable}
    assert spool.collect() == [] and {(u.path.name, u.reason) for u in spool.unreadable} == named
    again = Spool(logs, spool_dir, "*.log.[0-9]*")  # a restart
    assert again.collect() == [] and {(u.path.name, u.reason) for u in again.unreadable} == named
    again.leave_out(again.unreadable)
    assert again.collect() == [] and again.unreadable == []  # left out: not named again
    restarted = Spool(logs, spool_dir, "*.log.[0-9]*")
    assert restarted.collect() == [] and restarted.unreadable == []  # across restarts too


def test_spool_recovers_after_crash_between_ledger_and_rename(tmp_path: Path) -> None:
    logs, spool_dir = tmp_path / "logs", tmp_path / "spool"
    logs.mkdir()
    spool_dir.mkdir()
    (logs / "requests.log.1").write_text('{"x":1}\n')
    os.utime(logs / "requests.log.1", (0, 0))
    spool = Spool(logs, spool_dir, "*.log.[0-9]*")
    spool.collect()
    [staged] = staged_files(spool_dir)
    staged.rename(spool_dir / f".{staged.name}.tmp")  # as if we died before renaming
    (spool_dir / ".deadbeef.log.tmp").write_text("never recorded\n")
    assert spool.collect() == []  # already in the ledger: not staged again
    assert sorted(p.name for p in spool_dir.iterdir()) == ["_ledger.txt", staged.name]


def _request_line(ts: str, api: str, **fields: object) -> str:
    return json.dumps({"event": "request", "ts": ts, "api": api, "client_software_name": "x",
                       "client_software_version": "1", "errors": [], **fields})


def test_protocol_steps_are_not_errors_and_waits_not_latency(
    spark: SparkSession, tmp_path: Path
) -> None:
    """expected_errors.json's errors are not failures; a JoinGroup, and a Fetch allowed
    to wait (max_wait_ms > 0, or not logged), are counted as waits and left out of the
    latency: the report's definitions (semantics.py)."""
    logs, out = tmp_path / "logs", tmp_path / "out"
    logs.mkdir()
    t = "2025-03-01T12:00:%02d.000000Z"
    lines = [
        _request_line(t % 1, "JoinGroup", errors=["MEMBER_ID_REQUIRED"], latency_ms=1.0),
        _request_line(t % 2, "JoinGroup", errors=[], latency_ms=2900.0),
        _request_line(t % 3, "JoinGroup", errors=["GROUP_AUTHORIZATION_FAILED"], latency_ms=1.0),
        _request_line(t % 4, "Heartbeat", errors=["REBALANCE_IN_PROGRESS"], latency_ms=2.0),
        _request_line(t % 5, "Heartbeat", errors=["UNKNOWN_MEMBER_ID"], latency_ms=4.0),
        _request_line(t % 6, "Fetch", max_wait_ms=500, latency_ms=501.0),  # nothing to read
        _request_line(t % 7, "Fetch", max_wait_ms=500, latency_ms=12.0),  # answered with data
        _request_line(t % 8, "Fetch", latency_ms=20.0),  # a line from before max_wait_ms
        _request_line(t % 9, "Metadata", errors=["REBALANCE_IN_PROGRESS"], latency_ms=3.0),
        _request_line("2025-03-01T12:09:00.000000Z", "Metadata"),  # moves the watermark
    ]
    (logs / "requests.log.1").write_text("\n".join(lines) + "\n")
    age_like_proxy(logs)
    assert run_watch(spark, WatchOptions(str(logs), out=str(out), once=True)) == 0
    rows = {r["api"]: r for r in spark.read.parquet(str(out / "by_api")).collect()}
    got = {api: (r["requests"], r["errors"], r["expected_errors"], r["waiting_requests"],
                 r["avg_ms"]) for api, r in rows.items()}
    assert got == {
        "JoinGroup": (3, 1, 1, 3, None),
        "Heartbeat": (2, 1, 1, 0, 3.0),
        # a long poll waits by design whether or not it ran out (the report's definition)
        "Fetch": (3, 0, 0, 3, None),
        "Metadata": (1, 1, 0, 0, 3.0),  # REBALANCE_IN_PROGRESS is a step of groups, not here
    }
    [software] = spark.read.parquet(str(out / "by_software")).collect()
    assert (software["requests"], software["errors"], software["waiting_requests"]) == (9, 3, 6)




def _wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        content = path.read_text(errors="replace")
        if text in content:
            return content
        time.sleep(0.5)
    return path.read_text(errors="replace")


@pytest.mark.spark
def test_says_what_it_waits_for_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    """As a terminal's Ctrl-C does: SIGINT to the whole process group (PySpark's JVM
    ignores it); the watch stops, no traceback, and nothing of it is left running."""
    logs, out = tmp_path / "logs", tmp_path / "out"
    write_rotated(logs, (to_line(e) for e in Synth(seed=3, rate=5).events(1500)), 1000)
    age_like_proxy(logs)
    stdout, stderr = tmp_path / "stdout", tmp_path / "stderr"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KAFKALENS_SPARK_CDS": "0"}
    with stdout.open("wb") as o, stderr.open("wb") as e:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline.cli", "watch", str(logs), "--out", str(out),
             "--interval", "1", "--notice-every", "3", "--master", "local[1]"],
            cwd=tmp_path, env=env, stdout=o, stderr=e, start_new_session=True)
    try:
        text = _wait_for(stderr, "no new lines for", proc, 240)
        assert "no new lines for" in text, text[-3000:]
        notice = next(x for x in text.splitlines() if "no new lines for" in x)
        # what it waits for: the pattern, the directory, the files there and read so far
        assert f"*.log.[0-9]* in {logs}" in notice and "(1 there now, 1 read so far)" in notice
        # the rotated file was read (its windows printed) before or about then
        printed = _wait_for(stdout, "kafkalens watch: batch 0:", proc, 60)
        assert "kafkalens watch: batch 0: " in printed and " provisional " in printed
        os.killpg(proc.pid, signal.SIGINT)
        rc = proc.wait(120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = stderr.read_text(errors="replace")
    assert rc in (0, 130) and "Traceback" not in text, text[-3000:]
    assert "kafkalens watch: stopped" in text
    # the watch's own lines only: none of Spark's log, no JVM notice
    assert all(line.startswith("kafkalens watch: ") for line in text.splitlines()), text
    deadline = time.monotonic() + 60  # the JVM exits once its driver's pipe closes
    while time.monotonic() < deadline and _group_alive(proc.pid):
        time.sleep(0.5)
    alive = _group_alive(proc.pid)
    if alive:
        os.killpg(proc.pid, signal.SIGKILL)
    assert not alive, "the watch's JVM outlived it"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_waiting_notice_counts_files_through_hadoop_without_spool(
    spark: SparkSession, tmp_path: Path
) -> None:
    from pipeline.follow import Waiting

    logs = tmp_path / "logs"
    logs.mkdir()
    for n in range(3):
        (logs / f"requests-{n}.log").write_text("{}\n")
    (logs / "requests.log").write_text("{}\n")  # the active file: not matched
    o = WatchOptions(str(logs), out=str(tmp_path / "out"), use_spool=False,
                     pattern="requests-*.log")
    assert Waiting(o, spark, 30).what() == (
        f"waiting for new files matching requests-*.log in {logs} (3 there now)")


def test_a_log_directory_that_is_not_there_is_one_line_and_exit_2(
    spark: SparkSession, tmp_path: Path, capsys: Any
) -> None:
    missing = tmp_path / "nope"
    assert run_watch(spark, WatchOptions(str(missing), out=str(tmp_path / "out"))) == 2
    err = capsys.readouterr().err
    assert err == (f"kafkalens watch: {missing} is not a directory (give the directory "
                   "request_log.path writes into)\n")


def report(batch: int, rows: int, second: int) -> dict[str, Any]:
    """A progress report as Spark gives it (the fields the watch reads)."""
    return {"batchId": batch, "numInputRows": rows, "timestamp": f"2026-11-25T18:00:{second:02d}.000Z"}


def test_lines_read_between_two_polls_count_though_other_reports_followed(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """As `kafkalens watch` beside `kafkalens demo` showed: idle, Spark reports every 10 s
    under the id of the batch to come; that batch then reads lines under the same id,
    and one without input follows at once to move the watermark on."""
    from types import SimpleNamespace

    from pipeline import follow

    clock = [1000.0]
    monkeypatch.setattr(follow, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    o = WatchOptions(str(tmp_path), out=str(tmp_path / "out"))  # a spool: Spark not asked
    waiting = follow.Waiting(o, None, 30)  # type: ignore[arg-type]
    reports = [report(0, 60, 0), report(1, 0, 1), report(2, 0, 11)]
    waiting.update(reports)
    clock[0] += 25
    reports.append(report(2, 0, 21))  # idle again
    waiting.update(reports)
    clock[0] += 10
    reports += [report(2, 12, 30), report(3, 0, 31), report(4, 0, 41)]
    waiting.update(reports)
    assert capsys.readouterr().err == ""
    clock[0] += 31
    waiting.update([*reports, report(4, 0, 51)])
    assert "kafkalens watch: no new lines for 31 s;" in capsys.readouterr().err


def test_the_recent_progress_is_read_only_when_a_batch_ran() -> None:
    from types import SimpleNamespace

    from pipeline.follow import progress_since

    reports = [report(2, 0, 11), report(2, 12, 30), report(3, 0, 31)]
    query = SimpleNamespace(lastProgress=reports[-1], recentProgress=reports)
    assert progress_since(query, 3) == [reports[-1]]  # type: ignore[arg-type]
    assert progress_since(query, 2) == reports  # type: ignore[arg-type]
    assert progress_since(SimpleNamespace(lastProgress=None), -1) == []  # type: ignore[arg-type]


def _requests(times: list[str], api: str = "Metadata") -> str:
    return "".join(_request_line(f"2025-03-01T{t}.000000Z", api, latency_ms=1.0) + "\n"
                   for t in times)


def test_lines_of_a_window_already_final_are_counted_as_dropped(
    spark: SparkSession, tmp_path: Path, capsys: Any
) -> None:
    """Late by more than the watermark: not folded into a window written already, not
    passed over either; counted per file (input_files.late_lines) and said."""
    logs, out = tmp_path / "logs", tmp_path / "out"
    logs.mkdir()
    (logs / "requests.log.2").write_text(_requests([f"12:0{m}:00" for m in range(10)]))
    age_like_proxy(logs)
    options = WatchOptions(str(logs), out=str(out), once=True)
    assert run_watch(spark, options) == 0
    before = output(spark, out)
    assert max(start for start, _ in before) == dt.datetime(2025, 3, 1, 12, 6)  # 12:07 mark
    late, kept = ["12:01:10"] * 5, ["12:08:30"] * 3
    (logs / "requests.log.1").write_text(_requests([*late, *kept, "12:20:00"]))
    age_like_proxy(logs)
    capsys.readouterr()
    assert run_watch(spark, options) == 0
    said = capsys.readouterr().out
    assert "5 of windows already final: dropped (late by more than --watermark 2 minutes)" in said
    after = output(spark, out)
    minute = dt.datetime(2025, 3, 1, 12, 1)
    assert after[(minute, "Metadata")] == before[(minute, "Metadata")] == 1  # not twice
    assert after[(dt.datetime(2025, 3, 1, 12, 8), "Metadata")] == 1 + 3
    files = {r["file"].rsplit("/", 1)[1]: r for r in
             spark.read.parquet(str(out / "input_files")).collect()}
    assert (files["requests.log.1"]["lines"], files["requests.log.1"]["late_lines"]) == (9, 5)
    assert files["requests.log.2"]["late_lines"] == 0


def test_a_batch_run_again_after_a_crash_writes_what_it_wrote(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Spark runs a batch again when it did not record it as done (a crash after its
    writes): its files are written again under the same names, nothing added twice."""
    logs, out = tmp_path / "logs", tmp_path / "out"
    write_rotated(logs, (to_line(e) for e in Synth(seed=17, rate=5).events(2500)), 1000)
    age_like_proxy(logs)
    options = WatchOptions(str(logs), out=str(out), once=True, max_files_per_trigger=1)
    assert run_watch(spark, options) == 0
    files, windows = written(out), output(spark, out)
    commits = sorted((out / "_checkpoint" / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    assert len(commits) == 2
    # as if the driver died before Spark recorded the batch done
    for done in (commits[-1], commits[-1].with_name(f".{commits[-1].name}.crc")):
        done.unlink()
    assert run_watch(spark, options) == 0
    assert written(out) == files and output(spark, out) == windows


def test_the_watermark_is_a_duration_or_one_line_and_exit_2(
    spark: SparkSession, tmp_path: Path, capsys: Any
) -> None:
    from pipeline.watch import delay_seconds

    assert [delay_seconds(t) for t in ("2 minutes", "10 seconds", "90s", "1 hour", "1.5 min")
            ] == [120, 10, 90, 3600, 90]
    (tmp_path / "logs").mkdir()
    for bad in ("soon", "1ms"):  # not a minute for "m" and "s"
        o = WatchOptions(str(tmp_path / "logs"), out=str(tmp_path / "out"), watermark=bad)
        assert run_watch(spark, o) == 2
        assert capsys.readouterr().err == (
            f"kafkalens watch: --watermark: {bad!r} is not a number of seconds, minutes, "
            "hours or days (e.g. '2 minutes')\n")


def test_a_rotated_file_that_cannot_be_read_stops_the_watch_or_is_named_and_left_out(
    spark: SparkSession, tmp_path: Path, capsys: Any
) -> None:
    """A plain file named .gz (a misnamed rotation): by default the watch stops with one
    line naming it and why (exit 1) before reading anything; with --skip-unreadable it
    reads the other files, and the file is in input_files as left out, with the reason.
    Without the spool, a truncated gzip fails Spark's read: one line naming it, exit 1."""
    logs, out = tmp_path / "logs", tmp_path / "out"
    logs.mkdir()
    (logs / "requests.log.1").write_text(_requests([f"12:0{m}:00" for m in range(6)]))
    misnamed = logs / "requests.log.2.gz"
    misnamed.write_text(_requests(["11:59:00"]))
    age_like_proxy(logs, "requests.log.1")
    old = time.time() - 3600
    os.utime(misnamed, (old, old))
    capsys.readouterr()
    assert run_watch(spark, WatchOptions(str(logs), out=str(out), once=True)) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"kafkalens watch: 1 rotated file(s) cannot be read: {misnamed} (not gzip data, "
        "though its name says .gz); stopped (--skip-unreadable goes on without them)")
    assert written(out) == []

    options = WatchOptions(str(logs), out=str(out), once=True, skip_unreadable=True)
    assert run_watch(spark, options) == 0
    assert f"kafkalens watch: left out, not read: {misnamed}" in capsys.readouterr().err
    minute = dt.datetime(2025, 3, 1, 12, 0)
    assert output(spark, out)[(minute, "Metadata")] == 1  # 12:00-12:03 final at 12:05
    files = {r["file"].rsplit("/", 1)[1]: r for r in
             spark.read.parquet(str(out / "input_files")).collect()}
    assert (files["requests.log.2.gz"]["status"], files["requests.log.2.gz"]["reason"]) == (
        "left out", "not gzip data, though its name says .gz")
    assert (files["requests.log.1"]["status"], files["requests.log.1"]["lines"]) == ("read", 6)

    unique, out2 = tmp_path / "unique", tmp_path / "out2"
    unique.mkdir()
    whole = gzip.compress(_requests([f"12:0{m}:00" for m in range(6)]).encode())
    (unique / "requests-0001.log.gz").write_bytes(whole[: len(whole) // 2])
    os.utime(unique / "requests-0001.log.gz", (old, old))
    o = WatchOptions(str(unique), out=str(out2), once=True, use_spool=False,
                     pattern="requests-*.log.gz")
    assert run_watch(spark, o) == 1
    said = capsys.readouterr().err.splitlines()[-1]
    assert said.startswith(f"kafkalens watch: cannot read file:{unique}/requests-0001.log.gz "
                           "(truncated"), said
    assert said.endswith("; stopped (replace it with an empty file to go on)")
