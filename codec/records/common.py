"""Shared bits of the record readers: the buffer type and the error they raise."""

from __future__ import annotations

from typing import TypeAlias

from codec.errors import DecodeError

Buffer: TypeAlias = bytes | bytearray | memoryview

# The DecodeError `direction` of everything under codec.records: the bytes come from a
# `records` field, whichever request or response carried it.
DIRECTION = "records"


def error(message: str, offset: int | None = None) -> DecodeError:
    return DecodeError(message, direction=DIRECTION, offset=offset)


def relocated(exc: DecodeError, position: int) -> DecodeError:
    """`exc` from inside decompressed bytes, pointed at the wire entry `position` they came
    from: offsets into a decompressed copy mean nothing to a reader of the wire bytes."""
    if exc.offset is not None:
        exc.reason = f"{exc.reason} (decompressed byte {exc.offset})"
    exc.offset = position
    return exc


def as_view(buf: Buffer) -> memoryview:
    """A flat byte view of `buf`, so slices of it are zero-copy."""
    view = memoryview(buf)
    if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
    return view


# Default cap on one decompressed batch (or legacy wrapper). Kafka's own limits on a
# batch (message.max.bytes, 1 MiB by default) bound the compressed size only, so this
# leaves room for highly compressible data while keeping a bomb harmless.
DEFAULT_MAX_BYTES = 64 * 1024 * 1024


def too_big(codec: str, max_bytes: int) -> DecodeError:
    return error(f"{codec} data decompresses to more than {max_bytes} bytes")
