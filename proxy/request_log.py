"""The request log: one JSON line per request, written through structlog.

Lines go to stdout or to a file rotated by size (requests.log -> requests.log.1 ...).
Writes are buffered and flushed at least every `FLUSH_INTERVAL` seconds, so a busy
proxy does one write call per many lines and `tail -f` still sees lines promptly.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections.abc import Iterable, MutableMapping
from typing import IO, Any

import structlog

FLUSH_INTERVAL = 0.2
BUFFER_BYTES = 64 * 1024
PIPE_BUF = 4096


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)


def _dumps(event: dict[str, Any], **_: Any) -> str:
    # One encoder for all lines: json.dumps with options builds a new one per call.
    return _ENCODER.encode(event)


class _Timestamp:
    """ISO-8601 UTC with microseconds, formatting the date part once per second."""

    def __init__(self) -> None:
        self._second = -1
        self._prefix = ""

    def __call__(
        self, logger: Any, method: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        now = time.time()
        second = int(now)
        if second != self._second:
            self._second = second
            self._prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        event["ts"] = f"{self._prefix}.{int((now - second) * 1_000_000):06d}Z"
        return event


def _write_all(data: bytes) -> None:
    fd = sys.stdout.fileno()
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class LineSink:
    """Where rendered lines go: buffered, size-rotated when it is a file."""

    def __init__(self, path: str, max_bytes: int = 0, backups: int = 0) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self._stream: IO[str] = sys.stdout if path == "-" else self._open()
        if path == "-":
            sys.stdout.flush()  # our writes bypass its buffer
        self._pending: list[str] = []
        self._pending_bytes = 0
        self._size = 0 if path == "-" else self._stream.tell()
        self._last_flush = time.monotonic()

    def _open(self) -> IO[str]:
        directory = os.path.dirname(self.path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        return open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open

    def msg(self, line: str) -> None:
        self._pending.append(line)
        self._pending_bytes += len(line) + 1
        if self._pending_bytes >= BUFFER_BYTES or time.monotonic() - self._last_flush >= FLUSH_INTERVAL:
            self.flush()

    info = warning = error = msg

    def flush(self) -> None:
        self._last_flush = time.monotonic()
        if not self._pending:
            return
        if self.path == "-":
            self._write_stdout()
            return
        data = "\n".join(self._pending) + "\n"
        self._pending.clear()
        self._pending_bytes = 0
        if self.max_bytes and self.path != "-" and self._size + len(data) > self.max_bytes and self._size:
            self._rotate()
        self._stream.write(data)
        self._stream.flush()
        self._size += len(data.encode("utf-8")) if not data.isascii() else len(data)

    def _write_stdout(self) -> None:
        """Whole lines in writes of at most PIPE_BUF bytes: such writes to a pipe are
        atomic, so worker processes sharing standard output never split a line."""
        chunk: list[bytes] = []
        size = 0
        for line in self._pending:
            raw = line.encode("utf-8") + b"\n"
            if chunk and size + len(raw) > PIPE_BUF:
                _write_all(b"".join(chunk))
                chunk, size = [], 0
            chunk.append(raw)
            size += len(raw)
        if chunk:
            _write_all(b"".join(chunk))
        self._pending.clear()
        self._pending_bytes = 0

    def _rotate(self) -> None:
        self._stream.close()
        for index in range(self.backups - 1, 0, -1):
            older = f"{self.path}.{index}"
            if os.path.exists(older):
                os.replace(older, f"{self.path}.{index + 1}")
        if self.backups > 0:
            os.replace(self.path, f"{self.path}.1")
        else:
            os.remove(self.path)
        self._stream = self._open()
        self._size = 0

    def close(self) -> None:
        self.flush()
        if self._stream is not sys.stdout:
            self._stream.close()


class RequestLog:
    """Decides which lines to write (sampling, api filter, errors only) and writes them."""

    def __init__(
        self,
        sink: LineSink,
        sample_rate: float = 1.0,
        apis: Iterable[str | int] = (),
        errors_only: bool = False,
    ) -> None:
        self.sink = sink
        self.sample_rate = sample_rate
        self.apis = frozenset(str(a) for a in apis)
        self.errors_only = errors_only
        self._random = random.Random()
        self._log = structlog.wrap_logger(
            sink,
            processors=[
                _Timestamp(),
                structlog.processors.JSONRenderer(serializer=_dumps),
            ],
            wrapper_class=structlog.BoundLogger,
            cache_logger_on_first_use=True,
        )

    def wants(self, api: str, api_key: int, has_errors: bool) -> bool:
        if self.apis and api not in self.apis and str(api_key) not in self.apis:
            return False
        if has_errors:
            return True
        if self.errors_only:
            return False
        return self.sample_rate >= 1.0 or self._random.random() < self.sample_rate

    def write(self, event: str, fields: dict[str, Any]) -> None:
        self._log.info(event, **fields)

    def warning(self, event: str, fields: dict[str, Any]) -> None:
        self._log.warning(event, level="warning", **fields)

    def flush(self) -> None:
        self.sink.flush()

    def close(self) -> None:
        self.sink.close()
