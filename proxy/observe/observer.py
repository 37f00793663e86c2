"""The hooks `kafkalens proxy` runs: decode, identify, log, count, enforce KIP-1313.

Runs after each frame was forwarded (see proxy/hooks.py), except KIP-1313 `reject`
checks, which must see a request before it goes on, and the ApiVersions cap, which
rewrites a response before it goes back. Frames above limits.observe_whole_frame_bytes
are decoded as they stream past (codec/stream.py) and give the same log line, their
record batches counted from the batch headers as they passed.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from codec import (
    DecodeError,
    HeaderPolicy,
    Response,
    UnknownApiError,
    decode_request,
    decode_response,
)
from codec.error_codes import INVALID_REQUEST, error_name
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
from proxy.hooks import ConnectionInfo, FrameObserver, Hooks, Pending
from proxy.metrics import Metrics
from proxy.observe.api_versions import API_VERSIONS, cap_api_versions
from proxy.observe.identity import GET_TELEMETRY_SUBSCRIPTIONS, PUSH_TELEMETRY, ZERO_UUID, Identity
from proxy.observe.instance_join import InstanceJoins, JoinKey
from proxy.observe.lag import LAG_APIS, CommitAsk, FetchAsk, LagTracker
from proxy.observe.lag_series import LagSeries
from proxy.observe.memo import FrameMemo
from proxy.observe.request_log import LineSink, RequestLog
from proxy.observe.summary import (
    FULL_DECODE_RESPONSES,
    GroupProtocols,
    SummaryOptions,
    TopicIds,
    request_fields,
    response_fields,
    skimmed_response_fields,
)
from proxy.observe.telemetry import Telemetry
from proxy.observe.telemetry_collect import ADDED_API_VERSIONS
from proxy.observe.telemetry_store import ClientMeta
from proxy.observe.traffic import TopicTraffic

UNKNOWN = "unknown"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
PRODUCE = 0
# Apis whose frames are never memoised: their summary depends on more than their bytes
# (Produce and Fetch name topics learnt from Metadata, SyncGroup a generation's
# protocol), they rarely repeat (offsets), or they carry credentials (SASL, delegation
# token HMACs) or telemetry payloads, which must not linger in memory as memo keys.
UNMEMOISED = frozenset({0, 1, 14, 17, 36, 38, 39, 40, 41, 72})


@dataclass
class ConnState:
    identity: Identity
    info: ConnectionInfo | None = None
    requests: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    decode_errors: int = 0
    instance_reported: bool = False
    groups: GroupProtocols = field(default_factory=GroupProtocols)
    # What identity looked like when last published, and its log fields then: every
    # line needs them, and they change a handful of times per connection.
    identity_key: tuple[Any, ...] = ()
    log_fields: dict[str, Any] = field(default_factory=dict)
    broker_telemetry: bool = False  # the broker's ApiVersions lists KIP-714's apis
    join_key: JoinKey | None = None  # waiting under this key for its client's instance id
    joined: bool = False  # its instance id came from another connection
    joinable: bool = True  # False once it has a telemetry exchange of its own
    header_id: UUID | None = None  # the first KIP-1313 header id the client sent


@dataclass
class Token:
    """What a pending request carries until its response: plain values, no buffers."""

    api: str
    correlation_id: int
    fields: dict[str, Any]
    decode_error: str | None = None
    response: Response | None = None  # already decoded by rewrite_response
    lag: FetchAsk | CommitAsk | None = None  # what the lag tracker reads the response against


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
        telemetry: Telemetry | None = None,
    ) -> None:
        self.metrics = metrics
        self.telemetry = telemetry
        collect = telemetry is not None and telemetry.answers is not None
        # Collect mode: only KIP-714's requests are held for admit_request (who answers
        # them is known once the broker's ApiVersions was seen), not every request.
        self.admit_api_keys = frozenset({GET_TELEMETRY_SUBSCRIPTIONS, PUSH_TELEMETRY}) if collect else frozenset()
        self.added_api_versions = ADDED_API_VERSIONS if collect else ()
        self.joins = InstanceJoins(max_keys=4 * (telemetry.config.max_instances if telemetry else 1000))
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
        self.lag: LagTracker | None = None
        self.traffic: TopicTraffic | None = None
        self.lag_apis: frozenset[int] = frozenset()  # requests the two look at

    def track_lag(self, lag: LagTracker, traffic: TopicTraffic) -> None:
        """Consumer lag and topic traffic (lag.enabled), published on metrics flushes."""
        self.lag, self.traffic = lag, traffic
        self.lag_apis = LAG_APIS | {PRODUCE}

    def api_name(self, api_key: int) -> str:
        return self._names.get(api_key, UNKNOWN)

    # -- connections ---------------------------------------------------------

    def connection_opened(self, info: ConnectionInfo) -> None:
        state = ConnState(Identity(max_string_length=self.summary.max_string_length), info)
        self.states[info.conn_id] = state
        self._refresh_identity(info, state)
        if self.log:
            self.log.write("connection_open", self._connection_fields(info, state))

    def connection_closed(self, info: ConnectionInfo, reason: str) -> None:
        state = self.states.pop(info.conn_id, None)
        if state is None:
            return
        self._stop_waiting(info, state)
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
        if self.inspects_requests:
            refusal = self._kip1313_refusal(info, state, frame, api_key, api_version, correlation_id)
            if refusal is not None:
                return refusal
        if (
            api_key in self.admit_api_keys
            and self.telemetry is not None
            and self.telemetry.proxy_answers(state.broker_telemetry)
        ):
            return self._answer_telemetry(info, state, frame, api_key, api_version, correlation_id)
        return None

    def _kip1313_refusal(
        self, info: ConnectionInfo, state: ConnState, frame: memoryview, api_key: int, api_version: int, correlation_id: int
    ) -> bytes | None:
        try:
            header, header_version, _ = decode_request_header(frame, self.policy)
            why = state.identity.kip1313.check(header_version, api_key, header.get("client_instance_id"))
            _note_header_id(state, header.get("client_instance_id"))
            if why is None and api_key in (GET_TELEMETRY_SUBSCRIPTIONS, PUSH_TELEMETRY):
                body = decode_request(frame, self.policy).body
                why = _telemetry_id_mismatch(state, body.get("client_instance_id"))
        except DecodeError:
            return None
        if why is None:
            return None
        self._kip1313_violation(info, state, "rejected", why, api_key, api_version, correlation_id)
        reply = error_response(api_key, api_version, correlation_id, INVALID_REQUEST, self.policy)
        return reply if reply is not None else b""  # no top-level error code: close

    # -- KIP-714 telemetry ---------------------------------------------------------------

    def _answer_telemetry(
        self, info: ConnectionInfo, state: ConnState, frame: memoryview, api_key: int, api_version: int, correlation_id: int
    ) -> bytes | None:
        """Collect mode: answer GetTelemetrySubscriptions or PushTelemetry in the broker's
        place; a push's payload is decoded once the answer is on its way."""
        telemetry = self.telemetry
        assert telemetry is not None and telemetry.answers is not None
        answers = telemetry.answers
        pending = Pending(correlation_id, api_key, api_version, self.clock(), len(frame) + 4)
        try:
            request = decode_request(frame, self.policy)
        except DecodeError:
            return None  # forwarded: what the proxy cannot read, the broker answers
        token = self._request_started(info, pending)[1]
        self._unjoin(info, state)
        self._request_decoded(info, state, token, request)
        body = request.body
        error = 0
        if api_key == GET_TELEMETRY_SUBSCRIPTIONS:
            identity = state.identity
            instance = answers.instance_id(
                body.get("client_instance_id"), request.header.get("client_instance_id"), identity.client_instance_id
            )
            reply = answers.subscription(correlation_id, api_version, instance)
            identity.observe_instance(instance)
            self._refresh_identity(info, state)
            telemetry.subscribed(str(instance), telemetry.config.push_interval_ms)
        else:
            error = answers.push_error(body)
            reply = answers.push_answer(correlation_id, api_version, error)
        fields: dict[str, Any] = {"answered_by": "proxy", "errors": [error_name(error)] if error else []}
        telemetry.metrics.telemetry_answers.labels(api=token.api, error=error_name(error)).inc()
        if api_key == PUSH_TELEMETRY and error == 0:
            instance_id = _push_instance(state, body)
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
        state = self.states.get(info.conn_id)
        meta = self._client_meta(info, state)
        fields.update(self.telemetry.push(instance_id, meta, body))
        self._answered_line(info, pending, token, fields, size)

    def _answered_line(
        self, info: ConnectionInfo, pending: Pending, token: Token, fields: dict[str, Any], size: int
    ) -> None:
        latency = self.clock() - pending.started
        self.metrics.api(token.api).response(latency, size)
        if self.log and self.log.wants(token.api, pending.api_key, bool(fields["errors"])):
            line = self._line_base(info, pending, token)
            line.update(latency_ms=round(latency * 1000, 3), response_bytes=size)
            line.update(token.fields)
            line.update(fields)
            self.log.write("request", line)

    def _observe_push(self, info: ConnectionInfo, state: ConnState | None, token: Token, request: Any) -> None:
        """Observe mode: a push that went to the broker, decoded after it went."""
        telemetry = self.telemetry
        if telemetry is None or not telemetry.config.observe or state is None:
            return
        meta = self._client_meta(info, state)
        token.fields.update(telemetry.push(_push_instance(state, request.body), meta, request.body))

    def _client_meta(self, info: ConnectionInfo, state: ConnState | None) -> ClientMeta:
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

    def _update_join(self, info: ConnectionInfo, state: ConnState) -> None:
        """After an identity change: publish this connection's own instance id to the
        client's other connections, or wait for (or take) one (instance_join.py)."""
        identity = state.identity
        key = None
        if identity.client_id is not None:
            key = (info.client_host, identity.client_id, identity.client_software_name, identity.client_software_version)
        if identity.client_instance_id is not None:
            if state.joined:
                return
            self._stop_waiting(info, state)
            if key is not None:
                for conn_id in self.joins.publish(key, identity.client_instance_id):
                    other = self.states.get(conn_id)
                    if other is not None and other.info is not None and other.identity.client_instance_id is None:
                        self._take(other.info, other, identity.client_instance_id)
        elif state.joinable and key != state.join_key:
            self._stop_waiting(info, state)
            if key is not None:
                state.join_key = key
                found = self.joins.wait(info.conn_id, key)
                if found is not None:
                    self._take(info, state, found)

    def _take(self, info: ConnectionInfo, state: ConnState, instance_id: str) -> None:
        self._stop_waiting(info, state)
        state.identity.client_instance_id = instance_id
        state.joined = True
        self._refresh_identity(info, state)

    def _unjoin(self, info: ConnectionInfo, state: ConnState) -> None:
        """A connection about to learn its own instance id drops one it joined (and joins
        no more)."""
        state.joinable = False
        self._stop_waiting(info, state)
        if state.joined:
            state.joined = False
            state.identity.client_instance_id = None

    def _stop_waiting(self, info: ConnectionInfo, state: ConnState) -> None:
        if state.join_key is not None:
            self.joins.leave(info.conn_id, state.join_key)
            state.join_key = None

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
                    if pending.api_key in self.lag_apis:
                        self._lag_request(info, state, request, token)
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
        elif pending.api_key == PUSH_TELEMETRY:
            self._observe_push(info, state, token, request)
        if state is not None and pending.api_key in self.lag_apis:
            self._lag_request(info, state, request, token)
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
        if state is not None and request.api_key in self.lag_apis:
            self._lag_request(info, state, request, token)

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
            request = as_request(pending.api_key, pending.api_version, streamed.stream, self.policy)
            self._request_decoded(info, state, token, request)
            if pending.api_key == PUSH_TELEMETRY:
                self._observe_push(info, state, token, request)
            _note_dropped(token.fields, streamed.stream, self.metrics, "request")
        if streamed.expects_response:
            pending.token = token
        else:
            self._log_without_response(info, pending, token)

    # -- consumer lag and topic traffic (proxy/observe/lag.py, traffic.py) ------

    def _lag_request(self, info: ConnectionInfo, state: ConnState, request: Any, token: Token) -> None:
        if request.api_key == PRODUCE:
            stats = token.fields.get("record_stats")
            if stats and self.traffic is not None:
                self._traffic(info, state, stats, "produce")
        elif self.lag is not None:
            token.lag = self.lag.request(request, token.fields, state.identity, info.client_host)

    def _traffic(self, info: ConnectionInfo, state: ConnState, stats: dict[str, Any], direction: str) -> None:
        name, version = info.metrics.software if info.metrics is not None else (UNKNOWN, UNKNOWN)
        principal = state.identity.principal or UNKNOWN
        self.traffic.add(stats["per_topic"], direction, f"{name}/{version}", principal)  # type: ignore[union-attr]

    def _fetch_fields(
        self, info: ConnectionInfo, state: ConnState | None, response: Response, token: Token, ask: FetchAsk
    ) -> dict[str, Any]:
        """A Fetch response's line fields, and its positions for the lag tracker."""
        partition_stats: dict[tuple[str, int], Any] = {}
        fields = response_fields(response, self.summary, self.topic_ids, None, partition_stats)
        self.lag.fetch_done(ask, response.body, partition_stats, fields)  # type: ignore[union-attr]
        stats = fields.get("record_stats")
        if stats and ask.replica < 0 and state is not None and self.traffic is not None:
            self._traffic(info, state, stats, "fetch")
        return fields

    def _commit_fields(self, fields: dict[str, Any], ask: CommitAsk) -> dict[str, Any]:
        fields = dict(fields)  # a skimmed response's fields may be memoised: not changed
        accepted = not fields["errors"] and "response_decode_error" not in fields
        self.lag.commit_done(ask, accepted, fields)  # type: ignore[union-attr]
        return fields

    def _identify(self, info: ConnectionInfo, state: ConnState, request: Any) -> None:
        identity = state.identity
        if request.header_version >= 3 and state.header_id is None:
            _note_header_id(state, request.header.get("client_instance_id"))
        if identity.observe_request(request) and info.metrics is not None:
            info.metrics.identify(
                identity.client_software_name or UNKNOWN, identity.client_software_version or UNKNOWN
            )
        if self.enforcement != "reject":
            why = identity.kip1313.check(
                request.header_version, request.api_key, request.header.get("client_instance_id")
            )
            if why is None and request.api_key in (GET_TELEMETRY_SUBSCRIPTIONS, PUSH_TELEMETRY):
                why = _telemetry_id_mismatch(state, request.body.get("client_instance_id"))
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
        if self.lag is not None and identity.client_instance_id and identity.client_id:
            self.lag.learn_instance(identity.client_id, info.client_host, identity.client_instance_id)
        if identity.client_instance_id and not state.instance_reported and info.metrics is not None:
            state.instance_reported = True
            info.metrics.client_instance(identity.client_instance_id)
        self._update_join(info, state)
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
        if self.telemetry is not None:
            self.telemetry.reopen()

    def close(self) -> None:
        if self.log:
            self.log.close()
        if self.telemetry is not None:
            self.telemetry.close()

    # -- responses -----------------------------------------------------------

    def rewrite_response(self, info: ConnectionInfo, frame: memoryview, pending: Pending) -> bytes | None:
        if pending.api_key == API_VERSIONS:
            new_frame, decoded, broker_telemetry = self._capped(frame, pending.api_version)
            state = self.states.get(info.conn_id)
            if state is not None and decoded is not None:
                state.broker_telemetry = broker_telemetry
            if isinstance(pending.token, Token):
                pending.token.response = decoded  # no bytes fields: safe to keep
            return new_frame
        return None

    def _capped(self, frame: memoryview, version: int) -> tuple[bytes | None, Response | None, bool]:
        """The ApiVersions cap (and, collect mode, KIP-714's apis added); a broker answers
        every connection the same. Last: whether the broker itself lists KIP-714's apis."""
        memo = self.api_versions_memo
        key = memo.key(API_VERSIONS, version, frame)
        known = memo.get(key) if key is not None else None
        if known is None:
            broker_apis: set[int] = set()
            new_frame, decoded = cap_api_versions(frame, version, self.policy, self.added_api_versions, broker_apis)
            broker_telemetry = {GET_TELEMETRY_SUBSCRIPTIONS, PUSH_TELEMETRY} <= broker_apis
            known = (None if new_frame is None else new_frame[4:], decoded, broker_telemetry)
            if key is not None and decoded is not None:
                memo.put(key, known)
        tail, decoded, broker_telemetry = known
        # the correlation id is the frame's own; the rest is the memoised rewrite
        return (None if tail is None else frame[:4].tobytes() + tail), decoded, broker_telemetry

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
            if token.lag is not None and token.lag.__class__ is CommitAsk:
                fields = self._commit_fields(fields, token.lag)
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
            if token.lag is not None and token.lag.__class__ is CommitAsk:
                fields = self._commit_fields(fields, token.lag)
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
        if token.lag.__class__ is FetchAsk:
            fields = self._fetch_fields(info, state, response, token, token.lag)
        else:
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
            if pending.api_key == GET_TELEMETRY_SUBSCRIPTIONS:
                self._subscription_seen(info, state, pending, response)
            state.identity.observe_response(response)
            state.groups.learn(token.fields, response)
            self._refresh_identity(info, state)
        if token.lag.__class__ is FetchAsk:
            return self._fetch_fields(info, state, response, token, token.lag)
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

    def _subscription_seen(self, info: ConnectionInfo, state: ConnState, pending: Pending, response: Response) -> None:
        """Observe mode: the broker's subscription (its instance id, push interval). An id
        other than the client's header id breaks KIP-1313's rule: logged (a response
        cannot be refused)."""
        self._unjoin(info, state)
        instance = response.body.get("client_instance_id")
        if instance is None or instance == ZERO_UUID:
            return
        if self.telemetry is not None:
            self.telemetry.subscribed(str(instance), response.body.get("push_interval_ms", 0))
        if state.header_id is not None and instance != state.header_id:
            why = "the broker's telemetry client instance id differs from the request header's"
            self._kip1313_violation(info, state, "logged", why, pending.api_key, pending.api_version, pending.correlation_id)

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


