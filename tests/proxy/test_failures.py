"""Faults survived with nothing lost: the broker or the proxy restarted under load, the
broker missing when the proxy starts, clients that leave mid-request or half-close.

The proxy is `kafkalens proxy` in its own process (support.load's `ProxyProcess`), so
its open files (/proc/PID/fd) and the `kafkalens_pending_requests` gauge are its own.
Every record counts as delivered only when librdkafka's delivery report says the broker
acknowledged it (acks=all); a fresh consumer reads the topic back afterwards.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.load import (
    HOST,
    ConsumerLoop,
    ProducerLoop,
    ProxyProcess,
    create_topic,
    read_all,
)
from support.proxy_harness import api_versions_v0, is_closed, produce_v3, read_frame

from codec import ApiKey, Request, encode_request
from proxy.tansu import BrokerUnavailable, TansuBroker, free_port, tansu_binary

try:
    tansu_binary()
except BrokerUnavailable:
    pytest.skip("no tansu binary", allow_module_level=True)

TansuFactory = Callable[..., TansuBroker]
Proxies = Callable[..., ProxyProcess]
PARTITIONS = 4
RATE = 500  # records a second per producer
FETCH = ApiKey.FETCH


@pytest.fixture
def proxies(tmp_path: Path) -> Iterator[Proxies]:
    """Starts `kafkalens proxy` processes; any still running are killed afterwards."""
    started: list[ProxyProcess] = []

    def start(upstream: str, **fields: object) -> ProxyProcess:
        proxy = ProxyProcess(tmp_path, upstream, **fields)  # type: ignore[arg-type]
        started.append(proxy)
        return proxy.start()

    yield start
    for proxy in started:
        proxy.kill()


def until(check: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.1)


def quiet(value: Callable[[], object], seconds: float, timeout: float = 30.0) -> None:
    """Until `value()` has not changed for `seconds`."""
    deadline = time.monotonic() + timeout
    last, since = value(), time.monotonic()
    while time.monotonic() - since < seconds:
        assert time.monotonic() < deadline, f"still changing after {timeout}s"
        time.sleep(0.05)
        now = value()
        if now != last:
            last, since = now, time.monotonic()


def assert_back_to_baseline(proxy: ProxyProcess, open_files: int) -> None:
    after = proxy.settle(open_files)
    assert (after.pending, after.connections) == (0, 0), after
    assert after.open_files <= open_files, f"{after.open_files} open files, {open_files} before"


def test_broker_restart_under_load(tansu_factory: TansuFactory, proxies: Proxies) -> None:
    """The broker stopped and started again on its port while a producer and a consumer
    run through the proxy, which is not restarted.

    The tansu build used here keeps data in memory only: its storage engines are memory://
    and s3:// (which needs an S3 service); postgres://, sqlite://, slatedb:// and turso://
    answer "FeatureNotEnabled", file:// "UnsupportedStorageUrl". So the restarted broker
    comes back empty (the producer's metadata request makes it create the topic again),
    and what is checked is what the proxy answers for: the clients carry on through it,
    and every record acknowledged after the old broker died is there to be read."""
    broker_port = free_port()
    proxy = proxies(f"{HOST}:{broker_port}")
    pid, open_files = proxy.pid, proxy.baseline()
    broker = tansu_factory(port=broker_port, advertised_port=proxy.port)
    consumer = ConsumerLoop(proxy.bootstrap, "restart", PARTITIONS).start()
    create_topic(proxy.bootstrap, "restart", PARTITIONS)
    producer = ProducerLoop(proxy.bootstrap, "restart", "a", RATE).start()
    until(lambda: len(producer.acks) >= 100 and consumer.consumed >= 100, "load")

    broker.stop()
    # Delivery reports come out of librdkafka when polled, a moment after the broker's
    # answer: with no broker at all, once they stop coming the old broker's are all in
    # and any later one is the new broker's.
    quiet(lambda: len(producer.acks), seconds=1.0)
    fence = time.monotonic()
    consumed_before = consumer.consumed
    tansu_factory(port=broker_port, advertised_port=proxy.port)
    until(lambda: len(producer.acked_after(fence)) >= 200, "acks from the new broker")
    until(lambda: consumer.consumed >= consumed_before + 100, "the consumer to go on")
    producer.stop()
    consumer.stop()

    after = set(producer.acked_after(fence))
    missing = after - set(read_all(proxy.bootstrap, "restart", after))
    assert not missing, f"{len(missing)} of {len(after)} acknowledged records lost"
    assert proxy.pid == pid and proxy.process is not None and proxy.process.poll() is None
    assert_back_to_baseline(proxy, open_files)


def fetch_at_end(correlation_id: int, topic: str, wait_ms: int) -> bytes:
    """A Fetch v4 of partition 0 from an offset far past its end: the broker holds it
    `wait_ms` before answering (empty), so it stays in flight that long."""
    body = {
        "replica_id": -1,
        "max_wait_ms": wait_ms,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": 0, "fetch_offset": 10**9, "partition_max_bytes": 1 << 20}
                ],
            }
        ],
    }
    header = {"correlation_id": correlation_id, "client_id": "parked"}
    data = encode_request(Request(FETCH, 4, header, body))
    return struct.pack(">i", len(data)) + data


def in_flight(proxy: ProxyProcess, client_port: int) -> int:
    _, text = proxy.http("/clients")
    mine = [c for c in json.loads(text) if c["client"].endswith(f":{client_port}")]
    return int(mine[0]["in_flight"]) if mine else 0


def test_proxy_restart_under_load(tansu_factory: TansuFactory, proxies: Proxies) -> None:
    """SIGTERM: in-flight requests are answered, then the proxy exits 0; started again on
    the same port, the clients reconnect and go on; the broker kept everything."""
    broker_port = free_port()
    proxy = proxies(f"{HOST}:{broker_port}")
    open_files = proxy.baseline()
    tansu_factory(port=broker_port, advertised_port=proxy.port)
    consumer = ConsumerLoop(proxy.bootstrap, "bounce", PARTITIONS).start()
    create_topic(proxy.bootstrap, "bounce", PARTITIONS)
    producer = ProducerLoop(proxy.bootstrap, "bounce", "b", RATE).start()
    until(lambda: len(producer.acks) >= 100 and consumer.consumed >= 100, "load")

    with socket.create_connection((HOST, proxy.port), timeout=30) as parked:
        parked.sendall(fetch_at_end(7, "bounce", wait_ms=2000))
        until(lambda: in_flight(proxy, parked.getsockname()[1]) == 1, "the fetch in flight")
        assert proxy.terminate() == 0
        assert read_frame(parked)[:4] == (7).to_bytes(4, "big")  # answered, though stopping
        assert is_closed(parked)
    stopped = time.monotonic()
    consumed_before = consumer.consumed
    proxy.start()  # same ports
    until(lambda: len(producer.acked_after(stopped)) >= 200, "acks through the new proxy")
    until(lambda: consumer.consumed >= consumed_before + 100, "the consumer to go on")
    producer.stop()
    consumer.stop()

    acked = {key for _, key in producer.acks}
    missing = acked - set(read_all(proxy.bootstrap, "bounce", acked))
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged records lost"
    assert_back_to_baseline(proxy, open_files)  # the same config: the same idle files


def test_broker_down_when_the_proxy_starts(tansu_factory: TansuFactory, proxies: Proxies) -> None:
    """The proxy starts without its broker: not ready, clients cut off and retrying; the
    broker comes up on that port and everything queued meanwhile is delivered."""
    broker_port = free_port()
    proxy = proxies(f"{HOST}:{broker_port}")
    open_files = proxy.baseline()
    down = (503, f"upstream unreachable: {HOST}:{broker_port}\n")
    until(lambda: proxy.http("/readyz") == down, "/readyz to report the broker", 15)
    with socket.create_connection((HOST, proxy.port), timeout=30) as sock:
        sock.sendall(api_versions_v0(1))
        assert is_closed(sock, timeout=15)  # accepted, then closed: no broker to pair with
    producer = ProducerLoop(proxy.bootstrap, "late", "c", RATE).start()
    until(lambda: producer.sent >= 100, "records queued")
    assert producer.acks == []  # librdkafka retries meanwhile

    tansu_factory(port=broker_port, advertised_port=proxy.port)
    until(lambda: proxy.http("/readyz") == (200, "ready\n"), "/readyz to turn ready", 15)
    queued = producer.sent
    until(lambda: len(producer.acks) >= queued, "the queued records acknowledged")
    producer.stop()

    assert producer.errors == [] and len(producer.acks) == producer.sent
    acked = {key for _, key in producer.acks}
    missing = acked - set(read_all(proxy.bootstrap, "late", acked))
    assert not missing, f"{len(missing)} acknowledged records lost"
    _, metrics = proxy.http("/metrics")
    assert 'reason="connect_refused"' in metrics  # kafkalens_upstream_failures_total
    assert_back_to_baseline(proxy, open_files)


@pytest.fixture
def proxied(tansu_factory: TansuFactory, proxies: Proxies) -> tuple[ProxyProcess, int]:
    """A proxy in front of a broker, and its open files with no client."""
    broker_port = free_port()
    proxy = proxies(f"{HOST}:{broker_port}")
    open_files = proxy.baseline()
    tansu_factory(port=broker_port, advertised_port=proxy.port)
    return proxy, open_files


def test_client_gone_mid_request(proxied: tuple[ProxyProcess, int]) -> None:
    """Half a Produce, then the client closes: nothing of it reaches the log, nothing of
    the connection stays behind, and the proxy goes on serving."""
    proxy, open_files = proxied
    create_topic(proxy.bootstrap, "cut", 1)
    for n in range(20):
        with socket.create_connection((HOST, proxy.port), timeout=30) as sock:
            if n % 2:  # and half of them while the broker connection is still being made
                sock.sendall(api_versions_v0(1))
                read_frame(sock)
            frame = produce_v3(2, 1, "cut", f"cut-{n}".encode())
            sock.sendall(frame[: len(frame) // 2])
    assert_back_to_baseline(proxy, open_files)
    with socket.create_connection((HOST, proxy.port), timeout=30) as sock:
        sock.sendall(produce_v3(3, 1, "cut", b"whole"))
        assert read_frame(sock)[:4] == (3).to_bytes(4, "big")
    assert read_all(proxy.bootstrap, "cut") == ["k"]  # the whole one only


def test_client_half_closes_after_a_full_request(proxied: tuple[ProxyProcess, int]) -> None:
    """shutdown(SHUT_WR) after a whole Produce. Apache Kafka's broker, reading EOF, still
    processes the requests it read in full (its Selector keeps a closing channel for them)
    but sends no response (SocketServer drops responses for a closed connection). The
    proxy matches: it forwards every whole request, then closes both sides; a response
    already on its way may get through first. Either way the client sees a clean end."""
    proxy, open_files = proxied
    create_topic(proxy.bootstrap, "half", 1)
    for n in range(10):
        with socket.create_connection((HOST, proxy.port), timeout=30) as sock:
            if n % 2:
                sock.sendall(api_versions_v0(1))
                read_frame(sock)
            sock.sendall(produce_v3(2, 1, "half", f"half-{n}".encode()))
            sock.shutdown(socket.SHUT_WR)
            got = read_to_eof(sock)
            assert got == b"" or one_response(got, 2), got
    assert len(read_all(proxy.bootstrap, "half")) == 10  # every request was processed
    assert_back_to_baseline(proxy, open_files)


def read_to_eof(sock: socket.socket) -> bytes:
    sock.settimeout(30)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def one_response(data: bytes, correlation_id: int) -> bool:
    """Whether `data` is exactly one whole response frame for `correlation_id`."""
    whole = len(data) >= 8 and int.from_bytes(data[:4], "big") == len(data) - 4
    return whole and data[4:8] == correlation_id.to_bytes(4, "big")
