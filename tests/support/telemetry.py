"""A proxy with KIP-714 telemetry configured, and OTLP pushes built for raw-socket tests."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    Gauge,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)

from proxy.config import TelemetryConfig, TelemetryLogConfig
from proxy.observe.telemetry.hooks import TelemetryLink
from proxy.observe.telemetry.pushes import Telemetry
from support.observed import ObservedProxy


class TelemetryProxy(ObservedProxy):
    """An ObservedProxy whose telemetry section is `telemetry` (its log beside the request log)."""

    def __init__(self, upstream: str, log_path: Path, **telemetry: Any) -> None:
        super().__init__(upstream, log_path)
        self.telemetry_path = log_path.with_name(log_path.stem + "-telemetry.log")
        section = TelemetryConfig(
            log=TelemetryLogConfig(path=str(self.telemetry_path)), **telemetry
        )
        self.config = dataclasses.replace(self.config, telemetry=section)

    @property
    def telemetry(self) -> Telemetry | None:
        """The chain's telemetry link's, once the proxy runs."""
        link = self.observing.link(TelemetryLink)
        return None if link is None else link.telemetry

    def telemetry_lines(self) -> list[dict[str, Any]]:
        telemetry = self.telemetry
        if self.running is not None and telemetry is not None and telemetry.log is not None:
            self.call(telemetry.log.flush)
        if not self.telemetry_path.exists():
            return []
        return [json.loads(line) for line in self.telemetry_path.read_text().splitlines()]


def metrics_data(gauges: dict[str, float], sums: dict[str, float] | None = None) -> bytes:
    """An OTLP MetricsData message with one point per metric."""
    metrics = [
        Metric(
            name=name,
            gauge=Gauge(
                data_points=[
                    NumberDataPoint(
                        as_double=value,
                        attributes=[KeyValue(key="node.id", value=AnyValue(string_value="1"))],
                    )
                ]
            ),
        )
        for name, value in gauges.items()
    ]
    metrics += [
        Metric(
            name=name,
            sum=Sum(
                is_monotonic=True,
                aggregation_temporality=2,
                data_points=[NumberDataPoint(as_int=int(value))],
            ),
        )
        for name, value in (sums or {}).items()
    ]
    data = MetricsData(
        resource_metrics=[ResourceMetrics(scope_metrics=[ScopeMetrics(metrics=metrics)])]
    )
    return data.SerializeToString()
