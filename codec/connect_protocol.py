"""Kafka Connect's group protocol: the opaque JoinGroup metadata and SyncGroup assignment.

Used when a group's ProtocolType is ``"connect"``. Layouts follow Kafka's
connect/runtime/.../distributed/ConnectProtocol.java (protocol "default", version 0) and
IncrementalCooperativeConnectProtocol.java (protocols "compatible" and "sessioned",
versions 1 and 2, the same layout; v2 only signals KIP-507 session keys), read through the
`search` tool. All integers are big-endian; strings are int16-length UTF-8, arrays and
bytes int32-length.

    metadata v0:    version int16, url string, config_offset int64
    metadata v1+:   ... then allocation nullable-bytes (the worker's previous assignment,
                    itself a v1+ assignment with its own version header)
    assignment v0:  version int16, error int16, leader string, leader_url string,
                    config_offset int64, assignment [connector string, tasks [int32]]
    assignment v1+: ... assignment nullable-array, revoked nullable-array, delay int32

As in Kafka: the version picks the layout (versions above 2 are read as v1, as Kafka's
forward-compatible reader does); v1+ fields from allocation onwards and from assignment
onwards may be missing at the end of the buffer, taking their defaults (null, null, 0);
trailing bytes are ignored; invalid UTF-8 is replaced, not refused (Java's String
decoding). A task id of `CONNECTOR_TASK` means the connector instance itself.

Keys are Kafka's field names in snake_case (``leader-url`` -> ``leader_url``).
"""

from __future__ import annotations

import struct
from typing import Any

from codec.errors import DecodeError

CONNECTOR_TASK = -1

_DIRECTION = "connect"
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
# Smallest encodings, to bound an array's count by the bytes left before building it.
_MIN_CONNECTOR_ASSIGNMENT = 2 + 4  # empty connector name + empty tasks array
_MIN_TASK = 4


class _Reader:
    """Bounds-checked big-endian reads; errors carry absolute offsets."""

    __slots__ = ("_data", "_pos", "_base")

    def __init__(self, data: bytes | memoryview, base: int = 0) -> None:
        self._data = memoryview(data).cast("B") if isinstance(data, memoryview) else data
        self._pos = 0
        self._base = base

    def remaining(self) -> int:
        return len(self._data) - self._pos

    def offset(self) -> int:
        return self._base + self._pos

    def error(self, message: str, offset: int | None = None) -> DecodeError:
        where = self.offset() if offset is None else offset
        return DecodeError(message, direction=_DIRECTION, offset=where)

    def _take(self, size: int, what: str) -> int:
        if size > self.remaining():
            raise self.error(f"{what} needs {size} bytes, {self.remaining()} left")
        start = self._pos
        self._pos += size
        return start

    def int16(self, what: str) -> int:
        return int(_INT16.unpack_from(self._data, self._take(2, what))[0])

    def int32(self, what: str) -> int:
        return int(_INT32.unpack_from(self._data, self._take(4, what))[0])

    def int64(self, what: str) -> int:
        return int(_INT64.unpack_from(self._data, self._take(8, what))[0])

    def string(self, what: str) -> str:
        size = self.int16(what)
        if size < 0:
            raise self.error(f"{what} has negative length {size}")
        start = self._take(size, what)
        return bytes(self._data[start : start + size]).decode("utf-8", "replace")

    def nullable_bytes(self, what: str) -> tuple[memoryview, int] | None:
        """The bytes and their absolute offset, or None for a null (negative length)."""
        size = self.int32(what)
        if size < 0:
            return None
        start = self._take(size, what)
        return memoryview(self._data)[start : start + size], self._base + start

    def array_count(self, what: str, min_item: int, *, nullable: bool) -> int:
        """The element count, or -1 for a null array (only when `nullable`)."""
        count = self.int32(what)
        if count < 0:
            if nullable:
                return -1
            raise self.error(f"{what} has negative count {count}")
        if count * min_item > self.remaining():
            raise self.error(f"{what} count {count} exceeds the {self.remaining()} bytes left")
        return count


def decode_connect_metadata(data: bytes | memoryview) -> dict[str, Any]:
    """A worker's JoinGroup metadata: version, url, config_offset (and allocation for v1+)."""
    reader = _Reader(data)
    version = _version(reader)
    metadata: dict[str, Any] = {
        "version": version,
        "url": reader.string("url"),
        "config_offset": reader.int64("config_offset"),
    }
    if version >= 1:
        metadata["allocation"] = _allocation(reader)
    return metadata


def decode_connect_assignment(data: bytes | memoryview) -> dict[str, Any]:
    """The leader's SyncGroup assignment for one worker."""
    reader = _Reader(data)
    return _assignment(reader, _version(reader))


def _version(reader: _Reader) -> int:
    start = reader.offset()
    version = reader.int16("version")
    if version < 0:
        raise reader.error(f"unsupported connect protocol version {version}", start)
    return version


def _allocation(reader: _Reader) -> dict[str, Any] | None:
    # A tolerated missing field (default null) or an explicit null: no previous assignment.
    if not reader.remaining():
        return None
    found = reader.nullable_bytes("allocation")
    if found is None:
        return None
    raw, offset = found
    inner = _Reader(raw, base=offset)
    # Kafka reads the embedded assignment with the v1 layout whatever its version says.
    return _assignment(inner, _version(inner), incremental=True)


def _assignment(
    reader: _Reader, version: int, *, incremental: bool | None = None
) -> dict[str, Any]:
    if incremental is None:
        incremental = version >= 1
    result: dict[str, Any] = {
        "version": version,
        "error": reader.int16("error"),
        "leader": reader.string("leader"),
        "leader_url": reader.string("leader_url"),
        "config_offset": reader.int64("config_offset"),
    }
    if not incremental:
        result["assignment"] = _connector_assignments(reader, "assignment", nullable=False)
        return result
    result["assignment"] = _tolerated(reader, "assignment")
    result["revoked"] = _tolerated(reader, "revoked")
    result["delay"] = reader.int32("delay") if reader.remaining() else 0
    return result


def _tolerated(reader: _Reader, what: str) -> list[dict[str, Any]] | None:
    if not reader.remaining():
        return None
    return _connector_assignments(reader, what, nullable=True)


def _connector_assignments(
    reader: _Reader, what: str, *, nullable: bool
) -> list[dict[str, Any]] | None:
    count = reader.array_count(what, _MIN_CONNECTOR_ASSIGNMENT, nullable=nullable)
    if count < 0:
        return None
    return [_connector_assignment(reader, what) for _ in range(count)]


def _connector_assignment(reader: _Reader, what: str) -> dict[str, Any]:
    connector = reader.string(f"{what} connector")
    count = reader.array_count(f"{what} tasks", _MIN_TASK, nullable=False)
    return {"connector": connector, "tasks": [reader.int32("task") for _ in range(count)]}
