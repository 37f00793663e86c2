"""The hooks `kafkalens proxy` runs: decode, identify, log, count, enforce KIP-1313.

Runs after each frame was forwarded (see proxy/hooks.py), except KIP-1313 `reject`
checks, which must see a request before it goes on, and the ApiVersions cap, which
rewrites a response before it goes back. Frames above limits.observe_whole_frame_bytes
are decoded as they stream past (codec/stream.py) and give the same log line, their
record batches counted from the batch headers as they passed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from codec import (
    DecodeError,
    HeaderPolicy,
    Response,
    UnknownApiError,
    decode_request,
    decode_response,
)
from codec.error_codes import INVALID_REQUEST
from codec.error_response import error_response
from codec.messages import decode_request_header
from codec.schema import api_names
from codec.skim import skim_response
from codec.stream import (
    FrameStream,
    StreamLimits,
    as_request,
    as_response,
    request_stream,
    response_stream,
)
from proxy.api_versions import API_VERSIONS, cap_api_versions
from proxy.hooks import ConnectionInfo, FrameObserver, Hooks, Pending
from proxy.identity import Identity
from proxy.memo import FrameMemo
from proxy.metrics import Metrics
from proxy.request_log import LineSink, RequestLog
from proxy.summary import (
    FULL_DECODE_RESPONSES,
    GroupProtocols,
    SummaryOptions,
    TopicIds,
    request_fields,
    response_fields,
    skimmed_response_fields,
)

UNKNOWN = "unknown"
# Apis whose frames are never memoised: their summary depends on more than their bytes
# (Produce and Fetch name topics learnt from Metadata, SyncGroup a generation's
# protocol), they rarely repeat (offsets), or they carry credentials (SASL, delegation
# token HMACs) or telemetry payloads, which must not linger in memory as memo keys.
UNMEMOISED = frozenset({0, 1, 14, 17, 36, 38, 39, 40, 41, 72})


@dataclass
class ConnState:
    identity: Identity
    requests: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    decode_errors: int = 0
    instance_reported: bool = False
    groups: GroupProtocols = field(default_factory=GroupProtocols)
    # What identity looked like when last published, and its log fields then: every
    # line needs them, and they change a handful of times per connection.
    identity_key: tuple[Any, ...] = ()
    log_fields: dict[str, Any] = field(default_factory=dict)


@dataclass
class Token:
    """What a pending request carries until its response: plain values, no buffers."""

    api: str
    correlation_id: int
    fields: dict[str, Any]
    decode_error: str | None = None
    response: Response | None = None  # already decoded by rewrite_response


class Streamed(FrameObserver):
    """One frame above the whole-frame threshold, decoded as it streams past."""

    __slots__ = ("hooks", "stream", "size", "error", "is_request", "expects_response")

    def __init__(
        self,
        hooks: ObservingHooks,
        stream: FrameStream | None,
        size: int,
        is_request: bool,
        expects_response: bool = True,
    ) -> None:
        self.hooks = hooks
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
        self.hooks.streamed_frame_done(info, pending, self)


class ObservingHooks(Hooks):
    # What latencies (against Pending.started) and durations (against
    # ConnectionInfo.opened_at) are measured with: `kafkalens decode` of a capture
    # replaces both with the capture's timestamps.
    clock = staticmethod(time.perf_counter)
    wall_clock = staticmethod(time.time)

    def __init__(
        self,
        metrics: Metrics,
        request_log: RequestLog | None,
        summary: SummaryOptions,
        policy: HeaderPolicy,
        enforcement: str = "log",
        stream_limits: StreamLimits | None = None,
    ) -> None:
        self.metrics = metrics
        self.log = request_log
        self.summary = summary
        self.policy = policy
        self.enforcement = enforcement
        self.inspects_requests = enforcement == "reject"
        self.rewrite_api_keys = frozenset({API_VERSIONS})
        self.topic_ids = TopicIds()
        self.states: dict[str, ConnState] = {}
        self._names = api_names()
        # (decoded request, its line fields), and a skimmed response's line fields
        self.request_memo = FrameMemo(skip=8)  # api key, version, correlation id
        self.response_memo = FrameMemo(skip=4)  # correlation id
        self.api_versions_memo = FrameMemo(skip=4)
        self.stream_limits = stream_limits or StreamLimits(
            decompression_limit=summary.decompression_limit
        )

    def api_name(self, api_key: int) -> str:
        return self._names.get(api_key, UNKNOWN)

    # -- connections ---------------------------------------------------------

    def connection_opened(self, info: ConnectionInfo) -> None:
        state = ConnState(Identity(max_string_length=self.summary.max_string_length))
        self.states[info.conn_id] = state
        self._refresh_identity(info, state)
        if self.log:
            self.log.write("connection_open", self._connection_fields(info, state))

    def connection_closed(self, info: ConnectionInfo, reason: str) -> None:
        state = self.states.pop(info.conn_id, None)
        if state is None:
            return
        if self.log:
            fields = self._connection_fields(info, state)
            fields.update(
                reason=reason,
                duration_s=round(self.wall_clock() - info.opened_at, 3),
                bytes_in=info.bytes_in,
                bytes_out=info.bytes_out,
                requests=state.requests,
                error_counts=state.errors,
                decode_errors=state.decode_errors,
                member_ids=state.identity.member_ids,
            )
            self.log.write("connection_close", fields)

    def request_incomplete(self, info: ConnectionInfo, pending: Pending, reason: str) -> None:
        # Logged whatever the sampling: an unanswered request is the exception to see.
        token: Token | None = pending.token
        if token is None:  # the request hook did not run (e.g. the connection broke first)
            token = Token(self.api_name(pending.api_key), pending.correlation_id, {})
        if self.log and self.log.wants(token.api, pending.api_key, True):
            line = self._line_base(info, pending, token)
            latency = self.clock() - pending.started
            line.update(reason=reason, latency_ms=round(latency * 1000, 3), response_bytes=None)
            line.update(token.fields)
            self.log.write("request_incomplete", line)

    def _connection_fields(self, info: ConnectionInfo, state: ConnState) -> dict[str, Any]:
        return {
            "conn": info.conn_id,
            "listener": info.listener,
            "client_address": f"{info.client_host}:{info.client_port}",
            "tls_version": info.tls_version,
            "client_cert_subject": info.client_cert_subject,
            **state.identity.log_fields(),
        }

    # -- requests ------------------------------------------------------------

    def admit_request(
        self, info: ConnectionInfo, frame: memoryview, api_key: int, api_version: int, correlation_id: int
    ) -> bytes | None:
        state = self.states.get(info.conn_id)
        if state is None or not self.policy.knows(api_key, api_version):
            return None
        try:
            header, header_version, _ = decode_request_header(frame, self.policy)
        except DecodeError:
            return None
        why = state.identity.kip1313.check(header_version, api_key, header.get("client_instance_id"))
        if why is None:
            return None
        self._kip1313_violation(info, state, "rejected", why, api_key, api_version, correlation_id)
        reply = error_response(api_key, api_version, correlation_id, INVALID_REQUEST, self.policy)
        return reply if reply is not None else b""  # no top-level error code: close

    def request_forwarded(self, info: ConnectionInfo, frame: memoryview, pending: Pending) -> None:
        pending.token = self._observe_request(info, frame, pending)

    def request_without_response(self, info: ConnectionInfo, frame: memoryview, pending: Pending) -> None:
        token = self._observe_request(info, frame, pending)
        if self.log and self.log.wants(token.api, pending.api_key, False):
            line = self._line_base(info, pending, token)
            line.update(latency_ms=None, response_bytes=None, errors=[])
            line.update(token.fields)
            self.log.write("request_no_response", line)

    def _observe_request(self, info: ConnectionInfo, frame: memoryview, pending: Pending) -> Token:
        api = self.api_name(pending.api_key)
        state = self.states.get(info.conn_id)
        self.metrics.api(api).request(pending.api_version, pending.request_size)
        if state is not None:
            state.requests[api] = state.requests.get(api, 0) + 1
        token = Token(api, pending.correlation_id, {})
        key = None
        if pending.api_key not in UNMEMOISED:
            key = self.request_memo.key(pending.api_key, pending.api_version, frame)
            known = self.request_memo.get(key) if key is not None else None
            if known is not None:
                request, token.fields = known
                if state is not None:
                    self._identify(info, state, request)
                return token
        try:
            # A memoised request must not hold views of the chunk it came in: a copy.
            request = decode_request(frame if key is None else frame.tobytes(), self.policy)
        except UnknownApiError:
            self.metrics.unknown_request("api_key" if api == UNKNOWN else "api_version")
            token.decode_error = "unknown api key or version"
            return token
        except DecodeError as exc:
            self._decode_failed(state, api, "request")
            token.decode_error = str(exc)
            return token
        protocol_type = None
        if state is not None:
            self._identify(info, state, request)
            protocol_type = state.groups.of_request(request, self.summary.max_string_length)
        token.fields = request_fields(request, self.summary, self.topic_ids, protocol_type)
        if key is not None:
            self.request_memo.put(key, (request, token.fields))
        return token

    # -- frames above the whole-frame threshold --------------------------------
    # (their own copies of the few lines the whole-frame path has in line, which runs
    # for every frame and pays no extra call for them)

    def _log_without_response(self, info: ConnectionInfo, pending: Pending, token: Token) -> None:
        if self.log and self.log.wants(token.api, pending.api_key, False):
            line = self._line_base(info, pending, token)
            line.update(latency_ms=None, response_bytes=None, errors=[])
            line.update(token.fields)
            self.log.write("request_no_response", line)

    def _request_started(self, info: ConnectionInfo, pending: Pending) -> tuple[ConnState | None, Token]:
        api = self.api_name(pending.api_key)
        state = self.states.get(info.conn_id)
        self.metrics.api(api).request(pending.api_version, pending.request_size)
        if state is not None:
            state.requests[api] = state.requests.get(api, 0) + 1
        return state, Token(api, pending.correlation_id, {})

    def _request_decoded(self, info: ConnectionInfo, state: ConnState | None, token: Token, request: Any) -> None:
        protocol_type = None
        if state is not None:
            self._identify(info, state, request)
            protocol_type = state.groups.of_request(request, self.summary.max_string_length)
        token.fields = request_fields(request, self.summary, self.topic_ids, protocol_type)


    def request_stream(self, info: ConnectionInfo, pending: Pending, expects_response: bool) -> Streamed:
        size = pending.request_size - 4
        try:
            stream = request_stream(pending.api_key, pending.api_version, size, self.policy, self.stream_limits)
        except DecodeError:  # an unknown api or version: said so when the request ends
            stream = None
        return Streamed(self, stream, size, True, expects_response)

    def response_stream(self, info: ConnectionInfo, pending: Pending, size: int) -> Streamed:
        token = pending.token
        stream = None
        if not isinstance(token, Token) or token.decode_error is None:
            try:
                stream = response_stream(pending.api_key, pending.api_version, size, self.policy, self.stream_limits)
            except DecodeError:
                stream = None
        return Streamed(self, stream, size, False)

    def streamed_frame_done(self, info: ConnectionInfo, pending: Pending, streamed: Streamed) -> None:
        if streamed.is_request:
            self._streamed_request_done(info, pending, streamed)
        else:
            self._streamed_response_done(info, pending, streamed)

    def _streamed_request_done(self, info: ConnectionInfo, pending: Pending, streamed: Streamed) -> None:
        state, token = self._request_started(info, pending)
        if streamed.stream is None:
            self.metrics.unknown_request("api_key" if token.api == UNKNOWN else "api_version")
            token.decode_error = "unknown api key or version"
        elif streamed.error is not None:
            self._decode_failed(state, token.api, "request")
            token.decode_error = streamed.error
        else:
            self._request_decoded(info, state, token, as_request(
                pending.api_key, pending.api_version, streamed.stream, self.policy
            ))
            _note_dropped(token.fields, streamed.stream, self.metrics, "request")
        if streamed.expects_response:
            pending.token = token
        else:
            self._log_without_response(info, pending, token)

    def _identify(self, info: ConnectionInfo, state: ConnState, request: Any) -> None:
        identity = state.identity
        if identity.observe_request(request) and info.metrics is not None:
            info.metrics.identify(
                identity.client_software_name or UNKNOWN, identity.client_software_version or UNKNOWN
            )
        if self.enforcement != "reject":
            why = identity.kip1313.check(
                request.header_version, request.api_key, request.header.get("client_instance_id")
            )
            if why is not None:
                self._kip1313_violation(
                    info, state, "logged", why, request.api_key, request.api_version, request.correlation_id
                )
        self._refresh_identity(info, state)

    def _refresh_identity(self, info: ConnectionInfo, state: ConnState) -> None:
        identity = state.identity
        key = (
            identity.client_id,
            identity.client_instance_id,
            identity.client_software_name,
            identity.client_software_version,
            identity.principal,
            identity.sasl_mechanism,
            len(identity.member_ids),
        )
        if key == state.identity_key:
            return
        state.identity_key = key
        if identity.client_instance_id and not state.instance_reported and info.metrics is not None:
            state.instance_reported = True
            info.metrics.client_instance(identity.client_instance_id)
        info.identity = identity.as_json()
        state.log_fields = identity.log_fields()

    def sasl_token(self, info: ConnectionInfo, token: memoryview) -> None:
        # A raw token after SaslHandshake v0: the principal, as SaslAuthenticate gives it.
        state = self.states.get(info.conn_id)
        if state is not None and state.identity.principal is None:
            state.identity.observe_sasl_token(token)
            self._refresh_identity(info, state)

    def _kip1313_violation(
        self,
        info: ConnectionInfo,
        state: ConnState,
        action: str,
        why: str,
        api_key: int,
        api_version: int,
        correlation_id: int,
    ) -> None:
        self.metrics.kip1313_violation(action)
        if self.log:
            fields = self._connection_fields(info, state)
            fields.update(
                api_key=api_key,
                api=self.api_name(api_key),
                api_version=api_version,
                correlation_id=correlation_id,
                action=action,
                reason=why,
            )
            self.log.warning("kip1313_violation", fields)

    def _decode_failed(self, state: ConnState | None, api: str, direction: str) -> None:
        self.metrics.api(api).decode_error(direction)
        if state is not None:
            state.decode_errors += 1

    def reopen_logs(self) -> None:
        if self.log:
            self.log.reopen()

    def close(self) -> None:
        if self.log:
            self.log.close()

    # -- responses -----------------------------------------------------------

    def rewrite_response(self, info: ConnectionInfo, frame: memoryview, pending: Pending) -> bytes | None:
        if pending.api_key == API_VERSIONS:
            new_frame, decoded = self._capped(frame, pending.api_version)
            if isinstance(pending.token, Token):
                pending.token.response = decoded  # no bytes fields: safe to keep
            return new_frame
        return None

    def _capped(self, frame: memoryview, version: int) -> tuple[bytes | None, Response | None]:
        """The ApiVersions cap; a broker answers every connection the same."""
        memo = self.api_versions_memo
        key = memo.key(API_VERSIONS, version, frame)
        known = memo.get(key) if key is not None else None
        if known is None:
            new_frame, decoded = cap_api_versions(frame, version, self.policy)
            known = (None if new_frame is None else new_frame[4:], decoded)
            if key is not None and decoded is not None:
                memo.put(key, known)
        tail, decoded = known
        # the correlation id is the frame's own; the rest is the memoised rewrite
        return (None if tail is None else frame[:4].tobytes() + tail), decoded

    def response_forwarded(self, info: ConnectionInfo, frame: memoryview, pending: Pending) -> None:
        latency = self.clock() - pending.started
        token: Token | None = pending.token
        if token is None:  # the request hook did not run (e.g. an answer the proxy made)
            token = Token(self.api_name(pending.api_key), pending.correlation_id, {})
        api_metrics = self.metrics.api(token.api)
        response_size = len(frame) + 4
        api_metrics.response(latency, response_size)
        state = self.states.get(info.conn_id)
        fields: dict[str, Any] = {"errors": []}
        if token.decode_error is None:
            fields = self._observe_response(info, state, frame, pending, token)
        for error in fields["errors"]:
            api_metrics.error(error)
            if state is not None:
                state.errors[error] = state.errors.get(error, 0) + 1
        if self.log and self.log.wants(token.api, pending.api_key, bool(fields["errors"])):
            line = self._line_base(info, pending, token)
            line.update(latency_ms=round(latency * 1000, 3), response_bytes=response_size)
            line.update(token.fields)
            line.update(fields)
            self.log.write("request", line)

    def _streamed_response_done(self, info: ConnectionInfo, pending: Pending, streamed: Streamed) -> None:
        """response_forwarded's line, for a response decoded as it streamed past (kept
        apart so the whole-frame path, run for every response, pays no extra call)."""
        latency = self.clock() - pending.started
        token: Token | None = pending.token
        if token is None:
            token = Token(self.api_name(pending.api_key), pending.correlation_id, {})
        api_metrics = self.metrics.api(token.api)
        response_size = streamed.size + 4
        api_metrics.response(latency, response_size)
        state = self.states.get(info.conn_id)
        fields: dict[str, Any] = {"errors": []}
        if token.decode_error is None:
            fields = self._observe_streamed_response(info, state, pending, token, streamed)
        for error in fields["errors"]:
            api_metrics.error(error)
            if state is not None:
                state.errors[error] = state.errors.get(error, 0) + 1
        if self.log and self.log.wants(token.api, pending.api_key, bool(fields["errors"])):
            line = self._line_base(info, pending, token)
            line.update(latency_ms=round(latency * 1000, 3), response_bytes=response_size)
            line.update(token.fields)
            line.update(fields)
            self.log.write("request", line)

    def _observe_streamed_response(
        self, info: ConnectionInfo, state: ConnState | None, pending: Pending, token: Token, streamed: Streamed
    ) -> dict[str, Any]:
        if streamed.stream is None:
            return {"errors": []}
        if streamed.error is not None:
            self._decode_failed(state, token.api, "response")
            return {"errors": [], "response_decode_error": streamed.error}
        response = as_response(pending.api_key, pending.api_version, streamed.stream, self.policy)
        if state is not None and pending.api_key in FULL_DECODE_RESPONSES:
            # as the whole-frame path: skimmed responses teach identity nothing
            state.identity.observe_response(response)
            state.groups.learn(token.fields, response)
            self._refresh_identity(info, state)
        fields = response_fields(response, self.summary, self.topic_ids, token.fields.get("protocol_type"))
        _note_dropped(fields, streamed.stream, self.metrics, "response")
        return fields

    def _observe_response(
        self, info: ConnectionInfo, state: ConnState | None, frame: memoryview, pending: Pending, token: Token
    ) -> dict[str, Any]:
        version = pending.api_version
        if pending.api_key == API_VERSIONS and len(frame) >= 6 and frame[4:6] == b"\x00\x23":
            version = 0  # KIP-511: an UNSUPPORTED_VERSION answer always has a v0 body
        try:
            if token.response is None and pending.api_key not in FULL_DECODE_RESPONSES:
                return self._skimmed(frame, pending.api_key, version)
            response = token.response or decode_response(frame, pending.api_key, version, self.policy)
        except DecodeError as exc:
            self._decode_failed(state, token.api, "response")
            return {"errors": [], "response_decode_error": str(exc)}
        if state is not None:
            state.identity.observe_response(response)
            state.groups.learn(token.fields, response)
            self._refresh_identity(info, state)
        protocol_type = token.fields.get("protocol_type")
        return response_fields(response, self.summary, self.topic_ids, protocol_type)

    def _skimmed(self, frame: memoryview, api_key: int, version: int) -> dict[str, Any]:
        memo = self.response_memo
        key = None if api_key in UNMEMOISED else memo.key(api_key, version, frame)
        if key is not None:
            known = memo.get(key)
            if known is not None:
                return known
        _, found = skim_response(frame, api_key, version, self.policy)
        fields = skimmed_response_fields(api_key, found, self.topic_ids)
        if key is not None:
            memo.put(key, fields)
        return fields

    def _line_base(self, info: ConnectionInfo, pending: Pending, token: Token) -> dict[str, Any]:
        state = self.states.get(info.conn_id)
        identity = state.log_fields if state else {}
        line: dict[str, Any] = {
            "conn": info.conn_id,
            "listener": info.listener,
            "client_address": f"{info.client_host}:{info.client_port}",
            "api_key": pending.api_key,
            "api": token.api,
            "api_version": pending.api_version,
            "correlation_id": pending.correlation_id,
            **identity,
            "request_bytes": pending.request_size,
        }
        if token.decode_error is not None:
            line["decode_error"] = token.decode_error
        return line


def _note_dropped(
    fields: dict[str, Any], stream: FrameStream, metrics: Metrics, direction: str
) -> None:
    """Array elements a streamed frame had past the materialising bound
    (limits.observe_max_elements; its facts are from the elements before)."""
    if stream.dropped_elements:
        fields["observed_elements_dropped"] = stream.dropped_elements
        metrics.observed_elements_dropped.labels(direction=direction).inc(stream.dropped_elements)


def build_hooks(config: Any, metrics: Metrics) -> ObservingHooks:
    """ObservingHooks from a proxy.config.Config."""
    log_config = config.request_log
    sink = LineSink(
        log_config.path,
        log_config.max_bytes,
        log_config.backups,
        flush_interval=log_config.flush_interval_seconds,
        max_queued_bytes=log_config.max_queued_bytes,
        metrics=metrics,
    )
    request_log = RequestLog(sink, log_config.sample_rate, log_config.apis, log_config.errors_only)
    summary = SummaryOptions(
        record_detail=log_config.record_detail,
        header_value_allowlist=frozenset(log_config.header_value_allowlist),
        max_string_length=log_config.max_string_length,
        decompression_limit=config.limits.decompression_limit_bytes,
    )
    return ObservingHooks(
        metrics,
        request_log,
        summary,
        header_policy(config.kip1313.header_v3),
        config.kip1313.enforcement,
        StreamLimits(
            record_detail_bytes=config.limits.observe_whole_frame_bytes if log_config.record_detail else 0,
            decompression_limit=config.limits.decompression_limit_bytes,
            max_seconds_per_piece=config.limits.observe_seconds_per_read,
            max_field_bytes=config.limits.observe_max_field_bytes,
            max_elements=config.limits.observe_max_elements,
        ),
    )


def header_policy(rules: Any) -> HeaderPolicy:
    """KIP-1313 header v3 declarations from the config (api names or keys)."""
    keys = {name: key for key, name in api_names().items()}
    declared: dict[int, int | tuple[int, int | None]] = {}
    for rule in rules:
        api_key = rule.api if isinstance(rule.api, int) else keys[rule.api]
        declared[api_key] = (rule.min_version, rule.max_version)
    return HeaderPolicy(header_v3=declared)
