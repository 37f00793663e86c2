"""KIP-559: group payloads decoded from the protocol type carried in the same message."""

from __future__ import annotations

import struct

from codec import ApiKey, Response, decode_response, encode_data, encode_response
from codec.groups import decode_assignment, decode_subscription, group_payloads


def classic_string(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def subscription_v0(topics: list[str], user_data: bytes | None) -> bytes:
    # Hand-built, independent of our encoder: version, [topics], nullable user data.
    out = struct.pack(">hi", 0, len(topics)) + b"".join(classic_string(t) for t in topics)
    out += struct.pack(">i", -1) if user_data is None else struct.pack(">i", len(user_data)) + user_data
    return out


def test_consumer_subscription_v0_hand_built() -> None:
    result = decode_subscription("consumer", subscription_v0(["orders", "payments"], b"xyz"))
    assert result == {"version": 0, "topics": ["orders", "payments"], "user_data_bytes": 3}


def test_consumer_subscription_v3_with_rack_and_owned_partitions() -> None:
    data = struct.pack(">h", 3) + encode_data("ConsumerProtocolSubscription", 3, {
        "topics": ["t"], "user_data": None, "generation_id": 7, "rack_id": "az1",
        "owned_partitions": [{"topic": "t", "partitions": [0, 2]}],
    })
    result = decode_subscription("consumer", data)
    assert result["version"] == 3 and result["rack_id"] == "az1" and result["generation_id"] == 7
    assert result["owned_partitions"] == [{"topic": "t", "partitions": [0, 2]}]


def test_newer_consumer_version_reads_known_fields_and_ignores_the_rest() -> None:
    v3 = encode_data("ConsumerProtocolSubscription", 3, {"topics": ["t"], "rack_id": None})
    result = decode_subscription("consumer", struct.pack(">h", 9) + v3 + b"future-field")
    assert result["version"] == 9 and result["topics"] == ["t"]


def test_consumer_assignment() -> None:
    data = struct.pack(">h", 1) + encode_data("ConsumerProtocolAssignment", 1, {
        "assigned_partitions": [{"topic": "orders", "partitions": [1, 3]}], "user_data": b"",
    })
    assert decode_assignment("consumer", data) == {
        "version": 1, "assigned_partitions": [{"topic": "orders", "partitions": [1, 3]}],
        "user_data_bytes": 0,
    }


def test_other_protocols_stay_opaque_with_their_size() -> None:
    assert decode_subscription("mystery", b"abcd") == {
        "opaque": True, "reason": "protocol type 'mystery' is not decoded", "bytes": 4,
    }


def test_join_group_response_v6_has_no_protocol_type_so_nothing_is_guessed() -> None:
    meta = subscription_v0(["t"], None)
    response = Response(ApiKey.JOIN_GROUP, 6, {"correlation_id": 1}, {
        "throttle_time_ms": 0, "error_code": 0, "generation_id": 4, "protocol_name": "range",
        "leader": "m1", "member_id": "m1",
        "members": [{"member_id": "m1", "group_instance_id": None, "metadata": meta}],
    })
    decoded = decode_response(encode_response(response), 11, 6)
    assert "protocol_type" not in decoded.body
    payloads = group_payloads(11, "response", decoded.body)
    assert payloads is not None
    assert payloads["protocol_type"] is None
    assert payloads["subscriptions"]["m1"] == {
        "opaque": True, "reason": "this message version carries no protocol type", "bytes": len(meta),
    }
    decoded_v7 = decode_response(
        encode_response(Response(ApiKey.JOIN_GROUP, 7, {"correlation_id": 1}, {
            **response.body, "protocol_type": "consumer"})), 11, 7)
    payloads_v7 = group_payloads(11, "response", decoded_v7.body)
    assert payloads_v7 is not None
    assert payloads_v7["subscriptions"]["m1"] == {"version": 0, "topics": ["t"], "user_data_bytes": None}


def test_sync_group_v5_carries_type_and_name() -> None:
    assignment = struct.pack(">h", 0) + encode_data("ConsumerProtocolAssignment", 0, {
        "assigned_partitions": [{"topic": "t", "partitions": [0]}], "user_data": None,
    })
    body = {"throttle_time_ms": 0, "error_code": 0, "protocol_type": "consumer",
            "protocol_name": "range", "assignment": assignment}
    payloads = group_payloads(14, "response", body)
    assert payloads == {
        "protocol_type": "consumer", "protocol_name": "range",
        "assignment": {"version": 0, "assigned_partitions": [{"topic": "t", "partitions": [0]}],
                       "user_data_bytes": None},
    }


def test_garbage_payload_is_reported_not_raised() -> None:
    payloads = group_payloads(14, "response", {"protocol_type": "consumer", "assignment": b"\x00"})
    assert payloads is not None and payloads["assignment"]["opaque"] is True
    assert payloads["assignment"]["reason"].startswith("undecodable")
