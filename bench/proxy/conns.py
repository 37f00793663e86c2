"""Workloads (c) many busy connections and (e) many idle connections."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import uvloop
from support import wire
from support.procs import CpuWindow, mb, memory_kib, pss_kib

from bench.proxy.aclient import close_clients, open_clients
from bench.proxy.stats import summarize_ns


def busy(host: str, port: int, clients: int, seconds: float, pid: int | None) -> dict[str, Any]:
    """`clients` connections, each keeping one small request in flight for `seconds`."""
    return uvloop.run(_busy(host, port, clients, seconds, pid))


async def _busy(
    host: str, port: int, count: int, seconds: float, pid: int | None
) -> dict[str, Any]:
    frames = [bytes(wire.api_versions().data), bytes(wire.metadata([]).data)]
    clients = await open_clients(host, port, count, frames)
    try:
        # One round trip each first: a proxy's own connection to the broker is up too.
        await asyncio.gather(*(c.run(0.0) for c in clients))
        for client in clients:
            client.samples.clear()
        window = CpuWindow(pid).start()
        start = time.perf_counter()
        await asyncio.gather(*(c.run(start + seconds) for c in clients))
        elapsed = time.perf_counter() - start
        cpu = window.stop()
    finally:
        await close_clients(clients)
    samples = [s for c in clients for s in c.samples]
    result: dict[str, Any] = {"connections": count, "seconds": round(elapsed, 3)}
    result.update(summarize_ns(samples))
    result["requests_per_s"] = round(len(samples) / elapsed, 1)
    result["cpu_s"] = None if cpu is None else round(cpu, 2)
    return result


def idle(host: str, port: int, clients: int, pid: int | None) -> dict[str, Any]:
    """RSS of `pid`'s tree with `clients` open connections, each after one ApiVersions."""
    return uvloop.run(_idle(host, port, clients, pid))


async def _idle(host: str, port: int, count: int, pid: int | None) -> dict[str, Any]:
    before = memory_kib(pid, "VmRSS") if pid else None
    frames = [bytes(wire.api_versions().data)]
    clients = await open_clients(host, port, count, frames)
    try:
        await asyncio.gather(*(c.run(0.0) for c in clients))
        await asyncio.sleep(1.0)  # let the proxy settle (buffers released, GC)
        during = memory_kib(pid, "VmRSS") if pid else None
        shared = pss_kib(pid) if pid else None
    finally:
        await close_clients(clients)
    result: dict[str, Any] = {"connections": count, "rss_before_mb": mb(before)}
    result["rss_open_mb"] = mb(during)
    result["pss_open_mb"] = mb(shared)
    if before is not None and during is not None:
        result["kb_per_connection"] = round((during - before) * 1.024 / count, 1)
    return result
