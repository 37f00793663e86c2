"""KIP-714 pieces without sockets: OTLP payloads in every compression KIP-714 allows
(compressed by independent libraries), Prometheus names, the store's bounds and
expiry, the workers' snapshot merge, collect-mode answers, and KIP-1313's rule that a
telemetry body's instance id must match the request header's."""

from __future__ import annotations

import gzip
import json
import time
import uuid
from pathlib import Path
from typing import Any

import lz4.frame
import pytest
import snappy
import zstandard
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AggregationTemporality,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support.hooks_harness import Harness
from support.telemetry import metrics_data

from codec import ApiKey, Request, decode_response, encode_request
from proxy.hooks import ConnectionInfo
from proxy.observe.identity import kafka_uuid, kafka_uuid_text
from proxy.observe.telemetry.config import TelemetryConfig
from proxy.observe.telemetry.export import SnapshotCollector, families, snapshot
from proxy.observe.telemetry.otlp import PushError, decode, payload, prometheus_name
from proxy.observe.telemetry.store import ClientMeta, TelemetryStore

HEADER_ID = uuid.UUID("11111111-2222-4333-8444-555555555555")
OTHER_ID = uuid.UUID("99999999-8888-4777-8666-555555555555")
DATA = metrics_data(
    {"org.apache.kafka.producer.record.queue.time.avg": 2.5},
    {"org.apache.kafka.producer.connection.creation.total": 3},
)
COMPRESSORS = {
    0: lambda data: data,
    1: gzip.compress,
    2: snappy.compress,  # raw snappy, as librdkafka sends it
    3: lz4.frame.compress,
    4: zstandard.ZstdCompressor().compress,
}


@pytest.mark.parametrize("compression", sorted(COMPRESSORS))
def test_every_compression_type_decodes_to_the_same_points(compression: int) -> None:
    sent = COMPRESSORS[compression](DATA)
    points = decode(payload(compression, sent, 1 << 20, 1 << 20), 100, 16).points
    assert {(p.metric, p.kind, p.monotonic, p.value) for p in points} == {
        ("org.apache.kafka.producer.record.queue.time.avg", "gauge", False, 2.5),
        ("org.apache.kafka.producer.connection.creation.total", "sum", True, 3.0),
    }
    gauge = next(p for p in points if p.kind == "gauge")
    assert gauge.attributes == (("node.id", "1"),)


def test_payload_bounds_and_corruption_are_push_errors() -> None:
    with pytest.raises(PushError) as big:
        payload(0, bytes(101), 100, 1000)
    assert big.value.reason == "too_large"
    with pytest.raises(PushError) as bomb:
        payload(4, zstandard.ZstdCompressor().compress(bytes(10_000)), 1000, 1000)
    assert bomb.value.reason == "decompression_limit"
    with pytest.raises(PushError) as bad:
        payload(1, b"not gzip at all", 1000, 1000)
    assert bad.value.reason == "compression"
    with pytest.raises(PushError) as proto:
        decode(b"\xff\xff\xff\xff", 10, 10)
    assert proto.value.reason == "protobuf"


def test_prometheus_names_and_histograms_render_and_parse() -> None:
    histogram = Metric(
        name="org.apache.kafka.client.request-latency",
        histogram=Histogram(
            data_points=[
                HistogramDataPoint(
                    count=6, sum=21.0, explicit_bounds=[1.0, 5.0], bucket_counts=[1, 3, 2]
                )
            ]
        ),
    )
    data = MetricsData(
        resource_metrics=[ResourceMetrics(scope_metrics=[ScopeMetrics(metrics=[histogram])])]
    ).SerializeToString()
    store = TelemetryStore(10, 100, 3, 1.0)
    store.accept(
        "id-1", ClientMeta("app", "librdkafka", "2.5.0"), decode(DATA + data, 100, 16).points
    )
    registry = CollectorRegistry()
    registry.register(_Fixed(families(store)))
    samples = {
        (s.name, s.labels.get("le")): s.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
    }
    prefix = "kafkalens_client_org_apache_kafka_"
    assert samples[(prefix + "producer_connection_creation_total", None)] == 3
    assert samples[(prefix + "producer_record_queue_time_avg", None)] == 2.5
    latency = prefix + "client_request_latency"
    assert [samples[(latency + "_bucket", le)] for le in ("1.0", "5.0", "+Inf")] == [1, 4, 6]
    assert samples[(latency + "_count", None)] == 6 and samples[(latency + "_sum", None)] == 21
    point = decode(DATA, 100, 16).points[1]
    assert prometheus_name(point) == prefix + "producer_connection_creation"  # + "_total" on render


