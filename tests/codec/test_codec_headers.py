"""Request and response header versions, KIP-511's ApiVersions rule and KIP-1313's header v3."""

from __future__ import annotations

import struct
import uuid

import pytest

from codec import (
    DEFAULT_POLICY,
    ApiKey,
    DecodeError,
    HeaderPolicy,
    Request,
    UnknownApiError,
    decode_request,
    decode_response,
    encode_request,
)

INSTANCE = uuid.UUID("9b8f7c1e-2d3a-4b5c-8d9e-0f1a2b3c4d5e")


def classic_string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def compact_string(text: str) -> bytes:
    raw = text.encode()
    return bytes([len(raw) + 1]) + raw


def v3_header(api_key: int, version: int, correlation_id: int, client_id: str) -> bytes:
    # KIP-1313 request header v3: v2's fields, then ClientInstanceId, then tagged fields.
    return (
        struct.pack(">hhi", api_key, version, correlation_id)
        + classic_string(client_id)
        + INSTANCE.bytes
        + b"\x00"
    )


@pytest.mark.parametrize(
    ("api_key", "version", "expected"),
    [
        (7, 0, 0),  # ControlledShutdown v0: the only user of request header v0
        (7, 1, 1),
        (3, 1, 1),
        (3, 9, 2),  # first flexible Metadata
        (47, 0, 1),
        (47, 1, 3),  # KIP-1313 OffsetDelete v1
        (71, 0, 2),
        (71, 1, 3),  # KIP-1313 GetTelemetrySubscriptions v1
        (72, 1, 3),  # KIP-1313 PushTelemetry v1
        (17, 1, 1),  # SaslHandshake never moves to v3
    ],
)
def test_request_header_versions(api_key: int, version: int, expected: int) -> None:
    assert DEFAULT_POLICY.request_header_version(api_key, version) == expected


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_response_always_uses_header_v0(version: int) -> None:
    # KIP-511: the client reads the error code at a fixed offset whatever the version.
    assert DEFAULT_POLICY.response_header_version(18, version) == 0
    body_v3 = b"\x00\x00" + b"\x01" + b"\x00\x00\x00\x00" + b"\x00"  # error, no keys, throttle, tags
    if version >= 3:
        frame = struct.pack(">i", 7) + body_v3
        response = decode_response(frame, 18, version)
        assert response.header == {"correlation_id": 7}
        assert response.body["api_keys"] == []


def test_flexible_response_header_has_tagged_fields() -> None:
    assert DEFAULT_POLICY.response_header_version(3, 9) == 1
    assert DEFAULT_POLICY.response_header_version(3, 8) == 0


def test_offset_delete_v1_with_header_v3() -> None:
    body = compact_string("group-a") + b"\x02" + compact_string("orders") + b"\x02"
    body += struct.pack(">i", 3) + b"\x00" + b"\x00" + b"\x00"
    frame = v3_header(47, 1, 42, "app") + body
    request = decode_request(frame)
    assert request.header_version == 3
    assert request.header["client_instance_id"] == INSTANCE
    assert request.header["client_id"] == "app"
    assert request.body == {
        "group_id": "group-a",
        "topics": [{"name": "orders", "partitions": [{"partition_index": 3}]}],
    }
    assert encode_request(request) == frame


def test_telemetry_v1_requests_carry_the_id_only_in_the_header() -> None:
    get_v1 = decode_request(v3_header(71, 1, 1, "rdkafka") + b"\x00")
    assert get_v1.body == {}
    assert get_v1.header["client_instance_id"] == INSTANCE
    push = struct.pack(">i", 5) + b"\x00" + b"\x01" + b"\x04abc" + b"\x00"
    push_v1 = decode_request(v3_header(72, 1, 2, "rdkafka") + push)
    assert "client_instance_id" not in push_v1.body
    assert push_v1.body["subscription_id"] == 5
    assert bytes(push_v1.body["metrics"]) == b"abc"
    get_v0 = decode_request(
        struct.pack(">hhi", ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, 3) + classic_string("rdkafka") + b"\x00" + INSTANCE.bytes + b"\x00"
    )
    assert get_v0.header_version == 2
    assert get_v0.body["client_instance_id"] == INSTANCE


def test_header_v3_declared_as_data_for_other_rpcs() -> None:
    # A broker that adopts KIP-1313 for every RPC: DeleteGroups v4 = v3's body on header v3.
    policy = HeaderPolicy(header_v3={42: 4})
    frame = v3_header(42, 4, 9, "admin") + b"\x02" + compact_string("g1") + b"\x00"
    request = decode_request(frame, policy)
    assert request.header_version == 3
    assert request.header["client_instance_id"] == INSTANCE
    assert request.body == {"groups_names": ["g1"]}
    assert encode_request(request, policy) == frame
    # Without the declaration the version is unknown, and v3 still uses header v2.
    with pytest.raises(UnknownApiError):
        decode_request(frame)
    assert policy.request_header_version(42, 3) == 2


def test_null_client_id_is_allowed() -> None:
    frame = struct.pack(">hhih", ApiKey.API_VERSIONS, 0, 1, -1)
    request = decode_request(frame)
    assert request.header["client_id"] is None
    assert encode_request(request) == frame


def test_unknown_api_key_is_its_own_error() -> None:
    with pytest.raises(UnknownApiError) as info:
        decode_request(struct.pack(">hhih", 999, 0, 1, -1))
    assert isinstance(info.value, DecodeError)
    assert info.value.api_key == 999


def test_request_round_trip_through_encoder_keeps_header_v3_id() -> None:
    request = Request(
        47, 1, {"correlation_id": 5, "client_id": None, "client_instance_id": INSTANCE},
        {"group_id": "g", "topics": []},
    )
    decoded = decode_request(encode_request(request))
    assert decoded.header["client_instance_id"] == INSTANCE
    assert decoded.header["client_id"] is None
