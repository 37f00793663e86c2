"""Records of legacy messages, including compressed wrappers and their inner sets."""

from __future__ import annotations

from collections.abc import Iterator

from codec.errors import DecodeError
from codec.records.batch import BatchHeader
from codec.records.common import as_view, error, relocated
from codec.records.compression import decompress
from codec.records.legacy import Message, read_message
from codec.records.record import Record


def iter_legacy_records(
    view: memoryview, header: BatchHeader, *, verify_crc: bool, max_bytes: int
) -> Iterator[Record]:
    """The records of the legacy message `header` (one, or the wrapper's inner ones)."""
    # The caller read this message's header already, CRC included when asked.
    _, key, value = read_message(view, header.position, header.end, verify_crc=False)
    if header.codec == 0:
        yield Record(header.base_offset, header.base_timestamp, key, value, (), header)
        return
    if value is None:
        raise error("compressed legacy message without a value", header.position)
    try:
        inner = as_view(decompress(header.codec, value, max_bytes=max_bytes))
        last = _check_inner_messages(inner, header, verify_crc)
    except DecodeError as exc:
        raise relocated(exc, header.position) from None
    yield from _resolve(inner, last, header)


def _check_inner_messages(inner: memoryview, wrapper: BatchHeader, verify_crc: bool) -> Message:
    """Validate every inner message and return the last one, keeping none of the others:
    a small wrapper can inflate to millions of tiny messages."""
    last: Message | None = None
    pos = 0
    while pos < len(inner):
        message = read_message(inner, pos, len(inner), verify_crc=verify_crc)
        inner_header = message[0]
        if inner_header.codec != 0:
            raise error("compressed legacy message nested in another", pos)
        if inner_header.magic != wrapper.magic:
            raise error("legacy inner message magic differs from its wrapper", pos)
        last = message
        pos = inner_header.end
    if last is None:
        raise error("compressed legacy message with no inner message")
    return last


def _resolve(inner: memoryview, last: Message, wrapper: BatchHeader) -> Iterator[Record]:
    """Records with absolute offsets and effective timestamps, read a second time."""
    shift = 0
    if wrapper.magic == 1:
        # Magic 1 inner offsets are relative; the wrapper holds the last absolute one.
        shift = wrapper.base_offset - last[0].base_offset
    log_append = wrapper.timestamp_type == 1
    pos = 0
    while pos < len(inner):
        header, key, value = read_message(inner, pos, len(inner), verify_crc=False)
        timestamp = wrapper.max_timestamp if log_append else header.base_timestamp
        yield Record(header.base_offset + shift, timestamp, key, value, (), wrapper)
        pos = header.end
