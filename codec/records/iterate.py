"""Every record of a records field, decompressing batches as needed."""

from __future__ import annotations

from collections.abc import Iterator

from codec.errors import DecodeError
from codec.records.batch import V2_HEADER_SIZE, BatchHeader
from codec.records.common import DEFAULT_MAX_BYTES, Buffer, as_view, relocated
from codec.records.compression import decompress
from codec.records.framing import iter_batches
from codec.records.record import Record, iter_v2_records
from codec.records.wrapped import iter_legacy_records


def iter_records(
    buf: Buffer,
    *,
    verify_crc: bool = False,
    allow_partial_tail: bool = False,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Iterator[Record]:
    """Every record in a records field, batch by batch (see iter_batches for the flags).

    max_bytes bounds each batch's decompressed size. Key and value views point into
    `buf` or into a batch's decompressed copy.
    """
    view = as_view(buf)
    batches = iter_batches(
        view, verify_crc=verify_crc, allow_partial_tail=allow_partial_tail, max_bytes=max_bytes
    )
    for header in batches:
        yield from batch_records(view, header, verify_crc=verify_crc, max_bytes=max_bytes)


def batch_records(
    view: memoryview,
    header: BatchHeader,
    *,
    verify_crc: bool = False,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Iterator[Record]:
    """The records of one entry that iter_batches found in `view`."""
    if header.magic < 2:
        yield from iter_legacy_records(view, header, verify_crc=verify_crc, max_bytes=max_bytes)
        return
    if header.codec == 0:
        yield from iter_v2_records(view, header.position + V2_HEADER_SIZE, header.end, header)
        return
    if header.record_count == 0:
        # As Kafka does: an empty compressed batch is never decompressed.
        return
    body = view[header.position + V2_HEADER_SIZE : header.end]
    try:
        data = as_view(decompress(header.codec, body, max_bytes=max_bytes))
        yield from iter_v2_records(data, 0, len(data), header)
    except DecodeError as exc:
        raise relocated(exc, header.position) from None
