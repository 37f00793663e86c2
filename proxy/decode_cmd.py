"""`kafkalens decode`: Kafka traffic as JSON lines.

A pcap or pcapng capture gives the proxy's request log lines for the traffic in it
(proxy/capture/decode.py); a file of bare length-prefixed frames gives one object per
frame, its group payloads (KIP-559) decoded and SASL tokens reduced to the principal.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import struct
import sys
import time
from collections.abc import Iterator
from typing import Any

from codec import ApiKey, DecodeError, decode_request, decode_response
from codec.groups import group_payloads
from codec.render import to_jsonable
from codec.sasl import sasl_principal
from codec.schema import api_names
from proxy.capture.decode import CaptureDecoder, CaptureLimits
from proxy.config import parse_size
from proxy.console import OneLineParser, fail
from proxy.observe.summary import SummaryOptions
from proxy.preflight import unknown_api

PCAP_MAGICS = frozenset({
    b"\xa1\xb2\xc3\xd4", b"\xd4\xc3\xb2\xa1",  # microsecond timestamps
    b"\xa1\xb2\x3c\x4d", b"\x4d\x3c\xb2\xa1",  # nanosecond timestamps
    b"\x0a\x0d\x0d\x0a",  # pcapng
})
SASL_HANDSHAKE, SASL_AUTHENTICATE = ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE


def parse_api(text: str) -> tuple[int, int]:
    try:
        key, version = text.split(":")
        return int(key), int(version)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected API_KEY:VERSION, got {text!r}") from None


def split_frames(data: bytes) -> Iterator[tuple[int, bytes | None, str | None]]:
    """(offset, frame, error) for each length-prefixed frame in `data`."""
    pos = 0
    while pos < len(data):
        if len(data) - pos < 4:
            yield pos, None, f"{len(data) - pos} bytes left, too few for a length prefix"
            return
        (length,) = struct.unpack_from(">i", data, pos)
        if length < 0 or pos + 4 + length > len(data):
            yield pos, None, f"frame length {length} does not fit the {len(data) - pos - 4} bytes left"
            return
        yield pos, data[pos + 4 : pos + 4 + length], None
        pos += 4 + length


class FrameContext:
    """What earlier frames of the file tell about later ones: the SASL mechanism a
    SaslHandshake named, the protocol type a JoinGroup request named."""

    def __init__(self) -> None:
        self.mechanism: str | None = None
        self.protocol_type: str | None = None


def describe(
    frame: bytes, response_to: tuple[int, int] | None, context: FrameContext | None = None
) -> dict[str, Any]:
    context = context or FrameContext()
    try:
        if response_to is None:
            message: Any = decode_request(frame)
        else:
            message = decode_response(frame, *response_to)
    except DecodeError as exc:
        return {"error": str(exc), "offset": exc.offset, "length": len(frame)}
    kind = "response" if response_to else "request"
    body = to_jsonable(message.body, partial_tail=response_to is not None)
    _learn(context, message, kind)
    out = {
        "direction": kind,
        "api_key": message.api_key,
        "api": api_names().get(message.api_key),
        "api_version": message.api_version,
        "header_version": message.header_version,
        "header": to_jsonable(message.header),
        "body": body,
    }
    payloads = group_payloads(message.api_key, kind, _with_protocol_type(message.body, context))
    if payloads is not None:
        out["group_payloads"] = to_jsonable(payloads)
    if message.api_key == SASL_AUTHENTICATE and kind == "request":
        _redact_sasl(body, message.body.get("auth_bytes"), context)
    return out


def _learn(context: FrameContext, message: Any, kind: str) -> None:
    body = message.body
    if message.api_key == SASL_HANDSHAKE and kind == "request":
        context.mechanism = body.get("mechanism")
    if message.api_key == ApiKey.JOIN_GROUP and kind == "request":
        context.protocol_type = body.get("protocol_type")


def _with_protocol_type(body: dict[str, Any], context: FrameContext) -> dict[str, Any]:
    """JoinGroup responses before v7 and SyncGroups before v5 do not name the protocol
    type: the JoinGroup request earlier in the file does."""
    if body.get("protocol_type") or not context.protocol_type:
        return body
    return {**body, "protocol_type": context.protocol_type}


def _redact_sasl(body: dict[str, Any], token: Any, context: FrameContext) -> None:
    """A SaslAuthenticate token carries the password: only its size and the principal
    it names are shown."""
    if token is None:
        return
    body["auth_bytes"] = {"length": len(token), "redacted": True}
    if context.mechanism:
        body["principal"] = sasl_principal(context.mechanism, token)


DESCRIPTION = """\
Decode Kafka traffic to JSON lines.

