"""Benchmark of the pipeline: `kafkalens report` over raw logs and over the table
`kafkalens ingest` makes of them, the ingest itself, each against the read-only floor
measured in the same invocation; the work after the scan; driver memory; how the scan
splits over a cluster's executors.

    .venv/bin/python -m bench.pipeline.speed              # every run, side by side
    .venv/bin/python -m bench.pipeline.speed --runs read-5M local-5M
    .venv/bin/python -m bench.pipeline.speed --lines 200000     # a quick dry run
    .venv/bin/python -m bench.pipeline.speed --rate 100 --runs read-5M ingest-5M table-5M
                                      # the table's side over 7 hours of logs (rollup)
    .venv/bin/python -m bench.pipeline.speed --runs local-1M \
        --conf spark.eventLog.enabled=true --conf spark.eventLog.dir=/tmp/ev   # an arm

Runs, in one invocation, in this order (each a fresh driver through the command line,
as a user runs it):

    read-5M       the floor: a fresh local driver only reads and parses the 5M lines
                  with the report's schema (bench.pipeline.read_floor), no table
    local-5M      `kafkalens report` over the 5M lines on local[*]
    ingest-5M     `kafkalens ingest --once --no-spool` of the same files into a table
    table-5M      `kafkalens report --table` over that table
    table-read-5M the floor over the table: a fresh driver only reads its every column
                  (bench.pipeline.read_floor --table)
    rewrite-5M    the table's rows read and written again as the ingest writes them
                  (bench.pipeline.read_floor --rewrite): less table-read-5M, what Spark's
                  Parquet writer alone costs the ingest
    local-1M      the report over 1M lines (driver memory and the work after the scan
                  at another size)
    cluster2-5M   the report on a Spark standalone cluster of two 1-core workers (the
                  scan's split over the executors, from Spark's event log)

The standalone cluster is a real one, started from the pyspark package's own scripts
(tests/support/spark_cluster.py: a master and the workers on loopback, each with its
own work directory; torn down after its run); its executors run a bare Python without
the project's packages unless --executor-python driver.

Goals (pipeline/README.md, "Speed"): the report over raw logs at most 1.7x the
floor's time at 5M lines; the work after the scan (the report's own "tables" figure:
from the scan's end to report.html written) at most 6 s at any size; the ingest at
least 0.55x the floor's lines/s; the report over the ingested table at least 300,000
lines/s; driver memory that does not grow with the input.

Input: support.synth logs (tests/support/synth.py) (~660 bytes a line) written as the proxy rotates them:
100,000 lines a file, rotated files gzip-compressed (requests.log.N.gz), the active
requests.log plain; one bad line in 100,003. Generated once per size into --dir and
reused (two generator processes, one directory each). --lines scales every run.

Measured: the wall time of the driver process, JVM start and report.html included,
divides the line count. Driver memory: the driver's Python and the JVM it starts
(in local mode that JVM also runs the executors' tasks; on the cluster it is only the
driver) are sampled every 0.2 s from /proc; the peak RSS of each is reported. CPU:
user+system seconds of the driver's processes. The load average before and after
(the machine is shared: the ratios to the floor, measured beside, compare).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from support.synth import Synth, to_line, write_rotated

ROOT = Path(__file__).resolve().parents[2]
LINES_PER_FILE = 100_000
GENERATORS = 2
RUNS: dict[str, tuple[int, str | int]] = {  # name -> (millions of lines, "local",
    # workers on a standalone cluster, "read": bench.pipeline.read_floor, "ingest", "table",
    # "table-read" and "rewrite": bench.pipeline.read_floor over the table)
    "read-5M": (5, "read"),
    "local-5M": (5, "local"),
    "ingest-5M": (5, "ingest"),
    "table-5M": (5, "table"),
    "table-read-5M": (5, "table-read"),
    "rewrite-5M": (5, "rewrite"),
    "local-1M": (1, "local"),
    "cluster2-5M": (5, 2),
}
GOAL_FLOOR_RATIO = 1.7  # the report's time at most this many times the floor's
GOAL_AFTER_SCAN_S = 6.0  # at most
GOAL_INGEST_RATIO = 0.55  # the ingest's lines/s at least this share of the floor's
GOAL_TABLE_LINES_PER_S = 300_000
WORKER_MEMORY = "2g"
EXECUTOR_MEMORY = "1536m"


def _generate_part(args: tuple[Path, int, int, float]) -> None:
    directory, lines, seed, rate = args
    # Fetch lines carry positions, OffsetCommits committed offsets (#21); some lines
    # are followers' fetches and client telemetry (#20), as a fleet's logs hold.
    synth = Synth(seed=seed, rate=rate, bad_every=100_003, other_every=5003,
                  follower_every=499, telemetry_every=211)
    write_rotated(directory, (to_line(e) for e in synth.events(lines)), LINES_PER_FILE, gz=True)


RATE = 2000.0  # lines a second in each proxy's log: 5M lines span 21 minutes


def generate(root: Path, lines: int, rate: float = RATE) -> Path:
    """`lines` synthetic lines in two proxies' logs, `rate` lines a second in each (a
    lower rate spreads them over more hours: the table's hourly rollup needs closed
    hours)."""
    target = root / (f"{lines}" if rate == RATE else f"{lines}-rate{rate:g}")
    done = target / ".complete"
    if done.exists():
        return target
    parts = [
        (target / f"proxy-{i}", lines // GENERATORS + (i < lines % GENERATORS), 100 + i, rate)
        for i in range(GENERATORS)
    ]
    started = time.monotonic()
    with multiprocessing.Pool(GENERATORS) as pool:
        pool.map(_generate_part, parts)
    done.write_text("")
    print(f"generated {lines:,} lines in {time.monotonic() - started:.0f} s into {target}",
          flush=True)
    return target


def _family(pid: int) -> list[int]:
    """The driver and all its descendants: the JVM (spark-class execs it) and, in local
    mode, the Python workers the JVM starts."""
    pids, todo = [], [pid]
    while todo:
        current = todo.pop()
        pids.append(current)
        with contextlib.suppress(OSError):  # it may exit while we look
            tasks = list(Path(f"/proc/{current}/task").iterdir())
            for task in tasks:
                with contextlib.suppress(OSError, ValueError):
                    todo += [int(c) for c in (task / "children").read_text().split()]
    return pids


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of one process (not its children)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state is field 3
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


@dataclass
class Run:
    name: str
    lines: int
    seconds: float
    driver_python_kib: int  # peak RSS of the driver's Python
    driver_jvm_kib: int  # peak RSS of the JVM it started
    cpu_seconds: float
    load: str
    tables_seconds: float | None = None  # the report's own: after the scan
    split: str = ""  # the scan's tasks per executor (cluster runs)

    @property
    def lines_per_s(self) -> float:
        return self.lines / self.seconds


def measure(name: str, lines: int, cmd: list[str], env: dict[str, str]) -> Run:
    """Runs one driver to its end, sampling its processes."""
    load = _loadavg()
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=ROOT)
    python_peak = jvm_peak = 0
    cpu: dict[int, float] = {}
    while proc.poll() is None:
        for pid in _family(proc.pid):
            if (seconds := _cpu_seconds(pid)) is not None:
                cpu[pid] = seconds
            rss = _rss_kib(pid)
            if pid == proc.pid:
                python_peak = max(python_peak, rss)
            elif _name(pid) == "java":
                jvm_peak = max(jvm_peak, rss)
        time.sleep(0.2)
    seconds = time.monotonic() - started
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed ({proc.returncode}):\n{out[-3000:]}\n{err[-6000:]}")
    tables = re.search(r"reading [0-9.]+ s, tables ([0-9.]+) s", out)
    return Run(name, lines, seconds, python_peak, jvm_peak, sum(cpu.values()),
               f"{load} -> {_loadavg()}", float(tables.group(1)) if tables else None)


def report_cmd(logs: Path, out: Path, master: str, table: bool = False) -> list[str]:
    source = ["--table", str(logs)] if table else [str(logs)]
    return [sys.executable, "-m", "pipeline.cli", "report", *source, "--out", str(out),
            "--master", master]


def ingest_cmd(logs: Path, table: Path) -> list[str]:
    """Every file of the generated logs (unique names: no spool), in one run."""
    return [sys.executable, "-m", "pipeline.cli", "ingest", f"{logs}/*", "--table", str(table),
            "--once", "--no-spool", "--pattern", "requests.log*",
            "--max-files-per-trigger", "1000", "--master", "local[*]"]


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


@contextlib.contextmanager
def cluster_of(workers: int, directory: Path, executor_python: str) -> Iterator[dict[str, str]]:
    """A driver environment for a fresh standalone cluster of `workers` 1-core workers."""
    sys.path.insert(0, str(ROOT / "tests"))
    from support.spark_cluster import standalone_cluster

    shutil.rmtree(directory, ignore_errors=True)
    with standalone_cluster(directory, workers=workers, cores=1,
                            worker_memory=WORKER_MEMORY) as cluster:
        conf = {"spark.executor.memory": EXECUTOR_MEMORY}
        if executor_python == "driver":
            conf["spark.pyspark.python"] = sys.executable
        env = cluster.driver_env(base_env(), **conf)
        if executor_python == "driver":
            env["PYSPARK_PYTHON"] = sys.executable
        env["_MASTER"] = cluster.master_url
        yield env


def with_conf(env: dict[str, str], conf: list[str]) -> dict[str, str]:
    """`env` with extra `--conf key=value` settings for the driver (an arm to compare)."""
    if not conf:
        return env
    args = " ".join(f"--conf {shlex.quote(c)}" for c in conf)
    current = env.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell")
    return {**env, "PYSPARK_SUBMIT_ARGS": f"{args} {current}"}


def run_one(name: str, lines: int, logs: Path, work: Path, executor_python: str,
            conf: list[str]) -> Run:
    _, where = RUNS[name]
    out = work / f"report-{name}"
    table = work / f"table-{lines}"
    shutil.rmtree(out, ignore_errors=True)
    if where == "local":
        return measure(name, lines, report_cmd(logs, out, "local[*]"),
                       with_conf(base_env(), conf))
    if where == "read":
        floor = [sys.executable, "-m", "bench.pipeline.read_floor", str(logs), "--master", "local[*]"]
        return measure(name, lines, floor, with_conf(base_env(), conf))
    if where == "ingest":
        shutil.rmtree(table, ignore_errors=True)
        return measure(name, lines, ingest_cmd(logs, table), with_conf(base_env(), conf))
    if where in ("table", "table-read", "rewrite"):
        if not (table / "_delta_log").exists():
            raise SystemExit(f"{name}: no table at {table}: run ingest-5M first")
        floor = [sys.executable, "-m", "bench.pipeline.read_floor", "--table", str(table),
                 "--master", "local[*]"]
        if where == "table":
            cmd = report_cmd(table, out, "local[*]", table=True)
        elif where == "table-read":
            cmd = floor
        else:
            cmd = [*floor, "--rewrite", str(out)]
        return measure(name, lines, cmd, with_conf(base_env(), conf))
    events = work / f"events-{name}"
    shutil.rmtree(events, ignore_errors=True)
    events.mkdir(parents=True)
    logged = [*conf, "spark.eventLog.enabled=true", "spark.eventLog.compress=false",
              f"spark.eventLog.dir={events}"]
    with cluster_of(int(where), work / f"cluster-{name}", executor_python) as env:
        master = env.pop("_MASTER")
        run = measure(name, lines, report_cmd(logs, out, master), with_conf(env, logged))
    run.split = scan_split(events)
    return run


def scan_split(events: Path) -> str:
    """The scan's tasks (those that read input) per executor, with their CPU seconds,
    from Spark's event log: how evenly the lines were spread."""
    tasks: dict[str, list[float]] = {}
    for log in events.rglob("events_*"):  # Spark's rolling event log: not appstatus_*, .crc
        if not log.is_file():
            continue
        for line in log.open(encoding="utf-8"):
            event = json.loads(line)
            metrics = event.get("Task Metrics")
            if event["Event"] != "SparkListenerTaskEnd" or not metrics:
                continue
            if metrics.get("Input Metrics", {}).get("Records Read", 0) > 0:
                executor = event["Task Info"]["Executor ID"]
                tasks.setdefault(executor, []).append(metrics["Executor CPU Time"] / 1e9)
    return ", ".join(f"executor {e}: {len(t)} tasks, {sum(t):.1f} s CPU"
                     for e, t in sorted(tasks.items()))


