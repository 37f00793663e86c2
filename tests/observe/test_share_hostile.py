"""Hostile share-group and group-heartbeat traffic through the proxy with its real
hooks: acknowledgement batches overlapping, reversed, absurdly long or of unknown
types, a broker that confirms them anyway, and heartbeats naming tens of thousands of
partitions. Every frame is forwarded byte for byte, what kafkalens keeps from them is
bounded and counted, and a well-behaved client is served throughout."""

from __future__ import annotations

import socket
import struct
import uuid
from pathlib import Path
from typing import Any

import pytest
from support.hostile import MIB, PeakGrowth, Sentinel, connect, eventually, hostile_proxy
from support.proxy_harness import read_frame, write_frame

from codec import ApiKey, Request, Response, encode_request, encode_response

TOPIC_ID = uuid.UUID("7c7c7c7c-0b0a-4908-8706-050403020100")
ACCEPT, RELEASE, REJECT, GAP = 1, 2, 3, 0
# Peak RSS growth of the test process (proxy, scripted broker and the client's own
# encoding) during the heartbeats below: 16.8 MiB measured, three runs.
BOUND = 32 * MIB


def exchange(sock: socket.socket, api_key: int, version: int, body: dict[str, Any], client_id: str) -> bytes:
    """Sends a request, returns the answer; the request frame's body is returned too
    (to check the broker got it byte for byte) via the broker's record."""
    frame = encode_request(Request(api_key, version, {"correlation_id": 7, "client_id": client_id}, body))
    write_frame(sock, frame)
    return read_frame(sock)


def answering(bodies: dict[int, dict[str, Any]]) -> Any:
    """A ScriptedBroker script answering each api key with its body."""

    answers: dict[tuple[int, int], bytes] = {}

    def script(sock: socket.socket, request: bytes) -> None:
        # the header's first fields, read here: decoding the whole request in the test's
        # process would be counted in the proxy's memory growth
        api_key, version, correlation = struct.unpack_from(">hhi", request)
        answer = answers.get((api_key, version))
        if answer is None:
            answer = answers[(api_key, version)] = encode_response(
                Response(api_key, version, {"correlation_id": 0}, bodies[api_key])
            )
        write_frame(sock, struct.pack(">i", correlation) + answer[4:])

    return script


def lax_fetch_answer(partitions: range) -> dict[str, Any]:
    """A broker that confirms every acknowledgement, however malformed."""
    return {
        "throttle_time_ms": 0, "error_code": 0, "acquisition_lock_timeout_ms": 30000,
        "responses": [{"topic_id": TOPIC_ID, "partitions": [
            {"partition_index": p, "error_code": 0, "acknowledge_error_code": 0,
             "current_leader": {"leader_id": 1, "leader_epoch": 0}, "records": b"", "acquired_records": []}
            for p in partitions]}],
        "node_endpoints": [],
    }  # fmt: skip


HOSTILE_BATCHES = {
    0: [(0, 9, [ACCEPT]), (5, 14, [ACCEPT])],  # overlapping
    1: [(100, 50, [ACCEPT])],  # reversed
    2: [(0, 2**62, [ACCEPT])],  # absurd length
    3: [(0, 3, [ACCEPT, 77, ACCEPT, ACCEPT])],  # unknown type
    4: [(20, 29, [ACCEPT, RELEASE])],  # a types array neither 1 nor one per offset
    5: [(0, 4, [ACCEPT, GAP, GAP, REJECT, ACCEPT]), (10, 11, [RELEASE])],  # gaps: well-formed
}


def test_hostile_acknowledgement_batches(tmp_path: Path) -> None:
    body = {
        "group_id": "g", "member_id": "m", "share_session_epoch": 1, "max_wait_ms": 0, "min_bytes": 1,
        "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500,
        "topics": [{"topic_id": TOPIC_ID, "partitions": [
            {"partition_index": p, "acknowledgement_batches": [
                {"first_offset": f, "last_offset": last, "acknowledge_types": t} for f, last, t in batches]}
            for p, batches in HOSTILE_BATCHES.items()]}],
        "forgotten_topics_data": [],
    }  # fmt: skip
    scripts = {"hostile": answering({78: lax_fetch_answer(range(6))})}
    with hostile_proxy(tmp_path, scripts) as (px, broker), Sentinel(px.port) as sentinel:
        with connect(px.port) as sock:
            answer = exchange(sock, 78, 2, body, "hostile")
            port = sock.getsockname()[1]
        assert len(answer) > 8
        # forwarded untouched
        sent = encode_request(Request(ApiKey.SHARE_FETCH, 2, {"correlation_id": 7, "client_id": "hostile"}, body))
        assert broker.frames_from("hostile") == [sent]
        assert eventually(lambda: px.log_lines("request", port))
        (line,) = px.log_lines("request", port)
        faults = {a["partition"]: a.get("invalid") for a in line["acknowledgements"]}
        assert faults == {0: "overlapping", 1: "reversed", 2: "too_long", 3: "unknown_type", 4: "types_length", 5: None}
        assert all(a["confirmed"] for a in line["acknowledgements"])  # the broker said so
        # only the well-formed partition counts
        acked = {
            labels: px.metric("kafkalens_share_records_acknowledged_total", type=labels)
            for labels in ("accept", "release", "reject")
        }
        assert acked == {"accept": 2, "release": 2, "reject": 1}
        for reason in ("overlapping", "reversed", "too_long", "unknown_type", "types_length"):
            assert px.metric("kafkalens_share_ranges_invalid_total", what="acknowledgement", reason=reason) == 1
        sentinel.healthy()


