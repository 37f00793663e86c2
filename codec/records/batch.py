"""Record batch headers (magic 2), read without touching the records themselves."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from crc32c import crc32c

from codec.records.common import error

# Indexed by the low three bits of the attributes; ids 5-7 are unassigned.
COMPRESSION_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")

# Every entry of a records field, whatever its magic, starts offset int64, length int32.
LOG_OVERHEAD = 12
MAGIC_OFFSET = 16

_V2 = struct.Struct(">qiibIhiqqqhii")
# _V2's fields in wire order: BatchHeader's after `position`.
V2_FIELDS = (
    "base_offset", "batch_length", "partition_leader_epoch", "magic", "crc", "attributes",
    "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
    "base_sequence", "record_count",
)  # fmt: skip
V2_HEADER_SIZE = _V2.size
# The CRC covers attributes to the end of the batch.
_V2_CRC_START = 21
# Shortest record: length, attributes, timestamp delta, offset delta, key -1, value -1,
# header count, one byte each.
MIN_RECORD_SIZE = 7

_TIMESTAMP_TYPE = 0x08
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_DELETE_HORIZON = 0x40


@dataclass(slots=True)
class BatchHeader:
    """One entry of a records field: a v2 batch, or a legacy (magic 0/1) message.

    For a legacy message the batch-only fields hold Kafka's "none" values
    (partition_leader_epoch, producer_id, producer_epoch, base_sequence: -1; magic 0
    timestamps: -1). An uncompressed legacy message has record_count 1 and
    last_offset_delta 0. A compressed legacy wrapper hides its count inside the
    compressed value, so it reports record_count -1 and last_offset_delta -1 ("unknown"),
    and its base_offset is the wrapper's own offset: the offset of its LAST inner record.
    """

    position: int  # where the entry starts in the records buffer
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def codec(self) -> int:
        return self.attributes & 0x07

    @property
    def compression(self) -> str:
        return COMPRESSION_NAMES[self.attributes & 0x07]

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime, -1 none (magic 0)."""
        if self.magic == 0:
            return -1
        return 1 if self.attributes & _TIMESTAMP_TYPE else 0

    @property
    def is_transactional(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & _TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & _CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & _DELETE_HORIZON)

    @property
    def size(self) -> int:
        """Bytes the entry takes in the records field, offset and length included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def end(self) -> int:
        return self.position + self.batch_length + LOG_OVERHEAD


def field_offsets(packer: struct.Struct, names: tuple[str, ...], prefix: str) -> dict[str, tuple[int, str]]:
    """{prefix + name: (offset, format character)} of a big-endian struct's fields."""
    formats = packer.format.removeprefix(">")
    if len(formats) != len(names) or not formats.isalpha():
        raise ValueError(f"{packer.format} does not name one field a character as {names}")
    return {
        prefix + name: (struct.calcsize(">" + formats[:at]), char)
        for at, (name, char) in enumerate(zip(names, formats, strict=True))
    }


def layout() -> dict[str, tuple[int, str] | int]:
    """What the C walk of these headers (codec/_accel.c's summarize_records) reads, as
    this module describes it: codec/accel.py compares it with the extension's own."""
    return {
        **field_offsets(_V2, V2_FIELDS, "v2."),
        "LOG_OVERHEAD": LOG_OVERHEAD,
        "MAGIC_OFFSET": MAGIC_OFFSET,
        "V2_HEADER_SIZE": V2_HEADER_SIZE,
        "MIN_RECORD_SIZE": MIN_RECORD_SIZE,
        "COMPRESSIONS": len(COMPRESSION_NAMES),
        "TIMESTAMP_TYPE": _TIMESTAMP_TYPE,
        "TRANSACTIONAL": _TRANSACTIONAL,
        "CONTROL": _CONTROL,
        "DELETE_HORIZON": _DELETE_HORIZON,
    }


def read_v2_header(
    view: memoryview, pos: int, batch_length: int, *, verify_crc: bool, max_bytes: int
) -> BatchHeader:
    """The v2 header at `pos`; the caller has checked view holds `batch_length` + 12 bytes."""
    if batch_length < V2_HEADER_SIZE - LOG_OVERHEAD:
        raise error(f"record batch length {batch_length} shorter than its header", pos)
    fields = _V2.unpack_from(view, pos)
    _check_v2(pos, batch_length, fields[5], fields[12], max_bytes)
    header = BatchHeader(pos, *fields)
    if verify_crc:
        actual = crc32c(view[pos + _V2_CRC_START : header.end])
        if actual != header.crc:
            raise error(f"record batch CRC {header.crc:#010x}, computed {actual:#010x}", pos)
    return header


def _check_v2(pos: int, batch_length: int, attributes: int, count: int, max_bytes: int) -> None:
    codec = attributes & 0x07
    if codec >= len(COMPRESSION_NAMES):
        raise error(f"unknown compression id {codec}", pos)
    if count < 0:
        raise error(f"negative record count {count}", pos)
    # A count that cannot fit in the bytes it could decode to is a lie, caught here so
    # cheap summaries never report it.
    room = batch_length + LOG_OVERHEAD - V2_HEADER_SIZE if codec == 0 else max_bytes
    if count > room // MIN_RECORD_SIZE:
        raise error(f"record count {count} does not fit in {room} bytes", pos)
