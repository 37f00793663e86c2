"""Cheap looks into request frames for the proxy's hot path.

These read fixed offsets only: no schema walk, no allocation beyond small ints.
`frame` is the frame body without its 4-byte length prefix.
"""

from __future__ import annotations

import struct

from codec.errors import DecodeError
from codec.generated.api_key import ApiKey

_HEADER_PREFIX = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")

# Produce v9 is the first flexible version (request header v2, compact strings).
_PRODUCE_FIRST_FLEXIBLE = 9


def peek_request(frame: bytes | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a request frame."""
    if len(frame) < 8:
        raise DecodeError("request frame shorter than its header", direction="request", offset=0)
    api_key, api_version, correlation_id = _HEADER_PREFIX.unpack_from(frame, 0)
    return api_key, api_version, correlation_id


def peek_correlation_id(frame: bytes | memoryview) -> int:
    """Correlation id of a response frame (the first field of every response header)."""
    if len(frame) < 4:
        raise DecodeError("response frame shorter than its header", direction="response", offset=0)
    return int.from_bytes(frame[:4], "big", signed=True)


def _uvarint(frame: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(frame):
            raise DecodeError("truncated varint", direction="request", offset=pos)
        byte = frame[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise DecodeError("varint longer than 5 bytes", direction="request", offset=pos)


def _skip(frame: bytes | memoryview, pos: int, size: int) -> int:
    end = pos + size
    if size < 0 or end > len(frame):
        raise DecodeError("length past the end of the frame", direction="request", offset=pos)
    return end


def produce_acks(frame: bytes | memoryview, api_version: int) -> int:
    """The `acks` of a Produce request: 0 means the broker sends no response."""
    pos = _skip(frame, 8, 2)
    (client_id_len,) = _INT16.unpack_from(frame, 8)
    if client_id_len > 0:
        pos = _skip(frame, pos, client_id_len)
    flexible = api_version >= _PRODUCE_FIRST_FLEXIBLE
    if flexible:
        pos = _skip_tagged_fields(frame, pos)
    if api_version >= 3:
        if flexible:
            length_plus_one, pos = _uvarint(frame, pos)
            if length_plus_one > 1:
                pos = _skip(frame, pos, length_plus_one - 1)
        else:
            if pos + 2 > len(frame):
                raise DecodeError("truncated transactional id", direction="request", offset=pos)
            (txn_len,) = _INT16.unpack_from(frame, pos)
            pos += 2
            if txn_len > 0:
                pos = _skip(frame, pos, txn_len)
    if pos + 2 > len(frame):
        raise DecodeError("truncated acks", api_key=ApiKey.PRODUCE, direction="request", offset=pos)
    return int(_INT16.unpack_from(frame, pos)[0])


def _skip_tagged_fields(frame: bytes | memoryview, pos: int) -> int:
    count, pos = _uvarint(frame, pos)
    for _ in range(count):
        _tag, pos = _uvarint(frame, pos)
        size, pos = _uvarint(frame, pos)
        pos = _skip(frame, pos, size)
    return pos
