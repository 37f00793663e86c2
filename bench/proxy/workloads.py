"""Every workload against one running arm, in order; one result row per measurement."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from support import wire
from support.procs import CpuWindow, mb, memory_kib

from bench.proxy import conns, latency, metadata, throughput
from bench.proxy.arms import RunningArm
from bench.proxy.profiling import Profiler
from bench.proxy.settings import Sizes

Row = dict[str, Any]


def run_arm(
    arm: RunningArm, sizes: Sizes, profiler: Profiler, progress: Callable[[Row], None]
) -> list[Row]:
    steps: list[Callable[[RunningArm, Sizes, Profiler], list[Row]]] = [
        _throughput,
        _small,
        _busy,
        _idle,
        _metadata,
    ]
    rows: list[Row] = []
    for step in steps:
        for row in step(arm, sizes, profiler):
            rows.append({"kind": "workload", "arm": arm.name, **row})
            progress(row)
    return rows


def arm_row(arm: RunningArm, started: float) -> Row:
    """Whole-arm figures, read before the arm stops."""
    pid = arm.pid
    return {
        "kind": "arm",
        "arm": arm.name,
        "bootstrap": arm.bootstrap,
        "notes": arm.notes,
        "seconds": round(time.monotonic() - started, 1),
        "peak_rss_mb": mb(memory_kib(pid, "VmHWM")) if pid else None,
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
    }


def _throughput(arm: RunningArm, sizes: Sizes, profiler: Profiler) -> list[Row]:
    """Rounds of produce then consume, each round to a fresh topic."""
    moved: dict[str, list[tuple[throughput.Transfer, float | None]]] = {
        "produce": [],
        "consume": [],
    }
    for n in range(sizes.rounds):
        topic = throughput.TOPIC if n == 0 else f"{throughput.TOPIC}-{n + 1}"
        throughput.create_topic(arm.bootstrap, topic)
        runs: dict[str, Callable[[], throughput.Transfer]] = {
            "produce": partial(
                throughput.produce, arm.bootstrap, sizes.records, sizes.record_bytes, topic
            ),
            "consume": partial(throughput.consume, arm.bootstrap, sizes.records, topic),
        }
        for name, run in runs.items():
            with profiler.window(arm.name, arm.pid, name):
                window = CpuWindow(arm.pid).start()
                result = run()
                moved[name].append((result, window.stop()))
    return [_transfer_row(name, rounds) for name, rounds in moved.items()]


def _transfer_row(name: str, rounds: list[tuple[throughput.Transfer, float | None]]) -> Row:
    best = max((t for t, _ in rounds), key=lambda t: t.mb_s)
    cpus = [c for _, c in rounds]
    return {
        "workload": name,
        "rounds": len(rounds),
        "records": best.records,
        "bytes": sum(t.bytes for t, _ in rounds),
        "seconds": round(best.seconds, 3),
        "mb_s": round(best.mb_s, 1),
        "mb_s_rounds": [round(t.mb_s, 1) for t, _ in rounds],
        "cpu_s": None if None in cpus else round(sum(c or 0.0 for c in cpus), 2),
    }


def _small(arm: RunningArm, sizes: Sizes, profiler: Profiler) -> list[Row]:
    rows = []
    with profiler.window(arm.name, arm.pid, "small"):
        for template in (wire.api_versions(), wire.metadata([throughput.TOPIC])):
            result = latency.sequential(
                arm.host, arm.port, template, sizes.requests, sizes.warmup, arm.pid, _base(arm)
            )
            rows.append({"workload": "small", **result})
    return rows


def _base(arm: RunningArm) -> int | None:
    """The arm's broker port, to alternate with (None for `direct`: it is the broker)."""
    return arm.broker.port if arm.pid is not None else None


def _busy(arm: RunningArm, sizes: Sizes, profiler: Profiler) -> list[Row]:
    with profiler.window(arm.name, arm.pid, "busy"):
        result = conns.busy(arm.host, arm.port, sizes.busy_connections, sizes.busy_seconds, arm.pid)
    return [{"workload": "busy", **result}]


def _idle(arm: RunningArm, sizes: Sizes, profiler: Profiler) -> list[Row]:
    return [{"workload": "idle", **conns.idle(arm.host, arm.port, sizes.idle_connections, arm.pid)}]


def _metadata(arm: RunningArm, sizes: Sizes, profiler: Profiler) -> list[Row]:
    shape = (sizes.partitions, sizes.metadata_requests, sizes.metadata_warmup)
    result = metadata.all_topics(arm.host, arm.port, shape, arm.pid, _base(arm))
    return [{"workload": "metadata-all", **result}]
