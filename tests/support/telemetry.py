"""A proxy with KIP-714 telemetry configured, and OTLP pushes built for raw-socket tests."""

from __future__ import annotations

import dataclasses
import json
import struct
import uuid
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

from codec import ApiKey, Request, decode_response, encode_request
from proxy.observe.telemetry.config import TelemetryConfig, TelemetryLogConfig
from proxy.observe.telemetry.hooks import TelemetryLink
from proxy.observe.telemetry.pushes import Telemetry
from support.hostile import connect
from support.observed import ObservedProxy
from support.proxy_harness import read_frame


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


# api keys the raw client calls
GET_SUBSCRIPTIONS, PUSH, METADATA = ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, ApiKey.PUSH_TELEMETRY, ApiKey.METADATA


class RawClient:
    def __init__(self, port: int) -> None:
        self.sock = connect(port)
        self.corr = 0

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self.corr += 1
        frame = encode_request(
            Request(api_key, version, {"correlation_id": self.corr, "client_id": "hostile"}, body)
        )
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        answer = read_frame(self.sock)
        return decode_response(answer, api_key, version).body

    def subscribe(self) -> tuple[uuid.UUID, int]:
        body = self.call(GET_SUBSCRIPTIONS, 0, {"client_instance_id": uuid.UUID(int=0)})
        return body["client_instance_id"], body["subscription_id"]

    def push(
        self, instance: uuid.UUID, subscription: int, metrics: bytes, compression: int = 0
    ) -> int:
        body = self.call(
            PUSH,
            0,
            {
                "client_instance_id": instance,
                "subscription_id": subscription,
                "terminating": False,
                "compression_type": compression,
                "metrics": metrics,
            },
        )
        return int(body["error_code"])

    def metadata_answered(self) -> bool:
        body = self.call(METADATA, 1, {"topics": []})
        return bool(body["brokers"])
