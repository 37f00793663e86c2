"""The Kafka side of one connection: requests in flight, SASL phases, hook calls.

`RequestSide` and `ResponseSide` are the `FrameHandler`s of the two `FrameSplitter`s
of a connection. They share one `Exchange`, which holds the requests awaiting a
response in the order they were sent: Kafka answers a connection's requests in
order, so the response normally matches the oldest entry.

Hooks that look at a frame after it went on are queued while a chunk is split and
run once the chunk has been written (`chunk_done`), so decoding never delays bytes.

A frame the hooks read that spans reads is assembled only up to the splitter's
`keep_limit` (limits.observe_whole_frame_bytes); past it the splitter asks
`observe_instead`, and the frame's pieces go to the hooks' `FrameObserver` as they pass
(STREAM_OBSERVE): no byte already forwarded is kept for it, the memory a frame costs
is its metadata, not its size. A frame inside one read is handed over whole as ever.
"""

from __future__ import annotations

import struct
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from codec import ApiKey
from codec.errors import DecodeError
from codec.peek import produce_acks
from proxy.forward import sasl
from proxy.forward.framing import (
    HEAD_CAP,
    HOLD,
    NEED_MORE,
    PAUSE,
    STOP,
    STREAM,
    STREAM_KEEP,
    STREAM_OBSERVE,
    Buffer,
    FrameSplitter,
)
from proxy.hooks import ConnectionInfo, FrameObserver, HookPlan, Hooks, Pending

if TYPE_CHECKING:
    from proxy.metrics import Metrics

log = structlog.get_logger("kafkalens.proxy")

# Plain ints named by ApiKey, here and in the observing modules: an int compared with
# an IntEnum member misses CPython 3.11's int fast path. With the members themselves as
# these constants, a proxied ApiVersions round trip took 449 instructions more
# (bench.front_instructions, callgrind: 155,052 against 154,603).
PRODUCE = int(ApiKey.PRODUCE)
REQUEST_MIN_HEAD = 8  # api key, api version, correlation id
RESPONSE_MIN_HEAD = 6  # correlation id + the error code of a SaslHandshake v0 response
_REQUEST_HEADER = struct.Struct(">hhi")
_INT32 = struct.Struct(">i")
# A broken hook must not flood the log: the first few failures in the process are
# logged with their traceback, then one in every _HOOK_ERROR_LOG_EVERY.
_LOGGED_HOOK_ERRORS = 20
_HOOK_ERROR_LOG_EVERY = 1000
_hook_errors = 0

AfterHook = Callable[[ConnectionInfo, memoryview, Pending], None]
_NO_BYTES = memoryview(b"")


