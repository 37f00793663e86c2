"""Test-only record encoders: kafka-python's builders, an independent implementation.

kafka-python looks for python-snappy, lz4, zstandard and xxhash, none installed here;
`kafka_codecs()` lends it cramjam-backed stand-ins while a builder runs. The framing
(xerial blocks, LZ4 frames, the KIP-57 broken header checksum) stays kafka-python's.
Also the records the records tests build batches of (`make_specs`) and a buffer of every
kind of entry (`MIXED`).
"""

from __future__ import annotations

import contextlib
import struct
import zlib
from collections.abc import Iterator, Sequence
from types import SimpleNamespace
from unittest import mock

import cramjam
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
HeaderList = list[tuple[str, bytes | None]]
# (timestamp, key, value, headers)
Spec = tuple[int, bytes | None, bytes | None, HeaderList]


def _xxh32(data: bytes) -> SimpleNamespace:
    """xxHash32, seed 0, short inputs only: what lz4_encode_old_kafka hashes (<16 bytes)."""
    assert len(data) < 16
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    mask = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask

    h = (p5 + len(data)) & mask
    pos = 0
    while pos + 4 <= len(data):
        h = rotl((h + int.from_bytes(data[pos : pos + 4], "little") * p3) & mask, 17) * p4 & mask
        pos += 4
    for byte in data[pos:]:
        h = rotl((h + byte * p5) & mask, 11) * p1 & mask
    h ^= h >> 15
    h = h * p2 & mask
    h ^= h >> 13
    h = h * p3 & mask
    h ^= h >> 16
    return SimpleNamespace(digest=lambda: h.to_bytes(4, "big"))


def _lz4_frame(payload: bytes, **_: object) -> bytes:
    # Independent blocks, as Kafka's own writer makes them.
    compressor = cramjam.lz4.Compressor(block_linked=False)
    compressor.compress(bytes(payload))
    return bytes(compressor.finish())


@contextlib.contextmanager
def kafka_codecs() -> Iterator[None]:
    snappy = SimpleNamespace(compress=lambda b: bytes(cramjam.snappy.compress_raw(bytes(b))))
    zstd = SimpleNamespace(
        ZstdCompressor=lambda: SimpleNamespace(compress=lambda b: bytes(cramjam.zstd.compress(b)))
    )
    lz4 = SimpleNamespace(compress=_lz4_frame)
    xxhash = SimpleNamespace(xxh32=_xxh32)
    with (
        mock.patch.multiple("kafka.codec", snappy=snappy, zstd=zstd, lz4=lz4, xxhash=xxhash),
        mock.patch("kafka.codec.lz4_encode", _lz4_frame),
        mock.patch("kafka.record.default_records.lz4_encode", _lz4_frame),
        mock.patch("kafka.record.legacy_records.lz4_encode", _lz4_frame),
    ):
        yield


def build_v2(
    specs: Sequence[Spec],
    *,
    compression: str = "none",
    producer: tuple[int, int, int] = (-1, -1, -1),
    transactional: bool = False,
    base_offset: int = 0,
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=CODECS[compression],
        is_transactional=transactional,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        batch_size=1 << 30,
    )
    for delta, (timestamp, key, value, headers) in enumerate(specs):
        builder.append(delta, timestamp=timestamp, key=key, value=value, headers=headers)
    with kafka_codecs():
        batch = bytearray(builder.build())
    struct.pack_into(">q", batch, 0, base_offset)  # outside the CRC
    return bytes(batch)


def build_legacy(
    specs: Sequence[Spec], *, magic: int, compression: str = "none", base_offset: int = 0
) -> bytes:
    """A magic 0/1 message set. Uncompressed: one message per spec at base_offset + i.
    Compressed: one wrapper (offset base_offset + n - 1, as a broker writes it) whose inner
    offsets are absolute for magic 0 and relative (0..n-1) for magic 1."""
    builder = LegacyRecordBatchBuilder(magic, CODECS[compression], batch_size=1 << 30)
    inner_base = base_offset if magic == 0 or compression == "none" else 0
    for i, (timestamp, key, value, _) in enumerate(specs):
        builder.append(inner_base + i, timestamp=timestamp, key=key, value=value)
    with kafka_codecs():
        data = bytearray(builder.build())
    if compression != "none":
        struct.pack_into(">q", data, 0, base_offset + len(specs) - 1)  # outside the CRC
    return bytes(data)


