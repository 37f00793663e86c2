"""Legacy messages (magic 0 and 1): their headers, and whole messages with key and value."""

from __future__ import annotations

import struct
import zlib

from codec.records.batch import LOG_OVERHEAD, MAGIC_OFFSET, BatchHeader, field_offsets
from codec.records.common import error

_V0 = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_V1 = struct.Struct(">qiIbbq")  # ... and timestamp
_INT32 = struct.Struct(">i")
# Bytes from the crc to the value length, both length fields included.
_MIN_SIZE = (14, 22)
_KEY_AT = (_V0.size, _V1.size)
# Legacy magics know none, gzip, snappy and lz4; zstd came with v2.
_CODECS = 4

Message = tuple[BatchHeader, memoryview | None, memoryview | None]


def layout() -> dict[str, tuple[int, str] | int]:
    """What the C walk of legacy headers (codec/_accel.c's summarize_records) reads, as
    this module describes it (magic 0's fields are magic 1's but the timestamp)."""
    names = ("offset", "size", "crc", "magic", "attributes", "timestamp")
    v1 = field_offsets(_V1, names, "legacy.")
    if field_offsets(_V0, names[:-1], "legacy.").items() - v1.items():
        raise ValueError("magic 0's fields are not magic 1's first ones")
    return {
        **v1,
        "LEGACY_COMPRESSIONS": _CODECS,
        "LEGACY_MIN_SIZE_0": _MIN_SIZE[0],
        "LEGACY_MIN_SIZE_1": _MIN_SIZE[1],
    }


def read_legacy_header(view: memoryview, pos: int, size: int, *, verify_crc: bool) -> BatchHeader:
    """The message at `pos`, of `size` bytes after offset and size, all inside `view`."""
    if size < _MIN_SIZE[0]:
        raise error(f"legacy message size {size} too small", pos)
    magic = view[pos + MAGIC_OFFSET]
    if magic > 1 or size < _MIN_SIZE[magic]:
        raise error(f"legacy message of magic {magic} and size {size}", pos)
    if magic == 0:
        offset, _, crc, _, attributes = _V0.unpack_from(view, pos)
        timestamp = -1
    else:
        offset, _, crc, _, attributes, timestamp = _V1.unpack_from(view, pos)
    if attributes & 0x07 >= _CODECS:
        raise error(f"legacy message with compression id {attributes & 0x07}", pos)
    end = pos + LOG_OVERHEAD + size
    if verify_crc:
        actual = zlib.crc32(view[pos + MAGIC_OFFSET : end])
        if actual != crc:
            raise error(f"legacy message CRC {crc:#010x}, computed {actual:#010x}", pos)
    # A compressed wrapper's record count and last offset are unknown until decompressed.
    unknown = attributes & 0x07 != 0
    count, last_delta = (-1, -1) if unknown else (1, 0)
    return BatchHeader(
        pos, offset, size, -1, magic, crc, attributes, last_delta, timestamp, timestamp,
        -1, -1, -1, count,
    )  # fmt: skip


def read_message(view: memoryview, pos: int, limit: int, *, verify_crc: bool) -> Message:
    """The whole message at `pos`, which must end at or before `limit`."""
    if limit - pos < LOG_OVERHEAD:
        raise error("truncated legacy message", pos)
    (size,) = _INT32.unpack_from(view, pos + 8)
    end = pos + LOG_OVERHEAD + size
    if size < 0 or end > limit:
        raise error(f"legacy message size {size} past the end of its message set", pos)
    header = read_legacy_header(view, pos, size, verify_crc=verify_crc)
    key, at = _read_bytes(view, pos + _KEY_AT[header.magic], end)
    value, at = _read_bytes(view, at, end)
    if at != end:
        raise error(f"legacy message has {end - at} bytes after its value", at)
    return header, key, value


def _read_bytes(view: memoryview, pos: int, end: int) -> tuple[memoryview | None, int]:
    if end - pos < 4:
        raise error("truncated legacy message", pos)
    (size,) = _INT32.unpack_from(view, pos)
    pos += 4
    if size == -1:
        return None, pos
    if size < 0 or pos + size > end:
        raise error(f"legacy key or value length {size} invalid", pos)
    return view[pos : pos + size], pos + size