class Exchange:
    """State both directions of one connection share."""

    def __init__(
        self,
        info: ConnectionInfo,
        hooks: Hooks,
        plan: HookPlan,
        metrics: Metrics,
        max_frame_before_auth: int,
        send_to_client: Callable[[list[Buffer]], object],
        close: Callable[[str], None],
        stop_reading_client: Callable[[], None],
    ) -> None:
        self.info = info
        self.hooks = hooks
        self.plan = plan
        self.metrics = metrics
        self.max_frame_before_auth = max_frame_before_auth
        self.send_to_client = send_to_client
        self.close = close
        self.stop_reading_client = stop_reading_client
        self.pending: deque[Pending] = deque()
        self.before_auth = True
        self.raw_sasl: sasl.RawSaslPhase | None = None
        self.raw_replies_due = 0
        self.handshake_mechanism: str | None = None
        self.draining = False
        self.hook_errors = 0
        self.responses: ResponseSide | None = None
        # Requests awaiting a response at which the next one waits (the connection sets
        # both from limits.max_in_flight_requests: it pauses reading from the client).
        self.max_in_flight = 2**31
        self.in_flight_full: Callable[[], None] = _no_pause

    def hook_failed(self, hook: str, api_key: int, direction: str) -> None:
        """A hook raised: count it as a decode error and go on forwarding."""
        global _hook_errors
        _hook_errors += 1
        self.hook_errors += 1
        try:
            name = self.hooks.api_name(api_key)
        except Exception:
            name = "unknown"
        self.metrics.api(name).decode_error(direction)
        if _hook_errors <= _LOGGED_HOOK_ERRORS or _hook_errors % _HOOK_ERROR_LOG_EVERY == 0:
            log.exception(
                "hook failed",
                hook=hook,
                api_key=api_key,
                conn=self.info.conn_id,
                failures_so_far=_hook_errors,
            )

    def run_hooks(
        self, queued: list[tuple[AfterHook, memoryview, Pending]], direction: str
    ) -> None:
        info = self.info
        for hook, frame, pending in queued:
            try:
                hook(info, frame, pending)
            except Exception:
                self.hook_failed(hook.__name__, pending.api_key, direction)

    def never_forwarded(self, data: bytes, arrived: float, limit: int) -> list[int]:
        """`data`, from a frame's start, was received from the client and not forwarded,
        and the connection is closing: its first `limit` whole requests are pending too,
        for the close to report them incomplete (a client that sent a request knows of
        it; the request log must too). Returns the api keys of the others. A cut last
        frame is no request."""
        pos, end = 0, len(data)
        others: list[int] = []
        while end - pos >= 4:
            (size,) = _INT32.unpack_from(data, pos)
            if size < 0 or end - pos - 4 < size:
                break
            if size >= REQUEST_MIN_HEAD:
                api_key, api_version, corr = _REQUEST_HEADER.unpack_from(data, pos + 4)
                if limit <= 0:
                    others.append(api_key)
                    pos += 4 + size
                    continue
                limit -= 1
                self.info.requests += 1
                pending = Pending(corr, api_key, api_version, arrived, size + 4)
                self.pending.append(pending)
                try:
                    self.hooks.request_not_forwarded(
                        self.info, memoryview(data)[pos + 4 : pos + 4 + size], pending
                    )
                except Exception:
                    self.hook_failed("request_not_forwarded", api_key, "request")
            pos += 4 + size
        return others

    def answer_in_order(self, pending: Pending) -> None:
        """Send a reply the proxy made itself now, if nothing is ahead of it."""
        responses = self.responses
        if self.pending and self.pending[0] is pending and responses and responses.idle():
            self.pending.popleft()
            self.info.responses += 1
            self.send_to_client(reply_frame(pending.reply or b""))


def _no_pause() -> None:
    pass


def reply_frame(body: bytes) -> list[Buffer]:
    return [_INT32.pack(len(body)), body]


class _Side:
    """What both directions share: the frame being split, its streaming observer, and
    the hook calls queued until the chunk in hand went on."""

    def __init__(self, ex: Exchange) -> None:
        self.ex = ex
        self._current: Pending | None = None
        self._observer: FrameObserver | None = None  # of the frame being split, if streamed
        self._after: list[tuple[AfterHook, memoryview, Pending]] = []

    def frame_piece(self, piece: memoryview, last: bool) -> None:
        observer, pending = self._observer, self._current
        assert observer is not None and pending is not None
        self._after.append((observer.piece, piece, pending))
        if last:
            self._observer = None
            self._after.append((observer.done, _NO_BYTES, pending))


