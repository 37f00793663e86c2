"""Records of a v2 batch (KIP-82 layout, headers included), sliced zero-copy."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from codec.records.batch import BatchHeader
from codec.records.common import error
from codec.records.varint import read_varint, read_varlong

Headers = tuple[tuple[str, memoryview | None], ...]
# offset delta, timestamp delta, key, value, headers, position after the record
_Fields = tuple[int, int, memoryview | None, memoryview | None, Headers, int]


@dataclass(slots=True)
class Record:
    """One record. key, value and header values are views into the batch's bytes (or into
    its decompressed bytes): copy them with bytes() to keep them past the buffer's life."""

    offset: int
    timestamp: int
    key: memoryview | None
    value: memoryview | None
    headers: Headers
    batch: BatchHeader


def iter_v2_records(data: memoryview, pos: int, end: int, header: BatchHeader) -> Iterator[Record]:
    """The header.record_count records in data[pos:end], which they must fill exactly."""
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    # LogAppendTime: the broker's stamp in the batch replaces every record's own.
    log_append_time = header.max_timestamp if header.timestamp_type == 1 else None
    for _ in range(header.record_count):
        offset_delta, timestamp_delta, key, value, headers, pos = _read_record(data, pos, end)
        timestamp = base_timestamp + timestamp_delta if log_append_time is None else log_append_time
        yield Record(base_offset + offset_delta, timestamp, key, value, headers, header)
    if pos != end:
        raise error(f"{end - pos} bytes left after the batch's last record", pos)


def _read_record(data: memoryview, pos: int, end: int) -> _Fields:
    length, pos = read_varint(data, pos, end)
    record_end = pos + length
    if length < 0 or record_end > end:
        raise error(f"record length {length} past the end of its batch", pos)
    # Skip the attributes byte: no record attribute is defined in v2.
    timestamp_delta, pos = read_varlong(data, pos + 1, record_end)
    offset_delta, pos = read_varint(data, pos, record_end)
    key, pos = _read_bytes(data, pos, record_end)
    value, pos = _read_bytes(data, pos, record_end)
    headers, pos = _read_headers(data, pos, record_end)
    if pos != record_end:
        raise error(f"record ends {record_end - pos} bytes after its last header", pos)
    return offset_delta, timestamp_delta, key, value, headers, pos


def _read_bytes(data: memoryview, pos: int, end: int) -> tuple[memoryview | None, int]:
    size, pos = read_varint(data, pos, end)
    if size == -1:
        return None, pos
    if size < 0 or pos + size > end:
        raise error(f"byte field length {size} past the end of its record", pos)
    return data[pos : pos + size], pos + size


def _read_headers(data: memoryview, pos: int, end: int) -> tuple[Headers, int]:
    count, pos = read_varint(data, pos, end)
    if count == 0:
        return (), pos
    if count < 0:
        raise error(f"negative record header count {count}", pos)
    headers = []
    # A hostile count ends the loop soon enough: each header takes at least 2 bytes.
    for _ in range(count):
        key, pos = _read_header_key(data, pos, end)
        value, pos = _read_bytes(data, pos, end)
        headers.append((key, value))
    return tuple(headers), pos


def _read_header_key(data: memoryview, pos: int, end: int) -> tuple[str, int]:
    size, pos = read_varint(data, pos, end)
    if size < 0 or pos + size > end:
        raise error(f"record header key length {size} invalid", pos)
    try:
        key = str(data[pos : pos + size], "utf-8")
    except UnicodeDecodeError as exc:
        raise error("record header key is not UTF-8", pos) from exc
    return key, pos + size