SECOND = 1_000_000_000


def _delta_push(total: float, start: int, end: int, counts: list[int] | None = None) -> list[Any]:
    """One delta point of a monotonic sum (and of a histogram with bounds 1, 5 when
    `counts` is given) over (start, end] seconds, decoded."""
    metrics = [Metric(name="org.apache.kafka.producer.record.send.total", sum=Sum(
        is_monotonic=True, aggregation_temporality=AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA,
        data_points=[NumberDataPoint(as_double=total, start_time_unix_nano=start * SECOND,
                                     time_unix_nano=end * SECOND)]))]  # fmt: skip
    if counts is not None:
        metrics.append(Metric(name="org.apache.kafka.client.latency", histogram=Histogram(
            aggregation_temporality=AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA,
            data_points=[HistogramDataPoint(count=sum(counts), sum=total, explicit_bounds=[1.0, 5.0],
                                            bucket_counts=counts, start_time_unix_nano=start * SECOND,
                                            time_unix_nano=end * SECOND)])))  # fmt: skip
    data = MetricsData(resource_metrics=[ResourceMetrics(scope_metrics=[ScopeMetrics(metrics=metrics)])])
    return decode(data.SerializeToString(), 100, 16).points


def test_delta_points_are_added_up_to_the_total_a_counter_shows() -> None:
    """Apache Kafka's brokers hand out subscriptions with delta temporality: the Java
    client pushes what changed since its last push. The store keeps the total."""
    store = TelemetryStore(10, 100, 3, 1.0)

    def total(*push: Any) -> float:
        (kept, *_) = store.accept("id-1", ClientMeta(), _delta_push(*push))
        return kept.value

    assert total(5, 0, 1) == 5  # the first push: everything since the metric was made
    assert total(3, 1, 2) == 8
    assert total(0, 2, 3) == 8
    assert total(2, 7, 8) == 10  # a gap (pushes lost on their way): still added
    assert total(12, 1, 9) == 12  # from before the last end: the client started over
    # a delta histogram: count, sum and each bucket added up
    store.accept("id-2", ClientMeta(), _delta_push(4, 0, 1, [1, 1, 0]))
    kept = store.accept("id-2", ClientMeta(), _delta_push(6, 1, 2, [0, 2, 1]))
    histogram = next(p for p in kept if p.kind == "histogram")
    assert (histogram.count, histogram.value) == (5, 10)
    assert histogram.buckets == ((1.0, 1), (5.0, 4), (float("inf"), 5))  # cumulative per bound
    # cumulative points are kept as they come
    cumulative = store.accept("id-3", ClientMeta(), decode(DATA, 100, 16).points)
    again = store.accept("id-3", ClientMeta(), decode(DATA, 100, 16).points)
    assert [p.value for p in cumulative] == [p.value for p in again] == [2.5, 3.0]


class _Fixed:
    def __init__(self, found: list[Any]) -> None:
        self.found = found

    def collect(self) -> Any:
        return iter(self.found)


