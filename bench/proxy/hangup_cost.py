"""What watching paused clients for their hang-up costs (proxy/forward/hangups.py).

    .venv/bin/python -m bench.hangup_cost
    .venv/bin/python -m bench.hangup_cost --rounds 6 --mb 512

Two figures, in one process:

* one watch and unwatch of a socket (two epoll_ctl calls), best of 5 x 100,000: what a
  pause and a resume of reading from a client add;
* an upload through kafkalens's forwarding (the real `Server`, no-op hooks, on its own
  uvloop thread) to a raw broker that reads in Python, slower than the client writes,
  so that reading from the client pauses and resumes all the time (backpressure):
  the proxy thread's CPU seconds per GB with the watch and without it (what the proxy did
  before it: nothing at a pause), rounds alternating, best round of each, and the pauses
  per GB. Requests of 1 MiB, each answered, so the in-flight bound is never the reason.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import struct
import threading
import time
from typing import Any

import uvloop

from bench.raw_broker import HOST, RawBroker, read_frame
from codec import ApiKey
from proxy.config import parse_config
from proxy.forward.hangups import HangupWatch
from proxy.forward.server import Server
from proxy.hooks import Hooks

FRAME = 1 << 20


def pair_cost(count: int = 100_000, repeats: int = 5) -> float:
    """Seconds per watch + unwatch of one socket, best of `repeats`."""

    async def measure() -> float:
        watch: HangupWatch[object] = HangupWatch(asyncio.get_running_loop(), lambda o, r: None)
        a, b = socket.socketpair()
        owner = object()
        best = float("inf")
        try:
            for _ in range(repeats):
                start = time.perf_counter()
                for _ in range(count):
                    watch.watch(a.fileno(), owner)
                    watch.unwatch(a.fileno(), owner)
                best = min(best, (time.perf_counter() - start) / count)
        finally:
            watch.close()
            a.close()
            b.close()
        return best

    return uvloop.run(measure())


class SlowBroker(RawBroker):
    """Answers every whole frame; reads in Python, slower than the proxy forwards."""

    def serve(self, sock: socket.socket) -> None:
        with sock, contextlib.suppress(OSError):
            while True:
                frame = read_frame(sock)
                sock.sendall(struct.pack(">i", 8) + frame[4:8] + b"ok!!")


class ProxyLoop:
    def __init__(self, upstream: str) -> None:
        self.loop = uvloop.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        config = parse_config(
            {"listeners": [{"name": "p", "listen": f"{HOST}:0", "upstream": upstream}]}
        )
        self.server = Server(config, Hooks())
        self.call(self.server.start())
        self.port = next(iter(self.server.listeners.values())).bound.port
        self.pauses = 0
        hangups = self.server.ctx.hangups
        assert hangups is not None
        watch = hangups.watch

        def counted(fd: int, owner: Any) -> bool:
            self.pauses += 1
            return watch(fd, owner)

        hangups.watch = counted  # type: ignore[method-assign]
        self._hangups = hangups

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def thread_time(self) -> float:
        async def now() -> float:
            return time.thread_time()

        return float(self.call(now()))

    def watching(self, on: bool) -> None:
        async def switch() -> None:
            self.server.ctx.hangups = self._hangups if on else None

        self.call(switch())

    def close(self) -> None:
        self.watching(True)
        self.call(self.server.close())
        self.loop.call_soon_threadsafe(self.loop.stop)


def upload(port: int, mb: int) -> None:
    """`mb` requests of 1 MiB, pipelined, then every answer read."""
    body = struct.pack(">hhih", ApiKey.METADATA, 0, 0, 1) + b"u" + b"\0" * (FRAME - 11)
    with socket.create_connection((HOST, port)) as sock:
        reader = threading.Thread(target=_read_answers, args=(sock, mb))
        reader.start()
        frame = struct.pack(">i", len(body)) + body
        for _ in range(mb):
            sock.sendall(frame)
        reader.join()


def _read_answers(sock: socket.socket, count: int) -> None:
    for _ in range(count):
        read_frame(sock)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4, help="per arm")
    parser.add_argument("--mb", type=int, default=256, help="uploaded per round")
    args = parser.parse_args()
    print(f"watch + unwatch of one socket: {pair_cost() * 1e6:.2f} us")
    broker = SlowBroker()
    proxy = ProxyLoop(broker.address)
    results: dict[bool, list[tuple[float, float, int]]] = {True: [], False: []}
    try:
        for n in range(2 * args.rounds):
            on = n % 2 == 0
            proxy.watching(on)
            pauses_before, cpu_before, start = proxy.pauses, proxy.thread_time(), time.monotonic()
            upload(proxy.port, args.mb)
            cpu, wall = proxy.thread_time() - cpu_before, time.monotonic() - start
            results[on].append((cpu, wall, proxy.pauses - pauses_before))
    finally:
        proxy.close()
    gb = args.mb / 1024
    for on, name in ((True, "watch on "), (False, "watch off")):
        cpu, wall, pauses = min(results[on])
        line = f"{name}: {cpu / gb:.3f} CPU s/GB (proxy thread), {args.mb / wall:.0f} MB/s"
        if on:
            line += f", {pauses / gb:,.0f} pauses/GB"
        print(line + f"  (rounds: {', '.join(f'{c / gb:.3f}' for c, _, _ in results[on])})")


if __name__ == "__main__":
    main()
