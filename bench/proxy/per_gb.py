"""`python -m bench.proxy.per_gb`: what each front does per MB it moves, in system calls and
in bytes copied, in front of Apache Kafka: the places a front's per-GB CPU goes.

One broker and the fronts of `bench.proxy.versus` (`bench/proxy/versus_arms.py`; by default
haproxy, python-relay, kafkalens-bare and kafkalens), each pinned to the last core as
there. Through each front in turn librdkafka produces `--records` records of 1 KiB as
fast as it can (`bench/proxy/throughput.py`), then consumes them: two windows, *produce* and
*consume*, with idle seconds around each, after `--warmup` records produced and consumed
unmeasured (a front's first megabytes grow its heap and fill its caches: counted, they
read as a per-MB cost). Per MB of record values moved (10^6 bytes):

* pass 1, `perf stat` (in-kernel counters, a few percent of overhead): the front's CPU
  (task-clock), context switches, page faults, every system call and each of the ones
  a relay makes (reads, writes, epoll, futex, ...). The front runs under
  `perf stat -I 100`, which counts it and its threads; the 100 ms intervals that fall
  in a window are summed (the front idles between windows).
* pass 2, `perf record` (slower: every sample is written, and a uprobe traps on every
  call of libc's memmove/memcpy): the bytes each read and each write moved (their
  return values: `syscalls:sys_exit_*`), so the mean read and write sizes and the
  bytes through system calls per MB (a relay that reads each byte once and writes it
  once moves 2 MB per MB); and the bytes the front copied in user space with libc's
  memmove/memcpy, copies of `--copy-from` bytes or more (the ones that grow with the
  data; the small ones are per request). The Java fronts copy with the JIT's own code,
  which no libc probe sees.

Without perf (or with `--tool strace`), `strace -f -c` counts each front's system calls
instead, over both windows and the front's start, with no warm-up (strace slows a front
several times over, so its counts are per MB at that speed; no bytes).

`--arms` takes `kafkalens-baseline` and `kafkalens-bare-baseline` too: the kafkalens and
kafkalens-bare arms on another checkout's code (KAFKALENS_BASELINE_TREE=DIR, its C
extensions built in place), so a change is counted before and after in one run.

Writes `per-gb.md` and `per-gb.jsonl` to `--out` (default bench/proxy/versus/) and prints
the table. Needs root or perf_event_paranoid <= 1 for the tracepoints, and Debian's
`linux-perf` (or `strace`).

    .venv/bin/python -m bench.proxy.per_gb
    .venv/bin/python -m bench.proxy.per_gb --arms haproxy,kafkalens --records 20000
    KAFKALENS_BASELINE_TREE=../baseline .venv/bin/python -m bench.proxy.per_gb \
        --arms haproxy,python-relay,kafkalens-bare-baseline,kafkalens-bare,kafkalens-baseline,kafkalens
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.procs import CpuWindow, tree

from bench.proxy import throughput, versus_arms
from bench.proxy.mdfmt import fmt, table
from bench.proxy.versus_arms import Bench, Front

Row = dict[str, Any]
DEFAULT_ARMS = ("haproxy", "python-relay", "kafkalens-bare", "kafkalens")
DEFAULT_OUT = Path(__file__).resolve().parent / "versus"
RECORD = 1024
INTERVAL_MS = 100
IDLE = 1.0  # seconds the front idles before and after each window
# The system calls counted one by one (any other is in the total): what a relay of
# bytes makes, and what an event loop, threads and an allocator make around it.
READS = ("read", "readv", "recvfrom", "recvmsg")
WRITES = ("write", "writev", "sendto", "sendmsg")
OTHERS = (
    "epoll_wait",
    "epoll_pwait",
    "epoll_ctl",
    "futex",
    "splice",
    "getsockopt",
    "setsockopt",
    "ioctl",
    "mmap",
    "munmap",
    "madvise",
    "brk",
    "accept4",
    "close",
)
SYSCALLS = READS + WRITES + OTHERS
# libc's memmove/memcpy: the variant the CPU picks at load time is the one called, so
# every variant there is gets a probe (memcpy is memmove's entry in each).
MEMMOVE_VARIANTS = (
    "__memmove_avx512_unaligned_erms",
    "__memmove_avx512_no_vzeroupper",
    "__memmove_evex_unaligned_erms",
    "__memmove_avx_unaligned_erms",
    "__memmove_avx_unaligned_erms_rtm",
    "__memmove_sse2_unaligned_erms",
    "__memmove_ssse3",
)
LIBC_CANDIDATES = ("/lib/x86_64-linux-gnu/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6")


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.proxy.per_gb", description=__doc__.split("\n")[0])
    p.add_argument("--arms", default=",".join(DEFAULT_ARMS), help="comma-separated")
    p.add_argument("--records", type=int, default=100_000, help="records of 1 KiB each way")
    p.add_argument(
        "--warmup", type=int, default=20_000, help="records each way through a front before its windows"
    )
    p.add_argument("--tool", choices=("auto", "perf", "strace"), default="auto")
    p.add_argument("--copy-from", type=int, default=512, help="copies this size or more")
    p.add_argument("--no-pin", action="store_true")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--kafka-version", default=_newest_kafka())
    return p.parse_args(argv)


def _newest_kafka() -> str:
    return (versus_arms.REPO / "tests" / "peers" / "kafka-versions").read_text().split()[0]


# --- the tracers ---------------------------------------------------------------------


def perf_works() -> bool:
    """perf is installed and may count system calls here (it counts a command it
    starts; attaching to a running process counted nothing on this machine's kernel)."""
    if shutil.which("perf") is None:
        return False
    done = subprocess.run(
        ["perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter", "--", "true"],
        capture_output=True,
        text=True,
    )
    return done.returncode == 0 and re.search(r"^\d+,", done.stderr, re.M) is not None


@dataclass
class Probes:
    """Uprobes on libc's memmove variants, under a group of this process's own, removed
    by `remove` (they are the kernel's, not the process's)."""

    libc: str
    group: str = field(default_factory=lambda: f"kbench{os.getpid()}")
    events: list[str] = field(default_factory=list)

    def add(self) -> list[str]:
        for n, function in enumerate(MEMMOVE_VARIANTS):
            name = f"{self.group}:m{n}={function} len=%dx:u64"
            done = subprocess.run(
                ["perf", "probe", "-q", "-x", self.libc, "--add", name],
                capture_output=True,
                text=True,
            )
            if done.returncode == 0:
                self.events.append(f"{self.group}:m{n}")
        return self.events

    def remove(self) -> None:
        if self.events:
            subprocess.run(["perf", "probe", "-q", "-d", f"{self.group}:*"], capture_output=True)
            self.events = []


def find_libc() -> str | None:
    return next((p for p in LIBC_CANDIDATES if Path(p).exists()), None)


@dataclass
class Traced:
    """A front started under a tracer: its output file and when the tracer started."""

    front: Front
    output: Path
    started: float  # time.monotonic() at the tracer's start

    def inner_pid(self) -> int | None:
        """The front itself: the tracer's child."""
        assert self.front.pid is not None
        pids = tree(self.front.pid)
        return pids[1] if len(pids) > 1 else None

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM to the front, not the tracer (perf dies on SIGTERM without writing
        what it counted); the tracer ends when its command does."""
        proc = self.front.process
        assert proc is not None
        inner = self.inner_pid()
        if inner is not None:
            os.kill(inner, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Tracer:
    """Wraps each front's command (`Bench.wrap`) and remembers the traced fronts."""

    def __init__(self, work: Path, kind: str, events: Sequence[str] = (), filters: str = ""):
        self.work, self.kind, self.events, self.filters = work, kind, list(events), filters
        self.traced: dict[str, Traced] = {}

    def __call__(self, front: Front, cmd: list[str]) -> list[str]:
        output = self.work / f"{front.name}.{self.kind}.out"
        output.unlink(missing_ok=True)
        self.traced[front.name] = Traced(front, output, time.monotonic())
        if self.kind == "stat":
            events = ",".join(self.events)
            head = ["perf", "stat", "-I", str(INTERVAL_MS), "-x,", "-o", str(output), "-e", events]
        elif self.kind == "record":
            head = ["perf", "record", "-q", "-k", "mono", "-o", str(output)]
            for event in self.events:
                head += ["-e", event]
                if event.split(":")[0].startswith("kbench") and self.filters:
                    head += ["--filter", self.filters]
        else:
            head = ["strace", "-f", "-c", "-o", str(output)]
        return [*head, "--", *cmd]


def stat_events() -> list[str]:
    names = ["task-clock", "context-switches", "page-faults", "raw_syscalls:sys_enter"]
    return names + [f"syscalls:sys_enter_{n}" for n in SYSCALLS]


def record_events() -> list[str]:
    return [f"syscalls:sys_exit_{n}" for n in READS + WRITES]


# --- reading what the tracers wrote ---------------------------------------------------


def stat_windows(path: Path, started: float, windows: dict[str, tuple[float, float]]) -> Row:
    """`perf stat -I` intervals summed per window: {window: {event: count}}."""
    sums: dict[str, dict[str, float]] = {name: {} for name in windows}
    for line in path.read_text().splitlines():
        parts = line.strip().split(",")
        if len(parts) < 4 or not re.match(r"^\d", parts[0]):
            continue
        try:
            at, value = started + float(parts[0]), float(parts[1])
        except ValueError:  # "<not counted>"
            continue
        event = parts[3]
        for name, (begin, end) in windows.items():
            # the interval ending at `at` began INTERVAL_MS before it
            if at > begin and at - INTERVAL_MS / 1000 < end:
                sums[name][event] = sums[name].get(event, 0.0) + value
    return sums


_SAMPLE = re.compile(r"^\s*(\d+\.\d+):\s+(\S+):\s+(.*)$")


def record_windows(
    path: Path, windows: dict[str, tuple[float, float]], probe_group: str
) -> dict[str, Row]:
    """Bytes through reads and writes, and memmove copies, per window, from `perf script`
    (the samples' time is CLOCK_MONOTONIC, `-k mono`, as time.monotonic())."""
    script = subprocess.run(
        ["perf", "script", "-i", str(path), "-F", "time,event,trace"],
        capture_output=True,
        text=True,
    )
    return tally(script.stdout, windows, probe_group)


def tally(text: str, windows: dict[str, tuple[float, float]], probe_group: str) -> dict[str, Row]:
    """`perf script -F time,event,trace` lines summed per window."""
    out: dict[str, Row] = {
        name: {"read_calls": 0, "read_bytes": 0, "write_calls": 0, "write_bytes": 0,
               "copy_calls": 0, "copy_bytes": 0}
        for name in windows
    }  # fmt: skip
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m is None:
            continue
        at, event, rest = float(m.group(1)), m.group(2), m.group(3)
        name = next((n for n, (b, e) in windows.items() if b <= at <= e), None)
        if name is None:
            continue
        row = out[name]
        if event.startswith(probe_group):
            size = re.search(r"len=(\d+)", rest)
            if size:
                row["copy_calls"] += 1
                row["copy_bytes"] += int(size.group(1))
            continue
        call = event.rsplit("sys_exit_", 1)[-1]
        ret = _signed(rest.strip().split()[-1])
        if ret < 0:  # EAGAIN and the like: nothing moved
            continue
        kind = "read" if call in READS else "write"
        row[f"{kind}_calls"] += 1
        row[f"{kind}_bytes"] += ret
    return out


def _signed(text: str) -> int:
    value = int(text, 16) if text.startswith("0x") else int(text)
    return value - (1 << 64) if value >= 1 << 63 else value


def strace_counts(path: Path) -> dict[str, int]:
    """`strace -c`'s summary: calls by system call."""
    counts: dict[str, int] = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5 and re.match(r"^[\d.]+$", parts[0]) and parts[-1] != "total":
            counts[parts[-1]] = int(parts[3])
    return counts


# --- the run --------------------------------------------------------------------------


def warm_up(front: Front, records: int) -> None:
    """Records produced and consumed through a newly started front, not measured."""
    if records:
        transfer(front, records, -1)


def transfer(front: Front, records: int, n: int) -> dict[str, tuple[float, float, int]]:
    """Produce then consume through `front`, idle around each: {window: (begin, end,
    bytes moved)}."""
    topic = f"bench-per-gb-{front.name}-{n if n >= 0 else 'warm'}"
    throughput.create_topic(front.bootstrap, topic)
    out: dict[str, tuple[float, float, int]] = {}
    for name in ("produce", "consume"):
        time.sleep(IDLE)
        begin = time.monotonic()
        if name == "produce":
            moved = throughput.produce(front.bootstrap, records, RECORD, topic)
        else:
            moved = throughput.consume(front.bootstrap, records, topic)
        out[name] = (begin, time.monotonic(), moved.bytes)
        time.sleep(IDLE)
    from bench.proxy.versus import drop_topic

    drop_topic(front.bootstrap, topic)
    return out


def per_mb(value: float, moved: int) -> float:
    return value / (moved / 1e6)


def run_perf(bench: Bench, arms: list[str], records: int, copy_from: int, warmup: int = 0) -> list[Row]:
    rows: list[Row] = []
    counting = Tracer(bench.work, "stat", stat_events())
    bench.wrap = counting
    windows: dict[str, dict[str, tuple[float, float, int]]] = {}
    for name in arms:
        front = bench.restart_front(name)
        if front is None:
            _say(name, f"skipped: {bench.skipped.get(name)}")
            continue
        warm_up(front, warmup)
        cpu = CpuWindow(front.pid).start()
        windows[name] = transfer(front, records, 0)
        cpu.stop()
        counting.traced[name].stop()
        bench.fronts.pop(name)
        spans = {w: (b, e) for w, (b, e, _) in windows[name].items()}
        counts = stat_windows(counting.traced[name].output, counting.traced[name].started, spans)
        for window, (begin, end, moved) in windows[name].items():
            row = _stat_row(name, window, moved, end - begin, counts[window])
            rows.append(row)
            _say(name, _brief(row))
    libc = find_libc()
    probes = Probes(libc) if libc else None
    try:
        events = record_events() + (probes.add() if probes else [])
        recording = Tracer(bench.work, "record", events, f"len >= {copy_from}")
        bench.wrap = recording
        for name in list(windows):
            front = bench.restart_front(name)
            if front is None:
                continue
            warm_up(front, warmup)
            spans_moved = transfer(front, records, 1)
            recording.traced[name].stop()
            bench.fronts.pop(name)
            spans = {w: (b, e) for w, (b, e, _) in spans_moved.items()}
            group = probes.group if probes else "-"
            found = record_windows(recording.traced[name].output, spans, group)
            recording.traced[name].output.unlink(missing_ok=True)
            for row in rows:
                if row["arm"] == name:
                    moved = spans_moved[row["window"]][2]
                    _bytes_row(row, found[row["window"]], moved, probes is not None)
                    _say(name, f"{row['window']}: " + _brief_bytes(row))
    finally:
        if probes:
            probes.remove()
    return rows


def _stat_row(arm: str, window: str, moved: int, seconds: float, counts: Row) -> Row:
    row: Row = {"kind": "per_gb", "tool": "perf", "arm": arm, "window": window}
    row.update(mb=round(moved / 1e6, 1), seconds=round(seconds, 2))
    row["mb_s"] = round(moved / 1e6 / seconds, 1) if seconds else None
    row["cpu_s_per_gb"] = round(counts.get("task-clock", 0.0) / 1e3 / (moved / 1e9), 3)
    row["syscalls_per_mb"] = round(per_mb(counts.get("raw_syscalls:sys_enter", 0), moved), 1)
    row["context_switches_per_mb"] = round(per_mb(counts.get("context-switches", 0), moved), 1)
    row["page_faults_per_mb"] = round(per_mb(counts.get("page-faults", 0), moved), 1)
    row["by_syscall_per_mb"] = {
        n: round(per_mb(counts.get(f"syscalls:sys_enter_{n}", 0), moved), 2)
        for n in SYSCALLS
        if counts.get(f"syscalls:sys_enter_{n}", 0)
    }
    return row


def _bytes_row(row: Row, found: Row, moved: int, copies: bool) -> None:
    for kind in ("read", "write"):
        calls, size = found[f"{kind}_calls"], found[f"{kind}_bytes"]
        row[f"{kind}_mean_bytes"] = round(size / calls) if calls else None
        row[f"{kind}_mb_per_mb"] = round(size / moved, 3)
    if copies:
        row["copy_mb_per_mb"] = round(found["copy_bytes"] / moved, 3)
        row["copies_per_mb"] = round(per_mb(found["copy_calls"], moved), 1)


def run_strace(bench: Bench, arms: list[str], records: int) -> list[Row]:
    rows: list[Row] = []
    tracer = Tracer(bench.work, "strace")
    bench.wrap = tracer
    for name in arms:
        front = bench.restart_front(name)
        if front is None:
            _say(name, f"skipped: {bench.skipped.get(name)}")
            continue
        spans = transfer(front, records, 0)
        tracer.traced[name].stop()
        bench.fronts.pop(name)
        moved = sum(m for _, _, m in spans.values())
        seconds = sum(e - b for b, e, _ in spans.values())
        counts = strace_counts(tracer.traced[name].output)
        row: Row = {"kind": "per_gb", "tool": "strace", "arm": name, "window": "both"}
        row.update(mb=round(moved / 1e6, 1), seconds=round(seconds, 2))
        row["syscalls_per_mb"] = round(per_mb(sum(counts.values()), moved), 1)
        row["by_syscall_per_mb"] = {n: round(per_mb(c, moved), 2) for n, c in counts.items()}
        rows.append(row)
        _say(name, _brief(row))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    arms = [a for a in args.arms.split(",") if a]
    tool = args.tool
    if tool == "auto":
        tool = "perf" if perf_works() else "strace"
    if tool == "strace" and shutil.which("strace") is None:
        print("neither perf nor strace can run here", file=sys.stderr)
        return 2
    pinning = None if args.no_pin else versus_arms.default_pinning()
    work = args.out / "per-gb-work"
    started = time.monotonic()
    # the broker alone first; each front starts under its tracer, one at a time
    with Bench(work, tuple(arms), pinning, args.kafka_version, start_fronts=False) as bench:
        if tool == "perf":
            rows = run_perf(bench, arms, args.records, args.copy_from, args.warmup)
        else:
            rows = run_strace(bench, arms, args.records)
    shutil.rmtree(work, ignore_errors=True)
    run: Row = {
        "kind": "run",
        "command": "python -m bench.proxy.per_gb " + " ".join(sys.argv[1:] if argv is None else argv),
        "tool": tool,
        "records": args.records,
        "warmup": args.warmup if tool == "perf" else 0,
        "pinning": pinning.describe() if pinning else "none",
        "kafka": args.kafka_version,
        "commit": _commit(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "took_seconds": round(time.monotonic() - started, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "per-gb.jsonl", "w") as f:
        for row in [run, *rows]:
            f.write(json.dumps(row) + "\n")
    text = markdown(run, rows)
    (args.out / "per-gb.md").write_text(text)
    print(text)
    return 0


def _commit() -> str:
    return subprocess.run(
        ["git", "-C", str(versus_arms.REPO), "log", "-1", "--format=%h"],
        capture_output=True,
        text=True,
    ).stdout.strip()


# --- the table ------------------------------------------------------------------------


def markdown(run: Row, rows: list[Row]) -> str:
    lines = [
        "# Per MB moved: system calls and copies, front by front",
        "",
        f"`{run['command']}` at commit {run['commit']} ({run['tool']};"
        f" {run['records']:,} records of 1 KiB each way after {run.get('warmup', 0):,} unmeasured;"
        f" {run['pinning']}; load average"
        f" {run['loadavg'][0]} at the end; {run['took_seconds'] / 60:.0f} minutes).",
        "",
        "Per MB of record values moved (10^6 bytes). *read/write MB*: bytes the front's"
        " reads and writes moved per MB (a relay that reads each byte once and writes it"
        " once: 1 and 1); *copied MB*: bytes libc's memmove/memcpy copied in the front,"
        " copies of the `--copy-from` size or more.",
        "",
    ]
    shown = sorted(
        {n for r in rows for n in r.get("by_syscall_per_mb", {})},
        key=lambda n: -max(r.get("by_syscall_per_mb", {}).get(n, 0) for r in rows),
    )[:10]
    heads = ["arm", "window", "MB/s", "CPU s/GB", "syscalls/MB", *shown]
    heads += ["ctx sw/MB", "page faults/MB", "mean read B", "mean write B", "read MB"]
    heads += ["write MB", "copied MB"]
    heads.append("copies/MB")
    body = []
    for r in rows:
        line = [r["arm"], r["window"], fmt(r.get("mb_s")), fmt(r.get("cpu_s_per_gb"), 2)]
        line.append(fmt(r.get("syscalls_per_mb")))
        line += [fmt(r.get("by_syscall_per_mb", {}).get(n), 1) for n in shown]
        line.append(fmt(r.get("context_switches_per_mb")))
        line.append(fmt(r.get("page_faults_per_mb")))
        line += [fmt(r.get("read_mean_bytes"), 0), fmt(r.get("write_mean_bytes"), 0)]
        line += [fmt(r.get("read_mb_per_mb"), 2), fmt(r.get("write_mb_per_mb"), 2)]
        line += [fmt(r.get("copy_mb_per_mb"), 2), fmt(r.get("copies_per_mb"), 1)]
        body.append(line)
    return "\n".join(lines + table(heads, body))


def _brief(row: Row) -> str:
    top = sorted(row.get("by_syscall_per_mb", {}).items(), key=lambda kv: -kv[1])[:4]
    calls = " ".join(f"{n}={v}" for n, v in top)
    return (
        f"{row['window']}: {row['mb']} MB, cpu {row.get('cpu_s_per_gb')} s/GB,"
        f" syscalls {row['syscalls_per_mb']}/MB ({calls})"
    )


def _brief_bytes(row: Row) -> str:
    return (
        f"read {row.get('read_mean_bytes')} B mean, write {row.get('write_mean_bytes')} B mean,"
        f" copied {row.get('copy_mb_per_mb')} MB/MB"
    )


def _say(arm: str, text: str) -> None:
    print(f"[{arm}] {text}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
