"""Big Fetch responses through `kafkalens proxy`: MB/s, proxy CPU and RSS peak, per
`limits.socket_buffer_bytes` (and `limits.observe_whole_frame_bytes`).

    .venv/bin/python -m bench.proxy.big_frames                       # 256 KiB vs the kernel's
    .venv/bin/python -m bench.proxy.big_frames --buffers 0,262144,1048576 --mb 512

A raw-socket broker answers each Fetch v4 with `--response-mb` of 1 MiB record batches;
one client reads them as fast as it can. Each setting runs `--rounds` times, settings
alternating, and reports its best MB/s (background load only slows a round down).
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from support.load import HOST, ProxyProcess
from support.procs import memory_kib, user_system_seconds

from bench.proxy.raw_broker import RawBroker, read_exactly, read_frame
from codec import ApiKey

FETCH = ApiKey.FETCH
_LEN = struct.Struct(">i")
BATCH_BYTES = 1024 * 1024


def _batch() -> bytes:
    from kafka.record.memory_records import MemoryRecordsBuilder

    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 24)
    builder.append(timestamp=None, key=b"k", value=b"x" * (BATCH_BYTES - 100), headers=[])
    builder.close()
    return bytes(builder.buffer())


def fetch_request(corr: int, batches: int) -> bytes:
    body = struct.pack(">iiiib", -1, 100, 1, batches, 0) + struct.pack(">ih", 1, 1) + b"t"
    body += struct.pack(">i", 1) + struct.pack(">iqi", 0, 0, batches)
    head = struct.pack(">hhih", FETCH, 4, corr, 5) + b"bench"
    return _LEN.pack(len(head) + len(body)) + head + body


class Broker(RawBroker):
    """Answers Fetch requests with as many batches as their max_bytes field says."""

    def __init__(self) -> None:
        self.batch = _batch()
        super().__init__()

    def serve(self, sock: socket.socket) -> None:
        with sock:
            try:
                while True:
                    request = read_frame(sock)
                    corr = struct.unpack_from(">i", request, 4)[0]
                    batches = struct.unpack_from(">i", request, 8 + 2 + 5 + 12)[0]
                    records = len(self.batch) * batches
                    head = struct.pack(">ii", corr, 0) + struct.pack(">ih", 1, 1) + b"t"
                    head += struct.pack(">i", 1) + struct.pack(">ihqqi", 0, 0, 1, 1, 0)
                    head += struct.pack(">i", records)
                    sock.sendall(_LEN.pack(len(head) + records) + head)
                    for _ in range(batches):
                        sock.sendall(self.batch)
            except (ConnectionError, OSError):
                return


@dataclass
class TunedProxy(ProxyProcess):
    socket_buffer_bytes: int = 262144
    observe_whole_frame_bytes: int = 262144

    def config_text(self) -> str:
        text = super().config_text()
        return text.replace(
            "limits: {",
            f"limits: {{socket_buffer_bytes: {self.socket_buffer_bytes},"
            f" observe_whole_frame_bytes: {self.observe_whole_frame_bytes}, ",
        )


def one_round(proxy: ProxyProcess, total_mb: int, response_mb: int) -> tuple[float, float, float]:
    """(MB/s, proxy CPU seconds per GB, RSS peak MB) for `total_mb` through the proxy."""
    rss_peak = memory_kib(proxy.pid, "VmRSS") / 1024
    cpu_before = sum(user_system_seconds(proxy.pid))
    moved = 0
    started = time.perf_counter()
    with socket.create_connection((HOST, proxy.port)) as sock:
        for corr in range(max(1, total_mb // response_mb)):
            sock.sendall(fetch_request(corr, response_mb))
            (size,) = _LEN.unpack(read_exactly(sock, 4))
            left = size
            while left:
                chunk = sock.recv(min(left, 1 << 20))
                if not chunk:
                    raise ConnectionError("closed mid-response")
                left -= len(chunk)
            moved += size + 4
            rss_peak = max(rss_peak, memory_kib(proxy.pid, "VmRSS") / 1024)
    seconds = time.perf_counter() - started
    cpu = sum(user_system_seconds(proxy.pid)) - cpu_before
    return moved / 1e6 / seconds, cpu / (moved / 1e9), rss_peak


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.proxy.big_frames", description=__doc__)
    p.add_argument("--buffers", default="262144,0", help="socket_buffer_bytes values to compare")
    p.add_argument("--observe", type=int, default=262144, help="observe_whole_frame_bytes")
    p.add_argument("--mb", type=int, default=256, help="MB moved per round")
    p.add_argument("--response-mb", type=int, default=16, help="MB per Fetch response")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    broker = Broker()
    settings = [int(v) for v in args.buffers.split(",")]
    best: dict[int, tuple[float, float, float]] = {}
    with tempfile.TemporaryDirectory() as work:
        for round_ in range(args.rounds):
            for buffers in settings:
                path = Path(work) / f"{buffers}-{round_}"
                path.mkdir()
                proxy = TunedProxy(path, broker.address, socket_buffer_bytes=buffers,
                                   observe_whole_frame_bytes=args.observe).start()
                try:
                    one_round(proxy, 32, args.response_mb)  # warm up
                    figures = one_round(proxy, args.mb, args.response_mb)
                finally:
                    proxy.kill()
                if buffers not in best or figures[0] > best[buffers][0]:
                    best[buffers] = figures
                print(f"socket_buffer_bytes={buffers}: {figures[0]:.0f} MB/s,"
                      f" {figures[1]:.2f} CPU s/GB, RSS peak {figures[2]:.1f} MB", file=sys.stderr)
    print("| socket_buffer_bytes | MB/s (best) | proxy CPU s/GB | RSS peak MB |")
    print("|---|---|---|---|")
    for buffers, (rate, cpu, rss) in best.items():
        print(f"| {buffers or 'kernel autotuning'} | {rate:.0f} | {cpu:.2f} | {rss:.1f} |")


if __name__ == "__main__":
    main()
