"""Hostile KIP-714 pushes from a raw socket, through an observing proxy to a collecting
one (which answers in place of tansu): corrupt protobuf, compression bombs, a million
metric names, more instances than allowed. Each is counted in both proxies, their
memory stays bounded, and forwarding goes on: a Metadata request on the same
connection and on a well-behaved client's own connection, is answered after each.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import cramjam
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    Gauge,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
)
from support.hostile import MIB, PeakGrowth, compressed_zeros
from support.observed import eventually
from support.proxy_harness import LOCAL
from support.telemetry import RawClient, TelemetryProxy, metrics_data

from codec import ApiKey
from proxy.config import Address
from proxy.observe.telemetry.metrics import TelemetryMetrics
from proxy.tansu import free_port

GET_SUBSCRIPTIONS, PUSH, METADATA = ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, ApiKey.PUSH_TELEMETRY, ApiKey.METADATA
GZIP, ZSTD = 1, 4
BOUND = 48 * MIB  # peak RSS growth of this process (both proxies) during an attack
MAX_SERIES = 1000
PER_PUSH = 20_000  # metric names per push; 50 pushes make a million
LIMITS = {"max_series": MAX_SERIES, "max_instances": 3, "max_decompressed_bytes": 2 * MIB}


@contextmanager
def chain(tansu_factory: Any, tmp_path: Path) -> Iterator[tuple[TelemetryProxy, TelemetryProxy]]:
    """raw client -> observing proxy -> collecting proxy -> tansu."""
    broker_port, collector_port = free_port(), free_port()
    collector = TelemetryProxy(
        f"{LOCAL}:{broker_port}", tmp_path / "collector.log", collect=True, **LIMITS
    )
    listener = dataclasses.replace(
        collector.config.listeners[0], listen=Address(LOCAL, collector_port)
    )
    collector.config = dataclasses.replace(collector.config, listeners=(listener,))
    with (
        collector,
        TelemetryProxy(
            f"{LOCAL}:{collector_port}", tmp_path / "observer.log", **LIMITS
        ) as observer,
    ):
        tansu_factory(advertised_port=observer.port, port=broker_port)
        yield observer, collector


def many_names(start: int, count: int) -> bytes:
    """MetricsData with `count` gauges named n<start>...: built by concatenating one
    serialised ScopeMetrics per name (protobuf merges repeated fields), not by
    building `count` Python messages."""
    template = ScopeMetrics(
        metrics=[
            Metric(name="n000000000", gauge=Gauge(data_points=[NumberDataPoint(as_double=1.0)]))
        ]
    ).SerializeToString()
    scope = ScopeMetrics.FromString(
        b"".join(template.replace(b"n000000000", b"n%09d" % i) for i in range(start, start + count))
    )
    return MetricsData(
        resource_metrics=[ResourceMetrics(scope_metrics=[scope])]
    ).SerializeToString()


def results(px: TelemetryProxy, name: str) -> dict[str, float]:
    return {
        labels.get("result") or labels.get("reason") or "": value
        for n, labels, value in px.metrics().samples
        if n == name
    }


def test_hostile_pushes_are_counted_bounded_and_forwarding_goes_on(
    tansu_factory: Any, tmp_path: Path
) -> None:
    with chain(tansu_factory, tmp_path) as (observer, collector):
        client, bystander = RawClient(observer.port), RawClient(observer.port)
        instance, subscription = client.subscribe()
        both = (observer, collector)

        # corrupt protobuf, and two compression bombs (256 and 16 MiB of zeros)
        attacks = [
            (b"\xff\xff\xff\xff garbage", 0),
            (compressed_zeros("zstd", 256 * MIB), ZSTD),
            (compressed_zeros("gzip", 16 * MIB), GZIP),
        ]
        with PeakGrowth() as grown:
            for payload, compression in attacks:
                assert client.push(instance, subscription, payload, compression) == 0
                assert client.metadata_answered() and bystander.metadata_answered()
        assert grown.bytes < BOUND, grown
        for px in both:
            counted = eventually(
                lambda px=px: (
                    (c := results(px, "kafkalens_telemetry_pushes_total"))
                    and c.get("decompression_limit") == 2
                    and c
                )
            ) or results(px, "kafkalens_telemetry_pushes_total")
            assert counted == {"protobuf": 1, "decompression_limit": 2}, counted
        errors = [
            line.get("telemetry_error", "")
            for line in observer.lines()
            if line.get("api") == "PushTelemetry"
        ]
        assert [e.split(":")[0] for e in errors] == [
            "protobuf",
            "decompression_limit",
            "decompression_limit",
        ]

        # a million metric names, 20,000 a push: max_series are kept, the rest counted
        with PeakGrowth() as grown:
            for start in range(0, 1_000_000, PER_PUSH):
                payload = bytes(cramjam.zstd.compress(many_names(start, PER_PUSH)))
                assert client.push(instance, subscription, payload, ZSTD) == 0
                assert bystander.metadata_answered()
            assert client.metadata_answered()
        assert grown.bytes < BOUND, grown
        for px in both:
            assert px.wait_until(
                lambda px=px: px.telemetry.store.series_count == MAX_SERIES
            )
            dropped = results(px, "kafkalens_telemetry_dropped_total")
            # past max_series in one push ("points", not even kept for a moment), or new
            # names once max_series are held ("series")
            assert dropped["series"] + dropped["points"] == 1_000_000 - MAX_SERIES, dropped
            assert dropped["series"] > 0 and dropped["points"] > 0
            series = [n for n, _, _ in px.metrics().samples if n.startswith("kafkalens_client_n")]
            assert len(series) == MAX_SERIES
        assert len(observer.telemetry_lines()) == MAX_SERIES  # a line per point kept

        # more instances than max_instances (3): the fourth and fifth are dropped
        for _ in range(4):
            assert client.push(uuid.uuid4(), subscription, metrics_data({"x": 1.0})) == 0
        for px in both:
            assert px.wait_until(
                lambda px=px: (
                    px.observing.metrics.of(TelemetryMetrics).dropped.labels(reason="instances")._value.get()
                    == 2
                )
            )
            assert len(px.telemetry.store.instances) == 3

        assert client.metadata_answered() and bystander.metadata_answered()
        client.sock.close()
        bystander.sock.close()


def test_a_push_over_max_push_bytes_is_refused_unread(tansu_factory: Any, tmp_path: Path) -> None:
    with chain(tansu_factory, tmp_path) as (observer, collector):
        client = RawClient(observer.port)
        instance, subscription = client.subscribe()
        oversized = bytes(1024 * 1024 + 1)  # telemetry.max_push_bytes is 1 MiB
        assert client.push(instance, subscription, oversized) == 118  # TELEMETRY_TOO_LARGE
        assert (
            client.push(instance, subscription + 1, metrics_data({"x": 1.0})) == 117
        )  # UNKNOWN_SUBSCRIPTION_ID
        assert client.metadata_answered()
        assert observer.wait_until(
            lambda: (
                observer.observing.metrics.of(TelemetryMetrics).pushes.labels(result="too_large")._value.get()
                == 1
            )
        )
        # the collector refused both before reading them: nothing decoded there
        assert results(collector, "kafkalens_telemetry_pushes_total") == {}
        # above limits.observe_whole_frame_bytes (256 KiB) the observer sees the push
        # stream past, its payload over limits.observe_max_field_bytes: not read there
        streamed = metrics_data({"x": 1.0}) + bytes(300 * 1024)  # a valid message, then zeros
        client.push(instance, subscription, streamed)
        assert client.metadata_answered()
        errors = [
            line.get("telemetry_error")
            for line in observer.lines()
            if line.get("api") == "PushTelemetry"
        ]
        assert errors[-1].startswith("too_large: streamed past unread"), errors
        client.sock.close()
