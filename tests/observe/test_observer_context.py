"""What the observing hooks learn from earlier messages and use for later ones: the
principal in a raw SASL token (after SaslHandshake v0), a group's protocol type for
message versions that do not carry it, topic names for requests that name topics by id."""

from __future__ import annotations

import struct
import uuid
from pathlib import Path
from typing import Any

from support.hooks_harness import PASSWORD, Harness, header

from codec import ApiKey, Request, Response

GROUP, MEMBER, TOPIC = "g1", "m-1", "orders"


def _string(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def subscription(topic: str) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, null user data."""
    return struct.pack(">hi", 0, 1) + _string(topic) + struct.pack(">i", -1)


def assignment(topic: str) -> bytes:
    """ConsumerProtocolAssignment v0: version, [topic, [partition 0]], null user data."""
    return struct.pack(">hi", 0, 1) + _string(topic) + struct.pack(">iii", 1, 0, -1)


def test_raw_sasl_token_gives_the_principal_never_the_password(tmp_path: Path) -> None:
    h = Harness(tmp_path, lag=None)
    h.send(
        Request(ApiKey.SASL_HANDSHAKE, 0, header(1), {"mechanism": "PLAIN"}),
        Response(ApiKey.SASL_HANDSHAKE, 0, {"correlation_id": 1}, {"error_code": 0, "mechanisms": ["PLAIN"]}),
    )
    assert h.lines()[-1]["principal"] is None
    h.hooks.sasl_token(h.info, memoryview(b"\x00bob\x00" + PASSWORD.encode()))
    assert h.info.identity["principal"] == "bob"  # /clients
    h.send(
        Request(ApiKey.API_VERSIONS, 0, header(2), {}),
        Response(ApiKey.API_VERSIONS, 0, {"correlation_id": 2}, {"error_code": 0, "api_keys": []}),
    )
    h.close()
    assert h.lines()[-2]["principal"] == "bob" and h.lines()[-1]["principal"] == "bob"
    assert PASSWORD not in h.path.read_text()


def join(version: int, correlation_id: int) -> tuple[Request, Response]:
    request = Request(
        ApiKey.JOIN_GROUP,
        version,
        header(correlation_id),
        {
            "group_id": GROUP,
            "session_timeout_ms": 3000,
            "rebalance_timeout_ms": 3000,
            "member_id": MEMBER,
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": subscription(TOPIC)}],
        },
    )
    response = Response(
        ApiKey.JOIN_GROUP,
        version,
        {"correlation_id": correlation_id},
        {
            "throttle_time_ms": 0,
            "error_code": 0,
            "generation_id": 4,
            "protocol_name": "range",
            "leader": MEMBER,
            "member_id": MEMBER,
            "members": [
                {"member_id": MEMBER, "group_instance_id": None, "metadata": subscription(TOPIC)}
            ],
        },
    )
    return request, response


def sync(version: int, correlation_id: int, generation: int = 4) -> tuple[Request, Response]:
    request = Request(
        ApiKey.SYNC_GROUP,
        version,
        header(correlation_id),
        {
            "group_id": GROUP,
            "generation_id": generation,
            "member_id": MEMBER,
            "group_instance_id": None,
            "assignments": [{"member_id": MEMBER, "assignment": assignment(TOPIC)}],
        },
    )
    response = Response(
        ApiKey.SYNC_GROUP,
        version,
        {"correlation_id": correlation_id},
        {"throttle_time_ms": 0, "error_code": 0, "assignment": assignment(TOPIC)},
    )
    return request, response


DECODED = {"version": 0, "assigned_partitions": [{"topic": TOPIC, "partitions": [0]}],
           "user_data_bytes": None}  # fmt: skip


def test_group_messages_without_a_protocol_type_are_decoded(tmp_path: Path) -> None:
    h = Harness(tmp_path, lag=None)
    h.send(*join(5, 1))  # JoinGroup v5 and SyncGroup v3: no protocol type (KIP-559)
    h.send(*sync(3, 2))
    h.send(*sync(3, 3, generation=9))  # a generation not joined here: left opaque
    joined, synced, other = h.lines()[1:]
    # the request's subscriptions (by protocol) and the leader's (by member) both stay
    assert joined["subscriptions"]["range"]["topics"] == [TOPIC]
    assert joined["member_subscriptions"][MEMBER]["topics"] == [TOPIC]
    assert synced["protocol_type"] == "consumer" and synced["generation_id"] == 4
    assert synced["assignments"] == {MEMBER: DECODED} and synced["assignment"] == DECODED
    assert other["assignments"][MEMBER]["opaque"] and "protocol_type" not in other


def test_failed_join_teaches_nothing(tmp_path: Path) -> None:
    h = Harness(tmp_path, lag=None)
    request, response = join(5, 1)
    response.body["error_code"] = 79  # MEMBER_ID_REQUIRED
    h.send(request, response)
    h.send(*sync(3, 2))
    assert h.lines()[-1]["assignments"][MEMBER]["opaque"]


def fetch_v13(correlation_id: int, topic_id: uuid.UUID) -> Request:
    return Request(
        ApiKey.FETCH,
        13,
        header(correlation_id),
        {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "rack_id": "",
            "forgotten_topics_data": [],
            "topics": [
                {
                    "topic_id": topic_id,
                    "partitions": [
                        {
                            "partition": 0,
                            "current_leader_epoch": -1,
                            "fetch_offset": 0,
                            "last_fetched_epoch": -1,
                            "log_start_offset": -1,
                            "partition_max_bytes": 1024,
                        }
                    ],
                }
            ],
        },
    )


def fetch_v13_response(correlation_id: int) -> Response:
    return Response(
        ApiKey.FETCH,
        13,
        {"correlation_id": correlation_id},
        {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": []},
    )


def metadata_naming(topic_id: uuid.UUID) -> tuple[Request, Response]:
    body: dict[str, Any] = {
        "throttle_time_ms": 0,
        "brokers": [],
        "cluster_id": "c",
        "controller_id": 1,
        "topics": [
            {
                "error_code": 0,
                "name": TOPIC,
                "topic_id": topic_id,
                "is_internal": False,
                "partitions": [],
                "topic_authorized_operations": -1,
            }
        ],
    }
    request = Request(
        ApiKey.METADATA,
        12,
        header(1),
        {
            "topics": None,
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )
    return request, Response(ApiKey.METADATA, 12, {"correlation_id": 1}, body)


def test_fetch_by_topic_id_lists_the_topic_names(tmp_path: Path) -> None:
    h = Harness(tmp_path, lag=None)
    known, unknown = uuid.UUID(int=7), uuid.UUID(int=8)
    h.send(*metadata_naming(known))
    h.send(fetch_v13(2, known), fetch_v13_response(2))
    h.send(fetch_v13(3, unknown), fetch_v13_response(3))
    named, unnamed = h.lines()[-2:]
    assert named["topics"] == [TOPIC]
    assert unnamed["topics"] == [str(unknown)]  # never learnt: the id, as text
