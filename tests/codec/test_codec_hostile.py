"""Hostile bytes: the codec answers with a message or DecodeError, never anything else,
and never allocates far beyond what the input could justify."""

from __future__ import annotations

import contextlib
import struct
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.codec_frames import (
    SEEDS,
    TRUNCATION_SEEDS,
    golden_seeds,
    metadata_v0_request,
    mutated,
)
from support.examples import examples

from codec import (
    ApiKey,
    DecodeError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)


def decoder_for(direction: str, api_key: int, version: int) -> Callable[[bytes], Any]:
    if direction == "request":
        return decode_request
    return lambda frame: decode_response(frame, api_key, version)


def assert_only_decode_error(decode: Callable[[bytes], Any], frame: bytes) -> None:
    with contextlib.suppress(DecodeError):
        decode(frame)


def peak_bytes(action: Callable[[], Any]) -> int:
    tracemalloc.start()
    with contextlib.suppress(DecodeError):
        action()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def test_huge_array_count_in_a_tiny_frame_allocates_nothing() -> None:
    frame = metadata_v0_request(54_000_000)
    with pytest.raises(DecodeError, match="array count exceeds") as info:
        decode_request(frame)
    assert info.value.api_key == ApiKey.METADATA and info.value.direction == "request"
    assert peak_bytes(lambda: decode_request(frame)) < 64 * 1024


def test_null_where_the_schema_forbids_it() -> None:
    with pytest.raises(DecodeError, match="not nullable"):
        decode_request(metadata_v0_request(-1))  # Metadata v0 topics are never null
    nullable_v1 = struct.pack(">hhih", ApiKey.METADATA, 1, 1, 0) + struct.pack(">i", -1)
    assert decode_request(nullable_v1).body["topics"] is None


def test_million_tagged_fields_in_a_header_are_refused_with_bounded_memory() -> None:
    count = 1_000_000
    tags = b"".join(bytes([0x80 | (t & 0x7F), t >> 7 & 0x7F, 0]) for t in range(count))
    varint_count = bytes([0x80 | (count & 0x7F), 0x80 | (count >> 7 & 0x7F), count >> 14])
    frame = struct.pack(">hhih", ApiKey.METADATA, 12, 1, 0) + varint_count + tags + b"\x01\x00\x00"
    with pytest.raises(DecodeError, match="too many tagged fields"):
        decode_request(frame)
    assert peak_bytes(lambda: decode_request(frame)) < 1024 * 1024


def test_tagged_field_declaring_16_mib() -> None:
    frame = struct.pack(">hhih", ApiKey.METADATA, 12, 1, 0) + b"\x01" + b"\x05" + b"\x80\x80\x80\x08" + b"x"
    with pytest.raises(DecodeError, match="tagged field"):
        decode_request(frame)


def test_string_longer_than_the_frame() -> None:
    frame = struct.pack(">hhih", ApiKey.API_VERSIONS, 0, 1, 30000) + b"abc"
    with pytest.raises(DecodeError, match="past the end"):
        decode_request(frame)


def test_invalid_utf8_is_a_decode_error() -> None:
    frame = struct.pack(">hhih", ApiKey.API_VERSIONS, 0, 1, 2) + b"\xff\xfe"
    with pytest.raises(DecodeError, match="UTF-8"):
        decode_request(frame)


@pytest.mark.parametrize(("direction", "frame", "api_key", "version"), TRUNCATION_SEEDS + golden_seeds(200))
def test_every_truncation_is_a_decode_error(
    direction: str, frame: bytes, api_key: int, version: int
) -> None:
    decode = decoder_for(direction, api_key, version)
    decode(frame)
    for cut in range(len(frame)):
        with pytest.raises(DecodeError):
            decode(frame[:cut])


@pytest.mark.parametrize(("direction", "frame", "api_key", "version"), SEEDS)
def test_trailing_bytes_are_kept_and_re_encoded(
    direction: str, frame: bytes, api_key: int, version: int
) -> None:
    # Kafka ignores bytes after a message's last field, and real clients send them
    # (librdkafka 2.16's Metadata v12 request): decode, keep them, put them back.
    decode = decoder_for(direction, api_key, version)
    for junk in (b"\x00", b"\xff" * 7, b"trailing"):
        message = decode(frame + junk)
        assert bytes(message.body["_trailing"]) == junk
        encode = encode_request if direction == "request" else encode_response
        assert encode(message) == frame + junk


def test_librdkafka_metadata_v12_request_with_trailing_bytes() -> None:
    frame = bytes.fromhex("0003000c000000050007") + b"rdkafka" + bytes.fromhex("0000000000010000")
    request = decode_request(frame)
    assert request.header["client_id"] == "rdkafka"
    assert request.body["topics"] is None
    assert bytes(request.body["_trailing"]) == b"\x01\x00\x00"
    assert encode_request(request) == frame


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=mutated())
def test_mutated_frames_raise_only_decode_error(case: tuple[str, bytes, int, int]) -> None:
    direction, frame, api_key, version = case
    assert_only_decode_error(decoder_for(direction, api_key, version), frame)


@settings(max_examples=examples(200), deadline=None)
@given(frame=st.binary(max_size=64), api_key=st.integers(-1, 95), version=st.integers(-1, 20))
def test_random_bytes_raise_only_decode_error(frame: bytes, api_key: int, version: int) -> None:
    assert_only_decode_error(decode_request, frame)
    assert_only_decode_error(lambda f: decode_response(f, api_key, version), frame)
