"""codec/stream.py: a frame fed in pieces of any size decodes as the whole frame does.

Every request and response at every version: whole, byte by byte, in random piece
sizes, with bytes after the last field; records fields compared with what summarize
says of the whole frame's records. Hostile input raises DecodeError only, and a huge
Fetch response costs the decoder its metadata, not its size.
"""

from __future__ import annotations

import struct
import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.codec_frames import exchange
from support.codec_strategies import plain
from support.matrix import CASES
from support.records_oracle import build_legacy, build_v2

from codec import (
    DEFAULT_POLICY,
    ApiKey,
    DecodeError,
    Request,
    Response,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from codec.records import summarize
from codec.schema import Field, api_messages, message
from codec.stream import FrameStream, StreamedRecords, StreamLimits, request_stream, response_stream

FETCH = ApiKey.FETCH

_BATCHES = [
    build_v2([(1000, b"k", b"v" * 40, [])]),
    build_v2([(2000 + i, None, b"x" * i, [("h", b"1")]) for i in range(5)], producer=(7, 1, 0)),
    build_v2([(3000, b"k", b"z" * 300, [])], compression="gzip", transactional=True, producer=(9, 2, 0)),
    build_legacy([(None, b"k", b"v", None), (None, None, b"w", None)], magic=0),
    build_legacy([(5000, b"k", b"v" * 50, None)] * 3, magic=1, compression="gzip"),
]


def _records_value(draw: st.DrawFn, tail: bool) -> bytes:
    batches = draw(st.lists(st.sampled_from(_BATCHES), max_size=3))
    data = b"".join(batches)
    if tail and batches and draw(st.booleans()):
        data += draw(st.sampled_from(_BATCHES))[: draw(st.integers(1, 60))]  # a cut last batch
    return data


def _fill_records(draw: st.DrawFn, fields: tuple[Field, ...], value: Any, version: int, tail: bool) -> None:
    """Replace the random bytes of records fields with real batches."""
    if not isinstance(value, dict):
        return
    for field in fields:
        if not field.present_in(version) or field.name not in value:
            continue
        inner = value[field.name]
        if field.type == "records" and inner is not None:
            value[field.name] = _records_value(draw, tail)
        elif field.children and inner is not None:
            for item in inner if field.is_array else [inner]:
                _fill_records(draw, field.children, item, version, tail)


@st.composite
def framed(draw: st.DrawFn, api_key: int, version: int, kind: str) -> tuple[bytes, Request | Response]:
    original = draw(exchange(api_key, version, kind))
    req, resp = api_messages()[api_key]
    msg = req if kind == "request" else resp
    definition = msg.definition(version)
    assert definition is not None
    _fill_records(draw, definition.fields, original.body, version, kind == "response")
    if kind == "request":
        return encode_request(original), original  # type: ignore[arg-type]
    return encode_response(original), original  # type: ignore[arg-type]


def _stream_for(kind: str, api_key: int, version: int, size: int, limits: StreamLimits) -> FrameStream:
    if kind == "request":
        return request_stream(api_key, version, size, limits=limits)
    return response_stream(api_key, version, size, limits=limits)


def _pieces(frame: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(frame) + 1) for c in cuts} | {0, len(frame)})
    return [frame[a:b] for a, b in zip(points, points[1:], strict=False)]


def _streamed(kind: str, api_key: int, version: int, pieces: list[bytes], limits: StreamLimits) -> tuple[Any, Any]:
    stream = _stream_for(kind, api_key, version, sum(map(len, pieces)), limits)
    for piece in pieces:
        stream.feed(memoryview(piece))
    return stream.finish()


def _normal(value: Any) -> Any:
    if isinstance(value, StreamedRecords):
        return ("records", value.size, value.stats)
    if isinstance(value, dict):  # in order: a streamed dict has the decoded one's key order
        return [(k, _normal(v)) for k, v in value.items() if k != "_explicit_tags"]
    if isinstance(value, list | tuple):
        return type(value)(_normal(v) for v in value)
    return plain(value)


def _whole(kind: str, api_key: int, version: int, frame: bytes) -> tuple[Any, Any]:
    if kind == "request":
        decoded: Request | Response = decode_request(frame)
    else:
        decoded = decode_response(frame, api_key, version)
    return decoded.header, _with_stats(decoded.body, api_key, version, kind)


