"""Frames captured from real clients and a real broker decode and re-encode byte-exactly."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.paths import GOLDEN

from codec import decode_request, decode_response, encode_request, encode_response
from codec.groups import group_payloads
from codec.records import iter_records, summarize

INDEX = json.loads((GOLDEN / "index.json").read_text())
FRAMES: list[dict[str, Any]] = INDEX["frames"]


def frame_bytes(entry: dict[str, Any]) -> bytes:
    return (GOLDEN / entry["file"]).read_bytes()


def test_the_golden_set_covers_every_client_and_the_apis_that_matter() -> None:
    clients = {entry["client"] for entry in FRAMES}
    assert {"kafka-python", "aiokafka", "confluent-kafka"} <= clients
    apis = {entry["api_key"] for entry in FRAMES}
    assert {0, 1, 2, 3, 8, 9, 10, 11, 12, 14, 18, 19, 20, 22, 32} <= apis
    produce_versions = {e["api_version"] for e in FRAMES if e["api_key"] == 0}
    assert min(produce_versions) <= 2  # pre-KIP-896 versions from pinned kafka-python


@pytest.mark.parametrize("entry", FRAMES, ids=lambda e: e["file"])
def test_golden_frame_round_trips(entry: dict[str, Any]) -> None:
    data = frame_bytes(entry)
    if entry["direction"] == "req":
        request = decode_request(data)
        assert (request.api_key, request.api_version) == (entry["api_key"], entry["api_version"])
        assert request.correlation_id == entry["correlation_id"]
        assert encode_request(request) == data
    else:
        response = decode_response(data, entry["api_key"], entry["api_version"])
        assert response.correlation_id == entry["correlation_id"]
        assert encode_response(response) == data


def test_real_produce_batches_summarise_and_iterate() -> None:
    compressions: set[str] = set()
    records = 0
    for entry in FRAMES:
        if entry["api_key"] != 0 or entry["direction"] != "req":
            continue
        request = decode_request(frame_bytes(entry))
        for topic in request.body["topic_data"]:
            for partition in topic["partition_data"]:
                stats = summarize(partition["records"], verify_crc=True)
                compressions |= stats.compressions
                listed = list(iter_records(partition["records"], verify_crc=True))
                if stats.unknown_count_batches == 0:
                    assert len(listed) == stats.records
                records += len(listed)
    assert {"none", "gzip", "snappy", "lz4", "zstd"} <= compressions
    assert records > 0


def test_real_group_payloads_decode_as_the_consumer_protocol() -> None:
    decoded = 0
    for entry in FRAMES:
        if entry["api_key"] not in (11, 14):
            continue
        data = frame_bytes(entry)
        if entry["direction"] == "req":
            body = decode_request(data).body
            payloads = group_payloads(entry["api_key"], "request", body)
        else:
            body = decode_response(data, entry["api_key"], entry["api_version"]).body
            payloads = group_payloads(entry["api_key"], "response", body)
        assert payloads is not None
        for payload in list((payloads.get("subscriptions") or {}).values()) + [payloads.get("assignment")]:
            if payload and not payload.get("opaque"):
                decoded += 1
                assert "version" in payload
    assert decoded > 0
