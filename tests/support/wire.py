"""Small Kafka requests over raw sockets, encoded with the project's codec.

Frames are encoded once; each send patches a fresh correlation id in place
(bytes 8..12 of a length-prefixed request frame).
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from codec import ApiKey, Request, encode_request

CLIENT_ID = "kafkalens-bench"
API_VERSIONS = ApiKey.API_VERSIONS
METADATA = ApiKey.METADATA
OFFSET_COMMIT = ApiKey.OFFSET_COMMIT
FIND_COORDINATOR = ApiKey.FIND_COORDINATOR
_CORR = struct.Struct(">i")
_SIZE = struct.Struct(">i")
_ZERO_UUID = bytes(16)


@dataclass(frozen=True)
class Template:
    """One request, length prefix included; `frame(n)` gives it with correlation id n."""

    name: str
    data: bytes

    def frame(self, correlation_id: int) -> bytearray:
        out = bytearray(self.data)
        _CORR.pack_into(out, 8, correlation_id)
        return out


def _template(name: str, request: Request) -> Template:
    body = encode_request(request)
    return Template(name, _SIZE.pack(len(body)) + body)


def api_versions() -> Template:
    body = {"client_software_name": "kafkalens-bench", "client_software_version": "1.0"}
    header = {"correlation_id": 0, "client_id": CLIENT_ID}
    return _template("ApiVersions", Request(API_VERSIONS, 3, header, body))


def metadata(topics: list[str] | None) -> Template:
    """Metadata v12 for `topics` (None: every topic)."""
    body = {
        "topics": None if topics is None else [{"topic_id": _ZERO_UUID, "name": t} for t in topics],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    header = {"correlation_id": 0, "client_id": CLIENT_ID}
    return _template("Metadata", Request(METADATA, 12, header, body))


def offset_commit(group: str, topic: str, offset: int = 0) -> Template:
    """OffsetCommit v8 of `offset` for partition 0 of `topic`, as a consumer outside any
    group generation commits (generation -1, no member id: the coordinator accepts it for
    a group with no members). Each request rewrites the same offset: the coordinator
    still appends it to __consumer_offsets."""
    partition = {
        "partition_index": 0,
        "committed_offset": offset,
        "committed_leader_epoch": -1,
        "committed_metadata": "",
    }
    body = {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [{"name": topic, "partitions": [partition]}],
    }
    header = {"correlation_id": 0, "client_id": CLIENT_ID}
    return _template("OffsetCommit", Request(OFFSET_COMMIT, 8, header, body))


def find_coordinator(group: str) -> Template:
    """FindCoordinator v3 for a consumer group: the first one makes the broker create
    __consumer_offsets and load the group's partition (until then OffsetCommit is
    answered NOT_COORDINATOR)."""
    body = {"key": group, "key_type": 0}
    header = {"correlation_id": 0, "client_id": CLIENT_ID}
    return _template("FindCoordinator", Request(FIND_COORDINATOR, 3, header, body))


def connect(host: str, port: int, timeout: float = 10.0) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def roundtrip(sock: socket.socket, frame: bytes | bytearray) -> int:
    """Send one request, read its whole response; the response size (prefix included)."""
    sock.sendall(frame)
    head = _read_exact(sock, 4)
    size = _SIZE.unpack(head)[0]
    _read_exact(sock, size)
    return size + 4


def response_errors(sock: socket.socket, template: Template) -> list[int]:
    """One round trip of `template`; the non-zero error codes anywhere in its decoded
    response (a benchmark of an error path would say nothing about the success path)."""
    from codec import decode_response

    sock.sendall(template.frame(0))
    size = _SIZE.unpack(_read_exact(sock, 4))[0]
    body = _read_exact(sock, size)
    api_key, version = struct.unpack_from(">hh", template.data, 4)
    found: list[int] = []
    _errors(decode_response(body, api_key, version).body, found)
    return found


def _errors(value: object, found: list[int]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "error_code" and item:
                found.append(item)
            else:
                _errors(item, found)
    elif isinstance(value, list):
        for item in value:
            _errors(item, found)


def _read_exact(sock: socket.socket, count: int) -> bytes:
    buf = bytearray(count)
    view = memoryview(buf)
    got = 0
    while got < count:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("connection closed mid-response")
        got += n
    return bytes(buf)
