"""The C walk of record batch headers (codec/_accel.c's summarize_records) against the
Python one (codec/records/stats.py's summarize_python), which is the reference: for every
records field, well formed, cut, mutated or arbitrary, and every flag, the same
RecordStats (every field, of the same types) or the same DecodeError (reason, offset,
direction); NotImplemented only for the calls the C does not take, where summarize runs
the Python walk. And the C reads the header layouts codec/records describes."""

from __future__ import annotations

import array
import dataclasses
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.codec_frames import needs_accel
from support.examples import examples
from support.paths import GOLDEN
from support.records_oracle import (
    CODECS,
    MIXED,
    build_legacy,
    build_v2,
    make_specs,
    set_v2_attributes,
)

from codec import accel, decode_request, decode_response
from codec.errors import DecodeError
from codec.records import (
    COMPRESSION_NAMES,
    RecordStats,
    batch,
    iter_batches,
    legacy,
    stats,
    summarize,
)
from codec.records.batch import BatchHeader
from codec.records.common import DEFAULT_MAX_BYTES, error

pytestmark = needs_accel

INT64_MAX = 2**63 - 1
V2 = struct.Struct(">qiibIhiqqqhii")
PROPERTY = settings(
    max_examples=examples(400),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
INTERESTING_32 = [0, 1, -1, 2, 5, 7, 48, 49, 50, 61, 255, 65536, 2**31 - 1, -(2**31)]
INTERESTING_64 = [0, 1, -1, 2, 1000, 2**31 - 1, 2**32, INT64_MAX, INT64_MAX - 1, -(2**63), 1_700_000_000_000]
MAX_BYTES = [DEFAULT_MAX_BYTES, 0, 1, 6, 7, 100, 2**31, -1, -7, -(2**63), INT64_MAX, 2**63, -(2**63) - 1]


def outcome(call: Any) -> Any:
    """What a summarize gives: its RecordStats (with its fields' types), or its error."""
    try:
        result = call()
    except DecodeError as exc:
        return ("DecodeError", exc.reason, exc.offset, exc.direction, exc.api_key, exc.api_version, str(exc))
    if result is NotImplemented:
        return result
    assert isinstance(result, RecordStats)
    return result, tuple(type(getattr(result, f.name)) for f in dataclasses.fields(RecordStats))


def overflows_int64(buf: Any, allow_partial_tail: bool, max_bytes: int) -> bool:
    """Whether a whole entry the Python walk reads before any error ends past int64: the
    walk with the call's max_bytes, which decides whether a compressed batch's count is
    an error before its offsets are read."""
    try:
        for header in iter_batches(buf, allow_partial_tail=allow_partial_tail, max_bytes=max_bytes):
            if header.base_offset + max(header.last_offset_delta, 0) + 1 > INT64_MAX:
                return True
    except DecodeError:
        pass
    return False


def same(buf: Any, allow_partial_tail: bool, max_bytes: int) -> None:
    """C and Python agree on `buf`, and summarize gives the Python walk's answer."""
    assert stats.C_SUMMARIZE is not None
    python = outcome(lambda: stats.summarize_python(buf, allow_partial_tail=allow_partial_tail, max_bytes=max_bytes))
    c = outcome(lambda: stats.C_SUMMARIZE(buf, allow_partial_tail, max_bytes))
    if c is NotImplemented:
        assert not -(2**63) <= max_bytes <= INT64_MAX or overflows_int64(buf, allow_partial_tail, max_bytes)
    else:
        assert c == python
    shipped = outcome(lambda: summarize(buf, allow_partial_tail=allow_partial_tail, max_bytes=max_bytes))
    assert shipped == python


def test_the_c_reads_the_layout_codec_records_describes() -> None:
    from codec import _accel

    assert {**batch.layout(), **legacy.layout()} == _accel.RECORD_LAYOUT
    assert tuple(f.name for f in dataclasses.fields(BatchHeader))[1:] == batch.V2_FIELDS
    assert tuple(f.name for f in dataclasses.fields(RecordStats)) == _accel.RECORD_STATS_FIELDS
    assert stats.C_SUMMARIZE is _accel.summarize_records
    assert (stats._ACTIVE_C is not None) == accel.ACTIVE


def test_record_stats_are_made_by_filling_their_slots_unless_the_class_does_more() -> None:
    """The C fills a RecordStats' slots itself (what the other tests compare); a class
    whose __init__ does more than assign is called instead."""
    assert accel.records_direct
    assert stats.C_SUMMARIZE is not None

    @dataclasses.dataclass(slots=True)
    class Checked(RecordStats):
        def __post_init__(self) -> None:
            self.batches += 1000

    described = {**batch.layout(), **legacy.layout()}
    try:
        assert accel.records_summarizer(Checked, error, COMPRESSION_NAMES, described) is stats.C_SUMMARIZE
        assert not accel.records_direct
        made = stats.C_SUMMARIZE(MIXED, False, DEFAULT_MAX_BYTES)
        assert type(made) is Checked and made.batches == 1000 + stats.summarize_python(MIXED).batches
    finally:
        accel.records_summarizer(RecordStats, error, COMPRESSION_NAMES, described)
    assert accel.records_direct
    assert type(stats.C_SUMMARIZE(MIXED, False, DEFAULT_MAX_BYTES)) is RecordStats


def test_an_extension_reading_other_offsets_is_refused() -> None:
    described = {**batch.layout(), **legacy.layout()}
    moved = {**described, "v2.record_count": (58, "i")}
    with pytest.raises(ImportError, match="other offsets"):
        accel.records_summarizer(RecordStats, error, COMPRESSION_NAMES, moved)

    @dataclasses.dataclass
    class Reordered:
        records: int
        batches: int

    with pytest.raises(ImportError, match="rebuild"):
        accel.records_summarizer(Reordered, error, COMPRESSION_NAMES, described)


@st.composite
def v2_entry(draw: st.DrawFn) -> bytes:
    """A v2 batch header, any field drawn from values that matter, over a body of filler."""
    body = draw(st.binary(max_size=64))
    lie = draw(st.sampled_from([None] * 30 + INTERESTING_32))
    length = 49 + len(body) if lie is None else lie
    codec = draw(st.sampled_from([0, 0, 1, 2, 3, 4, 5, 7]))
    flags = draw(st.integers(0, 0x7F)) & ~0x07
    attributes = draw(st.sampled_from([codec | flags] * 8 + [-1, -32768, 0x7FFF]))
    count = draw(st.sampled_from([None] * 8 + INTERESTING_32))
    if count is None:
        count = draw(st.integers(0, max(0, len(body) // 7 + 1)))
    fields = (
        draw(st.sampled_from([*INTERESTING_64, draw(st.integers(0, 10**6))])),  # base offset
        length,
        draw(st.sampled_from([-1, 0, 5])),  # partition leader epoch
        2,
        draw(st.integers(0, 2**32 - 1)),  # crc, never checked here
        attributes,
        draw(st.sampled_from([0, 1, 3, -1, 2**31 - 1, -(2**31)])),  # last offset delta
        draw(st.sampled_from(INTERESTING_64)),  # base timestamp
        draw(st.sampled_from(INTERESTING_64)),  # max timestamp
        draw(st.sampled_from([-1, -1, 0, 77, INT64_MAX, -(2**63)])),  # producer id
        draw(st.sampled_from([-1, 0, 3, 32767, -32768])),  # producer epoch
        draw(st.sampled_from([-1, 0, 9])),  # base sequence
        count,
    )
    return V2.pack(*fields) + body


@st.composite
def legacy_entry(draw: st.DrawFn) -> bytes:
    """A magic 0 or 1 message header (or a lying one) over filler."""
    magic = draw(st.sampled_from([0, 0, 0, 1, 1, 1, 1, 3, 0x81]))
    body = draw(st.binary(max_size=24))
    attributes = draw(st.sampled_from([0, 0, 1, 2, 3, 0x08, 0x09, 4, 7, -1, -128, 127]))
    head = struct.pack(">IBb", draw(st.integers(0, 2**32 - 1)), magic, attributes)
    if magic == 1 or draw(st.booleans()):
        head += struct.pack(">q", draw(st.sampled_from(INTERESTING_64)))
    rest = head[4:] + body
    lie = draw(st.sampled_from([None] * 30 + INTERESTING_32))
    size = 4 + len(rest) if lie is None else lie
    offset = draw(st.sampled_from([*INTERESTING_64, draw(st.integers(0, 10**6))]))
    return struct.pack(">qiI", offset, size, struct.unpack(">I", head[:4])[0]) + rest


REAL = [
    MIXED,
    *(build_v2(make_specs(5), compression=c, producer=(77, 3, 10), base_offset=1000) for c in CODECS),
    build_v2(make_specs(3), transactional=True, producer=(9, 1, 0), base_offset=INT64_MAX - 2),
    set_v2_attributes(build_v2(make_specs(2)), set_bits=0x28, max_timestamp=5),  # control, log append time
    set_v2_attributes(build_v2(make_specs(2)), set_bits=0x40),  # a delete horizon
    *(build_legacy(make_specs(3, headers=False), magic=m, compression=c) for m in (0, 1) for c in ("none", "gzip")),
]


@st.composite
def records_field(draw: st.DrawFn) -> bytes:
    """Entries one after another, then maybe cut and mutated."""
    entries = draw(st.lists(st.one_of(v2_entry(), legacy_entry(), st.sampled_from(REAL)), max_size=5))
    data = bytearray(b"".join(entries))
    if data and draw(st.booleans()):
        del data[draw(st.integers(0, len(data))) :]
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2, 3]))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        kind = draw(st.sampled_from(["byte", "int32", "int64", "delete", "insert"]))
        if kind == "byte":
            data[at] = draw(st.integers(0, 255))
        elif kind == "int32" and at + 4 <= len(data):
            struct.pack_into(">i", data, at, draw(st.sampled_from(INTERESTING_32)))
        elif kind == "int64" and at + 8 <= len(data):
            struct.pack_into(">q", data, at, draw(st.sampled_from(INTERESTING_64)))
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 16))]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


