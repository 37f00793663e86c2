"""Decompressing into preallocated buffers that grow, never past a byte limit."""

from __future__ import annotations

from collections.abc import Callable

from codec.records.common import Buffer, error, too_big

# cramjam's message when the output buffer is full and input remains.
_OUTPUT_FULL = "failed to write whole buffer"
_GROWTH = 4
_MIN_GUESS = 64 * 1024
# Compression ratio assumed when no size hint is known.
_RATIO_GUESS = 8

DecompressInto = Callable[[Buffer, bytearray], int]


def decompress_growing(
    name: str, into: DecompressInto, data: Buffer, max_bytes: int, hint: int = -1
) -> bytearray:
    """`into(data, out)` with out ever larger (hint first), up to max_bytes + 1 bytes.

    cramjam's *_into functions stop when `out` is full, so memory stays bounded by the
    buffer we hand them; the extra byte tells "exactly max_bytes" from "more".
    """
    if hint > max_bytes:
        raise too_big(name, max_bytes)
    guess = hint if hint >= 0 else max(_MIN_GUESS, _RATIO_GUESS * len(data))
    size = min(guess, max_bytes) + 1
    while True:
        out = bytearray(size)
        try:
            written = into(data, out)
        except Exception as exc:  # a native library on hostile bytes: any failure is theirs
            if _OUTPUT_FULL not in str(exc):
                raise error(f"corrupt {name} data: {exc}") from exc
            if size > max_bytes:
                raise too_big(name, max_bytes) from exc
            size = min(size * _GROWTH, max_bytes + 1)
            continue
        if written > max_bytes:
            raise too_big(name, max_bytes)
        del out[written:]
        return out
