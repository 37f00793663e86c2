"""The two `FrameHandler`s of a connection: what to forward, hold or keep, and which hooks to call.

`RequestSide` and `ResponseSide` handle the frames of the connection's two
`FrameSplitter`s. Each frame's start goes to the connection's sans-I/O Kafka exchange
(proxy/exchange/kafka.py), which pairs responses with requests and follows the SASL
phases; its event says what the frame is, and the plan of the hooks (`HookPlan`) what
must be held (an admit_request or rewrite_response) or assembled for a hook. `Relay`
is what both sides share.

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from proxy.exchange import sasl
from proxy.exchange.kafka import (
    IN_FLIGHT_FULL,
    NEED_MORE,
    NOT_A_REQUEST,
    RAW_SASL,
    REQUEST,
    REQUEST_MIN_HEAD,
    REQUEST_WITHOUT_RESPONSE,
    RESPONSE,
    TOO_LARGE_BEFORE_AUTH,
    Event,
    KafkaExchange,
)
from proxy.forward.framing import (
    HOLD,
    PAUSE,
    STOP,
    STREAM,
    STREAM_KEEP,
    STREAM_OBSERVE,
    Buffer,
    FrameSplitter,
)
from proxy.forward.framing import NEED_MORE as SPLIT_NEED_MORE
from proxy.hooks import ConnectionInfo, FrameObserver, HookPlan, Hooks, Pending

if TYPE_CHECKING:
    from proxy.metrics import Metrics

log = structlog.get_logger("kafkalens.proxy")

_REQUEST_HEADER = struct.Struct(">hhi")
_INT32 = struct.Struct(">i")
# A broken hook must not flood the log: the first few failures in the process are
# logged with their traceback, then one in every _HOOK_ERROR_LOG_EVERY.
_LOGGED_HOOK_ERRORS = 20
_HOOK_ERROR_LOG_EVERY = 1000
_hook_errors = 0

AfterHook = Callable[[ConnectionInfo, memoryview, Pending], None]
_NO_BYTES = memoryview(b"")
perf_counter = time.perf_counter


@dataclass(frozen=True, slots=True)
class ConnectionCalls:
    """What the sides may do to their connection (proxy/forward/connection.py)."""

    send_to_client: Callable[[list[Buffer]], object]  # a reply the proxy made itself
    close: Callable[[str], None]  # with the reason the metrics count
    stop_reading_client: Callable[[], None]  # draining: no new requests
    in_flight_full: Callable[[], None]  # pause reading until a response comes back


class Relay:
    """What both sides of one connection share: its Kafka exchange, the hooks and their
    plan, and what they may do to the connection."""

    def __init__(
        self, kafka: KafkaExchange, hooks: Hooks, plan: HookPlan, metrics: Metrics, calls: ConnectionCalls
    ) -> None:
        self.kafka = kafka
        self.info = kafka.info
        self.hooks = hooks
        self.plan = plan
        self.metrics = metrics
        self.calls = calls
        self.draining = False
        self.hook_errors = 0
        self.request_side = RequestSide(self)
        self.response_side = ResponseSide(self)

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

    def never_forwarded(self, data: bytes, arrived: float, limit: int) -> list[int]:
        """`data`, from a frame's start, was received from the client and not forwarded,
        and the connection is closing: its first `limit` whole requests are pending too,
        for the close to report them incomplete (a client that sent a request knows of
        it; the request log must too). Returns the api keys of the others. A cut last
        frame is no request."""
        pos, end = 0, len(data)
        others: list[int] = []
        view = memoryview(data)
        while end - pos >= 4:
            (size,) = _INT32.unpack_from(data, pos)
            if size < 0 or end - pos - 4 < size:
                break
            body = view[pos + 4 : pos + 4 + size]
            pos += 4 + size
            if size < REQUEST_MIN_HEAD:
                continue
            if limit <= 0:
                others.append(_REQUEST_HEADER.unpack_from(body, 0)[0])
                continue
            limit -= 1
            pending = self.kafka.unforwarded(body, size, arrived)
            assert pending is not None  # a whole frame with a request header
            try:
                self.hooks.request_not_forwarded(self.info, body, pending)
            except Exception:
                self.hook_failed("request_not_forwarded", pending.api_key, "request")
        return others

    def answer_in_order(self) -> None:
        """Send the replies the proxy made itself that nothing is ahead of any more, if
        the response side is at a frame boundary (a reply cannot cut into a response)."""
        if not self.response_side.idle():
            return
        while (request := self.kafka.reply_due()) is not None:
            self.calls.send_to_client(reply_frame(request.reply or b""))


def reply_frame(body: bytes) -> list[Buffer]:
    return [_INT32.pack(len(body)), body]


class _Side:
    """What both directions share: the frame being split, its streaming observer, and
    the hook calls queued until the chunk in hand went on."""

    def __init__(self, relay: Relay) -> None:
        self.relay = relay
        self.kafka = relay.kafka
        self._current: Pending | None = None
        self._observer: FrameObserver | None = None  # of the frame being split, if streamed
        self._after: list[tuple[AfterHook, memoryview, Pending]] = []

    def run_after(self, direction: str) -> None:
        """The hooks queued while the chunk just written was split, now that it went on
        (a hook that raises is counted as a decode error of `direction`)."""
        if self._after:
            queued, self._after = self._after, []
            relay = self.relay
            info = relay.info
            for hook, frame, pending in queued:
                try:
                    hook(info, frame, pending)
                except Exception:
                    relay.hook_failed(hook.__name__, pending.api_key, direction)

    def frame_piece(self, piece: memoryview, last: bool) -> None:
        observer, pending = self._observer, self._current
        assert observer is not None and pending is not None
        self._after.append((observer.piece, piece, pending))
        if last:
            self._observer = None
            self._after.append((observer.done, _NO_BYTES, pending))


class RequestSide(_Side):
    """Client to broker: forward, hold for admit_request, or keep for the hooks."""

    def __init__(self, relay: Relay) -> None:
        super().__init__(relay)
        self.inject: list[Buffer] = []  # never used on this side
        self._unanswered = False
        self._raw_token_kept = False  # the frame being split is a raw SASL token, assembled

    def frame_started(self, head: memoryview, size: int) -> int:
        relay = self.relay
        if relay.draining:
            relay.calls.stop_reading_client()
            return STOP
        kafka = self.kafka
        event = kafka.request(head, size, perf_counter())
        if event is REQUEST:
            self._unanswered = False
            self._current = pending = kafka.current
            plan = relay.plan
            if plan.hold_requests or pending.api_key in plan.admit_api_keys:
                return HOLD
            if plan.keep_requests or kafka.wants_body:
                return STREAM_KEEP
            return STREAM
        return self._not_a_request(event, size)

    def _not_a_request(self, event: Event, size: int) -> int:
        """The events other than a request awaiting its answer."""
        relay = self.relay
        if event is REQUEST_WITHOUT_RESPONSE:
            # Produce acks=0: the broker sends nothing back, so nothing is queued.
            self._current = self.kafka.current
            self._unanswered = True
            plan = relay.plan
            if plan.hold_requests:
                return HOLD
            return STREAM_KEEP if plan.keep_unanswered else STREAM
        if event is RAW_SASL:
            if relay.plan.keep_sasl_tokens:
                self._raw_token_kept = True
                return STREAM_KEEP
            return STREAM
        if event is NOT_A_REQUEST:
            return STREAM  # not a request header: forward untouched, nothing to match
        if event is NEED_MORE:
            return SPLIT_NEED_MORE
        if event is IN_FLIGHT_FULL:
            relay.calls.in_flight_full()
            return PAUSE
        assert event is TOO_LARGE_BEFORE_AUTH
        log.warning(
            "frame over the before-auth limit",
            conn=relay.info.conn_id,
            size=size,
            limit=self.kafka.max_frame_before_auth,
        )
        relay.calls.close("frame_too_large")
        return STOP

    def observe_instead(self, size: int) -> int:
        """A request to keep spans reads and is over the keep limit: its pieces go to the
        hooks' observer as they pass instead (SASL frames, bounded by the before-auth
        limit, are still kept: their hooks need them whole)."""
        pending = self._current
        if self._raw_token_kept or pending is None or pending.api_key == sasl.SASL_HANDSHAKE:
            return STREAM_KEEP
        relay = self.relay
        relay.metrics.frame_observed_in_pieces("request", size)
        self._observer = relay.hooks.request_stream(relay.info, pending, not self._unanswered)
        return STREAM if self._observer is None else STREAM_OBSERVE

    def frame_completed(self, body: memoryview | None) -> None:
        if self._raw_token_kept:
            self._raw_token_kept = False
            assert body is not None
            # A Pending only so that a failing hook is counted against SaslHandshake.
            token = Pending(-1, sasl.SASL_HANDSHAKE, 0, perf_counter(), len(body) + 4)
            self._after.append((self.sasl_token, body, token))
            return
        pending = self._current
        assert pending is not None and body is not None
        hooks = self.relay.hooks
        if self._unanswered:
            self._after.append((hooks.request_without_response, body, pending))
            return
        if self.kafka.wants_body:
            self.kafka.request_body(body)
        if self.relay.plan.keep_requests:
            self._after.append((hooks.request_forwarded, body, pending))

    def sasl_token(self, info: ConnectionInfo, token: memoryview, _: Pending) -> None:
        self.relay.hooks.sasl_token(info, token)

    def frame_held(self, body: memoryview, raw: list[Buffer]) -> list[Buffer]:
        """Ask admit_request; forward, or answer in the broker's place."""
        relay = self.relay
        pending = self._current
        assert pending is not None
        try:
            reply = relay.hooks.admit_request(
                relay.info, body, pending.api_key, pending.api_version, pending.correlation_id
            )
        except Exception:
            relay.hook_failed("admit_request", pending.api_key, "request")
            reply = None
        if reply is not None:
            return self._answer_instead(pending, reply)
        self.frame_completed(body)
        return raw

    def _answer_instead(self, pending: Pending, reply: bytes) -> list[Buffer]:
        relay = self.relay
        if self._unanswered or not reply:
            # Nothing to answer with (acks=0 expects no response; an empty reply means the
            # API has no error code to carry it): Kafka closes the connection, so do we.
            relay.calls.close("rejected")
            return []
        pending.reply = bytes(reply)
        relay.answer_in_order()
        return []

    def frame_too_large(self, size: int) -> None:
        log.warning("client frame too large", conn=self.relay.info.conn_id, size=size)
        self.relay.calls.close("frame_too_large")

    def chunk_done(self) -> None:
        self.run_after("request")


