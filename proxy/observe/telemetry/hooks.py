"""KIP-714 telemetry, a link of the observers' chain (chain.py): pushes observed on their
way to the broker, the subscriptions the broker gave, and (collect mode) the proxy's
own answers to GetTelemetrySubscriptions and PushTelemetry."""

from __future__ import annotations

from typing import Any

from codec import Response
from codec.error_codes import error_name
from proxy.hooks import ConnectionInfo, Pending
from proxy.observe.chain import Answer, ConnState, Observer, Token
from proxy.observe.identity import (
    GET_TELEMETRY_SUBSCRIPTIONS,
    PUSH_TELEMETRY,
    ZERO_UUID,
    kafka_uuid_text,
)
from proxy.observe.telemetry.collect import ADDED_API_VERSIONS
from proxy.observe.telemetry.pushes import Telemetry
from proxy.observe.telemetry.store import ClientMeta

KIP714_APIS = frozenset({GET_TELEMETRY_SUBSCRIPTIONS, PUSH_TELEMETRY})


class TelemetryLink(Observer):
    def __init__(self, telemetry: Telemetry) -> None:
        self.telemetry = telemetry
        collect = telemetry.answers is not None
        # observe mode: a push that goes to the broker is decoded after it went
        self.request_apis = frozenset({PUSH_TELEMETRY} if telemetry.config.observe else ())
        self.response_apis = frozenset({GET_TELEMETRY_SUBSCRIPTIONS})
        self.answer_apis = KIP714_APIS if collect else frozenset()
        self.added_api_versions = ADDED_API_VERSIONS if collect else ()

    def request(
        self, info: ConnectionInfo, state: ConnState, token: Token, request: Any,
        partition_stats: dict[tuple[str, int], Any] | None,
    ) -> None:
        """Observe mode: a push that went to the broker, its metrics kept."""
        meta = client_meta(info, state)
        token.fields.update(self.telemetry.push(push_instance(state, request.body), meta, request.body))

    def response(self, info: ConnectionInfo, state: ConnState, pending: Pending, response: Response) -> None:
        """The broker's subscription: when its instance is to push next."""
        instance = response.body.get("client_instance_id")
        if instance is not None and instance != ZERO_UUID:
            self.telemetry.subscribed(kafka_uuid_text(instance), response.body.get("push_interval_ms", 0))

    def answers(self, state: ConnState) -> bool:
        ranges = state.broker_ranges  # the broker's own ApiVersions answer on this connection
        return self.telemetry.proxy_answers(ranges is not None and ranges.keys() >= KIP714_APIS)

    def answer(self, info: ConnectionInfo, state: ConnState, token: Token, request: Any) -> Answer:
        """Collect mode: the subscription or the push's answer; a push's payload is
        decoded once the answer is on its way."""
        telemetry = self.telemetry
        answers = telemetry.answers
        assert answers is not None
        body = request.body
        error = 0
        if request.api_key == GET_TELEMETRY_SUBSCRIPTIONS:
            identity = state.identity
            instance = answers.instance_id(
                body.get("client_instance_id"), request.header.get("client_instance_id"), identity.client_instance_id
            )
            reply = answers.subscription(request.correlation_id, request.api_version, instance)
            identity.observe_instance(instance)
            telemetry.subscribed(kafka_uuid_text(instance), telemetry.config.push_interval_ms)
        else:
            error = answers.push_error(body)
            reply = answers.push_answer(request.correlation_id, request.api_version, error)
        fields: dict[str, Any] = {"answered_by": "proxy", "errors": [error_name(error)] if error else []}
        telemetry.counts.answers.labels(api=token.api, error=error_name(error)).inc()
        if request.api_key != PUSH_TELEMETRY or error != 0:
            return Answer(reply, fields)
        instance_id = push_instance(state, body)
        copy = {**body, "metrics": bytes(body.get("metrics") or b"")}  # the frame goes

        def push(now: ConnState | None) -> dict[str, Any]:
            return telemetry.push(instance_id, client_meta(info, now), copy)

        return Answer(reply, fields, push)

    def reopen_logs(self) -> None:
        self.telemetry.reopen()

    def close(self) -> None:
        self.telemetry.close()


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
