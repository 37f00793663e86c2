"""A minimal HTTP/1.1 endpoint: /metrics, /healthz, /readyz, /clients.

One request per connection (answered with `Connection: close`), GET and HEAD only,
headers capped at 8 KiB and 5 seconds: enough for Prometheus and Kubernetes probes
without a web framework, and nothing a bad client sends can hold resources long.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, cast

from prometheus_client import CONTENT_TYPE_LATEST

from proxy.config import Address

MAX_HEADER_BYTES = 8192
HEADER_TIMEOUT_SECONDS = 5.0
_TEXT = "text/plain; charset=utf-8"
_JSON = "application/json"


@dataclass
class Endpoints:
    """Where the answers come from."""

    metrics: Callable[[], bytes]
    ready: Callable[[], tuple[bool, str]]  # (ready, reason shown in the body)
    clients: Callable[[], list[dict[str, Any]]]


@dataclass
class Response:
    status: HTTPStatus
    body: bytes
    content_type: str = _TEXT


def route(endpoints: Endpoints, method: str, target: str) -> Response:
    if method not in ("GET", "HEAD"):
        return Response(HTTPStatus.METHOD_NOT_ALLOWED, b"GET or HEAD only\n")
    path = target.split("?", 1)[0]
    if path == "/metrics":
        return Response(HTTPStatus.OK, endpoints.metrics(), CONTENT_TYPE_LATEST)
    if path == "/healthz":
        return Response(HTTPStatus.OK, b"ok\n")
    if path == "/readyz":
        ready, reason = endpoints.ready()
        status = HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE
        return Response(status, reason.encode() + b"\n")
    if path == "/clients":
        body = json.dumps(endpoints.clients(), default=str).encode()
        return Response(HTTPStatus.OK, body, _JSON)
    return Response(HTTPStatus.NOT_FOUND, b"not found: try /metrics /healthz /readyz /clients\n")


class HttpProtocol(asyncio.Protocol):
    def __init__(self, endpoints: Endpoints) -> None:
        self.endpoints = endpoints
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(HEADER_TIMEOUT_SECONDS, self.transport.abort)

    def data_received(self, data: bytes) -> None:
        if self.timer is None:
            return  # answered already
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > MAX_HEADER_BYTES:
                self._send(Response(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, b"too large\n"))
            return
        self._answer(bytes(self.buffer[:end]))

    def _answer(self, head: bytes) -> None:
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            self._send(Response(HTTPStatus.BAD_REQUEST, b"bad request\n"))
            return
        method, target, _version = parts
        try:
            response = route(self.endpoints, method, target)
        except Exception as exc:  # an endpoint bug must not kill the server
            response = Response(HTTPStatus.INTERNAL_SERVER_ERROR, f"{exc!r}\n".encode())
        self._send(response, head_only=method == "HEAD")

    def _send(self, response: Response, head_only: bool = False) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        assert self.transport is not None
        head = (
            f"HTTP/1.1 {response.status.value} {response.status.phrase}\r\n"
            f"Content-Type: {response.content_type}\r\n"
            f"Content-Length: {len(response.body)}\r\n"
            "Connection: close\r\n\r\n"
        ).encode()
        self.transport.write(head if head_only else head + response.body)
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


async def start_http(listen: Address, endpoints: Endpoints) -> asyncio.Server:
    loop = asyncio.get_running_loop()
    return await loop.create_server(
        lambda: HttpProtocol(endpoints), listen.host, listen.port, reuse_address=True
    )
