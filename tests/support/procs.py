"""CPU time and memory of a process and its live descendants, read from /proc."""

from __future__ import annotations

import os
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
PROC = Path("/proc")


def tree(pid: int) -> list[int]:
    """`pid` and every live descendant (worker processes included)."""
    found = [pid]
    for parent in found:
        found.extend(_children(parent))
    return [p for p in found if (PROC / str(p)).exists()]


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = list((PROC / str(pid) / "task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            out.extend(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
    return out


def user_system_seconds(pid: int) -> tuple[float, float]:
    """utime and stime of the process tree, in seconds."""
    user = system = 0.0
    for p in tree(pid):
        u, s = _cpu_one(p)
        user, system = user + u, system + s
    return user, system


def _cpu_one(pid: int) -> tuple[float, float]:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return 0.0, 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    # After "pid (comm) ": state is field 3, utime field 14, stime field 15.
    return int(fields[11]) / TICKS, int(fields[12]) / TICKS


def memory_kib(pid: int, key: str) -> int:
    """A /proc/PID/status value (VmRSS, VmHWM) summed over the process tree, in KiB."""
    return sum(_status_kib(p, key) for p in tree(pid))


def pss_kib(pid: int) -> int:
    """Proportional set size summed over the process tree, in KiB: each page shared by
    n processes (the interpreter and libraries a parent and its forked workers share)
    counts 1/n in each, where summed VmRSS counts it n times."""
    total = 0
    for p in tree(pid):
        try:
            lines = (PROC / str(p) / "smaps_rollup").read_text().splitlines()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in lines if line.startswith("Pss:")), 0)
    return total


def _status_kib(pid: int, key: str) -> int:
    try:
        lines = (PROC / str(pid) / "status").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def mb(kib: int | None) -> float | None:
    """KiB (as /proc reports) to MB (10^6 bytes), one decimal."""
    return None if kib is None else round(kib * 1024 / 1e6, 1)


class CpuWindow:
    """CPU seconds a process tree used between `start()` and `stop()` (None: no process);
    `system` is the kernel's part of `used` (system calls: the sockets, epoll)."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self._before = (0.0, 0.0)
        self.used: float | None = None
        self.system: float | None = None

    def start(self) -> CpuWindow:
        if self.pid is not None:
            self._before = user_system_seconds(self.pid)
        return self

    def stop(self) -> float | None:
        if self.pid is not None:
            user, system = user_system_seconds(self.pid)
            self.system = system - self._before[1]
            self.used = user - self._before[0] + self.system
        return self.used
