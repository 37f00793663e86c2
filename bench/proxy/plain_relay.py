"""The least a Python proxy can do: relay bytes both ways, nothing else (uvloop).

Not kafkalens: the `python-relay` arm, the floor for what a Python event loop costs
per request and per GB on this machine, next to haproxy's floor in C. Like haproxy (and
kafkalens) it stops reading from one side while the other side's write buffer is full
(asyncio's `pause_writing`), so a fast broker cannot fill its memory with a slow
client's bytes.

    python -m bench.proxy.plain_relay --listen HOST:PORT --upstream HOST:PORT
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence

import uvloop


class Side(asyncio.Protocol):
    def __init__(self, peer: Side | None = None) -> None:
        self.peer = peer
        self.transport: asyncio.Transport | None = None
        self.early: list[bytes] = []
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is None or peer.transport is None:
            self.early.append(data)
        else:
            peer.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()

    # This side's writes are the peer's bytes: while they wait, the peer is not read.
    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


def client_side(upstream: tuple[str, int]) -> Side:
    client = Side()

    async def connect() -> None:
        loop = asyncio.get_running_loop()
        try:
            _, broker = await loop.create_connection(lambda: Side(client), *upstream)
        except OSError:
            if client.transport is not None:
                client.transport.close()
            return
        client.peer = broker
        if client.closed:  # the client left while the broker connection was opening
            assert broker.transport is not None
            broker.transport.close()
            return
        for data in client.early:
            assert broker.transport is not None
            broker.transport.write(data)
        client.early.clear()

    asyncio.get_running_loop().create_task(connect())
    return client


async def serve(listen: tuple[str, int], upstream: tuple[str, int]) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: client_side(upstream), *listen, reuse_address=True)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()
    server.close()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.proxy.plain_relay")
    parser.add_argument("--listen", required=True)
    parser.add_argument("--upstream", required=True)
    args = parser.parse_args(argv)
    uvloop.run(serve(_address(args.listen), _address(args.upstream)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
