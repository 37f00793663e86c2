"""The whole report from several source trees, in turn, round after round (#19): an
interleaved before/after of a change to the pipeline.

    git archive BASE | tar -x -C /tmp/before       # the code before, as a tree
    PYTHONPATH=. .venv/bin/python -m bench.pipeline.report_arms --logs /tmp/kafkalens-bench/1000000 \\
        --tree before=/tmp/before --tree after=. --rounds 2

Each run is `python -m pipeline.cli report LOGS --out DIR --master local[*]` started in its
tree (a fresh driver and JVM, as a user runs it) with Spark's event log on. Measured:
wall time; CPU = user+system seconds of the driver's Python and JVM from /proc
(bench_pipeline's sampling); from the event log, jobs, tasks, the tasks' CPU
(executorCpuTime) and of it the scan's (the tasks that read input records); per line.
`--tree NAME=TREE:OPTIONS` appends JVM options to that arm's local JVM.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.pipeline.speed import _cpu_seconds, _family, _loadavg, base_env


def event_figures(event_dir: Path) -> dict[str, float]:
    """Jobs, tasks and the tasks' CPU seconds (all, and the scan's) from an event log."""
    jobs = tasks = 0
    cpu = scan = 0.0
    for log in event_dir.rglob("events_*"):
        for line in log.open(encoding="utf-8"):
            event = json.loads(line)
            if event["Event"] == "SparkListenerJobStart":
                jobs += 1
            elif event["Event"] == "SparkListenerTaskEnd" and event.get("Task Metrics"):
                metrics = event["Task Metrics"]
                tasks += 1
                seconds = metrics["Executor CPU Time"] / 1e9
                cpu += seconds
                if metrics.get("Input Metrics", {}).get("Records Read", 0) > 0:
                    scan += seconds
    return {"jobs": jobs, "tasks": tasks, "tasks_cpu": cpu, "scan_cpu": scan}


def run_report(tree: Path, logs: str, java_options: str) -> dict[str, Any]:
    events = Path(tempfile.mkdtemp(prefix="report-arms-events-"))
    out = Path(tempfile.mkdtemp(prefix="report-arms-out-"))
    conf = ["spark.eventLog.enabled=true", "spark.eventLog.compress=false",
            f"spark.eventLog.dir={events}"]
    env = {**base_env(), "PYTHONPATH": str(tree),
           "PYSPARK_SUBMIT_ARGS": " ".join(f"--conf {c}" for c in conf) + " pyspark-shell"}
    if java_options:
        env["KAFKALENS_EXTRA_JAVA_OPTIONS"] = java_options  # read by the runner below
    cmd = [sys.executable, "-c", _RUNNER, logs, str(out / "report")]
    load, started = _loadavg(), time.monotonic()
    proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    cpu: dict[int, float] = {}
    while proc.poll() is None:
        for pid in _family(proc.pid):
            if (seconds := _cpu_seconds(pid)) is not None:
                cpu[pid] = seconds
        time.sleep(0.2)
    wall = time.monotonic() - started
    said, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"report in {tree} failed:\n{err[-4000:]}")
    figures = event_figures(events)
    shutil.rmtree(events, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    # The report's own figures (its summary): the scan's time and the tables' after it.
    phases = re.search(r"reading ([0-9.]+) s, tables ([0-9.]+) s", said)
    return {"wall": wall, "cpu": sum(cpu.values()), "load": f"{load} -> {_loadavg()}",
            "reading": float(phases.group(1)) if phases else None,
            "tables": float(phases.group(2)) if phases else None, **figures}


# The report's command line, with extra JVM options for the local JVM when an arm has
# them (pipeline.session.LOCAL_JAVA_OPTIONS, so its own options stay).
_RUNNER = """
import os, sys
from pipeline import session
extra = os.environ.get("KAFKALENS_EXTRA_JAVA_OPTIONS")
if extra:
    session.LOCAL_JAVA_OPTIONS = session.LOCAL_JAVA_OPTIONS + " " + extra
from pipeline.cli import report_main
raise SystemExit(report_main([sys.argv[1], "--out", sys.argv[2], "--master", "local[*]"]))
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--logs", required=True)
    p.add_argument("--lines", type=int, default=1_000_000, help="lines in --logs")
    p.add_argument("--tree", action="append", required=True,
                   help="NAME=PATH[:JAVA OPTIONS], an arm (repeatable)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    results = []
    for round_ in range(args.rounds):
        for spec in args.tree:
            name, _, rest = spec.partition("=")
            tree, _, java = rest.partition(":")
            r = {"arm": name, "round": round_,
                 **run_report(Path(tree).resolve(), args.logs, java)}
            results.append(r)
            print(f"{name}#{round_}: wall {r['wall']:.1f} s (reading {r['reading']} s, "
                  f"tables {r['tables']} s), CPU {r['cpu']:.1f} s, "
                  f"{r['jobs']} jobs, {r['tasks']} tasks, tasks' CPU {r['tasks_cpu']:.1f} s "
                  f"(scan {r['scan_cpu']:.1f} s = {r['scan_cpu'] / args.lines * 1e6:.2f} "
                  f"us/line), load {r['load']}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
