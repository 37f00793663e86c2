"""The request log's hooks, the `Hooks` `kafkalens proxy` runs: decode, identify, count,
log, cap ApiVersions; and the links of the observers' chain (chain.py).

Run after each frame was forwarded (see proxy/hooks.py), except the links that must
see a request before it goes on (KIP-1313's `reject`), the ApiVersions cap, which
rewrites a response before it goes back, and the requests a link answers in the
broker's place (telemetry's collect mode). A request is decoded once, whether whole,
memoised (memo.py) or streamed past (streamed.py), and goes the same way from there
(`_decoded`): the connection's identity learns from it, its line fields are made, and
the links that name its api see it. A response likewise (`_response_fields`, then
`responded`), and the line is written last, with what the links added.
proxy/features.py builds the hooks and their links (one a feature) from the config.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar

from codec import (
    ApiKey,
    DecodeError,
    HeaderPolicy,
    Response,
    UnknownApiError,
    decode_request,
    decode_response,
    encode_response,
)
from codec.error_codes import UNSUPPORTED_VERSION, error_name
from codec.schema import api_names
from codec.skim import skim_response
from codec.stream import StreamLimits, as_request, as_response, request_stream, response_stream
from proxy.hooks import ConnectionInfo, Hooks, Pending, SteadyParts
from proxy.metrics import Metrics
from proxy.observe.api_versions import (
    API_VERSIONS,
    cap_api_versions,
    refused_version,
    unreadable_version_body,
)
from proxy.observe.chain import Answer, ConnState, Notice, Observer, Token
from proxy.observe.identity import GET_TELEMETRY_SUBSCRIPTIONS, PUSH_TELEMETRY, Identity
from proxy.observe.instance_join import InstanceJoins
from proxy.observe.joining import Joining
from proxy.observe.memo import (
    API_VERSIONS_ENTRIES,
    CapEntry,
    FrameMemo,
    RequestEntry,
    ResponseEntry,
    request_key,
    response_key,
    version_key,
)
from proxy.observe.request_line import (
    CLASH,
    UNKNOWN,
    answer_json,
    api_head,
    composable,
    compose,
    connection_fields,
    connection_head,
    identity_fragment,
    request_line,
    request_pieces,
    response_pieces,
)
from proxy.observe.request_log import LineSink, RequestLog
from proxy.observe.streamed import Streamed, note_dropped
from proxy.observe.summary import (
    FULL_DECODE_RESPONSES,
    SummaryOptions,
    TopicIds,
    request_fields,
    response_fields,
    skimmed_response_fields,
)

# Why a connection closed when the broker closed it (proxy/forward/connection.py).
BROKER_CLOSED = frozenset({"upstream_eof", "upstream_error"})
# Apis whose frames are never memoised: their summary depends on more than their bytes
# (Produce and Fetch name topics learnt from Metadata, SyncGroup a generation's
# protocol), they rarely repeat (offsets), or they carry credentials (SASL, delegation
# token HMACs) or telemetry payloads, which must not linger in memory as memo keys.
UNMEMOISED = frozenset(map(int, {
    ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.SYNC_GROUP, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE,
    ApiKey.CREATE_DELEGATION_TOKEN, ApiKey.RENEW_DELEGATION_TOKEN, ApiKey.EXPIRE_DELEGATION_TOKEN,
    ApiKey.DESCRIBE_DELEGATION_TOKEN, ApiKey.PUSH_TELEMETRY,
}))
KIP714_APIS = frozenset({GET_TELEMETRY_SUBSCRIPTIONS, PUSH_TELEMETRY})
# Memoised requests a connection remembers as quiet (ConnState.quiet) before forgetting
# them all: a client repeats a handful.
MAX_QUIET = 64
_NO_LINKS: tuple[Observer, ...] = ()
L = TypeVar("L", bound=Observer)


def _by_api(links: tuple[Observer, ...], apis: Callable[[Observer], frozenset[int]]) -> dict[int, tuple[Observer, ...]]:
    """Each api key's links, in the chain's order."""
    table: dict[int, tuple[Observer, ...]] = {}
    for link in links:
        for api_key in apis(link):
            table[api_key] = (*table.get(api_key, ()), link)
    return table


class ObservingHooks(Hooks):
    # latencies against Pending.started, durations against ConnectionInfo.opened_at
    # (`kafkalens decode` sets both to the capture's time)
    clock = staticmethod(time.perf_counter)
    wall_clock = staticmethod(time.time)

    def __init__(
        self,
        metrics: Metrics,
        request_log: RequestLog | None,
        summary: SummaryOptions,
        policy: HeaderPolicy,
        stream_limits: StreamLimits | None = None,
        *,
        links: tuple[Observer, ...] = (),
        topic_ids: TopicIds | None = None,
        joins: InstanceJoins | None = None,
    ) -> None:
        """`links`: the observers' chain, in order (proxy/features.py composes it),
        built with the same `topic_ids`."""
        self.metrics = metrics
        self.log = request_log
        self.summary = summary
        self.policy = policy
        self.links = links
        # Links that see every request: checked as it is read (KIP-1313's log), or held
        # and admitted before it is forwarded (KIP-1313's reject)
        self._checkers = tuple(link for link in links if link.checks_requests)
        self._admitters = tuple(link for link in links if link.inspects_requests)
        self.inspects_requests = bool(self._admitters)
        self._keeping = tuple(link for link in links if type(link).new_state is not Observer.new_state)
        self._closing = tuple(
            link for link in links if type(link).connection_closed is not Observer.connection_closed
        )
        self.topic_ids = topic_ids if topic_ids is not None else TopicIds()
        self.states: dict[str, ConnState] = {}  # the open connections' (the joins look others up)
        self.joining = Joining(joins if joins is not None else InstanceJoins(max_keys=4000), self.states)
        self._request_links = _by_api(links, lambda link: link.request_apis)
        self._response_links = _by_api(links, lambda link: link.response_apis)
        self._answer_links = _by_api(links, lambda link: link.answer_apis)
        self._stats_apis = frozenset(api for link in links for api in link.partition_stats_apis)
        # Apis whose links all read them without changing a request's fields (chain.py)
        self._steady_links = frozenset(
            k for k, found in self._request_links.items() if all(k in link.steady_apis for link in found)
        )
        self._identity_links = tuple(
            link for link in links if type(link).identity_changed is not Observer.identity_changed
        )
        # Held for admit_request: ApiVersions (a version the codec cannot read is answered
        # here, see _unreadable_api_versions) and the requests a link may answer (who
        # answers them is known once the broker's ApiVersions was seen); not every request.
        self.admit_api_keys = frozenset({API_VERSIONS, *self._answer_links})
        self.added_api_versions = tuple(added for link in links for added in link.added_api_versions)
        self.rewrite_api_keys = frozenset({API_VERSIONS})
        self._names = api_names()
        # memo.RequestEntry, memo.ResponseEntry (skimmed answers), memo.CapEntry
        self.request_memo = FrameMemo()
        self.response_memo = FrameMemo()
        self.api_versions_memo = FrameMemo(API_VERSIONS_ENTRIES)
        # False: every line rendered from its dict (request_line.py), as a line that is not
        # the usual one is; the tests compare the two ways
        self.prerendered = True
        # An ApiVersions answer's line fields are its cap's (memo.CapEntry), unless a link
        # reads these answers
        self._plain_api_versions = API_VERSIONS not in self._response_links
        self.stream_limits = stream_limits or StreamLimits(
            decompression_limit=summary.decompression_limit
        )
        # The ApiVersions ranges a broker gave last, on any connection: what a connection
        # that never asked (a client pinned to its versions) is judged by.
        self.broker_ranges: dict[int, tuple[int, int]] | None = None

    def steady_parts(self) -> SteadyParts | None:
        """What the C path (proxy/steady.py) takes in these hooks' place: a memoised
        request quiet on its connection, whose api no link reads and that is not held
        for admit_request (but an ApiVersions no link answers), and its memoised skimmed
        (or ApiVersions) answer; lines rendered from pieces, with this clock."""
        counters = self.metrics.steady_counters
        if counters is None or type(self).clock is not ObservingHooks.clock or not self.prerendered:
            return None
        if self.inspects_requests:
            return None
        keys = frozenset(self._names)
        answered_here = frozenset(self._answer_links)
        held = self.admit_api_keys - ({API_VERSIONS} - answered_here)
        linked = self._steady_links
        requests = frozenset(
            k for k in keys if k not in UNMEMOISED and k not in held and (k not in self._request_links or k in linked)
        )
        responses = frozenset(
            k for k in keys
            if k not in UNMEMOISED and (k not in FULL_DECODE_RESPONSES or k == API_VERSIONS)
        )  # fmt: skip
        log = self.log
        always: frozenset[int] = frozenset()
        never = keys
        if log is not None:
            wants = {k: log.always(self._names[k], k) for k in keys}
            always = frozenset(k for k, w in wants.items() if w)
            never = frozenset(k for k, w in wants.items() if w is False)
        sink = log.sink if log is not None else None
        if sink is not None and type(sink) is not LineSink:
            return None
        return SteadyParts(
            request_entry=RequestEntry, response_entry=ResponseEntry, cap_entry=CapEntry, state=ConnState,
            request_memo=self.request_memo._entries, response_memo=self.response_memo._entries,
            cap_memo=self.api_versions_memo._entries, sink=sink, sink_type=LineSink, clash=CLASH,
            request_apis=requests, response_apis=responses, log_always=always, log_never=never,
            api_versions_plain=self._plain_api_versions, state_of=lambda info: self.states.get(info.conn_id),
            hooks=self, counters=counters, token=Token, link_apis=linked & requests,
            request_links={k: links for k, links in self._request_links.items() if k in linked & requests},
            link_answer=self.responded,
            render_fields=answer_json,
            observed_request_apis=keys - self.admit_api_keys,
            observed_response_apis=keys - self.rewrite_api_keys,
        )  # fmt: skip

    def link(self, kind: type[L]) -> L | None:
        """The chain's first link of `kind`, if it has one."""
        for link in self.links:
            if isinstance(link, kind):
                return link
        return None

    def api_name(self, api_key: int) -> str:
        return self._names.get(api_key, UNKNOWN)

    # -- connections ---------------------------------------------------------

    def connection_opened(self, info: ConnectionInfo) -> None:
        state = ConnState(Identity(max_string_length=self.summary.max_string_length), info)
        state.line_head = connection_head(info)
        for link in self._keeping:
            state.kept[link] = link.new_state()
        self.states[info.conn_id] = state
        self.refresh_identity(info, state)
        if self.log:
            self.log.write("connection_open", connection_fields(info, state))

    def connection_closed(self, info: ConnectionInfo, reason: str) -> None:
        state = self.states.pop(info.conn_id, None)
        if state is None:
            return
        self.joining.stop_waiting(info, state)
        for link in self._closing:
            link.connection_closed(info, state)
        if self.log:
            fields = connection_fields(info, state)
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
        state = self.states.get(info.conn_id)
        extra: dict[str, Any] = {"reason": reason}
        if reason in BROKER_CLOSED:
            self._refused(state, pending, token, extra)
        if self.log and self.log.wants(token.api, pending.api_key, True):
            latency = self.clock() - pending.started
            extra.update(latency_ms=round(latency * 1000, 3), response_bytes=None)
            line = request_line(info, pending, token, state, extra)
            self.log.write("request_incomplete", line)

    def _refused(self, state: ConnState | None, pending: Pending, token: Token, extra: dict[str, Any]) -> None:
        """The broker closed with this request pending: if the request's version is one
        the broker's ApiVersions answer does not cover (or Kafka 4's Produce v0-2), that
        was its refusal, as Kafka answers a request version it no longer supports (KIP-896):
        UNSUPPORTED_VERSION, counted and logged as an error of the request."""
        ranges = state.broker_ranges if state is not None and state.broker_ranges else self.broker_ranges
        if not refused_version(ranges, pending.api_key, pending.api_version):
            return
        assert ranges is not None
        error = error_name(UNSUPPORTED_VERSION)
        self.metrics.api(token.api).error(error)
        if state is not None:
            state.errors[error] = state.errors.get(error, 0) + 1
        listed = ranges.get(pending.api_key)
        extra.update(errors=[error], broker_versions=None if listed is None else list(listed))

    # -- requests ------------------------------------------------------------

    def admit_request(
        self, info: ConnectionInfo, frame: memoryview, api_key: int, api_version: int, correlation_id: int
    ) -> bytes | None:
        if api_key == API_VERSIONS and not self.policy.knows(api_key, api_version):
            return self._unreadable_api_versions(info, frame, api_version, correlation_id)
        state = self.states.get(info.conn_id)
        if state is None or not self.policy.knows(api_key, api_version):
            return None
        if self._admitters:
            state.quiet.clear()  # what observing a request does may depend on what they note
        for admitter in self._admitters:
            refusal = admitter.admit(info, state, frame, api_key, api_version, correlation_id)
            if refusal is not None:
                self._warn(refusal.notice)
                return refusal.reply
        for link in self._answer_links.get(api_key, _NO_LINKS):
            if link.answers(state):
                return self._answer(info, state, link, frame, api_key, api_version, correlation_id)
        return None

    def _answer(
        self, info: ConnectionInfo, state: ConnState, link: Observer, frame: memoryview, api_key: int,
        api_version: int, correlation_id: int,
    ) -> bytes | None:
        """A request `link` answers in the broker's place: decoded, observed as any, and
        its line written once the answer is made (or, with `Answer.later`, on the event
        loop's next turn: the answer goes first)."""
        pending = Pending(correlation_id, api_key, api_version, self.clock(), len(frame) + 4)
        try:
            request = decode_request(frame, self.policy)
        except DecodeError:
            return None  # forwarded: what the proxy cannot read, the broker answers
        token = self._started(info, pending)[1]
        if api_key in KIP714_APIS:
            self.joining.unjoin(info, state)  # its own instance id is on its way
        self._decoded(info, state, token, request, _NO_LINKS)
        answer = link.answer(info, state, token, request)
        self.refresh_identity(info, state)
        size = len(answer.reply) + 4
        if answer.later is None:
            self._answered(info, pending, token, answer.fields, size)
        else:
            _later(self._answered_later, info, pending, token, answer, size)
        return answer.reply

    def _answered_later(self, info: ConnectionInfo, pending: Pending, token: Token, answer: Answer, size: int) -> None:
        assert answer.later is not None
        answer.fields.update(answer.later(self.states.get(info.conn_id)))
        self._answered(info, pending, token, answer.fields, size)

    def _answered(self, info: ConnectionInfo, pending: Pending, token: Token, fields: dict[str, Any], size: int) -> None:
        latency = self.clock() - pending.started
        self.metrics.api(token.api).response(latency, size)
        if self.log and self.log.wants(token.api, pending.api_key, bool(fields["errors"])):
            extra: dict[str, Any] = {"latency_ms": round(latency * 1000, 3), "response_bytes": size}
            line = request_line(info, pending, token, self.states.get(info.conn_id), extra)
            line.update(fields)
            self.log.write("request", line)

    def _unreadable_api_versions(
        self, info: ConnectionInfo, frame: memoryview, api_version: int, correlation_id: int
    ) -> bytes:
        """An ApiVersions version newer than the codec's is answered here as KIP-511 has a
        broker answer one it does not know: UNSUPPORTED_VERSION, a v0 body, and the
        ApiVersions range the codec reads; the client asks again within it (Kafka's own
        clients, franz-go and librdkafka do). Forwarded, the broker's answer could be
        neither read nor capped, and the client would go on to use every version the
        broker has, those the codec cannot decode included (franz-go 1.22 sends
        ApiVersions v5, KIP-1242, to Kafka 4.4: its Produce v13 and Fetch v18 then went
        through undecoded, its software name unknown)."""
        pending = Pending(correlation_id, API_VERSIONS, api_version, self.clock(), len(frame) + 4)
        state, token = self._started(info, pending)
        reply = encode_response(
            Response(API_VERSIONS, 0, {"correlation_id": correlation_id}, unreadable_version_body()),
            self.policy,
        )
        error = error_name(UNSUPPORTED_VERSION)
        api_metrics = self.metrics.api(token.api)
        api_metrics.error(error)
        if state is not None:
            state.errors[error] = state.errors.get(error, 0) + 1
        latency = self.clock() - pending.started
        api_metrics.response(latency, len(reply) + 4)
        if self.log and self.log.wants(token.api, API_VERSIONS, True):
            extra: dict[str, Any] = {"latency_ms": round(latency * 1000, 3), "response_bytes": len(reply) + 4}
            line = request_line(info, pending, token, state, extra)
            line.update(answered_by="proxy", errors=[error])
            self.log.write("request", line)
        return reply

    def request_without_response(self, info: ConnectionInfo, frame: memoryview, pending: Pending) -> None:
        self.request_forwarded(info, frame, pending)
        self.unanswered(info, pending, pending.token)

    def request_not_forwarded(self, info: ConnectionInfo, frame: memoryview, pending: Pending) -> None:
        # decoded as a forwarded one is, for its request_incomplete line
        self.request_forwarded(info, frame, pending)

    def unanswered(self, info: ConnectionInfo, pending: Pending, token: Token) -> None:
        """The line of a request that gets no response (Produce with acks=0)."""
        if self.log and self.log.wants(token.api, pending.api_key, False):
            extra: dict[str, Any] = {"latency_ms": None, "response_bytes": None, "errors": []}
            line = request_line(info, pending, token, self.states.get(info.conn_id), extra)
            self.log.write("request_no_response", line)

    def request_forwarded(self, info: ConnectionInfo, frame: memoryview, pending: Pending) -> None:
        """A request decoded (or found in the memo) and observed; its token on `pending`:
        a memo entry, when no link reads its api (memo.RequestEntry)."""
        api_key = pending.api_key
        state = self.states.get(info.conn_id)
        key = None
        if api_key not in UNMEMOISED:
            key = request_key(frame)
            entry = self.request_memo.get(key) if key is not None else None
            if entry is not None:
                self._memoised(info, state, pending, entry)
                return
        api = self._names.get(api_key, UNKNOWN)
        self._count(api, pending, state)
        try:
            # A memoised request must not hold views of the chunk it came in: a copy.
            request = decode_request(frame if key is None else frame.tobytes(), self.policy)
        except UnknownApiError:
            pending.token = token = Token(api, pending.correlation_id, {})
            self.metrics.unknown_request("api_key" if token.api == UNKNOWN else "api_version")
            token.decode_error = "unknown api key or version"
            if state is not None and state.identity.observe_unknown_request(frame):
                self.refresh_identity(info, state)
            return
        except DecodeError as exc:
            pending.token = token = Token(api, pending.correlation_id, {})
            self.decode_failed(state, token.api, "request")
            token.decode_error = str(exc)
            return
        links = self._request_links.get(api_key, _NO_LINKS)
        if key is None or links:
            pending.token = token = Token(api, pending.correlation_id, {})
            self._decoded(info, state, token, request, links)
            if key is not None:
                self.request_memo.put(key, RequestEntry(request, api, token.fields, True))
            return
        # no link reads it: its memo entry is its token from the first
        pending.token = entry = RequestEntry(request, api, {}, False)
        self._decoded(info, state, entry, request, links)
        self.request_memo.put(key, entry)

    def _memoised(self, info: ConnectionInfo, state: ConnState | None, pending: Pending, entry: RequestEntry) -> None:
        """A request the memo knew: counted; observed unless it is quiet here (observing it
        changed nothing last time and nothing changed since); its entry is its token,
        unless a link reads it."""
        api = entry.api
        self._count(api, pending, state)
        if entry.fragment is None:  # rendered when first met again: most frames never are
            entry.head = api_head(pending.api_key, api, pending.api_version)
            entry.fragment, entry.mask, entry.overlap = request_pieces(entry.fields)
        if state is not None and entry not in state.quiet:
            self._identify_memoised(info, state, entry)
        if not entry.linked:
            pending.token = entry
        elif state is not None:
            self.steady_link_request(info, state, pending, entry)
        else:
            pending.token = Token(api, pending.correlation_id, entry.fields)

    def steady_link_request(self, info: ConnectionInfo, state: ConnState, pending: Pending, entry: RequestEntry) -> None:
        """A memoised request that links read: its token (the entry's fields), and the
        links that name its api. (The C path does the same in C, once it forwarded and
        counted such a request: proxy/_steady.c's link_request.)"""
        pending.token = token = Token(entry.api, pending.correlation_id, entry.fields)
        api_key = pending.api_key
        for link in self._request_links.get(api_key, _NO_LINKS):
            link.request(info, state, token, entry.request, None)
        if api_key in self._steady_links:  # its links left its fields as they are
            token.entry = entry

    def _started(self, info: ConnectionInfo, pending: Pending) -> tuple[ConnState | None, Token]:
        """A request seen (streamed past or answered here): counted, its token made."""
        api = self._names.get(pending.api_key, UNKNOWN)
        state = self.states.get(info.conn_id)
        self._count(api, pending, state)
        return state, Token(api, pending.correlation_id, {})

    def _count(self, api: str, pending: Pending, state: ConnState | None) -> None:
        """A request counted: its api's metrics, and its connection's close line."""
        self.metrics.api(api).request(pending.api_version, pending.request_size)
        if state is not None:
            state.requests[api] = state.requests.get(api, 0) + 1

    def _decoded(
        self, info: ConnectionInfo, state: ConnState | None, token: Token | RequestEntry, request: Any,
        links: tuple[Observer, ...],
    ) -> None:
        """A request decoded, however it came: the connection's identity learns from it,
        its line fields are made, then `links` (those naming its api) see it (with a
        chain.Token: a memo entry as token has no links)."""
        protocol_type = None
        if state is not None:
            self._identify(info, state, request)
            protocol_type = state.groups.of_request(request, self.summary.max_string_length)
        stats: dict[tuple[str, int], Any] | None = {} if request.api_key in self._stats_apis else None
        token.fields = request_fields(request, self.summary, self.topic_ids, protocol_type, stats)
        if state is not None:
            for link in links:
                link.request(info, state, token, request, stats)  # type: ignore[arg-type]

    def request_stream(self, info: ConnectionInfo, pending: Pending, expects_response: bool) -> Streamed:
        size = pending.request_size - 4
        try:
            stream = request_stream(pending.api_key, pending.api_version, size, self.policy, self.stream_limits)
        except DecodeError:  # an unknown api or version: said so when the request ends
            stream = None
        return Streamed(self._request_streamed, stream, size, expects_response)

    def _request_streamed(self, info: ConnectionInfo, pending: Pending, streamed: Streamed) -> None:
        """A request decoded as it streamed past: observed as a whole one is."""
        state, token = self._started(info, pending)
        if streamed.stream is None:
            self.metrics.unknown_request("api_key" if token.api == UNKNOWN else "api_version")
            token.decode_error = "unknown api key or version"
        elif streamed.error is not None:
            self.decode_failed(state, token.api, "request")
            token.decode_error = streamed.error
        else:
            request = as_request(pending.api_key, pending.api_version, streamed.stream, self.policy)
            self._decoded(info, state, token, request, self._request_links.get(pending.api_key, _NO_LINKS))
            note_dropped(token.fields, streamed.stream, self.metrics, "request")
        if streamed.expects_response:
            pending.token = token
        else:
            self.unanswered(info, pending, token)

    def response_stream(self, info: ConnectionInfo, pending: Pending, size: int) -> Streamed:
        token = pending.token
        stream = None
        if token is None or token.decode_error is None:
            try:
                stream = response_stream(pending.api_key, pending.api_version, size, self.policy, self.stream_limits)
            except DecodeError:
                stream = None
        return Streamed(self._response_streamed, stream, size)

    def _response_streamed(self, info: ConnectionInfo, pending: Pending, streamed: Streamed) -> None:
        """response_forwarded's line, for a response decoded as it streamed past."""
        latency = self.clock() - pending.started
        token: Token | None = pending.token
        if token is None:
            token = Token(self.api_name(pending.api_key), pending.correlation_id, {})
        state = self.states.get(info.conn_id)
        fields: dict[str, Any] = {"errors": []}
        if token.decode_error is None and streamed.stream is not None:
            if streamed.error is not None:
                self.decode_failed(state, token.api, "response")
                fields["response_decode_error"] = streamed.error
            else:
                response = as_response(pending.api_key, pending.api_version, streamed.stream, self.policy)
                ask = token.ask
                if ask is not None and not ask.whole and ask.picks is not None:
                    token.picked = ask.picks.rows_of(response.body)
                fields = self._response_fields(info, state, pending, token, response)
                note_dropped(fields, streamed.stream, self.metrics, "response")
        self.responded(info, pending, token, state, latency, streamed.size + 4, fields)

    # -- identity and KIP-1313 ---------------------------------------------------

    def _identify(self, info: ConnectionInfo, state: ConnState, request: Any) -> bool:
        """The connection's identity learns from a request; False if it broke KIP-1313's
        rules (a violation reported)."""
        identity = state.identity
        quiet = True
        if request.header_version >= 3 and identity.header_id is None:
            identity.note_header_id(request.header.get("client_instance_id"))
        if identity.observe_request(request) and info.metrics is not None:
            info.metrics.identify(
                identity.client_software_name or UNKNOWN, identity.client_software_version or UNKNOWN
            )
        for checker in self._checkers:
            notice = checker.check(info, state, request)
            if notice is not None:
                quiet = False
                self._warn(notice)
        self.refresh_identity(info, state)
        return quiet

    def _identify_memoised(self, info: ConnectionInfo, state: ConnState, entry: RequestEntry) -> None:
        """`_identify`, for a memoised request: quiet on the connection from now on if that
        changed nothing and reported nothing (observing it again would not either); any
        change forgets what was quiet."""
        before = self._quiet_key(state)
        reported = not self._identify(info, state, entry.request)
        if before is None or before != self._quiet_key(state):
            state.quiet.clear()
        elif not reported:
            quiet = state.quiet
            if len(quiet) >= MAX_QUIET:
                quiet.clear()
            quiet.add(entry)

    def _quiet_key(self, state: ConnState) -> tuple[Any, ...] | None:
        """What observing a memoised request depends on besides its bytes: the identity,
        and what each link that checks every request keeps for its `check`
        (`Observer.check_key`). None: a checker cannot say, nothing is ever quiet."""
        keys = []
        for checker in self._checkers:
            key = checker.check_key(state)
            if key is None:
                return None
            keys.append(key)
        return (state.identity_key, state.identity.header_id, *keys)

    def refresh_identity(self, info: ConnectionInfo, state: ConnState) -> None:
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
        for link in self._identity_links:
            link.identity_changed(info, state)
        if identity.client_instance_id and not state.instance_reported and info.metrics is not None:
            state.instance_reported = True
            info.metrics.client_instance(identity.client_instance_id)
        for taken in self.joining.update(info, state):  # an instance id joined: theirs changed
            if taken.info is not None:
                self.refresh_identity(taken.info, taken)
        info.identity = identity.as_json()
        state.log_fields = identity.log_fields()
        state.identity_fragment = identity_fragment(state.log_fields)
        state.quiet.clear()

    def sasl_token(self, info: ConnectionInfo, token: memoryview) -> None:
        # A raw token after SaslHandshake v0: the principal, as SaslAuthenticate gives it.
        state = self.states.get(info.conn_id)
        if state is not None and state.identity.principal is None:
            state.identity.observe_sasl_token(token)
            self.refresh_identity(info, state)

    def _warn(self, notice: Notice) -> None:
        """A link's warning line."""
        if self.log:
            self.log.warning(notice.event, notice.fields)

    def decode_failed(self, state: ConnState | None, api: str, direction: str) -> None:
        self.metrics.api(api).decode_error(direction)
        if state is not None:
            state.decode_errors += 1

    def reopen_logs(self) -> None:
        if self.log:
            self.log.reopen()
        for link in self.links:
            link.reopen_logs()

    def close(self) -> None:
        if self.log:
            self.log.close()
        for link in self.links:
            link.close()

    # -- responses -----------------------------------------------------------

    def rewrite_response(self, info: ConnectionInfo, frame: memoryview, pending: Pending) -> bytes | None:
        if pending.api_key != API_VERSIONS:
            return None
        cap = self._capped(frame, pending.api_version)
        if cap is None:
            return None
        if cap.ranges:
            self.broker_ranges = cap.ranges
            state = self.states.get(info.conn_id)
            if state is not None:
                state.broker_ranges = cap.ranges
        pending.rewritten = cap  # the answer decoded, for response_forwarded
        # the correlation id is the frame's own; the rest is the memoised rewrite
        return None if cap.tail is None else frame[:4].tobytes() + cap.tail

    def _capped(self, frame: memoryview, version: int) -> CapEntry | None:
        """The ApiVersions cap (and, collect mode, KIP-714's apis added); a broker answers
        every connection the same, with the broker's own ranges (not capped; empty for an
        error answer). None: not readable."""
        memo = self.api_versions_memo
        key = version_key(version, frame)
        cap = memo.get(key) if key is not None else None
        if cap is None:
            ranges: dict[int, tuple[int, int]] = {}
            new_frame, decoded = cap_api_versions(frame, version, self.policy, self.added_api_versions, ranges)
            if decoded is None:
                return None
            cap = CapEntry(None if new_frame is None else new_frame[4:], decoded, ranges)
            if key is not None:
                memo.put(key, cap)
        return cap

    def response_forwarded(self, info: ConnectionInfo, frame: memoryview, pending: Pending) -> None:
        latency = self.clock() - pending.started
        token: Any = pending.token
        if token is None:  # the request hook did not run (e.g. an answer the proxy made)
            token = Token(self.api_name(pending.api_key), pending.correlation_id, {})
        state = self.states.get(info.conn_id)
        fields: dict[str, Any] = {"errors": []}
        entry: ResponseEntry | CapEntry | None = None
        if token.decode_error is None:
            fields, entry = self._answer_fields(info, state, frame, pending, token)
        self.responded(info, pending, token, state, latency, len(frame) + 4, fields, entry)

    def _answer_fields(
        self, info: ConnectionInfo, state: ConnState | None, frame: memoryview, pending: Pending, token: Any
    ) -> tuple[dict[str, Any], ResponseEntry | CapEntry | None]:
        """An answer's line fields, and the memo entry they are of (if any). An answer a
        link's ask reads whole (Fetch, share groups, heartbeats) is decoded whole; others
        are skimmed (an OffsetCommit's too), the fields an ask picks read in the skim (a
        Produce's base offsets); an ApiVersions answer was decoded when capped."""
        api_key, version, ask = pending.api_key, pending.api_version, token.ask
        if api_key == API_VERSIONS and len(frame) >= 6 and frame[4:6] == b"\x00\x23":
            version = 0  # KIP-511: an UNSUPPORTED_VERSION answer always has a v0 body
        cap = pending.rewritten
        response = None
        try:
            if cap is not None:
                if ask is None and self._plain_api_versions:
                    entry = self._cap_fields(cap)
                    return entry.fields, entry  # type: ignore[return-value]
                response = cap.response
            elif api_key not in FULL_DECODE_RESPONSES and (ask is None or not ask.whole):
                if ask is not None and ask.picks is not None:  # a few fields of it read in the skim
                    _, found, token.picked = ask.picks.read(frame, api_key, version, self.policy)
                    return skimmed_response_fields(api_key, found, self.topic_ids), None
                skimmed = self._skimmed(frame, api_key, version)
                if isinstance(skimmed, ResponseEntry):
                    return skimmed.fields, skimmed
                return skimmed, None
            else:
                response = decode_response(frame, api_key, version, self.policy)
        except DecodeError as exc:
            self.decode_failed(state, token.api, "response")
            return {"errors": [], "response_decode_error": str(exc)}, None
        return self._response_fields(info, state, pending, token, response), None

    def _cap_fields(self, cap: CapEntry) -> CapEntry:
        """An ApiVersions answer's line fields, made once per cap: no link reads these
        answers, and what the identity and groups learn from a response is not in them."""
        if cap.fields is None:
            cap.fields = response_fields(cap.response, self.summary, self.topic_ids, None)
            cap.errors = bool(cap.fields["errors"])
        elif cap.fragment is None:  # rendered when first met again
            cap.fragment, cap.mask = response_pieces(cap.fields)
        return cap

    def responded(
        self, info: ConnectionInfo, pending: Pending, token: Any, state: ConnState | None,
        latency: float, size: int, fields: dict[str, Any], entry: ResponseEntry | CapEntry | None = None,
        read: bool = False,
    ) -> None:
        """A response observed, whole or streamed: read by the link that asked (unless
        `read`: the C path has had it read), counted, its errors too, and logged.
        `entry`: the memo's, whose fields are `fields`: with a memo entry as token, the
        line is put together from what both rendered (request_line.compose)."""
        ask = token.ask
        if ask is not None and not ask.whole and not read:  # read from the skimmed answer (an OffsetCommit's)
            fields = token.asked_by.answered(info, state, token, None, fields)
            entry = None
        api_metrics = self.metrics.api(token.api)
        api_metrics.response(latency, size)
        errors = fields["errors"]
        if errors:
            for error in errors:
                api_metrics.error(error)
                if state is not None:
                    state.errors[error] = state.errors.get(error, 0) + 1
        log = self.log
        if log and log.wants(token.api, pending.api_key, bool(errors)):
            latency_ms = round(latency * 1000, 3)
            # a memoised request's (its entry, or the entry of a link's token)
            made = token if token.__class__ is RequestEntry else token.entry
            if made is not None and made.fragment is not None and state is not None and self.prerendered:
                if entry is not None and entry.fragment is not None:
                    piece, mask = entry.fragment, entry.mask
                else:  # a link's fields (an OffsetCommit's `committed`), or not memoised
                    piece, mask = response_pieces(fields)
                if composable(state, made.mask, made.overlap, mask):
                    log.write_line(compose(state, made.head, pending, made.fragment, latency_ms, size, piece, log.stamp()))
                    return
            extra: dict[str, Any] = {"latency_ms": latency_ms, "response_bytes": size}
            line = request_line(info, pending, token, state, extra)
            line.update(fields)
            log.write("request", line)

    def _response_fields(
        self, info: ConnectionInfo, state: ConnState | None, pending: Pending, token: Token, response: Response
    ) -> dict[str, Any]:
        """A response decoded whole, however it came: its links see it, the connection's
        identity learns from it, then its line fields (a link's, for an ask it set)."""
        if state is not None:
            api_key = pending.api_key
            if api_key == GET_TELEMETRY_SUBSCRIPTIONS:  # its own instance id comes: a joined one goes
                self.joining.unjoin(info, state)
            for link in self._response_links.get(api_key, _NO_LINKS):
                notice = link.response(info, state, pending, response)
                if notice is not None:
                    self._warn(notice)
            state.identity.observe_response(response)
            state.groups.learn(token.fields, response)
            self.refresh_identity(info, state)
        ask = token.ask
        if ask is not None and ask.whole:
            return token.asked_by.answered(info, state, token, response, None)  # type: ignore[union-attr]
        return response_fields(response, self.summary, self.topic_ids, token.fields.get("protocol_type"))

    def _skimmed(self, frame: memoryview, api_key: int, version: int) -> ResponseEntry | dict[str, Any]:
        """A skimmed answer's line fields: an entry once the memo met them again, else a
        dict (memoised as such the first time: most answers never come again)."""
        memo = self.response_memo
        key = None if api_key in UNMEMOISED else response_key(api_key, version, frame)
        if key is not None:
            known = memo.get(key)
            if known is not None:
                if known.__class__ is ResponseEntry:
                    return known
                entry = ResponseEntry(known)  # rendered now that it came again
                entry.fragment, entry.mask = response_pieces(known)
                memo.put(key, entry)
                return entry
        _, found = skim_response(frame, api_key, version, self.policy)
        fields = skimmed_response_fields(api_key, found, self.topic_ids)
        if key is not None:
            memo.put(key, fields)
        return fields


def _later(call: Callable[..., None], *args: Any) -> None:
    """On the loop's next turn (what forwarding has ready goes first), else now."""
    try:
        asyncio.get_running_loop().call_soon(call, *args)
    except RuntimeError:
        call(*args)
