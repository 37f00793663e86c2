"""The sidecar proxy byte for byte: raw Kafka frames on raw sockets, against tansu
(or a scripted fake broker where a broker's timing must be controlled)."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from support.proxy_harness import (
    FakeBroker,
    ProxyThread,
    api_versions_v0,
    correlation_id,
    echo_broker,
    is_closed,
    produce_v3,
    proxy_config,
    proxy_in_front_of,
    read_frame,
    request_frame,
    write_frame,
)

from codec import ApiKey

METADATA = ApiKey.METADATA


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.settimeout(5)
    return sock


def round_trip_works(port: int, corr: int = 7) -> bool:
    with connect(port) as sock:
        sock.sendall(api_versions_v0(corr))
        return correlation_id(read_frame(sock)) == corr


def test_many_requests_in_flight_answered_in_order(tansu_factory) -> None:
    with proxy_in_front_of(tansu_factory) as px, connect(px.port) as sock:
        count = 2000
        sock.sendall(b"".join(api_versions_v0(i) for i in range(count)))  # nothing read yet
        assert [correlation_id(read_frame(sock)) for _ in range(count)] == list(range(count))
        assert px.pending_total() == 0
        [info] = px.clients()
        assert info["requests"] == info["responses"] == count


def test_byte_for_byte_transparent(tansu_factory) -> None:
    """What the client gets through the proxy is what the broker sends directly."""
    with proxy_in_front_of(tansu_factory) as px:
        upstream = px.call(lambda: next(iter(px.server.upstreams())))
        frames = b"".join(api_versions_v0(i) for i in range(3))
        answers = []
        for port in (px.port, upstream.port):
            with connect(port) as sock:
                sock.sendall(frames)
                answers.append([read_frame(sock) for _ in range(3)])
        assert answers[0] == answers[1]


def test_acks_zero_mixed_with_acks_one_leaves_no_pending(tansu_factory) -> None:
    with proxy_in_front_of(tansu_factory) as px, connect(px.port) as sock:
        sock.sendall(produce_v3(1, acks=1))
        assert correlation_id(read_frame(sock)) == 1  # creates the topic
        frames = []
        for corr in range(10, 40):
            frames.append(produce_v3(corr, acks=0 if corr % 3 else 1))
        frames.append(api_versions_v0(99))
        sock.sendall(b"".join(frames))
        seen: list[int] = []
        while not seen or seen[-1] != 99:
            seen.append(correlation_id(read_frame(sock)))
        answered = [corr for corr in range(10, 40) if corr % 3 == 0] + [99]
        # tansu answers acks=0 too (a broker quirk): the proxy forwards those unmatched
        assert [c for c in seen if c in answered] == answered
        assert px.pending_total() == 0
        [info] = px.clients()
        assert info["requests_without_response"] == 20


def test_acks_zero_gets_no_entry_with_a_strict_broker() -> None:
    def strict_broker(sock: socket.socket) -> None:
        while True:
            request = read_frame(sock)
            # Produce v3 from request_frame: client id "t", null transactional id, acks
            if request[:2] == b"\x00\x00" and request[13:15] == b"\x00\x00":
                continue  # acks=0: no answer, as Kafka does
            write_frame(sock, request[4:8] + b"ok")

    with (
        FakeBroker(strict_broker) as broker,
        ProxyThread(proxy_config(broker.address)) as px,
        connect(px.port) as sock,
    ):
        sock.sendall(b"".join(produce_v3(c, acks=0 if c % 2 else 1) for c in range(100)))
        assert [correlation_id(read_frame(sock)) for _ in range(50)] == list(range(0, 100, 2))
        assert px.pending_total() == 0
        assert px.clients()[0]["requests_without_response"] == 50


@pytest.mark.parametrize("corr", [2**31 - 1, 2**31 - 2, -(2**31), -1, 0])
def test_extreme_correlation_ids(tansu_factory, corr: int) -> None:
    with proxy_in_front_of(tansu_factory) as px, connect(px.port) as sock:
        sock.sendall(api_versions_v0(corr) + api_versions_v0(5))
        assert correlation_id(read_frame(sock)) == corr
        assert correlation_id(read_frame(sock)) == 5
        assert px.pending_total() == 0


def test_unknown_api_key_forwarded_untouched() -> None:
    with (
        FakeBroker(echo_broker) as broker,
        ProxyThread(proxy_config(broker.address)) as px,
        connect(px.port) as sock,
    ):
        sock.sendall(request_frame(999, 77, 42, b"\xff" * 30) + request_frame(ApiKey.API_VERSIONS, 99, 43))
        assert read_frame(sock) == b"\x00\x00\x00\x2aok"
        assert read_frame(sock) == b"\x00\x00\x00\x2bok"
        assert px.pending_total() == 0


def test_response_after_the_client_left_is_dropped() -> None:
    answered = threading.Event()

    def slow_broker(sock: socket.socket) -> None:
        request = read_frame(sock)
        time.sleep(0.3)
        try:
            write_frame(sock, request[4:8] + b"late")
        finally:
            answered.set()

    with FakeBroker(slow_broker) as broker, ProxyThread(proxy_config(broker.address)) as px:
        errors: list[dict[str, object]] = []
        px.call(lambda: px.loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx)))
        with connect(px.port) as sock:
            sock.sendall(api_versions_v0(1))
            assert px.wait_until(lambda: px.server.pending_total() == 1)
        assert px.wait_until(lambda: not px.server.connections)
        assert answered.wait(3)
        assert is_closed(broker.connections[0])  # the proxy closed its broker side too
        assert errors == [] and broker.errors == []
        assert round_trip_works(px.port)  # and carries on


def test_broker_gone_closes_the_client_promptly() -> None:
    def answer_once_then_close(sock: socket.socket) -> None:
        request = read_frame(sock)
        write_frame(sock, request[4:8] + b"bye")
        time.sleep(0.2)
        sock.close()

    with (
        FakeBroker(answer_once_then_close) as broker,
        ProxyThread(proxy_config(broker.address)) as px,
        connect(px.port) as sock,
    ):
        sock.sendall(api_versions_v0(1))
        assert read_frame(sock) == b"\x00\x00\x00\x01bye"
        started = time.monotonic()
        assert is_closed(sock, timeout=3)
        assert time.monotonic() - started < 0.6
        assert px.wait_until(lambda: not px.server.connections)


def test_client_gone_closes_the_broker_side_promptly() -> None:
    with FakeBroker(echo_broker) as broker, ProxyThread(proxy_config(broker.address)) as px:
        with connect(px.port) as sock:
            sock.sendall(api_versions_v0(1))
            read_frame(sock)
        started = time.monotonic()
        assert is_closed(broker.connections[0], timeout=3)
        assert time.monotonic() - started < 0.5


def test_unreachable_broker_closes_the_client() -> None:
    from proxy.tansu import free_port

    with ProxyThread(proxy_config(f"127.0.0.1:{free_port()}")) as px, connect(px.port) as sock:
        assert is_closed(sock)
        text = px.running.metrics.render().decode()  # type: ignore[union-attr]
        assert 'reason="upstream_connect_failed"' in text


def test_oversized_frame_closes_only_that_connection() -> None:
    limits = {"max_frame_bytes": 1 << 20, "max_frame_bytes_before_auth": 4096}
    with (
        FakeBroker(echo_broker) as broker,
        ProxyThread(proxy_config(broker.address, **limits)) as px,
        connect(px.port) as good,
    ):
        good.sendall(api_versions_v0(1))
        read_frame(good)
        bad_inputs = [
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # TLS ClientHello: 369 MB "frame"
            b"\xff\xff\xff\xf0" + b"\x00" * 8,  # negative length
            (2 << 20).to_bytes(4, "big") + b"\x00\x03\x00\x01\x00\x00\x00\x01",  # over 1 MiB
            request_frame(ApiKey.API_VERSIONS, 0, 1, client_id="x" * 5000),  # ApiVersions over the before-auth cap
        ]
        for data in bad_inputs:
            with connect(px.port) as bad:
                bad.sendall(data)
                assert is_closed(bad)
        good.sendall(api_versions_v0(2))
        assert correlation_id(read_frame(good)) == 2
        # the before-auth cap ends with the first request that is not part of the handshake
        with connect(px.port) as sock:
            sock.sendall(request_frame(METADATA, 0, 3, b"\x00\x00\x00\x00", client_id="m" * 5000))
            assert correlation_id(read_frame(sock)) == 3
        closed = px.running.metrics.render().decode()  # type: ignore[union-attr]
        assert 'reason="frame_too_large"} 4.0' in closed


@pytest.mark.slow
def test_frame_and_idle_timeouts() -> None:
    limits = {"frame_timeout_seconds": 0.3, "idle_timeout_seconds": 0.8}
    with (
        FakeBroker(echo_broker) as broker,
        ProxyThread(proxy_config(broker.address, **limits)) as px,
    ):
        with connect(px.port) as stalled:
            stalled.sendall(api_versions_v0(1)[:6])  # a frame begun, never finished
            started = time.monotonic()
            assert is_closed(stalled)
            assert 0.2 < time.monotonic() - started < 0.8
        with connect(px.port) as idle:
            idle.sendall(api_versions_v0(1))
            read_frame(idle)
            started = time.monotonic()
            assert is_closed(idle)
            assert 0.6 < time.monotonic() - started < 1.8
        text = px.running.metrics.render().decode()  # type: ignore[union-attr]
        assert 'reason="frame_timeout"' in text and 'reason="idle_timeout"' in text


def test_connection_limits() -> None:
    with (
        FakeBroker(echo_broker) as broker,
        ProxyThread(proxy_config(broker.address, max_connections_per_ip=2)) as px,
    ):
        first, second = connect(px.port), connect(px.port)
        for sock in (first, second):
            sock.sendall(api_versions_v0(1))
            read_frame(sock)
        with connect(px.port) as third:
            assert is_closed(third)
        first.close()
        assert px.wait_until(lambda: len(px.server.connections) == 1)
        assert round_trip_works(px.port)
        second.close()
        text = px.running.metrics.render().decode()  # type: ignore[union-attr]
        assert (
            'kafkalens_connections_rejected_total{listener="plaintext",reason="per_ip_limit"} 1.0'
            in text
        )


def test_listeners_added_and_removed_at_run_time() -> None:
    """What gateway mode does for each broker it discovers."""
    from proxy.config import Address

    with (
        FakeBroker(echo_broker) as first,
        FakeBroker(echo_broker) as second,
        ProxyThread(proxy_config(first.address)) as px,
    ):
        listener = px.run(
            px.server.add_listener(
                "broker-1", Address("127.0.0.1", 0), Address("127.0.0.1", second.port)
            )
        )
        port = px.call(lambda: listener.bound.port)
        assert round_trip_works(port)
        assert {c["listener"] for c in px.clients()} <= {"broker-1"}
        assert len(second.connections) >= 1
        px.run(px.server.remove_listener("broker-1"))
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=1)
        assert round_trip_works(px.port)
