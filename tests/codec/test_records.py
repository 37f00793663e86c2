"""Record batch reader against kafka-python's builders (and kio's reader)."""

from __future__ import annotations

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.legacy_records import LegacyRecordBatch
from kio.records.readers import read_batch
from support.records_oracle import (
    CODECS,
    Spec,
    build_legacy,
    build_v2,
    make_specs,
    set_v2_attributes,
)

from codec.errors import DecodeError
from codec.records import (
    COMPRESSION_NAMES,
    BatchHeader,
    Record,
    iter_batches,
    iter_records,
    summarize,
)

V2_CODECS = list(CODECS)
LEGACY_CODECS = ["none", "gzip", "snappy", "lz4"]


def as_tuples(records: list[Record]) -> list[tuple]:
    return [
        (
            r.offset,
            r.timestamp,
            None if r.key is None else bytes(r.key),
            None if r.value is None else bytes(r.value),
            [(k, None if v is None else bytes(v)) for k, v in r.headers],
        )
        for r in records
    ]


def expected(specs: list[Spec], base_offset: int) -> list[tuple]:
    return [(base_offset + i, ts, k, v, list(h)) for i, (ts, k, v, h) in enumerate(specs)]


@pytest.mark.parametrize("compression", V2_CODECS)
def test_v2_header_matches_kafka_python(compression: str) -> None:
    batch = build_v2(make_specs(), compression=compression, producer=(77, 3, 1000))
    (header,) = iter_batches(batch, verify_crc=True)
    oracle = DefaultRecordBatch(batch)
    assert header.compression == compression == COMPRESSION_NAMES[oracle.compression_type]
    assert (header.base_offset, header.size) == (oracle.base_offset, oracle.size_in_bytes)
    assert header.size == len(batch)
    assert (header.partition_leader_epoch, header.magic) == (oracle.leader_epoch, 2)
    assert (header.crc, header.attributes) == (oracle.crc, oracle.attributes)
    assert header.last_offset_delta == oracle.last_offset_delta == 39
    assert header.base_timestamp == oracle.first_timestamp
    assert header.max_timestamp == oracle.max_timestamp
    assert (header.producer_id, header.producer_epoch) == (77, 3)
    assert header.base_sequence == oracle.base_sequence == 1000
    assert header.record_count == oracle.records_count == 40
    assert header.timestamp_type == oracle.timestamp_type == 0
    assert not header.is_transactional and not header.is_control
    assert not header.has_delete_horizon


@pytest.mark.parametrize("compression", V2_CODECS)
def test_v2_records_match_what_was_built(compression: str) -> None:
    specs = make_specs(300)
    batch = build_v2(specs, compression=compression, base_offset=5000)
    records = list(iter_records(batch, verify_crc=True))
    assert as_tuples(records) == expected(specs, 5000)
    assert all(r.batch.compression == compression for r in records)


def test_v2_uncompressed_matches_kio() -> None:
    specs = make_specs(60)
    batch = build_v2(specs, producer=(9, 1, 0), base_offset=12)
    kio_batch, size = read_batch(batch, 0)
    (header,) = iter_batches(batch)
    assert size == header.size
    assert header.crc == kio_batch.crc
    assert header.base_timestamp == kio_batch.base_timestamp
    assert header.producer_id == kio_batch.producer_id
    ours = list(iter_records(batch))
    assert [r.offset for r in ours] == [r.offset for r in kio_batch.records]
    for mine, theirs in zip(ours, kio_batch.records, strict=True):
        assert (mine.key is None, mine.value is None) == (theirs.key is None, theirs.value is None)
        assert bytes(mine.key or b"") == (theirs.key or b"")
        assert bytes(mine.value or b"") == (theirs.value or b"")
        assert [(k, None if v is None else bytes(v)) for k, v in mine.headers] == [
            ((h.key or b"").decode(), h.value) for h in theirs.headers
        ]


def test_values_are_zero_copy_views_of_an_uncompressed_input() -> None:
    buf = bytearray(build_v2(make_specs(5)))
    record = list(iter_records(buf))[1]
    assert record.key is not None
    assert record.key.obj is buf


