"""The observing hooks, driven with real frames but no sockets: log lines, identity,
metrics, KIP-1313 enforcement, the ApiVersions cap, and what is never logged."""

from __future__ import annotations

import base64
import json
import time
import uuid
from pathlib import Path

import pytest
from support.hooks_harness import PASSWORD, Harness, header
from support.records_oracle import build_v2

from codec import ApiKey, Request, Response, decode_response, encode_request, encode_response
from proxy.hooks import Pending
from proxy.observe.identity import kafka_uuid_text

INSTANCE = uuid.UUID("11111111-2222-4333-8444-555555555555")
def api_versions_exchange(h: Harness, correlation_id: int = 1) -> None:
    request = Request(ApiKey.API_VERSIONS, 3, header(correlation_id), {
        "client_software_name": "librdkafka", "client_software_version": "2.4.0"})
    response = Response(ApiKey.API_VERSIONS, 3, {"correlation_id": correlation_id}, {
        "error_code": 0, "throttle_time_ms": 0,
        "api_keys": [{"api_key": ApiKey.PRODUCE, "min_version": 0, "max_version": 11}]})
    h.send(request, response)


def test_request_line_carries_identity_and_the_required_fields(tmp_path: Path) -> None:
    h = Harness(tmp_path, lag=None)
    api_versions_exchange(h)
    metadata = Request(ApiKey.METADATA, 12, header(2, client_id=None), {"topics": [{"topic_id": uuid.UUID(int=0), "name": "orders"}],
                       "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    meta_response = Response(ApiKey.METADATA, 12, {"correlation_id": 2}, {
        "throttle_time_ms": 0, "brokers": [{"node_id": 1, "host": "b", "port": 9092, "rack": None}],
        "cluster_id": "c", "controller_id": 1, "topics": [{
            "error_code": 3, "name": "orders", "topic_id": uuid.UUID(int=0), "is_internal": False,
            "partitions": [], "topic_authorized_operations": -1}]})
    h.send(metadata, meta_response)
    h.close()
    opened, versions, meta, closed = h.lines()
    assert opened["event"] == "connection_open" and opened["client_address"] == "10.0.0.7:50123"
    for key in ("ts", "event", "conn", "client_address", "api_key", "api", "api_version",
                "correlation_id", "client_id", "client_instance_id", "client_software_name",
                "client_software_version", "principal", "latency_ms", "request_bytes",
                "response_bytes", "errors"):
        assert key in meta, key
    assert versions["api"] == "ApiVersions" and versions["client_software_name"] == "librdkafka"
    assert meta["api"] == "Metadata" and meta["api_version"] == 12
    # KIP-1313: a later null client id does not replace the first one.
    assert meta["client_id"] == "app-1"
    assert meta["client_software_version"] == "2.4.0"
    assert meta["topics"] == ["orders"]
    assert meta["errors"] == ["UNKNOWN_TOPIC_OR_PARTITION"]
    assert meta["latency_ms"] >= 0 and meta["response_bytes"] > 0
    assert closed["event"] == "connection_close"
    assert closed["requests"] == {"ApiVersions": 1, "Metadata": 1}
    assert closed["error_counts"] == {"UNKNOWN_TOPIC_OR_PARTITION": 1}
    text = h.metric_text()
    assert 'kafkalens_requests_total{api="Metadata",api_version="12"} 1.0' in text
    assert 'kafkalens_request_errors_total{api="Metadata",error="UNKNOWN_TOPIC_OR_PARTITION"} 1.0' in text
    assert 'client_software_name="librdkafka",client_software_version="2.4.0"} 1.0' in text


def produce_request(correlation_id: int, acks: int, compression: str = "none") -> Request:
    batch = build_v2(
        [(1000, b"k", b"v" * 10, [("traceparent", b"00-abc-01"), ("secret-ish", b"zzz")])] * 3,
        compression=compression, producer=(42, 1, 0),
    )
    return Request(ApiKey.PRODUCE, 9, header(correlation_id), {
        "transactional_id": None, "acks": acks, "timeout_ms": 1000,
        "topic_data": [{"name": "orders", "partition_data": [{"index": 0, "records": batch}]}]})


