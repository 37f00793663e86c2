"""Records of a v2 batch (KIP-82 layout, headers included), sliced zero-copy."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from codec.records.batch import BatchHeader
from codec.records.common import error
from codec.records.varint import read_varint, read_varlong

Headers = tuple[tuple[str, memoryview | None], ...]


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
    for _ in range(header.record_count):
        record, pos = _read_record(data, pos, end, header)
        yield record
    if pos != end:
        raise error(f"{end - pos} bytes left after the batch's last record", pos)


def _read_record(data: memoryview, pos: int, end: int, header: BatchHeader) -> tuple[Record, int]:
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
    if header.timestamp_type == 1:
        # LogAppendTime: the broker's stamp in the batch replaces every record's own.
        timestamp = header.max_timestamp
    else:
        timestamp = header.base_timestamp + timestamp_delta
    offset = header.base_offset + offset_delta
    return Record(offset, timestamp, key, value, headers, header), pos


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
