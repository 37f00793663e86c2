"""One client connection paired with one upstream broker connection.

`Connection` is the client's asyncio protocol; `UpstreamProtocol` delegates the
broker's events to it. Bytes go through two `FrameSplitter`s (proxy/forward/framing.py)
whose handlers (proxy/forward/sides.py) drive the connection's sans-I/O Kafka exchange
(proxy/exchange/kafka.py) and call the hooks.

Backpressure: when a transport's write buffer passes its high-water mark asyncio
calls `pause_writing` on the protocol that writes to it; the proxy then stops
reading from the *other* side until `resume_writing`, so a slow client holds the
broker back instead of making the proxy buffer the broker's output (and the other
way round).

Memory per connection, whatever the peers do, per direction: the write buffer up to
`HIGH_WATER` plus one read chunk (256 KiB), plus a frame being assembled for the
request log of at most `limits.observe_whole_frame_bytes` (larger frames are decoded
as they pass and never kept, proxy/forward/sides.py). In the kernel, each of the two
sockets has send and receive buffers of `limits.socket_buffer_bytes`, which Linux
doubles: 4 x 2 x 1 MiB = 8 MiB at most at the defaults, instead of the autotuned sizes
(up to the tcp_wmem/tcp_rmem maxima, 4 and 6 MiB per socket on Linux's defaults). Frames
held whole before they go on (an ApiVersions response to rewrite; every request when
KIP-1313 enforcement is `reject`) are bounded by `limits.max_frame_bytes` instead.

A connection's life is a `Phase`, changed only by a `Move` that `TRANSITIONS` allows
from it (as h11's `_state.py` has a connection's states): accepted, then admitted by the
limits and connecting to its broker (refused ones close at once), open, draining when
the proxy stops, closed. Any other move is a bug and raises `PhaseError`. Reading from
each side is paused for a set of named reasons (`Paused`) and resumes when none is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import socket
import ssl
import time
import types
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import structlog

from proxy import steady
from proxy.config import AUTO_MAX_CONNECTIONS, Address, Limits
from proxy.exchange import sasl
from proxy.exchange.kafka import (
    PRODUCE,
    REQUEST_MIN_HEAD,
    RESPONSE_MIN_HEAD,
    ExchangeOptions,
    KafkaExchange,
)
from proxy.forward import fdlimit
from proxy.forward.framing import HEAD_CAP, Buffer, FrameSplitter
from proxy.forward.hangups import HangupWatch, hung_up
from proxy.forward.sides import ConnectionCalls, Relay
from proxy.hooks import ConnectionInfo, HookPlan, Hooks, Pending, next_connection_id
from proxy.metrics import connect_failure
from proxy.tls import describe_peer

if TYPE_CHECKING:
    from proxy.metrics import Metrics

log = structlog.get_logger("kafkalens.proxy")
# Clients whose broker is down reconnect at once (the proxy accepted them), each many
# times a second: counted in kafkalens_upstream_failures_total, logged once per 10 s
# at most.
_upstream_unreachable_log = fdlimit.RateLimitedLog("upstream connect failed: client connection closed")

HIGH_WATER = 1024 * 1024
LOW_WATER = 256 * 1024
# Once closed, a side still gets this long to flush what it was sent, then is cut.
CLOSE_FLUSH_SECONDS = 5.0
# A closing connection reads what its client sent and was not read yet, up to one read's
# worth, for its requests to be reported (see Connection._unforwarded).
UNREAD_BYTES = 256 * 1024
# The C path's forwarding-only plan (hooks that observe nothing) leaves these to the
# Python path: a Produce's acks are read there, and a SaslHandshake starts SASL's phases.
MAX_API_KEY = 128
FORWARDED_IN_PYTHON = frozenset({PRODUCE, sasl.SASL_HANDSHAKE})
# Close reasons of a connection closed for one of its requests (proxy/forward/sides.py)
REFUSED_A_REQUEST = frozenset({"frame_too_large", "rejected"})



class Phase(enum.Enum):
    """Where a connection is in its life."""

    ACCEPTED = "accepted"  # the client's socket is accepted, the limits not yet asked
    CONNECTING = "connecting"  # admitted; its broker connection is being opened, its first bytes wait
    OPEN = "open"  # both sides relay
    DRAINING = "draining"  # the proxy stops: no new requests; closes once the answers are in
    CLOSED = "closed"  # both sockets closed (or closing, their buffers flushing), the hooks told


class Move(enum.Enum):
    """What happens to a connection."""

    ADMIT = "admit"  # the connection limits let it in
    REFUSE = "refuse"  # past a connection limit, or the proxy is stopping
    UPSTREAM_UP = "upstream_up"  # its broker connection is made
    DRAIN = "drain"  # the proxy stops (Server.shutdown)
    CLOSE = "close"  # either side ended, a limit or a timeout cut it, or the proxy closed it


# Every move a phase allows, and where it leads; any other is a PhaseError. A closed
# connection takes a late close, drain or broker connection (which it aborts) as
# nothing; one draining while it was still connecting closes at once (nothing was
# forwarded), so its broker connection never comes up draining.
TRANSITIONS: dict[Phase, dict[Move, Phase]] = {
    Phase.ACCEPTED: {Move.ADMIT: Phase.CONNECTING, Move.REFUSE: Phase.CLOSED},
    Phase.CONNECTING: {Move.UPSTREAM_UP: Phase.OPEN, Move.DRAIN: Phase.DRAINING, Move.CLOSE: Phase.CLOSED},
    Phase.OPEN: {Move.DRAIN: Phase.DRAINING, Move.CLOSE: Phase.CLOSED},
    Phase.DRAINING: {Move.DRAIN: Phase.DRAINING, Move.CLOSE: Phase.CLOSED},
    Phase.CLOSED: {Move.UPSTREAM_UP: Phase.CLOSED, Move.DRAIN: Phase.CLOSED, Move.CLOSE: Phase.CLOSED},
}


class PhaseError(RuntimeError):
    """A move its phase does not allow: a bug of the proxy, not of a peer."""

    def __init__(self, phase: Phase, move: Move) -> None:
        super().__init__(f"a connection {phase.value} cannot {move.value}")
        self.phase = phase
        self.move = move


def next_phase(phase: Phase, move: Move) -> Phase:
    """Where `move` leads from `phase` (TRANSITIONS), or PhaseError."""
    found = TRANSITIONS[phase].get(move)
    if found is None:
        raise PhaseError(phase, move)
    return found


class Paused(enum.IntFlag):
    """Why reading from a side is paused; it resumes when no reason is left. Kept as a
    plain int on the connection: an int's truth test is what the data path pays for."""

    BACKLOGGED = 1  # the other side's write buffer is over its high-water mark
    DRAINING = 2  # shutting down: no new requests
    IN_FLIGHT = 4  # limits.max_in_flight_requests requests await their responses