@PROPERTY
@given(records_field(), st.booleans(), st.sampled_from(MAX_BYTES))
def test_c_and_python_agree_on_generated_records(data: bytes, allow_partial_tail: bool, max_bytes: int) -> None:
    same(data, allow_partial_tail, max_bytes)


@PROPERTY
@given(st.binary(max_size=200), st.booleans(), st.sampled_from(MAX_BYTES))
def test_c_and_python_agree_on_arbitrary_bytes(data: bytes, allow_partial_tail: bool, max_bytes: int) -> None:
    same(data, allow_partial_tail, max_bytes)


def test_a_compressed_batch_at_int64s_end_is_left_to_python_under_any_max_bytes() -> None:
    """A gzip batch at offset 2^63-1 whose count fits max_bytes=2^63-1 but not the
    default: the C gives the offset past int64 to Python, and the oracle must read the
    batch with the call's max_bytes to know (Hypothesis found the oracle walking with the
    default, where the count is the error and no offset is read)."""
    header = bytearray(V2.size)
    V2.pack_into(header, 0, INT64_MAX, 49, -1, 2, 0, 1, 0, 0, 0, -1, -1, -1, 2**31 - 1)
    assert overflows_int64(bytes(header), False, INT64_MAX)
    assert not overflows_int64(bytes(header), False, DEFAULT_MAX_BYTES)
    assert stats.C_SUMMARIZE is not None
    assert stats.C_SUMMARIZE(bytes(header), False, INT64_MAX) is NotImplemented
    for max_bytes in (INT64_MAX, DEFAULT_MAX_BYTES):
        same(bytes(header), False, max_bytes)


