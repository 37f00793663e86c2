"""KIP-714 client telemetry, registered as a feature (`telemetry:` in kafkalens.yaml)."""

from __future__ import annotations

from codec import HeaderPolicy
from proxy.metrics import Metrics
from proxy.observe.chain import Shared
from proxy.observe.feature import Feature
from proxy.observe.request_log import LineSink, RequestLog
from proxy.observe.telemetry.config import TelemetryConfig
from proxy.observe.telemetry.hooks import TelemetryLink
from proxy.observe.telemetry.metrics import TelemetryMetrics
from proxy.observe.telemetry.pushes import Telemetry


def _summary(telemetry: TelemetryConfig) -> list[str]:
    mode = "collect" if telemetry.collect else "observe" if telemetry.observe else "off"
    return [f"telemetry: {mode}, log {telemetry.log.path or 'off'}"]


def telemetry_link(telemetry: TelemetryConfig, metrics: Metrics, policy: HeaderPolicy) -> TelemetryLink | None:
    """KIP-714 telemetry (observe or collect mode), None when neither is on."""
    if not (telemetry.observe or telemetry.collect):
        return None
    log = None
    if telemetry.log.path is not None:
        sink = LineSink(
            telemetry.log.path,
            telemetry.log.max_bytes,
            telemetry.log.backups,
            flush_interval=telemetry.log.flush_interval_seconds,
            max_queued_bytes=telemetry.log.max_queued_bytes,
            metrics=metrics,
        )
        log = RequestLog(sink)
    return TelemetryLink(Telemetry(telemetry, metrics, policy, log))


def _link(telemetry: TelemetryConfig, shared: Shared) -> TelemetryLink | None:
    return telemetry_link(telemetry, shared.metrics, shared.policy)


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
    link=_link,
)
