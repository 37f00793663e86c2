"""Benchmark of `kafkalens report`: lines per second and peak memory.

    .venv/bin/python bench/bench_pipeline.py                  # 1M lines
    .venv/bin/python bench/bench_pipeline.py --lines 1000000 10000000
    .venv/bin/python bench/bench_pipeline.py --parse-only     # the floor: read+parse only,
                                                              # Spark's parser and Python's

Input: pipeline.synth logs (~660 bytes a line) written as the proxy rotates them:
100,000 lines a file, rotated files gzip-compressed (requests.log.N.gz; ~19x smaller,
synthetic lines repeat a lot),
the active requests.log plain; one bad line in 100,003. Generated once per size
into --dir and reused (two generator processes, one directory each).

Measured: the report runs as `python -m pipeline.report` (a fresh driver and JVM,
default master local[*]) and its whole wall time, JVM start and report.html included,
divides the line count. Peak memory: the process tree (the Python driver, the java
JVM it starts and the Python workers the JVM starts) is sampled every 0.2 s from
/proc, PSS summed (shared pages once); the largest sum is reported, and the peak of
each process too. CPU: the user+system seconds of those processes (last sample of
each), in all and for the JVM and the Python workers apart (the machine is shared, so
CPU seconds compare variants better than wall time), and the load average before and
after.

Last measured (pipeline/README.md, "Speed"; a shared 2-core machine, load ~1.5-2.5),
10M lines, two interpreters alternating over the same code: Debian's python3.11
(3.11.2) 56.9-65.6 s in four runs (152,000-176,000 lines/s, median ~166,000; workers
77-91 s of CPU), a pyenv 3.11.7 built without --enable-optimizations/--with-lto
71.8-84.2 s (119,000-139,000; workers 101-119 s); peak 1.45-1.49 GiB. 1M lines ~16-18 s
(56,000-62,000 lines/s) with either: Spark's start and first job take ~7 s of the
6.7 s budget. The first run of a venv writes the JVM's class-data archive (slower).
Run it with the interpreter you deploy: it prints which one ran.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

from pipeline.synth import Synth, to_line, write_rotated

LINES_PER_FILE = 100_000
GENERATORS = 2


def _generate_part(args: tuple[Path, int, int]) -> None:
    directory, lines, seed = args
    synth = Synth(seed=seed, rate=2000.0, bad_every=100_003, other_every=5003)
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
    print(f"generated {lines:,} lines in {time.monotonic() - started:.0f} s into {target}")
    return target


def _family(pid: int) -> list[int]:
    """The driver and all its descendants: the JVM (spark-class execs it) and the
    Python workers (pyspark.daemon, started by the JVM, and the workers it forks)."""
    pids, todo = [], [pid]
    while todo:
        current = todo.pop()
        pids.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            with contextlib.suppress(OSError, ValueError):
                todo += [int(c) for c in (task / "children").read_text().split()]
    return pids


def _pss_kib(pid: int) -> int:
    """Proportional set size: pages shared between processes (the Python workers are
    forked from one daemon; a launcher shares the JVM's pages until it execs) count
    once in the sum, split between the sharers, where RSS would count them each time."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
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


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


class Run(NamedTuple):
    seconds: float  # wall
    peak_kib: int  # summed PSS
    per_process: dict[str, int]  # peak PSS (KiB) per process
    cpu_seconds: float  # user + system, driver, JVM and Python workers
    cpu_by_kind: dict[str, float]  # the same for the driver, the JVM, the workers
    stdout: str


def run_report(logs: Path, out: Path, parse_arm: str | None = None) -> Run:
    """Runs the report (or only its parsing, see parse_only_main) once and measures it."""
    cmd = [sys.executable, "-m", "pipeline.report", str(logs), "--out", str(out)]
    parse_only = parse_arm is not None
    if parse_only:
        cmd = [sys.executable, "-m", "bench.bench_pipeline", "--parse-only-child", str(logs),
               "--arm", str(parse_arm)]
    started = time.monotonic()
    root = Path(__file__).resolve().parent.parent  # for -m bench.bench_pipeline
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            cwd=root if parse_only else None)
    peak, per_process, cpu = 0, dict[str, int](), dict[int, float]()
    kinds: dict[int, str] = {}
    while proc.poll() is None:
        family = _family(proc.pid)
        for pid in family:
            if (seconds := _cpu_seconds(pid)) is not None:
                cpu[pid] = seconds
                # By its latest name: spark-class is a shell script until it execs java.
                kinds[pid] = "driver" if pid == proc.pid else _name(pid)
        sizes = {pid: _pss_kib(pid) for pid in family}
        peak = max(peak, sum(sizes.values()))
        for pid, kib in sizes.items():
            label = f"{_name(pid)}[{pid}]"
            per_process[label] = max(per_process.get(label, 0), kib)
        time.sleep(0.2)
    seconds = time.monotonic() - started
    stdout = proc.stdout.read() if proc.stdout else ""
    if proc.returncode != 0:
        raise SystemExit(f"report failed ({proc.returncode}):\n{stdout}")
    by_kind: dict[str, float] = {}
    for pid, used in cpu.items():
        kind = {"driver": "driver", "java": "JVM"}.get(kinds[pid], "Python workers")
        by_kind[kind] = by_kind.get(kind, 0.0) + used
    return Run(seconds, peak, per_process, sum(cpu.values()), by_kind, stdout)


