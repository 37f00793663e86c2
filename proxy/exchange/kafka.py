"""One Kafka connection's exchange, sans I/O: frames in, events out.

The driver hands over each frame's start as it meets it (`request` for the client's,
`response` for the broker's: the body's first bytes after the length prefix, and the
body's size) and gets an `Event` back; the request concerned is `current`. The
exchange keeps what a connection's protocol state is: the requests awaiting a
response in the order they were sent (`pending`), whether the client has
authenticated yet, and the raw SASL phase that follows a SaslHandshake v0 (sasl.py),
during which frames carry no Kafka header at all. It reads headers only, never
decodes a body, writes nothing and calls nothing: the proxy's forwarding
(proxy/forward/sides.py) turns the events into what to forward and which hooks to
call, `kafkalens decode` (proxy/capture/decode.py) into hook calls on a capture.

Kafka answers a connection's requests in order, so a response normally pairs with the
oldest pending request (checked first, without a search). What happens otherwise
depends on what the driver sees (`ExchangeOptions.sees_every_frame`):

* The proxy sees every frame: requests ahead of the one a response answers were never
  answered (a misread acks, say) and are dropped. Replies the proxy made itself
  (`Pending.reply`, an admit_request answer) that stand ahead go out first, and are
  listed in `replies_ahead`.
* A capture may miss frames: requests ahead may have had answers the capture lost, so
  they stay pending (the close reports them), and a correlation id reused while the
  first request with it awaits an answer makes that first one unpairable: it is taken
  out (`displaced`).
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass
from enum import IntEnum

from codec import ApiKey
from codec.errors import DecodeError
from codec.peek import produce_acks
from proxy.exchange import sasl
from proxy.hooks import ConnectionInfo, Pending

# Plain ints named by ApiKey, here and in the observing modules: an int compared with
# an IntEnum member misses CPython 3.11's int fast path. With the members themselves as
# these constants, a proxied round trip took more instructions (bench/PROFILE.md,
# "Tried and not kept").
PRODUCE = int(ApiKey.PRODUCE)
REQUEST_MIN_HEAD = 8  # api key, api version, correlation id
RESPONSE_MIN_HEAD = 6  # correlation id + the error code of a SaslHandshake v0 response
_REQUEST_HEADER = struct.Struct(">hhi")
_INT32 = struct.Struct(">i")
# sasl's names as this module's: a global is found with one lookup, not two, on the
# path every request and response takes
AUTH_APIS = sasl.AUTH_APIS
SASL_HANDSHAKE = sasl.SASL_HANDSHAKE
handshake_succeeded = sasl.handshake_succeeded


class Event(IntEnum):
    """What a frame is, as `request` and `response` tell."""

    REQUEST = 0  # a request that awaits its response: `current`, now pending
    REQUEST_WITHOUT_RESPONSE = 1  # a Produce with acks=0: `current`, never pending
    RAW_SASL = 2  # a raw SASL token (client's or broker's), no Kafka header
    NOT_A_REQUEST = 3  # a client frame too short for a request header: nothing to pair
    NEED_MORE = 4  # the head is too short to tell: ask again with more of it
    IN_FLIGHT_FULL = 5  # options.max_in_flight requests await answers: nothing recorded
    TOO_LARGE_BEFORE_AUTH = 6  # over options.max_frame_before_auth before authenticating
    RESPONSE = 7  # the response to `current`, taken off `pending`
    UNMATCHED = 8  # a response no pending request awaits


# The events as module names: a module global is found faster than an enum's member,
# and these are compared twice per request/response pair on the proxy's hot path.
REQUEST = Event.REQUEST
REQUEST_WITHOUT_RESPONSE = Event.REQUEST_WITHOUT_RESPONSE
RAW_SASL = Event.RAW_SASL
NOT_A_REQUEST = Event.NOT_A_REQUEST
NEED_MORE = Event.NEED_MORE
IN_FLIGHT_FULL = Event.IN_FLIGHT_FULL
TOO_LARGE_BEFORE_AUTH = Event.TOO_LARGE_BEFORE_AUTH
RESPONSE = Event.RESPONSE
UNMATCHED = Event.UNMATCHED


@dataclass(frozen=True, slots=True)
class ExchangeOptions:
    """What a connection's exchange is built from."""

    # Requests awaiting a response at which the next one is IN_FLIGHT_FULL (recorded
    # only when asked again): the proxy waits (limits.max_in_flight_requests), a
    # capture gives the oldest up (`give_up_oldest`).
    max_in_flight: int = 2**31
    # A frame larger than this before the client authenticated is TOO_LARGE_BEFORE_AUTH
    # (limits.max_frame_bytes_before_auth); None: no bound (a capture only reads).
    max_frame_before_auth: int | None = None
    # The most of a frame's start the driver can hand over: a Produce whose acks lie
    # past it is taken to expect a response (NEED_MORE is never asked past it).
    max_head: int = 65536
    # True for the proxy, False for a capture, which may miss frames (see the module).
    sees_every_frame: bool = True


