"""Hypothesis mutations of valid records: the readers may only return or raise DecodeError."""

from __future__ import annotations

import contextlib
import struct

import cramjam
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.examples import examples
from support.records_oracle import CODECS, MIXED, build_legacy, build_v2, make_specs, wrap_v2

from codec.errors import DecodeError
from codec.records import decompress, iter_batches, iter_records, summarize

FUZZ = settings(
    max_examples=examples(250),
    deadline=None,
    database=None,  # no .hypothesis/ left in the repository
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

BASES = [MIXED] + [build_v2(make_specs(6), compression=c) for c in CODECS]
BASES += [build_legacy(make_specs(3, headers=False), magic=m, compression="gzip") for m in (0, 1)]
INTERESTING = [0, 1, -1, 2, 7, 49, 61, 255, 65536, 2**31 - 1, -(2**31)]


@st.composite
def mutated(draw: st.DrawFn, bases: list[bytes]) -> bytes:
    data = bytearray(draw(st.sampled_from(bases)))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        kind = draw(st.sampled_from(["set", "insert", "delete", "int32", "varint"]))
        if kind == "set" and data:
            data[at] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 16))]
        elif kind == "int32" and at + 4 <= len(data):
            struct.pack_into(">i", data, at, draw(st.sampled_from(INTERESTING)))
        elif kind == "varint" and data:
            data[at] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF, 0xFE]))
    return bytes(data)


def read_everything(buf: bytes | bytearray, **flags: object) -> None:
    try:
        list(iter_batches(buf, **flags))  # type: ignore[arg-type]
        summarize(buf, **flags)  # type: ignore[arg-type]
        for record in iter_records(buf, **flags):  # type: ignore[arg-type]
            assert record.key is None or isinstance(record.key, memoryview)
    except DecodeError:
        pass


@FUZZ
@given(
    buf=mutated(BASES),
    verify_crc=st.booleans(),
    allow_partial_tail=st.booleans(),
    max_bytes=st.sampled_from([64, 4096, 1 << 20]),
)
def test_mutated_records_fields(
    buf: bytes, verify_crc: bool, allow_partial_tail: bool, max_bytes: int
) -> None:
    read_everything(
        buf, verify_crc=verify_crc, allow_partial_tail=allow_partial_tail, max_bytes=max_bytes
    )


# The records of a batch, uncompressed, to mutate before compressing: reaches the record
# parser behind every codec instead of stopping at the compressed stream's checks.
RECORDS_BODY = build_v2(make_specs(8))[61:]
COMPRESS = {
    "none": bytes,
    "gzip": lambda b: bytes(cramjam.gzip.compress(b)),
    "snappy": lambda b: bytes(cramjam.snappy.compress_raw(b)),
    "lz4": lambda b: bytes(cramjam.lz4.compress(b)),
    "zstd": lambda b: bytes(cramjam.zstd.compress(b)),
}


@FUZZ
@given(
    body=mutated([RECORDS_BODY]),
    compression=st.sampled_from(list(COMPRESS)),
    count=st.sampled_from([0, 1, 7, 8, 9, 2**31 - 1, -1]),
)
def test_mutated_records_behind_every_codec(body: bytes, compression: str, count: int) -> None:
    batch = wrap_v2(COMPRESS[compression](body), compression=compression, record_count=count)
    read_everything(batch, verify_crc=True)


SMALL = b"".join(b"value %d;" % i for i in range(300))
STREAMS = [(name, compress(SMALL)) for name, compress in COMPRESS.items() if name != "none"]
STREAMS.append(("snappy", bytes(cramjam.snappy.compress(SMALL))))  # framed: not Kafka's


@FUZZ
@given(stream=st.sampled_from(STREAMS), data=st.data())
def test_mutated_compressed_streams(stream: tuple[str, bytes], data: st.DataObject) -> None:
    codec, compressed = stream
    hostile = data.draw(mutated([compressed]))
    with contextlib.suppress(DecodeError):
        decompress(codec, hostile, max_bytes=len(SMALL) * 2)