def summary(runs: list[Run]) -> list[str]:
    by = {r.name: r for r in runs}
    lines = []
    floor = by.get("read-5M")

    def verdict(ok: bool) -> str:
        return "met" if ok else "missed"

    if floor:
        lines.append(f"the floor, 5M lines only read and parsed: {floor.seconds:.1f} s, "
                     f"{floor.lines_per_s:,.0f} lines/s")
    if floor and "local-5M" in by:
        ratio = by["local-5M"].seconds / floor.seconds
        lines.append(f"report over raw logs, 5M: {by['local-5M'].seconds:.1f} s = {ratio:.2f}x "
                     f"the floor (goal at most {GOAL_FLOOR_RATIO}x: "
                     f"{verdict(ratio <= GOAL_FLOOR_RATIO)})")
    after = [(r.name, r.tables_seconds) for r in runs if r.tables_seconds is not None]
    if after:
        worst = max(t for _, t in after)
        lines.append("work after the scan: " + ", ".join(f"{n} {t:.1f} s" for n, t in after)
                     + f" (goal at most {GOAL_AFTER_SCAN_S:g} s: "
                     f"{verdict(worst <= GOAL_AFTER_SCAN_S)})")
    if floor and "ingest-5M" in by:
        ratio = by["ingest-5M"].lines_per_s / floor.lines_per_s
        lines.append(f"ingest, 5M: {by['ingest-5M'].lines_per_s:,.0f} lines/s = {ratio:.2f}x "
                     f"the floor's (goal at least {GOAL_INGEST_RATIO}x: "
                     f"{verdict(ratio >= GOAL_INGEST_RATIO)})")
    writing = (by["rewrite-5M"].seconds - by["table-read-5M"].seconds
               if {"rewrite-5M", "table-read-5M"} <= by.keys() else None)
    if floor and writing is not None:
        both = floor.seconds + writing
        took = f"; the ingest took {by['ingest-5M'].seconds:.1f} s" if "ingest-5M" in by else ""
        lines.append(f"what no ingest avoids: reading the logs ({floor.seconds:.1f} s) and "
                     f"Spark's Parquet writer writing their rows ({writing:.1f} s: "
                     f"rewrite-5M less table-read-5M), {both:.1f} s together = "
                     f"{floor.seconds / both:.2f}x the floor's lines/s{took}")
    if "table-5M" in by:
        r = by["table-5M"]
        lines.append(f"report over the ingested table, 5M: {r.lines_per_s:,.0f} lines/s "
                     f"(goal at least {GOAL_TABLE_LINES_PER_S:,}: "
                     f"{verdict(r.lines_per_s >= GOAL_TABLE_LINES_PER_S)})")
    if "table-read-5M" in by:
        r = by["table-read-5M"]
        lines.append(f"the floor over the table, 5M lines' every column only read (the "
                     f"report's scan reads them all): {r.seconds:.1f} s, "
                     f"{r.lines_per_s:,.0f} lines/s")
    if "local-1M" in by and "local-5M" in by:
        small, big = by["local-1M"], by["local-5M"]
        lines.append(
            f"driver peak RSS, 1M -> 5M lines on local[*]: Python "
            f"{small.driver_python_kib / 1024:,.0f} -> {big.driver_python_kib / 1024:,.0f} MiB, "
            f"JVM (driver and executor in one) {small.driver_jvm_kib / 1024:,.0f} -> "
            f"{big.driver_jvm_kib / 1024:,.0f} MiB")
    for r in runs:
        if r.split:
            lines.append(f"{r.name}, the scan over the executors: {r.split}")
    return lines


