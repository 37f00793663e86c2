"""Walking the entries of a records field: v2 batches and legacy messages, headers only."""

from __future__ import annotations

import struct
from collections.abc import Iterator

from codec.records.batch import LOG_OVERHEAD, MAGIC_OFFSET, BatchHeader, read_v2_header
from codec.records.common import DEFAULT_MAX_BYTES, Buffer, as_view, error
from codec.records.legacy import read_legacy_header

_INT32 = struct.Struct(">i")
# Up to and including the magic byte: enough to know how to read the rest.
_PREFIX = MAGIC_OFFSET + 1


def iter_batches(
    buf: Buffer,
    *,
    verify_crc: bool = False,
    allow_partial_tail: bool = False,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Iterator[BatchHeader]:
    """The header of every entry in a records field, in order, without decompressing.

    A Fetch response may end with the first part of a batch (the broker cuts at its size
    limit): pass allow_partial_tail=True there to stop quietly at it. Anywhere else a
    short entry is a DecodeError. verify_crc checks CRC-32C (v2) or CRC-32 (legacy).
    max_bytes is the decompression limit: a compressed batch claiming more records than
    that many bytes could hold is rejected here already.
    """
    view = as_view(buf)
    size = len(view)
    pos = 0
    while pos < size:
        length = _entry_length(view, pos, size, allow_partial_tail)
        if length < 0:
            return
        magic = view[pos + MAGIC_OFFSET]
        if magic == 2:
            yield read_v2_header(view, pos, length, verify_crc=verify_crc, max_bytes=max_bytes)
        elif magic < 2:
            yield read_legacy_header(view, pos, length, verify_crc=verify_crc)
        else:
            raise error(f"unknown record magic {magic}", pos)
        pos += LOG_OVERHEAD + length


def _entry_length(view: memoryview, pos: int, size: int, allow_partial_tail: bool) -> int:
    """The length field of the entry at `pos`, or -1 for a tolerated partial tail."""
    if size - pos < LOG_OVERHEAD:
        return _partial(pos, allow_partial_tail)
    (length,) = _INT32.unpack_from(view, pos + 8)
    # No entry is shorter than magic plus what precedes it; such a length is corruption
    # even in a tail, never a cut.
    if length < _PREFIX - LOG_OVERHEAD:
        raise error(f"record batch length {length} invalid", pos)
    if size - pos - LOG_OVERHEAD < length:
        return _partial(pos, allow_partial_tail)
    return length


def _partial(pos: int, allow_partial_tail: bool) -> int:
    if allow_partial_tail:
        return -1
    raise error("records end inside a batch", pos)
