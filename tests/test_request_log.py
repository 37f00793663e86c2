"""proxy.request_log: lines as JSON, stdout writes that keep lines whole, rotation."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from proxy import request_log
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
    monkeypatch.setattr(request_log, "_write_all", writes.append)
    sink = LineSink("-")
    lines = [json.dumps({"n": n, "pad": "é" * (n * 37 % 900)}, ensure_ascii=False).encode()
             for n in range(300)]
    lines.append(b'{"big":"' + b"y" * 5000 + b'"}')  # longer than PIPE_BUF: a write of its own
    for line in lines:
        sink.msg(line)
    sink.flush()
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
