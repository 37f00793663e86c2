"""The request log's cost on the event loop, per line: what a hook pays to log a request.

    PYTHONPATH=. .venv/bin/python -m bench.proxy.request_log_cost          # this checkout
    PYTHONPATH=/path/to/other/checkout python bench/proxy/request_log_cost.py   # to compare

Times `RequestLog.write` (render with orjson + hand to the sink) and `LineSink.msg`
alone (a pre-rendered line) for a typical Metadata request line, best of 5 runs of
200,000 lines into a file in a temporary directory: the calling thread's time (what
the event loop pays), and the time until every line is in the file (`close`
returned), whichever thread did the writing, and the process's CPU time. The queue bound is raised so that no
line is dropped at this rate (millions of lines a second, far beyond a proxy's).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from proxy.observe.request_log import LineSink, RequestLog, render

LINES = 200_000
RUNS = 5


def fields() -> dict[str, object]:
    return {
        "conn": "4242-17", "listener": "plaintext", "client_address": "10.1.2.3:53124",
        "api_key": 3, "api": "Metadata", "api_version": 12, "correlation_id": 1234,
        "client_id": "orders-service", "client_instance_id": None,
        "client_software_name": "apache-kafka-java", "client_software_version": "3.7.0",
        "principal": None, "request_bytes": 61, "latency_ms": 0.412, "response_bytes": 312,
        "topics": ["orders"], "errors": [],
    }  # fmt: skip


def best(run: Callable[[Path], tuple[float, float]]) -> tuple[float, float, float]:
    """Best calling-thread time, best time until written, best CPU time of the process
    (both threads: less disturbed than wall time by other processes on the machine)."""
    times = []
    for _ in range(RUNS):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "requests.log"
            cpu = time.process_time()
            caller, total = run(path)
            times.append((caller, total, time.process_time() - cpu))
            assert path.read_bytes().count(b"\n") == LINES, "lines were lost"
    return min(t[0] for t in times), min(t[1] for t in times), min(t[2] for t in times)


def sink(path: Path) -> LineSink:
    try:
        return LineSink(str(path), max_queued_bytes=1 << 30)  # type: ignore[call-arg,unused-ignore]
    except TypeError:  # a version without a queue
        return LineSink(str(path))


def time_write(path: Path) -> tuple[float, float]:
    log = RequestLog(sink(path))
    started = time.perf_counter()
    for _ in range(LINES):
        log.write("request", fields())
    caller = time.perf_counter() - started
    log.close()
    return caller, time.perf_counter() - started


def time_msg(path: Path) -> tuple[float, float]:
    out = sink(path)
    line = render(fields())
    started = time.perf_counter()
    for _ in range(LINES):
        out.msg(line)
    caller = time.perf_counter() - started
    out.close()
    return caller, time.perf_counter() - started


def time_fields(_: Path) -> float:
    started = time.perf_counter()
    for _ in range(LINES):
        fields()
    return time.perf_counter() - started


def main() -> None:
    baseline = min(time_fields(Path()) for _ in range(RUNS))  # the dict, which a hook builds anyway
    for name, run in (
        ("RequestLog.write (render + sink)", time_write),
        ("LineSink.msg alone", time_msg),
    ):
        extra = baseline if run is time_write else 0.0
        caller, total, cpu = best(run)
        print(
            f"{name:34} calling thread {(caller - extra) / LINES * 1e6:.3f} us/line,"
            f" until in the file {(total - extra) / LINES * 1e6:.3f} us/line,"
            f" CPU {(cpu - extra) / LINES * 1e6:.3f} us/line"
        )


if __name__ == "__main__":
    main()
