"""The request log: one JSON line per request.

Lines go to stdout or to a file, rotated by size (requests.log -> requests.log.1 ...)
and reopened at the path on SIGHUP (`reopen`), for logrotate.

The event loop only renders a line and appends it to a queue; a writer thread of the
sink writes the queue out every `flush_interval` seconds (sooner once `BUFFER_BYTES`
are waiting), so a line is in the file within about flush_interval even when traffic
stops, and a slow or full disk never blocks forwarding. The queue is bounded
(`max_queued_bytes`): a line beyond it is dropped and counted, as are the lines of a
write that failed (ENOSPC, EIO...); a run of failures is reported once when it starts
and once when it ends, with how many lines it cost. `close` writes what is queued.

A line is rendered by orjson straight from the fields dict: this runs once per
request on the event loop, and structlog's JSON renderer (the standard library's
encoder) takes several times as long a line (bench.proxy.choices, "a request line
rendered"). structlog still renders the proxy's own (operational) log.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import io
import json
import os
import random
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import orjson
import structlog

if TYPE_CHECKING:
    from proxy.metrics import Metrics

log = structlog.get_logger("kafkalens.request_log")

FLUSH_INTERVAL = 0.5
MAX_QUEUED_BYTES = 16 * 1024 * 1024
# Waiting lines that wake the writer before its interval is up (or a quarter of the
# queue's bound, if less). Each wake-up hands the GIL over, so the writer wakes for a
# batch, not a line (64 KiB against 1 MiB: bench/README.md, "The request log's cost per
# line").
BUFFER_BYTES = 1024 * 1024
WRITE_LINES = 4096  # the most one write call carries (rotation is checked between writes)
PIPE_BUF = 4096
# Writes must succeed this long after the last failure for a run of failures to end: on
# a nearly full disk a failed write, cut back, frees room for the next few.
RECOVERED_AFTER = 1.0
# close() waits this long for the writer to finish; a disk that hangs longer must not
# keep a stopping proxy alive.
CLOSE_TIMEOUT = 10.0


_OPTIONS = orjson.OPT_NON_STR_KEYS
_OPTIONS_NEWLINE = _OPTIONS | orjson.OPT_APPEND_NEWLINE
# For what orjson refuses (a lone surrogate, an int beyond 64 bits): slower, never fails.
_FALLBACK = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, default=str)


def render(fields: dict[str, Any]) -> bytes:
    """One line of JSON, without its newline; objects JSON lacks become their str()."""
    try:
        # orjson (3.13) hands back its whole output buffer, 4-8 KiB for a 400-byte line,
        # and a line waits in the queue up to flush_interval: a copy of its length keeps
        # the queue's memory (and max_queued_bytes) at the lines' size. Taking off a
        # newline makes that copy without the memoryview object bytes(memoryview())
        # needs (bytes(x) would be x itself), and removesuffix without a slice object.
        return orjson.dumps(fields, default=str, option=_OPTIONS_NEWLINE).removesuffix(b"\n")
    except (orjson.JSONEncodeError, TypeError):
        return _FALLBACK.encode(fields).encode("ascii")


class Timestamp:
    """ISO-8601 UTC with microseconds, formatting the date part once per second."""

    def __init__(self) -> None:
        self._second = -1
        self._prefix = ""

    def __call__(self) -> str:
        now = time.time()
        second = int(now)
        if second != self._second:
            self._second = second
            self._prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return f"{self._prefix}.{int((now - second) * 1_000_000):06d}Z"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _stdout_fd() -> int:
    try:
        sys.stdout.flush()  # our writes bypass its buffer
        return sys.stdout.fileno()
    except (AttributeError, ValueError, io.UnsupportedOperation):
        return 1


class _Output:
    """The file (or standard output) the writer thread writes to; raises OSError."""

    def __init__(self, path: str, max_bytes: int, backups: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self.fd = _stdout_fd() if path == "-" else self._open()
        self.size = 0 if path == "-" else os.fstat(self.fd).st_size
        self.reopen_due = False

    def _open(self) -> int:
        directory = os.path.dirname(self.path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)

    def prepare(self, size: int) -> None:
        """Before writing `size` bytes: reopen if that is still due, rotate if they
        would pass max_bytes. A failure here leaves the current file in use."""
        if self.path == "-":
            return
        if self.reopen_due:
            self.reopen()
        if self.max_bytes and self.size and self.size + size > self.max_bytes:
            self._rotate()

    def write(self, lines: list[bytes], data: bytes) -> None:
        """`data`: the `lines` joined, each ending in a newline. Whole lines or none: a
        write that fails halfway is cut back off the file, so the next one does not
        continue a broken line."""
        if self.path == "-":
            self._write_stdout(lines)
            return
        before = os.fstat(self.fd).st_size  # not our count: someone may have truncated it
        try:
            _write_all(self.fd, data)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, before)
            raise
        self.size = before + len(data)

    def _write_stdout(self, lines: list[bytes]) -> None:
        """Whole lines in writes of at most PIPE_BUF bytes: such writes to a pipe are
        atomic, so worker processes sharing standard output never split a line."""
        chunk: list[bytes] = []
        size = 0
        for line in lines:
            if chunk and size + len(line) + 1 > PIPE_BUF:
                _write_all(self.fd, b"\n".join(chunk) + b"\n")
                chunk, size = [], 0
            chunk.append(line)
            size += len(line) + 1
        if chunk:
            _write_all(self.fd, b"\n".join(chunk) + b"\n")

    def reopen(self) -> None:
        """The file at `path` from now on (logrotate renamed the old one); the old file
        stays in use until a new one opens."""
        if self.path == "-":
            return
        self.reopen_due = True  # until it succeeds
        fd = self._open()
        os.close(self.fd)
        self.fd = fd
        self.size = os.fstat(fd).st_size
        self.reopen_due = False

    def _rotate(self) -> None:
        for index in range(self.backups - 1, 0, -1):
            older = f"{self.path}.{index}"
            if os.path.exists(older):
                os.replace(older, f"{self.path}.{index + 1}")
        if self.backups > 0:
            os.replace(self.path, f"{self.path}.1")
        else:
            os.remove(self.path)
        self.reopen()

    def close(self) -> None:
        if self.path != "-":
            os.close(self.fd)


@dataclass(eq=False)
class _Marker:
    """Queued behind lines: the writer acts on it once the lines before it are written."""

    action: str  # "flush", "reopen" or "close"
    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class _Trouble:
    """A run of failed writes, or of lines refused, reported when it starts and ends."""

    started: float
    errors: int = 0
    dropped: int = 0
    last_failure: float = 0.0


class LineSink:
    """Where rendered lines go: a bounded queue on the loop's side, a writer thread on
    the other (see the module docstring). `msg` is the only call the hot path makes."""

    def __init__(
        self,
        path: str,
        max_bytes: int = 0,
        backups: int = 0,
        *,
        flush_interval: float = FLUSH_INTERVAL,
        max_queued_bytes: int = MAX_QUEUED_BYTES,
        metrics: Metrics | None = None,
    ) -> None:
        self.path = path
        self.flush_interval = min(flush_interval, threading.TIMEOUT_MAX)
        self.max_queued_bytes = max_queued_bytes
        self._wake_bytes = min(BUFFER_BYTES, max_queued_bytes // 4)
        self._out = _Output(path, max_bytes, backups)  # an unwritable path fails now
        self._metrics = metrics
        # Lines queued, and markers among them. No lock on the hot path: the loop only
        # appends (atomic under the GIL) and counts what it queued; the writer takes a
        # prefix (a slice, then `del` of it, both atomic) and counts what it is done with.
        self._lines: list[bytes | _Marker] = []
        self._queued = 0  # bytes ever queued: written by the loop's thread alone
        self._done = 0  # bytes ever written or dropped: by the writer alone
        # The writer's, from _done: the _queued at which lines are refused (the bound),
        # and at which it is woken before its interval (the loop compares, no arithmetic;
        # a stale value is a lower one, so the bound holds).
        self._full_at = max_queued_bytes
        self._wake_at = self._wake_bytes
        self._lock = threading.Lock()  # posters of markers (any thread) among themselves
        self._posted = 0  # markers posted; the writer's count of those it acted on:
        self._acted = 0
        self._refusing: _Trouble | None = None  # the loop's: lines refused, the queue full
        self._trouble: _Trouble | None = None  # the writer's: writes failing
        # Released to wake the writer, which acquires it (with its interval as timeout):
        # one C call a side, where threading.Event runs a Condition in Python.
        self._bell = threading.Lock()
        self._bell.acquire()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="kafkalens-request-log", daemon=True)
        self._thread.start()
        atexit.register(self.close)  # an exit that skips close() still writes the queue

    # -- the event loop's side --------------------------------------------------------

    def msg(self, line: bytes) -> None:
        """`line`: UTF-8 JSON without its newline. Never blocks, never raises."""
        queued = self._queued
        if queued >= self._full_at:
            self._refuse()
            return
        if self._refusing and self._waiting < self.max_queued_bytes // 2:
            self._end_refusing()  # not at once: a queue hovering at its bound would flap
        self._lines.append(line)
        self._queued = queued + len(line) + 1
        if queued >= self._wake_at and self._bell.locked():
            self._ring()

    @property
    def _waiting(self) -> int:
        """Bytes queued and not yet written (or dropped)."""
        return self._queued - self._done

    def _ring(self) -> None:
        with contextlib.suppress(RuntimeError):  # rung by another thread meanwhile
            self._bell.release()

    def _refuse(self) -> None:
        # Counted here, not by the writer: it may be the one stuck (a hung disk).
        if not self._refusing:
            self._refusing = _Trouble(time.monotonic())
            log.warning(
                "request log: writing falls behind; dropping lines",
                path=self.path,
                max_queued_bytes=self.max_queued_bytes,
            )
        self._refusing.dropped += 1
        if self._metrics is not None:
            self._metrics.request_log_dropped("queue_full", 1)

    def _end_refusing(self) -> None:
        trouble, self._refusing = self._refusing, None
        assert trouble is not None
        log.warning(
            "request log: writing caught up",
            path=self.path,
            dropped_lines=trouble.dropped,
            lasted_s=round(time.monotonic() - trouble.started, 3),
        )

    def reopen(self) -> None:
        """Reopen the file at its path once the lines queued so far are written (to the
        old file, which logrotate has renamed). Returns at once."""
        self._post(_Marker("reopen"))

    def flush(self, timeout: float = CLOSE_TIMEOUT) -> bool:
        """Wait until every line queued so far is written (or dropped); False on timeout.
        Blocks: for tests and shutdown, never for the hot path."""
        if self._closed:
            return True
        marker = _Marker("flush")
        self._post(marker)
        return marker.done.wait(timeout)

    def close(self) -> None:
        """Write what is queued, stop the writer and close the file."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        if self._refusing:
            self._end_refusing()
        marker = _Marker("close")
        self._post(marker)
        if not marker.done.wait(CLOSE_TIMEOUT):
            log.error("request log: the writer did not finish; lines lost", path=self.path)

    def _post(self, marker: _Marker) -> None:
        with self._lock:
            self._posted += 1  # before it is queued: the writer then looks for it
            self._lines.append(marker)
        self._ring()

    # -- the writer thread ------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._bell.acquire(True, self.flush_interval)
            try:
                if self._drain():
                    return
            except Exception:  # a bug here must not end the writing for good
                log.exception("request log: writer failed", path=self.path)

    def _drain(self) -> bool:
        """Write out what is queued, acting on each marker after the lines before it;
        True once a close marker was met."""
        queue = self._lines
        taken = queue[: len(queue)]
        del queue[: len(taken)]  # the loop may have appended meanwhile: those stay
        markers: list[tuple[int, _Marker]] = []
        if self._posted != self._acted:
            markers = [(i, x) for i, x in enumerate(taken) if isinstance(x, _Marker)]
            self._acted += len(markers)
        start = 0
        for end, marker in [*markers, (len(taken), None)]:
            for chunk in range(start, end, WRITE_LINES):
                self._write(cast(list[bytes], taken[chunk : min(chunk + WRITE_LINES, end)]))
            start = end + 1
            if marker is not None and self._act(marker):
                return True
        return False

    def _act(self, marker: _Marker) -> bool:
        if marker.action == "reopen":
            try:
                self._out.reopen()
            except OSError as exc:
                self._failed(exc, 0)  # the old file goes on; opening is tried again
        elif marker.action == "close":
            self._end_trouble(recovered=True)
            try:
                self._out.close()
            except OSError as exc:
                self._failed(exc, 0)
        marker.done.set()
        return marker.action == "close"

    def _write(self, batch: list[bytes]) -> None:
        data = b"\n".join([*batch, b""])  # the last newline too, without a second copy
        prepared = True
        try:
            self._out.prepare(len(data))
        except OSError as exc:  # reopening or rotating: the current file takes them
            prepared = False
            self._failed(exc, 0)
        try:
            self._out.write(batch, data)
        except OSError as exc:
            self._failed(exc, len(batch))
        else:
            if prepared:
                self._end_trouble(recovered=False)
        done = self._done = self._done + len(data)
        self._full_at = done + self.max_queued_bytes
        self._wake_at = done + self._wake_bytes

    def _failed(self, exc: OSError, lines: int) -> None:
        if self._metrics is not None:
            self._metrics.request_log_error()
            if lines:
                self._metrics.request_log_dropped("write_failed", lines)
        trouble = self._trouble
        if trouble is None:
            trouble = self._trouble = _Trouble(time.monotonic())
            name = errno.errorcode.get(exc.errno or 0, "")
            log.warning(
                "request log: cannot write; dropping lines",
                path=self.path,
                error=f"{name} {exc.strerror or exc}".strip(),
            )
        trouble.errors += 1
        trouble.dropped += lines
        trouble.last_failure = time.monotonic()

    def _end_trouble(self, recovered: bool) -> None:
        """After a write that worked; `recovered`: the run is over whatever came last."""
        trouble = self._trouble
        if trouble is None:
            return
        if recovered or time.monotonic() - trouble.last_failure >= RECOVERED_AFTER:
            self._trouble = None
            log.warning(
                "request log: writing again",
                path=self.path,
                dropped_lines=trouble.dropped,
                write_errors=trouble.errors,
                lasted_s=round(time.monotonic() - trouble.started, 3),
            )


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
        self._timestamp = Timestamp()

    def wants(self, api: str, api_key: int, has_errors: bool) -> bool:
        if self.apis and api not in self.apis and str(api_key) not in self.apis:
            return False
        if has_errors:
            return True
        if self.errors_only:
            return False
        return self.sample_rate >= 1.0 or self._random.random() < self.sample_rate

    def write(self, event: str, fields: dict[str, Any]) -> None:
        """Takes `fields` over: the line is those fields, then `event` and `ts`."""
        fields["event"] = event
        fields["ts"] = self._timestamp()
        self.sink.msg(render(fields))

    def warning(self, event: str, fields: dict[str, Any]) -> None:
        fields["level"] = "warning"
        self.write(event, fields)

    def flush(self) -> None:
        """Blocks until the lines so far are written: for tests and shutdown."""
        self.sink.flush()

    def reopen(self) -> None:
        self.sink.reopen()

    def close(self) -> None:
        self.sink.close()
