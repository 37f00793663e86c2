"""SaslHandshake v0: the raw token phase passes through untouched, and Kafka
framing resumes after it (proxy/exchange/sasl.py documents how the end is found).

The fake broker speaks the legacy flow: SaslHandshake v0, then bare length-prefixed
tokens both ways, then ordinary requests. Tokens are chosen to look like request
headers and responses, so a proxy that peeked into them would go wrong.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field

import pytest
from proxy_harness import (
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

from codec import ApiKey
from proxy.exchange.sasl import handshake_mechanism, looks_like_request
from proxy.hooks import ConnectionInfo, Hooks, Pending

SASL_HANDSHAKE = ApiKey.SASL_HANDSHAKE
METADATA = ApiKey.METADATA


def handshake_v0(corr: int, mechanism: str) -> bytes:
    mech = mechanism.encode()
    return request_frame(SASL_HANDSHAKE, 0, corr, struct.pack(">h", len(mech)) + mech)


def looks_like_api_versions(corr: int) -> bytes:
    """A token body that reads as an ApiVersions request header (api 18, v0)."""
    return struct.pack(">hhih", 18, 0, corr, 0)


@dataclass
class Exchange:
    """One scripted SASL conversation: client tokens, and the broker's answer to each
    (None: the broker sends nothing back, as GSSAPI's last step may)."""

    mechanism: str
    client_tokens: list[bytes]
    server_tokens: list[bytes | None]
    after: list[int] = field(default_factory=lambda: [18, METADATA])


EXCHANGES = {
    "PLAIN": Exchange("PLAIN", [b"\x00user\x00" + looks_like_api_versions(5)], [b""]),
    "OAUTHBEARER": Exchange("OAUTHBEARER", [b"n,,\x01auth=Bearer x\x01\x01"], [b""]),
    "SCRAM-SHA-256": Exchange(
        "SCRAM-SHA-256",
        [b"n,,n=user,r=abc", looks_like_api_versions(7)],
        [struct.pack(">i", 7) + b"r=abcdef,s=salt,i=4096", b"v=signature"],
    ),
    "GSSAPI": Exchange(
        "GSSAPI",
        [b"\x60\x82\x02\x00" + b"\x06" * 40, b"\x05\x04\x01\xff" + b"\x00" * 28, b"\x05\x04" * 9],
        [b"\x60\x81\x90" + b"\x02" * 30, b"\x05\x04\x00\xff" + b"\x01" * 28, None],
    ),
}


def sasl_v0_broker(exchange: Exchange):
    def handler(sock: socket.socket) -> None:
        handshake = read_frame(sock)
        if handshake[:2] != b"\x00\x11":  # e.g. the proxy's readiness probe: nothing
            return
        assert handshake_mechanism(handshake) == exchange.mechanism
        mechanisms = struct.pack(">ih", 1, len(exchange.mechanism)) + exchange.mechanism.encode()
        write_frame(sock, handshake[4:8] + b"\x00\x00" + mechanisms)
        for expected, answer in zip(exchange.client_tokens, exchange.server_tokens, strict=True):
            assert read_frame(sock) == expected
            if answer is not None:
                write_frame(sock, answer)
        while True:  # authenticated: ordinary requests
            request = read_frame(sock)
            write_frame(sock, request[4:8] + b"ok")

    return handler


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
    assert looks_like_request(struct.pack(">hhih", 18, 3, 1, 4), 20)
    assert looks_like_request(struct.pack(">hhih", 3, 12, 1, -1), 10)
    for api_key in (0x6082, 0x0504, 0x0404, 101, -1):
        assert not looks_like_request(struct.pack(">hhih", api_key, 0, 1, 0), 20)
    assert not looks_like_request(struct.pack(">hhih", 18, 21, 1, 0), 20)  # version
    assert not looks_like_request(struct.pack(">hhih", 18, 3, 1, 100), 20)  # client id too long
    assert not looks_like_request(b"\x00\x12", 2)