def test_produce_record_stats_and_acks_zero(tmp_path: Path) -> None:
    h = Harness(tmp_path, lag=None, record_detail=True)
    h.send(produce_request(5, 0, "zstd"), None)
    (_, line) = h.lines()
    assert line["event"] == "request_no_response"
    assert line["acks"] == 0 and line["latency_ms"] is None
    stats = line["record_stats"]
    assert stats["batches"] == 1 and stats["records"] == 3
    assert stats["compression"] == ["zstd"] and stats["producer_id"] == 42
    assert stats["per_topic"]["orders"]["records"] == 3
    assert stats["header_keys"] == ["traceparent", "secret-ish"]
    # Only allow-listed header values are logged.
    assert stats["header_values"] == {"traceparent": ["00-abc-01"] * 3}


def test_fetch_response_record_stats_and_partial_tail(tmp_path: Path) -> None:
    h = Harness(tmp_path, lag=None)
    batch = build_v2([(1, None, b"x" * 50, [])] * 4, compression="gzip")
    records = batch + batch[:20]  # the broker cut the last batch short: legal in Fetch
    request = Request(ApiKey.FETCH, 11, header(6), {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1,
                      "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
                      "session_epoch": -1, "topics": [], "forgotten_topics_data": [], "rack_id": ""})
    response = Response(ApiKey.FETCH, 11, {"correlation_id": 6}, {
        "throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [{
            "topic": "orders", "partitions": [{
                "partition_index": 0, "error_code": 0, "high_watermark": 4, "last_stable_offset": 4,
                "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
                "records": records}]}]})
    h.send(request, response)
    line = h.lines()[-1]
    assert line["record_stats"]["records"] == 4
    assert line["record_stats"]["compression"] == ["gzip"]
    assert line["record_stats"]["per_topic"] == {"orders": {"batches": 1, "records": 4, "bytes": len(batch)}}


def test_sasl_plain_principal_is_logged_and_the_password_never(tmp_path: Path) -> None:
    h = Harness(tmp_path, lag=None)
    h.send(Request(ApiKey.SASL_HANDSHAKE, 1, header(1), {"mechanism": "PLAIN"}),
               Response(ApiKey.SASL_HANDSHAKE, 1, {"correlation_id": 1}, {"error_code": 0, "mechanisms": ["PLAIN"]}))
    token = b"\x00alice\x00" + PASSWORD.encode()
    h.send(Request(ApiKey.SASL_AUTHENTICATE, 2, header(2), {"auth_bytes": token}),
               Response(ApiKey.SASL_AUTHENTICATE, 2, {"correlation_id": 2}, {"error_code": 0, "error_message": None,
                        "auth_bytes": b"", "session_lifetime_ms": 0}))
    api_versions_exchange(h, 3)
    h.close()
    text = h.path.read_text() + h.metric_text() + json.dumps(h.info.identity)
    assert h.lines()[-2]["principal"] == "alice"
    for form in (PASSWORD, PASSWORD.encode().hex(), base64.b64encode(PASSWORD.encode()).decode(),
                 base64.b64encode(token).decode(), token.hex()):
        assert form not in text


def test_sensitive_config_values_are_never_logged(tmp_path: Path) -> None:
    h = Harness(tmp_path, lag=None)
    request = Request(ApiKey.CREATE_TOPICS, 5, header(1), {"topics": [{
        "name": "t", "num_partitions": 1, "replication_factor": 1, "assignments": [],
        "configs": [{"name": "sasl.jaas.config", "value": "password=" + PASSWORD}]}],
        "timeout_ms": 1000, "validate_only": False})
    response = Response(ApiKey.CREATE_TOPICS, 5, {"correlation_id": 1}, {"throttle_time_ms": 0, "topics": [{
        "name": "t", "topic_id": uuid.UUID(int=0), "error_code": 0, "error_message": None,
        "num_partitions": 1, "replication_factor": 1, "configs": [
            {"name": "sasl.jaas.config", "value": PASSWORD, "read_only": False,
             "config_source": 1, "is_sensitive": True}]}]})
    h.send(request, response)
    line = h.lines()[-1]
    assert line["config_names"] == ["sasl.jaas.config"]
    assert PASSWORD not in h.path.read_text()


