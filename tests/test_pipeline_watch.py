"""`kafkalens watch`: streaming windows over a directory the proxy rotates.

The proxy's rotation renames requests.log -> .1 -> .2 ... and reuses .1; the tests
rotate the same way (plain, then gzip) between runs and check that every line of a
rotated file is counted exactly once across availableNow runs that restart from the
checkpoint, while the active file is left alone.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import threading
import time
from collections import Counter
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipeline.spool import Spool
from pipeline.synth import Synth, to_line, write_rotated
from pipeline.watch import WatchOptions, run_watch

WATERMARK = dt.timedelta(minutes=2)




def _lines(path: Path) -> list[str]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def age_like_proxy(logdir: Path, pattern: str = "requests.log*") -> None:
    """Give each file the mtime of its last line, as if written in real time."""
    for path in logdir.glob(pattern):
        last = json.loads(_lines(path)[-1])["ts"]
        t = dt.datetime.fromisoformat(last.replace("Z", "+00:00")).timestamp()
        os.utime(path, (t, t))


def rotated_requests(logdir: Path) -> list[dict]:
    """The request lines of every rotated file now in logdir (not the active file)."""
    out = []
    for path in logdir.glob("requests.log.*"):
        for line in _lines(path):
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if isinstance(e, dict) and e.get("event") in ("request", "request_no_response") \
                    and "api" in e:  # "yesterday" is no timestamp
                out.append(e)
    return out


def expected_windows(requests: list[dict]) -> Counter:
    """(window start, api) -> count, for windows the watermark has closed."""
    def ts(e: dict) -> dt.datetime:
        return dt.datetime.fromisoformat(e["ts"].replace("Z", "+00:00")).replace(tzinfo=None)

    watermark = max(map(ts, requests)) - WATERMARK
    counts: Counter = Counter()
    for e in requests:
        start = ts(e).replace(second=0, microsecond=0)
        if start + dt.timedelta(minutes=1) <= watermark:
            counts[(start, e["api"])] += 1
    return counts


def output(spark: SparkSession, out: Path, table: str = "by_api") -> Counter:
    df = spark.read.parquet(str(out / table)).select(
        F.date_format("window_start", "yyyy-MM-dd HH:mm").alias("start"), "*")
    got: Counter = Counter()
    for r in df.collect():
        key = r["api"] if table == "by_api" else (r["client_software_name"],
                                                  r["client_software_version"])
        got[(dt.datetime.strptime(r["start"], "%Y-%m-%d %H:%M"), key)] += r["requests"]
    return got


def test_rotation_restart_counts_each_line_once(spark: SparkSession, tmp_path: Path) -> None:
    logs, out = tmp_path / "logs", tmp_path / "out"
    synth = Synth(seed=5, rate=5, bad_every=211)  # ~7 minutes of traffic per 2000 lines
    options = WatchOptions(str(logs), out=str(out), once=True)

    write_rotated(logs, (to_line(e) for e in synth.events(2500)), 1000)
    age_like_proxy(logs)
    assert run_watch(spark, options) == 0
    first = output(spark, out)
    assert first == expected_windows(rotated_requests(logs)) and first

    # The proxy goes on: .1 -> .3, .2 -> .4, new .1 and .2, now compressed.
    write_rotated(logs, (to_line(e) for e in synth.events(2000)), 1000, gz=True)
    age_like_proxy(logs)
    assert {p.name for p in logs.iterdir()} == {
        "requests.log", "requests.log.1.gz", "requests.log.2.gz", "requests.log.3",
        "requests.log.4"}
    assert run_watch(spark, options) == 0
    second = output(spark, out)
    assert second == expected_windows(rotated_requests(logs))
    assert len(second) > len(first)
    assert all(second[k] == n for k, n in first.items())  # nothing counted twice

    # A restart with nothing new writes nothing.
    batches = sorted(p.name for p in (out / "by_api").iterdir())
    assert run_watch(spark, options) == 0
    assert sorted(p.name for p in (out / "by_api").iterdir()) == batches

    software = output(spark, out, "by_software")
    assert sum(software.values()) == sum(second.values())
    assert any(key == ("sarama", "1.27.0") for _, key in software)
    # Staged files are deleted once committed; the ledger remembers them.
    assert {p.name for p in (out / "_spool").iterdir()} == {"_ledger.txt"}


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
    requests = [json.loads(x) for p in sorted(logs.glob("requests-*.log")) for x in _lines(p)]
    requests = [e for e in requests if e["event"].startswith("request")]
    assert output(spark, out) == expected_windows(requests)


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
        want = expected_windows(rotated_requests(logs))
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
    staged = sorted(spool_dir.glob("*.log"))
    assert len(staged) == 3 and (spool_dir / "_ledger.txt").read_text().count("\n") == 3


def test_spool_skips_unfinished_files(tmp_path: Path) -> None:
    logs, spool_dir = tmp_path / "logs", tmp_path / "spool"
    logs.mkdir()
    whole = gzip.compress(b'{"ts":"2025-01-01T00:00:00Z","event":"request"}\n' * 1000)
    (logs / "requests.log.1.gz").write_bytes(whole[: len(whole) // 2])  # being compressed
    (logs / "requests.log.2").write_text('{"a":1}\n')  # just rotated: not settled yet
    old = time.time() - 60
    os.utime(logs / "requests.log.1.gz", (old, old))
    spool = Spool(logs, spool_dir, "*.log.[0-9]*")
    assert spool.collect() == []
    (logs / "requests.log.1.gz").write_bytes(whole)
    os.utime(logs / "requests.log.1.gz", (old, old))
    assert [p.name for p in spool.collect()] == ["requests.log.1.gz"]


def test_spool_recovers_after_crash_between_ledger_and_rename(tmp_path: Path) -> None:
    logs, spool_dir = tmp_path / "logs", tmp_path / "spool"
    logs.mkdir()
    spool_dir.mkdir()
    (logs / "requests.log.1").write_text('{"x":1}\n')
    os.utime(logs / "requests.log.1", (0, 0))
    spool = Spool(logs, spool_dir, "*.log.[0-9]*")
    spool.collect()
    [staged] = spool_dir.glob("*.log")
    fingerprint = staged.name.removesuffix(".log")
    staged.rename(spool_dir / f".{fingerprint}.log.tmp")  # as if we died before renaming
    (spool_dir / ".deadbeef.log.tmp").write_text("never recorded\n")
    assert spool.collect() == []  # already in the ledger: not staged again
    assert sorted(p.name for p in spool_dir.iterdir()) == ["_ledger.txt", staged.name]
