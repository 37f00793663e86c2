"""Workload (b): small requests one at a time on one connection (ApiVersions, Metadata).

With a `baseline` port (the arm's broker itself) the timed requests alternate in
blocks between the front and the broker, so the front's added latency is measured
against the same broker over the same moments: background load drifts out of it.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from support import wire
from support.procs import CpuWindow

from bench.proxy.stats import summarize_ns

BLOCK = 50  # requests per turn when alternating with the baseline


def sequential(
    host: str,
    port: int,
    template: wire.Template,
    count: int,
    warmup: int,
    pid: int | None,
    baseline: int | None = None,
) -> dict[str, Any]:
    """`warmup` unmeasured round trips, then `count` timed ones; CPU of `pid` over those."""
    front = wire.connect(host, port)
    direct = wire.connect(host, baseline) if baseline is not None else None
    try:
        for sock in filter(None, (front, direct)):
            for n in range(warmup):
                wire.roundtrip(sock, template.frame(n))
        return _measure(front, direct, template, count, pid)
    finally:
        front.close()
        if direct is not None:
            direct.close()


def _measure(
    front: socket.socket,
    direct: socket.socket | None,
    template: wire.Template,
    count: int,
    pid: int | None,
) -> dict[str, Any]:
    frames = [template.frame(n) for n in range(count)]
    samples: list[int] = []
    base: list[int] = []
    size, seconds = 0, 0.0
    window = CpuWindow(pid).start()
    for first in range(0, count, BLOCK):
        block = frames[first : first + BLOCK]
        size, took = _timed(front, block, samples)
        seconds += took
        if direct is not None:
            _timed(direct, block, base)
    cpu = window.stop()
    result = {"api": template.name, "response_bytes": size, "seconds": round(seconds, 3)}
    result.update(summarize_ns(samples))
    result["requests_per_s"] = round(count / seconds, 1) if seconds else None
    result["cpu_s"] = None if cpu is None else round(cpu, 2)
    result["cpu_system_s"] = None if window.system is None else round(window.system, 2)
    if direct is not None:
        result["baseline"] = summarize_ns(base)
    return result


def _timed(sock: socket.socket, frames: list[bytearray], out: list[int]) -> tuple[int, float]:
    """Round trips of `frames`, one at a time, appended to `out` (ns); (size, seconds)."""
    clock = time.perf_counter_ns
    size = 0
    start = clock()
    for frame in frames:
        before = clock()
        size = wire.roundtrip(sock, frame)
        out.append(clock() - before)
    return size, (clock() - start) / 1e9
