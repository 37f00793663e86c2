"""SaslHandshake v0: the raw token phase passes through untouched, and Kafka
framing resumes after it (proxy/exchange/sasl.py documents how the end is found).

The fake broker speaks the legacy flow: SaslHandshake v0, then bare length-prefixed
tokens both ways, then ordinary requests. Tokens are chosen to look like request
headers and responses, so a proxy that peeked into them would go wrong.
"""

from __future__ import annotations

import socket
import struct

import pytest
from support.proxy_harness import (
    FakeBroker,
    ProxyThread,
    api_versions_v0,
    correlation_id,
    is_closed,
    proxy_config,
    read_frame,
    request_frame,
    write_frame,
)
from support.sasl_scripts import (
    EXCHANGES,
    METADATA,
    SASL_HANDSHAKE,
    Exchange,
    handshake_v0,
    sasl_v0_broker,
)

from codec import ApiKey
from proxy.exchange.sasl import looks_like_request
from proxy.hooks import ConnectionInfo, Hooks, Pending


class Seen(Hooks):
    def __init__(self) -> None:
        self.requests: list[int] = []
        self.responses: list[tuple[int, bytes]] = []
        self.tokens: list[bytes] = []

    def request_forwarded(self, info: ConnectionInfo, frame: memoryview, pending: Pending) -> None:
        self.requests.append(pending.api_key)

    def response_forwarded(self, info: ConnectionInfo, frame: memoryview, pending: Pending) -> None:
        self.responses.append((pending.api_key, bytes(frame)))

    def sasl_token(self, info: ConnectionInfo, token: memoryview) -> None:
        self.tokens.append(bytes(token))


@pytest.mark.parametrize("mechanism", sorted(EXCHANGES))
def test_raw_tokens_pass_through_then_requests_resume(mechanism: str) -> None:
    exchange = EXCHANGES[mechanism]
    hooks = Seen()
    with (
        FakeBroker(sasl_v0_broker(exchange)) as broker,
        ProxyThread(proxy_config(broker.address), hooks) as px,
        socket.create_connection(("127.0.0.1", px.port), timeout=5) as sock,
    ):
        sock.sendall(handshake_v0(1, mechanism))
        assert correlation_id(read_frame(sock)) == 1
        for token, answer in zip(exchange.client_tokens, exchange.server_tokens, strict=True):
            write_frame(sock, token)
            if answer is not None:
                assert read_frame(sock) == answer
        sock.sendall(api_versions_v0(5) + request_frame(METADATA, 0, 6, b"\x00\x00\x00\x00"))
        assert [read_frame(sock) for _ in range(2)] == [
            b"\x00\x00\x00\x05ok",
            b"\x00\x00\x00\x06ok",
        ]
        assert px.pending_total() == 0
        [info] = px.clients()
        assert (info["requests"], info["responses"]) == (3, 3)  # tokens are not requests
        assert broker.errors == []
    assert hooks.requests == [SASL_HANDSHAKE, 18, METADATA]
    assert hooks.tokens == exchange.client_tokens  # each client token, and nothing else
    assert [key for key, _ in hooks.responses] == [SASL_HANDSHAKE, 18, METADATA]


def test_failed_handshake_keeps_kafka_framing() -> None:
    def refusing_broker(sock: socket.socket) -> None:
        handshake = read_frame(sock)
        write_frame(sock, handshake[4:8] + b"\x00\x21" + struct.pack(">i", 0))  # 33: unsupported
        while True:
            request = read_frame(sock)
            write_frame(sock, request[4:8] + b"ok")

    with (
        FakeBroker(refusing_broker) as broker,
        ProxyThread(proxy_config(broker.address)) as px,
        socket.create_connection(("127.0.0.1", px.port), timeout=5) as sock,
    ):
        sock.sendall(handshake_v0(1, "KERBEROS"))
        read_frame(sock)
        sock.sendall(api_versions_v0(2))
        assert read_frame(sock) == b"\x00\x00\x00\x02ok"
        assert px.pending_total() == 0


def test_token_over_the_before_auth_limit_closes() -> None:
    exchange = Exchange("PLAIN", [b"x" * 5000], [b""])
    with (
        FakeBroker(sasl_v0_broker(exchange)) as broker,
        ProxyThread(proxy_config(broker.address, max_frame_bytes_before_auth=4096)) as px,
        socket.create_connection(("127.0.0.1", px.port), timeout=5) as sock,
    ):
        sock.sendall(handshake_v0(1, "PLAIN"))
        read_frame(sock)
        write_frame(sock, b"x" * 5000)
        assert is_closed(sock)


def test_plausible_request_heuristic() -> None:
    assert looks_like_request(struct.pack(">hhih", ApiKey.API_VERSIONS, 3, 1, 4), 20)
    assert looks_like_request(struct.pack(">hhih", ApiKey.METADATA, 12, 1, -1), 10)
    for api_key in (0x6082, 0x0504, 0x0404, 101, -1):
        assert not looks_like_request(struct.pack(">hhih", api_key, 0, 1, 0), 20)
    assert not looks_like_request(struct.pack(">hhih", ApiKey.API_VERSIONS, 21, 1, 0), 20)  # version
    assert not looks_like_request(struct.pack(">hhih", ApiKey.API_VERSIONS, 3, 1, 100), 20)  # client id too long
    assert not looks_like_request(b"\x00\x12", 2)
