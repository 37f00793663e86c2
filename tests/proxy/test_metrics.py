"""proxy.metrics: samples as Prometheus would scrape them (rendered, then parsed)."""

from __future__ import annotations

import prometheus_client
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from proxy.features import metric_names
from proxy.gateway.metrics import GatewayMetrics
from proxy.metrics import OTHER, UNKNOWN, LabelCapper, Metrics, sanitize_label
from proxy.observe.client_security.metrics import ClientSecurityMetrics
from proxy.observe.kip1313.metrics import Kip1313Metrics
from proxy.observe.lag.metrics import LagMetrics
from proxy.observe.telemetry.metrics import TelemetryMetrics


def scrape(m: Metrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = generate_latest(m.registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(m: Metrics, name: str, **labels: str) -> float | None:
    return scrape(m).get((name, frozenset(labels.items())))


def software(m: Metrics, name: str, version: str) -> float | None:
    labels = {"client_software_name": name, "client_software_version": version}
    return value(m, "kafkalens_connections", **labels)


@pytest.fixture
def m() -> Metrics:
    return Metrics(max_label_values=3, build_version="1.2.3")


def test_own_registry_not_the_global_one(m: Metrics) -> None:
    m.api("Produce").request(9, 10)
    assert b"kafkalens_" not in generate_latest(prometheus_client.REGISTRY)


def test_request_counts_by_api_and_version_and_bytes(m: Metrics) -> None:
    produce = m.api("Produce")
    assert m.api("Produce") is produce  # bound once, reused on the hot path
    produce.request(9, 100)
    produce.request(9, 50)
    produce.request(11, 7)
    produce.response(0.002, 40)
    assert value(m, "kafkalens_requests_total", api="Produce", api_version="9") == 2
    assert value(m, "kafkalens_requests_total", api="Produce", api_version="11") == 1
    assert value(m, "kafkalens_request_bytes_total", api="Produce") == 157
    assert value(m, "kafkalens_response_bytes_total", api="Produce") == 40


def test_duration_histogram_buckets_span_100us_to_30s(m: Metrics) -> None:
    fetch = m.api("Fetch")
    fetch.response(0.00005, 0)  # loopback-fast
    fetch.response(0.5, 0)  # a default fetch.max.wait.ms long-poll
    fetch.response(45.0, 0)  # beyond the last bucket
    name = "kafkalens_request_duration_seconds_bucket"
    assert value(m, name, api="Fetch", le="0.0001") == 1
    assert value(m, name, api="Fetch", le="0.5") == 2
    assert value(m, name, api="Fetch", le="30.0") == 2
    assert value(m, name, api="Fetch", le="+Inf") == 3
    assert value(m, "kafkalens_request_duration_seconds_count", api="Fetch") == 3


def capped(m: Metrics, label: str) -> float | None:
    return value(m, "kafkalens_label_values_capped_total", label=label)


def test_errors_are_kafka_names_others_are_other(m: Metrics) -> None:
    api = m.api("Metadata")
    api.error("UNKNOWN_TOPIC_OR_PARTITION")
    api.error("UNKNOWN_TOPIC_OR_PARTITION")
    name = "kafkalens_request_errors_total"
    assert value(m, name, api="Metadata", error="UNKNOWN_TOPIC_OR_PARTITION") == 2
    for code in range(300):  # a broker inventing error codes
        api.error(f"UNKNOWN_ERROR_{code}")
    api.error("UNKNOWN_ERROR_7")  # cached, and still counted as capped
    series = [k for k in scrape(m) if k[0] == name]
    assert len(series) == 2
    assert value(m, name, api="Metadata", error=OTHER) == 301
    assert capped(m, "error") == 301


def test_api_error_pairs_are_capped() -> None:
    from codec.error_codes import ERROR_CODES

    m = Metrics(max_error_series=10)
    names = sorted(ERROR_CODES.values())
    for api in ("Produce", "Fetch"):
        for error in names[:8]:
            m.api(api).error(error)
    name = "kafkalens_request_errors_total"
    fetch = {labels for n, labels in scrape(m) if n == name and ("api", "Fetch") in labels}
    assert len(fetch) == 3  # two admitted pairs, then "other"
    assert value(m, name, api="Fetch", error=OTHER) == 6
    assert value(m, name, api="Produce", error=names[7]) == 1
    assert capped(m, "error") == 6


def test_error_codes_are_named_like_kafka(m: Metrics) -> None:
    api = m.api("Produce")
    api.error_code(3)
    api.error_code(3)
    api.error_code(30000)  # not in Kafka's table
    api.error_code(30000)
    name = "kafkalens_request_errors_total"
    assert value(m, name, api="Produce", error="UNKNOWN_TOPIC_OR_PARTITION") == 2
    assert value(m, name, api="Produce", error=OTHER) == 2
    assert capped(m, "error") == 2


def test_api_versions_are_those_the_codec_knows(m: Metrics) -> None:
    from codec.schema import api_messages

    produce = m.api("Produce")
    newest = api_messages()[0][0].max_version
    produce.request(newest, 1)
    for version in range(newest + 1, 20000):  # a client inventing versions
        produce.request(version, 1)
    produce.request(-1, 1)
    series = {labels for n, labels in scrape(m) if n == "kafkalens_requests_total"}
    assert series == {
        frozenset({("api", "Produce"), ("api_version", str(newest))}),
        frozenset({("api", "Produce"), ("api_version", OTHER)}),
    }
    assert value(m, "kafkalens_requests_total", api="Produce", api_version=OTHER) == 20000 - newest
    assert capped(m, "api_version") == 20000 - newest


def test_api_names_are_capped(m: Metrics) -> None:
    for i in range(1000):
        m.api(f"Invented{i}").request(0, 1)
    assert m.api("Invented999") is m.api(UNKNOWN)
    apis = {dict(labels)["api"] for n, labels in scrape(m) if n == "kafkalens_requests_total"}
    assert len(apis) == 256 + 1  # the cap, and "unknown"
    assert value(m, "kafkalens_requests_total", api=UNKNOWN, api_version=OTHER) == 1000 - 256


def test_no_created_series(m: Metrics) -> None:
    m.api("Produce").request(3, 1)
    m.api("Produce").response(0.1, 1)
    m.connection_opened("plaintext").close("client_eof")
    assert b"_created" not in m.render()


def test_connection_moves_from_unknown_to_identified_software(m: Metrics) -> None:
    conn = m.connection_opened("plaintext")
    assert software(m, UNKNOWN, UNKNOWN) == 1
    conn.identify("apache-kafka-java", "3.9.0")
    assert software(m, UNKNOWN, UNKNOWN) == 0
    assert software(m, "apache-kafka-java", "3.9.0") == 1
    conn.identify("apache-kafka-java", "3.9.0")  # a repeated ApiVersions changes nothing
    assert software(m, "apache-kafka-java", "3.9.0") == 1
    conn.close("client_eof")
    conn.close("client_eof")  # idempotent
    assert software(m, "apache-kafka-java", "3.9.0") == 0
    assert value(m, "kafkalens_connections_opened_total", listener="plaintext") == 1
    closed = value(
        m, "kafkalens_connections_closed_total", listener="plaintext", reason="client_eof"
    )
    assert closed == 1


def test_identify_after_close_does_not_resurrect(m: Metrics) -> None:
    conn = m.connection_opened("plaintext")
    conn.close("reset")
    conn.identify("librdkafka", "2.4.0")
    assert software(m, "librdkafka", "2.4.0") is None
    assert software(m, UNKNOWN, UNKNOWN) == 0


def test_client_software_pairs_are_capped(m: Metrics) -> None:
    conns = [m.connection_opened("plaintext") for _ in range(5)]
    for i, conn in enumerate(conns):
        conn.identify("evil-client", f"{i}.0")
    assert software(m, "evil-client", "2.0") == 1
    assert software(m, "evil-client", "3.0") is None
    assert software(m, OTHER, OTHER) == 2
    assert capped(m, "client_software") == 2


def test_upstream_addresses_are_capped() -> None:
    m = Metrics(max_label_values=3)  # upstreams get at least 64
    for i in range(100):  # gateway mode: brokers name the addresses
        m.upstream_failure(f"10.0.0.{i}:9092", "reset")
    failures = {labels for n, labels in scrape(m) if n == "kafkalens_upstream_failures_total"}
    assert len(failures) == 65
    assert value(m, "kafkalens_upstream_failures_total", upstream=OTHER, reason="reset") == 36
    assert capped(m, "upstream") == 36


def test_client_instances_counts_distinct_ids_of_open_connections(m: Metrics) -> None:
    a, b, c = (m.connection_opened("plaintext") for _ in range(3))
    a.client_instance(b"id-1")
    b.client_instance(b"id-1")  # same client instance, two connections
    c.client_instance(b"id-2")
    assert value(m, "kafkalens_client_instances") == 2
    a.close("client_eof")
    assert value(m, "kafkalens_client_instances") == 2
    b.close("client_eof")
    assert value(m, "kafkalens_client_instances") == 1
    c.client_instance(b"id-3")  # changed id: the old one is released
    assert value(m, "kafkalens_client_instances") == 1
    c.close("client_eof")
    assert value(m, "kafkalens_client_instances") == 0


def test_proxy_level_counters(m: Metrics) -> None:
    m.connection_rejected("plaintext", "max_connections")
    m.upstream_failure("127.0.0.1:19092", "connect_refused")
    m.unknown_request("api_version")
    m.of(Kip1313Metrics).violations.labels(action="logged").inc()
    m.api("Produce").decode_error("response")
    m.bytes_to_broker.inc(10)
    m.bytes_to_client.inc(20)
    m.pending_requests.inc()
    rejected = "kafkalens_connections_rejected_total"
    assert value(m, rejected, listener="plaintext", reason="max_connections") == 1
    failures = "kafkalens_upstream_failures_total"
    assert value(m, failures, upstream="127.0.0.1:19092", reason="connect_refused") == 1
    assert value(m, "kafkalens_unknown_requests_total", reason="api_version") == 1
    assert value(m, "kafkalens_kip1313_violations_total", action="logged") == 1
    decode = "kafkalens_decode_errors_total"
    assert value(m, decode, api="Produce", direction="response") == 1
    forwarded = "kafkalens_forwarded_bytes_total"
    assert value(m, forwarded, direction="client_to_broker") == 10
    assert value(m, forwarded, direction="broker_to_client") == 20
    assert value(m, "kafkalens_pending_requests") == 1
    assert value(m, "kafkalens_build_info", version="1.2.3") == 1


def test_label_sanitising() -> None:
    assert sanitize_label("apache-kafka-java") == "apache-kafka-java"
    assert sanitize_label("") == UNKNOWN
    assert sanitize_label("a\nb\x00c") == "a_b_c"
    assert sanitize_label("caf\u00e9") == "caf_"
    assert sanitize_label("x" * 500) == "x" * 64


def test_label_capper_admits_first_n_then_other() -> None:
    cap = LabelCapper(2)
    assert [cap(v) for v in ("a", "b", "c", "a", "b\n")] == ["a", "b", OTHER, "a", OTHER]


def steady(text: bytes) -> list[bytes]:
    """A rendering less the process's own CPU and memory, which move on between two."""
    return [line for line in text.splitlines() if b"process_" not in line]


def test_render_is_what_generate_latest_gives(m: Metrics) -> None:
    assert steady(m.render()) == steady(generate_latest(m.registry))


def test_metric_names_cover_every_rendered_sample(m: Metrics) -> None:
    api = m.api("Produce")
    api.request(9, 1)
    api.response(0.1, 1)
    api.error("X")
    api.error("NOT_COORDINATOR")
    api.decode_error("request")
    conn = m.connection_opened("l")
    conn.close("r")
    m.connection_rejected("l", "r")
    m.upstream_failure("u", "r")
    m.request_timeout("Fetch")
    m.request_incomplete("Fetch", "client_eof")
    m.in_flight_limit_hits.inc()
    m.admin_refusals.note("host")
    m.upstream_reachability.update({"u": True})
    m.unknown_request("api_key")
    m.of(Kip1313Metrics).violations.labels(action="rejected").inc()
    m.of(GatewayMetrics).listener_error("port_in_use")
    m.frame_observed_in_pieces("response", 1)
    m.observed_elements_dropped.labels(direction="request").inc()
    m.bytes_to_broker.inc()
    m.of(TelemetryMetrics).pushes.labels(result="ok").inc()
    m.of(TelemetryMetrics).answers.labels(api="PushTelemetry", error="NONE").inc()
    lag = m.of(LagMetrics)
    m.of(ClientSecurityMetrics).connections.labels("TLSv1.3", "PLAIN", "s", "1").set(1)
    lag.consumer_lag.labels(group="g", client="c", topic="t", partition="0").set(1)
    lag.consumer_topic_lag.labels(group="g", topic="t").set(1)
    lag.committed_lag.labels(group="g", topic="t", partition="0").set(1)
    lag.follower_lag.labels(replica="1", topic="t", partition="0").set(1)
    lag.topic_records.labels(topic="t", direction="fetch", software="s/1", principal="p").inc()
    lag.topic_bytes.labels(topic="t", direction="fetch", software="s/1", principal="p").inc()
    lag.share_delivered.labels(group="g", topic="t").inc()
    lag.share_redelivered.labels(group="g", topic="t").inc()
    lag.share_acknowledged.labels(group="g", topic="t", type="accept").inc()
    lag.share_ranges_invalid.labels(what="acquired", reason="reversed").inc()
    lag.log_lists_truncated.labels(field="acquired").inc()
    rendered = {name for name, _ in scrape(m)}
    assert rendered == metric_names()


def test_batched_durations_scrape_exactly_like_histogram_observe(m: Metrics) -> None:
    # ApiMetrics counts in plain numbers and hands them over on collection (proxy/metrics.py)
    import random

    from proxy.metrics import DURATION_BUCKETS

    rng = random.Random(7)
    samples = [*DURATION_BUCKETS, 0.0, 1e-7, 31.0, *(rng.uniform(0, 3) ** 4 for _ in range(500))]
    reference = prometheus_client.Histogram(
        "reference_seconds", "", buckets=DURATION_BUCKETS, registry=prometheus_client.CollectorRegistry()
    )
    api = m.api("Heartbeat")
    for seconds in samples:
        api.response(seconds, 1)
        reference.observe(seconds)
    prefix = "kafkalens_request_duration_seconds"
    ours = {(k[0][len(prefix):], k[1]): v for k, v in scrape(m).items() if k[0].startswith(prefix)}
    expected = {
        (sample.name[len("reference_seconds"):], frozenset({*sample.labels.items(), ("api", "Heartbeat")})): sample.value
        for metric in reference.collect()
        for sample in metric.samples
        if sample.name.endswith(("_bucket", "_count", "_sum"))
    }
    assert {k: v for k, v in ours.items() if k in expected} == pytest.approx(expected)
    assert len(expected) == len(DURATION_BUCKETS) + 3  # +Inf, count, sum


def test_counts_reach_the_series_on_every_collection_and_only_once(m: Metrics) -> None:
    api = m.api("Metadata")
    api.request(12, 10)
    assert value(m, "kafkalens_requests_total", api="Metadata", api_version="12") == 1
    assert value(m, "kafkalens_requests_total", api="Metadata", api_version="12") == 1
    api.request(12, 10)
    m.flush()
    assert m.registry.get_sample_value(
        "kafkalens_requests_total", {"api": "Metadata", "api_version": "12"}
    ) == 2
    assert value(m, "kafkalens_request_bytes_total", api="Metadata") == 20


def test_render_off_loop_flushes_on_the_loop_and_shares_one_rendering(m: Metrics) -> None:
    import asyncio

    async def scrapes() -> list[bytes]:
        m.api("Produce").request(9, 5)
        return await asyncio.gather(m.render_off_loop(), m.render_off_loop())

    first, second = asyncio.run(scrapes())
    assert first is second  # one rendering for scrapes that came together
    assert b'kafkalens_requests_total{api="Produce",api_version="9"} 1.0' in first
    assert steady(first) == steady(m.render())