def table(runs: list[Run]) -> list[str]:
    rows = ["| run | lines | wall | lines/s | after the scan | driver Python peak RSS "
            "| driver JVM peak RSS | driver CPU | load |", "|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        after = "-" if r.tables_seconds is None else f"{r.tables_seconds:.1f} s"
        rows.append(f"| {r.name} | {r.lines:,} | {r.seconds:.1f} s | {r.lines_per_s:,.0f} | "
                    f"{after} | {r.driver_python_kib / 1024:,.0f} MiB | "
                    f"{r.driver_jvm_kib / 1024:,.0f} MiB | {r.cpu_seconds:.1f} s | {r.load} |")
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", nargs="+", choices=list(RUNS), default=list(RUNS))
    p.add_argument("--lines", type=int, default=1_000_000, metavar="N",
                   help="lines in a '1M' input (default %(default)s); '5M' is 5x that")
    p.add_argument("--dir", type=Path, default=Path("/tmp/kafkalens-bench"))
    p.add_argument("--rate", type=float, default=RATE, metavar="LINES_PER_S",
                   help="each proxy's lines a second in the generated logs (default "
                        "%(default)g: 5M lines span 21 minutes; 100: 7 hours, so the "
                        "table's rollup has closed hours)")
    p.add_argument("--executor-python", choices=("bare", "driver"), default="bare",
                   help="the cluster executors' Python: a bare venv (default; the report "
                        "must need none) or the driver's, for a report that still does")
    p.add_argument("--json", type=Path, help="also write the runs here")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting for every run's driver (repeatable), e.g. an arm "
                        "to compare against the defaults")
    args = p.parse_args()
    print(f"bench_pipeline: {_interpreter()}, {os.cpu_count()} cores", flush=True)
    runs = []
    for name in args.runs:
        lines = args.lines * RUNS[name][0]
        logs = generate(args.dir, lines, args.rate)
        run = run_one(name, lines, logs, args.dir, args.executor_python, args.conf)
        runs.append(run)
        after = "" if run.tables_seconds is None else f" ({run.tables_seconds:.1f} s after the scan)"
        print(f"{name}: {run.lines:,} lines in {run.seconds:.1f} s{after}, "
              f"{run.lines_per_s:,.0f} lines/s; driver peak RSS Python "
              f"{run.driver_python_kib / 1024:,.0f} MiB, JVM {run.driver_jvm_kib / 1024:,.0f} "
              f"MiB; load {run.load}", flush=True)
    print("\n".join(["", *table(runs), "", *summary(runs)]))
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in runs], indent=1))
    return 0


def _interpreter() -> str:
    return f"python {platform.python_version()} ({sys.executable})"


if __name__ == "__main__":
    raise SystemExit(main())