def topic_partitions(topics: int, per_topic: int) -> list[dict[str, Any]]:
    return [{"topic_id": uuid.UUID(int=t + 1), "partitions": list(range(per_topic))} for t in range(topics)]


@pytest.mark.slow
def test_heartbeats_with_tens_of_thousands_of_partitions(tmp_path: Path) -> None:
    # 5,000 topics of 4 partitions: a 180 KB ConsumerGroupHeartbeat, decoded whole;
    # 25,000 topics of 4: 900 KB, decoded as it streams past (limits.observe_max_elements
    # bounds what is materialised); a ShareGroupHeartbeat answer assigning 20,000.
    whole, streamed = topic_partitions(5_000, 4), topic_partitions(25_000, 4)
    consumer_beat = {
        "group_id": "g", "member_id": "m", "member_epoch": 0, "instance_id": None, "rack_id": None,
        "rebalance_timeout_ms": 30000, "subscribed_topic_names": [f"t{i}" for i in range(3000)],
        "subscribed_topic_regex": None, "server_assignor": None,
    }  # fmt: skip
    beat_answer = {
        "throttle_time_ms": 0, "error_code": 0, "member_id": "m", "member_epoch": 1,
        "heartbeat_interval_ms": 5000, "assignment": {"topic_partitions": topic_partitions(5_000, 4)},
    }  # fmt: skip
    scripts = {"beats": answering({68: {**beat_answer, "error_message": None}, 76: beat_answer})}
    share_beat = {"group_id": "g", "member_id": "m", "member_epoch": 0, "rack_id": None,
                  "subscribed_topic_names": ["t"]}  # fmt: skip
    # The streamed frame is decoded whatever the machine's load (the bound on one
    # piece's decoding time, limits.observe_seconds_per_read, has its own tests).
    with hostile_proxy(tmp_path, scripts, observe_seconds_per_read=10.0) as (px, broker), \
            Sentinel(px.port) as sentinel:
        with PeakGrowth() as growth, connect(px.port) as sock:
            for owned in (whole, streamed):
                exchange(sock, 68, 1, {**consumer_beat, "topic_partitions": owned}, "beats")
            exchange(sock, 76, 1, share_beat, "beats")
            port = sock.getsockname()[1]
        assert eventually(lambda: len(px.log_lines("request", port)) == 3)
        first, second, share = px.log_lines("request", port)
        truncated = {
            field: px.metric("kafkalens_log_lists_truncated_total", field=field)
            for field in ("owned_partitions", "assignment")
        }
        sentinel.healthy()
    assert growth.bytes < BOUND, growth
    sent = [encode_request(Request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {"correlation_id": 7, "client_id": "beats"},
                                   {**consumer_beat, "topic_partitions": owned})) for owned in (whole, streamed)]
    assert broker.frames_from("beats")[:2] == sent  # forwarded untouched
    cap = 1000  # lag.max_logged_partitions
    for line in (first, second, share):
        for field in ("owned_partitions", "assignment"):
            if field in line:
                assert sum(len(entry["partitions"]) for entry in line[field]) == cap
                assert line[f"{field}_dropped"] == line[f"{field}_partitions"] - cap
    assert first["owned_partitions_partitions"] == 20_000 and first["assignment_partitions"] == 20_000
    # the streamed one: what was materialised, and how much was not
    assert second["owned_partitions_partitions"] + 4 * second["observed_elements_dropped"] >= 100_000
    assert share["assignment_partitions"] == 20_000 and "owned_partitions" not in share
    assert len(first["topics"]) == 100 and first["topic_count"] == 3000  # subscribed names
    assert truncated == {"owned_partitions": 2, "assignment": 3}
