"""Scripted SASL conversations after a SaslHandshake v0 (raw tokens both ways, chosen to
look like request headers and responses) and a fake broker that speaks them."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field

from codec import ApiKey
from proxy.exchange.sasl import handshake_mechanism
from support.proxy_harness import read_frame, request_frame, write_frame

SASL_HANDSHAKE = ApiKey.SASL_HANDSHAKE
METADATA = ApiKey.METADATA


def handshake_v0(corr: int, mechanism: str) -> bytes:
    mech = mechanism.encode()
    return request_frame(SASL_HANDSHAKE, 0, corr, struct.pack(">h", len(mech)) + mech)


def looks_like_api_versions(corr: int) -> bytes:
    """A token body that reads as an ApiVersions request header (api 18, v0)."""
    return struct.pack(">hhih", ApiKey.API_VERSIONS, 0, corr, 0)


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