def kip1313_request(correlation_id: int, instance: uuid.UUID | None) -> Request:
    if instance is None:
        return Request(ApiKey.OFFSET_DELETE, 0, header(correlation_id), {"group_id": "g", "topics": []})
    return Request(ApiKey.OFFSET_DELETE, 1, header(correlation_id, client_instance_id=instance), {"group_id": "g", "topics": []})


def offset_delete_response(correlation_id: int, version: int) -> Response:
    return Response(ApiKey.OFFSET_DELETE, version, {"correlation_id": correlation_id},
                    {"error_code": 0, "throttle_time_ms": 0, "topics": []})


def test_kip1313_log_mode_warns_and_counts(tmp_path: Path) -> None:
    h = Harness(tmp_path, lag=None)
    h.send(kip1313_request(1, INSTANCE), offset_delete_response(1, 1))
    h.send(kip1313_request(2, None), offset_delete_response(2, 0))
    h.send(kip1313_request(3, uuid.UUID(int=9)), offset_delete_response(3, 1))
    lines = h.lines()
    violations = [line for line in lines if line["event"] == "kip1313_violation"]
    assert [v["correlation_id"] for v in violations] == [2, 3]
    assert all(v["action"] == "logged" and v["level"] == "warning" for v in violations)
    assert lines[2]["client_instance_id"] == kafka_uuid_text(INSTANCE)
    assert 'kafkalens_kip1313_violations_total{action="logged"} 2.0' in h.metric_text()


def test_kip1313_reject_mode_answers_invalid_request(tmp_path: Path) -> None:
    h = Harness(tmp_path, lag=None, enforcement="reject")
    assert h.hooks.inspects_requests
    first = encode_request(kip1313_request(1, INSTANCE))
    assert h.hooks.admit_request(h.info, memoryview(first), 47, 1, 1) is None
    same = encode_request(kip1313_request(2, INSTANCE))
    assert h.hooks.admit_request(h.info, memoryview(same), 47, 1, 2) is None
    other = encode_request(kip1313_request(3, uuid.UUID(int=7)))
    reply = h.hooks.admit_request(h.info, memoryview(other), 47, 1, 3)
    assert reply is not None
    decoded = decode_response(reply, 47, 1)
    assert decoded.header["correlation_id"] == 3 and decoded.body["error_code"] == 42
    assert 'kafkalens_kip1313_violations_total{action="rejected"} 1.0' in h.metric_text()


def newest_version(api_key: int) -> int:
    """The newest request version of `api_key` the codec decodes (its cap)."""
    from codec.schema import api_messages

    return max(api_messages()[api_key][0].versions)


def test_api_versions_capped_to_what_the_codec_decodes(tmp_path: Path) -> None:
    h = Harness(tmp_path, lag=None)
    response = Response(ApiKey.API_VERSIONS, 3, {"correlation_id": 1}, {"error_code": 0, "throttle_time_ms": 0, "api_keys": [
        {"api_key": ApiKey.PRODUCE, "min_version": 3, "max_version": 99},
        {"api_key": ApiKey.METADATA, "min_version": 0, "max_version": 12},
        {"api_key": 999, "min_version": 0, "max_version": 1},
        {"api_key": ApiKey.FETCH, "min_version": 40, "max_version": 50}]})
    pending = Pending(1, 18, 3, time.perf_counter(), 30)
    new = h.hooks.rewrite_response(h.info, memoryview(encode_response(response)), pending)
    assert new is not None
    assert decode_response(new, 18, 3).body["api_keys"] == [
        {"api_key": ApiKey.PRODUCE, "min_version": 3, "max_version": newest_version(ApiKey.PRODUCE)},
        {"api_key": ApiKey.METADATA, "min_version": 0, "max_version": 12},
    ]
    untouched = Response(ApiKey.API_VERSIONS, 3, {"correlation_id": 2}, {"error_code": 0, "throttle_time_ms": 0,
                         "api_keys": [{"api_key": ApiKey.METADATA, "min_version": 0, "max_version": 12}]})
    assert h.hooks.rewrite_response(h.info, memoryview(encode_response(untouched)), pending) is None


