"""The seam between the forwarding machinery and everything that looks at frames.

The connection code (proxy/forward/connection.py) forwards bytes; a `Hooks` subclass decodes,
logs, enforces and rewrites. The rules that keep the hot path fast:

* A frame is forwarded before `request_forwarded` / `response_forwarded` run, so
  decoding never delays a byte.
* Only two hooks run *before* forwarding, and only when asked for:
  `admit_request` when `inspects_requests` is true (every request) or for the api
  keys in `admit_api_keys`, and `rewrite_response` for the api keys in
  `rewrite_api_keys`. Such frames are held until complete.
* A hook whose method is not overridden costs nothing: the connection skips it and
  does not assemble frames nobody reads (`HookPlan`).
* An exception in a hook is caught, counted as a decode error, and forwarding goes on.
* Frames above `limits.observe_whole_frame_bytes` that span socket reads are never
  assembled: they go on as they arrive, and `request_forwarded` /
  `request_without_response` / `response_forwarded` do not see them. Instead
  `request_stream` / `response_stream` may return a `FrameObserver`, which gets the
  frame's pieces as they pass and must keep only what it needs (codec/stream.py
  decodes that way). Hooks without one do not observe such frames: a frame costs the
  proxy its metadata, not its size. (A frame inside one read is passed whole.)

Every `frame` is the frame body without its 4-byte length prefix, as a memoryview
that is only valid during the call (copy it with `bytes(frame)` to keep it).
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from proxy.metrics import ConnectionMetrics

_conn_numbers = itertools.count(1)


def next_connection_id() -> str:
    """Unique within the host: the pid keeps worker processes apart."""
    return f"{os.getpid()}-{next(_conn_numbers)}"


class Pending:
    """A request forwarded and awaiting its response (or, for acks=0, none)."""

    __slots__ = (
        "correlation_id",
        "api_key",
        "api_version",
        "started",
        "request_size",
        "token",
        "reply",
        "rewritten",
    )

    def __init__(
        self, correlation_id: int, api_key: int, api_version: int, started: float, request_size: int
    ) -> None:
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.api_version = api_version
        self.started = started  # time.perf_counter() when the request's header arrived
        self.request_size = request_size  # bytes on the wire, the 4-byte length prefix included
        self.token: Any = None  # free for hooks: e.g. the decoded request, for the log line
        self.reply: bytes | None = None  # a response the proxy answers itself (admit_request)
        self.rewritten: Any = None  # free for hooks: what rewrite_response made of the answer

    def __repr__(self) -> str:
        return (
            f"Pending(corr={self.correlation_id}, api={self.api_key}v{self.api_version},"
            f" size={self.request_size})"
        )


class FrameObserver:
    """Sees one frame above the whole-frame threshold piece by piece, each piece after it
    went on. Both methods have the shape of an after-forwarding hook, so the connection
    queues and runs them like one. A piece is only valid during the call."""

    def piece(self, info: ConnectionInfo, piece: memoryview, pending: Pending) -> None:
        """The next piece of the frame body (without its length prefix)."""

    def done(self, info: ConnectionInfo, nothing: memoryview, pending: Pending) -> None:
        """The frame ended (`nothing` is empty)."""


@dataclass(eq=False, slots=True)
class ConnectionInfo:
    """What is known about one client connection; listed by the /clients endpoint."""

    conn_id: str
    listener: str
    client_host: str
    client_port: int
    upstream: str
    tls_version: str | None = None
    client_cert_subject: str | None = None
    opened_at: float = field(default_factory=time.time)
    bytes_in: int = 0  # from the client
    bytes_out: int = 0  # to the client
    requests: int = 0
    responses: int = 0
    requests_without_response: int = 0
    in_flight: int = 0  # refreshed when listed
    identity: dict[str, Any] = field(default_factory=dict)  # filled by hooks
    metrics: ConnectionMetrics | None = None  # the connection gauges (identify() lives here)

    def as_json(self) -> dict[str, Any]:
        """The connection for /clients: named as the request log names it (`conn`,
        `client_address`, the identity fields at the top), `opened` in RFC 3339 as the
        log's `ts`, `duration_s` so far. Until the next release also under the names
        /clients had before (`conn_id`, `client`, `opened_at` in epoch seconds, the
        identity nested in `identity`), documented in docs/metrics.md as going."""
        address = f"{self.client_host}:{self.client_port}"
        now = time.time()
        fields = {
            "conn": self.conn_id,
            "listener": self.listener,
            "client_address": address,
            "upstream": self.upstream,
            "tls_version": self.tls_version,
            "client_cert_subject": self.client_cert_subject,
            "opened": rfc3339(self.opened_at),
            "duration_s": round(max(now - self.opened_at, 0.0), 3),
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "requests": self.requests,
            "responses": self.responses,
            "requests_without_response": self.requests_without_response,
            "in_flight": self.in_flight,
        }
        identity = {k: v for k, v in self.identity.items() if k not in fields}
        old = {
            "conn_id": self.conn_id,
            "client": address,
            "opened_at": self.opened_at,
            "identity": self.identity,
        }
        return {**fields, **identity, **old}


def rfc3339(epoch: float) -> str:
    """`2026-05-04T10:11:12.345678Z`: UTC, as the request log writes `ts`."""
    stamp = datetime.fromtimestamp(epoch, UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Hooks:
    """No-op base: subclass and override what you need (see the module docstring)."""

    # True: every request frame is held until complete and passed to admit_request first.
    inspects_requests: bool = False
    # Requests to these api keys are held until complete and passed to admit_request first.
    admit_api_keys: frozenset[int] = frozenset()
    # Responses to these api keys are held until complete and passed to rewrite_response.
    rewrite_api_keys: frozenset[int] = frozenset()

    def api_name(self, api_key: int) -> str:
        """Label for metrics about `api_key` (the codec's names replace this)."""
        return str(api_key) if 0 <= api_key <= 100 else "unknown"

    def connection_opened(self, info: ConnectionInfo) -> None:
        """A client connected and its upstream connection is up."""

    def admit_request(
        self,
        info: ConnectionInfo,
        frame: memoryview,
        api_key: int,
        api_version: int,
        correlation_id: int,
    ) -> bytes | None:
        """Before forwarding, if `inspects_requests`. Return a response frame body (from
        the correlation id on, no length prefix) to answer the client with it instead of
        forwarding; it is sent in order, after the responses to earlier requests. An
        empty `b""` refuses the request by closing the connection."""
        return None

    def request_forwarded(self, info: ConnectionInfo, frame: memoryview, pending: Pending) -> None:
        """After the request went to the broker; may set `pending.token`."""

    def request_without_response(
        self, info: ConnectionInfo, frame: memoryview, pending: Pending
    ) -> None:
        """After forwarding a request the broker will not answer (Produce acks=0)."""

    def request_not_forwarded(self, info: ConnectionInfo, frame: memoryview, pending: Pending) -> None:
        """A whole request the client sent that the connection, now closing, never
        forwarded (its broker connection failed or broke first, or it waited behind
        limits.max_in_flight_requests): request_incomplete follows. May set `pending.token`."""

    def request_stream(
        self, info: ConnectionInfo, pending: Pending, expects_response: bool
    ) -> FrameObserver | None:
        """A request above the whole-frame threshold, spanning reads, has started (its
        size is `pending.request_size`); what should see it as it passes.
        `expects_response` is False for Produce acks=0."""
        return None

    def response_stream(
        self, info: ConnectionInfo, pending: Pending, size: int
    ) -> FrameObserver | None:
        """A response of `size` bytes (after its length prefix), above the whole-frame
        threshold and spanning reads, has started; what should see it as it passes."""
        return None

    def rewrite_response(
        self, info: ConnectionInfo, frame: memoryview, pending: Pending
    ) -> bytes | None:
        """Before forwarding a response to an api in `rewrite_api_keys`. Return a new
        frame body to send instead (the proxy writes its length prefix)."""
        return None

    def response_forwarded(self, info: ConnectionInfo, frame: memoryview, pending: Pending) -> None:
        """After the response (as sent, i.e. rewritten if it was) went to the client."""

    def sasl_token(self, info: ConnectionInfo, token: memoryview) -> None:
        """After a raw SASL token from the client (the phase after SaslHandshake v0, see
        proxy/exchange/sasl.py) went to the broker. `token` holds credentials: never keep or log it."""

    def request_incomplete(self, info: ConnectionInfo, pending: Pending, reason: str) -> None:
        """The connection is closing with `pending` still unanswered (it never will be);
        `reason` as for connection_closed, which comes right after."""

    def connection_closed(self, info: ConnectionInfo, reason: str) -> None:
        """The client connection ended; `reason` as counted in the metrics."""

    def reopen_logs(self) -> None:
        """SIGHUP: files the hooks write to were rotated away; reopen them at their paths.
        Must not block."""

    def close(self) -> None:
        """The proxy is stopping: flush and close whatever the hooks write to."""

    def steady_parts(self) -> SteadyParts | None:
        """What the C steady-state path (proxy/steady.py) needs of these hooks to take a
        read in their place, or None: every read goes through the hooks."""
        return None


@dataclass(frozen=True)
class SteadyParts:
    """What hooks give the C steady-state path (proxy/_steady.c): the classes of their
    memo entries and per-connection state, whose slots it reads; their memos' dicts; the
    request log's queue; which apis it may take; and each connection's state. The C path
    then does for a memoised exchange what the hooks would (see proxy/steady.py)."""

    request_entry: type
    response_entry: type
    cap_entry: type
    state: type
    request_memo: dict[bytes, Any]
    response_memo: dict[bytes, Any]
    cap_memo: dict[bytes, Any]
    sink: Any  # the request log's LineSink, or None
    sink_type: type
    clash: int  # the mask bit of a fields dict never put together from pieces
    request_apis: frozenset[int]  # requests it may take, when memoised and quiet
    response_apis: frozenset[int]  # answers it may take, when memoised
    log_always: frozenset[int]  # apis whose lines are always written (others sampled)
    log_never: frozenset[int]  # apis whose lines are never written
    api_versions_plain: bool  # an ApiVersions answer's line fields are its cap's
    state_of: Any  # ConnectionInfo -> the state the hooks keep for it
    hooks: Any  # the hooks whose `broker_ranges` an ApiVersions answer sets
    counters: Any  # their metrics' steady_counters (proxy/metrics.py), where the C path counts
    token: type  # the token of a request a link reads (chain.Token: the C path makes them, slot by slot)
    # Requests a link reads that the C path may take all the same (the link's part done
    # by the C path: each link's `request` once forwarded, as steady_link_request; and by
    # the hooks: link_answer once its answer is)
    link_apis: frozenset[int]
    request_links: dict[int, tuple[Any, ...]]  # of link_apis: the links whose `request` reads each
    # (info, pending, token, state, latency, size, fields, None, True): observes an
    # answer a link read that it does not finish itself (ObservingHooks.responded)
    link_answer: Any
    render_fields: Any  # (fields) -> (JSON object, mask) of an answer's fields a link made
    # Requests and answers whose reads it may take when the memo does not answer them: it
    # frames, forwards and pairs them, and hands each frame to request_forwarded or
    # response_forwarded after the read went on, as the Python path does
    observed_request_apis: frozenset[int] = frozenset()
    observed_response_apis: frozenset[int] = frozenset()


def _overrides(hooks: Hooks, name: str) -> bool:
    return getattr(type(hooks), name) is not getattr(Hooks, name)


@dataclass(frozen=True)
class HookPlan:
    """Which frames the connection must hold or assemble for `hooks`, worked out once."""

    hold_requests: bool
    admit_api_keys: frozenset[int]  # held for admit_request even when hold_requests is False
    keep_requests: bool  # assemble each request for request_forwarded
    keep_unanswered: bool  # assemble acks=0 requests for request_without_response
    keep_responses: bool  # assemble each response for response_forwarded
    keep_sasl_tokens: bool  # assemble each raw SASL client token for sasl_token
    rewrite_api_keys: frozenset[int]

    @property
    def observes_nothing(self) -> bool:
        """No frame is held, kept, rewritten or streamed to the hooks: they see none."""
        return not (
            self.hold_requests or self.admit_api_keys or self.keep_requests or self.keep_unanswered
            or self.keep_responses or self.keep_sasl_tokens or self.rewrite_api_keys
        )  # fmt: skip

    @classmethod
    def of(cls, hooks: Hooks) -> HookPlan:
        return cls(
            hold_requests=hooks.inspects_requests,
            admit_api_keys=frozenset(hooks.admit_api_keys),
            keep_requests=_overrides(hooks, "request_forwarded"),
            keep_unanswered=_overrides(hooks, "request_without_response"),
            keep_responses=_overrides(hooks, "response_forwarded"),
            keep_sasl_tokens=_overrides(hooks, "sasl_token"),
            rewrite_api_keys=frozenset(hooks.rewrite_api_keys),
        )
