"""Run a kafkalens proxy in a background thread (its own uvloop loop) for tests.

Synchronous clients (kafka-python, confluent-kafka, raw sockets) talk to it from the
test's thread; `px.call(fn)` runs `fn` on the proxy's loop to look at its state.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import uvloop

from codec import ApiKey
from proxy.config import Address, Overrides
from proxy.features import Config, load_config
from proxy.forward.server import Server
from proxy.hooks import Hooks
from proxy.metrics import Metrics
from proxy.runner import RunningProxy, start_proxy

T = TypeVar("T")
LOCAL = "127.0.0.1"


def proxy_config(upstream: str, **limits: Any) -> Config:
    """Listen on a free local port, forward to `upstream`; `limits` override limits.*.
    /clients is served on a loopback listener of its own (`ProxyThread.clients_port`)."""
    config = load_config(
        None, Overrides(listen=f"{LOCAL}:0", upstream=upstream, metrics=f"{LOCAL}:0")
    )
    metrics = dataclasses.replace(config.metrics, clients_listen=Address(LOCAL, 0))
    config = dataclasses.replace(config, metrics=metrics)
    if limits:
        config = dataclasses.replace(config, limits=dataclasses.replace(config.limits, **limits))
    return config


class ProxyThread:
    def __init__(self, config: Config, hooks: Hooks | None = None) -> None:
        self.config = config
        self.hooks = hooks if hooks is not None else Hooks()
        self.loop = uvloop.new_event_loop()
        self.running: RunningProxy | None = None
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def start(self) -> ProxyThread:
        self._thread.start()
        self.running = self.run(start_proxy(self.config, self.hooks, Metrics()))
        return self

    def stop(self, grace: float = 0.0) -> None:
        if self.running is not None:
            self.run(self.running.stop(grace), timeout=grace + 10)
            self.running = None
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()

    def __enter__(self) -> ProxyThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def run(self, coro: Any, timeout: float = 10.0) -> Any:
        """Await `coro` on the proxy's loop."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn: Callable[[], T], timeout: float = 5.0) -> T:
        """Call `fn` on the proxy's loop (its state is only safe to read there)."""

        async def wrapper() -> T:
            return fn()

        return self.run(wrapper(), timeout)  # type: ignore[no-any-return,unused-ignore]

    @property
    def server(self) -> Server:
        assert self.running is not None
        return self.running.server

    @property
    def port(self) -> int:
        return self.call(lambda: next(iter(self.server.listeners.values())).bound.port)

    @property
    def bootstrap(self) -> str:
        return f"{LOCAL}:{self.port}"

    @property
    def http_port(self) -> int:
        assert self.running is not None
        return self.call(lambda: self.running.http_address.port)  # type: ignore[union-attr]

    @property
    def clients_port(self) -> int:
        """metrics.clients_listen's port (/clients without a token)."""
        assert self.running is not None
        address = self.call(lambda: self.running.clients_address)  # type: ignore[union-attr]
        assert address is not None, "metrics.clients_listen is not set"
        return address.port

    def clients(self) -> list[dict[str, Any]]:
        return self.call(self.server.clients)

    def pending_total(self) -> int:
        return self.call(self.server.pending_total)

    def wait_until(self, check: Callable[[], bool], timeout: float = 5.0) -> bool:
        """Poll `check` on the proxy's loop until true."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.call(check):
                return True
            time.sleep(0.02)
        return False


@contextmanager
def proxy_in_front_of(
    tansu_factory: Callable[..., Any], hooks: Hooks | None = None, **limits: Any
) -> Iterator[ProxyThread]:
    """A proxy forwarding to a tansu broker that advertises the proxy's port."""
    from proxy.tansu import free_port

    broker_port = free_port()
    with ProxyThread(proxy_config(f"{LOCAL}:{broker_port}", **limits), hooks) as px:
        tansu_factory(advertised_port=px.port, port=broker_port)
        yield px


# --- raw Kafka frames ------------------------------------------------------------------

_LEN = struct.Struct(">i")


def request_frame(
    api_key: int, api_version: int, correlation_id: int, body: bytes = b"", client_id: str = "t"
) -> bytes:
    """A request with header v1 (non-flexible): length, key, version, corr, client id, body."""
    cid = client_id.encode()
    payload = struct.pack(">hhih", api_key, api_version, correlation_id, len(cid)) + cid + body
    return _LEN.pack(len(payload)) + payload


def api_versions_v0(correlation_id: int) -> bytes:
    return request_frame(ApiKey.API_VERSIONS, 0, correlation_id)


def record_batch(value: bytes = b"v") -> bytes:
    """One record in a v2 record batch (built by kafka-python, independent of our codec)."""
    from kafka.record.memory_records import MemoryRecordsBuilder

    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 24)
    builder.append(timestamp=None, key=b"k", value=value, headers=[])
    builder.close()
    return bytes(builder.buffer())


def produce_v3(
    correlation_id: int, acks: int, topic: str = "raw", value: bytes = b"v", timeout_ms: int = 5000
) -> bytes:
    """A Produce v3 of one record to partition 0 of `topic`."""
    t = topic.encode()
    records = record_batch(value)
    body = struct.pack(">hhi", -1, acks, timeout_ms)  # null transactional id, acks, timeout
    body += struct.pack(">i", 1) + struct.pack(">h", len(t)) + t
    body += struct.pack(">i", 1) + struct.pack(">ii", 0, len(records)) + records
    return request_frame(ApiKey.PRODUCE, 3, correlation_id, body)


def read_frame(sock: socket.socket) -> bytes:
    """One response frame body (without the length prefix)."""
    (size,) = _LEN.unpack(read_exactly(sock, 4))
    return read_exactly(sock, size)


def read_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def correlation_id(frame: bytes) -> int:
    return int(struct.unpack_from(">i", frame, 0)[0])


def is_closed(sock: socket.socket, timeout: float = 3.0) -> bool:
    """Whether the peer closed the connection (reads EOF or a reset) within `timeout`."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except (ConnectionError, OSError) as exc:
        return not isinstance(exc, TimeoutError)
    return True


class FakeBroker:
    """A scripted TCP peer: `handler(sock)` runs in a thread for every connection."""

    def __init__(self, handler: Callable[[socket.socket], None]) -> None:
        self.handler = handler
        self.listener = socket.create_server((LOCAL, 0))
        self.port = int(self.listener.getsockname()[1])
        self.connections: list[socket.socket] = []
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def address(self) -> str:
        return f"{LOCAL}:{self.port}"

    def __enter__(self) -> FakeBroker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.listener.close()
        for sock in self.connections:
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            self.connections.append(sock)
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        try:
            self.handler(sock)
        except (ConnectionError, OSError):
            pass
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            self.errors.append(exc)


def write_frame(sock: socket.socket, body: bytes) -> None:
    sock.sendall(_LEN.pack(len(body)) + body)


def echo_broker(sock: socket.socket) -> None:
    """Answers every request with a response of its correlation id and b"ok"."""
    while True:
        request = read_frame(sock)
        write_frame(sock, request[4:8] + b"ok")
