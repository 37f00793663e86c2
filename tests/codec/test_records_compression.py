"""Bounded decompression: every codec and framing Kafka clients write, and limits."""

from __future__ import annotations

import random
import struct
import zlib

import cramjam
import pytest
from kafka import codec as kafka_codec
from support.records_oracle import kafka_codecs

from codec.errors import DecodeError
from codec.records import decompress

# Compressible but not trivially: ~1 MiB of text with random bits.
RNG = random.Random(1234)
DATA = b"".join(b"record %d payload %08x\n" % (i, RNG.getrandbits(32)) for i in range(40_000))


def compressors() -> dict[str, bytes]:
    with kafka_codecs():
        return {
            "gzip": kafka_codec.gzip_encode(DATA),
            "snappy-xerial": kafka_codec.snappy_encode(DATA),
            "snappy-raw": bytes(cramjam.snappy.compress_raw(DATA)),
            "lz4-kafka": kafka_codec.lz4_encode(DATA),
            "lz4-kip57": kafka_codec.lz4_encode_old_kafka(DATA),
            "lz4-linked": bytes(cramjam.lz4.compress(DATA)),
            "zstd": bytes(cramjam.zstd.compress(DATA)),
            "zstd-stream": _zstd_stream(DATA),
        }


def _zstd_stream(data: bytes) -> bytes:
    compressor = cramjam.zstd.Compressor()
    compressor.compress(data)
    return bytes(compressor.finish())


COMPRESSED = compressors()


def codec_of(name: str) -> str:
    return name.split("-")[0]


@pytest.mark.parametrize("name", list(COMPRESSED))
def test_round_trip_and_exact_limit(name: str) -> None:
    data = COMPRESSED[name]
    assert decompress(codec_of(name), data) == DATA
    assert decompress(codec_of(name), memoryview(data), max_bytes=len(DATA)) == DATA
    with pytest.raises(DecodeError, match=f"more than {len(DATA) - 1} bytes"):
        decompress(codec_of(name), data, max_bytes=len(DATA) - 1)


def test_growth_path_is_exercised() -> None:
    # No size hint and a ratio above the first guess's: the buffer must grow to fit.
    data = DATA[:2000] * 500
    stream = _zstd_stream(data)
    assert stream[4] & 0xC0 == 0 and not stream[4] & 0x20  # no content size field
    assert len(data) > 64 * len(stream)
    assert decompress("zstd", stream) == data


def test_gzip_with_a_lying_size_trailer_and_many_members() -> None:
    lying = bytearray(COMPRESSED["gzip"])
    struct.pack_into("<I", lying, len(lying) - 4, 10)
    with pytest.raises(DecodeError, match="corrupt gzip"):
        decompress("gzip", lying)  # the size is checked, and the buffer grew to find out
    two = zlib.compress(b"a" * 1000, wbits=31) + zlib.compress(b"b" * 5000, wbits=31)
    assert decompress("gzip", two) == b"a" * 1000 + b"b" * 5000


def test_lz4_content_size_over_the_limit_fails_before_decompressing() -> None:
    frame = bytearray(b"\x04\x22\x4d\x18\x68\x40") + (1 << 40).to_bytes(8, "little") + b"\x00"
    with pytest.raises(DecodeError, match="more than"):
        decompress("lz4", bytes(frame) + b"\x00" * 8)


def test_none_and_unknown() -> None:
    assert decompress("none", memoryview(b"abc")) == b"abc"
    with pytest.raises(DecodeError):
        decompress("none", b"abcd", max_bytes=3)
    with pytest.raises(DecodeError, match="unknown compression"):
        decompress(9, b"x")


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_garbage_and_truncation(codec: str) -> None:
    name = {"snappy": "snappy-xerial", "lz4": "lz4-kafka"}.get(codec, codec)
    good = COMPRESSED[name]
    # (b"\x00" alone is valid raw snappy for no bytes.)
    samples = [b"", RNG.randbytes(100), good[: len(good) // 2], good[:-5], good[:20]]
    samples += [good[:16] + RNG.randbytes(64), bytes(b ^ 0x5A for b in good[:200])]
    for sample in samples:
        with pytest.raises(DecodeError):
            decompress(codec, sample)


def test_snappy_declared_sizes_are_checked_before_allocating() -> None:
    # A raw snappy stream is its length varint first: claim 4 GiB in 5 bytes.
    with pytest.raises(DecodeError, match="more than"):
        decompress("snappy", b"\xff\xff\xff\xff\x0f" + b"\x00" * 10)
    xerial = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    block = bytes(cramjam.snappy.compress_raw(bytes(32 * 1024)))
    bomb = xerial + (struct.pack(">i", len(block)) + block) * 100
    with pytest.raises(DecodeError, match="more than"):
        decompress("snappy", bomb, max_bytes=1024 * 1024)
    for bad_length in (-1, 1 << 30):
        with pytest.raises(DecodeError, match="block length"):
            decompress("snappy", xerial + struct.pack(">i", bad_length) + block)


def test_lz4_descriptor_checks() -> None:
    good = COMPRESSED["lz4-kafka"]
    for index, value in ((4, 0x00), (4, 0x61), (5, 0x00), (5, 0x41)):
        bad = bytearray(good)
        bad[index] = value  # version 0, dictionary id, block size code 0, reserved bit
        with pytest.raises(DecodeError, match="LZ4"):
            decompress("lz4", bad)