@pytest.mark.parametrize("real", REAL, ids=range(len(REAL)))
def test_c_and_python_agree_on_every_cut_of_real_batches(real: bytes) -> None:
    for cut in range(len(real) + 1):
        for tail in (False, True):
            same(real[:cut], tail, DEFAULT_MAX_BYTES)


def test_c_and_python_agree_on_the_golden_frames() -> None:
    """Every records field of the real clients' Produce requests and the brokers' Fetch
    answers (tests/data/golden), as the proxy reads them: views into the frame."""
    import json

    index = json.loads((GOLDEN / "index.json").read_text())
    fields = 0
    for entry in index["frames"]:
        data = (GOLDEN / entry["file"]).read_bytes()
        key, version = entry["api_key"], entry["api_version"]
        if key == 0 and entry["direction"] == "req":
            topics = [(t["partition_data"], False) for t in decode_request(data).body["topic_data"]]
        elif key == 1 and entry["direction"] == "resp":
            topics = [(t["partitions"], True) for t in decode_response(data, key, version).body["responses"]]
        else:
            continue
        for partitions, tail in topics:
            for partition in partitions:
                if partition["records"] is not None:
                    same(partition["records"], tail, DEFAULT_MAX_BYTES)
                    fields += 1
    assert fields >= 20


def test_any_buffer_reads_as_its_bytes_and_what_is_no_buffer_fails_alike() -> None:
    words = array.array("i")
    words.frombytes(MIXED[: len(MIXED) // 4 * 4])
    for buf in (bytearray(MIXED), memoryview(MIXED)[5:], words, memoryview(words)):
        same(buf, True, DEFAULT_MAX_BYTES)
    assert stats.C_SUMMARIZE is not None
    strided = memoryview(MIXED)[::2]
    for odd, raised in ((strided, BufferError), ("text", TypeError), (None, TypeError), (7, TypeError)):
        assert stats.C_SUMMARIZE(odd, True, DEFAULT_MAX_BYTES) is NotImplemented
        with pytest.raises(raised):
            stats.summarize_python(odd)
        with pytest.raises(raised):
            summarize(odd)


def test_verify_crc_stays_with_the_python_walk() -> None:
    corrupt = bytearray(REAL[1])
    corrupt[-1] ^= 0xFF
    assert summarize(bytes(corrupt)) == stats.summarize_python(bytes(corrupt))
    with pytest.raises(DecodeError, match="CRC"):
        summarize(bytes(corrupt), verify_crc=True)
