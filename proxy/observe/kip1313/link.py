"""KIP-1313, a link of the observers' chain (chain.py): a connection whose first request
used request header v3 must carry the same non-zero client instance id on every later
request (SaslHandshake excepted), and, with KIP-714, a telemetry body's id and the
broker's must be the header's. `log`: each violation is a warning line
(`kip1313_violation`) and counted; `reject`: every request is checked before it is
forwarded, and a violating one is answered INVALID_REQUEST where its response has a
top-level error code, else its connection is closed (as brokers do)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from codec import DecodeError, HeaderPolicy, Response, decode_request
from codec.error_codes import INVALID_REQUEST
from codec.error_response import error_response
from codec.messages import decode_request_header
from codec.schema import api_names
from proxy.hooks import ConnectionInfo, Pending
from proxy.observe.chain import ConnState, Notice, Observer, Refusal, Shared
from proxy.observe.identity import (
    GET_TELEMETRY_SUBSCRIPTIONS,
    PUSH_TELEMETRY,
    SASL_HANDSHAKE,
    ZERO_UUID,
)
from proxy.observe.kip1313.config import Kip1313Config
from proxy.observe.kip1313.metrics import Kip1313Metrics
from proxy.observe.request_line import UNKNOWN, connection_fields

KIP714_APIS = frozenset({GET_TELEMETRY_SUBSCRIPTIONS, PUSH_TELEMETRY})


@dataclass
class Kip1313State:
    """KIP-1313: a connection whose first request used header v3 is held to its id."""

    first_seen: bool = False
    required_id: UUID | None = None  # set when the first request used header v3

    def check(self, request_header_version: int, api_key: int, instance_id: UUID | None) -> str | None:
        """None if the request follows the rule, else why not."""
        if not self.first_seen:
            self.first_seen = True
            if request_header_version >= 3:
                if instance_id is None or instance_id == ZERO_UUID:
                    return "first request uses header v3 with a zero client instance id"
                self.required_id = instance_id
            return None
        if self.required_id is None or api_key == SASL_HANDSHAKE:
            return None
        if request_header_version < 3:
            return "request without a client instance id after a header v3 first request"
        if instance_id != self.required_id:
            return "client instance id differs from the connection's first request"
        return None



def telemetry_id_mismatch(header_id: UUID | None, body_id: UUID | None) -> str | None:
    """KIP-1313 with KIP-714: a telemetry body's id must be the header's, if both are set."""
    if header_id is None or body_id is None or body_id in (ZERO_UUID, header_id):
        return None
    return "telemetry client instance id differs from the request header's"


class Kip1313Link(Observer):
    response_apis = frozenset({GET_TELEMETRY_SUBSCRIPTIONS})

    def __init__(self, config: Kip1313Config, shared: Shared) -> None:
        self.reject = config.enforcement == "reject"
        self.checks_requests = not self.reject  # logged as the hooks read each request
        self.inspects_requests = self.reject  # refused before it is forwarded
        self.policy: HeaderPolicy = shared.policy
        self.counts = shared.metrics.of(Kip1313Metrics)
        self.names = api_names()

    def new_state(self) -> Kip1313State:
        return Kip1313State()

    def check(self, info: ConnectionInfo, state: ConnState, request: Any) -> Notice | None:
        kept: Kip1313State = state.kept[self]
        api_key = request.api_key
        if kept.first_seen and kept.required_id is None:
            # The first request did not use header v3: no id to hold the connection to
            # (Kip1313State.check says None), only a telemetry body's can break the rule.
            # Every request of such a connection (nearly all) costs this much and no call
            # more than the check did in the hooks (bench.proxy.front_instructions).
            if api_key not in KIP714_APIS:
                return None
            why = None
        else:
            why = kept.check(request.header_version, api_key, request.header.get("client_instance_id"))
        if why is None and api_key in KIP714_APIS:
            why = telemetry_id_mismatch(state.identity.header_id, request.body.get("client_instance_id"))
        if why is None:
            return None
        return self.violation(info, state, "logged", why, api_key, request.api_version, request.correlation_id)

    def admit(
        self, info: ConnectionInfo, state: ConnState, frame: memoryview, api_key: int, api_version: int,
        correlation_id: int,
    ) -> Refusal | None:
        try:
            header, header_version, _ = decode_request_header(frame, self.policy)
            why = state.kept[self].check(header_version, api_key, header.get("client_instance_id"))
            state.identity.note_header_id(header.get("client_instance_id"))
            if why is None and api_key in KIP714_APIS:
                body = decode_request(frame, self.policy).body
                why = telemetry_id_mismatch(state.identity.header_id, body.get("client_instance_id"))
        except DecodeError:
            return None
        if why is None:
            return None
        notice = self.violation(info, state, "rejected", why, api_key, api_version, correlation_id)
        reply = error_response(api_key, api_version, correlation_id, INVALID_REQUEST, self.policy)
        return Refusal(reply if reply is not None else b"", notice)  # no top-level error code: close

    def response(self, info: ConnectionInfo, state: ConnState, pending: Pending, response: Response) -> Notice | None:
        """The broker's GetTelemetrySubscriptions answer: an id other than the client's
        header id breaks the rule (logged: a response cannot be refused)."""
        instance = response.body.get("client_instance_id")
        header_id = state.identity.header_id
        if instance is None or header_id is None or instance in (ZERO_UUID, header_id):
            return None
        why = "the broker's telemetry client instance id differs from the request header's"
        return self.violation(info, state, "logged", why, pending.api_key, pending.api_version, pending.correlation_id)

    def violation(
        self, info: ConnectionInfo, state: ConnState, action: str, why: str, api_key: int, api_version: int,
        correlation_id: int,
    ) -> Notice:
        self.counts.violations.labels(action=action).inc()
        fields = connection_fields(info, state)
        fields.update(
            api_key=api_key,
            api=self.names.get(api_key, UNKNOWN),
            api_version=api_version,
            correlation_id=correlation_id,
            action=action,
            reason=why,
        )
        return Notice("kip1313_violation", fields)
