"""Primitive wire helpers of the interpreters (codec/interpreter.py, codec/_accel.c)."""

from __future__ import annotations

import struct
from functools import lru_cache
from uuid import UUID

from codec.errors import DecodeError, EncodeError
from codec.schema import ZERO_UUID

INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
# Unknown tagged fields kept per struct; more is hostile (each costs a tuple).
MAX_UNKNOWN_TAGS = 1024
# Struct, string and bytes array elements one decode may create: bounds the memory a
# small hostile frame can make us allocate (a 1-byte element costs a ~200-byte dict).
DEFAULT_ELEMENT_BUDGET = 500_000


def short(pos: int, what: str = "value") -> DecodeError:
    return DecodeError(f"{what} runs past the end of the buffer", offset=pos)


def invalid(pos: int, what: str) -> DecodeError:
    return DecodeError(what, offset=pos)


def read_uvarint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    """Unsigned varint (at most 5 bytes, as Kafka's 32-bit unsigned varints)."""
    if pos >= end:
        raise short(pos, "varint")
    byte = buf[pos]
    if byte < 0x80:
        return byte, pos + 1
    result = byte & 0x7F
    shift = 7
    pos += 1
    while True:
        if pos >= end:
            raise short(pos, "varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise invalid(pos, "varint longer than 5 bytes")


_SMALL_UVARINTS = [bytes([n]) for n in range(128)]


def write_uvarint(value: int) -> bytes:
    if value < 128:
        return _SMALL_UVARINTS[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@lru_cache(maxsize=8192)
def uuid_of(raw: bytes) -> UUID:
    # Topic ids repeat in every Metadata and Fetch; a UUID is immutable, so share them.
    if raw == b"\x00" * 16:
        return ZERO_UUID
    return UUID(bytes=raw)


def uuid_bytes(value: UUID | bytes) -> bytes:
    if isinstance(value, UUID):
        return value.bytes
    if not isinstance(value, bytes | bytearray | memoryview) or len(value) != 16:
        raise EncodeError(f"a uuid must be a UUID or 16 bytes, got {type(value).__name__}")
    return bytes(value)

