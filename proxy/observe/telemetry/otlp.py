"""KIP-714 PushTelemetry payloads: OTLP MetricsData (maybe compressed) to data points.

The protobuf is read by the OpenTelemetry project's own generated classes
(opentelemetry-proto, on the protobuf runtime), the decompression is the codec's
bounded one (codec/records/compression.py): a push never inflates past
`max_decompressed_bytes`, and a payload above `max_push_bytes` is not read at all.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from google.protobuf.message import DecodeError as ProtobufError
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality, MetricsData

from codec import DecodeError
from codec.records.compression import decompress

GAUGE, SUM, HISTOGRAM = "gauge", "sum", "histogram"
DELTA = AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA
MAX_NAME_LENGTH = 256
MAX_ATTRIBUTE_LENGTH = 128


class PushError(Exception):
    """A payload not decoded; `reason` is its metric label and log field."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Point:
    """One data point: the latest value of one series of one client instance."""

    metric: str  # the OTLP name
    kind: str  # GAUGE, SUM or HISTOGRAM
    monotonic: bool  # a sum that only grows: a Prometheus counter
    value: float  # gauge or sum value; a histogram's sum
    count: int | None  # a histogram's count
    attributes: tuple[tuple[str, str], ...]
    buckets: tuple[tuple[float, int], ...] = ()  # histogram: cumulative (upper bound, count)
    # Delta temporality: the point is what changed over (start_ns, time_ns], not the total
    delta: bool = False
    start_ns: int = 0
    time_ns: int = 0


@dataclass(frozen=True)
class Decoded:
    points: list[Point]
    skipped: int  # points of kinds not exported (exponential histograms, summaries)
    attributes_dropped: int


def payload(
    compression_type: int, metrics: bytes | memoryview, max_push_bytes: int, max_bytes: int
) -> bytes:
    """The MetricsData bytes of a push; PushError when too large or not decompressible."""
    if len(metrics) > max_push_bytes:
        raise PushError("too_large", f"{len(metrics)} bytes over {max_push_bytes}")
    try:
        return bytes(decompress(compression_type, metrics, max_bytes=max_bytes))
    except DecodeError as exc:
        reason = "decompression_limit" if "decompresses to more than" in str(exc) else "compression"
        raise PushError(reason, str(exc)) from None


def decode(data: bytes, max_points: int, max_attributes: int) -> Decoded:
    """At most `max_points` points; the rest are counted as skipped (once a push is past
    the bound, by whole metrics: counting their points would cost what reading them does)."""
    message = MetricsData()
    try:
        message.ParseFromString(data)
    except (ProtobufError, RuntimeError, ValueError) as exc:
        raise PushError("protobuf", str(exc) or "not an OTLP MetricsData message") from None
    points: list[Point] = []
    skipped = dropped = 0
    for scope in _scopes(message):
        metrics = scope.metrics
        if len(points) >= max_points:
            skipped += len(metrics)
            continue
        for index, metric in enumerate(metrics):
            if len(points) >= max_points:
                skipped += len(metrics) - index
                break
            for point, lost in _points(metric, max_attributes):
                if point is None or len(points) >= max_points:
                    skipped += 1
                    continue
                points.append(point)
                dropped += lost
    return Decoded(points, skipped, dropped)


def _scopes(message: Any) -> Iterator[Any]:
    for resource in message.resource_metrics:
        yield from resource.scope_metrics


def _points(metric: Any, max_attributes: int) -> Iterator[tuple[Point | None, int]]:
    name = metric.name[:MAX_NAME_LENGTH]
    kind = metric.WhichOneof("data")
    if kind in (GAUGE, SUM):
        data = getattr(metric, kind)
        monotonic = kind == SUM and data.is_monotonic
        delta = kind == SUM and data.aggregation_temporality == DELTA
        for dp in data.data_points:
            attributes, lost = _attributes(dp.attributes, max_attributes)
            value = dp.as_double if dp.WhichOneof("value") == "as_double" else float(dp.as_int)
            yield Point(
                name, kind, monotonic, value, None, attributes, (),
                delta, dp.start_time_unix_nano, dp.time_unix_nano,
            ), lost  # fmt: skip
    elif kind == HISTOGRAM:
        delta = metric.histogram.aggregation_temporality == DELTA
        for dp in metric.histogram.data_points:
            attributes, lost = _attributes(dp.attributes, max_attributes)
            yield Point(
                name, HISTOGRAM, False, dp.sum, dp.count, attributes, _buckets(dp),
                delta, dp.start_time_unix_nano, dp.time_unix_nano,
            ), lost  # fmt: skip
    else:  # exponential histograms, summaries, nothing: not exported
        yield None, 0


def cumulated(known: Point | None, delta: Point) -> Point:
    """A delta point added to its series' running total (`known`, what this returned for
    the series' previous point): the total since the first push seen. Apache Kafka's
    brokers ask for delta temporality (every Java client then pushes deltas); a
    Prometheus counter is a total. A delta that starts before the last one ended
    overlaps what was added already (the client started its deltas over, e.g. on a new
    subscription, from the metric's creation): it is the total from then on."""
    if known is None or known.kind != delta.kind or 0 < delta.start_ns < known.time_ns:
        return delta
    if delta.kind != HISTOGRAM:
        return replace(delta, value=known.value + delta.value)
    if [bound for bound, _ in known.buckets] != [bound for bound, _ in delta.buckets]:
        return delta  # other bucket bounds: the counts cannot be added up, start over
    buckets = tuple((bound, a + b) for (bound, a), (_, b) in zip(known.buckets, delta.buckets, strict=True))
    count = (known.count or 0) + (delta.count or 0)
    return replace(delta, value=known.value + delta.value, count=count, buckets=buckets)


def _buckets(dp: Any) -> tuple[tuple[float, int], ...]:
    """OTLP counts per bucket -> Prometheus cumulative counts, the +Inf one last."""
    bounds = list(dp.explicit_bounds)
    counts = list(dp.bucket_counts)
    if len(counts) != len(bounds) + 1:
        return ((float("inf"), dp.count),)
    total, out = 0, []
    for bound, count in zip([*bounds, float("inf")], counts, strict=True):
        total += count
        out.append((bound, total))
    return tuple(out)


def _attributes(pairs: Any, max_attributes: int) -> tuple[tuple[tuple[str, str], ...], int]:
    kept = []
    for pair in pairs[:max_attributes]:
        value = pair.value
        which = value.WhichOneof("value")
        shown = "" if which is None else str(getattr(value, which))
        kept.append((pair.key[:MAX_ATTRIBUTE_LENGTH], shown[:MAX_ATTRIBUTE_LENGTH]))
    return tuple(sorted(kept)), max(0, len(pairs) - max_attributes)


_INVALID = re.compile(r"[^a-zA-Z0-9_]+")


def prometheus_name(point: Point) -> str:
    """kafkalens_client_<name> by the OpenTelemetry -> Prometheus rules: characters other
    than letters, digits and "_" become "_" (runs collapsed), a monotonic sum ends in
    "_total" (the family name here is without it: prometheus-client adds it)."""
    base = _INVALID.sub("_", point.metric).strip("_")
    if point.monotonic:
        base = base.removesuffix("_total")
    return f"kafkalens_client_{base}"


def label_name(key: str) -> str:
    """An attribute key as a label name (OpenTelemetry rules; a leading digit gets "key_")."""
    name = _INVALID.sub("_", key)
    return f"key_{name}" if name[:1].isdigit() else name or "key"
