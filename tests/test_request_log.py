"""proxy.request_log: lines as JSON, stdout writes that keep lines whole, rotation; the
writer thread's flush deadline, reopening, bound and failures; then the same against a
live proxy with its real hooks, while a well-behaved client keeps round-tripping."""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from proxy import request_log
from proxy.metrics import Metrics
from proxy.request_log import PIPE_BUF, LineSink, RequestLog, render


def test_render_is_compact_json_and_falls_back_for_what_orjson_refuses() -> None:
    fields = {"topic": "café", "id": uuid.UUID(int=1), "n": 2**70, "view": memoryview(b"x")}
    line = render(fields)
    decoded = json.loads(line)
    assert decoded["topic"] == "café" and decoded["n"] == 2**70
    assert decoded["id"] == "00000000-0000-0000-0000-000000000001"
    assert json.loads(render({"lone": "\ud800"}))["lone"] == "\ud800"  # escaped, not lost


def test_line_is_fields_then_event_then_timestamp(tmp_path: Path) -> None:
    log = RequestLog(LineSink(str(tmp_path / "r.log")))
    log.write("request", {"api": "Metadata", "errors": []})
    log.warning("kip1313_violation", {"api": "Produce"})
    log.close()
    first, second = (json.loads(x) for x in (tmp_path / "r.log").read_text().splitlines())
    assert list(first) == ["api", "errors", "event", "ts"] and first["event"] == "request"
    assert first["ts"].endswith("Z") and len(first["ts"]) == len("2026-11-22T09:00:00.000000Z")
    assert second["level"] == "warning" and second["event"] == "kip1313_violation"


def test_stdout_gets_whole_lines_in_writes_of_at_most_pipe_buf(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    writes: list[bytes] = []
    monkeypatch.setattr(request_log, "_write_all", lambda _fd, data: writes.append(data))
    sink = LineSink("-")
    lines = [json.dumps({"n": n, "pad": "é" * (n * 37 % 900)}, ensure_ascii=False).encode()
             for n in range(300)]
    lines.append(b'{"big":"' + b"y" * 5000 + b'"}')  # longer than PIPE_BUF: a write of its own
    for line in lines:
        sink.msg(line)
    sink.close()
    assert all(w.endswith(b"\n") for w in writes)
    assert all(len(w) <= PIPE_BUF or w.count(b"\n") == 1 for w in writes)
    assert b"".join(writes).splitlines() == lines


def test_rotation_by_size_keeps_backups(tmp_path: Path) -> None:
    path = tmp_path / "requests.log"
    sink = LineSink(str(path), max_bytes=4000, backups=2)
    for n in range(200):
        sink.msg(json.dumps({"n": n, "pad": "x" * 80}).encode())
        if n % 20 == 19:
            sink.flush()
    sink.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["requests.log", "requests.log.1", "requests.log.2"]
    assert all(os.path.getsize(tmp_path / f) <= 4000 for f in files)
    numbers = [json.loads(x)["n"] for f in ("requests.log.2", "requests.log.1", "requests.log")
               for x in (tmp_path / f).read_text().splitlines()]
    assert numbers == sorted(numbers) and numbers[-1] == 199


# --- the writer thread: deadlines, reopening, failures, the bound ----------------------


def file_lines(path: Path) -> list[dict[str, Any]]:
    """The whole lines in `path`, read through a handle of our own (no flush asked)."""
    if not path.exists():
        return []
    text = path.read_bytes()
    assert not text or text.endswith(b"\n"), "a line was written in part"
    return [json.loads(line) for line in text.splitlines()]


def eventually_true(check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return check()


def test_lines_reach_the_file_within_the_interval_with_no_line_after_them(tmp_path: Path) -> None:
    path = tmp_path / "r.log"
    sink = LineSink(str(path), flush_interval=0.2)
    try:
        for n in range(3):
            sink.msg(json.dumps({"n": n}).encode())
        queued = time.monotonic()
        assert eventually_true(lambda: len(file_lines(path)) == 3, timeout=2.0)
        assert time.monotonic() - queued < 0.2 + 0.3
    finally:
        sink.close()


def test_reopen_puts_earlier_lines_in_the_renamed_file_and_later_ones_at_the_path(
    tmp_path: Path,
) -> None:
    path = tmp_path / "r.log"
    sink = LineSink(str(path), flush_interval=30)  # only the markers make it write
    for n in range(5):
        sink.msg(json.dumps({"n": n}).encode())
    path.rename(tmp_path / "r.log.1")  # what logrotate does before its postrotate
    sink.reopen()
    for n in range(5, 8):
        sink.msg(json.dumps({"n": n}).encode())
    sink.close()
    assert [x["n"] for x in file_lines(tmp_path / "r.log.1")] == [0, 1, 2, 3, 4]
    assert [x["n"] for x in file_lines(path)] == [5, 6, 7]


def test_close_writes_every_queued_line_and_msg_never_blocks_on_a_stuck_reader(
    tmp_path: Path,
) -> None:
    """A FIFO nobody reads stands for a disk that hangs: `msg` still returns at once,
    lines beyond the bound are dropped and counted, and once the reader drains it
    the episode ends with one report."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    metrics = Metrics()
    sink = LineSink(str(fifo), flush_interval=0.05, max_queued_bytes=256 * 1024, metrics=metrics)
    line = json.dumps({"pad": "x" * 1000}).encode()
    with capture_logs() as logs:
        slowest = 0.0
        for _ in range(2000):  # 2 MB: the pipe holds 64 KiB, the queue 256 KiB
            started = time.perf_counter()
            sink.msg(line)
            slowest = max(slowest, time.perf_counter() - started)
        assert slowest < 0.05
        assert eventually_true(lambda: dropped(metrics, "queue_full") > 0, timeout=3)
        received = bytearray()

        def drained() -> bool:
            with contextlib.suppress(BlockingIOError):
                while chunk := os.read(reader, 1 << 20):
                    received.extend(chunk)
            return not sink_waiting(sink) and received.endswith(b"\n")

        assert eventually_true(drained, timeout=5)
        sink.msg(b'{"last":true}')  # room again: the episode ends
        assert eventually_true(lambda: drained() and received.endswith(b'{"last":true}\n'), 5)
        sink.close()
    os.close(reader)
    lost = dropped(metrics, "queue_full")
    written = received.count(b"\n")
    assert written + lost == 2001 and 0 < lost < 2000
    events = [entry["event"] for entry in logs]
    assert events == [
        "request log: writing falls behind; dropping lines",
        "request log: writing caught up",
    ]
    assert logs[1]["dropped_lines"] == lost


def sink_waiting(sink: LineSink) -> int:
    return sink._queued_bytes - sink._done_bytes


def dropped(metrics: Metrics, reason: str) -> float:
    return sample(metrics, "kafkalens_request_log_dropped_lines_total", reason=reason)


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    return sum(
        s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for s in family.samples
        if s.name == name and labels.items() <= s.labels.items()
    )
