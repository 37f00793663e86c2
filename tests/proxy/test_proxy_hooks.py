"""The hook interface (proxy/hooks.py): what hooks see, what they may change, and
that a failing hook never stops forwarding.

The broker is tansu: what is tested is the hook seam, the same whatever the broker
(real clients in front of Apache Kafka: test_proxy_clients.py, test_kafka_java_clients.py).
"""

from __future__ import annotations

import socket
import struct
import time

from support.clients import run_workload, sort_records
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
from proxy.hooks import ConnectionInfo, Hooks, Pending

API_VERSIONS = ApiKey.API_VERSIONS
METADATA = ApiKey.METADATA


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.settimeout(5)
    return sock


class Recording(Hooks):
    """Records every call; rejects requests from client id "reject-me"."""

    inspects_requests = True
    rewrite_api_keys = frozenset({METADATA})

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def connection_opened(self, info: ConnectionInfo) -> None:
        info.identity["seen"] = True
        self.calls.append(("opened", info.conn_id))

    def admit_request(self, info, frame, api_key, api_version, correlation_id):
        self.calls.append(("admit", correlation_id))
        if b"reject-me" in bytes(frame[8:20]):
            return struct.pack(">ih", correlation_id, 42)  # INVALID_REQUEST
        return None

    def request_forwarded(self, info: ConnectionInfo, frame: memoryview, pending: Pending) -> None:
        pending.token = ("req", len(frame))
        self.calls.append(("forwarded", pending.correlation_id))

    def request_without_response(self, info, frame, pending):
        self.calls.append(("no_response", pending.correlation_id))

    def rewrite_response(self, info, frame, pending):
        return bytes(frame[:4]) + b"rewritten by a hook"

    def response_forwarded(self, info: ConnectionInfo, frame: memoryview, pending: Pending) -> None:
        self.calls.append(("response", (pending.correlation_id, pending.token, bytes(frame[4:]))))

    def connection_closed(self, info: ConnectionInfo, reason: str) -> None:
        self.calls.append(("closed", reason))


def slow_first_answer(sock: socket.socket) -> None:
    """Echoes, but holds the first answer back so later ones queue behind it."""
    first = True
    while True:
        request = read_frame(sock)
        if first:
            time.sleep(0.2)
            first = False
        write_frame(sock, request[4:8] + b"ok")


def test_reject_a_request_and_replace_a_response_in_order() -> None:
    hooks = Recording()
    with (
        FakeBroker(slow_first_answer) as broker,
        ProxyThread(proxy_config(broker.address), hooks) as px,
        connect(px.port) as sock,
    ):
        sock.sendall(
            api_versions_v0(1)
            + request_frame(API_VERSIONS, 0, 2, client_id="reject-me")
            + request_frame(METADATA, 0, 3, b"\x00\x00\x00\x00")
            + request_frame(API_VERSIONS, 0, 4, client_id="reject-me")
        )
        answers = [read_frame(sock) for _ in range(4)]
        # the rejection waits for the slow answer to request 1: responses keep their order
        assert answers == [
            b"\x00\x00\x00\x01ok",
            struct.pack(">ih", 2, 42),
            b"\x00\x00\x00\x03rewritten by a hook",
            struct.pack(">ih", 4, 42),
        ]
        assert px.pending_total() == 0
        assert px.clients()[0]["identity"] == {"seen": True}
    responses = [value for name, value in hooks.calls if name == "response"]
    assert responses == [
        (1, ("req", len(api_versions_v0(1)) - 4), b"ok"),
        (3, ("req", 15), b"rewritten by a hook"),  # 8 header + 3 client id + 4 body
    ]
    assert [v for n, v in hooks.calls if n == "forwarded"] == [1, 3]
    assert hooks.calls[-1] == ("closed", "client_eof")