class RequestSide(_Side):
    """Client to broker: record what each request needs, ask the hooks that hold."""

    def __init__(self, ex: Exchange) -> None:
        super().__init__(ex)
        self.inject: list[Buffer] = []  # never used on this side
        self._unanswered = False
        self._raw_token_kept = False  # the frame being split is a raw SASL token, assembled

    def frame_started(self, head: memoryview, size: int) -> int:
        ex = self.ex
        if ex.draining:
            ex.stop_reading_client()
            return STOP
        if ex.raw_sasl is not None:
            mode = self._raw_token(head, size)
            if mode is not None:
                return mode
        if size < REQUEST_MIN_HEAD:
            return STREAM  # not a request header: forward untouched, nothing to match
        api_key, api_version, corr = _REQUEST_HEADER.unpack_from(head, 0)
        acks = -1
        if api_key == PRODUCE:
            try:
                acks = produce_acks(head, api_version)
            except DecodeError:
                if len(head) < size and len(head) < HEAD_CAP:
                    return NEED_MORE
        # (`ex.pending and`: with none in flight, as for a client that waits for each
        # answer, the bound costs one truth test)
        if ex.pending and acks != 0 and len(ex.pending) >= ex.max_in_flight:
            ex.in_flight_full()
            return PAUSE
        if ex.before_auth:
            if api_key not in sasl.AUTH_APIS:
                ex.before_auth = False
            elif size > ex.max_frame_before_auth:
                return self._refuse(size)
        ex.info.requests += 1
        pending = Pending(corr, api_key, api_version, time.perf_counter(), size + 4)
        self._current = pending
        if acks == 0:
            return self._without_response()
        self._unanswered = False
        ex.pending.append(pending)
        plan = ex.plan
        if plan.hold_requests or api_key in plan.admit_api_keys:
            return HOLD
        if plan.keep_requests or (api_key == sasl.SASL_HANDSHAKE and api_version == 0):
            return STREAM_KEEP
        return STREAM

    def observe_instead(self, size: int) -> int:
        """A request to keep spans reads and is over the keep limit: its pieces go to the
        hooks' observer as they pass instead (SASL frames, bounded by the before-auth
        limit, are still kept: their hooks need them whole)."""
        pending = self._current
        if self._raw_token_kept or pending is None or pending.api_key == sasl.SASL_HANDSHAKE:
            return STREAM_KEEP
        ex = self.ex
        ex.metrics.frame_observed_in_pieces("request", size)
        self._observer = ex.hooks.request_stream(ex.info, pending, not self._unanswered)
        return STREAM if self._observer is None else STREAM_OBSERVE

    def _refuse(self, size: int) -> int:
        log.warning(
            "frame over the before-auth limit",
            conn=self.ex.info.conn_id,
            size=size,
            limit=self.ex.max_frame_before_auth,
        )
        self.ex.close("frame_too_large")
        return STOP

    def _without_response(self) -> int:
        """Produce acks=0: the broker sends nothing back, so nothing is queued."""
        self.ex.info.requests_without_response += 1
        self._unanswered = True
        plan = self.ex.plan
        if plan.hold_requests:
            return HOLD
        return STREAM_KEEP if plan.keep_unanswered else STREAM

    def _raw_token(self, head: memoryview, size: int) -> int | None:
        """A frame while raw SASL tokens flow; None once it is a request again."""
        ex = self.ex
        phase = ex.raw_sasl
        assert phase is not None
        if phase.tokens_left is None and len(head) < min(size, sasl.MIN_PLAUSIBLE_HEAD):
            return NEED_MORE
        counted = phase.next_frame(head, size)
        if counted is None:
            ex.raw_sasl = None
            ex.raw_replies_due = 0
            return None
        if counted:
            ex.raw_replies_due += 1
            if phase.over:
                ex.raw_sasl = None
        if size > ex.max_frame_before_auth:
            return self._refuse(size)
        if ex.plan.keep_sasl_tokens:
            self._raw_token_kept = True
            return STREAM_KEEP
        return STREAM

    def frame_completed(self, body: memoryview | None) -> None:
        if self._raw_token_kept:
            self._raw_token_kept = False
            assert body is not None
            # A Pending only so that a failing hook is counted against SaslHandshake.
            token = Pending(-1, sasl.SASL_HANDSHAKE, 0, time.perf_counter(), len(body) + 4)
            self._after.append((self.sasl_token, body, token))
            return
        pending = self._current
        assert pending is not None and body is not None
        if self._unanswered:
            self._after.append((self.ex.hooks.request_without_response, body, pending))
            return
        if pending.api_key == sasl.SASL_HANDSHAKE and pending.api_version == 0:
            self.ex.handshake_mechanism = sasl.handshake_mechanism(body)
        if self.ex.plan.keep_requests:
            self._after.append((self.ex.hooks.request_forwarded, body, pending))

    def sasl_token(self, info: ConnectionInfo, token: memoryview, _: Pending) -> None:
        self.ex.hooks.sasl_token(info, token)

    def frame_held(self, body: memoryview, raw: list[Buffer]) -> list[Buffer]:
        """Ask admit_request; forward, or answer in the broker's place."""
        ex = self.ex
        pending = self._current
        assert pending is not None
        try:
            reply = ex.hooks.admit_request(
                ex.info, body, pending.api_key, pending.api_version, pending.correlation_id
            )
        except Exception:
            ex.hook_failed("admit_request", pending.api_key, "request")
            reply = None
        if reply is not None:
            return self._answer_instead(pending, reply)
        self.frame_completed(body)
        return raw

    def _answer_instead(self, pending: Pending, reply: bytes) -> list[Buffer]:
        ex = self.ex
        if self._unanswered or not reply:
            # Nothing to answer with (acks=0 expects no response; an empty reply means the
            # API has no error code to carry it): Kafka closes the connection, so do we.
            ex.close("rejected")
            return []
        pending.reply = bytes(reply)
        ex.answer_in_order(pending)
        return []

    def frame_too_large(self, size: int) -> None:
        log.warning("client frame too large", conn=self.ex.info.conn_id, size=size)
        self.ex.close("frame_too_large")

    def chunk_done(self) -> None:
        if self._after:
            queued, self._after = self._after, []
            self.ex.run_hooks(queued, "request")