def _telemetry_id_mismatch(state: ConnState, body_id: UUID | None) -> str | None:
    """KIP-1313 with KIP-714: a telemetry body's id must be the header's, if both are set."""
    header_id = state.header_id
    if header_id is None or body_id is None or body_id in (ZERO_UUID, header_id):
        return None
    return "telemetry client instance id differs from the request header's"


def _note_header_id(state: ConnState, header_id: UUID | None) -> None:
    if state.header_id is None and header_id is not None and header_id != ZERO_UUID:
        state.header_id = header_id


def _push_instance(state: ConnState, body: dict[str, Any]) -> str | None:
    """Whose push: the body's id (v0), else the connection's (v1: the header's)."""
    instance = body.get("client_instance_id")
    if instance is not None and instance != ZERO_UUID:
        return str(instance)
    return None if state.joined else state.identity.client_instance_id



def _later(call: Callable[..., None], *args: Any) -> None:
    """On the loop's next turn (what forwarding has ready goes first), else now."""
    try:
        asyncio.get_running_loop().call_soon(call, *args)
    except RuntimeError:
        call(*args)


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
    policy = header_policy(config.kip1313.header_v3)
    summary = SummaryOptions(
        record_detail=log_config.record_detail,
        header_value_allowlist=frozenset(log_config.header_value_allowlist),
        max_string_length=log_config.max_string_length,
        decompression_limit=config.limits.decompression_limit_bytes,
    )
    hooks = ObservingHooks(
        metrics,
        request_log,
        summary,
        policy,
        config.kip1313.enforcement,
        StreamLimits(
            record_detail_bytes=config.limits.observe_whole_frame_bytes if log_config.record_detail else 0,
            decompression_limit=config.limits.decompression_limit_bytes,
            max_seconds_per_piece=config.limits.observe_seconds_per_read,
            max_field_bytes=config.limits.observe_max_field_bytes,
            max_elements=config.limits.observe_max_elements,
        ),
        build_telemetry(config, metrics, policy),
    )
    if config.lag.enabled:
        enable_lag(hooks, config.lag, metrics)
    return hooks