def test_many_batches_each_header_in_order() -> None:
    batches = [
        build_v2(make_specs(10 + i), compression=c, base_offset=1000 * i)
        for i, c in enumerate(V2_CODECS * 2)
    ]
    buf = b"".join(batches)
    headers = list(iter_batches(buf, verify_crc=True))
    assert [h.compression for h in headers] == V2_CODECS * 2
    assert [h.base_offset for h in headers] == [1000 * i for i in range(10)]
    assert [h.record_count for h in headers] == [10 + i for i in range(10)]
    starts = [sum(len(b) for b in batches[:i]) for i in range(10)]
    assert [h.position for h in headers] == starts
    offsets = [r.offset for r in iter_records(buf)]
    assert offsets == [1000 * i + j for i in range(10) for j in range(10 + i)]


def test_summarize() -> None:
    plain = build_v2(make_specs(10), base_offset=0)
    txn = build_v2(
        make_specs(7), compression="zstd", producer=(42, 5, 0), transactional=True, base_offset=10
    )
    control = set_v2_attributes(build_v2(make_specs(1)), set_bits=0x30)
    partial = build_v2(make_specs(3))[:-10]
    stats = summarize(plain + txn + control + partial, allow_partial_tail=True)
    assert (stats.batches, stats.records, stats.control_batches) == (3, 18, 1)
    assert stats.bytes == len(plain) + len(txn) + len(control)
    assert stats.truncated_bytes == len(partial)
    assert stats.compressions == {"none", "zstd"}
    assert (stats.producer_id, stats.producer_epoch, stats.transactional) == (42, 5, True)
    all_ts = [s[0] for s in make_specs(10)]
    assert stats.min_timestamp == min(all_ts[0], make_specs(7)[0][0], make_specs(1)[0][0])
    assert stats.max_timestamp == max(all_ts)


def test_summary_of_nothing() -> None:
    stats = summarize(b"")
    assert (stats.batches, stats.records, stats.bytes) == (0, 0, 0)
    assert (stats.min_timestamp, stats.max_timestamp, stats.producer_id) == (-1, -1, -1)


def test_control_and_transactional_flags() -> None:
    batch = build_v2(make_specs(2), producer=(1, 0, 0), transactional=True)
    batch = set_v2_attributes(batch, set_bits=0x20 | 0x40)
    (header,) = iter_batches(batch, verify_crc=True)
    assert header.is_transactional and header.is_control and header.has_delete_horizon


def test_log_append_time_gives_every_record_the_batch_timestamp() -> None:
    batch = set_v2_attributes(
        build_v2(make_specs(4), compression="gzip"), set_bits=0x08, max_timestamp=123456
    )
    (header,) = iter_batches(batch, verify_crc=True)
    assert header.timestamp_type == 1
    assert [r.timestamp for r in iter_records(batch)] == [123456] * 4


def test_crc_good_and_bad() -> None:
    batch = bytearray(build_v2(make_specs(5), compression="snappy"))
    assert next(iter_batches(batch, verify_crc=True)).crc == struct.unpack_from(">I", batch, 17)[0]
    batch[-1] ^= 0x01
    with pytest.raises(DecodeError, match="CRC") as info:
        list(iter_batches(batch, verify_crc=True))
    assert info.value.direction == "records" and info.value.offset == 0
    # Without the check the header still reads: the proxy verifies requests only.
    assert next(iter_batches(batch)).record_count == 5


def test_crc_of_the_second_batch_reports_its_position() -> None:
    first = build_v2(make_specs(3))
    second = bytearray(build_v2(make_specs(3)))
    second[70] ^= 0xFF
    with pytest.raises(DecodeError) as info:
        list(iter_batches(first + second, verify_crc=True))
    assert info.value.offset == len(first)


def test_partial_tail_stops_quietly_only_when_allowed() -> None:
    whole = build_v2(make_specs(4)) + build_v2(make_specs(3), compression="lz4")
    tail = build_v2(make_specs(9), compression="gzip")
    for cut in (1, 11, 12, 17, 61, len(tail) - 1):
        buf = whole + tail[:cut]
        assert len(list(iter_batches(buf, allow_partial_tail=True))) == 2
        assert len(list(iter_records(buf, allow_partial_tail=True))) == 7
        with pytest.raises(DecodeError, match="inside a batch"):
            list(iter_batches(buf))
        with pytest.raises(DecodeError):
            summarize(buf)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("compression", LEGACY_CODECS)