def test_api_versions_fallback_v0_is_decoded_and_capped(tmp_path: Path) -> None:
    # KIP-511: the client asked v9, which the broker does not know: a v0 body, error 35.
    h = Harness(tmp_path, lag=None)
    fallback = Response(ApiKey.API_VERSIONS, 0, {"correlation_id": 4}, {"error_code": 35, "api_keys": [
        {"api_key": ApiKey.API_VERSIONS, "min_version": 0, "max_version": 77}]})
    pending = Pending(4, 18, 9, time.perf_counter(), 30)
    new = h.hooks.rewrite_response(h.info, memoryview(encode_response(fallback)), pending)
    assert new is not None
    decoded = decode_response(new, 18, 0)
    assert decoded.body == {
        "error_code": 35, "api_keys": [{"api_key": ApiKey.API_VERSIONS, "min_version": 0, "max_version": newest_version(ApiKey.API_VERSIONS)}]}


@pytest.mark.parametrize("rate", [0.0])
def test_sampling_keeps_errors(tmp_path: Path, rate: float) -> None:
    h = Harness(tmp_path, lag=None)
    h.log.sample_rate = rate
    api_versions_exchange(h)
    h.send(kip1313_request(2, None), Response(ApiKey.OFFSET_DELETE, 0, {"correlation_id": 2},
               {"error_code": 69, "throttle_time_ms": 0, "topics": []}))
    events = [line["event"] for line in h.lines()]
    assert events == ["connection_open", "request"]
    assert h.lines()[-1]["errors"] == ["GROUP_ID_NOT_FOUND"]


def test_record_detail_looks_at_a_bounded_number_of_records(tmp_path: Path) -> None:
    from proxy.observe.summary import MAX_DETAIL_RECORDS

    h = Harness(tmp_path, lag=None, record_detail=True)
    batch = build_v2([(1, None, b"", [("k", b"v")])] * (MAX_DETAIL_RECORDS + 500), compression="zstd")
    request = Request(ApiKey.PRODUCE, 9, header(1), {"transactional_id": None, "acks": 0, "timeout_ms": 1000,
                      "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batch}]}]})
    h.send(request, None)
    stats = h.lines()[-1]["record_stats"]
    assert stats["records"] == MAX_DETAIL_RECORDS + 500  # the count comes from batch headers
    assert stats["header_keys"] == ["k"]
    assert stats["header_keys_from_first_records"] == MAX_DETAIL_RECORDS


def metadata_pair(correlation_id: int, topic: str, error_code: int) -> tuple[Request, Response]:
    request = Request(ApiKey.METADATA, 12, header(correlation_id), {
        "topics": [{"topic_id": uuid.UUID(int=0), "name": topic}],
        "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    response = Response(ApiKey.METADATA, 12, {"correlation_id": correlation_id}, {
        "throttle_time_ms": 0, "brokers": [{"node_id": 1, "host": "b", "port": 9092, "rack": None}],
        "cluster_id": "c", "controller_id": 1, "topics": [{
            "error_code": error_code, "name": topic, "topic_id": uuid.UUID(int=7), "is_internal": False,
            "partitions": [], "topic_authorized_operations": -1}]})
    return request, response


def test_repeated_frames_are_memoised_and_each_line_keeps_its_own_correlation_id(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path, lag=None)
    for corr, topic, error in ((5, "orders", 3), (6, "orders", 3), (7, "orders", 3), (8, "audit", 0)):
        h.send(*metadata_pair(corr, topic, error))
    memo_requests, memo_responses = h.hooks.request_memo, h.hooks.response_memo
    assert (memo_requests.hits, memo_requests.misses) == (2, 2)
    assert (memo_responses.hits, memo_responses.misses) == (2, 2)
    h.close()
    lines = [line for line in h.lines() if line["event"] == "request"]
    assert [(x["correlation_id"], x["topics"], x["errors"]) for x in lines] == [
        (5, ["orders"], ["UNKNOWN_TOPIC_OR_PARTITION"]),
        (6, ["orders"], ["UNKNOWN_TOPIC_OR_PARTITION"]),
        (7, ["orders"], ["UNKNOWN_TOPIC_OR_PARTITION"]),
        (8, ["audit"], []),
    ]
    text = h.metric_text()
    assert 'kafkalens_requests_total{api="Metadata",api_version="12"} 4.0' in text
    assert 'error="UNKNOWN_TOPIC_OR_PARTITION"} 3.0' in text


def test_a_memoised_request_keeps_no_view_of_the_chunk_it_came_in(tmp_path: Path) -> None:
    h = Harness(tmp_path, lag=None)
    # JoinGroup: its protocols' metadata is a bytes field, decoded as a view
    request = Request(ApiKey.JOIN_GROUP, 5, header(9), {
        "group_id": "g", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
        "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x00\x01\x00\x00\x00\x00\xff\xff\xff\xff"}]})
    chunk = bytearray(encode_request(request))
    pending = Pending(9, 11, 5, time.perf_counter(), len(chunk) + 4)
    h.hooks.request_forwarded(h.info, memoryview(chunk), pending)
    assert h.hooks.request_memo.misses == 1
    chunk.extend(b"x")  # a buffer export (a live memoryview) would make this raise BufferError


