"""A scripted broker that asks for SASL/PLAIN, for tests with real clients.

tansu's `--authentication` offers SCRAM only (a PLAIN handshake gets the connection
dropped), so this one speaks just enough Kafka for a client to connect, authenticate
and ask for metadata: ApiVersions, SaslHandshake (v0, then a raw token, or v1 then
SaslAuthenticate), Metadata naming one broker (`advertised`, the proxy). It keeps the
tokens it receives, so a test knows the exact bytes that crossed the proxy.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from codec import ApiKey, Response, decode_request, encode_response
from support.proxy_harness import FakeBroker, read_frame, write_frame

API_VERSIONS = ApiKey.API_VERSIONS
METADATA = ApiKey.METADATA
SASL_HANDSHAKE = ApiKey.SASL_HANDSHAKE
SASL_AUTHENTICATE = ApiKey.SASL_AUTHENTICATE
SASL_AUTHENTICATION_FAILED = 58


class PlainBroker(FakeBroker):
    """`handshake_max`: 0 makes clients use raw tokens after SaslHandshake v0."""

    def __init__(self, handshake_max: int, accept: bool = True) -> None:
        super().__init__(self.serve)
        self.handshake_max = handshake_max
        self.accept = accept
        self.advertised = ("127.0.0.1", 0)
        self.tokens: list[bytes] = []  # every SASL token a client sent, as received

    def serve(self, sock: socket.socket) -> None:
        raw_token_next = False
        while True:
            frame = read_frame(sock)
            if raw_token_next:
                raw_token_next = False
                self.tokens.append(frame)
                if not self.accept:
                    return  # a Kafka broker closes on a failed raw-token login
                write_frame(sock, b"")  # the (empty) PLAIN server token
                continue
            api_key, version, corr = struct.unpack_from(">hhi", frame)
            body = self._answer(api_key, version, frame)
            if body is None:
                return
            write_frame(
                sock, encode_response(Response(api_key, version, {"correlation_id": corr}, body))
            )
            raw_token_next = api_key == SASL_HANDSHAKE and version == 0

    def _answer(self, api_key: int, version: int, frame: bytes) -> dict[str, Any] | None:
        if api_key == API_VERSIONS:
            return {"error_code": 0, "throttle_time_ms": 0, "api_keys": self._api_keys()}
        if api_key == SASL_HANDSHAKE:
            return {"error_code": 0, "mechanisms": ["PLAIN"]}
        if api_key == SASL_AUTHENTICATE:
            self.tokens.append(bytes(decode_request(frame).body["auth_bytes"]))
            if self.accept:
                return {"error_code": 0, "auth_bytes": b"", "session_lifetime_ms": 0}
            return {"error_code": SASL_AUTHENTICATION_FAILED, "error_message": "bad login",
                    "auth_bytes": b""}  # fmt: skip
        if api_key == METADATA:
            host, port = self.advertised
            broker = {"node_id": 1, "host": host, "port": port, "rack": None}
            return {"brokers": [broker], "cluster_id": "plain", "controller_id": 1, "topics": []}
        return None  # anything else: hang up

    def _api_keys(self) -> list[dict[str, int]]:
        keys = [(METADATA, 0, 12), (SASL_HANDSHAKE, 0, self.handshake_max), (API_VERSIONS, 0, 3)]
        if self.handshake_max >= 1:
            keys.append((SASL_AUTHENTICATE, 0, 2))
        return [{"api_key": k, "min_version": lo, "max_version": hi} for k, lo, hi in keys]
