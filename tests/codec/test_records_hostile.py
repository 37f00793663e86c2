"""Hostile records fields: every failure must be a DecodeError, never another exception."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from support.records_oracle import (
    CODECS,
    MIXED,
    MIXED_ENDS,
    build_legacy,
    build_v2,
    fix_legacy_crc,
    fix_v2_crc,
    make_specs,
    raw_record,
    varint,
    wrap_v2,
)

from codec.errors import DecodeError
from codec.records import iter_batches, iter_records, summarize

INT32_MAX = 2**31 - 1


def read_all(buf: bytes, **flags: bool) -> tuple[int, int]:
    """(entries, records) read, or DecodeError."""
    entries = len(list(iter_batches(buf, **flags)))
    summarize(buf, **flags)
    return entries, len(list(iter_records(buf, **flags)))


def test_every_prefix_is_a_clean_partial_tail_or_a_decode_error() -> None:
    entry_ends = [h.end for h in iter_batches(MIXED)]
    assert set(MIXED_ENDS) <= set(entry_ends)
    for cut in range(len(MIXED) + 1):
        whole = sum(1 for end in entry_ends if end <= cut)
        assert read_all(MIXED[:cut], allow_partial_tail=True, verify_crc=True)[0] == whole
        if cut == 0 or cut in entry_ends:
            assert read_all(MIXED[:cut], verify_crc=True)[0] == whole
        else:
            with pytest.raises(DecodeError):
                read_all(MIXED[:cut])


@pytest.mark.parametrize("compression", [c for c in CODECS if c != "none"])
def test_every_truncation_of_compressed_records_is_a_decode_error(compression: str) -> None:
    batch = build_v2(make_specs(6), compression=compression)
    body = batch[61:]
    for cut in range(len(body)):
        hostile = wrap_v2(body[:cut], compression=compression, record_count=6)
        list(iter_batches(hostile, verify_crc=True))  # the header alone is fine
        with pytest.raises(DecodeError):
            list(iter_records(hostile))


@pytest.mark.parametrize(
    "junk",
    [b"\x00", b"\x00" * 11, b"\x00" * 12, b"\xff" * 20, b"\x00" * 8 + b"\x7f\xff\xff\xff"],
)
def test_trailing_junk(junk: bytes) -> None:
    buf = MIXED + junk
    with pytest.raises(DecodeError):
        read_all(buf)
    try:
        entries, _ = read_all(buf, allow_partial_tail=True)
    except DecodeError:
        return
    assert entries == len(list(iter_batches(MIXED)))


def test_lengths_that_cannot_be_a_cut_fail_even_in_a_fetch_tail() -> None:
    for length in (-1, -(2**31), 0, 4):
        buf = MIXED + struct.pack(">qi", 0, length) + b"\x02" * 60
        with pytest.raises(DecodeError, match="length"):
            list(iter_batches(buf, allow_partial_tail=True))


def test_batch_length_shorter_than_its_header() -> None:
    batch = bytearray(build_v2(make_specs(3)))
    struct.pack_into(">i", batch, 8, 30)
    with pytest.raises(DecodeError, match="shorter than its header"):
        list(iter_batches(batch, allow_partial_tail=True))


def test_huge_batch_length_is_a_tail_or_an_error() -> None:
    batch = bytearray(build_v2(make_specs(3)))
    struct.pack_into(">i", batch, 8, INT32_MAX)
    assert list(iter_batches(batch, allow_partial_tail=True)) == []
    with pytest.raises(DecodeError):
        list(iter_batches(batch))


@pytest.mark.parametrize("compression", ["none", "gzip", "zstd"])
def test_record_count_of_int32_max_in_a_tiny_batch(compression: str) -> None:
    import cramjam

    body = raw_record()
    if compression != "none":
        body = bytes(getattr(cramjam, compression).compress(body))
    hostile = wrap_v2(body, compression=compression, record_count=INT32_MAX)
    for read in (lambda: list(iter_batches(hostile)), lambda: summarize(hostile)):
        with pytest.raises(DecodeError, match="record count"):
            read()
    with pytest.raises(DecodeError):
        list(iter_records(hostile))


def test_a_compressed_batch_claiming_no_records_is_not_decompressed() -> None:
    # Kafka skips such a batch without reading its body; so does iter_records.
    hostile = wrap_v2(b"not zstd at all", compression="zstd", record_count=0)
    assert list(iter_records(hostile, verify_crc=True)) == []
    with pytest.raises(DecodeError):
        list(iter_records(wrap_v2(b"not zstd at all", compression="zstd", record_count=1)))


@pytest.mark.parametrize(
    ("compression", "count"),
    [("none", 0), ("none", 1000)] + [(c, n) for c in ("none", "snappy", "lz4") for n in (19, 21)],
)
def test_record_count_that_disagrees_with_the_records(compression: str, count: int) -> None:
    batch = bytearray(build_v2(make_specs(20), compression=compression))
    assert next(iter_batches(batch)).compression == compression
    struct.pack_into(">i", batch, 57, count)
    batch = bytearray(fix_v2_crc(batch))
    # Too many for an uncompressed batch's bytes fails at the header already.
    with pytest.raises(DecodeError):
        list(iter_records(batch))


def test_negative_record_count() -> None:
    hostile = wrap_v2(raw_record(), record_count=-1)
    with pytest.raises(DecodeError, match="negative record count"):
        list(iter_batches(hostile))


def record_with_key_length(length: int) -> bytes:
    body = b"\x00" + varint(0) + varint(0) + varint(length) + b"\x00" * 8
    return varint(len(body)) + body


# name: (record bytes, what the error must say)
BAD_RECORDS = {
    "negative record length": (varint(-5) + b"\x00" * 10, "record length -5"),
    "record length past batch": (raw_record(length_adjust=40), "past the end of its batch"),
    "record length short of its fields": (raw_record(length_adjust=-2), "past the end|truncated"),
    "zero record length": (varint(0) + b"\x00" * 6, "truncated varint"),
    "key length -2": (record_with_key_length(-2), "length -2"),
    "key length past record": (record_with_key_length(50), "length 50"),
    "header count -1": (raw_record(header_count=-1), "negative record header count"),
    "header count int32 max": (
        raw_record(headers=[(b"a", b"b")], header_count=INT32_MAX),
        "truncated varint",
    ),
    "header key not utf-8": (raw_record(headers=[(b"\xff\xfe", b"v")]), "UTF-8"),
    "byte after headers": (raw_record(length_adjust=1) + b"\x00", "after its last header"),
    "varint too long": (b"\xff" * 6 + b"\x01", "longer than 5"),
    "varlong too long": (
        varint(20) + b"\x00" + b"\xff" * 10 + b"\x01" + b"\x00" * 8,
        "longer than 10",
    ),
    "bytes after the last record": (raw_record() + b"\x00" * 7, "left after the batch's last"),
}


@pytest.mark.parametrize("name", list(BAD_RECORDS))
@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_malformed_record(name: str, compression: str) -> None:
    import cramjam

    body, message = BAD_RECORDS[name]
    if compression != "none":
        body = bytes(cramjam.gzip.compress(body))
    hostile = wrap_v2(body, compression=compression, record_count=1)
    with pytest.raises(DecodeError, match=message) as info:
        list(iter_records(hostile, verify_crc=True))
    assert info.value.offset is not None


def test_null_header_key_is_an_error() -> None:
    record = raw_record(headers=[(b"", b"v")])
    # Header count 1, then key length 0: make it -1 (null), which Kafka forbids.
    hostile = record[:-4] + varint(-1) + record[-2:]
    hostile = varint(len(hostile) - 1) + hostile[1:]
    with pytest.raises(DecodeError):
        list(iter_records(wrap_v2(hostile)))


def test_bad_magic_and_codec_ids() -> None:
    for magic in (3, 0x7F, 0xFF):
        batch = bytearray(build_v2(make_specs(1)))
        batch[16] = magic
        with pytest.raises(DecodeError, match="magic"):
            list(iter_batches(batch))
    for codec in (5, 6, 7):
        batch = bytearray(build_v2(make_specs(1)))
        batch[22] = codec
        with pytest.raises(DecodeError, match="compression"):
            list(iter_batches(batch))
    legacy = bytearray(build_legacy(make_specs(1, headers=False), magic=1))
    legacy[17] = 4  # zstd: not a legacy codec
    with pytest.raises(DecodeError, match="compression"):
        list(iter_batches(legacy))


def legacy_raw(magic: int, attributes: int, rest: bytes) -> bytes:
    """A legacy message whose key and value bytes are `rest`, sizes and CRC right."""
    body = struct.pack(">bb", magic, attributes) + (struct.pack(">q", 5) if magic else b"")
    body += rest
    return fix_legacy_crc(struct.pack(">qiI", 0, 4 + len(body), 0) + body)


def legacy_message(magic: int, attributes: int, key: bytes | None, value: bytes | None) -> bytes:
    rest = b""
    for field in (key, value):
        rest += struct.pack(">i", -1) if field is None else struct.pack(">i", len(field)) + field
    return legacy_raw(magic, attributes, rest)


def gzip(data: bytes) -> bytes:
    import cramjam

    return bytes(cramjam.gzip.compress(data))


def nested() -> bytes:
    inner = legacy_message(1, 1, None, gzip(legacy_message(1, 0, None, b"x")))
    return legacy_message(1, 1, None, gzip(inner))


# name: (message, what the error must say)
LEGACY_BAD: dict[str, tuple[Callable[[], bytes], str]] = {
    "key length past end": (lambda: legacy_raw(1, 0, struct.pack(">ii", 99, -1)), "length 99"),
    "value length -2": (lambda: legacy_raw(1, 0, struct.pack(">ii", -1, -2)), "length -2"),
    "no value length": (
        lambda: legacy_raw(1, 0, struct.pack(">i", 10) + b"k" * 10),
        "truncated legacy message",
    ),
    "below the minimum size": (lambda: legacy_raw(0, 0, struct.pack(">i", -1)), "too small"),
    "byte after value": (lambda: legacy_raw(0, 0, struct.pack(">ii", -1, -1) + b"\x00"), "after"),
    "wrapper without value": (lambda: legacy_message(1, 1, None, None), "without a value"),
    "nested compression": (nested, "nested"),
    "inner magic differs": (
        lambda: legacy_message(1, 1, None, gzip(legacy_message(0, 0, None, b"x"))),
        "magic differs",
    ),
    "empty inner set": (lambda: legacy_message(1, 1, None, gzip(b"")), "no inner message"),
    "truncated inner set": (
        lambda: legacy_message(1, 1, None, gzip(legacy_message(1, 0, None, b"xyz")[:-1])),
        "past the end of its message set",
    ),
    "corrupt wrapped value": (lambda: legacy_message(1, 3, None, b"\x04\x22\x4d\x18"), "LZ4"),
}


@pytest.mark.parametrize("name", list(LEGACY_BAD))
def test_malformed_legacy(name: str) -> None:
    make, message = LEGACY_BAD[name]
    first = legacy_message(1, 0, b"k", b"v")
    with pytest.raises(DecodeError, match=message) as info:
        list(iter_records(first + make(), verify_crc=True))
    assert info.value.offset is not None and info.value.offset >= len(first)


def test_legacy_size_below_minimum() -> None:
    message = bytearray(legacy_message(1, 0, None, None))
    struct.pack_into(">i", message, 8, 20)
    with pytest.raises(DecodeError, match="size"):
        list(iter_batches(message, allow_partial_tail=True))


def test_errors_inside_decompressed_data_point_at_the_batch() -> None:
    import cramjam

    first = build_v2(make_specs(2))
    body = bytes(cramjam.zstd.compress(BAD_RECORDS["header count -1"][0]))
    with pytest.raises(DecodeError, match="decompressed byte") as info:
        list(iter_records(first + wrap_v2(body, compression="zstd")))
    assert info.value.offset == len(first)


def test_tiny_lz4_frame_declaring_4_mib_blocks_allocates_little() -> None:
    import tracemalloc

    from codec.records import decompress

    frame = bytes.fromhex("04224d1860700000000000")  # block size code 7 (4 MiB), no blocks
    tracemalloc.start()
    assert bytes(decompress(3, frame, max_bytes=65536)) == b""
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 256 * 1024
