"""The telemetry slice's own metrics (KIP-714 pushes, what was not kept, the answers
the proxy made, the instances and series on /metrics), defined on the proxy's registry
by `Metrics.of(TelemetryMetrics)`. The client metrics themselves are exported by
export.py."""

from __future__ import annotations

from proxy.metrics import Metrics


class TelemetryMetrics:
    def __init__(self, metrics: Metrics) -> None:
        c = metrics.counter
        self.pushes = c(
            "kafkalens_telemetry_pushes_total",
            "KIP-714 PushTelemetry payloads seen (forwarded or answered), by result: ok,"
            " or why not decoded (too_large, compression, decompression_limit, protobuf).",
            ("result",),
        )
        self.dropped = c(
            "kafkalens_telemetry_dropped_total",
            "Pushed client metrics not kept: past telemetry.max_instances (instances),"
            " telemetry.max_series (series) or max_attributes (attributes); data points"
            " past max_points_per_push in one push or of a kind not exported (points).",
            ("reason",),
        )
        self.answers = c(
            "kafkalens_telemetry_answers_total",
            "Telemetry requests the proxy answered itself (telemetry.collect), by api and"
            " error (NONE when accepted).",
            ("api", "error"),
        )
        for reason in ("instances", "series", "attributes", "points"):  # at 0, for alerts
            self.dropped.labels(reason=reason)
        self.instances = metrics.gauge(
            "kafkalens_telemetry_client_instances",
            "Client instances whose pushed metrics are on /metrics.",
        )
        self.series = metrics.gauge(
            "kafkalens_telemetry_series", "Series of pushed client metrics on /metrics."
        )
