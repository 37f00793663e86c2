"""`kafkalens decode CAPTURE`: a packet capture replayed through the proxy's observer.

Each TCP connection of the capture is put back in order per direction
(codec/reassembly.py), cut into Kafka frames (codec/frame_cutter.py), and its
requests and responses are handed to the very `ObservingHooks` the proxy logs with,
as if the proxy had forwarded them: the lines are the request log's, field for field,
with the capture's timestamps for `ts`, latencies and durations. Responses are paired
with requests by correlation id. What the capture lacks is said in lines of its own
(`capture_*` events), one per stream and kind, counted in the final
`capture_summary`: bytes the peer acknowledged but the capture never showed are lost
at once (no retransmission will bring them), and the stream is picked up again at the
next plausible frame. A hook that fails is counted and said, as in the proxy.

Which frame is a request, which response answers it and when raw SASL tokens flow is
the proxy's own exchange's to say (proxy/exchange/kafka.py), told that a capture may
miss frames: a request whose answer the capture lost stays pending until the stream
closes, and one whose correlation id is reused while it waits is given up.

Bounded whatever the capture holds: at most `max_streams` connections are followed
at once (the least recently active one is closed to make room), each direction holds
at most `max_stream_bytes` of out-of-order segments and assembles frames up to that
size whole (larger ones are decoded as they pass, as the proxy does), and at most
`max_in_flight` requests per connection wait for their response (the oldest is given
up for the next).
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from codec import DecodeError, HeaderPolicy, UnknownApiError, decode_request
from codec.frame_cutter import (
    HEAD_BYTES,
    BigEnd,
    BigPiece,
    BigStart,
    Broken,
    CutEvent,
    Frame,
    FrameCutter,
    Plausible,
    Skipped,
)
from codec.reassembly import Data, Event, Gap, TcpHalf
from codec.schema import api_names
from proxy.capture.log import CaptureHooks, CaptureLog, Output
from proxy.capture.pcap_read import ACK, FIN, RST, SYN, CaptureReader, Segment
from proxy.exchange import sasl
from proxy.exchange.kafka import (
    IN_FLIGHT_FULL,
    RAW_SASL,
    REQUEST,
    REQUEST_WITHOUT_RESPONSE,
    RESPONSE,
    ExchangeOptions,
    KafkaExchange,
)
from proxy.exchange.kafka import Event as ExchangeEvent
from proxy.hooks import ConnectionInfo, FrameObserver, Pending
from proxy.metrics import Metrics
from proxy.observe.chain import Shared
from proxy.observe.kip1313.config import Kip1313Config
from proxy.observe.kip1313.link import Kip1313Link
from proxy.observe.lag.config import LagConfig
from proxy.observe.lag.feature import lag_link
from proxy.observe.request_log import render
from proxy.observe.summary import SummaryOptions, TopicIds
from proxy.observe.telemetry.config import TelemetryConfig
from proxy.observe.telemetry.hooks import TelemetryLink
from proxy.observe.telemetry.pushes import Telemetry

_REQUEST_HEADER = struct.Struct(">hhi")
_INT32 = struct.Struct(">i")
MAX_PLAUSIBLE_FRAME = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default
MAX_FRAME_IN_STEP = 1024 * 1024 * 1024  # a response past this is garbage, whatever came before
DECIDE_BYTES = 4096  # what a stream of unknown kind may send before it is let go
PROGRESS_EVERY = 4096  # segments between two calls of run()'s progress


@dataclass(frozen=True)
class CaptureLimits:
    max_streams: int = 10_000
    max_stream_bytes: int = 1024 * 1024
    max_in_flight: int = 1000
    max_record_bytes: int = 16 * 1024 * 1024


Endpoint = tuple[str, int]
# (connection, "request" or "response", the request, the frame body): for tools and
# tests that want the frames as well as the lines
FrameCallback = Callable[[ConnectionInfo, str, Pending, bytes], None]


@dataclass(eq=False)
class Stream:
    """One TCP connection of the capture."""

    number: int
    ends: tuple[Endpoint, Endpoint]
    first_ts: float
    halves: dict[Endpoint, TcpHalf]
    client: Endpoint | None = None  # known from the SYN, a given port or the first frames
    kind: str = "undecided"  # kafka, tls, other
    waiting: list[tuple[Endpoint, Event]] = field(default_factory=list)
    waiting_bytes: int = 0
    info: ConnectionInfo | None = None
    kafka: KafkaExchange | None = None  # once it is known to be Kafka
    cutters: dict[Endpoint, FrameCutter] = field(default_factory=dict)
    observers: dict[Endpoint, tuple[FrameObserver, Pending] | None] = field(default_factory=dict)
    fins: set[Endpoint] = field(default_factory=set)
    closed_by = "client_eof"
    reported: set[str] = field(default_factory=set)  # kinds of trouble already said

    @property
    def server(self) -> Endpoint:
        return self.ends[1] if self.ends[0] == self.client else self.ends[0]


class CaptureDecoder:
    def __init__(
        self,
        out: IO[bytes],
        ports: frozenset[int] = frozenset(),
        limits: CaptureLimits = CaptureLimits(),
        apis: tuple[str, ...] = (),
        summary: SummaryOptions | None = None,
        on_frame: FrameCallback | None = None,
        notes: IO[bytes] | None = None,
    ) -> None:
        """`apis`: only those apis' lines are written to `out`, and the capture_summary
        to `notes` (stderr) rather than `out`, which then holds what was asked alone."""
        self.ports = ports
        self.notes = Output(notes) if notes is not None else None
        self.on_frame = on_frame
        self.limits = limits
        self.output = Output(out)
        metrics, policy = Metrics(), HeaderPolicy()
        # As a proxy with the shipped defaults: KIP-1313 violations logged, lag positions
        # on Fetch and OffsetCommit lines, pushed client metrics counted on PushTelemetry
        # lines (the features' links in the proxy's order, proxy/features.py).
        summary = summary or SummaryOptions()
        topic_ids = TopicIds()
        links = (
            Kip1313Link(Kip1313Config(), Shared(metrics, topic_ids, summary, policy)),
            TelemetryLink(Telemetry(TelemetryConfig(), metrics, policy, None)),
            lag_link(LagConfig(), metrics, topic_ids, summary),
        )
        self.hooks = CaptureHooks(metrics, None, summary, policy, links=links, topic_ids=topic_ids)
        self.log = self.hooks.log = CaptureLog(self.output, apis, self.hooks)
        self.streams: OrderedDict[frozenset[Endpoint], Stream] = OrderedDict()
        self.closed: OrderedDict[frozenset[Endpoint], None] = OrderedDict()
        self.numbers = 0
        self.counts: dict[str, int] = {
            "streams": 0, "kafka_streams": 0, "tls_streams": 0, "other_streams": 0,
            "exchanges": 0, "requests_without_response": 0, "unmatched_responses": 0,
            "unanswered_requests": 0, "resyncs": 0, "broken_frames": 0, "lost_bytes": 0,
            "duplicate_bytes": 0, "late_segments": 0, "hook_errors": 0,
        }
        self.limits_hit: dict[str, int] = {
            "max_streams": 0, "max_stream_bytes": 0, "max_in_flight": 0, "max_record_bytes": 0,
        }
        self._names = api_names()

    # -- the capture ---------------------------------------------------------------

    def run(self, handle: IO[bytes], progress: Callable[[CaptureDecoder], None] | None = None) -> int:
        """Decode a whole capture; 1 if it could not be read to its end. `progress` is
        called every PROGRESS_EVERY segments."""
        reader = CaptureReader(handle, self.limits.max_record_bytes)
        last = 0.0
        for number, segment in enumerate(reader.segments()):
            last = segment.ts
            self.segment(segment)
            if progress is not None and number % PROGRESS_EVERY == 0:
                progress(self)
        self.finish(last)
        if reader.stopped is not None and "over the" in reader.stopped:
            self.limits_hit["max_record_bytes"] += 1
        self._note("capture_summary", {
            **self.counts,
            **vars(reader.counts),
            "limits_hit": self.limits_hit,
            "stopped": reader.stopped,
        })
        return 1 if reader.stopped else 0

    def segment(self, seg: Segment) -> None:
        self.hooks.now = seg.ts
        src, dst = (seg.src, seg.sport), (seg.dst, seg.dport)
        key = frozenset((src, dst))
        stream = self.streams.get(key)
        syn_only = bool(seg.flags & SYN and not seg.flags & ACK)
        if stream is not None and syn_only and stream.halves[src].next not in (None, seg.seq + 1):
            self._close(stream, seg.ts, "closed_unseen")  # the ports were reused for a new connection
            stream = None
        if stream is None:
            if key in self.closed and not syn_only:
                self.counts["late_segments"] += 1
                return
            stream = self._open(key, src, dst, seg.ts)
        else:
            self.streams.move_to_end(key)
        if seg.flags & ACK:  # what the peer had before it sent this
            for event in stream.halves[dst].acked(seg.ts, seg.ack):
                self._data(stream, dst, event)
        half = stream.halves[src]
        if seg.flags & SYN:
            half.syn(seg.seq)
            if stream.client is None:
                stream.client = src if syn_only else dst
        events = half.segment(seg.ts, seg.seq, seg.payload)
        if seg.flags & FIN:
            half.fin(seg.seq, len(seg.payload))
        for event in events:
            self._data(stream, src, event)
        if seg.flags & RST:
            self._close(stream, seg.ts, "client_error" if src == stream.client else "upstream_error")
        elif seg.flags & FIN:
            if not stream.fins:  # the reason, in the proxy's words: who closed first
                stream.closed_by = "client_eof" if src == stream.client else "upstream_eof"
            stream.fins.add(src)
            if len(stream.fins) == 2:
                self._close(stream, seg.ts, stream.closed_by)

    def finish(self, ts: float) -> None:
        for stream in list(self.streams.values()):
            self._close(stream, ts, "capture_ended")

    # -- streams -------------------------------------------------------------------

    def _open(self, key: frozenset[Endpoint], src: Endpoint, dst: Endpoint, ts: float) -> Stream:
        if len(self.streams) >= self.limits.max_streams:
            self.limits_hit["max_streams"] += 1
            _, oldest = next(iter(self.streams.items()))
            self._close(oldest, ts, "evicted")
        self.closed.pop(key, None)
        self.numbers += 1
        self.counts["streams"] += 1
        cap = self.limits.max_stream_bytes
        stream = Stream(self.numbers, (src, dst), ts, {src: TcpHalf(cap), dst: TcpHalf(cap)})
        if dst[1] in self.ports and src[1] not in self.ports:
            stream.client = src
        elif src[1] in self.ports and dst[1] not in self.ports:
            stream.client = dst
        self.streams[key] = stream
        return stream

    def _close(self, stream: Stream, ts: float, reason: str) -> None:
        key = frozenset(stream.ends)
        if self.streams.get(key) is not stream:
            return
        del self.streams[key]
        self.closed[key] = None
        # connections remembered after closing (as many as may be open), so that their
        # late segments (the last ACKs) are dropped, not taken for new connections
        if len(self.closed) > self.limits.max_streams:
            self.closed.popitem(last=False)
        self.hooks.now = ts
        for end, half in stream.halves.items():
            for event in half.finish(ts):
                self._data(stream, end, event)
            if half.gave_up_waiting:
                self.limits_hit["max_stream_bytes"] += half.gave_up_waiting
            self.counts["lost_bytes"] += half.lost_bytes
            self.counts["duplicate_bytes"] += half.duplicate_bytes
        if stream.kind == "undecided" and stream.waiting:
            self._decide(stream, final=True)
        if stream.kind != "kafka" or stream.info is None:
            return
        for end, cutter in stream.cutters.items():
            self._cut_events(stream, end, cutter.finish(ts))
        assert stream.kafka is not None
        for pending in stream.kafka.pending:
            self.counts["unanswered_requests"] += 1
            self._hook(stream, self.hooks.request_incomplete, stream.info, pending, reason)
        stream.kafka.pending.clear()
        stream.cutters.clear()  # their checks refer back to the stream: no cycle left for the GC
        self._hook(stream, self.hooks.connection_closed, stream.info, reason)

    def _data(self, stream: Stream, sender: Endpoint, event: Event) -> None:
        if stream.kind == "kafka":
            self._kafka_data(stream, sender, event)
        elif stream.kind == "undecided":
            stream.waiting.append((sender, event))
            if isinstance(event, Data):
                stream.waiting_bytes += len(event.data)
            self._decide(stream, final=False)

    # -- which streams are Kafka ---------------------------------------------------

    def _decide(self, stream: Stream, final: bool) -> None:
        firsts = _first_bytes(stream.waiting)
        if not firsts and not final:
            return  # nothing sent yet (or only a gap): nothing to tell TLS by
        if any(_is_tls(data) for data in firsts.values()):
            self._tls(stream)
            return
        if stream.client is None:
            stream.client = self._detect_client(stream, firsts, final)
        elif stream.server[1] not in self.ports:  # known from the SYN: is it Kafka?
            verdict = self._starts_with_request(firsts.get(stream.client, b""), final)
            if verdict is None and not final and stream.waiting_bytes <= DECIDE_BYTES:
                return
            if not verdict:
                self._not_kafka(stream)
                return
        if stream.client is not None:
            self._start_kafka(stream)
        elif final or stream.waiting_bytes > DECIDE_BYTES:
            self._not_kafka(stream)

    def _starts_with_request(self, data: bytes, final: bool) -> bool | None:
        """Whether a stream's first bytes are a request: its header plausible, and the
        frame decoding if it is all there (None: wait for more)."""
        verdict = _looks_like_request_frame(data, self._names)
        if verdict is not True:
            return verdict
        (size,) = _INT32.unpack_from(data, 0)
        if len(data) >= 4 + size:
            return _decodes(data[4 : 4 + size], self.hooks.policy)
        return True if final or len(data) >= DECIDE_BYTES else None

    def _detect_client(self, stream: Stream, firsts: dict[Endpoint, bytes], final: bool) -> Endpoint | None:
        # The client speaks first: the first side to send must send a request.
        for sender, event in stream.waiting:
            if isinstance(event, Data):
                verdict = self._starts_with_request(firsts[sender], final)
                if verdict is None and not final:
                    return None
                return sender if verdict else None
        return None

    def _tls(self, stream: Stream) -> None:
        stream.kind = "tls"
        stream.waiting.clear()
        self.counts["tls_streams"] += 1
        self._note("capture_tls_stream", {
            **self._addresses(stream),
            "reason": "the stream is TLS-encrypted: not decoded",
        })

    def _not_kafka(self, stream: Stream) -> None:
        stream.kind = "other"
        stream.waiting.clear()
        self.counts["other_streams"] += 1

    def _start_kafka(self, stream: Stream) -> None:
        stream.kind = "kafka"
        self.counts["kafka_streams"] += 1
        client, server = stream.client, stream.server
        assert client is not None
        stream.info = ConnectionInfo(
            conn_id=f"capture-{stream.number}",
            listener=_address(server),
            client_host=client[0],
            client_port=client[1],
            upstream=_address(server),
            opened_at=stream.first_ts,
        )
        stream.kafka = kafka = KafkaExchange(
            stream.info,
            ExchangeOptions(max_in_flight=self.limits.max_in_flight, max_head=HEAD_BYTES, sees_every_frame=False),
        )
        cap = self.limits.max_stream_bytes
        stream.cutters = {
            client: FrameCutter(self._request_plausible(kafka), cap),
            server: FrameCutter(self._response_plausible(kafka), cap),
        }
        now = self.hooks.now
        self.hooks.now = stream.first_ts
        self._hook(stream, self.hooks.connection_opened, stream.info)
        self.hooks.now = now
        waiting, stream.waiting = stream.waiting, []
        for sender, event in waiting:
            self._kafka_data(stream, sender, event)

    def _request_plausible(self, kafka: KafkaExchange) -> Plausible:
        names = self._names

        def plausible(head: bytes, size: int, resyncing: bool) -> bool | None:
            if kafka.raw_sasl is not None and not resyncing:
                return True  # raw SASL tokens have no header
            if resyncing and size > MAX_PLAUSIBLE_FRAME:
                return False
            # in step, any request header (an api this codec does not know is still an
            # exchange, logged as the proxy logs it); finding one's feet, a known api
            return _plausible_request(head, size, names if resyncing else None)

        return plausible

    def _response_plausible(self, kafka: KafkaExchange) -> Plausible:
        def plausible(head: bytes, size: int, resyncing: bool) -> bool | None:
            if not resyncing:
                # in step: any answer, even to a request not captured, but not a size
                # only garbage has (it would swallow the rest of the stream)
                return size <= MAX_FRAME_IN_STEP
            if size < 4 or size > MAX_PLAUSIBLE_FRAME:
                return False
            if len(head) < 4:
                return None
            return kafka.awaits(_INT32.unpack_from(head, 0)[0])

        return plausible

    # -- Kafka ---------------------------------------------------------------------

    def _kafka_data(self, stream: Stream, sender: Endpoint, event: Event) -> None:
        cutter = stream.cutters[sender]
        if isinstance(event, Gap):
            reason = ("the capture starts mid-stream" if event.lost is None
                      else f"{event.lost} bytes were not captured")
            self._cut_events(stream, sender, cutter.gap(event.ts, event.lost, reason))
        else:
            self._cut_events(stream, sender, cutter.feed(event.ts, event.data))

    def _cut_events(self, stream: Stream, sender: Endpoint, events: list[CutEvent]) -> None:
        is_request = sender == stream.client
        for event in events:
            if isinstance(event, Frame):
                self.hooks.now = event.end_ts
                if is_request:
                    self._request(stream, event)
                else:
                    self._response(stream, event)
            elif isinstance(event, BigStart):
                self._big_start(stream, sender, event, is_request)
            elif isinstance(event, BigPiece | BigEnd):
                self._big_more(stream, sender, event)
            elif isinstance(event, Skipped):
                self.counts["resyncs"] += 1
                self._trouble(stream, "capture_stream_resync", {
                    "direction": "request" if is_request else "response",
                    "offset": event.offset,
                    "skipped_bytes": event.skipped,
                    "reason": event.reason,
                })
            elif isinstance(event, Broken):
                self.counts["broken_frames"] += 1
                stream.observers.pop(sender, None)
                self._trouble(stream, "capture_stream_error", {
                    "direction": "request" if is_request else "response",
                    "offset": event.offset,
                    "reason": f"a frame was lost: {event.reason}",
                })

    def _request(self, stream: Stream, frame: Frame) -> None:
        info, kafka = stream.info, stream.kafka
        assert info is not None and kafka is not None
        body = frame.body
        info.bytes_in += len(body) + 4
        event = self._client_frame(stream, body, len(body), frame.start_ts)
        if event is RAW_SASL:
            self._hook(stream, self.hooks.sasl_token, info, memoryview(body))
            return
        pending = kafka.current
        if event is REQUEST_WITHOUT_RESPONSE:
            self.counts["requests_without_response"] += 1
            self._hook(stream, self.hooks.request_without_response, info, memoryview(body), pending)
            return
        if event is not REQUEST:
            return  # not a request header: nothing to pair
        if kafka.wants_body:
            kafka.request_body(body)
        self._hook(stream, self.hooks.request_forwarded, info, memoryview(body), pending)
        self._displaced(stream)
        if self.on_frame is not None:
            self.on_frame(info, "request", pending, body)

    def _client_frame(self, stream: Stream, head: bytes, size: int, ts: float) -> ExchangeEvent:
        """The exchange's event for a client frame; a request past max_in_flight gives
        the oldest pending one up."""
        kafka = stream.kafka
        assert kafka is not None
        event = kafka.request(head, size, ts)
        while event is IN_FLIGHT_FULL:
            self.limits_hit["max_in_flight"] += 1
            self._unanswered(stream, kafka.give_up_oldest(), "max_in_flight")
            event = kafka.request(head, size, ts)
        return event

    def _displaced(self, stream: Stream) -> None:
        """A correlation id reused in flight: whose answer is whose is unknowable."""
        kafka = stream.kafka
        assert kafka is not None
        if kafka.displaced is not None:
            earlier, kafka.displaced = kafka.displaced, None
            self._unanswered(stream, earlier, "correlation_id_reused")

    def _unanswered(self, stream: Stream, pending: Pending, reason: str) -> None:
        self.counts["unanswered_requests"] += 1
        self._hook(stream, self.hooks.request_incomplete, stream.info, pending, reason)

    def _response(self, stream: Stream, frame: Frame) -> None:
        info = stream.info
        assert info is not None
        body = frame.body
        info.bytes_out += len(body) + 4
        pending = self._paired(stream, body, len(body))
        if pending is None:
            return
        self.counts["exchanges"] += 1
        self._hook(stream, self.hooks.response_forwarded, info, memoryview(body), pending)
        if self.on_frame is not None:
            self.on_frame(info, "response", pending, body)

    def _paired(self, stream: Stream, head: bytes, size: int) -> Pending | None:
        """The request a broker frame answers; None for a raw SASL token, or an answer
        to a request the capture did not show (said)."""
        kafka = stream.kafka
        assert kafka is not None
        event = kafka.response(head, size)
        if event is RESPONSE:
            return kafka.current
        if event is not RAW_SASL and len(head) >= 4:
            self.counts["unmatched_responses"] += 1
            self._trouble(stream, "capture_unmatched_response", {
                "correlation_id": _INT32.unpack_from(head, 0)[0],
                "reason": "no request with this correlation id was seen (the capture missed it)",
            })
        return None

    def _big_start(self, stream: Stream, sender: Endpoint, event: BigStart, is_request: bool) -> None:
        info, kafka = stream.info, stream.kafka
        assert info is not None and kafka is not None
        stream.observers[sender] = None
        if is_request:
            info.bytes_in += event.size + 4
            said = self._client_frame(stream, event.head, event.size, event.ts)
            if said is not REQUEST and said is not REQUEST_WITHOUT_RESPONSE:
                return  # a raw SASL token, or no request header
            pending = kafka.current
            expects = said is REQUEST
            observer = self._hook(stream, self.hooks.request_stream, info, pending, expects)
            if expects:
                self._displaced(stream)
            else:
                self.counts["requests_without_response"] += 1
        else:
            info.bytes_out += event.size + 4
            paired = self._paired(stream, event.head, event.size)
            if paired is None:
                return
            pending = paired
            self.counts["exchanges"] += 1
            observer = self._hook(stream, self.hooks.response_stream, info, pending, event.size)
        stream.observers[sender] = None if observer is None else (observer, pending)

    def _big_more(self, stream: Stream, sender: Endpoint, event: BigPiece | BigEnd) -> None:
        current = stream.observers.get(sender)
        if current is None:
            return
        observer, pending = current
        info = stream.info
        assert info is not None
        self.hooks.now = event.ts
        if isinstance(event, BigPiece):
            self._hook(stream, observer.piece, info, memoryview(event.data), pending)
        else:
            del stream.observers[sender]
            self._hook(stream, observer.done, info, memoryview(b""), pending)

    def _hook(self, stream: Stream, call: Callable[..., Any], *args: Any) -> Any:
        """As the proxy does: a hook that fails is counted and decoding goes on."""
        try:
            return call(*args)
        except Exception as exc:  # noqa: BLE001 - said in a line, never a traceback
            self.counts["hook_errors"] += 1
            self._trouble(stream, "capture_stream_error", {
                "reason": f"decoding failed: {type(exc).__name__}: {exc}"[:300],
            })
            return None

    # -- lines of its own ------------------------------------------------------------

    def _trouble(self, stream: Stream, event: str, fields: dict[str, Any]) -> None:
        """One line per stream and kind of trouble (the counts are in the summary)."""
        if event in stream.reported:
            return
        stream.reported.add(event)
        self._note(event, {**self._addresses(stream), **fields})

    def _addresses(self, stream: Stream) -> dict[str, Any]:
        client = stream.client or stream.ends[0]
        server = stream.server
        return {
            "conn": f"capture-{stream.number}",
            "client_address": _address(client),
            "server_address": _address(server),
        }

    def _note(self, event: str, fields: dict[str, Any]) -> None:
        """A line of the capture's own: to the output, unless only some apis were asked
        for (then the summary goes to `notes`, and the rest is in its counts)."""
        fields["event"] = event
        fields["ts"] = self.log.capture_time()
        if not self.log.apis:
            self.output.msg(render(fields))
        elif event == "capture_summary" and self.notes is not None:
            self.notes.msg(render(fields))


def _address(end: Endpoint) -> str:
    host, port = end
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _first_bytes(waiting: list[tuple[Endpoint, Event]]) -> dict[Endpoint, bytes]:
    """The first bytes each side sent (up to DECIDE_BYTES), before any gap."""
    firsts: dict[Endpoint, bytes] = {}
    stopped: set[Endpoint] = set()
    for sender, event in waiting:
        if sender in stopped:
            continue
        if isinstance(event, Gap):
            if sender in firsts:
                stopped.add(sender)
            continue
        have = firsts.get(sender, b"")
        firsts[sender] = have + event.data[: DECIDE_BYTES - len(have)]
        if len(firsts[sender]) >= DECIDE_BYTES:
            stopped.add(sender)
    return firsts


def _decodes(frame: bytes, policy: Any) -> bool:
    try:
        decode_request(frame, policy)
    except UnknownApiError:
        return True  # a version past the codec's: still Kafka
    except DecodeError:
        return False
    return True


def _is_tls(data: bytes) -> bool:
    """A TLS record header: handshake, alert, change cipher spec or application data,
    version 3.0-3.4 (as a Kafka length prefix, over 335 MB: never a plausible frame)."""
    return len(data) >= 3 and data[0] in (0x14, 0x15, 0x16, 0x17) and data[1] == 3 and data[2] <= 4


def _plausible_request(head: bytes, size: int, names: dict[int, str] | None) -> bool | None:
    if len(head) < min(size, sasl.MIN_PLAUSIBLE_HEAD):
        return None
    if not sasl.looks_like_request(head, size):
        return False
    return names is None or _REQUEST_HEADER.unpack_from(head, 0)[0] in names


def _looks_like_request_frame(data: bytes, names: dict[int, str]) -> bool | None:
    """Whether a stream's first bytes are a length prefix and a request header."""
    if len(data) < 4:
        return None
    (size,) = _INT32.unpack_from(data, 0)
    if size < sasl.MIN_PLAUSIBLE_HEAD or size > MAX_PLAUSIBLE_FRAME:
        return False
    return _plausible_request(data[4 : 4 + HEAD_BYTES], size, names)