def enable_lag(hooks: ObservingHooks, options: Any, metrics: Metrics) -> None:
    """Track consumer lag and topic traffic with `options` (a proxy.config.LagConfig)."""
    lag = LagTracker(options, hooks.topic_ids, hooks.summary.max_string_length)
    traffic = TopicTraffic(options, metrics)
    metrics.publishers.append(traffic.publish)
    if MULTIPROC_ENV in os.environ:
        # prometheus-client keeps every series in files (never removed), and nothing
        # collects this process's registry: a thread publishes every second.
        LagSeries(lag, metrics, sticky=True).start_thread()
    else:
        metrics.collectors.append(LagSeries(lag, metrics).publish)
    hooks.track_lag(lag, traffic)


def build_telemetry(config: Any, metrics: Metrics, policy: HeaderPolicy) -> Telemetry | None:
    telemetry = config.telemetry
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
    return Telemetry(telemetry, metrics, policy, log)


def header_policy(rules: Any) -> HeaderPolicy:
    """KIP-1313 header v3 declarations from the config (api names or keys)."""
    keys = {name: key for key, name in api_names().items()}
    declared: dict[int, int | tuple[int, int | None]] = {}
    for rule in rules:
        api_key = rule.api if isinstance(rule.api, int) else keys[rule.api]
        declared[api_key] = (rule.min_version, rule.max_version)
    return HeaderPolicy(header_v3=declared)