def test_store_caps_instances_and_series_and_expires_quiet_clients() -> None:
    now = [0.0]
    dropped: dict[str, int] = {}
    store = TelemetryStore(
        2,
        3,
        3,
        10.0,
        on_drop=lambda r, n: dropped.update({r: dropped.get(r, 0) + n}),
        clock=lambda: now[0],
    )
    points = decode(DATA, 100, 16).points
    assert len(store.accept("a", ClientMeta(), points)) == 2
    assert len(store.accept("b", ClientMeta(), points)) == 1  # 3 series in all
    assert store.accept("c", ClientMeta(), points) == []
    assert dropped == {"series": 1, "instances": 1} and store.series_count == 3
    store.subscribed("b", 100.0)  # b pushes every 100 s: it may be quiet for 300
    now[0] = 31.0  # past 3 intervals of a (10 s)
    store.expire()
    assert set(store.instances) == {"b"} and store.series_count == 1
    now[0] = 301.0
    store.expire()
    assert store.instances == {} and store.series_count == 0
    store.accept("closing", ClientMeta(), points, terminating=True)  # its last push
    now[0] = 310.0
    store.expire()
    assert "closing" in store.instances  # still there for one interval (10 s)
    now[0] = 312.0
    store.expire()
    assert "closing" not in store.instances


def test_workers_snapshots_merge_into_one_family_per_name(tmp_path: Path) -> None:
    points = decode(DATA, 100, 16).points
    for worker, instance in enumerate(("id-1", "id-2")):
        store = TelemetryStore(10, 100, 3, 1.0)
        store.accept(instance, ClientMeta(f"app-{worker}"), points)
        (tmp_path / f"telemetry-{worker}.json").write_text(json.dumps(snapshot(store)))
    (tmp_path / "telemetry-9.json").write_text("[half a fi")  # skipped
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(tmp_path, "telemetry-*.json"))
    found = {
        family.name: sorted(s.labels["client_instance_id"] for s in family.samples)
        for family in text_string_to_metric_families(generate_latest(registry).decode())
    }
    assert found == {
        "kafkalens_client_org_apache_kafka_producer_record_queue_time_avg": ["id-1", "id-2"],
        "kafkalens_client_org_apache_kafka_producer_connection_creation": ["id-1", "id-2"],
    }


# -- the observer: collect-mode answers and KIP-1313 -----------------------------------


def harness(tmp_path: Path, enforcement: str = "log", **telemetry: Any) -> Harness:
    """The observing hooks with telemetry's link alone, configured with `telemetry`."""
    return Harness(tmp_path, lag=None, enforcement=enforcement, telemetry=TelemetryConfig(**telemetry))


def header_v3_first(h: Harness) -> None:
    """OffsetDelete v1 (header v3, KIP-1313) first: the connection is held to HEADER_ID."""
    first = Request(ApiKey.OFFSET_DELETE, 1, {"correlation_id": 1, "client_id": "app", "client_instance_id": HEADER_ID},
                    {"group_id": "g", "topics": []})  # fmt: skip
    assert h.admit(first) is None
    h.forward(first)


def header_v3_second(h: Harness) -> None:
    """A header v2 request, then OffsetDelete v1 with HEADER_ID: no KIP-1313 violation
    (the first request did not use v3), and the client has said its id."""
    metadata = Request(ApiKey.METADATA, 1, {"correlation_id": 1, "client_id": "app"}, {"topics": []})
    assert h.admit(metadata) is None
    h.forward(metadata)
    second = Request(ApiKey.OFFSET_DELETE, 1, {"correlation_id": 2, "client_id": "app", "client_instance_id": HEADER_ID},
                     {"group_id": "g", "topics": []})  # fmt: skip
    assert h.admit(second) is None
    h.forward(second)


def subscriptions(corr: int, instance: uuid.UUID) -> Request:
    return Request(
        ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, {"correlation_id": corr, "client_id": "app"}, {"client_instance_id": instance}
    )


