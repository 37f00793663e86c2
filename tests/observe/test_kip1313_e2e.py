"""KIP-1313 through the real proxy: request header v3 frames over a socket.

The frames are the KIP's own new versions (OffsetDelete v1, GetTelemetrySubscriptions
v1, PushTelemetry v1), encoded from its schema (codec/kip1313). tansu knows none of
them, so a scripted broker answers, and records what reached it: `reject` must answer
in the broker's place, never forwarding.
"""

from __future__ import annotations

import socket
import struct
import uuid
from pathlib import Path
from typing import Any

from support.observed import ObservedProxy
from support.proxy_harness import FakeBroker, is_closed, read_frame, write_frame

from codec import Request, Response, decode_response, encode_request, encode_response
from codec.error_codes import INVALID_REQUEST
from proxy.observe.identity import kafka_uuid_text

OFFSET_DELETE, METADATA, GET_TELEMETRY, PUSH_TELEMETRY = 47, 3, 71, 72
FIRST = uuid.UUID("0f1e2d3c-4b5a-4697-8877-665544332211")
OTHER = uuid.UUID("99999999-8888-4777-8666-555555555555")
BODIES: dict[int, dict[str, Any]] = {
    OFFSET_DELETE: {"group_id": "g", "topics": []},
    GET_TELEMETRY: {},
    PUSH_TELEMETRY: {"subscription_id": 1, "terminating": False, "compression_type": 0,
                     "metrics": b""},
    METADATA: {"topics": [], "allow_auto_topic_creation": False,
               "include_topic_authorized_operations": False},
}  # fmt: skip


def frame(api_key: int, version: int, corr: int, instance: uuid.UUID | None) -> bytes:
    header: dict[str, Any] = {"correlation_id": corr, "client_id": "kip-client"}
    if instance is not None:
        header["client_instance_id"] = instance
    body = encode_request(Request(api_key, version, header, BODIES[api_key]))
    return struct.pack(">i", len(body)) + body


class RecordingBroker(FakeBroker):
    """Answers every request with its response's defaults; remembers (api, corr)."""

    def __init__(self) -> None:
        super().__init__(self.serve)
        self.seen: list[tuple[int, int]] = []

    def serve(self, sock: socket.socket) -> None:
        while True:
            request = read_frame(sock)
            api_key, version, corr = struct.unpack_from(">hhi", request)
            self.seen.append((api_key, corr))
            answer = Response(api_key, version, {"correlation_id": corr}, {})
            write_frame(sock, encode_response(answer))


def answer(sock: socket.socket, api_key: int, version: int) -> Response:
    return decode_response(read_frame(sock), api_key, version)


def violations(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if line["event"] == "kip1313_violation"]


def test_log_mode_logs_the_id_and_every_violation(tmp_path: Path) -> None:
    broker = RecordingBroker()
    with (
        broker,
        ObservedProxy(broker.address, tmp_path / "requests.log", "log") as px,
        socket.create_connection(("127.0.0.1", px.port), timeout=10) as sock,
    ):
        sock.sendall(frame(OFFSET_DELETE, 1, 1, FIRST) + frame(GET_TELEMETRY, 1, 2, FIRST))
        assert answer(sock, OFFSET_DELETE, 1).body["error_code"] == 0
        assert answer(sock, GET_TELEMETRY, 1).body["error_code"] == 0
        sock.sendall(frame(PUSH_TELEMETRY, 1, 3, OTHER) + frame(METADATA, 12, 4, None))
        assert answer(sock, PUSH_TELEMETRY, 1).correlation_id == 3  # forwarded all the same
        assert answer(sock, METADATA, 12).correlation_id == 4
        [client] = px.http_clients()
        assert client["identity"]["client_instance_id"] == kafka_uuid_text(FIRST)
        metrics = px.metrics()
        assert metrics.value("kafkalens_client_instances") == 1
        assert metrics.value("kafkalens_kip1313_violations_total", action="logged") == 2
    lines = px.lines()
    assert sorted(broker.seen) == [(3, 4), (47, 1), (71, 2), (72, 3)]
    requests = [line for line in lines if line["event"] == "request"]
    assert [r["correlation_id"] for r in requests] == [1, 2, 3, 4]
    assert {r["client_instance_id"] for r in requests} == {kafka_uuid_text(FIRST)}  # the first id
    logged = violations(lines)
    assert [(v["api"], v["correlation_id"], v["action"]) for v in logged] == [
        ("PushTelemetry", 3, "logged"),
        ("Metadata", 4, "logged"),
    ]
    assert "differs" in logged[0]["reason"] and "without" in logged[1]["reason"]
    assert all(v["client_instance_id"] == kafka_uuid_text(FIRST) for v in logged)


def test_reject_mode_answers_invalid_request_and_never_forwards(tmp_path: Path) -> None:
    broker = RecordingBroker()
    with (
        broker,
        ObservedProxy(broker.address, tmp_path / "requests.log", "reject") as px,
        socket.create_connection(("127.0.0.1", px.port), timeout=10) as sock,
    ):
        # pipelined: the proxy's answer to 2 must come after the broker's to 1
        sock.sendall(frame(OFFSET_DELETE, 1, 1, FIRST) + frame(PUSH_TELEMETRY, 1, 2, OTHER))
        assert answer(sock, OFFSET_DELETE, 1).correlation_id == 1
        rejected = answer(sock, PUSH_TELEMETRY, 1)
        assert (rejected.correlation_id, rejected.body["error_code"]) == (2, INVALID_REQUEST)
        sock.sendall(frame(OFFSET_DELETE, 0, 3, None))  # header v1: no id at all
        rejected = answer(sock, OFFSET_DELETE, 0)
        assert (rejected.correlation_id, rejected.body["error_code"]) == (3, INVALID_REQUEST)
        sock.sendall(frame(GET_TELEMETRY, 1, 4, FIRST))  # still open, still forwarding
        assert answer(sock, GET_TELEMETRY, 1).body["error_code"] == 0
        # Metadata has no top-level error code to carry INVALID_REQUEST: closed instead
        sock.sendall(frame(METADATA, 12, 5, None))
        assert is_closed(sock, timeout=10)
        px.wait_all_closed()
        metrics = px.metrics()
        assert metrics.value("kafkalens_kip1313_violations_total", action="rejected") == 3
        assert metrics.value("kafkalens_connections_closed_total", reason="rejected") == 1
    assert sorted(broker.seen) == [(47, 1), (71, 4)]
    lines = px.lines()
    assert [(v["api"], v["correlation_id"], v["action"]) for v in violations(lines)] == [
        ("PushTelemetry", 2, "rejected"),
        ("OffsetDelete", 3, "rejected"),
        ("Metadata", 5, "rejected"),
    ]
    requests = [line for line in lines if line["event"] == "request"]
    forwarded = [r for r in requests if r["correlation_id"] in (1, 4)]
    assert {r["client_instance_id"] for r in forwarded} == {kafka_uuid_text(FIRST)}
