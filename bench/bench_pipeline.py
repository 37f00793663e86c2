"""Benchmark of `kafkalens report`: lines per second and peak memory.

    .venv/bin/python bench/bench_pipeline.py                  # 1M lines
    .venv/bin/python bench/bench_pipeline.py --lines 1000000 10000000

Input: pipeline.synth logs (~660 bytes a line) written as the proxy rotates them:
100,000 lines a file, rotated files gzip-compressed (requests.log.N.gz; ~19x smaller,
synthetic lines repeat a lot),
the active requests.log plain; one bad line in 100,003. Generated once per size
into --dir and reused (two generator processes, one directory each).

Measured: the report runs as `python -m pipeline.report` (a fresh driver and JVM,
default master local[*]) and its whole wall time, JVM start and report.html included,
divides the line count. Peak memory: the process tree (the Python driver and the
java JVM it starts, its direct child) is sampled every 0.2 s from /proc, VmRSS summed;
the largest sum is reported, and the peak of each process too.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

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
    """The driver and its direct children: the JVM (spark-class execs it).

    Deeper descendants are left out on purpose: a process the JVM spawns shares its
    memory until exec (vfork), and its VmRSS would count the JVM twice.
    """
    pids = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            pids += [int(c) for c in (task / "children").read_text().split()]
    return pids


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def run_report(logs: Path, out: Path) -> tuple[float, int, dict[str, int], str]:
    """Wall seconds, peak summed RSS (KiB), peak RSS per process, and the report's stdout."""
    cmd = [sys.executable, "-m", "pipeline.report", str(logs), "--out", str(out)]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    peak, per_process = 0, dict[str, int]()
    while proc.poll() is None:
        sizes = {pid: _rss_kib(pid) for pid in _family(proc.pid)}
        peak = max(peak, sum(sizes.values()))
        for pid, kib in sizes.items():
            label = f"{_name(pid)}[{pid}]"
            per_process[label] = max(per_process.get(label, 0), kib)
        time.sleep(0.2)
    seconds = time.monotonic() - started
    stdout = proc.stdout.read() if proc.stdout else ""
    if proc.returncode != 0:
        raise SystemExit(f"report failed ({proc.returncode}):\n{stdout}")
    return seconds, peak, per_process, stdout


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--lines", type=int, nargs="+", default=[1_000_000])
    p.add_argument("--dir", type=Path, default=Path("/tmp/kafkalens-bench"))
    args = p.parse_args()
    for lines in args.lines:
        logs = generate(args.dir, lines)
        size = sum(f.stat().st_size for f in logs.rglob("*") if f.is_file())
        seconds, peak, per_process, stdout = run_report(logs, args.dir / f"report-{lines}")
        print(stdout.rstrip())
        big = {k: v for k, v in per_process.items() if v > 10 * 1024}  # not the launchers
        print(f"bench {lines:,} lines ({size / 1e6:,.0f} MB on disk, gzip rotated files) on "
              f"{os.cpu_count()} cores: {seconds:.1f} s wall, {lines / seconds:,.0f} lines/s; "
              f"peak RSS driver+JVM {peak / 1024:,.0f} MiB (peak per process: "
              f"{', '.join(f'{k} {v / 1024:,.0f}' for k, v in big.items())} MiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