def _with_stats(body: dict[str, Any], api_key: int, version: int, kind: str) -> Any:
    req, resp = api_messages()[api_key]
    definition = (req if kind == "request" else resp).definition(version)
    assert definition is not None
    return _stats_in(definition.fields, body, version, kind == "response")


def _stats_in(fields: tuple[Field, ...], value: Any, version: int, tail: bool) -> Any:
    if not isinstance(value, dict):
        return value
    out = dict(value)
    for field in fields:
        if not field.present_in(version) or field.name not in out or out[field.name] is None:
            continue
        if field.type == "records":
            records = out[field.name]
            out[field.name] = ("records", len(records), summarize(records, allow_partial_tail=tail))
        elif field.children:
            inner = out[field.name]
            if field.is_array:
                out[field.name] = [_stats_in(field.children, item, version, tail) for item in inner]
            else:
                out[field.name] = _stats_in(field.children, inner, version, tail)
    if "_trailing" in out:
        out["_trailing"] = bytes(out["_trailing"])
    return out


LIMITS = StreamLimits()


@pytest.mark.parametrize(("api_key", "version", "kind"), CASES)
@settings(max_examples=1, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_pieces_of_any_size_decode_as_the_whole_frame(api_key: int, version: int, kind: str, data: st.DataObject) -> None:
    frame, _ = data.draw(framed(api_key, version, kind))
    if data.draw(st.booleans()):
        frame += data.draw(st.binary(min_size=1, max_size=5))  # bytes after the last field
    header, body = _whole(kind, api_key, version, frame)
    expected = (_normal(header), _normal(body))
    cuts = [data.draw(st.lists(st.integers(0, len(frame)), max_size=8)) for _ in range(3)]
    for pieces in [[frame]] + [_pieces(frame, c) for c in cuts]:
        got = _streamed(kind, api_key, version, pieces, LIMITS)
        assert (_normal(got[0]), _normal(got[1])) == expected


@pytest.mark.parametrize(("api_key", "version"), [(1, 4), (1, 11), (1, 16), (0, 3), (0, 9), (3, 12), (14, 5)])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_byte_by_byte(api_key: int, version: int, data: st.DataObject) -> None:
    for kind in ("request", "response"):
        frame, _ = data.draw(framed(api_key, version, kind))
        header, body = _whole(kind, api_key, version, frame)
        got = _streamed(kind, api_key, version, [frame[i : i + 1] for i in range(len(frame))], LIMITS)
        assert (_normal(got[0]), _normal(got[1])) == (_normal(header), _normal(body))


@pytest.mark.parametrize(("api_key", "version", "kind"), CASES[::9])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_hostile_pieces_raise_only_decode_error(api_key: int, version: int, kind: str, data: st.DataObject) -> None:
    frame, _ = data.draw(framed(api_key, version, kind))
    junk = bytearray(frame)
    for _ in range(data.draw(st.integers(1, 6))):
        if junk:
            junk[data.draw(st.integers(0, len(junk) - 1))] = data.draw(st.integers(0, 255))
    junk = junk[: data.draw(st.integers(0, len(junk)))] if data.draw(st.booleans()) else junk
    cuts = data.draw(st.lists(st.integers(0, max(1, len(junk))), max_size=6))
    size = len(junk) + data.draw(st.integers(0, 3))  # also frames that end early
    stream = _stream_for(kind, api_key, version, size, LIMITS)
    try:
        for piece in _pieces(bytes(junk), cuts):
            stream.feed(piece)
        stream.finish()
    except DecodeError:
        pass


def _fetch_response(partitions: int, batch: bytes, batches: int) -> bytes:
    """A Fetch v4 response of `partitions` partitions of topic "t", each with `batches`
    copies of `batch` as its records."""
    records = batch * batches
    out = bytearray(struct.pack(">ii", 7, 0))  # correlation id, throttle time
    out += struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", partitions)
    for p in range(partitions):
        out += struct.pack(">ihqqi", p, 0, 10, 10, -1)  # no aborted transactions (null)
        out += struct.pack(">i", len(records)) + records
    return bytes(out)


def test_a_huge_fetch_response_costs_its_metadata_not_its_size() -> None:
    batch = build_v2([(1000, b"k", b"v" * 60_000, [])])
    frame = _fetch_response(4, batch, 250)  # 4 partitions of 15 MB
    assert len(frame) > 60_000_000
    view = memoryview(frame)
    tracemalloc.start()
    try:
        stream = response_stream(FETCH, 4, len(frame))
        for at in range(0, len(frame), 262_144):
            stream.feed(view[at : at + 262_144])
        _, body = stream.finish()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, peak
    partitions = body["responses"][0]["partitions"]
    assert len(partitions) == 4
    for partition in partitions:
        records = partition["records"]
        assert isinstance(records, StreamedRecords)
        assert records.stats == summarize(batch * 250)
        assert records.detail == b""


def test_record_detail_keeps_only_the_first_whole_batches_up_to_its_bound() -> None:
    batch = build_v2([(1000, b"k", b"v" * 1000, [("traceparent", b"00-1")])])
    frame = _fetch_response(1, batch, 50)
    limits = StreamLimits(record_detail_bytes=3 * len(batch) + 10)
    stream = response_stream(FETCH, 4, len(frame), limits=limits)
    stream.feed(frame)
    records = stream.finish()[1]["responses"][0]["partitions"][0]["records"]
    assert records.detail == batch * 3
    assert records.stats.batches == 50


def test_arrays_past_the_element_bound_are_parsed_and_dropped() -> None:
    frame = _fetch_response(300, build_v2([(1, None, b"v", [])]), 1)
    stream = response_stream(FETCH, 4, len(frame), limits=StreamLimits(max_elements=101))
    stream.feed(frame)
    body = stream.finish()[1]
    assert len(body["responses"][0]["partitions"]) == 100  # the topic took one
    assert stream.dropped_elements == 200


def test_bytes_over_the_field_bound_are_skipped_and_long_strings_refused() -> None:
    # SaslAuthenticate v0 request: one bytes field.
    token = b"x" * 100
    body = struct.pack(">i", len(token)) + token
    header = struct.pack(">hhih", ApiKey.SASL_AUTHENTICATE, 0, 1, 1) + b"c"
    stream = request_stream(36, 0, len(header + body), limits=StreamLimits(max_field_bytes=50))
    stream.feed(header + body)
    assert stream.finish()[1]["auth_bytes"] is None
    long_id = struct.pack(">hhih", ApiKey.SASL_AUTHENTICATE, 0, 1, 60) + b"c" * 60 + body
    stream = request_stream(36, 0, len(long_id), limits=StreamLimits(max_field_bytes=50))
    with pytest.raises(DecodeError):
        stream.feed(long_id)
    with pytest.raises(DecodeError):
        stream.finish()


def test_more_bytes_than_the_frame_or_fewer_are_decode_errors() -> None:
    frame = _fetch_response(1, build_v2([(1, None, b"v", [])]), 2)
    stream = response_stream(FETCH, 4, len(frame) - 1)
    with pytest.raises(DecodeError):
        stream.feed(frame)
    stream = response_stream(FETCH, 4, len(frame) + 1)
    stream.feed(frame)
    with pytest.raises(DecodeError):
        stream.finish()


def test_header_and_body_versions_follow_the_policy() -> None:
    definition = message("FetchResponse").definition(16)
    assert definition is not None and definition.is_flexible(16)
    assert DEFAULT_POLICY.response_header_version(FETCH, 16) == 1


def test_a_piece_that_takes_too_long_to_walk_ends_the_decode() -> None:
    frame = _fetch_response(5000, build_v2([(1, None, b"v", [])]), 1)
    slow = response_stream(FETCH, 4, len(frame), limits=StreamLimits(max_seconds_per_piece=1e-9))
    with pytest.raises(DecodeError, match="took over"):
        slow.feed(frame)
    slow.feed(b"")  # ignored from then on
    with pytest.raises(DecodeError, match="took over"):
        slow.finish()
    unbounded = response_stream(FETCH, 4, len(frame))
    unbounded.feed(frame)
    assert len(unbounded.finish()[1]["responses"][0]["partitions"]) == 5000