_NOBODY = Pending(-1, -1, -1, 0.0, 0)  # `current` before the first request


class KafkaExchange:
    """The protocol state of one connection; see the module docstring."""

    __slots__ = (
        "info",
        "pending",
        "current",
        "before_auth",
        "raw_sasl",
        "raw_replies_due",
        "handshake_mechanism",
        "wants_body",
        "replies_ahead",
        "displaced",
        "max_in_flight",
        "max_frame_before_auth",
        "_max_head",
        "_sees_every_frame",
    )

    def __init__(self, info: ConnectionInfo, options: ExchangeOptions) -> None:
        self.info = info  # its requests / responses / requests_without_response counted
        self.pending: deque[Pending] = deque()  # awaiting a response, in the order sent
        self.current = _NOBODY  # the request the last event is about
        self.before_auth = True  # only ApiVersions and the SASL apis were sent so far
        self.raw_sasl: sasl.RawSaslPhase | None = None
        self.raw_replies_due = 0  # broker tokens still owed after a counted phase ended
        self.handshake_mechanism: str | None = None
        # The last REQUEST is a SaslHandshake v0: hand its whole body to `request_body`
        # (the mechanism it names says when the raw phase ends).
        self.wants_body = False
        self.replies_ahead: list[Pending] = []  # the proxy's own replies due before `current`
        self.displaced: Pending | None = None  # a capture's request displaced by a reused id
        self.max_in_flight = options.max_in_flight
        before_auth = options.max_frame_before_auth
        self.max_frame_before_auth = 2**63 if before_auth is None else before_auth
        self._max_head = options.max_head
        self._sees_every_frame = options.sees_every_frame

    # -- the client's frames ---------------------------------------------------------

    def request(self, head: memoryview | bytes, size: int, now: float) -> Event:
        """A client frame of `size` body bytes starts with `head`; `now` is when it came
        (the request's `Pending.started`)."""
        if self.raw_sasl is not None:
            event = self._raw_token(head, size)
            if event is not None:
                return event
        if size < REQUEST_MIN_HEAD or len(head) < REQUEST_MIN_HEAD:
            return NOT_A_REQUEST
        api_key, api_version, corr = _REQUEST_HEADER.unpack_from(head, 0)
        acks = -1
        if api_key == PRODUCE:
            try:
                acks = produce_acks(head, api_version)
            except DecodeError:
                if len(head) < size and len(head) < self._max_head:
                    return NEED_MORE
        # (`pending and`: with none in flight, as for a client that waits for each
        # answer, the bound costs one truth test)
        pending = self.pending
        if pending and acks != 0 and len(pending) >= self.max_in_flight:
            return IN_FLIGHT_FULL
        if self.before_auth:
            if api_key not in AUTH_APIS:
                self.before_auth = False
            elif size > self.max_frame_before_auth:
                return TOO_LARGE_BEFORE_AUTH
        info = self.info
        info.requests += 1
        self.current = request = Pending(corr, api_key, api_version, now, size + 4)
        if acks == 0:
            info.requests_without_response += 1
            self.wants_body = False
            return REQUEST_WITHOUT_RESPONSE
        self.wants_body = api_key == SASL_HANDSHAKE and api_version == 0
        if not self._sees_every_frame:
            self.displaced = self._displace(corr)
        pending.append(request)
        return REQUEST

    def request_body(self, body: memoryview | bytes) -> None:
        """The whole body of the last REQUEST, asked for by `wants_body`."""
        self.handshake_mechanism = sasl.handshake_mechanism(body)

    def _raw_token(self, head: memoryview | bytes, size: int) -> Event | None:
        """A client frame while raw SASL tokens flow; None once it is a request again."""
        phase = self.raw_sasl
        assert phase is not None
        if phase.tokens_left is None and len(head) < min(size, sasl.MIN_PLAUSIBLE_HEAD):
            return NEED_MORE
        counted = phase.next_frame(head, size)
        if counted is None:
            self.raw_sasl = None
            self.raw_replies_due = 0
            return None
        if counted:
            self.raw_replies_due += 1
            if phase.over:
                self.raw_sasl = None
        if size > self.max_frame_before_auth:
            return TOO_LARGE_BEFORE_AUTH
        return RAW_SASL

    def _displace(self, corr: int) -> Pending | None:
        """A capture's: the request with `corr` still pending, taken out."""
        for earlier in self.pending:
            if earlier.correlation_id == corr:
                self.pending.remove(earlier)
                return earlier
        return None

    def give_up_oldest(self) -> Pending:
        """A capture's answer to IN_FLIGHT_FULL: the oldest pending request, taken out
        (it will never be paired)."""
        return self.pending.popleft()

    def awaits(self, corr: int) -> bool:
        """Whether a pending request, not answered by the proxy itself, has `corr`."""
        return any(p.correlation_id == corr and p.reply is None for p in self.pending)

    def unforwarded(self, head: memoryview | bytes, size: int, arrived: float) -> Pending | None:
        """A whole request the client sent that the proxy, now closing, never forwarded:
        pending too, for the close to report it (a cut or headerless frame is none)."""
        if size < REQUEST_MIN_HEAD or len(head) < REQUEST_MIN_HEAD:
            return None
        api_key, api_version, corr = _REQUEST_HEADER.unpack_from(head, 0)
        self.info.requests += 1
        request = Pending(corr, api_key, api_version, arrived, size + 4)
        self.pending.append(request)
        return request

    # -- the broker's frames ---------------------------------------------------------

    def response(self, head: memoryview | bytes, size: int) -> Event:
        """A broker frame of `size` body bytes starts with `head` (at least
        RESPONSE_MIN_HEAD bytes of it, or all of it)."""
        if self.raw_sasl is not None or self.raw_replies_due:
            if self.raw_replies_due:
                self.raw_replies_due -= 1
            return RAW_SASL  # a raw SASL token from the broker
        if size < 4 or len(head) < 4:
            return UNMATCHED
        (corr,) = _INT32.unpack_from(head, 0)
        queue = self.pending
        first = queue[0] if queue else None
        if first is not None and first.correlation_id == corr and first.reply is None:
            self.current = request = queue.popleft()  # the usual answer
        else:
            found = self._match(corr)
            if found is None:
                return UNMATCHED
            self.current = request = found
        self.info.responses += 1
        if request.api_key == SASL_HANDSHAKE and request.api_version == 0 and handshake_succeeded(head):
            self.raw_sasl = sasl.RawSaslPhase(self.handshake_mechanism)
        return RESPONSE

    def _match(self, corr: int) -> Pending | None:
        """The request `corr` answers, when it is not the oldest (see the module)."""
        queue = self.pending
        if not any(p.correlation_id == corr and p.reply is None for p in queue):
            return None
        if not self._sees_every_frame:
            for request in queue:
                if request.correlation_id == corr:
                    queue.remove(request)
                    return request
        while True:
            first = queue.popleft()
            if first.reply is not None:
                self.replies_ahead.append(first)
                self.info.responses += 1
            elif first.correlation_id == corr:
                return first
            # else: answered out of order means never answered (e.g. acks we misread)

    def reply_due(self) -> Pending | None:
        """The oldest pending request if the proxy answered it itself: its reply may go
        out now that nothing is ahead of it (taken off `pending`, counted)."""
        queue = self.pending
        if queue and queue[0].reply is not None:
            self.info.responses += 1
            return queue.popleft()
        return None
