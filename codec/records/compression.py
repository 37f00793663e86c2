"""Bounded decompression of record data: gzip, snappy, lz4, zstd."""

from __future__ import annotations

import cramjam

from codec.records.batch import COMPRESSION_NAMES
from codec.records.bounded import decompress_growing
from codec.records.common import DEFAULT_MAX_BYTES, Buffer, error, too_big
from codec.records.lz4frame import decompress_lz4
from codec.records.snappy import decompress_snappy

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ZSTD_DICT_ID_SIZES = (0, 1, 2, 4)
_GZIP_TRAILER = 8
_GZIP_MIN = 18


def decompress(
    codec: int | str, data: Buffer, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> bytes | bytearray:
    """`data` decompressed with `codec` (an id or one of COMPRESSION_NAMES).

    Never yields more than max_bytes, nor allocates much more on the way: more output
    is a DecodeError, as is any corrupt input.
    """
    codec_id = COMPRESSION_NAMES.index(codec) if isinstance(codec, str) else codec
    if codec_id == 0:
        if len(data) > max_bytes:
            raise too_big("uncompressed", max_bytes)
        return bytes(data)
    if codec_id == 1:
        return _gzip(data, max_bytes)
    if codec_id == 2:
        return decompress_snappy(data, max_bytes)
    if codec_id == 3:
        return decompress_lz4(data, max_bytes)
    if codec_id == 4:
        return _zstd(data, max_bytes)
    raise error(f"unknown compression id {codec_id}")


def _gzip(data: Buffer, max_bytes: int) -> bytearray:
    # ISIZE, the last member's size mod 2**32: exact for the single member Kafka writes.
    hint = -1
    if len(data) >= _GZIP_MIN:
        hint = int.from_bytes(data[len(data) - 4 :], "little")
    return decompress_growing("gzip", cramjam.gzip.decompress_into, data, max_bytes, hint)


def _zstd(data: Buffer, max_bytes: int) -> bytearray:
    hint = _zstd_content_size(memoryview(data))
    return decompress_growing("zstd", cramjam.zstd.decompress_into, data, max_bytes, hint)


def _zstd_content_size(view: memoryview) -> int:
    """The first frame's declared content size, -1 if it has none (RFC 8878 3.1.1.1)."""
    if len(view) < 6 or view[:4] != _ZSTD_MAGIC:
        return -1
    descriptor = view[4]
    single_segment = bool(descriptor & 0x20)
    pos = 5 + (0 if single_segment else 1) + _ZSTD_DICT_ID_SIZES[descriptor & 0x03]
    size = (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
    if size == 0 or len(view) < pos + size:
        return -1
    value = int.from_bytes(view[pos : pos + size], "little")
    return value + 256 if size == 2 else value
