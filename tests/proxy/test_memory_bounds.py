"""Memory per connection is bounded whatever the peers do (docs/operations.md, "Limits").

`kafkalens proxy` runs in its own process with its real hooks and request log, in
front of a broker serving Fetch responses as big as each request's max_bytes asks.
Its RSS (/proc/PID/status), open files and pending requests are measured before,
during and after, while a well-behaved client keeps round-tripping on its own
connection and must never wait more than a second.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.load import ProxyProcess
from support.procs import memory_kib
from support.proxy_harness import FakeBroker, read_exactly, read_frame, record_batch, request_frame

from codec import ApiKey

pytestmark = pytest.mark.slow  # each test drives a proxy process through hundreds of MB

FETCH = ApiKey.FETCH
MB = 1_000_000
SLOW_CONNECTIONS = 50
PER_CONNECTION_BOUND = 2 * 1024 * 1024  # docs/operations.md: at most 2 MB of RSS per connection
HUGE_RESPONSE = 60 * 1024 * 1024
HUGE_BOUND = 8 * 1024 * 1024  # one 60 MB response costs a few MB, not its size
GOOD_CLIENT_WAIT = 1.0  # seconds the good client may wait for a round trip

BATCH = record_batch(b"x" * (1024 * 1024 - 100))  # a ~1 MiB record batch


def fetch_request(correlation_id: int, max_bytes: int, client_id: str = "memtest") -> bytes:
    """Fetch v4 of partition 0 of topic "t"; max_bytes says how big the answer is."""
    body = struct.pack(">iiiib", -1, 100, 1, max_bytes, 0)
    body += struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
    body += struct.pack(">i", 1) + struct.pack(">iqi", 0, 0, max_bytes)
    return request_frame(FETCH, 4, correlation_id, body, client_id=client_id)


def fetch_response_parts(correlation_id: int, batches: int) -> tuple[bytes, int]:
    """(the response up to its records, the records' size): `batches` copies of BATCH
    follow, sent without joining them."""
    records = len(BATCH) * batches
    head = struct.pack(">ii", correlation_id, 0)
    head += struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", 1)
    head += struct.pack(">ihqqi", 0, 0, 100, 100, 0)  # no aborted transactions
    head += struct.pack(">i", records)
    return struct.pack(">i", len(head) - 4 + 4 + records) + head, records


def big_fetch_broker(sock: socket.socket) -> None:
    """Answers each Fetch with as many ~1 MiB batches as its max_bytes asks (at least a
    tiny one-record answer for small max_bytes)."""
    tiny = record_batch(b"small")
    while True:
        request = read_frame(sock)
        if struct.unpack_from(">h", request)[0] != FETCH:
            continue  # the hostile Produce below is acks=0: no answer
        corr = struct.unpack_from(">i", request, 4)[0]
        (client_len,) = struct.unpack_from(">h", request, 8)
        max_bytes = struct.unpack_from(">i", request, 10 + client_len + 12)[0]
        batches = max_bytes // len(BATCH)
        if not batches:
            head = struct.pack(">ii", corr, 0) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
            head += struct.pack(">i", 1) + struct.pack(">ihqqi", 0, 0, 100, 100, 0)
            head += struct.pack(">i", len(tiny)) + tiny
            sock.sendall(struct.pack(">i", len(head)) + head)
            continue
        head, _ = fetch_response_parts(corr, batches)
        sock.sendall(head)
        for _ in range(batches):
            sock.sendall(BATCH)


@dataclass
class MemoryProxy(ProxyProcess):
    def config_text(self) -> str:
        return super().config_text() + "workers: 1\n"


def rss(proxy: ProxyProcess) -> int:
    return memory_kib(proxy.pid, "VmRSS") * 1024


class GoodClient:
    """Round-trips a small Fetch over and over on its own connection; the longest wait."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.longest = 0.0
        self.round_trips = 0
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> GoodClient:
        self._thread.start()
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
                started = time.monotonic()
                self.sock.sendall(fetch_request(corr, 1000))
                answer = read_frame(self.sock)
                self.longest = max(self.longest, time.monotonic() - started)
                assert struct.unpack_from(">i", answer)[0] == corr
                self.round_trips += 1
                time.sleep(0.02)
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            self.failure = exc

    def healthy(self) -> None:
        assert self.failure is None, repr(self.failure)
        assert self.round_trips > 10, self.round_trips
        assert self.longest <= GOOD_CLIENT_WAIT, f"the good client waited {self.longest:.2f} s"


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[ProxyProcess]:
    with FakeBroker(big_fetch_broker) as broker:
        px = MemoryProxy(tmp_path, broker.address)
        px.start()
        try:
            yield px
        finally:
            px.kill()
        assert broker.errors == [], broker.errors


def read_response(sock: socket.socket) -> int:
    """Read one response without keeping it; its size."""
    (size,) = struct.unpack(">i", read_exactly(sock, 4))
    left = size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        assert chunk, "closed mid-response"
        left -= len(chunk)
    return size


def warm_up(proxy: ProxyProcess) -> None:
    """One big and one small Fetch through, so code paths and caches exist before the
    baseline is taken."""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        sock.sendall(fetch_request(1, 3 * 1024 * 1024))
        read_response(sock)
        sock.sendall(fetch_request(2, 1000))
        read_response(sock)


def settled_rss(proxy: ProxyProcess, seconds: float = 1.0, timeout: float = 30.0) -> tuple[int, int]:
    """(RSS once it has not grown for `seconds`, the peak seen meanwhile)."""
    deadline = time.monotonic() + timeout
    peak = last = rss(proxy)
    since = time.monotonic()
    while time.monotonic() - since < seconds and time.monotonic() < deadline:
        time.sleep(0.1)
        now = rss(proxy)
        peak = max(peak, now)
        if now > last + 256 * 1024:
            last, since = now, time.monotonic()
    return rss(proxy), peak


def log_lines(proxy: ProxyProcess) -> list[dict[str, object]]:
    path = proxy.work / "requests.log"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_slow_readers_pipelining_large_fetches_cost_at_most_2_mb_each(proxy: ProxyProcess) -> None:
    warm_up(proxy)
    open_files = proxy.baseline()
    before = rss(proxy)
    slow: list[socket.socket] = []
    with GoodClient(proxy.port) as good:
        try:
            for _ in range(SLOW_CONNECTIONS):
                sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
                for corr in range(4):  # pipelined; never read
                    sock.sendall(fetch_request(corr, 16 * 1024 * 1024))
                slow.append(sock)
            during, peak = settled_rss(proxy)
            figures = proxy.figures()
            assert figures.connections == SLOW_CONNECTIONS + 1
            assert figures.pending >= SLOW_CONNECTIONS  # the slow ones wait, stuck behind their client
            time.sleep(1.0)
            good.healthy()
        finally:
            for sock in slow:
                sock.close()
    grown = peak - before
    per_connection = grown / SLOW_CONNECTIONS
    print(f"RSS {before / MB:.1f} MB -> {during / MB:.1f} MB (peak {peak / MB:.1f}),"
          f" {per_connection / MB:.2f} MB per slow connection; good client waited at most"
          f" {good.longest * 1000:.0f} ms over {good.round_trips} round trips")
    assert per_connection <= PER_CONNECTION_BOUND, f"{per_connection / MB:.2f} MB per connection"
    after = proxy.settle(open_files)
    assert (after.pending, after.connections) == (0, 0), after
    assert after.open_files <= open_files, f"{after.open_files} open files, {open_files} before"


def test_one_60_mb_response_costs_a_few_mb_and_is_logged_in_full(proxy: ProxyProcess) -> None:
    warm_up(proxy)
    open_files = proxy.baseline()
    before = rss(proxy)
    peak = before
    with GoodClient(proxy.port) as good, socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        sock.sendall(fetch_request(99, HUGE_RESPONSE))
        done = threading.Event()
        got: list[int] = []
        reader = threading.Thread(target=lambda: (got.append(read_response(sock)), done.set()), daemon=True)
        reader.start()
        while not done.wait(0.05):
            peak = max(peak, rss(proxy))
        reader.join()
        time.sleep(0.5)
        good.healthy()
    batches = HUGE_RESPONSE // len(BATCH)
    assert got == [fetch_response_parts(99, batches)[0].__len__() - 4 + batches * len(BATCH)]
    grown = peak - before
    print(f"RSS {before / MB:.1f} MB, peak {peak / MB:.1f} MB while {got[0] / MB:.1f} MB went through")
    assert grown <= HUGE_BOUND, f"grew {grown / MB:.1f} MB"
    line = next(
        ln for ln in reversed(log_lines(proxy)) if ln.get("correlation_id") == 99 and ln.get("api") == "Fetch"
    )
    assert line["topics"] == ["t"]
    assert line["errors"] == []
    assert "response_decode_error" not in line
    stats = line["record_stats"]
    assert isinstance(stats, dict)
    assert stats["batches"] == batches and stats["records"] == batches
    assert stats["bytes"] == batches * len(BATCH)
    assert stats["per_topic"] == {"t": {"batches": batches, "records": batches, "bytes": batches * len(BATCH)}}
    assert line["response_bytes"] == got[0] + 4
    assert "kafkalens_frames_observed_in_pieces_total{direction=\"response\"}" in proxy.http("/metrics")[1]
    after = proxy.settle(open_files)
    assert (after.pending, after.connections) == (0, 0), after


@pytest.mark.parametrize("count", [450_000, 1_000_000])
def test_frames_of_many_tiny_elements_cost_bounded_time_and_memory(proxy: ProxyProcess, count: int) -> None:
    """Produce v9 (flexible), acks=0, naming `count` topics of 3 bytes each. Within the
    decode budget of 500,000 elements all are parsed (20,000 kept) unless one read takes
    longer than observe_seconds_per_read to walk; past the budget the frame is a decode
    error at once. Either way the rest streams by unparsed."""
    header = struct.pack(">hhih", ApiKey.PRODUCE, 9, 5, 7) + b"million" + b"\x00"
    body = b"\x00" + struct.pack(">hi", 0, 5000) + uvarint(count + 1) + b"\x01\x01\x00" * count + b"\x00"
    warm_up(proxy)
    before = rss(proxy)
    with GoodClient(proxy.port) as good, socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        sock.sendall(struct.pack(">i", len(header + body)) + header + body)
        deadline = time.monotonic() + 30
        line = None
        while line is None and time.monotonic() < deadline:
            time.sleep(0.2)
            line = next((ln for ln in log_lines(proxy) if ln.get("api") == "Produce"), None)
        peak = rss(proxy)
        time.sleep(0.5)
        good.healthy()
    assert line is not None and line["event"] == "request_no_response"
    assert line["correlation_id"] == 5 and line["request_bytes"] == len(header + body) + 4
    if count > 500_000:
        assert "decode budget" in str(line["decode_error"])
    elif "decode_error" in line:  # one read took longer than observe_seconds_per_read
        assert "took over 0.1 s" in str(line["decode_error"]), line
    else:  # or the machine was fast enough
        assert line["observed_elements_dropped"] == count - 20_000
        dropped = f'kafkalens_observed_elements_dropped_total{{direction="request"}} {count - 20_000}.0'
        assert dropped in proxy.http("/metrics")[1]
    print(f"RSS {before / MB:.1f} MB -> {peak / MB:.1f} MB; good client waited at most {good.longest * 1000:.0f} ms")
    assert peak - before <= HUGE_BOUND


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# --- a frame observed in pieces is logged as a whole one ------------------------------

PRODUCE = ApiKey.PRODUCE
VOLATILE = {"ts", "time", "conn", "client_address", "latency_ms"}


def produce_v3(correlation_id: int, acks: int, batches: list[bytes]) -> bytes:
    records = b"".join(batches)
    body = struct.pack(">hhi", -1, acks, 5000)
    body += struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
    body += struct.pack(">i", 1) + struct.pack(">ii", 0, len(records)) + records
    return request_frame(PRODUCE, 3, correlation_id, body, client_id="pieces")


def pieces_script(sock: socket.socket, request: bytes) -> None:
    """Fetch: three batches and a cut fourth, sent in small writes so the response spans
    many reads; Produce: a minimal v3 answer (acks=0: none)."""
    corr = struct.unpack_from(">i", request, 4)[0]
    api_key = struct.unpack_from(">h", request, 0)[0]
    if api_key == PRODUCE:
        if struct.unpack_from(">h", request, 18)[0] != 0:  # acks: after client id "pieces", null txn id
            body = struct.pack(">ii", corr, 1) + struct.pack(">h", 1) + b"t"
            body += struct.pack(">i", 1) + struct.pack(">ihqq", 0, 0, 5, -1) + struct.pack(">i", 0)
            sock.sendall(struct.pack(">i", len(body)) + body)
        return
    batch = record_batch(b"y" * 100_000)
    records = batch * 3 + batch[:500]
    head = struct.pack(">ii", corr, 0) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
    head += struct.pack(">i", 1) + struct.pack(">ihqqi", 0, 0, 100, 100, 0) + struct.pack(">i", len(records))
    data = struct.pack(">i", len(head) + len(records)) + head + records
    for at in range(0, len(data), 16_384):
        sock.sendall(data[at : at + 16_384])
        time.sleep(0.001)


def trickle(sock: socket.socket, data: bytes) -> None:
    """Send in small writes a moment apart, so the proxy reads the frame in pieces."""
    for at in range(0, len(data), 16_384):
        sock.sendall(data[at : at + 16_384])
        time.sleep(0.001)


def lines_through(tmp_path: Path, **limits: object) -> tuple[list[dict[str, object]], dict[str, float]]:
    """The log lines of two Produce requests and a Fetch, each spanning many reads, and
    how many frames were observed in pieces per direction."""
    from support.hostile import connect, eventually, hostile_proxy

    batches = [record_batch(b"p" * 90_000), record_batch(b"q" * 50_000), record_batch(b"r" * 10)]
    with hostile_proxy(tmp_path, {"pieces": pieces_script}, **limits) as (px, _), connect(px.port) as sock:
        trickle(sock, produce_v3(1, 1, batches))
        assert correlation_of(read_frame(sock)) == 1
        trickle(sock, produce_v3(2, 0, batches))
        sock.sendall(fetch_request(3, 400_000, client_id="pieces"))
        assert correlation_of(read_frame(sock)) == 3
        assert eventually(lambda: len(px.log_lines("request")) == 2 and px.log_lines("request_no_response"))
        lines = px.log_lines("request") + px.log_lines("request_no_response")
        counter = px.server.metrics.frames_observed_in_pieces
        observed = {d: px.call(lambda d=d: counter.labels(direction=d)._value.get()) for d in ("request", "response")}
    return [{k: v for k, v in line.items() if k not in VOLATILE} for line in lines], observed


def correlation_of(frame: bytes) -> int:
    return int(struct.unpack_from(">i", frame)[0])


def test_a_frame_observed_in_pieces_gives_the_log_line_of_a_whole_one(tmp_path: Path) -> None:
    whole, none = lines_through(tmp_path / "whole", observe_whole_frame_bytes=64 * 1024 * 1024)
    pieces, observed = lines_through(tmp_path / "pieces", observe_whole_frame_bytes=1024)
    assert none == {"request": 0, "response": 0}
    assert observed == {"request": 2, "response": 1}
    assert pieces == whole
    fetch = next(line for line in pieces if line["api"] == "Fetch")
    stats = fetch["record_stats"]
    assert isinstance(stats, dict) and stats["batches"] == 3  # the cut fourth is not counted
    produce = [line for line in pieces if line["api"] == "Produce"]
    assert [line["record_stats"]["batches"] for line in produce] == [3, 3]  # type: ignore[index]


def test_the_gateway_passes_frames_observed_in_pieces_to_its_inner_hooks() -> None:
    from codec import DEFAULT_POLICY
    from proxy.gateway.gateway import Gateway
    from proxy.gateway.gateway_hooks import GatewayHooks
    from proxy.hooks import ConnectionInfo, FrameObserver, Hooks, Pending

    seen: list[tuple[str, object]] = []
    observer = FrameObserver()

    class Inner(Hooks):
        def request_stream(self, info: ConnectionInfo, pending: Pending, expects_response: bool) -> FrameObserver:
            seen.append(("request", expects_response))
            return observer

        def response_stream(self, info: ConnectionInfo, pending: Pending, size: int) -> FrameObserver:
            seen.append(("response", size))
            return observer

    gateway = GatewayHooks(Inner(), mapper=None, route_kind=Gateway.route_kind, policy=DEFAULT_POLICY)  # type: ignore[arg-type]
    info = ConnectionInfo("c", "l", "h", 1, "u")
    pending = Pending(1, FETCH, 4, 0.0, 100)
    assert gateway.request_stream(info, pending, False) is observer
    assert gateway.response_stream(info, pending, 5000) is observer
    assert seen == [("request", False), ("response", 5000)]


@pytest.mark.parametrize("size", [65536, 0])
def test_socket_buffers_are_fixed_at_the_configured_size(size: int) -> None:
    from support.proxy_harness import ProxyThread, echo_broker, proxy_config

    def buffers(px: ProxyThread) -> list[tuple[int, int]]:
        [conn] = px.server.connections.values()
        out = []
        for transport in (conn.client, conn.upstream):
            assert transport is not None
            sock = transport.get_extra_info("socket")
            out.append((sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
                        sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)))
        return out

    with (
        FakeBroker(echo_broker) as broker,
        ProxyThread(proxy_config(broker.address, socket_buffer_bytes=size)) as px,
        socket.create_connection(("127.0.0.1", px.port), timeout=10) as sock,
    ):
        sock.sendall(request_frame(ApiKey.API_VERSIONS, 0, 5))
        assert struct.unpack_from(">i", read_frame(sock))[0] == 5
        got = px.call(lambda: buffers(px))
    if size:
        assert got == [(2 * size, 2 * size)] * 2  # Linux doubles what it is given
    else:
        assert all(pair != (2 * 65536, 2 * 65536) for pair in got)  # the kernel's own sizes