A pcap or pcapng capture (tcpdump -w, dumpcap, Wireshark): every TCP connection is
reassembled, each response paired with its request by correlation id, and each
exchange printed as the line `kafkalens proxy` writes to its request log for it (same
fields, `ts` and latency_ms from the capture), with connection_open/connection_close
lines; `kafkalens report` reads the output. Connections to a --port are Kafka; others
are Kafka if their first bytes are a request. What the capture lacks is said in
capture_* lines (a stream joined mid-way, bytes not captured, a response without its
request, a TLS stream, which is not decoded), and a capture_summary line ends the
output, with the limits hit.

A file of bare length-prefixed frames: one JSON object per frame, requests unless
--response-to says which request the frames answer; group payloads (JoinGroup,
SyncGroup, DescribeGroups) decoded, a SaslAuthenticate token shown as its size and
principal only.
"""


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="kafkalens decode",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file", nargs="?", default="-", help="a capture or a file of frames, or - for stdin")
    parser.add_argument(
        "--response-to",
        type=parse_api,
        metavar="API_KEY:VERSION",
        help="frames: decode them as responses to this request (api key and version)",
    )
    capture = parser.add_argument_group("captures")
    capture.add_argument("--port", type=int, action="append", default=[],
                         help="a broker port: its connections are Kafka (repeat for more)")
    capture.add_argument("--filter", action="append", default=[], metavar="API",
                         help="print only exchanges of this api, by name or key (repeat for"
                         " more); the capture_summary then goes to stderr")
    capture.add_argument("--record-detail", action="store_true",
                         help="per-record stats and header keys, as request_log.record_detail")
    limits = CaptureLimits()
    capture.add_argument("--max-streams", type=_positive, default=limits.max_streams, metavar="N",
                         help="connections followed at once; the least recently active makes room "
                         "(default %(default)s)")
    capture.add_argument("--max-stream-bytes", type=_bytes, default=limits.max_stream_bytes, metavar="BYTES",
                         help="per direction: out-of-order bytes held, and the largest frame "
                         "assembled whole (larger ones are decoded as they pass) (default %(default)s)")
    capture.add_argument("--max-in-flight", type=_positive, default=limits.max_in_flight, metavar="N",
                         help="requests per connection awaiting their response (default %(default)s)")
    capture.add_argument("--max-record-bytes", type=_bytes, default=limits.max_record_bytes, metavar="BYTES",
                         help="the largest capture record read (default %(default)s)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    check_filters(args.filter)
    try:
        handle: Any = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")  # noqa: SIM115
    except OSError as exc:
        fail(f"cannot read {args.file}: {exc.strerror or exc}")
    try:
        head = handle.peek(4)[:4]
        if head in PCAP_MAGICS:
            return _decode_capture(handle, args)
        data = handle.read()
        what = _not_frames(data, args.response_to)
        name = "standard input" if args.file == "-" else args.file
        if what is not None:
            fail(f"{name}: not a pcap or pcapng capture, nor length-prefixed Kafka frames ({what})")
        if args.filter or args.port or args.record_detail:
            fail(f"--filter, --port and --record-detail read captures; {name} holds bare frames")
        return _decode_frames(data, args.response_to)
    finally:
        if handle is not sys.stdin.buffer:
            handle.close()


def check_filters(filters: list[str]) -> None:
    """Each --filter an api the codec knows, by name or key, else one line naming the
    nearest (as check-config names request_log.apis)."""
    keys = api_names()
    names = set(keys.values())
    for given in filters:
        if given in names or given.isdigit() and int(given) in keys:
            continue
        fail(f"--filter: {unknown_api(given, names)}")


def _not_frames(data: bytes, response_to: tuple[int, int] | None) -> str | None:
    """Why `data` is no file of frames (None: its first frame is one): empty, a length
    prefix that does not fit, or (for requests) an api key the codec does not know."""
    if not data:
        return "it is empty"
    begins = f"it begins {data[:16]!r}"
    _offset, frame, _error = next(split_frames(data))
    if frame is None:
        return begins
    if response_to is None and (len(frame) < 4 or int.from_bytes(frame[:2], "big") not in api_names()):
        return begins
    return None


def _bytes(text: str) -> int:
    """A positive number of bytes, or one with a unit (1MiB), as in the config file."""
    value = parse_size(text) if not text.strip().isdigit() else int(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"must be bytes, or with a unit (1MiB, 10MB), got {text!r}")
    return _positive(str(value))


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _decode_capture(handle: Any, args: argparse.Namespace) -> int:
    limits = CaptureLimits(args.max_streams, args.max_stream_bytes, args.max_in_flight, args.max_record_bytes)
    summary = SummaryOptions(record_detail=args.record_detail)
    out = sys.stdout.buffer
    sys.stdout.flush()
    decoder = CaptureDecoder(
        out, frozenset(args.port), limits, tuple(args.filter), summary, notes=sys.stderr.buffer
    )
    progress = Progress.on_terminal(handle)
    try:
        status = decoder.run(handle, progress)
        if progress is not None:
            progress.done()
        out.flush()
        return status
    except BrokenPipeError:  # `kafkalens decode x.pcap | head`: the reader has all it wants
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


class Progress:
    """`decode kafka.pcap > out.jsonl` on a terminal: one line on stderr, rewritten
    twice a second, of how far it is (the file's share read, the exchanges so far and
    their rate): a large capture takes minutes (bench/README.md, "Decoding captures"). Only when
    stderr is a terminal and stdout is not (the lines would run into it)."""

    EVERY_SECONDS = 0.5

    def __init__(self, handle: Any, size: int | None) -> None:
        self.handle = handle
        self.size = size
        self.started = self.last = time.monotonic()
        self.shown = False

    @classmethod
    def on_terminal(cls, handle: Any) -> Progress | None:
        if not sys.stderr.isatty() or sys.stdout.isatty():
            return None
        try:
            size: int | None = os.fstat(handle.fileno()).st_size or None
        except (OSError, ValueError, AttributeError):
            size = None
        return cls(handle, size)

    def __call__(self, decoder: CaptureDecoder) -> None:
        now = time.monotonic()
        if now - self.last < self.EVERY_SECONDS:
            return
        self.last = now
        exchanges = decoder.counts["exchanges"]
        rate = exchanges / max(now - self.started, 1e-9)
        where = ""
        if self.size:
            with contextlib.suppress(OSError, ValueError):
                read = self.handle.tell()
                where = f"{100 * read // self.size:3d} % ({read / 2**20:,.0f} of {self.size / 2**20:,.0f} MiB), "
        sys.stderr.write(f"\rkafkalens decode: {where}{exchanges:,} exchanges, {rate:,.0f}/s ")
        sys.stderr.flush()
        self.shown = True

    def done(self) -> None:
        if self.shown:  # the line cleared: what follows starts on a clean line
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def _decode_frames(data: bytes, response_to: tuple[int, int] | None) -> int:
    status = 0
    context = FrameContext()
    for offset, frame, error in split_frames(data):
        if frame is None:
            result: dict[str, Any] = {"offset": offset, "error": error}
            status = 1
        else:
            result = {"offset": offset, **describe(frame, response_to, context)}
            status = status or (1 if "error" in result else 0)
        print(json.dumps(result, separators=(",", ":")))
    return status


if __name__ == "__main__":
    raise SystemExit(main())
