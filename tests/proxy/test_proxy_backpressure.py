"""Backpressure: a peer that stops reading holds the other side back instead of
making the proxy buffer everything (transport buffers are measured while it happens)."""

from __future__ import annotations

import hashlib
import socket
import threading
import time

import pytest
from support.proxy_harness import (
    FakeBroker,
    ProxyThread,
    proxy_config,
    read_exactly,
    read_frame,
    request_frame,
    write_frame,
)

from codec import ApiKey
from proxy.forward.connection import HIGH_WATER

pytestmark = pytest.mark.slow  # each test waits for transport buffers to fill

RESPONSE_BYTES = 64 * 1024 * 1024
CHUNK = 1024 * 1024
# The proxy may hold up to its high-water mark plus one read chunk per direction.
PROXY_BOUND = HIGH_WATER + 512 * 1024


class Streamer:
    """A broker answering one request with a 64 MiB response, counting what it sent."""

    def __init__(self) -> None:
        self.sent = 0
        self.done = threading.Event()
        self.digest = hashlib.sha256()

    def __call__(self, sock: socket.socket) -> None:
        request = read_frame(sock)
        sock.sendall((RESPONSE_BYTES + 4).to_bytes(4, "big") + request[4:8])
        block = bytes(range(256)) * (CHUNK // 256)
        for _ in range(RESPONSE_BYTES // CHUNK):
            sock.sendall(block)
            self.digest.update(block)
            self.sent += len(block)
        self.done.set()


def buffered(px: ProxyThread) -> tuple[int, int]:
    """(bytes waiting for the client, bytes waiting for the broker) in the proxy."""
    [conn] = px.server.connections.values()
    assert conn.client is not None
    to_broker = conn.upstream.get_write_buffer_size() if conn.upstream else 0
    return conn.client.get_write_buffer_size(), to_broker


def test_slow_client_holds_the_broker_back() -> None:
    streamer = Streamer()
    with (
        FakeBroker(streamer) as broker,
        ProxyThread(proxy_config(broker.address, max_frame_bytes=128 << 20)) as px,
        socket.create_connection(("127.0.0.1", px.port)) as sock,
    ):
        sock.sendall(request_frame(ApiKey.FETCH, 4, 77))  # a "Fetch"; then the client reads nothing
        peak = 0
        for _ in range(25):
            time.sleep(0.04)
            peak = max(peak, px.call(lambda: buffered(px)[0]))
        stalled_at = streamer.sent
        time.sleep(0.2)
        assert streamer.sent == stalled_at  # the broker is blocked, not streaming into memory
        assert stalled_at < RESPONSE_BYTES // 2
        assert peak <= PROXY_BOUND
        sock.settimeout(10)  # now read everything: nothing was lost or reordered
        head = read_exactly(sock, 8)
        assert head == (RESPONSE_BYTES + 4).to_bytes(4, "big") + (77).to_bytes(4, "big")
        digest = hashlib.sha256()
        left = RESPONSE_BYTES
        while left:
            chunk = sock.recv(min(left, 1 << 20))
            assert chunk
            digest.update(chunk)
            left -= len(chunk)
        assert streamer.done.wait(5)
        assert digest.digest() == streamer.digest.digest()
        print(f"broker stalled after {stalled_at >> 20} MiB; proxy buffer peak {peak >> 10} KiB")


def test_slow_broker_holds_the_client_back() -> None:
    release = threading.Event()
    received = []

    def sluggish(sock: socket.socket) -> None:
        release.wait(10)
        received.append(read_frame(sock))
        write_frame(sock, received[-1][4:8] + b"ok")

    frame = request_frame(ApiKey.PRODUCE, 3, 5, b"\x00" * RESPONSE_BYTES)  # a 64 MiB "Produce"
    with (
        FakeBroker(sluggish) as broker,
        ProxyThread(proxy_config(broker.address, max_frame_bytes=128 << 20)) as px,
        socket.create_connection(("127.0.0.1", px.port)) as sock,
    ):
        sock.setblocking(False)
        sent = 0
        peak = 0
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            try:
                sent += sock.send(memoryview(frame)[sent : sent + CHUNK])
            except BlockingIOError:
                time.sleep(0.02)
            peak = max(peak, px.call(lambda: buffered(px)[1]))
        assert sent < len(frame) // 2  # the client is held back
        assert peak <= PROXY_BOUND
        print(f"client held back after {sent >> 20} MiB; proxy buffer peak {peak >> 10} KiB")
        release.set()
        sock.setblocking(True)
        sock.sendall(memoryview(frame)[sent:])
        sock.settimeout(10)
        assert read_frame(sock) == b"\x00\x00\x00\x05ok"
        assert received[0] == frame[4:]