def test_collect_mode_hands_out_the_header_id_and_keeps_a_clients_own(tmp_path: Path) -> None:
    h = harness(
        tmp_path, collect=True, push_interval_ms=1500, metrics=("org.apache.kafka.producer.",)
    )
    # Held for an answer: KIP-714's two requests, and ApiVersions (whose versions the codec
    # cannot read are answered by the proxy); every other request is forwarded unheld.
    assert h.hooks.admit_api_keys == {18, 71, 72} and not h.hooks.inspects_requests
    header_v3_first(h)
    reply = h.admit(subscriptions(2, uuid.UUID(int=0)))
    assert reply is not None
    body = decode_response(reply, 71, 0).body
    assert body["client_instance_id"] == HEADER_ID and body["error_code"] == 0
    assert body["push_interval_ms"] == 1500 and body["requested_metrics"] == [
        "org.apache.kafka.producer."
    ]
    assert body["accepted_compression_types"] == [4, 3, 1, 2]
    again = decode_response(h.admit(subscriptions(3, HEADER_ID)) or b"", 71, 0).body
    assert (
        again["client_instance_id"] == HEADER_ID
        and again["subscription_id"] == body["subscription_id"]
    )
    push = Request(ApiKey.PUSH_TELEMETRY, 0, {"correlation_id": 4, "client_id": "app"}, {
        "client_instance_id": HEADER_ID, "subscription_id": body["subscription_id"],
        "terminating": False, "compression_type": 4, "metrics": zstandard.ZstdCompressor().compress(DATA)})  # fmt: skip
    assert decode_response(h.admit(push) or b"", 72, 0).body["error_code"] == 0
    lines = h.lines()  # no loop running: the push was decoded at once
    answered = [line for line in lines if line.get("answered_by") == "proxy"]
    assert [line["api"] for line in answered] == ["GetTelemetrySubscriptions"] * 2 + [
        "PushTelemetry"
    ]
    assert answered[-1]["telemetry_metrics"] == 2
    assert all(line["client_instance_id"] == kafka_uuid_text(HEADER_ID) for line in answered)


def test_a_fresh_client_gets_a_random_id(tmp_path: Path) -> None:
    h = harness(tmp_path, collect=True)
    first = decode_response(h.admit(subscriptions(1, uuid.UUID(int=0))) or b"", 71, 0).body
    assert first["client_instance_id"].version == 4


def test_a_telemetry_id_other_than_the_headers_is_logged(tmp_path: Path) -> None:
    h = harness(tmp_path)
    header_v3_second(h)
    h.forward(subscriptions(3, OTHER_ID))
    violations = [line for line in h.lines() if line["event"] == "kip1313_violation"]
    assert [v["reason"] for v in violations] == [
        "telemetry client instance id differs from the request header's"
    ]


def test_a_telemetry_id_other_than_the_headers_is_rejected_in_reject_mode(tmp_path: Path) -> None:
    h = harness(tmp_path, enforcement="reject")
    header_v3_second(h)
    reply = h.admit(subscriptions(3, OTHER_ID))
    assert reply is not None and decode_response(reply, 71, 0).body["error_code"] == 42
    assert h.admit(subscriptions(4, HEADER_ID)) is None  # the header's own id goes on


def test_the_broker_handing_out_another_id_than_the_headers_is_logged(tmp_path: Path) -> None:
    from codec import Response, encode_response
    from proxy.hooks import Pending

    h = harness(tmp_path)
    header_v3_second(h)
    request = subscriptions(3, uuid.UUID(int=0))
    pending = Pending(3, 71, 0, time.perf_counter(), 0)
    h.hooks.request_forwarded(h.info, memoryview(encode_request(request)), pending)
    answer = Response(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, {"correlation_id": 3}, {
        "throttle_time_ms": 0, "error_code": 0, "client_instance_id": OTHER_ID, "subscription_id": 1,
        "accepted_compression_types": [], "push_interval_ms": 5000, "telemetry_max_bytes": 1000,
        "delta_temporality": False, "requested_metrics": []})  # fmt: skip
    h.hooks.response_forwarded(h.info, memoryview(encode_response(answer)), pending)
    violations = [line for line in h.lines() if line["event"] == "kip1313_violation"]
    assert [v["reason"] for v in violations] == [
        "the broker's telemetry client instance id differs from the request header's"
    ]


def api_versions(h: Harness, listed: list[int]) -> list[int]:
    """The api keys the client sees after the proxy's rewrite of a broker listing `listed`."""
    from codec import Response, encode_response
    from proxy.hooks import Pending

    keys = [{"api_key": k, "min_version": 0, "max_version": 0} for k in listed]
    answer = Response(
        ApiKey.API_VERSIONS, 3, {"correlation_id": 9}, {"error_code": 0, "throttle_time_ms": 0, "api_keys": keys}
    )
    frame = encode_response(answer)
    new = h.hooks.rewrite_response(
        h.info, memoryview(frame), Pending(9, 18, 3, time.perf_counter(), 0)
    )
    return [entry["api_key"] for entry in decode_response(new or frame, 18, 3).body["api_keys"]]


