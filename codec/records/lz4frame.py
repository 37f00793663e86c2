"""LZ4 frames as Kafka writes them: independent blocks, checked block by block.

Kafka reads frames itself (Lz4BlockInputStream) rather than with a general frame
decoder, and so does this: each block is decompressed alone into a block-sized scratch
buffer, which bounds memory and ignores the frame descriptor checksum that Kafka before
0.10 computed wrongly (KIP-57). The xxHash32 block and content checksums must be there
but are not computed (no native xxHash here): the batch CRC covers the same bytes.
Bytes after the frame are ignored, as Kafka ignores them. Frames with linked blocks, which
Kafka does not write, go to cramjam's frame decoder instead.
"""

from __future__ import annotations

from typing import NamedTuple

import cramjam

from codec.records.bounded import decompress_growing
from codec.records.common import Buffer, error, too_big

_MAGIC = b"\x04\x22\x4d\x18"
_BLOCK_MAX = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}
_VERSION_1 = 0x40
_INDEPENDENT = 0x20
_BLOCK_CHECKSUM = 0x10
_CONTENT_SIZE = 0x08
_CONTENT_CHECKSUM = 0x04
_DICT_ID = 0x01
_RESERVED_FLG = 0x02
_RESERVED_BD = 0x8F
_UNCOMPRESSED = 0x8000_0000


class _Frame(NamedTuple):
    flags: int
    block_max: int
    content_size: int  # -1 when the frame does not say
    data_start: int


def decompress_lz4(data: Buffer, max_bytes: int) -> bytearray:
    view = memoryview(data)
    frame = _read_frame_header(view)
    if frame.content_size > max_bytes:
        raise too_big("lz4", max_bytes)
    if not frame.flags & _INDEPENDENT:
        into = cramjam.lz4.decompress_into
        return decompress_growing("lz4", into, view, max_bytes, frame.content_size)
    return _read_blocks(view, frame, max_bytes)


def _read_frame_header(view: memoryview) -> _Frame:
    if len(view) < 7 or view[:4] != _MAGIC:
        raise error("not an LZ4 frame")
    flags, descriptor = view[4], view[5]
    if flags & 0xC0 != _VERSION_1 or flags & _RESERVED_FLG or descriptor & _RESERVED_BD:
        raise error(f"unsupported LZ4 frame descriptor {flags:#04x} {descriptor:#04x}")
    if flags & _DICT_ID:
        raise error("LZ4 frame needs a dictionary")
    block_max = _BLOCK_MAX.get(descriptor >> 4)
    if block_max is None:
        raise error(f"LZ4 frame block size code {descriptor >> 4} invalid")
    pos = 6
    content_size = -1
    if flags & _CONTENT_SIZE:
        if len(view) < 15:
            raise error("truncated LZ4 frame descriptor")
        content_size = int.from_bytes(view[6:14], "little")
        pos = 14
    # Skip the header checksum byte (see the module docstring).
    return _Frame(flags, block_max, content_size, pos + 1)


def _read_blocks(view: memoryview, frame: _Frame, max_bytes: int) -> bytearray:
    out = bytearray()
    # No block may exceed what we would accept in all: a tiny frame declaring 4 MiB
    # blocks must not make us allocate 4 MiB.
    scratch = bytearray(min(frame.block_max, max_bytes + 1))
    trailer = 4 if frame.flags & _BLOCK_CHECKSUM else 0
    pos = frame.data_start
    while True:
        if len(view) - pos < 4:
            raise error("truncated LZ4 frame")
        word = int.from_bytes(view[pos : pos + 4], "little")
        pos += 4
        if word == 0:
            if frame.flags & _CONTENT_CHECKSUM and len(view) - pos < 4:
                raise error("LZ4 frame ends before its content checksum")
            return out
        size = word & ~_UNCOMPRESSED
        if size > frame.block_max or pos + size + trailer > len(view):
            raise error(f"LZ4 block size {size} invalid")
        block = view[pos : pos + size]
        if word & _UNCOMPRESSED:
            out += block
        else:
            out += _block(block, scratch)
        if len(out) > max_bytes:
            raise too_big("lz4", max_bytes)
        pos += size + trailer


def _block(block: memoryview, scratch: bytearray) -> memoryview:
    try:
        written = cramjam.lz4.decompress_block_into(block, scratch)
    except Exception as exc:  # native library on hostile bytes
        raise error(f"corrupt LZ4 block: {exc}") from exc
    return memoryview(scratch)[:written]
