"""KIP-714 telemetry as the observer meets it: pushes observed on their way to the
broker, subscriptions the broker gave, and (collect mode) the proxy's own answers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from codec import DecodeError, Response, decode_request
from codec.error_codes import error_name
from proxy.hooks import ConnectionInfo, Pending
from proxy.observe.conn_state import ConnState, Token
from proxy.observe.identity import (
    GET_TELEMETRY_SUBSCRIPTIONS,
    PUSH_TELEMETRY,
    ZERO_UUID,
    kafka_uuid_text,
)
from proxy.observe.joining import Joining
from proxy.observe.observer_parts import Observer
from proxy.observe.request_line import request_line
from proxy.observe.telemetry import Telemetry
from proxy.observe.telemetry_store import ClientMeta


class TelemetryOwner(Observer, Protocol):
    joining: Joining


class TelemetryHooks:
    """The observer's telemetry part; `hooks` is the observer it belongs to."""

    def __init__(self, hooks: TelemetryOwner, telemetry: Telemetry | None) -> None:
        self.hooks = hooks
        self.telemetry = telemetry

    def answer(
        self, info: ConnectionInfo, state: ConnState, frame: memoryview, api_key: int, api_version: int, correlation_id: int
    ) -> bytes | None:
        """Collect mode: answer GetTelemetrySubscriptions or PushTelemetry in the broker's
        place; a push's payload is decoded once the answer is on its way."""
        hooks, telemetry = self.hooks, self.telemetry
        assert telemetry is not None and telemetry.answers is not None
        answers = telemetry.answers
        pending = Pending(correlation_id, api_key, api_version, hooks.clock(), len(frame) + 4)
        try:
            request = decode_request(frame, hooks.policy)
        except DecodeError:
            return None  # forwarded: what the proxy cannot read, the broker answers
        token = hooks.request_started(info, pending)[1]
        hooks.joining.unjoin(info, state)
        hooks.request_decoded(info, state, token, request)
        body = request.body
        error = 0
        if api_key == GET_TELEMETRY_SUBSCRIPTIONS:
            identity = state.identity
            instance = answers.instance_id(
                body.get("client_instance_id"), request.header.get("client_instance_id"), identity.client_instance_id
            )
            reply = answers.subscription(correlation_id, api_version, instance)
            identity.observe_instance(instance)
            hooks.refresh_identity(info, state)
            telemetry.subscribed(kafka_uuid_text(instance), telemetry.config.push_interval_ms)
        else:
            error = answers.push_error(body)
            reply = answers.push_answer(correlation_id, api_version, error)
        fields: dict[str, Any] = {"answered_by": "proxy", "errors": [error_name(error)] if error else []}
        telemetry.metrics.telemetry_answers.labels(api=token.api, error=error_name(error)).inc()
        if api_key == PUSH_TELEMETRY and error == 0:
            instance_id = push_instance(state, body)
            copy = {**body, "metrics": bytes(body.get("metrics") or b"")}  # the frame goes
            _later(self._answered_push, info, pending, token, fields, len(reply) + 4, instance_id, copy)
        else:
            self._answered_line(info, pending, token, fields, len(reply) + 4)
        return reply

    def _answered_push(
        self, info: ConnectionInfo, pending: Pending, token: Token, fields: dict[str, Any],
        size: int, instance_id: str | None, body: dict[str, Any],
    ) -> None:
        assert self.telemetry is not None
        state = self.hooks.states.get(info.conn_id)
        meta = client_meta(info, state)
        fields.update(self.telemetry.push(instance_id, meta, body))
        self._answered_line(info, pending, token, fields, size)

    def _answered_line(
        self, info: ConnectionInfo, pending: Pending, token: Token, fields: dict[str, Any], size: int
    ) -> None:
        hooks = self.hooks
        latency = hooks.clock() - pending.started
        hooks.metrics.api(token.api).response(latency, size)
        if hooks.log and hooks.log.wants(token.api, pending.api_key, bool(fields["errors"])):
            extra: dict[str, Any] = {"latency_ms": round(latency * 1000, 3), "response_bytes": size}
            line = request_line(info, pending, token, hooks.states.get(info.conn_id), extra)
            line.update(fields)
            hooks.log.write("request", line)

    def observe_push(self, info: ConnectionInfo, state: ConnState | None, token: Token, request: Any) -> None:
        """Observe mode: a push that went to the broker, decoded after it went."""
        telemetry = self.telemetry
        if telemetry is None or not telemetry.config.observe or state is None:
            return
        meta = client_meta(info, state)
        token.fields.update(telemetry.push(push_instance(state, request.body), meta, request.body))

    def subscription_seen(self, info: ConnectionInfo, state: ConnState, pending: Pending, response: Response) -> None:
        """Observe mode: the broker's subscription (its instance id, push interval). An id
        other than the client's header id breaks KIP-1313's rule: logged (a response
        cannot be refused)."""
        hooks = self.hooks
        hooks.joining.unjoin(info, state)
        instance = response.body.get("client_instance_id")
        if instance is None or instance == ZERO_UUID:
            return
        if self.telemetry is not None:
            self.telemetry.subscribed(kafka_uuid_text(instance), response.body.get("push_interval_ms", 0))
        if state.header_id is not None and instance != state.header_id:
            why = "the broker's telemetry client instance id differs from the request header's"
            hooks.kip1313_violation(info, state, "logged", why, pending.api_key, pending.api_version, pending.correlation_id)


def client_meta(info: ConnectionInfo, state: ConnState | None) -> ClientMeta:
    if state is None:
        return ClientMeta(listener=info.listener)
    identity = state.identity
    return ClientMeta(
        identity.client_id,
        identity.client_software_name,
        identity.client_software_version,
        identity.principal,
        info.listener,
    )


def push_instance(state: ConnState, body: dict[str, Any]) -> str | None:
    """Whose push: the body's id (v0), else the connection's (v1: the header's)."""
    instance = body.get("client_instance_id")
    if instance is not None and instance != ZERO_UUID:
        return kafka_uuid_text(instance)
    return None if state.joined else state.identity.client_instance_id


def _later(call: Callable[..., None], *args: Any) -> None:
    """On the loop's next turn (what forwarding has ready goes first), else now."""
    try:
        asyncio.get_running_loop().call_soon(call, *args)
    except RuntimeError:
        call(*args)
