"""Work in flight against a broker that never answers: what a `kafkalens proxy` process
holds, and whether another client still gets through.

    .venv/bin/python -m bench.proxy.inflight --connections 100 --requests 20000

Each of `--connections` raw clients pipelines `--requests` Metadata v0 requests through
the proxy to a fake broker that reads them and answers none; a well-behaved client
round-trips ApiVersions on its own connection all the while (the same fake answers
it). Printed: the proxy's RSS, open files and pending requests before, at the peak and
after `limits.request_timeout_seconds` closed the stuck connections, and the
well-behaved client's longest wait.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory

from support.load import HOST, ProxyProcess
from support.procs import memory_kib

from bench.proxy.raw_broker import RawBroker, read_frame
from codec import ApiKey

API_VERSIONS, METADATA = ApiKey.API_VERSIONS, ApiKey.METADATA
STUCK = "stuck"


def request(api_key: int, corr: int, client_id: str, body: bytes = b"") -> bytes:
    cid = client_id.encode()
    payload = struct.pack(">hhih", api_key, 0, corr, len(cid)) + cid + body
    return struct.pack(">i", len(payload)) + payload


class FakeBroker(RawBroker):
    """Answers ApiVersions v0; requests with client id "stuck" it reads and never answers."""

    def serve(self, sock: socket.socket) -> None:
        with sock, contextlib.suppress(OSError):
            while True:
                frame = read_frame(sock)
                (size,) = struct.unpack_from(">h", frame, 8)
                if frame[10 : 10 + size] == STUCK.encode():
                    continue
                corr = frame[4:8]
                body = corr + struct.pack(">hi", 0, 1) + struct.pack(">hhh", API_VERSIONS, 0, 3)
                sock.sendall(struct.pack(">i", len(body)) + body)


class WellBehaved:
    """One connection round-tripping ApiVersions v0 every 20 ms; keeps its finish times."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=30)
        self.times: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        corr = 0
        while not self.stop.is_set():
            corr += 1
            self.sock.sendall(request(API_VERSIONS, corr, "good"))
            read_frame(self.sock)
            self.times.append(time.monotonic())
            self.stop.wait(0.02)

    def longest_wait(self, start: float, end: float) -> float:
        inside = [start, *(t for t in self.times if start <= t <= end), end]
        return max(b - a for a, b in zip(inside, inside[1:], strict=False))


@dataclass
class Look:
    rss_mb: float
    open_files: int
    pending: int

    def __str__(self) -> str:
        return (
            f"RSS {self.rss_mb:7.1f} MB  open files {self.open_files:5d}  pending {self.pending:7d}"
        )


class LimitedProxy(ProxyProcess):
    max_in_flight: int = 100
    request_timeout: float = 10.0

    def config_text(self) -> str:
        return (
            super()
            .config_text()
            .replace(
                "limits: {",
                f"limits: {{max_in_flight_requests: {self.max_in_flight},"
                f" request_timeout_seconds: {self.request_timeout}, ",
            )
        )

    def look(self) -> Look:
        rss = memory_kib(self.pid, "VmRSS") * 1024 / 1e6
        return Look(round(rss, 1), self.open_files(), self.pending())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--requests", type=int, default=20_000, help="per connection")
    parser.add_argument("--max-in-flight", type=int, default=100)
    parser.add_argument("--request-timeout", type=float, default=10.0)
    args = parser.parse_args()
    broker = FakeBroker()
    with TemporaryDirectory() as work:
        proxy = LimitedProxy(Path(work), broker.address)
        proxy.max_in_flight, proxy.request_timeout = args.max_in_flight, args.request_timeout
        proxy.start()
        try:
            run(proxy, args.connections, args.requests)
        finally:
            proxy.kill()


def run(proxy: LimitedProxy, connections: int, requests: int) -> None:
    good = WellBehaved(proxy.port)
    time.sleep(1.0)
    before = proxy.look()
    print(f"before  {before}")
    burst = b"".join(
        request(METADATA, corr, STUCK, struct.pack(">i", 0)) for corr in range(requests)
    )
    start = time.monotonic()
    stuck = [socket.create_connection((HOST, proxy.port), timeout=30) for _ in range(connections)]
    for sock in stuck:
        threading.Thread(target=_send, args=(sock, burst), daemon=True).start()
    peak, last_pending = before, -1
    while True:  # until the pending count stops growing
        time.sleep(1.0)
        now = proxy.look()
        peak = Look(max(peak.rss_mb, now.rss_mb), max(peak.open_files, now.open_files), now.pending)
        if now.pending == last_pending:
            break
        last_pending = now.pending
    held = time.monotonic()
    print(f"peak    {peak}   ({connections} x {requests:,} requests sent)")
    deadline = time.monotonic() + proxy.request_timeout + 15
    while proxy.look().pending > 1 and time.monotonic() < deadline:
        time.sleep(0.5)
    for sock in stuck:
        sock.close()
    time.sleep(1.0)
    print(f"after   {proxy.look()}   (request_timeout_seconds {proxy.request_timeout:g})")
    end = time.monotonic()
    print(
        f"well-behaved client: longest wait {good.longest_wait(start, end) * 1000:.0f} ms"
        f" ({good.longest_wait(start, held) * 1000:.0f} ms while the requests piled up)"
    )
    good.stop.set()
    good.thread.join(5)


def _send(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):
        sock.sendall(data)


if __name__ == "__main__":
    main()
