"""Collect mode: the proxy answers KIP-714's two requests in the broker's place.

GetTelemetrySubscriptions gets a client instance id (the one the client sent, else
the connection's KIP-1313 header id, else a random uuid, as KIP-714's broker would),
the configured metric prefixes, push interval and accepted compression types.
PushTelemetry gets the errors a broker would give (unknown subscription, unaccepted
compression, too large) or none; its payload is decoded by the caller after the
answer went out.
"""

from __future__ import annotations

import zlib
from typing import Any
from uuid import UUID, uuid4

from codec import ApiKey, HeaderPolicy, Response, encode_response
from codec.error_codes import ERROR_CODES
from proxy.observe.identity import kafka_uuid
from proxy.observe.telemetry.config import COMPRESSION_TYPES, TelemetryConfig

# Plain ints named by ApiKey: an int compared with an IntEnum member misses CPython's
# int fast path (proxy/exchange/kafka.py says what it cost).
GET_TELEMETRY_SUBSCRIPTIONS = int(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS)
PUSH_TELEMETRY = int(ApiKey.PUSH_TELEMETRY)
ZERO_UUID = UUID(int=0)
_CODES = {name: code for code, name in ERROR_CODES.items()}
UNKNOWN_SUBSCRIPTION_ID = _CODES["UNKNOWN_SUBSCRIPTION_ID"]
UNSUPPORTED_COMPRESSION_TYPE = _CODES["UNSUPPORTED_COMPRESSION_TYPE"]
TELEMETRY_TOO_LARGE = _CODES["TELEMETRY_TOO_LARGE"]
# The versions the proxy answers, added to ApiVersions for a broker without them.
ADDED_API_VERSIONS = (
    {"api_key": GET_TELEMETRY_SUBSCRIPTIONS, "min_version": 0, "max_version": 0},
    {"api_key": PUSH_TELEMETRY, "min_version": 0, "max_version": 0},
)


class SubscriptionAnswers:
    def __init__(self, config: TelemetryConfig, policy: HeaderPolicy) -> None:
        self.config = config
        self.policy = policy
        self.accepted = [COMPRESSION_TYPES[name] for name in config.compression_types]
        # The same subscription gets the same id in every process and every run, so a
        # client that reconnects (or lands on another worker) keeps pushing.
        shape = repr((config.metrics, config.push_interval_ms, self.accepted)).encode()
        self.subscription_id = zlib.crc32(shape) & 0x7FFFFFFF

    def instance_id(self, asked: UUID | None, header_id: UUID | None, known: str | None) -> UUID:
        """The id to hand out: the client's own, else its header's, else this
        connection's earlier one, else a new random one."""
        for candidate in (asked, header_id):
            if candidate is not None and candidate != ZERO_UUID:
                return candidate
        return kafka_uuid(known) if known else uuid4()

    def subscription(self, correlation_id: int, version: int, instance: UUID) -> bytes:
        return self._frame(
            GET_TELEMETRY_SUBSCRIPTIONS,
            version,
            correlation_id,
            {
                "throttle_time_ms": 0,
                "error_code": 0,
                "client_instance_id": instance,
                "subscription_id": self.subscription_id,
                "accepted_compression_types": self.accepted,
                "push_interval_ms": self.config.push_interval_ms,
                "telemetry_max_bytes": self.config.max_push_bytes,
                "delta_temporality": False,  # cumulative: the latest value is the whole story
                "requested_metrics": list(self.config.metrics),
            },
        )

    def push_error(self, body: dict[str, Any]) -> int:
        """The error code a push gets (0: accepted)."""
        if body.get("subscription_id") != self.subscription_id:
            return UNKNOWN_SUBSCRIPTION_ID
        compression = body.get("compression_type", 0)
        if compression != 0 and compression not in self.accepted:
            return UNSUPPORTED_COMPRESSION_TYPE
        metrics = body.get("metrics") or b""
        if len(metrics) > self.config.max_push_bytes:
            return TELEMETRY_TOO_LARGE
        return 0

    def push_answer(self, correlation_id: int, version: int, error_code: int) -> bytes:
        return self._frame(
            PUSH_TELEMETRY,
            version,
            correlation_id,
            {
                "throttle_time_ms": 0,
                "error_code": error_code,
            },
        )

    def _frame(
        self, api_key: int, version: int, correlation_id: int, body: dict[str, Any]
    ) -> bytes:
        response = Response(api_key, version, {"correlation_id": correlation_id}, body)
        return encode_response(response, self.policy)