@pytest.mark.parametrize("answer", ["proxy", "broker"])
def test_who_answers_when_the_broker_supports_telemetry(tmp_path: Path, answer: str) -> None:
    h = harness(tmp_path, collect=True, answer=answer)
    assert api_versions(h, [3, 71, 72]) == [3, 71, 72]  # listed by the broker: unchanged
    answered = h.admit(subscriptions(1, uuid.UUID(int=0))) is not None
    assert answered == (answer == "proxy")


def test_collect_mode_lists_telemetry_for_a_broker_without_it(tmp_path: Path) -> None:
    h = harness(tmp_path, collect=True, answer="broker")
    assert api_versions(h, [3]) == [3, 71, 72]
    assert h.admit(subscriptions(1, uuid.UUID(int=0))) is not None  # the broker cannot
    (tmp_path / "observe").mkdir()
    observing = harness(tmp_path / "observe")
    assert api_versions(observing, [3]) == [3]  # observe mode adds nothing


def test_instance_joins_skip_ambiguous_clients() -> None:
    from proxy.observe.instance_join import InstanceJoins

    joins = InstanceJoins(max_keys=2)
    key = ("10.0.0.7", "app", "librdkafka", "2.5.0")
    joins.publish(key, "id-1")
    assert joins.lookup(key) == "id-1"
    joins.publish(key, "id-2")  # a second instance with the same address, id, software
    assert joins.lookup(key) is None
    joins.publish(("h", "b", None, None), "id-3")
    joins.publish(("h", "c", None, None), "id-4")  # over max_keys: the oldest goes
    assert joins.lookup(key) is None and joins.lookup(("h", "c", None, None)) == "id-4"


def test_a_clients_other_connections_take_its_id_and_a_telemetry_exchange_keeps_its_own(
    tmp_path: Path,
) -> None:
    h = harness(tmp_path, collect=True)
    other = ConnectionInfo("c-2", "plaintext", "10.0.0.7", 50124, "broker:9092")
    h.hooks.connection_opened(other)
    metadata = Request(ApiKey.METADATA, 1, {"correlation_id": 1, "client_id": "app"}, {"topics": []})
    from proxy.hooks import Pending

    frame = memoryview(encode_request(metadata))
    h.hooks.request_forwarded(other, frame, Pending(1, 3, 1, time.perf_counter(), 0))
    body = decode_response(h.admit(subscriptions(2, uuid.UUID(int=0))) or b"", 71, 0).body
    first = kafka_uuid_text(body["client_instance_id"])
    assert other.identity["client_instance_id"] == first  # joined at once, no line needed
    # the other connection then asks for a subscription of its own: it keeps what it gets
    own = h.hooks.admit_request(
        other, memoryview(encode_request(subscriptions(3, uuid.UUID(int=0)))), 71, 0, 3
    )
    second = kafka_uuid_text(decode_response(own or b"", 71, 0).body["client_instance_id"])
    assert second != first and other.identity["client_instance_id"] == second
    assert h.info.identity["client_instance_id"] == first


def test_instance_ids_are_written_as_kafka_writes_a_uuid() -> None:
    """Uuid.toString(): URL-safe base64 of the 16 bytes, no padding. The pair is one Java
    client's clientInstanceId() and the uuid kafkalens decoded for it from the wire."""
    instance = uuid.UUID("0995a9b1-392f-4610-af8e-63b23394e7ea")
    assert kafka_uuid_text(instance) == "CZWpsTkvRhCvjmOyM5Tn6g"
    assert kafka_uuid(kafka_uuid_text(instance)) == instance
    assert kafka_uuid_text(uuid.UUID(int=2**128 - 1)) == "_____________________w"  # "-" and "_", not "+" and "/"