def test_legacy_records_match_what_was_built(magic: int, compression: str) -> None:
    specs = make_specs(30, headers=False)
    buf = build_legacy(specs, magic=magic, compression=compression, base_offset=700)
    headers = list(iter_batches(buf, verify_crc=True))
    records = list(iter_records(buf, verify_crc=True))
    want = expected(specs, 700)
    if magic == 0:
        want = [(o, -1, k, v, h) for o, _, k, v, h in want]
    assert as_tuples(records) == want
    if compression == "none":
        assert [h.record_count for h in headers] == [1] * 30
        assert [h.base_offset for h in headers] == list(range(700, 730))
        assert all(h.last_offset_delta == 0 for h in headers)
    else:
        (wrapper,) = headers
        assert (wrapper.record_count, wrapper.last_offset_delta) == (-1, -1)
        assert wrapper.base_offset == 729  # a wrapper carries its last inner offset
        assert wrapper.compression == compression
    oracle = LegacyRecordBatch(buf[: headers[0].size], magic)
    assert oracle.base_offset == headers[0].base_offset
    assert COMPRESSION_NAMES[oracle.compression_type] == compression
    # kafka-python says None where Kafka's Java says NO_TIMESTAMP_TYPE (-1).
    assert headers[0].timestamp_type == (-1 if magic == 0 else oracle.timestamp_type)
    assert (headers[0].producer_id, headers[0].partition_leader_epoch) == (-1, -1)


def test_legacy_magic0_lz4_has_the_kip57_broken_header_checksum() -> None:
    import cramjam

    buf = build_legacy(make_specs(5, headers=False), magic=0, compression="lz4")
    (header,) = iter_batches(buf, verify_crc=True)
    value = buf[26 : header.end]  # after an 18-byte header, null key and value length
    with pytest.raises(cramjam.DecompressionError, match="[Cc]hecksum"):
        cramjam.lz4.decompress(value)
    assert len(list(iter_records(buf))) == 5


def test_legacy_summary_counts_wrappers_as_unknown() -> None:
    buf = build_legacy(make_specs(3, headers=False), magic=1) + build_legacy(
        make_specs(4, headers=False), magic=1, compression="gzip"
    )
    stats = summarize(buf, verify_crc=True)
    assert (stats.batches, stats.records, stats.unknown_count_batches) == (4, 3, 1)
    assert stats.compressions == {"none", "gzip"}


def test_legacy_log_append_time_wrapper_stamps_inner_records() -> None:
    from support.records_oracle import fix_legacy_crc

    buf = bytearray(build_legacy(make_specs(3, headers=False), magic=1, compression="gzip"))
    buf[17] |= 0x08
    struct.pack_into(">q", buf, 18, 999)
    buf = bytearray(fix_legacy_crc(buf))
    assert [r.timestamp for r in iter_records(buf, verify_crc=True)] == [999] * 3


def test_legacy_crc_bad() -> None:
    buf = bytearray(build_legacy(make_specs(2, headers=False), magic=1))
    buf[30] ^= 0x55
    with pytest.raises(DecodeError, match="CRC"):
        list(iter_batches(buf, verify_crc=True))


def test_mixed_magics_in_one_fetch() -> None:
    buf = (
        build_legacy(make_specs(2, headers=False), magic=0, base_offset=0)
        + build_legacy(make_specs(2, headers=False), magic=1, compression="snappy", base_offset=2)
        + build_v2(make_specs(2), compression="zstd", base_offset=4)
    )
    assert [h.magic for h in iter_batches(buf)] == [0, 0, 1, 2]
    assert [r.offset for r in iter_records(buf, verify_crc=True)] == list(range(6))


def test_public_types() -> None:
    header = next(iter_batches(build_v2(make_specs(1))))
    assert isinstance(header, BatchHeader)
    assert not hasattr(header, "__dict__")