def test_sasl_requests_are_never_memoised(tmp_path: Path) -> None:
    h = Harness(tmp_path, lag=None)
    for corr in (1, 2):
        request = Request(ApiKey.SASL_AUTHENTICATE, 2, header(corr), {"auth_bytes": f"\0alice\0{PASSWORD}".encode()})
        response = Response(ApiKey.SASL_AUTHENTICATE, 2, {"correlation_id": corr}, {
            "error_code": 0, "error_message": None, "auth_bytes": b"", "session_lifetime_ms": 0})
        h.send(request, response)
    assert h.hooks.request_memo.hits == h.hooks.request_memo.misses == 0
    assert h.hooks.response_memo.hits == h.hooks.response_memo.misses == 0


def test_delegation_token_hmacs_are_never_kept_in_a_memo(tmp_path: Path) -> None:
    h = Harness(tmp_path, lag=None)
    hmac = b"HMAC-SECRET-0123456789"
    for corr in (1, 2):
        request = Request(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, header(corr), {"owners": None})
        response = Response(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"correlation_id": corr}, {"error_code": 0, "tokens": [{
            "principal_type": "User", "principal_name": "alice", "token_requester_principal_type": "User",
            "token_requester_principal_name": "alice", "issue_timestamp": 1, "expiry_timestamp": 2,
            "max_timestamp": 3, "token_id": "t1", "hmac": hmac, "renewers": []}], "throttle_time_ms": 0})
        h.send(request, response)
    memos = (h.hooks.request_memo, h.hooks.response_memo)
    assert all(memo.hits == memo.misses == 0 for memo in memos)
    assert not any(hmac in key[2] for memo in memos for key in memo._entries)


def test_memoised_api_versions_cap_answers_with_each_correlation_id(tmp_path: Path) -> None:
    h = Harness(tmp_path, lag=None)
    for corr in (11, 12):
        response = Response(ApiKey.API_VERSIONS, 3, {"correlation_id": corr}, {"error_code": 0, "throttle_time_ms": 0,
                            "api_keys": [{"api_key": ApiKey.PRODUCE, "min_version": 3, "max_version": 99}]})
        pending = Pending(corr, 18, 3, time.perf_counter(), 30)
        new = h.hooks.rewrite_response(h.info, memoryview(encode_response(response)), pending)
        assert new is not None
        decoded = decode_response(new, 18, 3)
        assert decoded.correlation_id == corr
        assert decoded.body["api_keys"] == [
            {"api_key": ApiKey.PRODUCE, "min_version": 3, "max_version": newest_version(ApiKey.PRODUCE)}]
    assert h.hooks.api_versions_memo.hits == 1


def test_topic_ids_unknown_then_named_by_metadata() -> None:
    from uuid import UUID

    from proxy.observe.summary import TopicIds

    ids = TopicIds(limit=2)
    first, second, third = UUID(int=1), UUID(int=2), UUID(int=3)
    assert ids.name({"topic_id": first}) == str(first)  # not named yet: its text
    ids.learn({"topics": [{"topic_id": first, "name": "orders"}]})
    assert ids.name({"topic_id": first}) == "orders"  # a name replaces the text
    assert ids.name({"topic_id": second}) == str(second)
    assert ids.name({"topic_id": third}) == str(third)  # past the limit: not remembered
    assert set(ids.names) == {first, second}
    ids.learn_pairs([(second, "payments"), (third, "refunds")])
    assert ids.name({"topic_id": second}) == "payments" and third not in ids.names
    assert ids.name({"topic": "named", "topic_id": first}) == "named"