class ResponseSide(_Side):
    """Broker to client: forward, hold for rewrite_response, or keep for the hooks."""

    def __init__(self, relay: Relay) -> None:
        super().__init__(relay)
        self.inject: list[Buffer] = []  # replies the proxy made, to send before a frame
        self.splitter: FrameSplitter | None = None
        self.unmatched = 0

    def idle(self) -> bool:
        """At a frame boundary: a reply written now cannot cut into a response."""
        return self.splitter is None or self.splitter.at_boundary

    def frame_started(self, head: memoryview, size: int) -> int:
        kafka = self.kafka
        event = kafka.response(head, size)
        if event is RESPONSE:
            if kafka.replies_ahead:
                self._inject_replies()
            self._current = pending = kafka.current
            plan = self.relay.plan
            if pending.api_key in plan.rewrite_api_keys:
                return HOLD
            return STREAM_KEEP if plan.keep_responses else STREAM
        if event is not RAW_SASL:  # a raw SASL token from the broker goes on untouched
            self.unmatched += 1
        return STREAM

    def _inject_replies(self) -> None:
        """Replies the proxy made that stood ahead of the response: they go first."""
        replies = self.kafka.replies_ahead
        for request in replies:
            self.inject.extend(reply_frame(request.reply or b""))
        replies.clear()

    def observe_instead(self, size: int) -> int:
        """A response to keep spans reads and is over the keep limit: its pieces go to
        the hooks' observer as they pass instead."""
        relay = self.relay
        pending = self._current
        assert pending is not None
        relay.metrics.frame_observed_in_pieces("response", size)
        self._observer = relay.hooks.response_stream(relay.info, pending, size)
        return STREAM if self._observer is None else STREAM_OBSERVE

    def frame_completed(self, body: memoryview | None) -> None:
        pending = self._current
        assert pending is not None and body is not None
        self._after.append((self.relay.hooks.response_forwarded, body, pending))

    def frame_held(self, body: memoryview, raw: list[Buffer]) -> list[Buffer]:
        relay = self.relay
        pending = self._current
        assert pending is not None
        try:
            new = relay.hooks.rewrite_response(relay.info, body, pending)
        except Exception:
            relay.hook_failed("rewrite_response", pending.api_key, "response")
            new = None
        sent: list[Buffer] = raw
        if new is not None:
            body = memoryview(bytes(new))
            sent = [_INT32.pack(len(body)), body]
        if relay.plan.keep_responses:
            self._after.append((relay.hooks.response_forwarded, body, pending))
        return sent

    def frame_too_large(self, size: int) -> None:
        log.warning("broker frame too large", conn=self.relay.info.conn_id, size=size)
        self.relay.calls.close("upstream_frame_too_large")

    def chunk_done(self) -> None:
        self.run_after("response")
        relay = self.relay
        queue = self.kafka.pending
        if queue and queue[0].reply is None or not (queue or relay.draining) or not self.idle():
            return  # the usual case: nothing the proxy must send or close itself
        relay.answer_in_order()
        if relay.draining and not queue:
            relay.calls.close("shutdown")
