"""The pipeline's times are UTC whatever zone its driver runs in.

PySpark hands a collected timestamp to Python in the driver process's local zone,
not the session's UTC (pipeline/utc.py). Here the report, the watch and the ingest run
over the same logs with the driver in UTC, America/New_York and Asia/Tokyo (Python's
zone and its JVM's default, as `TZ=...` at start would set them), and give the same
tables, the same summary, the same report.html and the same watch output in each; in
each, the report's time span and the watch's watermark are the ones the log's own
timestamps give (computed here from the lines). The logs span the hour New York's
clocks moved forward (2025-03-09 07:00Z) and carry offsets and a zone-less time.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from support.logs import age_like_proxy
from support.parquet_tables import delta_rows, tables
from support.synth import Synth, to_line, write_rotated

from pipeline.ingest import IngestOptions, run_ingest
from pipeline.report import render_html, run_report
from pipeline.summary import summary_lines
from pipeline.watch import WatchOptions, run_watch

ZONES = ("UTC", "America/New_York", "Asia/Tokyo")
START = "2025-03-09T06:57:30"  # New York: 01:57:30 EST, then 03:00 EDT at 07:00Z
# Lines whose ts has an offset or none (taken as UTC): the same instants in any zone.
EXPLICIT = [
    {"ts": "2025-03-09T16:01:00+09:00", "event": "request", "api": "Metadata", "api_key": 3,
     "api_version": 12, "errors": [], "latency_ms": 1.5, "conn": "x-1"},
    {"ts": "2025-03-09T02:01:30-05:00", "event": "request", "api": "Metadata", "api_key": 3,
     "api_version": 12, "errors": [], "latency_ms": 2.5, "conn": "x-1"},
    {"ts": "2025-03-09T07:02:00", "event": "request", "api": "Metadata", "api_key": 3,
     "api_version": 12, "errors": [], "latency_ms": 3.5, "conn": "x-1"},
]


@contextlib.contextmanager
def driver_zone(spark: SparkSession, zone: str) -> Iterator[None]:
    """The driver's local zone, Python's and its JVM's, for a while."""
    timezone = spark._jvm.java.util.TimeZone  # type: ignore[union-attr]
    before_tz, before_jvm = os.environ.get("TZ"), timezone.getDefault()
    os.environ["TZ"] = zone
    time.tzset()
    timezone.setDefault(timezone.getTimeZone(zone))
    try:
        assert time.localtime(1741503600).tm_isdst == (zone == "America/New_York")
        yield
    finally:
        if before_tz is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before_tz
        time.tzset()
        timezone.setDefault(before_jvm)


def without_timings(text: str) -> str:
    """How long things took differs from run to run; nothing else may."""
    return re.sub(r"[\d,.]+ (s|lines/s)\b", r"# \1", text)


def make_logs(directory: Path) -> list[dict[str, Any]]:
    """Five rotated files of 400 lines (and a few lines in the active log, not read);
    the good lines of the rotated ones."""
    lines = [*Synth(seed=41, start=START, rate=4, bad_every=61).events(1600), *EXPLICIT,
             *Synth(seed=42, start="2025-03-09T07:05:00", rate=4).events(400)]
    write_rotated(directory, map(to_line, lines), 400)
    age_like_proxy(directory)
    return [e for e in lines[:2000] if isinstance(e, dict)]


def instant(ts: str) -> dt.datetime:
    t = dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))
    return t.astimezone(dt.UTC) if t.tzinfo else t.replace(tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def runs(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
         ) -> tuple[list[dict[str, Any]], Path, dict[str, dict[str, Any]]]:
    """Each command's outputs with the driver in each zone."""
    root = tmp_path_factory.mktemp("zones")
    logs = root / "logs"
    events = make_logs(logs)
    outputs: dict[str, dict[str, Any]] = {}
    for zone in ZONES:
        name = zone.replace("/", "_")
        got: dict[str, Any] = {}
        with driver_zone(spark, zone):
            out = root / f"report-{name}"
            result = run_report(spark, [str(logs / "*.log.[0-9]*")], str(out))
            got["summary"] = [without_timings(line) for line in summary_lines(result)]
            got["html"] = without_timings((out / "report.html").read_text())
            got["html_again"] = without_timings(render_html(result))
            got["report"] = tables(out)
            got["counts"] = result.counts
            said = io.StringIO()
            watched = root / f"watch-{name}"
            with contextlib.redirect_stdout(said):
                assert run_watch(spark, WatchOptions(str(logs), out=str(watched), once=True,
                                                     max_files_per_trigger=10)) == 0
            got["watch_said"] = said.getvalue().replace(str(watched), "OUT")
            got["watch"] = tables(watched)
            table = root / f"table-{name}"
            assert run_ingest(spark, IngestOptions(str(logs), str(table), once=True)) == 0
            got["ingest"] = delta_rows(table)
            got["ingest_layout"] = sorted(
                p.parent.relative_to(table).as_posix() for p in table.rglob("*.parquet")
                if not any(part.startswith(("_", ".")) for part in p.relative_to(table).parts))
        outputs[zone] = got
    return events, root, outputs


@pytest.mark.parametrize("zone", ZONES[1:])
@pytest.mark.parametrize("output", ["summary", "html", "html_again", "report", "counts",
                                    "watch_said", "watch", "ingest", "ingest_layout"])
def test_every_output_is_the_same_in_every_zone(runs: tuple, zone: str, output: str) -> None:
    _, _, outputs = runs
    assert outputs[zone][output] == outputs["UTC"][output]


@pytest.mark.parametrize("zone", ZONES)
def test_the_times_shown_are_the_logs_own_in_utc(runs: tuple, zone: str) -> None:
    events, _, outputs = runs
    times = sorted(instant(e["ts"]) for e in events)
    counts = outputs[zone]["counts"]
    assert (counts.first_ts, counts.last_ts) == (times[0], times[-1])
    span = f"from {times[0]:%Y-%m-%d %H:%M:%S} to {times[-1]:%H:%M:%S} UTC"
    assert span in outputs[zone]["summary"][0]
    # The watch's watermark: the newest line's time less two minutes.
    watermark = f"watermark {times[-1] - dt.timedelta(minutes=2):%Y-%m-%d %H:%M:%S} UTC"
    said = outputs[zone]["watch_said"].splitlines()
    assert said[0].endswith(watermark), said[0]
    first_final = [line for line in said if " final " in line][0]
    assert first_final.startswith(f"  {times[0]:%Y-%m-%d %H:%M} final"), first_final
    # The ingest's partitions are the UTC dates and hours of the lines (of a bad line,
    # its file's last write: 06:59Z to 07:06Z).
    layout = outputs[zone]["ingest_layout"]
    assert {p for p in layout if p.startswith("kind=lines/")} == {
        f"kind=lines/date={t:%Y-%m-%d}/hour={t.hour}" for t in times}
    assert {p for p in layout if p.startswith("kind=bad_lines/")} == {
        "kind=bad_lines/date=2025-03-09/hour=6", "kind=bad_lines/date=2025-03-09/hour=7"}
