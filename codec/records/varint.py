"""Zig-zag varints of record format v2 (as Kafka's ByteUtils reads them)."""

from __future__ import annotations

from codec.records.common import Buffer, error

_INT32_MAX_BYTES = 5
_INT64_MAX_BYTES = 10
_MASK32 = 0xFFFF_FFFF
_MASK64 = 0xFFFF_FFFF_FFFF_FFFF


def read_varint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    """The zig-zag int32 at `pos`, reading nothing at or past `end`: (value, next pos)."""
    # One or two bytes is the common case (lengths and deltas below 8192): few opcodes.
    if pos + 1 < end:
        byte = buf[pos]
        if byte < 0x80:
            return (byte >> 1) ^ -(byte & 1), pos + 1
        second = buf[pos + 1]
        if second < 0x80:
            raw = (byte & 0x7F) | (second << 7)
            return (raw >> 1) ^ -(raw & 1), pos + 2
    raw, pos = _read_unsigned(buf, pos, end, _INT32_MAX_BYTES)
    # Bits past 32 in a 5th byte are dropped, as Java's int arithmetic drops them.
    raw &= _MASK32
    return (raw >> 1) ^ -(raw & 1), pos


def read_varlong(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    """The zig-zag int64 at `pos`, reading nothing at or past `end`: (value, next pos)."""
    if pos < end:
        byte = buf[pos]
        if byte < 0x80:
            return (byte >> 1) ^ -(byte & 1), pos + 1
    raw, pos = _read_unsigned(buf, pos, end, _INT64_MAX_BYTES)
    raw &= _MASK64
    return (raw >> 1) ^ -(raw & 1), pos


def _read_unsigned(buf: Buffer, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    start = pos
    stop = min(end, pos + max_bytes)
    result = 0
    shift = 0
    while pos < stop:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
    if pos >= end:
        raise error("truncated varint", start)
    raise error(f"varint longer than {max_bytes} bytes", start)
