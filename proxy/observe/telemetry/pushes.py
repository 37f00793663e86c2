"""KIP-714 client telemetry: what the observer does with a push, in one place.

A push (forwarded in observe mode, answered by the proxy in collect mode) is
decompressed and decoded (proxy/observe/telemetry/otlp.py), its points kept as the instance's
latest values (store.py, exported on /metrics by export.py) and
written to the telemetry log, one `client_metric` line per point kept. Decoding runs
after the push went on (observe) or after its answer was sent (collect).
"""

from __future__ import annotations

from typing import Any

from codec import HeaderPolicy
from proxy.metrics import Metrics
from proxy.observe.request_log import RequestLog
from proxy.observe.telemetry.collect import SubscriptionAnswers
from proxy.observe.telemetry.config import TelemetryConfig
from proxy.observe.telemetry.export import TelemetryCollector, snapshot
from proxy.observe.telemetry.metrics import TelemetryMetrics
from proxy.observe.telemetry.otlp import HISTOGRAM, Point, PushError, decode, payload
from proxy.observe.telemetry.store import ClientMeta, TelemetryStore


class Telemetry:
    def __init__(
        self,
        config: TelemetryConfig,
        metrics: Metrics,
        policy: HeaderPolicy,
        log: RequestLog | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.counts = metrics.of(TelemetryMetrics)
        self.log = log
        self.answers = SubscriptionAnswers(config, policy) if config.collect else None
        self.store = TelemetryStore(
            config.max_instances,
            config.max_series,
            config.expire_after_intervals,
            config.push_interval_ms / 1000,
            on_drop=self._dropped,
        )
        metrics.registry.register(TelemetryCollector(self.store, self._count_held))

    def proxy_answers(self, broker_has_telemetry: bool) -> bool:
        """Collect mode: whether the proxy rather than the broker answers 71 and 72."""
        return self.answers is not None and (
            self.config.answer == "proxy" or not broker_has_telemetry
        )

    def subscribed(self, instance_id: str, push_interval_ms: int) -> None:
        if push_interval_ms > 0:
            self.store.subscribed(instance_id, push_interval_ms / 1000)

    def push(
        self, instance_id: str | None, meta: ClientMeta, body: dict[str, Any]
    ) -> dict[str, Any]:
        """Decode and keep one push; the fields of its request log line."""
        if not instance_id:
            self.counts.pushes.labels(result="no_instance_id").inc()
            return {"telemetry_error": "no client instance id"}
        config = self.config
        if body.get("metrics") is None:  # above limits.observe_max_field_bytes, streamed past
            self.counts.pushes.labels(result="too_large").inc()
            return {
                "telemetry_error": "too_large: streamed past unread (limits.observe_max_field_bytes)"
            }
        try:
            data = payload(
                body.get("compression_type", 0),
                body.get("metrics") or b"",
                config.max_push_bytes,
                config.max_decompressed_bytes,
            )
            decoded = decode(
                data, min(config.max_points_per_push, config.max_series), config.max_attributes
            )
        except PushError as exc:
            self.counts.pushes.labels(result=exc.reason).inc()
            return {"telemetry_error": str(exc)}
        self.counts.pushes.labels(result="ok").inc()
        self._dropped("points", decoded.skipped)
        self._dropped("attributes", decoded.attributes_dropped)
        kept = self.store.accept(instance_id, meta, decoded.points, bool(body.get("terminating")))
        self._log_points(instance_id, meta, kept)
        self._count_held()
        fields: dict[str, Any] = {"telemetry_metrics": len(decoded.points)}
        if len(kept) < len(decoded.points) or decoded.skipped:
            fields["telemetry_dropped"] = len(decoded.points) - len(kept) + decoded.skipped
        return fields

    def _count_held(self) -> None:
        self.counts.instances.set(len(self.store.instances))
        self.counts.series.set(self.store.series_count)

    def _dropped(self, reason: str, count: int) -> None:
        if count:
            self.counts.dropped.labels(reason=reason).inc(count)

    def _log_points(self, instance_id: str, meta: ClientMeta, points: list[Point]) -> None:
        if self.log is None:
            return
        for point in points:
            self.log.write(
                "client_metric",
                {
                    "client_instance_id": instance_id,
                    "client_id": meta.client_id,
                    "client_software_name": meta.software_name,
                    "client_software_version": meta.software_version,
                    "principal": meta.principal,
                    "listener": meta.listener,
                    "metric": point.metric,
                    "type": point.kind,
                    "value": float(point.value),
                    "count": point.count if point.kind == HISTOGRAM else None,
                    "attributes": dict(point.attributes),
                },
            )

    def snapshot(self) -> list[Any]:
        """The families for a worker's snapshot file (workers > 1), quiet clients expired."""
        found = snapshot(self.store)
        self._count_held()
        return found

    def reopen(self) -> None:
        if self.log is not None:
            self.log.reopen()

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