def test_a_broker_that_stops_reading_costs_at_most_2_mb_per_connection(tmp_path: Path) -> None:
    """The other direction: clients pushing 16 MB Produce requests at a broker that
    reads nothing. Reading from each client pauses once the broker side is backlogged."""
    connections = 20
    stop = threading.Event()

    def deaf_broker(sock: socket.socket) -> None:
        stop.wait(60)

    batch = record_batch(b"z" * (1024 * 1024 - 100))
    request = produce_v3(1, 1, [batch] * 16)

    def push(sock: socket.socket) -> None:
        sock.settimeout(5)
        with contextlib.suppress(OSError):  # stuck behind the deaf broker, as expected
            sock.sendall(request)

    broker = FakeBroker(deaf_broker).__enter__()
    proxy = MemoryProxy(tmp_path, broker.address).start()
    try:
        open_files = proxy.baseline()
        before = rss(proxy)
        socks = [socket.create_connection(("127.0.0.1", proxy.port), timeout=10) for _ in range(connections)]
        pushers = [threading.Thread(target=push, args=(s,), daemon=True) for s in socks]
        for t in pushers:
            t.start()
        _, peak = settled_rss(proxy)
        for t in pushers:
            t.join(10)
        assert proxy.figures().pending == connections
        per_connection = (peak - before) / connections
        print(f"RSS {before / MB:.1f} MB, peak {peak / MB:.1f} MB: {per_connection / MB:.2f} MB per connection")
        assert per_connection <= PER_CONNECTION_BOUND
        for s in socks:
            s.close()
        # A client's close is seen once its side is read again: the broker going away
        # (its sockets closed) ends every connection.
        stop.set()
        broker.__exit__(None, None, None)
        after = proxy.settle(open_files)
        assert (after.pending, after.connections) == (0, 0), after
        assert after.open_files <= open_files, f"{after.open_files} open files, {open_files} before"
    finally:
        stop.set()
        broker.__exit__(None, None, None)
        proxy.kill()
