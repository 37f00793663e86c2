"""Where the report's work after the scan goes: one `kafkalens report` run in this
process (the session built as the report builds it: pipeline.session), with the
driver's py4j round trips counted per phase (a counter wrapped around the gateway
client's send_command: bench only) and Spark's jobs counted from its status tracker.

    PYTHONPATH=. .venv/bin/python -m bench.pipeline.after_scan LOGS --out DIR [--master URL]

Prints: the scan's time; after it, the time and py4j calls of building the tables'
plans (pipeline.tables.build_tables), of writing them (the families' threads, the
charts' points included) and of report.html; the jobs Spark ran after the scan; the
report's own "tables" figure. Run it beside the same on another checkout
(PYTHONPATH=that checkout) to compare arms in one session.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections import Counter
from typing import Any

from pipeline import report, tables
from pipeline.progress import Phases
from pipeline.session import build_session


class Calls:
    """py4j round trips, counted (all threads)."""

    def __init__(self) -> None:
        self.n = 0
        self._lock = threading.Lock()
        self.by_method: Counter[str] | None = None  # counting by the method called

    def wrap(self, client: Any) -> None:
        send = client.send_command

        def counted(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.n += 1
                if self.by_method is not None and args and isinstance(args[0], str):
                    parts = args[0].split("\n")  # py4j's protocol: command, target, name
                    self.by_method[" ".join(parts[:3:2]) if len(parts) > 2 else parts[0]] += 1
            return send(*args, **kwargs)

        client.send_command = counted


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("logs", nargs="+")
    p.add_argument("--out", required=True)
    p.add_argument("--master")
    args = p.parse_args()
    report.preload_imports()
    spark = build_session("kafkalens-report", args.master)
    calls = Calls()
    calls.wrap(spark.sparkContext._gateway._gateway_client)  # type: ignore[union-attr]
    tracker = spark.sparkContext.statusTracker()
    marks: dict[str, tuple[float, int]] = {}

    def mark(name: str) -> None:
        marks[name] = (time.monotonic(), calls.n)

    build, tables_phase, render = tables.build_tables, report._tables, report.render_html

    def timed_build(*a: Any, **k: Any) -> Any:
        mark("build")
        calls.by_method = Counter()
        try:
            return build(*a, **k)
        finally:
            mark("built")
            by_method, calls.by_method = calls.by_method, None
            print("build_tables' py4j calls by command and method:",
                  ", ".join(f"{m!r} {n}" for m, n in by_method.most_common(25)))

    def timed_tables(*a: Any, **k: Any) -> Any:
        marks["jobs_before"] = (0.0, len(tracker.getJobIdsForGroup()))
        mark("tables")
        try:
            return tables_phase(*a, **k)
        finally:
            mark("written")
            marks["jobs_after"] = (0.0, len(tracker.getJobIdsForGroup()))

    def timed_render(*a: Any, **k: Any) -> Any:
        mark("render")
        try:
            return render(*a, **k)
        finally:
            mark("rendered")

    spans: list[str] = []

    def timing(owner: Any, name: str, label: Any) -> None:
        inner = getattr(owner, name)

        def timed(*a: Any, **k: Any) -> Any:
            t0 = time.monotonic()
            try:
                return inner(*a, **k)
            finally:
                spans.append(f"  {threading.current_thread().name} {label(a)}: "
                             f"{t0 - marks['tables'][0]:.2f} + {time.monotonic() - t0:.2f} s")

        setattr(owner, name, timed)

    from pyspark.sql import DataFrame

    timing(report, "write_family", lambda a: f"family {a[1][0]}..")
    timing(DataFrame, "toArrow", lambda a: "toArrow")
    timing(DataFrame, "collect", lambda a: "collect")
    timing(report.small_tables, "write_parquet", lambda a: f"write {a[2].rsplit('/', 1)[1]}")
    timing(report.small_tables, "union_of", lambda a: "union built")
    report.build_tables = timed_build  # type: ignore[assignment]
    report._tables = timed_tables  # type: ignore[assignment]
    report.render_html = timed_render  # type: ignore[assignment]
    started = time.monotonic()
    result = report.run_report(spark, args.logs, args.out, phases=Phases())
    mark("end")
    spark.stop()

    def span(a: str, b: str) -> str:
        (t0, c0), (t1, c1) = marks[a], marks[b]
        return f"{t1 - t0:.2f} s, {c1 - c0:,} py4j calls"

    print(f"lines {result.counts.lines:,}; scan {result.scan_seconds:.2f} s")
    print(f"build_tables: {span('build', 'built')}")
    print(f"tables written (from the plans built): {span('built', 'written')}")
    print(f"all of _tables: {span('tables', 'written')}")
    print(f"report.html: {span('written', 'end')}")
    print("\n".join(spans))
    print(f"jobs after the scan: {marks['jobs_after'][1] - marks['jobs_before'][1]}")
    print(f"after the scan (the report's own figure): "
          f"{result.seconds - result.scan_seconds:.2f} s; the whole run "
          f"{time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
