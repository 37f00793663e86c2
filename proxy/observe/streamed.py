"""Frames above limits.observe_whole_frame_bytes, decoded as they stream past
(codec/stream.py): the same log line as a whole frame's, their record batches counted
from the batch headers as they passed."""

from __future__ import annotations

from typing import Any, Protocol

from codec import DecodeError
from codec.stream import (
    FrameStream,
    StreamLimits,
    as_request,
    as_response,
    request_stream,
    response_stream,
)
from proxy.hooks import ConnectionInfo, FrameObserver, Pending
from proxy.metrics import Metrics
from proxy.observe.conn_state import ConnState, Token
from proxy.observe.identity import PUSH_TELEMETRY
from proxy.observe.lag import CommitAsk
from proxy.observe.lag_hooks import LagHooks
from proxy.observe.observer_parts import Observer
from proxy.observe.summary import FULL_DECODE_RESPONSES, response_fields
from proxy.observe.telemetry_hooks import TelemetryHooks

UNKNOWN = "unknown"


class StreamOwner(Observer, Protocol):
    stream_limits: StreamLimits
    telemetry_hooks: TelemetryHooks
    lag_hooks: LagHooks | None

    def unanswered(self, info: ConnectionInfo, pending: Pending, token: Token) -> None: ...

    def responded(
        self, info: ConnectionInfo, pending: Pending, token: Token, state: ConnState | None,
        latency: float, size: int, fields: dict[str, Any],
    ) -> None: ...


class Streamed(FrameObserver):
    """One frame above the whole-frame threshold, decoded as it streams past."""

    __slots__ = ("frames", "stream", "size", "error", "is_request", "expects_response")

    def __init__(
        self,
        frames: StreamedFrames,
        stream: FrameStream | None,
        size: int,
        is_request: bool,
        expects_response: bool = True,
    ) -> None:
        self.frames = frames
        self.is_request = is_request
        self.stream = stream  # None: nothing to decode (an unknown api, or a request that failed)
        self.size = size  # the frame's body size
        self.error: str | None = None
        self.expects_response = expects_response

    def piece(self, info: ConnectionInfo, piece: memoryview, pending: Pending) -> None:
        if self.stream is not None and self.error is None:
            try:
                self.stream.feed(piece)
            except DecodeError as exc:
                self.error = str(exc)

    def done(self, info: ConnectionInfo, nothing: memoryview, pending: Pending) -> None:
        if self.stream is not None and self.error is None:
            try:
                self.stream.finish()
            except DecodeError as exc:
                self.error = str(exc)
        if self.is_request:
            self.frames.request_done(info, pending, self)
        else:
            self.frames.response_done(info, pending, self)


class StreamedFrames:
    """The observer's streamed-frame part; `hooks` is the observer it belongs to."""

    def __init__(self, hooks: StreamOwner) -> None:
        self.hooks = hooks

    def request_stream(self, pending: Pending, expects_response: bool) -> Streamed:
        hooks = self.hooks
        size = pending.request_size - 4
        try:
            stream = request_stream(pending.api_key, pending.api_version, size, hooks.policy, hooks.stream_limits)
        except DecodeError:  # an unknown api or version: said so when the request ends
            stream = None
        return Streamed(self, stream, size, True, expects_response)

    def response_stream(self, pending: Pending, size: int) -> Streamed:
        hooks = self.hooks
        token = pending.token
        stream = None
        if not isinstance(token, Token) or token.decode_error is None:
            try:
                stream = response_stream(pending.api_key, pending.api_version, size, hooks.policy, hooks.stream_limits)
            except DecodeError:
                stream = None
        return Streamed(self, stream, size, False)

    def request_done(self, info: ConnectionInfo, pending: Pending, streamed: Streamed) -> None:
        hooks = self.hooks
        state, token = hooks.request_started(info, pending)
        if streamed.stream is None:
            hooks.metrics.unknown_request("api_key" if token.api == UNKNOWN else "api_version")
            token.decode_error = "unknown api key or version"
        elif streamed.error is not None:
            hooks.decode_failed(state, token.api, "request")
            token.decode_error = streamed.error
        else:
            request = as_request(pending.api_key, pending.api_version, streamed.stream, hooks.policy)
            hooks.request_decoded(info, state, token, request)
            if pending.api_key == PUSH_TELEMETRY:
                hooks.telemetry_hooks.observe_push(info, state, token, request)
            note_dropped(token.fields, streamed.stream, hooks.metrics, "request")
        if streamed.expects_response:
            pending.token = token
        else:
            hooks.unanswered(info, pending, token)

    def response_done(self, info: ConnectionInfo, pending: Pending, streamed: Streamed) -> None:
        """response_forwarded's line, for a response decoded as it streamed past."""
        hooks = self.hooks
        latency = hooks.clock() - pending.started
        token: Token | None = pending.token
        if token is None:
            token = Token(hooks.api_name(pending.api_key), pending.correlation_id, {})
        state = hooks.states.get(info.conn_id)
        if token.decode_error is None:
            fields = self._observe_response(info, state, pending, token, streamed)
        else:
            fields = {"errors": []}
        hooks.responded(info, pending, token, state, latency, streamed.size + 4, fields)

    def _observe_response(
        self, info: ConnectionInfo, state: ConnState | None, pending: Pending, token: Token, streamed: Streamed
    ) -> dict[str, Any]:
        hooks = self.hooks
        if streamed.stream is None:
            return {"errors": []}
        if streamed.error is not None:
            hooks.decode_failed(state, token.api, "response")
            return {"errors": [], "response_decode_error": streamed.error}
        response = as_response(pending.api_key, pending.api_version, streamed.stream, hooks.policy)
        if state is not None and pending.api_key in FULL_DECODE_RESPONSES:
            # as the whole-frame path: skimmed responses teach identity nothing
            state.identity.observe_response(response)
            state.groups.learn(token.fields, response)
            hooks.refresh_identity(info, state)
        ask = token.lag
        protocol_type = token.fields.get("protocol_type")
        if ask is not None and ask.__class__ is not CommitAsk:  # Fetch, share, heartbeats
            fields = hooks.lag_hooks.answer_fields(info, state, response, ask, protocol_type)  # type: ignore[union-attr]
        else:
            fields = response_fields(response, hooks.summary, hooks.topic_ids, protocol_type)
        note_dropped(fields, streamed.stream, hooks.metrics, "response")
        return fields


def note_dropped(fields: dict[str, Any], stream: FrameStream, metrics: Metrics, direction: str) -> None:
    """Array elements a streamed frame had past the materialising bound
    (limits.observe_max_elements; its facts are from the elements before)."""
    if stream.dropped_elements:
        fields["observed_elements_dropped"] = stream.dropped_elements
        metrics.observed_elements_dropped.labels(direction=direction).inc(stream.dropped_elements)
