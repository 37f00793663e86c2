"""The interpreters' short paths (codec/interpreter.py, codec/_accel.c): the "no tagged
fields" byte, bounds checks that cover the next byte (codec/layout/'s `check` and
`peek`), one-byte varints, empty arrays. Each has a slow path beside it; these tests
make sure both are taken and agree, decoding and skimming."""

from __future__ import annotations

import contextlib
import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.codec_frames import compare, fetch_frame, join_group, metadata_frame
from support.codec_strategies import field_value, plain
from support.matrix import FLEXIBLE_RESPONSES

from codec import (
    ApiKey,
    DecodeError,
    Request,
    Response,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from codec.schema import Field, api_messages
from codec.skim import skim_response


def tagged_everywhere(fields: tuple[Field, ...], version: int) -> st.SearchStrategy[dict[str, Any]]:
    """A struct value with unknown tagged fields in every struct, at every depth."""
    present: dict[str, st.SearchStrategy[Any]] = {}
    for field in fields:
        if not field.present_in(version):
            continue
        if field.is_struct:
            value = tagged_everywhere(field.children or (), version)
            if field.is_array:
                value = st.lists(value, max_size=2)  # type: ignore[assignment]
            if field.nullable_in(version):
                value = st.one_of(st.none(), value)
            present[field.name] = value
        else:
            present[field.name] = field_value(field, version, True)
    known = {f.tag for f in fields if f.tag is not None and f.present_in(version)}
    unknown = st.lists(
        st.tuples(st.integers(0, 200).filter(lambda t: t not in known), st.binary(max_size=4)),
        max_size=2,
        unique_by=lambda pair: pair[0],
    ).map(sorted)
    return st.tuples(st.fixed_dictionaries(present), unknown).map(
        lambda pair: {**pair[0], "_unknown_tags": pair[1]} if pair[1] else pair[0]
    )


@pytest.mark.parametrize(("api_key", "version"), FLEXIBLE_RESPONSES)
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_unknown_tags_at_every_depth_round_trip_and_skim(api_key: int, version: int, data: st.DataObject) -> None:
    definition = api_messages()[api_key][1].definition(version)
    assert definition is not None
    body = data.draw(tagged_everywhere(definition.fields, version))
    frame = encode_response(Response(api_key, version, {"correlation_id": 1}, body))
    decoded = decode_response(frame, api_key, version)
    assert plain(decoded.body) == plain(body)
    assert encode_response(decoded) == frame
    compare(frame, api_key, version)


@pytest.mark.parametrize("version", [5, 9])  # classic and flexible
@pytest.mark.parametrize("size", [0, 125, 126, 127, 128, 255, 16_382, 16_383, 16_384, 70_000])
def test_bytes_lengths_across_varint_widths(size: int, version: int) -> None:
    response, frame = join_group(size, version)
    decoded = decode_response(frame, 11, version)
    assert bytes(decoded.body["members"][0]["metadata"]) == response.body["members"][0]["metadata"]
    assert encode_response(decoded) == frame
    for cut in {len(frame) - 1, len(frame) - 2, len(frame) - size - 2, len(frame) - size - 3}:
        with pytest.raises(DecodeError):
            decode_response(frame[:cut], 11, version)
        with pytest.raises(DecodeError):
            skim_response(frame[:cut], 11, version)


@pytest.mark.parametrize(("frame", "api_key", "version"), [(fetch_frame(), 1, 17), (metadata_frame(), 3, 13)])
def test_every_truncation_and_every_byte_flip(frame: bytes, api_key: int, version: int) -> None:
    decoded = decode_response(frame, api_key, version)
    assert encode_response(decoded) == frame
    compare(frame, api_key, version)
    for cut in range(len(frame)):
        with pytest.raises(DecodeError):
            decode_response(frame[:cut], api_key, version)
        with pytest.raises(DecodeError):
            skim_response(frame[:cut], api_key, version)
    for pos in range(len(frame)):
        for byte in (0x00, 0x01, 0x7F, 0x80, 0xFF):
            flipped = frame[:pos] + bytes([byte]) + frame[pos + 1 :]
            try:
                decode_response(flipped, api_key, version)
            except DecodeError:
                # The skimmer may accept what it does not read (bad UTF-8 in a host name).
                with contextlib.suppress(DecodeError):
                    skim_response(flipped, api_key, version)
            else:
                compare(flipped, api_key, version)


def test_empty_struct_arrays_cost_no_budget_and_big_ones_are_refused() -> None:
    # An element budget of 0 still decodes a message whose arrays of structs are empty.
    request = Request(ApiKey.METADATA, 12, {"correlation_id": 1, "client_id": "c"},
                      {"topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})  # fmt: skip
    assert decode_request(encode_request(request), budget=0).body["topics"] == []
    frame = encode_request(Request(ApiKey.METADATA, 12, request.header, {**request.body, "topics": [{"topic_id": uuid.UUID(int=0), "name": "t"}] * 3}))
    with pytest.raises(DecodeError, match="budget"):
        decode_request(frame, budget=2)


def test_null_in_a_field_that_is_not_nullable_after_a_peeked_byte() -> None:
    # Metadata v13 partitions: a fixed run, then replica_nodes, whose count byte the run
    # reads ahead; 0 is a null count there.
    frame = bytearray(metadata_frame())
    good = decode_response(bytes(frame), 3, 13)
    assert good.body["topics"][0]["partitions"][0]["replica_nodes"] == [1, 2]
    at = bytes(frame).index(struct.pack(">hiii", 0, 0, 1, 0) + b"\x03") + 14
    frame[at] = 0
    with pytest.raises(DecodeError, match="not nullable"):
        decode_response(bytes(frame), 3, 13)
    with pytest.raises(DecodeError, match="not nullable"):
        skim_response(bytes(frame), 3, 13)
