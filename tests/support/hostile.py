"""What the hostile-input tests share: a proxy with the real observing hooks, a scripted
broker, a well-behaved client that keeps talking during an attack, a memory probe.

The proxy runs in a thread of the test process, so the process's resident memory is
the proxy's plus a constant: the probe measures the peak *growth* during an attack.
tests/project/test_hostile_support.py checks the probe itself, so a bound asserted with it
means something.
"""

from __future__ import annotations

import gc
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import cramjam
import pytest
from crc32c import crc32c

from codec import ApiKey
from proxy.features import Config, parse_config
from support.observed import ObservedProxy
from support.proxy_harness import LOCAL, FakeBroker, read_frame, request_frame, write_frame

MIB = 1 << 20
API_VERSIONS = ApiKey.API_VERSIONS
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


# --- the proxy -------------------------------------------------------------------------


def sidecar_config(
    upstream: str,
    log_path: Path,
    *,
    record_detail: bool = False,
    enforcement: str = "log",
    **limits: Any,
) -> Config:
    """A sidecar on a free local port, request log on, through the real config parser."""
    return parse_config(
        {
            "listeners": [{"name": "plaintext", "listen": f"{LOCAL}:0", "upstream": upstream}],
            "metrics": {"listen": f"{LOCAL}:0"},
            "request_log": {"path": str(log_path), "record_detail": record_detail},
            "limits": limits,
            "kip1313": {"enforcement": enforcement},
        }
    )


# --- the broker ------------------------------------------------------------------------


def client_id(request: bytes) -> str:
    """The client id of a request frame body (header v1 and v2 both start with it)."""
    (size,) = struct.unpack_from(">h", request, 8)
    return request[10 : 10 + size].decode(errors="replace") if size > 0 else ""


def api_versions_v0_answer(corr: int) -> bytes:
    """A valid ApiVersions v0 response body, so that well-behaved traffic decodes cleanly."""
    return struct.pack(">ihi", corr, 0, 1) + struct.pack(">hhh", API_VERSIONS, 0, 3)


def answer(sock: socket.socket, request: bytes) -> None:
    """What an honest broker does, enough for these tests."""
    corr = request[4:8]
    if struct.unpack_from(">h", request)[0] == API_VERSIONS:
        write_frame(sock, api_versions_v0_answer(int.from_bytes(corr, "big", signed=True)))
    else:
        write_frame(sock, corr + b"ok")


class ScriptedBroker:
    """A FakeBroker handler: honest, unless a request's client id names a script.

    Records every request frame it receives, so a test can check what the proxy
    forwarded byte for byte.
    """

    def __init__(self, scripts: dict[str, Any] | None = None) -> None:
        self.scripts = scripts or {}
        self.received: list[bytes] = []
        self.lock = threading.Lock()

    def __call__(self, sock: socket.socket) -> None:
        while True:
            request = read_frame(sock)
            with self.lock:
                self.received.append(request)
            script = self.scripts.get(client_id(request))
            if script is None:
                answer(sock, request)
            elif script(sock, request) == "stop":
                return

    def frames_from(self, cid: str) -> list[bytes]:
        with self.lock:
            return [frame for frame in self.received if client_id(frame) == cid]


@contextmanager
def hostile_proxy(
    tmp_path: Path, scripts: dict[str, Any] | None = None, **options: Any
) -> Iterator[tuple[ObservedProxy, ScriptedBroker]]:
    """An observed proxy in front of a ScriptedBroker; `options` go to sidecar_config."""
    broker = ScriptedBroker(scripts)
    with FakeBroker(broker) as fake:
        config = sidecar_config(fake.address, tmp_path / "requests.log", **options)
        with ObservedProxy(config) as px:
            yield px, broker
        assert fake.errors == [], fake.errors