def test_hooks_see_whole_frames_however_they_arrive() -> None:
    hooks = Recording()
    big = request_frame(API_VERSIONS, 0, 9, b"z" * 100_000)
    with (
        FakeBroker(echo_broker) as broker,
        ProxyThread(proxy_config(broker.address), hooks) as px,
        connect(px.port) as sock,
    ):
        for i in range(0, len(big), 7000):
            sock.sendall(big[i : i + 7000])
            time.sleep(0.002)
        assert read_frame(sock) == b"\x00\x00\x00\x09ok"
    assert ("forwarded", 9) in hooks.calls
    responses = [v for n, v in hooks.calls if n == "response"]
    assert responses == [(9, ("req", len(big) - 4), b"ok")]


def test_acks_zero_goes_to_request_without_response(tansu_factory) -> None:
    hooks = Recording()
    with proxy_in_front_of(tansu_factory, hooks) as px, connect(px.port) as sock:
        sock.sendall(produce_v3(1, acks=1))
        read_frame(sock)
        sock.sendall(produce_v3(2, acks=0) + api_versions_v0(3))
        while correlation_id(read_frame(sock)) != 3:
            pass  # tansu answers acks=0 as well; the proxy forwards that unmatched
    assert ("no_response", 2) in hooks.calls
    assert ("forwarded", 2) not in hooks.calls


def test_rejecting_an_acks_zero_request_closes_the_connection(tansu_factory) -> None:
    class RejectProduce(Hooks):
        inspects_requests = True

        def admit_request(self, info, frame, api_key, api_version, correlation_id):
            return struct.pack(">i", correlation_id) if api_key == ApiKey.PRODUCE else None

    with proxy_in_front_of(tansu_factory, RejectProduce()) as px, connect(px.port) as sock:
        sock.sendall(produce_v3(1, acks=0))
        assert is_closed(sock)  # as Kafka does for a failed acks=0 produce


class Broken(Hooks):
    """Every hook raises."""

    inspects_requests = True
    rewrite_api_keys = frozenset({API_VERSIONS})

    def connection_opened(self, info):
        raise RuntimeError("opened")

    def admit_request(self, *args):
        raise RuntimeError("admit")

    def request_forwarded(self, *args):
        raise RuntimeError("forwarded")

    def rewrite_response(self, *args):
        raise RuntimeError("rewrite")

    def response_forwarded(self, *args):
        raise RuntimeError("response")

    def connection_closed(self, *args):
        raise RuntimeError("closed")


def test_failing_hooks_never_stop_forwarding(tansu_factory) -> None:
    with proxy_in_front_of(tansu_factory, Broken()) as px:
        outcome = run_workload("kafka-python", px.bootstrap, "broken", count=5, admin=False)
        assert sort_records(outcome.consumed) == sort_records(outcome.produced)
        text = px.running.metrics.render().decode()  # type: ignore[union-attr]
        assert 'kafkalens_decode_errors_total{api="18",direction="response"}' in text
        assert 'kafkalens_decode_errors_total{api="0",direction="request"}' in text


class HoldEverything(Hooks):
    """Holds and assembles every frame and rewrites every response to itself."""

    inspects_requests = True
    rewrite_api_keys = frozenset(range(100))

    def rewrite_response(self, info, frame, pending):
        return bytes(frame)

    def request_forwarded(self, info, frame, pending):
        pending.token = bytes(frame[:8])

    def response_forwarded(self, info, frame, pending):
        assert pending.token is not None and frame[:4] == pending.token[4:8]


def test_real_clients_work_with_every_frame_held(tansu_factory) -> None:
    with proxy_in_front_of(tansu_factory, HoldEverything()) as px:
        for client in ("aiokafka", "confluent-kafka"):
            topic = f"held-{client.replace('-', '')}"
            outcome = run_workload(client, px.bootstrap, topic, compression="gzip", count=10)
            assert sort_records(outcome.consumed) == sort_records(outcome.produced)
        text = px.running.metrics.render().decode()  # type: ignore[union-attr]
        assert "kafkalens_decode_errors_total{" not in text
