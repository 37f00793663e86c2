"""The skimmer finds exactly what the full decoder plus the entity collector find,
and refuses exactly the frames the full decoder refuses."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.codec_frames import compare
from support.codec_strategies import struct_value
from support.matrix import RESPONSES as MATRIX_RESPONSES
from support.paths import GOLDEN

from codec import ApiKey, DecodeError, Response, decode_response, encode_response
from codec.schema import api_messages
from codec.skim import CATEGORIES, skim_response

RESPONSES = [
    e for e in json.loads((GOLDEN / "index.json").read_text())["frames"] if e["direction"] == "resp"
]


@pytest.mark.parametrize("entry", RESPONSES, ids=lambda e: e["file"])
def test_golden_responses(entry: dict[str, Any]) -> None:
    compare((GOLDEN / entry["file"]).read_bytes(), entry["api_key"], entry["api_version"])


@pytest.mark.parametrize(("api_key", "version"), MATRIX_RESPONSES)
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_responses(api_key: int, version: int, data: st.DataObject) -> None:
    response = api_messages()[api_key][1]
    definition = response.definition(version)
    assert definition is not None
    body = data.draw(struct_value(definition.fields, version, definition.is_flexible(version)))
    frame = encode_response(Response(api_key, version, {"correlation_id": 1}, body))
    compare(frame, api_key, version)


def test_topic_ids_are_paired_with_names() -> None:
    import uuid

    topic = {"error_code": 0, "name": "orders", "topic_id": uuid.UUID(int=7), "is_internal": False,
             "partitions": [], "topic_authorized_operations": -1}
    frame = encode_response(Response(ApiKey.METADATA, 12, {"correlation_id": 1}, {
        "throttle_time_ms": 0, "brokers": [], "cluster_id": None, "controller_id": -1, "topics": [topic]}))
    _, found = skim_response(frame, 3, 12)
    assert found["topic_ids"] == [(uuid.UUID(int=7), "orders")]
    assert set(CATEGORIES) <= set(found)


@pytest.mark.parametrize("entry", RESPONSES[:40], ids=lambda e: e["file"])
def test_truncations_are_refused_like_the_full_decoder(entry: dict[str, Any]) -> None:
    frame = (GOLDEN / entry["file"]).read_bytes()
    for cut in range(0, len(frame), max(1, len(frame) // 50)):
        with pytest.raises(DecodeError):
            decode_response(frame[:cut], entry["api_key"], entry["api_version"])
        with pytest.raises(DecodeError):
            skim_response(frame[:cut], entry["api_key"], entry["api_version"])
