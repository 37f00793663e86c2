"""Optional py-spy sampling of the kafkalens arms during chosen workload windows.

`--profile DIR` writes DIR/<arm>-<workload>.txt (py-spy's collapsed stacks) and
DIR/<arm>-<workload>.top.txt (functions by own and total share of the samples).
py-spy is a development tool, not a dependency: `pip install py-spy`.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_NOT_CODE = ("process ", "thread (")  # py-spy's per-process / per-thread root frames
PROFILED_WORKLOADS = frozenset({"produce", "consume", "small", "busy"})


class Profiler:
    def __init__(self, out: Path | None, rate: int = 250, native: bool = False) -> None:
        self.out = out
        self.rate = rate
        self.native = native
        self.binary = _py_spy() if out is not None else None
        if out is not None and self.binary is None:
            raise SystemExit("--profile needs py-spy: pip install py-spy")

    @contextmanager
    def window(self, arm: str, pid: int | None, workload: str) -> Iterator[None]:
        if self.out is None or pid is None or not arm.startswith("kafkalens"):
            yield
            return
        if workload not in PROFILED_WORKLOADS:
            yield
            return
        raw = self.out / f"{arm}-{workload}.txt"
        proc = self._start(pid, raw)
        try:
            yield
        finally:
            _stop(proc)
            if raw.exists():
                (self.out / f"{arm}-{workload}.top.txt").write_text(top_report(raw))

    def _start(self, pid: int, raw: Path) -> subprocess.Popen[bytes]:
        assert self.binary is not None and self.out is not None
        self.out.mkdir(parents=True, exist_ok=True)
        cmd = [self.binary, "record", "--pid", str(pid), "--subprocesses", "--format", "raw"]
        cmd += ["--rate", str(self.rate), "--output", str(raw)]
        if self.native:
            cmd.append("--native")
        log = open(raw.with_suffix(".log"), "wb")  # noqa: SIM115 - handed to the child
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        time.sleep(0.5)  # attached before the workload starts
        return proc


def _py_spy() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def top_report(raw: Path, limit: int = 30) -> str:
    """Own and total shares per function from py-spy's collapsed stacks."""
    own, total, samples = collapse(raw.read_text().splitlines())
    lines = [f"{samples} samples (CPU-active only; idle waits excluded)", ""]
    lines.append("own%   total%  function")
    for name, count in own.most_common(limit):
        lines.append(f"{_pct(count, samples)}  {_pct(total[name], samples)}  {name}")
    lines += ["", "own share by file (<string>: the codec's generated decoders):", "own%    file"]
    for name, count in by_file(own).most_common(limit):
        lines.append(f"{_pct(count, samples)}  {name}")
    lines += ["", "by total (inclusive) share:", "total%  function"]
    for name, count in total.most_common(limit):
        lines.append(f"{_pct(count, samples)}  {name}")
    return "\n".join(lines) + "\n"


def by_file(own: Counter[str]) -> Counter[str]:
    files: Counter[str] = Counter()
    for name, count in own.items():
        files[name.rpartition(" (")[2].rstrip(")") or name] += count
    return files


def collapse(lines: list[str]) -> tuple[Counter[str], Counter[str], int]:
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in lines:
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_short(f) for f in stack.split(";") if not f.startswith(_NOT_CODE)]
        if not frames:
            continue
        samples += count
        own[frames[-1]] += count
        for name in set(frames):
            total[name] += count
    return own, total, samples


def _short(frame: str) -> str:
    """'func (path/to/file.py:12)' -> 'func (file.py)': lines merged, paths cut."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({path.rsplit('/', 1)[-1]})" if path else name


def _pct(count: int, samples: int) -> str:
    return f"{100 * count / samples:5.1f}%" if samples else "  n/a"