def paused_for(reasons: int) -> str:
    """The metrics' name of why reading was paused (the first that holds)."""
    if reasons & Paused.DRAINING:
        return "draining"
    if reasons & Paused.IN_FLIGHT:
        return "in_flight"
    return "backlogged"


@dataclass
class ListenerRoute:
    """Where one listener's connections go."""

    name: str
    upstreams: tuple[Address, ...]
    upstream_tls: ssl.SSLContext | None = None
    upstream_server_hostname: str | None = None


@dataclass
class ProxyContext:
    """What every connection of a server shares."""

    limits: Limits
    hooks: Hooks
    metrics: Metrics
    plan: HookPlan = field(init=False)
    connections: dict[str, Connection] = field(default_factory=dict)
    per_ip: dict[str, int] = field(default_factory=dict)
    accepting: bool = True
    fd_ceiling: int = 2**62  # accepted sockets numbered from here on are refused (fdlimit.py)
    # limits.max_connections, `auto` sized by Server.start to the open-file limit (fdlimit.py)
    max_connections: int = field(init=False)
    # Paused clients' sockets, for their hang-ups (proxy/forward/hangups.py): opened with
    # the server; None where epoll is missing (the sweeper polls paused clients instead).
    hangups: HangupWatch[Connection] | None = field(default=None, init=False)
    # The C steady-state path's plan (proxy/steady.py), and how it finds a connection's
    # state in the hooks (None: hooks that observe nothing, Plan.forwarding); None where
    # it does not run.
    steady: Any = field(default=None, init=False)
    steady_state_of: Any = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.plan = HookPlan.of(self.hooks)
        self.max_connections = self.limits.max_connections or AUTO_MAX_CONNECTIONS
        parts = self.hooks.steady_parts() if steady.ACTIVE else None
        if parts is not None:
            # Reads the memo does not answer: each frame to the hooks, as sides.py hands
            # it, where the Python path keeps it whole for them and holds nothing
            plan, hooks = self.plan, self.hooks
            observed = plan.keep_requests and plan.keep_responses and not plan.hold_requests
            self.steady = steady.plan(
                pending=Pending, request_entry=parts.request_entry, response_entry=parts.response_entry,
                cap_entry=parts.cap_entry, state=parts.state, info=ConnectionInfo, splitter=FrameSplitter,
                exchange=KafkaExchange, sink_type=parts.sink_type, request_memo=parts.request_memo,
                response_memo=parts.response_memo, cap_memo=parts.cap_memo, hooks=parts.hooks, sink=parts.sink,
                counters=parts.counters, clash=parts.clash, request_apis=parts.request_apis,
                response_apis=parts.response_apis, auth_apis=sasl.AUTH_APIS, log_always=parts.log_always,
                log_never=parts.log_never, api_versions_plain=parts.api_versions_plain, token=parts.token,
                link_apis=parts.link_apis, request_links=parts.request_links, link_answer=parts.link_answer,
                render_fields=parts.render_fields,
                observed_request_apis=parts.observed_request_apis - plan.admit_api_keys - sasl.AUTH_APIS,
                observed_response_apis=parts.observed_response_apis - plan.rewrite_api_keys - sasl.AUTH_APIS,
                request_forwarded=hooks.request_forwarded if observed else None,
                response_forwarded=hooks.response_forwarded if observed else None,
            )  # fmt: skip
            self.steady_state_of = parts.state_of
        elif steady.ACTIVE and self.plan.observes_nothing:
            # hooks that hold, keep and rewrite nothing: the C path forwards and pairs
            every = range(MAX_API_KEY)
            self.steady = steady.forwarding_plan(
                pending=Pending, info=ConnectionInfo, splitter=FrameSplitter, exchange=KafkaExchange,
                request_apis=frozenset(every) - FORWARDED_IN_PYTHON,
                response_apis=frozenset(every) - {sasl.SASL_HANDSHAKE},
                auth_apis=sasl.AUTH_APIS,
            )  # fmt: skip

    def open_hangups(self) -> None:
        """On the loop, once: the watch's epoll descriptor is one of the idle ones."""
        if self.hangups is None and HangupWatch.available():
            self.hangups = HangupWatch(asyncio.get_running_loop(), Connection.left_while_paused)

    def close_hangups(self) -> None:
        if self.hangups is not None:
            self.hangups.close()
            self.hangups = None

    def admit(self, listener: str, ip: str, fd: int = -1) -> bool:
        """Connection limits, overall and per client IP, and the descriptors left."""
        reason = None
        if not self.accepting:
            reason = "shutting_down"
        elif fd >= self.fd_ceiling:
            reason = "fd_limit"
            fdlimit.out_of_fds_log(listener=listener, fd=fd, ceiling=self.fd_ceiling)
        elif len(self.connections) >= self.max_connections:
            reason = "max_connections"
        elif self.per_ip.get(ip, 0) >= self.limits.max_connections_per_ip:
            reason = "per_ip_limit"
        if reason is None:
            self.per_ip[ip] = self.per_ip.get(ip, 0) + 1
            return True
        self.metrics.connection_rejected(listener, reason)
        return False

    def release(self, ip: str) -> None:
        left = self.per_ip.get(ip, 1) - 1
        if left > 0:
            self.per_ip[ip] = left
        else:
            self.per_ip.pop(ip, None)


