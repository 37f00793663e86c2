"""An asyncio Kafka client connection for load: request, wait for the response, repeat."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from typing import cast

_SIZE = struct.Struct(">i")
_CORR = struct.Struct(">i")


class LoopClient(asyncio.Protocol):
    """Sends `frames` round-robin, one in flight, until `stop_at` (perf_counter seconds).

    `run(stop_at)` resolves when the last response arrived; `samples` holds each
    round trip in nanoseconds. `stop_at=0` sends exactly one request.
    """

    def __init__(self, frames: list[bytes]) -> None:
        self.frames = [bytearray(f) for f in frames]
        self.samples: list[int] = []
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._sent = 0
        self._stop_at = 0.0
        self._done: asyncio.Future[None] | None = None
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def run(self, stop_at: float) -> asyncio.Future[None]:
        self._stop_at = stop_at
        self._done = asyncio.get_running_loop().create_future()
        self._send()
        return self._done

    def _send(self) -> None:
        assert self.transport is not None
        frame = self.frames[self._sent % len(self.frames)]
        _CORR.pack_into(frame, 8, self._sent & 0x7FFFFFFF)
        self._sent += 1
        self._started = time.perf_counter_ns()
        self.transport.write(frame)

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        if len(buf) < 4:
            return
        size = _SIZE.unpack_from(buf)[0] + 4
        if len(buf) < size:
            return
        del buf[:size]
        self.samples.append(time.perf_counter_ns() - self._started)
        if time.perf_counter() < self._stop_at:
            self._send()
        elif self._done is not None and not self._done.done():
            self._done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        if self._done is not None and not self._done.done():
            self._done.set_exception(ConnectionError(f"connection lost: {exc}"))

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def open_clients(
    host: str, port: int, count: int, frames: list[bytes], batch: int = 50
) -> list[LoopClient]:
    """`count` connected clients, opened `batch` at a time (listen backlogs are short)."""
    loop = asyncio.get_running_loop()
    clients: list[LoopClient] = []
    for first in range(0, count, batch):
        pending = [
            loop.create_connection(lambda: LoopClient(frames), host, port)
            for _ in range(min(batch, count - first))
        ]
        for _, protocol in await asyncio.gather(*pending):
            clients.append(protocol)
    return clients


async def close_clients(clients: list[LoopClient], timeout: float = 10.0) -> None:
    for client in clients:
        client.close()
    if clients:
        await asyncio.wait([c.lost for c in clients], timeout=timeout)