# The Python arms ("python", "python-fold") timed the former report's parser and
# fold (fastparse.py, partials.py), deleted with it: Spark's parse is the report's.
PARSE_ARMS = ("spark",)


def parse_only_main(logs: str, arm: str) -> int:
    """The floor of a report: a fresh driver and JVM reading and parsing every line.

    spark: the report's parse (text + from_json, read.parse_lines), every column kept
    so that Spark cannot prune fields from the parse, counted."""
    from pyspark.sql import functions as F

    from pipeline.read import expand_inputs, parse_lines, read_logs
    from pipeline.session import build_session

    spark = build_session("kafkalens-parse-only")
    parsed = parse_lines(read_logs(spark, expand_inputs(spark, [logs])))
    row = parsed.agg(F.count(F.lit(1)), *[F.count(c) for c in parsed.columns]).first()
    count = row[0] if row else 0
    print(f"parse only ({arm}): {count:,} lines")
    spark.stop()
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--lines", type=int, nargs="+", default=[1_000_000])
    p.add_argument("--dir", type=Path, default=Path("/tmp/kafkalens-bench"))
    p.add_argument("--parse-only", action="store_true",
                   help="time only reading and parsing the lines (the floor of the report),"
                        " each way in turn: " + ", ".join(PARSE_ARMS))
    p.add_argument("--arms", nargs="+", choices=PARSE_ARMS, default=list(PARSE_ARMS),
                   help="with --parse-only: which ways")
    p.add_argument("--parse-only-child", metavar="LOGS", help=argparse.SUPPRESS)
    p.add_argument("--arm", choices=PARSE_ARMS, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.parse_only_child:
        return parse_only_main(args.parse_only_child, args.arm)
    for lines in args.lines:
        logs = generate(args.dir, lines)
        size = sum(f.stat().st_size for f in logs.rglob("*") if f.is_file())
        for arm in args.arms if args.parse_only else [None]:
            load_before = _loadavg()
            run = run_report(logs, args.dir / f"report-{lines}", arm)
            print(run.stdout.rstrip())
            big = {k: v for k, v in run.per_process.items() if v > 30 * 1024}  # no launchers
            print(f"bench{f' (parse only, {arm})' if arm else ''} {lines:,} lines "
                  f"({size / 1e6:,.0f} MB on disk, gzip rotated files) on "
                  f"{os.cpu_count()} cores: {run.seconds:.1f} s wall, "
                  f"{lines / run.seconds:,.0f} lines/s; {run.cpu_seconds:.1f} s CPU ("
                  + ", ".join(f"{k} {v:.1f}" for k, v in run.cpu_by_kind.items())
                  + f"); peak PSS of them {run.peak_kib / 1024:,.0f} MiB (peak per process: "
                  f"{', '.join(f'{k} {v / 1024:,.0f}' for k, v in big.items())} MiB); "
                  f"load average before {load_before}, after {_loadavg()}; {_interpreter()}")
    return 0


def _interpreter() -> str:
    """The Python that ran the driver and the workers: its build matters (see the
    docstring: ~20 % of the report's time between two builds of 3.11 here)."""
    return f"python {platform.python_version()} ({sys.executable})"


if __name__ == "__main__":
    raise SystemExit(main())