class Connection(asyncio.Protocol):
    """The client side of one proxied connection."""

    def __init__(self, ctx: ProxyContext, route: ListenerRoute) -> None:
        self.ctx = ctx
        self.route = route
        self.client: asyncio.Transport | None = None
        self.upstream: asyncio.Transport | None = None
        self.info: ConnectionInfo | None = None
        self.phase = Phase.ACCEPTED
        # phase is CLOSED, as the data path reads it: set by _move alone
        self.closed = False
        self.last_active = time.monotonic()
        self._client_paused = 0  # Paused reasons, as an int
        self._upstream_paused = 0
        self._watched_fd = -1  # the client's socket, while in ctx.hangups
        self._early: list[bytes] = []  # client bytes that came before the broker connection
        self._early_at = 0.0  # time.perf_counter() when the first of them came
        self._connect_task: asyncio.Task[None] | None = None
        self._ip = ""
        self._counted_in = 0  # bytes_in / bytes_out already added to the byte counters
        self._counted_out = 0
        # The C steady-state path (proxy/steady.py): uvloop calls the data_received it
        # finds on the protocol, the C path's, which hands the reads it does not take to
        # this class's. Set here: uvloop looks it up before connection_made.
        self._core: Any = None
        if ctx.steady is not None:
            self._core = steady.core(
                ctx.steady, types.MethodType(Connection.data_received, self), self.upstream_data
            )
            self.data_received = self._core.feed_request  # type: ignore[method-assign]

    # --- client transport events -------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.client = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername") or ("?", 0)
        ip = str(peer[0])
        sock = transport.get_extra_info("socket")
        fd = sock.fileno() if sock is not None else -1
        if not self.ctx.admit(self.route.name, ip, fd):
            self._move(Move.REFUSE)
            self.client.abort()
            return
        self._move(Move.ADMIT)
        self._ip = ip
        self._open(peer)
        self.client.set_write_buffer_limits(high=HIGH_WATER, low=LOW_WATER)
        _bound_socket_buffers(self.client, self.ctx.limits.socket_buffer_bytes)
        # Until the broker connection is up (see data_received). Not watched for the
        # client's hang-up: whole requests it sent before leaving are forwarded once
        # connected, as a broker processes those it read before the FIN; the wait is
        # limits.connect_timeout_seconds at most.
        self.client.pause_reading()
        self._connect_task = asyncio.get_running_loop().create_task(self._connect_upstream())

    def _open(self, peer: tuple[Any, ...]) -> None:
        ctx = self.ctx
        assert self.client is not None
        tls_version, subject = describe_peer(self.client)
        self.info = info = ConnectionInfo(
            conn_id=next_connection_id(),
            listener=self.route.name,
            client_host=str(peer[0]),
            client_port=int(peer[1]) if len(peer) > 1 else 0,
            upstream=", ".join(str(a) for a in self.route.upstreams),
            tls_version=tls_version,
            client_cert_subject=subject,
        )
        info.metrics = ctx.metrics.connection_opened(self.route.name)
        ctx.connections[info.conn_id] = self
        limits = ctx.limits
        self.exchange = kafka = KafkaExchange(
            info,
            ExchangeOptions(
                max_in_flight=limits.max_in_flight_requests,
                max_frame_before_auth=limits.max_frame_bytes_before_auth,
                max_head=HEAD_CAP,
            ),
        )
        calls = ConnectionCalls(
            send_to_client=self._send_to_client,
            close=self.close,
            stop_reading_client=self._stop_reading_client,
            in_flight_full=self._in_flight_full,
        )
        self.relay = relay = Relay(kafka, ctx.hooks, ctx.plan, ctx.metrics, calls)
        max_frame, keep = limits.max_frame_bytes, limits.observe_whole_frame_bytes
        self.requests = FrameSplitter(
            relay.request_side, self._send_to_upstream, max_frame, REQUEST_MIN_HEAD, keep
        )
        self.responses = relay.response_side.splitter = FrameSplitter(
            relay.response_side, self._send_to_client, max_frame, RESPONSE_MIN_HEAD, keep
        )
        try:
            ctx.hooks.connection_opened(info)
        except Exception:
            relay.hook_failed("connection_opened", -1, "request")
        if self._core is not None:
            state = ctx.steady_state_of(info) if ctx.steady_state_of is not None else None
            if state is not None or ctx.steady_state_of is None:  # else it never takes a read
                self._core.bind(kafka, self.requests, self.responses, info, state, self.client, relay.hook_failed)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.last_active = time.monotonic()
        info = self.info
        assert info is not None
        info.bytes_in += len(data)
        if self.upstream is None:
            # uvloop starts reading after connection_made, whatever it paused: pause
            # again so at most this chunk waits for the broker connection
            if not self._early:
                self._early_at = time.perf_counter()
            self._early.append(data)
            assert self.client is not None
            self.client.pause_reading()
            return
        self.requests.feed(data)

    def eof_received(self) -> bool | None:
        return None  # Kafka clients do not half-close: treat EOF as the end

    def connection_lost(self, exc: Exception | None) -> None:
        self.close("client_eof" if exc is None else "client_error")

    def pause_writing(self) -> None:
        self.pause_upstream_reading(Paused.BACKLOGGED)

    def resume_writing(self) -> None:
        self.resume_upstream_reading(Paused.BACKLOGGED)

    def _move(self, move: Move) -> Phase:
        """The one place a connection's phase changes (and `closed` with it)."""
        self.phase = phase = next_phase(self.phase, move)
        self.closed = phase is Phase.CLOSED
        return phase

    # --- upstream ------------------------------------------------------------------------

    async def _connect_upstream(self) -> None:
        loop = asyncio.get_running_loop()
        route = self.route
        timeout = self.ctx.limits.connect_timeout_seconds
        reason = error = ""
        for address in route.upstreams:
            try:
                await asyncio.wait_for(
                    loop.create_connection(
                        lambda: UpstreamProtocol(self),
                        address.host,
                        address.port,
                        ssl=route.upstream_tls,
                        server_hostname=(route.upstream_server_hostname or address.host)
                        if route.upstream_tls
                        else None,
                        ssl_handshake_timeout=timeout if route.upstream_tls else None,
                    ),
                    timeout,
                )
                return
            except OSError as exc:  # TimeoutError and ssl.SSLError are OSErrors too
                if exc.errno in fdlimit.OUT_OF_FDS:
                    self._out_of_fds(exc)
                    return
                reason, error = connect_failure(exc, tls=route.upstream_tls is not None)
            self.ctx.metrics.upstream_failure(str(address), reason)
            if self.closed:
                return
        _upstream_unreachable_log(
            upstream=self.info and self.info.upstream, reason=reason, error=error
        )
        self.close("upstream_connect_failed")

    def _out_of_fds(self, exc: OSError) -> None:
        """No descriptor for the broker socket: not the broker's fault, and the next
        address would fail the same way."""
        self.ctx.metrics.connection_rejected(self.route.name, "fd_limit")
        fdlimit.out_of_fds_log(listener=self.route.name, error=str(exc))
        self.close("fd_limit")

    def upstream_made(self, transport: asyncio.Transport) -> None:
        if self._move(Move.UPSTREAM_UP) is Phase.CLOSED:
            transport.abort()  # the client left while we were connecting
            return
        self.upstream = transport
        transport.set_write_buffer_limits(high=HIGH_WATER, low=LOW_WATER)
        _bound_socket_buffers(transport, self.ctx.limits.socket_buffer_bytes)
        early, self._early = self._early, []
        for data in early:
            self.requests.feed(data)
        if self._upstream_paused:
            transport.pause_reading()
        if not self.closed and not self._client_paused:
            assert self.client is not None
            self.client.resume_reading()
        elif not self.closed:
            self._watch_hangup()  # paused meanwhile (draining), or by the early requests
        if self._core is not None and not self.closed:
            self._core.set_upstream(transport)
            self._steady()

    def upstream_data(self, data: bytes) -> None:
        client = self.client
        assert client is not None
        if self.closed or client.is_closing():
            # The client left: the response is dropped, its request reported incomplete
            # at close. (The transport closes at the client's EOF or reset, and calls
            # connection_lost a pass of the loop later: an answer read in the same pass
            # would be written to the closing transport, which drops it, and be logged
            # as delivered.)
            return
        self.last_active = time.monotonic()
        info = self.info
        assert info is not None
        info.bytes_out += len(data)
        self.responses.feed(data)
        if self._client_paused and self._client_paused & Paused.IN_FLIGHT:  # mostly 0: one test
            self._in_flight_eased()

    def _steady(self) -> None:
        """Whether the C path may take reads: the broker connected, nothing paused, not
        draining or closed (its other conditions it checks per read)."""
        core = self._core
        if core is not None:
            core.ready = (
                not self.closed
                and self.upstream is not None
                and not self._client_paused
                and not self._upstream_paused
                and not self.relay.draining
            )

    def _in_flight_eased(self) -> None:
        if len(self.exchange.pending) < self.exchange.max_in_flight and not self.closed:
            self.resume_client_reading(Paused.IN_FLIGHT)

    def upstream_lost(self, exc: Exception | None) -> None:
        if not self.closed and self.info is not None:
            # A broker closes connections idle for connections.max.idle.ms (10 minutes by
            # default), and every connection when it shuts down: routine, not a failure,
            # unless requests were left unanswered.
            if exc is not None:
                self.ctx.metrics.upstream_failure(self.info.upstream, "reset")
            elif self.exchange.pending:
                self.ctx.metrics.upstream_failure(self.info.upstream, "closed")
        self.close("upstream_eof" if exc is None else "upstream_error")

    # --- writing, pausing --------------------------------------------------------------

    def _send_to_upstream(self, buffers: list[Buffer]) -> None:
        assert self.upstream is not None
        _send(self.upstream, buffers)

    def _send_to_client(self, buffers: list[Buffer]) -> None:
        if not self.closed:
            assert self.client is not None
            _send(self.client, buffers)

    def _stop_reading_client(self) -> None:
        self.pause_client_reading(Paused.DRAINING)

    def _in_flight_full(self) -> None:
        """The request splitter holds the next request until a response comes back."""
        self.ctx.metrics.in_flight_limit_hits.inc()
        self.pause_client_reading(Paused.IN_FLIGHT)

    def pause_client_reading(self, reason: Paused) -> None:
        was = self._client_paused
        self._client_paused = int(was | reason)
        self._steady()
        if not was and self.client is not None and self.upstream is not None:
            self.client.pause_reading()
            self._watch_hangup()

    def resume_client_reading(self, reason: Paused) -> None:
        if not self._client_paused & reason:
            return
        self._client_paused = int(self._client_paused & ~reason)
        if not self._client_paused and not self.closed and self.upstream is not None:
            self.requests.resume()  # requests an in-flight pause held, first
            if self._client_paused or self.closed:
                return
            assert self.client is not None
            self._unwatch_hangup()
            self.client.resume_reading()
            self.requests.restart_frame_clock()
            self._steady()

    def _watch_hangup(self) -> None:
        """Reading from the client paused: its FIN or reset is looked for all the same.
        Its requests not yet forwarded will not be: it cannot read their answers."""
        hangups = self.ctx.hangups
        if hangups is None or self._watched_fd >= 0:
            return
        assert self.client is not None
        sock = self.client.get_extra_info("socket")
        fd = sock.fileno() if sock is not None else -1
        if hangups.watch(fd, self):
            self._watched_fd = fd

    def _unwatch_hangup(self) -> None:
        if self._watched_fd >= 0:
            if self.ctx.hangups is not None:
                self.ctx.hangups.unwatch(self._watched_fd, self)
            self._watched_fd = -1

    def left_while_paused(self, reason: str) -> None:
        """The watch saw the paused client's FIN (`client_eof`) or reset (`client_error`)."""
        self._watched_fd = -1
        if self.closed:
            return
        self.ctx.metrics.paused_client_gone(paused_for(self._client_paused))
        self.close(reason)

    def pause_upstream_reading(self, reason: Paused) -> None:
        was = self._upstream_paused
        self._upstream_paused = int(was | reason)
        self._steady()
        if not was and self.upstream is not None and not self.closed:
            self.upstream.pause_reading()

    def resume_upstream_reading(self, reason: Paused) -> None:
        if not self._upstream_paused & reason:
            return
        self._upstream_paused = int(self._upstream_paused & ~reason)
        if not self._upstream_paused and not self.closed and self.upstream is not None:
            self.upstream.resume_reading()
            self.responses.restart_frame_clock()
            self._steady()

    # --- lifecycle ---------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return len(self.exchange.pending) if self.info is not None else 0

    def snapshot(self) -> dict[str, Any]:
        assert self.info is not None
        self.info.in_flight = self.in_flight
        return self.info.as_json()

    def count_bytes(self) -> None:
        """Add the bytes relayed since the last call to the byte counters. Done by the
        sweeper and at close instead of per read: a Prometheus counter takes a lock."""
        info = self.info
        if info is None:
            return
        metrics = self.ctx.metrics
        if info.bytes_in != self._counted_in:
            metrics.bytes_to_broker.inc(info.bytes_in - self._counted_in)
            self._counted_in = info.bytes_in
        if info.bytes_out != self._counted_out:
            metrics.bytes_to_client.inc(info.bytes_out - self._counted_out)
            self._counted_out = info.bytes_out

    def check_timeouts(self, now: float) -> None:
        """Called about once a second by the server's sweeper."""
        self.count_bytes()
        if self._client_paused and self.ctx.hangups is None and self._hung_up():
            self.ctx.metrics.paused_client_gone(paused_for(self._client_paused))
            self.close("client_eof")
            return
        limits = self.ctx.limits
        active = self.last_active if self._core is None else max(self.last_active, self._core.last_active)
        if now - active > limits.idle_timeout_seconds:
            self.close("idle_timeout")
            return
        for splitter, paused in (
            (self.requests, self._client_paused),
            (self.responses, self._upstream_paused),
        ):
            since = splitter.mid_frame_since
            if since is not None and not paused and now - since > limits.frame_timeout_seconds:
                self.close("frame_timeout")
                return
        pending = self.exchange.pending
        if pending and time.perf_counter() - pending[0].started > limits.request_timeout_seconds:
            self._request_timed_out(pending[0])

    def _hung_up(self) -> bool:
        """Without epoll: the sweeper asks a paused client's socket about once a second."""
        return hung_up(self.client.get_extra_info("socket") if self.client else None)

    def _request_timed_out(self, oldest: Pending) -> None:
        """Brokers answer every request or close the connection: one this old means the
        broker is stuck. Do what a broker would: close (the table goes with it)."""
        assert self.info is not None
        try:
            api = self.ctx.hooks.api_name(oldest.api_key)
        except Exception:
            api = "unknown"
        self.ctx.metrics.request_timeout(api)
        log.warning(
            "request timed out: closing the connection",
            conn=self.info.conn_id,
            api=api,
            correlation_id=oldest.correlation_id,
            pending=len(self.exchange.pending),
            timeout_seconds=self.ctx.limits.request_timeout_seconds,
        )
        self.close("request_timeout")

    def begin_drain(self) -> None:
        """Shutting down: forward no new requests, close once the in-flight ones are
        answered (the server cuts the rest after the grace period)."""
        if self._move(Move.DRAIN) is Phase.CLOSED:
            return
        self.relay.draining = True  # what the request side reads of the phase
        self._steady()
        if self.requests.at_boundary:
            self.pause_client_reading(Paused.DRAINING)
        if not self.exchange.pending and self.responses.at_boundary:
            self.close("shutdown")

    def close(self, reason: str) -> None:
        was_closed = self.closed
        self._move(Move.CLOSE)
        if was_closed:
            return
        self._steady()
        if self._connect_task is not None and not self._connect_task.done():
            self._connect_task.cancel()
        self._unwatch_hangup()  # before the socket closes and its number is free again
        # (before the client's socket closes; not when closing for a request, from inside
        # the splitting of what came with it: where the next request starts is not known)
        unforwarded = self.info is not None and reason not in REFUSED_A_REQUEST
        unlogged = self._unforwarded() if unforwarded else []
        _close_transport(self.client)
        _close_transport(self.upstream)
        info = self.info
        if info is None:
            return
        self.count_bytes()
        self.ctx.connections.pop(info.conn_id, None)
        self.ctx.release(self._ip)
        self._report_incomplete(info, reason)
        self.exchange.pending.clear()
        if unlogged:
            self._count_unlogged(unlogged, reason)
        if info.metrics is not None:
            info.metrics.close(reason)
        try:
            self.ctx.hooks.connection_closed(info, reason)
        except Exception:
            self.relay.hook_failed("connection_closed", -1, "request")
        if self._core is not None:
            self._core.release()

    def _unforwarded(self) -> list[int]:
        """The requests the client sent that were received and never forwarded: those the
        one read before the broker connection holds (which then failed), or those a
        PAUSE parked (limits.max_in_flight_requests), then what the client's socket
        still holds, unread (one read's worth), from where a frame starts. A client counts
        them sent, so they are reported incomplete like those a broker left unanswered:
        limits.max_in_flight_requests of them, the others only counted. Returns the api
        keys of those."""
        now = time.perf_counter()
        if self.upstream is None:
            data, skip = b"".join(self._early), 0
            arrived = self._early_at if self._early else now
            self._early = []
        else:
            taken = self.requests.unforwarded()
            if taken is None:
                return []
            (data, skip), arrived = taken, now
        unread = self._unread()
        if data:
            data += unread
        elif len(unread) > skip:
            data = unread[skip:]
        if not data:
            return []
        return self.relay.never_forwarded(data, arrived, self.ctx.limits.max_in_flight_requests)

    def _unread(self) -> bytes:
        """What the client sent that was not read yet, up to one read's worth. Not once
        its transport is closing (the descriptor may be closed and its number another's),
        nor under TLS (ciphertext)."""
        client, info = self.client, self.info
        assert client is not None and info is not None
        sock = client.get_extra_info("socket")
        if sock is None or client.is_closing() or info.tls_version is not None:
            return b""
        with contextlib.suppress(OSError), socket.socket(fileno=os.dup(sock.fileno())) as dup:
            return dup.recv(UNREAD_BYTES, socket.MSG_DONTWAIT)
        return b""

    def _count_unlogged(self, api_keys: list[int], reason: str) -> None:
        metrics, hooks = self.ctx.metrics, self.ctx.hooks
        metrics.incomplete_requests_unlogged.inc(len(api_keys))
        for api_key in api_keys:
            try:
                api = hooks.api_name(api_key)
            except Exception:
                api = "unknown"
            metrics.request_incomplete(api, reason)

    def _report_incomplete(self, info: ConnectionInfo, reason: str) -> None:
        """The requests still awaiting a response will never get one: tell the hooks,
        which would otherwise never hear of them (e.g. a long-poll Fetch at consumer close)."""
        hooks = self.ctx.hooks
        metrics = self.ctx.metrics
        for pending in self.exchange.pending:
            try:
                api = hooks.api_name(pending.api_key)
            except Exception:
                api = "unknown"
            metrics.request_incomplete(api, reason)
            try:
                hooks.request_incomplete(info, pending, reason)
            except Exception:
                self.relay.hook_failed("request_incomplete", pending.api_key, "request")


