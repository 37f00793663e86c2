"""Snappy as Kafka clients write it: xerial-framed blocks (the Java client), or raw."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import cramjam

from codec.records.common import Buffer, error, too_big

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
# Magic, then version and minimum compatible version (int32 each), which readers ignore.
_XERIAL_HEADER = 16
_INT32 = struct.Struct(">i")


def decompress_snappy(data: Buffer, max_bytes: int) -> bytearray:
    # Every raw block declares its length up front: check the sum before allocating.
    blocks: list[Buffer] = []
    sizes = []
    total = 0
    for block in _xerial_blocks(data) if _is_xerial(data) else [data]:
        size = _declared_size(block)
        total += size
        if total > max_bytes:
            raise too_big("snappy", max_bytes)
        blocks.append(block)
        sizes.append(size)
    out = bytearray(total)
    with memoryview(out) as view:
        pos = 0
        for block, size in zip(blocks, sizes, strict=True):
            _raw_into(block, view[pos : pos + size])
            pos += size
    return out


def _is_xerial(data: Buffer) -> bool:
    return len(data) >= _XERIAL_HEADER and data[: len(_XERIAL_MAGIC)] == _XERIAL_MAGIC


def _xerial_blocks(data: Buffer) -> Iterator[memoryview]:
    view = memoryview(data)
    pos = _XERIAL_HEADER
    while pos < len(view):
        if len(view) - pos < 4:
            raise error("truncated xerial snappy block length")
        (size,) = _INT32.unpack_from(view, pos)
        pos += 4
        if size < 0 or pos + size > len(view):
            raise error(f"xerial snappy block length {size} invalid")
        yield view[pos : pos + size]
        pos += size


def _declared_size(block: Buffer) -> int:
    if not len(block):
        raise error("empty snappy block")
    try:
        return int(cramjam.snappy.decompress_raw_len(block))
    except Exception as exc:  # native library on hostile bytes
        raise error(f"corrupt snappy data: {exc}") from exc


def _raw_into(block: Buffer, out: memoryview) -> None:
    try:
        written = cramjam.snappy.decompress_raw_into(block, out)
    except Exception as exc:  # native library on hostile bytes
        raise error(f"corrupt snappy data: {exc}") from exc
    if written != len(out):
        raise error(f"snappy block gave {written} bytes, declared {len(out)}")