class ResponseSide(_Side):
    """Broker to client: match each response with its request, rewrite if asked."""

    def __init__(self, ex: Exchange) -> None:
        super().__init__(ex)
        self.inject: list[Buffer] = []  # replies the proxy made, to send before a frame
        self.splitter: FrameSplitter | None = None
        self.unmatched = 0

    def idle(self) -> bool:
        """At a frame boundary: a reply written now cannot cut into a response."""
        return self.splitter is None or self.splitter.at_boundary

    def frame_started(self, head: memoryview, size: int) -> int:
        ex = self.ex
        if ex.raw_sasl is not None or ex.raw_replies_due:
            if ex.raw_replies_due:
                ex.raw_replies_due -= 1
            return STREAM  # a raw SASL token from the broker
        if size < 4:
            self.unmatched += 1
            return STREAM
        (corr,) = _INT32.unpack_from(head, 0)
        queue = ex.pending
        first = queue[0] if queue else None
        if first is not None and first.correlation_id == corr and first.reply is None:
            pending: Pending | None = queue.popleft()  # the usual answer, without a call
        else:
            pending = self._match(corr)
        if pending is None:
            self.unmatched += 1
            return STREAM
        self._current = pending
        ex.info.responses += 1
        if pending.api_key == sasl.SASL_HANDSHAKE and pending.api_version == 0:
            self._handshake_answered(head)
        if pending.api_key in ex.plan.rewrite_api_keys:
            return HOLD
        return STREAM_KEEP if ex.plan.keep_responses else STREAM

    def observe_instead(self, size: int) -> int:
        """A response to keep spans reads and is over the keep limit: its pieces go to
        the hooks' observer as they pass instead."""
        ex = self.ex
        pending = self._current
        assert pending is not None
        ex.metrics.frame_observed_in_pieces("response", size)
        self._observer = ex.hooks.response_stream(ex.info, pending, size)
        return STREAM if self._observer is None else STREAM_OBSERVE

    def _match(self, corr: int) -> Pending | None:
        """Pop the request `corr` answers; replies the proxy made ahead of it go first."""
        queue = self.ex.pending
        if queue:
            first = queue[0]
            if first.correlation_id == corr and first.reply is None:
                return queue.popleft()
        if not any(p.correlation_id == corr and p.reply is None for p in queue):
            return None
        while True:
            first = queue.popleft()
            if first.reply is not None:
                self.inject.extend(reply_frame(first.reply))
                self.ex.info.responses += 1
            elif first.correlation_id == corr:
                return first
            # else: answered out of order means never answered (e.g. acks we misread)

    def _handshake_answered(self, head: memoryview) -> None:
        if sasl.handshake_succeeded(head):
            self.ex.raw_sasl = sasl.RawSaslPhase(self.ex.handshake_mechanism)

    def frame_completed(self, body: memoryview | None) -> None:
        pending = self._current
        assert pending is not None and body is not None
        self._after.append((self.ex.hooks.response_forwarded, body, pending))

    def frame_held(self, body: memoryview, raw: list[Buffer]) -> list[Buffer]:
        ex = self.ex
        pending = self._current
        assert pending is not None
        try:
            new = ex.hooks.rewrite_response(ex.info, body, pending)
        except Exception:
            ex.hook_failed("rewrite_response", pending.api_key, "response")
            new = None
        sent: list[Buffer] = raw
        if new is not None:
            body = memoryview(bytes(new))
            sent = [_INT32.pack(len(body)), body]
        if ex.plan.keep_responses:
            self._after.append((ex.hooks.response_forwarded, body, pending))
        return sent

    def frame_too_large(self, size: int) -> None:
        log.warning("broker frame too large", conn=self.ex.info.conn_id, size=size)
        self.ex.close("upstream_frame_too_large")

    def chunk_done(self) -> None:
        ex = self.ex
        if self._after:
            queued, self._after = self._after, []
            ex.run_hooks(queued, "response")
        queue = ex.pending
        if queue and queue[0].reply is None or not (queue or ex.draining) or not self.idle():
            return  # the usual case: nothing the proxy must send or close itself
        while queue and queue[0].reply is not None:
            ex.answer_in_order(queue[0])
        if ex.draining and not queue:
            ex.close("shutdown")
