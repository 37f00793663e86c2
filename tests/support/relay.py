"""A TCP relay that records every Kafka frame passing through it, in both directions.

It runs its own asyncio loop in a background thread, so synchronous clients
(kafka-python, confluent-kafka) can talk through it from the test's thread::

    with RecordingRelay("127.0.0.1", broker_port) as relay:
        produce_something(relay.bootstrap)
    pairs = relay.pairs()

Bytes are forwarded as soon as they arrive; a copy is split into frames
(int32 big-endian length + body) and each response is matched with its request
by correlation id. Produce with acks=0 gets no response and is not waited for;
a broker that answers one all the same (tansu does) gets that answer recorded with
`unexpected=True`.
Frames that cannot be attributed (the raw SASL tokens that follow a SaslHandshake
v0, garbage) are recorded with api_key -1 instead of stopping the relay.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
from dataclasses import dataclass, field
from typing import NamedTuple

from codec import ApiKey
from codec.errors import DecodeError
from codec.peek import peek_correlation_id, peek_request, produce_acks

REQUEST = "req"
RESPONSE = "resp"
UNKNOWN = -1
_SASL_HANDSHAKE = ApiKey.SASL_HANDSHAKE
_MAX_API_KEY = 100
_MAX_API_VERSION = 40
_LENGTH = struct.Struct(">i")


@dataclass(frozen=True)
class Frame:
    """One recorded frame; `data` is the body without the 4-byte length prefix."""

    seq: int
    connection: int
    direction: str
    api_key: int
    api_version: int
    correlation_id: int
    data: bytes
    unexpected: bool = False  # a response to a request that wants none (acks=0 Produce)


class Attribution(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    unexpected: bool = False


NOT_ATTRIBUTED = Attribution(UNKNOWN, UNKNOWN, UNKNOWN)


class FrameSplitter:
    """Accumulates a byte stream and yields the complete frame bodies in it."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buf += chunk
        frames = []
        while len(self._buf) >= 4:
            (size,) = _LENGTH.unpack_from(self._buf, 0)
            if size < 0:  # not Kafka framing: give up on this stream
                self._buf.clear()
                break
            if len(self._buf) < 4 + size:
                break
            frames.append(bytes(self._buf[4 : 4 + size]))
            del self._buf[: 4 + size]
        return frames


@dataclass
class ConnectionState:
    """Per-connection pairing table: correlation id -> (api_key, api_version)."""

    ident: int
    pending: dict[int, tuple[int, int]] = field(default_factory=dict)
    silent: dict[int, tuple[int, int]] = field(default_factory=dict)
    after_sasl_v0: bool = False

    def classify_request(self, data: bytes) -> Attribution:
        try:
            key, version, corr = peek_request(data)
        except DecodeError:
            return NOT_ATTRIBUTED
        plausible = 0 <= key <= _MAX_API_KEY and 0 <= version <= _MAX_API_VERSION
        if self.after_sasl_v0 and not plausible:
            return NOT_ATTRIBUTED  # a raw SASL token, not a request
        if key == _SASL_HANDSHAKE and version == 0:
            self.after_sasl_v0 = True
        table = self.pending if self._expects_response(key, version, data) else self.silent
        table[corr] = (key, version)
        return Attribution(key, version, corr)

    def classify_response(self, data: bytes) -> Attribution:
        try:
            corr = peek_correlation_id(data)
        except DecodeError:
            return NOT_ATTRIBUTED
        if corr in self.pending:
            return Attribution(*self.pending.pop(corr), corr)
        if corr in self.silent:
            return Attribution(*self.silent.pop(corr), corr, unexpected=True)
        return Attribution(UNKNOWN, UNKNOWN, corr)

    @staticmethod
    def _expects_response(key: int, version: int, data: bytes) -> bool:
        if key != 0:
            return True
        try:
            return produce_acks(data, version) != 0
        except DecodeError:
            return True


class RecordingRelay:
    """Listens on `host:port` (0 = any free port) and relays to the upstream broker."""

    def __init__(
        self, upstream_host: str, upstream_port: int, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.host = host
        self.port = port
        self._frames: list[Frame] = []
        self._lock = threading.Lock()
        self._connections = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def frames(self) -> list[Frame]:
        """A snapshot of the frames recorded so far, in arrival order."""
        with self._lock:
            return list(self._frames)

    def clear(self) -> None:
        with self._lock:
            self._frames.clear()

    def pairs(self) -> list[tuple[Frame, Frame | None]]:
        """Each request with its response (None for acks=0 Produce or no answer yet)."""
        responses = {
            (f.connection, f.correlation_id): f
            for f in self.frames
            if f.direction == RESPONSE and f.api_key != UNKNOWN
        }
        return [
            (f, responses.get((f.connection, f.correlation_id)))
            for f in self.frames
            if f.direction == REQUEST and f.api_key != UNKNOWN
        ]

    def start(self, timeout: float = 5.0) -> RecordingRelay:
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name="recording-relay", daemon=True
        )
        self._thread.start()
        if not ready.wait(timeout) or self._server is None:
            self.stop()
            raise RuntimeError("recording relay did not start")
        return self

    def stop(self, timeout: float = 5.0) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if thread.is_alive():
            fut = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
            with contextlib.suppress(Exception):
                fut.result(timeout)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)
        loop.close()
        self._loop = self._thread = None

    def __enter__(self) -> RecordingRelay:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self, ready: threading.Event) -> None:
        assert self._loop is not None
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._on_client, self.host, self.port)
            )
            self.port = int(self._server.sockets[0].getsockname()[1])
        finally:
            ready.set()
        self._loop.run_forever()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _on_client(
        self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._relay_connection(c_reader, c_writer)
        except asyncio.CancelledError:
            pass  # shutdown; on 3.11 a cancelled client task logs a spurious traceback
        finally:
            self._tasks.discard(task)
            c_writer.close()

    async def _relay_connection(
        self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter
    ) -> None:
        try:
            b_reader, b_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            return
        self._connections += 1
        state = ConnectionState(self._connections)
        try:
            await asyncio.gather(
                self._pump(c_reader, b_writer, state, REQUEST),
                self._pump(b_reader, c_writer, state, RESPONSE),
            )
        finally:
            b_writer.close()

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        state: ConnectionState,
        direction: str,
    ) -> None:
        splitter = FrameSplitter()
        try:
            while chunk := await reader.read(65536):
                writer.write(chunk)
                for data in splitter.feed(chunk):
                    self._record(state, direction, data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                writer.write_eof()
            writer.close()

    def _record(self, state: ConnectionState, direction: str, data: bytes) -> None:
        if direction == REQUEST:
            key, version, corr, unexpected = state.classify_request(data)
        else:
            key, version, corr, unexpected = state.classify_response(data)
        with self._lock:
            seq = len(self._frames)
            frame = Frame(seq, state.ident, direction, key, version, corr, data, unexpected)
            self._frames.append(frame)