def set_v2_attributes(batch: bytes, *, set_bits: int, max_timestamp: int | None = None) -> bytes:
    """The batch with attribute bits added (and max timestamp), CRC made right again."""
    out = bytearray(batch)
    (attributes,) = struct.unpack_from(">h", out, 21)
    struct.pack_into(">h", out, 21, attributes | set_bits)
    if max_timestamp is not None:
        struct.pack_into(">q", out, 35, max_timestamp)
    return fix_v2_crc(out)


def fix_v2_crc(batch: bytes | bytearray) -> bytes:
    out = bytearray(batch)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def fix_legacy_crc(message: bytes | bytearray) -> bytes:
    out = bytearray(message)
    struct.pack_into(">I", out, 12, zlib.crc32(bytes(out[16:])))
    return bytes(out)


def wrap_v2(
    body: bytes, *, compression: str = "none", record_count: int = 1, last_delta: int = 0
) -> bytes:
    """A v2 batch around arbitrary record bytes (already compressed when compression is
    set): for hostile bodies kafka-python would never write."""
    header = struct.pack(
        ">qiibIhiqqqhii",
        0, 49 + len(body), 0, 2, 0, CODECS[compression], last_delta,
        1000, 1000, -1, -1, -1, record_count,
    )  # fmt: skip
    return fix_v2_crc(header + body)


def varint(value: int) -> bytes:
    """Zig-zag varint, for hand-made records."""
    raw = (value << 1) ^ (value >> 63)
    raw &= (1 << 64) - 1
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def raw_record(
    *,
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    headers: Sequence[tuple[bytes, bytes | None]] = (),
    header_count: int | None = None,
    offset_delta: int = 0,
    length_adjust: int = 0,
) -> bytes:
    """One v2 record by hand, with room to lie about lengths and counts."""

    def field(data: bytes | None) -> bytes:
        return varint(-1) if data is None else varint(len(data)) + data

    body = b"\x00" + varint(0) + varint(offset_delta) + field(key) + field(value)
    body += varint(len(headers) if header_count is None else header_count)
    for hkey, hvalue in headers:
        body += varint(len(hkey)) + hkey + field(hvalue)
    return varint(len(body) + length_adjust) + body


def make_specs(count: int = 40, *, headers: bool = True) -> list[Spec]:
    """Varied records: null and empty keys/values, non-ASCII header keys, timestamps that
    go backwards (negative deltas), values repetitive enough that every codec kicks in."""
    specs: list[Spec] = []
    for i in range(count):
        key = None if i % 5 == 0 else (b"" if i % 7 == 0 else b"key-%d" % i)
        value = None if i % 11 == 3 else (b"value %d " % i) * (i % 13)
        hdrs = [("trace-id", b"%08x" % i), ("ünï", b""), ("nil", None)] if headers else []
        specs.append((1_700_000_000_000 + (i * 37) % 50 - 25, key, value, hdrs[: i % 4]))
    return specs


def mixed_buffer() -> tuple[bytes, list[int]]:
    """Every kind of entry, small: the buffer and where each entry ends."""
    parts = [
        build_v2(make_specs(4), compression=c, base_offset=10 * i) for i, c in enumerate(CODECS)
    ]
    parts += [
        build_legacy(make_specs(2, headers=False), magic=0),
        build_legacy(make_specs(3, headers=False), magic=1, compression="gzip"),
        build_legacy(make_specs(3, headers=False), magic=0, compression="lz4"),
        build_legacy(make_specs(3, headers=False), magic=1, compression="snappy"),
    ]
    ends = []
    total = 0
    for part in parts:
        total += len(part)
        ends.append(total)
    return b"".join(parts), ends


MIXED, MIXED_ENDS = mixed_buffer()