def eventually(check: Any, timeout: float = 15.0) -> bool:
    """Poll `check()` from the test's thread (ProxyThread.wait_until runs it on the
    proxy's loop, where `ObservedProxy.log_lines` cannot be called)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return bool(check())


def connect(port: int, timeout: float = 10.0) -> socket.socket:
    sock = socket.create_connection((LOCAL, port), timeout=timeout)
    sock.settimeout(timeout)
    return sock


# --- the well-behaved client -----------------------------------------------------------


class Sentinel:
    """One connection, opened before an attack, round-tripping ApiVersions v0 every
    few milliseconds in a thread; any failure is kept for the test to report."""

    def __init__(self, port: int, pause: float = 0.02) -> None:
        self.sock = connect(port)
        self.pause = pause
        self.times: list[float] = []  # monotonic time of each completed round trip
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sentinel:
        self._thread.start()
        assert self.wait_for_more(1), f"the sentinel never got an answer: {self.error!r}"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(15)
        self.sock.close()

    def _run(self) -> None:
        corr = 0
        try:
            while not self._stop.is_set():
                corr += 1
                self.sock.sendall(request_frame(API_VERSIONS, 0, corr, client_id="sentinel"))
                assert read_frame(self.sock) == api_versions_v0_answer(corr)
                self.times.append(time.monotonic())
                self._stop.wait(self.pause)
        except BaseException as exc:  # noqa: BLE001 - reported by healthy()
            self.error = exc

    def wait_for_more(self, count: int = 3, timeout: float = 15.0) -> bool:
        """Whether `count` more round trips complete within `timeout` seconds."""
        target = len(self.times) + count
        deadline = time.monotonic() + timeout
        while len(self.times) < target and self.error is None and time.monotonic() < deadline:
            time.sleep(0.01)
        return len(self.times) >= target

    def during(self, start: float, end: float) -> int:
        return sum(start <= t <= end for t in self.times)

    def healthy(self) -> None:
        """Fails the test unless the sentinel's connection still works."""
        assert self.error is None, f"the well-behaved client failed: {self.error!r}"
        assert self.wait_for_more(3), "the well-behaved client stalled"


# --- memory ----------------------------------------------------------------------------


def _status_kib(field: str) -> int:
    for line in _STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(field)


def _reset_peak() -> bool:
    """Linux resets VmHWM (the peak RSS) on writing 5 to clear_refs."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return _status_kib("VmHWM") <= _status_kib("VmRSS") + 1024


class PeakGrowth:
    """Peak resident-memory growth of this process inside the `with` block, in bytes.

    Counts what tracemalloc cannot see (decompressors allocate in Rust). Where the peak
    cannot be reset, a thread samples VmRSS every few milliseconds instead.
    """

    def __init__(self) -> None:
        self.bytes = 0
        self._base = 0
        self._exact = False
        self._samples: list[int] = []
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None

    def __enter__(self) -> PeakGrowth:
        if not _STATUS.exists():
            pytest.skip("needs /proc/self/status (Linux)")
        gc.collect()
        self._base = _status_kib("VmRSS")
        self._exact = _reset_peak()
        if not self._exact:
            self._sampler = threading.Thread(target=self._sample, daemon=True)
            self._sampler.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.002):
            self._samples.append(_status_kib("VmRSS"))

    def __exit__(self, *exc: object) -> None:
        if self._exact:
            peak = _status_kib("VmHWM")
        else:
            self._stop.set()
            assert self._sampler is not None
            self._sampler.join(5)
            peak = max([*self._samples, _status_kib("VmRSS")])
        self.bytes = max(0, peak - self._base) * 1024

    def __str__(self) -> str:
        return f"{self.bytes / MIB:.1f} MiB"

    __repr__ = __str__


# --- decompression bombs ---------------------------------------------------------------

BOMB_BYTES = 256 * MIB  # what the batch inflates to
LIMIT = 1 * MIB  # limits.decompression_limit_bytes in the bomb tests


def compressed_zeros(codec: str, total: int) -> bytes:
    """`total` zero bytes compressed in 1 MiB steps (never all in memory at once)."""
    compressor = getattr(cramjam, codec).Compressor(level=1)
    chunk = bytes(MIB)
    for _ in range(total // MIB):
        compressor.compress(chunk)
    return bytes(compressor.finish())


def bomb_batch(codec: str) -> bytes:
    """A v2 record batch claiming 1000 records, its body `BOMB_BYTES` when inflated."""
    body = compressed_zeros(codec, BOMB_BYTES)
    attributes = {"gzip": 1, "zstd": 4}[codec]
    head = struct.pack(
        ">qiibIhiqqqhii", 0, 49 + len(body), 0, 2, 0, attributes, 999, 0, 0, -1, -1, -1, 1000
    )
    batch = bytearray(head + body)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)