def _send(transport: asyncio.Transport, buffers: list[Buffer]) -> None:
    """uvloop's write() of one bytes object tries the socket at once; writelines() queues
    its buffers for the end of the loop iteration, which costs a plain relay more CPU per
    small request/response pair (bench/PROFILE.md, "Kept, and what it saved")."""
    if len(buffers) == 1:
        transport.write(buffers[0])
    else:
        transport.writelines(buffers)


def _bound_socket_buffers(transport: asyncio.Transport, size: int) -> None:
    """Fixed kernel buffers (no autotuning past them): what a peer that stops reading
    makes the kernel hold for this connection is bounded like the proxy's own buffers."""
    if not size:
        return
    sock = transport.get_extra_info("socket")
    if sock is None:
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)


def _close_transport(transport: asyncio.Transport | None) -> None:
    """Close, letting buffered bytes flush for a moment, then cut it off."""
    if transport is None or transport.is_closing():
        return
    transport.close()
    with contextlib.suppress(RuntimeError):
        asyncio.get_running_loop().call_later(CLOSE_FLUSH_SECONDS, transport.abort)


class UpstreamProtocol(asyncio.Protocol):
    """The broker side; everything is handled by its `Connection`."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        # The broker's bytes go straight to the connection's method (or the C path's,
        # which hands it what it does not take): uvloop calls the bound method it finds
        # here, so a response costs one Python call less than through a delegating
        # method (bench.proxy.front_instructions: bench/PROFILE.md).
        core = conn._core
        self.data_received = (  # type: ignore[method-assign]
            conn.upstream_data if core is None else core.feed_response
        )

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.conn.upstream_made(cast(asyncio.Transport, transport))

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn.upstream_lost(exc)

    def pause_writing(self) -> None:
        self.conn.pause_client_reading(Paused.BACKLOGGED)

    def resume_writing(self) -> None:
        self.conn.resume_client_reading(Paused.BACKLOGGED)
