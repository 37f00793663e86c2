"""Benchmark of `kafkalens report`: lines per second, scaling out, driver memory.

    .venv/bin/python -m bench.bench_pipeline              # the whole side-by-side run
    .venv/bin/python -m bench.bench_pipeline --runs local-1M local-5M
    .venv/bin/python -m bench.bench_pipeline --lines 200000 --runs local-1M cluster1-5M
    .venv/bin/python -m bench.bench_pipeline --runs cluster1-5M \
        --conf spark.eventLog.enabled=true --conf spark.eventLog.dir=/tmp/ev   # an arm

Runs, side by side in one invocation (each a fresh driver through the command line,
`python -m pipeline.cli LOGS --out DIR --master URL`, as a user runs it):

    local-1M      1M lines on local[*]
    local-5M      5M lines on local[*]
    cluster1-5M   the same 5M lines on a Spark standalone cluster, one worker, 1 core
    cluster2-5M   ... two workers, 1 core each
    read-5M       the floor: the same 5M lines only read and parsed with the report's
                  schema by a fresh local driver (bench.read_floor), no table

The standalone cluster is a real one, started from the pyspark package's own scripts
(tests/support/spark_cluster.py: a master and the workers on loopback, each worker
with its own work directory; torn down after its run); its executors run a bare
Python without the project's packages unless --executor-python driver. Goals reported
against (issue 19): at least 150,000 lines/s at 5M on 2 cores, at least 1.7x from one
worker to two, and driver memory that does not grow with the input.

Input: bench.synth logs (~660 bytes a line) written as the proxy rotates them:
100,000 lines a file, rotated files gzip-compressed (requests.log.N.gz), the active
requests.log plain; one bad line in 100,003. Generated once per size into --dir and
reused (two generator processes, one directory each). --lines scales every run (a
quick dry run: --lines 100000 makes "1M" 100k and "5M" 500k).

Measured: the wall time of the driver process, JVM start and report.html included,
divides the line count. Driver memory: the driver's Python and the JVM it starts
(in local mode that JVM also runs the executors' tasks; on the cluster it is only the
driver) are sampled every 0.2 s from /proc; the peak RSS of each is reported. The
executors of a cluster run are not the driver's children and are not counted. CPU:
user+system seconds of the driver's processes. The load average before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.synth import Synth, to_line, write_rotated

ROOT = Path(__file__).resolve().parent.parent
LINES_PER_FILE = 100_000
GENERATORS = 2
RUNS: dict[str, tuple[int, str | int]] = {  # name -> (millions of lines, "local",
    # workers on a standalone cluster, or "read": bench.read_floor)
    "local-1M": (1, "local"),
    "local-5M": (5, "local"),
    "cluster1-5M": (5, 1),
    "cluster2-5M": (5, 2),
    "read-5M": (5, "read"),
}
GOAL_LINES_PER_S = 150_000
GOAL_SPEEDUP = 1.7
WORKER_MEMORY = "2g"
EXECUTOR_MEMORY = "1536m"


def _generate_part(args: tuple[Path, int, int]) -> None:
    directory, lines, seed = args
    # Fetch lines carry positions, OffsetCommits committed offsets (#21); some lines
    # are followers' fetches and client telemetry (#20), as a fleet's logs hold.
    synth = Synth(seed=seed, rate=2000.0, bad_every=100_003, other_every=5003,
                  follower_every=499, telemetry_every=211)
    write_rotated(directory, (to_line(e) for e in synth.events(lines)), LINES_PER_FILE, gz=True)


def generate(root: Path, lines: int) -> Path:
    target = root / f"{lines}"
    done = target / ".complete"
    if done.exists():
        return target
    parts = [
        (target / f"proxy-{i}", lines // GENERATORS + (i < lines % GENERATORS), 100 + i)
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
    return Run(name, lines, seconds, python_peak, jvm_peak, sum(cpu.values()),
               f"{load} -> {_loadavg()}")


def report_cmd(logs: Path, out: Path, master: str) -> list[str]:
    return [sys.executable, "-m", "pipeline.cli", str(logs), "--out", str(out),
            "--master", master]


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
    shutil.rmtree(out, ignore_errors=True)
    if where == "local":
        return measure(name, lines, report_cmd(logs, out, "local[*]"),
                       with_conf(base_env(), conf))
    if where == "read":
        floor = [sys.executable, "-m", "bench.read_floor", str(logs), "--master", "local[*]"]
        return measure(name, lines, floor, with_conf(base_env(), conf))
    with cluster_of(int(where), work / f"cluster-{name}", executor_python) as env:
        master = env.pop("_MASTER")
        return measure(name, lines, report_cmd(logs, out, master), with_conf(env, conf))


def summary(runs: list[Run]) -> list[str]:
    by = {r.name: r for r in runs}
    lines = []
    if "local-5M" in by:
        r = by["local-5M"]
        verdict = "met" if r.lines_per_s >= GOAL_LINES_PER_S else "missed"
        lines.append(f"5M on local[*], {os.cpu_count()} cores: {r.lines_per_s:,.0f} lines/s "
                     f"(goal {GOAL_LINES_PER_S:,}: {verdict})")
    if "read-5M" in by:
        r = by["read-5M"]
        lines.append(f"5M only read and parsed on local[*] (the floor): {r.lines_per_s:,.0f} "
                     f"lines/s")
    if "cluster1-5M" in by and "cluster2-5M" in by:
        speedup = by["cluster2-5M"].lines_per_s / by["cluster1-5M"].lines_per_s
        verdict = "met" if speedup >= GOAL_SPEEDUP else "missed"
        lines.append(f"one worker -> two: {speedup:.2f}x (goal {GOAL_SPEEDUP}x: {verdict})")
    if "local-1M" in by and "local-5M" in by:
        small, big = by["local-1M"], by["local-5M"]
        lines.append(
            f"driver peak RSS, 1M -> 5M lines on local[*]: Python "
            f"{small.driver_python_kib / 1024:,.0f} -> {big.driver_python_kib / 1024:,.0f} MiB, "
            f"JVM (driver and executor in one) {small.driver_jvm_kib / 1024:,.0f} -> "
            f"{big.driver_jvm_kib / 1024:,.0f} MiB")
    return lines


def table(runs: list[Run]) -> list[str]:
    rows = ["| run | lines | wall | lines/s | driver Python peak RSS | driver JVM peak RSS "
            "| driver CPU | load |", "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        rows.append(f"| {r.name} | {r.lines:,} | {r.seconds:.1f} s | {r.lines_per_s:,.0f} | "
                    f"{r.driver_python_kib / 1024:,.0f} MiB | {r.driver_jvm_kib / 1024:,.0f} MiB "
                    f"| {r.cpu_seconds:.1f} s | {r.load} |")
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", nargs="+", choices=list(RUNS), default=list(RUNS))
    p.add_argument("--lines", type=int, default=1_000_000, metavar="N",
                   help="lines in a '1M' input (default %(default)s); '5M' is 5x that")
    p.add_argument("--dir", type=Path, default=Path("/tmp/kafkalens-bench"))
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
        logs = generate(args.dir, lines)
        run = run_one(name, lines, logs, args.dir, args.executor_python, args.conf)
        runs.append(run)
        print(f"{name}: {run.lines:,} lines in {run.seconds:.1f} s, "
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
