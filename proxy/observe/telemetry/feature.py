"""KIP-714 client telemetry, registered as a feature (`telemetry:` in kafkalens.yaml)."""

from __future__ import annotations

from proxy.observe.feature import Feature
from proxy.observe.telemetry.config import TelemetryConfig
from proxy.observe.telemetry.metrics import TelemetryMetrics


def _summary(telemetry: TelemetryConfig) -> list[str]:
    mode = "collect" if telemetry.collect else "observe" if telemetry.observe else "off"
    return [f"telemetry: {mode}, log {telemetry.log.path or 'off'}"]


TELEMETRY = Feature(
    name="telemetry",
    section=TelemetryConfig,
    default=TelemetryConfig(),
    doc="KIP-714 client telemetry (clients' own metrics: librdkafka >= 2.5, Java >= 3.7)."
    " observe: decode the PushTelemetry requests the proxy forwards (when the broker hands"
    " out subscriptions). collect: the proxy answers GetTelemetrySubscriptions and"
    " PushTelemetry itself (and adds them to the ApiVersions it returns), so every client"
    " gets a client instance id and its metrics reach /metrics on any broker. State is per"
    " worker process (workers > 1: each keeps the clients that pushed to it).",
    summary=_summary,
    metrics=TelemetryMetrics,
)
