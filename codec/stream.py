"""Decode a frame as its bytes stream past, keeping only the field being parsed.

The whole-frame decoders (codec/messages.py) need the frame in one buffer. A proxy
that forwards a 60 MB Fetch response as it arrives would have to keep all of it to
decode it afterwards. `FrameStream` is fed the frame's pieces instead, in any sizes,
and walks the message's layout (codec/layout/, the description the whole-frame
decoders run: any api and version) as they come. It buffers only a field cut by a piece border,
and only up to `StreamLimits.max_field_bytes`.

What it gives is what the whole-frame decoder gives (header dict, body dict, same
keys and values), except where that would cost the frame's size:

* a `records` field is a `StreamedRecords`: the `RecordStats` of its batch headers,
  parsed as they pass, and the payloads skipped. With `record_detail_bytes` the first
  whole batches up to that many bytes are kept too, for record-level detail.
* a `bytes` field longer than `max_field_bytes` is None (it is skipped); shorter ones
  are `bytes`, not views (the pieces they came in are gone once fed).
* array elements past `max_elements` (over the whole frame; numbers: per array) are
  parsed and dropped, `dropped_elements` counts them; as in the whole-frame decoders,
  more than `DEFAULT_ELEMENT_BUDGET` struct, string or bytes elements is a DecodeError.
* bytes after the message's last field (`_trailing`) are kept up to `max_field_bytes`.

Bad input raises DecodeError and nothing else, as early as it can be told (the frame's
size is known from its length prefix, so counts and lengths are checked against it).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from codec import wire
from codec.absent import ReadOnlyDict
from codec.accel import Decoder, decoder
from codec.errors import DecodeError
from codec.interpreter import fresh
from codec.kinds import FORMATS, Framing, Kind
from codec.layout import Field, Struct, layout
from codec.messages import DEFAULT_POLICY, HeaderPolicy, Request, Response, messages_for
from codec.records.batch import LOG_OVERHEAD, MAGIC_OFFSET, V2_HEADER_SIZE, read_v2_header
from codec.records.common import DEFAULT_MAX_BYTES
from codec.records.legacy import read_legacy_header
from codec.records.stats import RecordStats, add_batch

# A walker step: yields (nothing) when it needs the next piece, returns its value.
Step = Generator[None, None, Any]

# The shortest legal entry of a records field (up to its magic byte), after offset+length.
_MIN_ENTRY = MAGIC_OFFSET + 1 - LOG_OVERHEAD
_HEAD_AFTER_PREFIX = V2_HEADER_SIZE - LOG_OVERHEAD


@dataclass(frozen=True)
class StreamLimits:
    """What one streamed frame may make the decoder keep."""

    max_field_bytes: int = 65536  # a string, bytes value or tagged field held to parse it
    max_elements: int = 20_000  # array elements materialised over the frame
    record_detail_bytes: int = 0  # whole record batches kept for record-level detail
    # Wall time one piece may take to walk (0: no bound). A piece of tiny elements can
    # hold 85,000 of them: past this the frame is a DecodeError and the rest streams by
    # unparsed, so decoding never holds an event loop for long. Checked every 256 steps.
    max_seconds_per_piece: float = 0.0
    decompression_limit: int = DEFAULT_MAX_BYTES  # as summarize's max_bytes


@dataclass(slots=True)
class StreamedRecords:
    """A records field that streamed past: its batch headers' stats, not its bytes."""

    size: int  # bytes the field took
    stats: RecordStats
    detail: bytes = b""  # the first whole batches, if record detail was asked for

    def __len__(self) -> int:
        return self.size


_EMPTY = memoryview(b"")
_MISSING: Any = object()  # an element the interpreter did not decode (see FrameStream._whole_element)
# What a compiled decoder may raise on bad input (codec/messages.py translates them too)
_MALFORMED = (DecodeError, UnicodeDecodeError, struct.error, IndexError, OverflowError, ValueError, TypeError)


class _Input:
    """The piece being walked, and a field cut by a piece border."""

    __slots__ = ("view", "pos", "carry", "base")

    def __init__(self) -> None:
        self.view = _EMPTY
        self.pos = 0
        self.carry = bytearray()
        self.base = 0  # frame offset of view[0]

    @property
    def offset(self) -> int:
        return self.base + self.pos

    def take(self, n: int) -> memoryview | None:
        """n bytes from the piece if it holds them (the usual case), else None."""
        pos = self.pos
        if len(self.view) - pos >= n and not self.carry:
            self.pos = pos + n
            return self.view[pos : pos + n]
        return None

    def gather(self, n: int) -> Step:
        """n bytes across pieces, copied (n is bounded by the caller)."""
        carry = self.carry
        while True:
            view, pos = self.view, self.pos
            got = min(n - len(carry), len(view) - pos)
            carry += view[pos : pos + got]
            self.pos = pos + got
            if len(carry) == n:
                out = bytes(carry)
                carry.clear()
                return memoryview(out)
            yield

    def skip(self, n: int) -> Step:
        while True:
            got = min(n, len(self.view) - self.pos)
            self.pos += got
            n -= got
            if not n:
                return None
            yield


_PACKERS = {kind: struct.Struct(">" + code) for kind, code in FORMATS.items()}
# Enum members read once: a read through the enum class costs many times a plain
# constant's (bench.proxy.choices, "enum member read").
_BOOL, _UUID, _STRING, _BYTES, _RECORDS, _STRUCT, _ARRAY = (
    Kind.BOOL, Kind.UUID, Kind.STRING, Kind.BYTES, Kind.RECORDS, Kind.STRUCT, Kind.ARRAY
)
_COMPACT, _INT16_FRAMING = Framing.COMPACT, Framing.INT16
# Array elements that hold no records field, decoded whole by the interpreter when they
# lie inside the piece (the usual case, and most of the work in big arrays): their
# decoders, by element struct.
_WHOLE: dict[Struct, Decoder | None] = {}


def _whole_decoder(struct: Struct) -> Decoder | None:
    if struct not in _WHOLE:
        _WHOLE[struct] = None if _has_records(struct) else decoder(struct)
    return _WHOLE[struct]


def _has_records(struct: Struct) -> bool:
    for field in struct.fields + struct.tagged:
        inner = (field.element or field).struct
        if field.kind is Kind.RECORDS or (inner is not None and _has_records(inner)):
            return True
    return False


class FrameStream:
    """Push decoder of one frame: `feed` its pieces in order, then `finish`.

    `size` is the frame's size after its length prefix. A DecodeError from `feed` ends
    the decode (later pieces are ignored, `finish` raises it again).
    """

    def __init__(
        self,
        header: str,
        header_version: int,
        body: str,
        body_version: int,
        size: int,
        limits: StreamLimits = StreamLimits(),  # noqa: B008 - frozen
        partial_tail: bool = False,
    ) -> None:
        self.size = size
        self.limits = limits
        self.partial_tail = partial_tail  # a records field may end inside a batch (Fetch)
        self.dropped_elements = 0
        self._budget = limits.max_elements
        self._walk_budget = wire.DEFAULT_ELEMENT_BUDGET  # elements parsed, kept or not
        self._deadline = 0.0  # perf_counter() by which the current piece must be walked
        self._steps = 0
        self._in = _Input()
        self._error: DecodeError | None = None
        self._result: tuple[dict[str, Any], dict[str, Any]] | None = None
        self._walk = self._frame(_layout(header, header_version), _layout(body, body_version))
        self._step()  # up to the first byte it needs (an error is kept for finish)

    @property
    def offset(self) -> int:
        """Bytes of the frame walked so far."""
        return self._in.offset

    def feed(self, piece: bytes | bytearray | memoryview) -> None:
        """Walk the next piece; DecodeError the first time the frame proves bad (later
        pieces are then ignored)."""
        if self._error is not None:
            return
        inp = self._in
        view = piece if isinstance(piece, memoryview) else memoryview(piece)
        if inp.base + len(view) > self.size:
            self._error = DecodeError("more bytes than the frame's length", offset=self.size)
            raise self._error
        inp.view, inp.pos = view, 0
        if self.limits.max_seconds_per_piece:
            self._deadline = time.perf_counter() + self.limits.max_seconds_per_piece
        try:
            self._step()
        finally:
            # The walker only waits for a piece once it took all of this one. Let go of
            # the caller's buffer: only its length matters now.
            inp.base += len(view)
            inp.view, inp.pos = _EMPTY, 0
        if self._error is not None:
            raise self._error

    def finish(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(header, body) once the whole frame was fed; DecodeError if not."""
        if self._error is not None:
            raise self._error
        if self._result is None:
            raise DecodeError("frame ended inside a field", offset=self.offset)
        return self._result

    def _step(self) -> None:
        if self._result is not None:
            return
        try:
            next(self._walk)
        except StopIteration as done:
            self._result = done.value
        except DecodeError as exc:
            self._error = exc
        except (struct.error, ValueError, OverflowError, IndexError, TypeError) as exc:
            reason = exc.reason if isinstance(exc, UnicodeDecodeError) else type(exc).__name__
            self._error = DecodeError(f"malformed input: {reason}", offset=self._in.offset)

    # -- the walk ------------------------------------------------------------

    def _frame(self, header: Struct, body: Struct) -> Step:
        end = self.size
        head = yield from self._struct(header, end)
        out = yield from self._struct(body, end)
        left = end - self._in.offset
        if left:
            if left <= self.limits.max_field_bytes:
                out["_trailing"] = bytes((yield from self._bytes(left, end)))
            else:
                yield from self._in.skip(left)
                out["_trailing"] = None
        return head, out

    def _bytes(self, n: int, end: int) -> Step:
        inp = self._in
        if inp.offset + n > end:
            raise wire.short(inp.offset)
        got = inp.take(n)
        if got is None:
            got = yield from inp.gather(n)
        return got

    def _uvarint(self, end: int) -> Step:
        result = shift = 0
        while True:
            byte = (yield from self._bytes(1, end))[0]
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return result
            shift += 7
            if shift > 28:
                raise wire.invalid(self._in.offset, "varint longer than 5 bytes")

    def _length(self, field: Field, end: int) -> Step:
        if field.framing == _COMPACT:
            return (yield from self._uvarint(end)) - 1
        if field.framing == _INT16_FRAMING:
            return wire.INT16.unpack_from((yield from self._bytes(2, end)))[0]
        return wire.INT32.unpack_from((yield from self._bytes(4, end)))[0]

    def _struct(self, struct: Struct, end: int) -> Step:
        out = dict.fromkeys(struct.template)  # the decoded dict's key order, tagged ones in place
        for field in struct.fields:
            # What lies in the piece (most fields, and the lengths and counts before the
            # others) is read in line: each walker step is a generator made and run
            # (bench/PROFILE.md, "Kept, and what it saved").
            kind = field.kind
            if kind < _UUID or _STRING <= kind <= _BYTES:
                value = self._now(field, end)
                if value is _MISSING:
                    value = yield from self._field(field, end)
            elif kind == _ARRAY:
                value = yield from self._array(field, end)
            elif kind == _RECORDS and (length := self._length_now(field, end)) is not None:
                if self._in.offset + length > end:
                    raise wire.short(self._in.offset, "bytes")
                value = yield from self._records(length)
            else:
                value = yield from self._field(field, end)
            out[field.name] = value
        if struct.flexible:  # tagged fields exist in flexible versions only
            inp = self._in
            if (
                not struct.tagged
                and not inp.carry
                and inp.pos < min(len(inp.view), end - inp.base)
                and not inp.view[inp.pos]
            ):
                inp.pos += 1  # the usual case: none, and none known
            else:
                yield from self._tags(struct, out, end)
        return out

    def _tags(self, struct: Struct, out: dict[str, Any], end: int) -> Step:
        inp = self._in
        for field in struct.tagged:
            out[field.name] = fresh(field.default)  # a new list or dict, else shared
        if not inp.carry and inp.pos < min(len(inp.view), end - inp.base) and not inp.view[inp.pos]:
            inp.pos += 1  # the usual case: no tagged fields
            return
        count = yield from self._uvarint(end)
        if not count:
            return
        if count > end - inp.offset:
            raise wire.invalid(inp.offset, "tagged field count exceeds the bytes left")
        known = {field.tag: field for field in struct.tagged}
        unknown: list[tuple[int, bytes]] = []
        explicit: list[int] = []
        for _ in range(count):
            self._tick()
            tag = yield from self._uvarint(end)
            size = yield from self._uvarint(end)
            stop = inp.offset + size
            if stop > end:
                raise wire.short(inp.offset, "tagged field")
            if tag in known:
                field = known[tag]
                value = yield from self._field(field, stop)
                if inp.offset != stop:
                    raise wire.invalid(inp.offset, "tagged field size mismatch")
                out[field.name] = value
                if value == field.default:
                    explicit.append(tag)
            else:
                if len(unknown) >= wire.MAX_UNKNOWN_TAGS:
                    raise wire.invalid(inp.offset, "too many tagged fields")
                if size > self.limits.max_field_bytes:
                    raise wire.invalid(inp.offset, "tagged field longer than a streamed field may be")
                unknown.append((tag, bytes((yield from self._bytes(size, stop)))))
        if unknown:
            out["_unknown_tags"] = unknown
        if explicit:
            out["_explicit_tags"] = explicit

    def _length_now(self, field: Field, end: int) -> int | None:
        """A length or count that lies whole in the piece and is not negative (then
        consumed), else None with nothing consumed: `_length` takes it."""
        inp = self._in
        if inp.carry:
            return None
        view, at = inp.view, inp.pos
        stop = min(len(view), end - inp.base)
        framing = field.framing
        if framing == _COMPACT:
            length = shift = 0
            while True:
                if at >= stop or shift > 28:
                    return None
                byte = view[at]
                at += 1
                length |= (byte & 0x7F) << shift
                if byte < 0x80:
                    break
                shift += 7
            length -= 1
        elif framing == _INT16_FRAMING:
            if at + 2 > stop:
                return None
            length = wire.INT16.unpack_from(view, at)[0]
            at += 2
        else:
            if at + 4 > stop:
                return None
            length = wire.INT32.unpack_from(view, at)[0]
            at += 4
        if length < 0:
            return None
        inp.pos = at
        return length

    def _now(self, field: Field, end: int) -> Any:
        """A number, or a string or bytes field not null, if it lies whole in the piece
        (then consumed; what `_field` gives), else _MISSING with nothing consumed:
        `_field` takes it, across pieces, and raises for bad input where it would have."""
        inp = self._in
        if inp.carry:
            return _MISSING
        view, pos = inp.view, inp.pos
        kind = field.kind
        if kind <= _BOOL:
            after = pos + field.size
            if after > min(len(view), end - inp.base):
                return _MISSING
            inp.pos = after
            return _PACKERS[kind].unpack_from(view, pos)[0]
        length = self._length_now(field, end)
        if length is None:
            return _MISSING
        at = inp.pos
        if length > self.limits.max_field_bytes or at + length > min(len(view), end - inp.base):
            inp.pos = pos
            return _MISSING
        inp.pos = at + length
        raw = view[at : at + length]
        return raw.tobytes().decode() if kind == _STRING else raw.tobytes()

    def _field(self, field: Field, end: int) -> Step:
        kind = field.kind
        if kind <= _BOOL:
            raw = yield from self._bytes(field.size, end)
            return _PACKERS[kind].unpack_from(raw)[0]
        if kind == _UUID:
            return wire.uuid_of(bytes((yield from self._bytes(16, end))))
        if kind == _STRUCT:
            if field.nullable:
                marker = (yield from self._bytes(1, end))[0]
                if marker == 0xFF:
                    return None
            assert field.struct is not None
            return (yield from self._struct(field.struct, end))
        if kind == _ARRAY:
            return (yield from self._array(field, end))
        length = yield from self._length(field, end)
        if length < 0:
            if field.nullable:
                return None
            raise wire.invalid(self._in.offset, "null in a field that is not nullable")
        if self._in.offset + length > end:
            raise wire.short(self._in.offset, "string" if kind == _STRING else "bytes")
        if kind == _RECORDS:
            return (yield from self._records(length))
        if length > self.limits.max_field_bytes:
            if kind == _STRING:
                raise wire.invalid(self._in.offset, "string longer than a streamed field may be")
            yield from self._in.skip(length)
            return None
        raw = yield from self._bytes(length, end)
        return raw.tobytes().decode() if kind == _STRING else raw.tobytes()

    def _array(self, field: Field, end: int) -> Step:
        inp = self._in
        count = self._length_now(field, end)
        if count is None:
            count = yield from self._length(field, end)
        if count < 0:
            if field.nullable:
                return None
            raise wire.invalid(inp.offset, "null array in a field that is not nullable")
        if count * field.min_size > end - inp.offset:
            raise wire.invalid(inp.offset, "array count exceeds the bytes left")
        element = field.element
        assert element is not None
        items: list[Any] = []
        if element.kind <= _BOOL:
            return (yield from self._fixed_array(element, count, end))
        self._walk_budget -= count
        if self._walk_budget < 0:
            # as the whole-frame decoders: a bound on the work a frame can ask for
            raise wire.invalid(inp.offset, "more array elements than the decode budget")
        whole = None if element.struct is None else _whole_decoder(element.struct)
        for _ in range(count):
            # Counted before the element is walked: a topic keeps its place ahead of
            # the partitions inside it.
            self._tick()
            keep = self._budget > 0
            if keep:
                self._budget -= 1
            item = _MISSING if whole is None else self._whole_element(whole, end)
            if item is _MISSING:
                if element.kind == _STRUCT and not element.nullable:
                    assert element.struct is not None
                    item = yield from self._struct(element.struct, end)
                else:
                    item = yield from self._field(element, end)
            if keep:
                items.append(item)
            else:
                self.dropped_elements += 1
        return items

    def _tick(self) -> None:
        self._steps += 1
        if not self._steps & 255 and self._deadline and time.perf_counter() > self._deadline:
            raise DecodeError(
                f"one piece took over {self.limits.max_seconds_per_piece} s to decode"
                " (limits.observe_seconds_per_read)",
                offset=self._in.offset,
            )

    def _whole_element(self, decoder: Decoder, end: int) -> Any:
        """The element at the input, decoded by the compiled decoder if it lies inside
        the piece; _MISSING (nothing consumed) if it does not, or is bad: the walker
        then takes it (and finds the error)."""
        inp = self._in
        if inp.carry:
            return _MISSING
        view, pos = inp.view, inp.pos
        stop = min(len(view), pos + end - inp.offset)  # this field's end, if in the piece
        budget = [self._walk_budget]
        try:
            item, after = decoder(view, pos, stop, budget)
        except _MALFORMED:
            return _MISSING
        inner = self._walk_budget - budget[0]  # elements of arrays inside it
        self._walk_budget = budget[0]
        self._budget -= inner
        inp.pos = after
        _own(item, self.limits.max_field_bytes)
        return item

    def _fixed_array(self, element: Field, count: int, end: int) -> Step:
        """Numbers: the first max_elements kept, the rest skipped in one go."""
        keep = min(count, self.limits.max_elements)
        items: list[Any] = []
        for _ in range(keep):
            self._tick()
            items.append((yield from self._field(element, end)))
        if count > keep:
            self.dropped_elements += count - keep
            yield from self._in.skip((count - keep) * element.size)
        return items

    def _records(self, length: int) -> Step:
        """Batch headers parsed as they pass; payloads skipped (or kept for detail)."""
        inp = self._in
        stats = RecordStats()
        keep = self.limits.record_detail_bytes
        detail = bytearray()
        left = length
        while left:
            self._tick()
            if left < LOG_OVERHEAD:
                yield from self._partial(left)
                break
            if not keep and not inp.carry and self._whole_v2_header(stats, left):
                # the usual case, in line: a v2 header inside this piece, no copy
                size = wire.INT32.unpack_from(inp.view, inp.pos + 8)[0]
                left -= LOG_OVERHEAD + size
                stop = inp.pos + LOG_OVERHEAD + size
                if stop <= len(inp.view):
                    inp.pos = stop
                else:
                    rest = stop - len(inp.view)
                    inp.pos = len(inp.view)
                    yield from inp.skip(rest)
                continue
            prefix = inp.take(LOG_OVERHEAD) or (yield from inp.gather(LOG_OVERHEAD))
            left -= LOG_OVERHEAD
            (size,) = wire.INT32.unpack_from(prefix, 8)
            if size < _MIN_ENTRY:
                raise DecodeError(f"record batch length {size} invalid", direction="records",
                                  offset=inp.offset - LOG_OVERHEAD)
            if size > left:
                yield from self._partial(left)
                break
            head_size = min(size, _HEAD_AFTER_PREFIX)
            head = bytes(prefix) + bytes(inp.take(head_size) or (yield from inp.gather(head_size)))
            add_batch(stats, self._batch_header(head, size))
            rest = size - head_size
            if keep and len(detail) + LOG_OVERHEAD + size <= keep:
                detail += head
                detail += yield from self._bytes_any(rest)
            else:
                keep = 0  # detail is the first whole batches, none after a gap
                if rest <= len(inp.view) - inp.pos:
                    inp.pos += rest
                else:
                    yield from inp.skip(rest)
            left -= size
        stats.truncated_bytes = length - stats.bytes
        return StreamedRecords(length, stats, bytes(detail))

    def _whole_v2_header(self, stats: RecordStats, left: int) -> bool:
        """Count the v2 batch at the input if its header is all in the piece and its
        length is plausible (else False, nothing consumed: the general path decides)."""
        inp = self._in
        view, pos = inp.view, inp.pos
        if len(view) - pos < V2_HEADER_SIZE or view[pos + MAGIC_OFFSET] != 2:
            return False
        (size,) = wire.INT32.unpack_from(view, pos + 8)
        if not _HEAD_AFTER_PREFIX <= size <= left - LOG_OVERHEAD:
            return False
        limit = self.limits.decompression_limit
        add_batch(stats, read_v2_header(view, pos, size, verify_crc=False, max_bytes=limit))
        return True

    def _bytes_any(self, n: int) -> Step:
        """n bytes (bounded by record_detail_bytes), across pieces."""
        if not n:
            return _EMPTY
        return (yield from self._bytes(n, self.size))

    def _partial(self, left: int) -> Step:
        if not self.partial_tail:
            raise DecodeError("records end inside a batch", direction="records", offset=self._in.offset)
        yield from self._in.skip(left)

    def _batch_header(self, head: bytes, size: int) -> Any:
        view = memoryview(head)
        magic = head[MAGIC_OFFSET]
        if magic == 2:
            return read_v2_header(view, 0, size, verify_crc=False, max_bytes=self.limits.decompression_limit)
        if magic < 2:
            return read_legacy_header(view, 0, size, verify_crc=False)
        raise DecodeError(f"unknown record magic {magic}", direction="records", offset=self._in.offset)


def _own(value: Any, cap: int) -> Any:
    """`value` with its views of the piece (bytes fields, unknown tagged fields) turned
    into bytes, or None past `cap`: the piece is gone once walked. Dicts and lists are
    changed in place (shared read-only defaults hold no views)."""
    if isinstance(value, memoryview):
        return value.tobytes() if len(value) <= cap else None
    if isinstance(value, dict):
        if not isinstance(value, ReadOnlyDict):
            for key, inner in value.items():
                if isinstance(inner, memoryview | dict | list | tuple):
                    value[key] = _own(inner, cap)
        return value
    if isinstance(value, list):
        for index, inner in enumerate(value):
            if isinstance(inner, memoryview | dict | list | tuple):
                value[index] = _own(inner, cap)
        return value
    if isinstance(value, tuple):
        return tuple(_own(inner, cap) for inner in value)
    return value


def _layout(name: str, version: int) -> Struct:
    try:
        return layout(name, version)
    except KeyError:
        raise DecodeError(f"{name} has no version {version}", api_version=version) from None


def request_stream(
    api_key: int,
    api_version: int,
    size: int,
    policy: HeaderPolicy = DEFAULT_POLICY,
    limits: StreamLimits = StreamLimits(),  # noqa: B008 - frozen
) -> FrameStream:
    """A FrameStream for a request frame of `size` bytes; UnknownApiError as decode_request."""
    request, _ = messages_for(api_key, api_version)
    body_version = policy.body_version(api_key, api_version)
    header_version = policy.request_header_version(api_key, api_version)
    return FrameStream("RequestHeader", header_version, request.name, body_version, size, limits)


def response_stream(
    api_key: int,
    api_version: int,
    size: int,
    policy: HeaderPolicy = DEFAULT_POLICY,
    limits: StreamLimits = StreamLimits(),  # noqa: B008 - frozen
    partial_tail: bool = True,
) -> FrameStream:
    """A FrameStream for a response to (api_key, api_version) of `size` bytes."""
    _, response = messages_for(api_key, api_version)
    body_version = policy.body_version(api_key, api_version)
    header_version = policy.response_header_version(api_key, api_version)
    return FrameStream("ResponseHeader", header_version, response.name, body_version, size, limits, partial_tail)


def as_request(api_key: int, api_version: int, stream: FrameStream, policy: HeaderPolicy = DEFAULT_POLICY) -> Request:
    header, body = stream.finish()
    return Request(api_key, api_version, header, body, policy.request_header_version(api_key, api_version))


def as_response(api_key: int, api_version: int, stream: FrameStream, policy: HeaderPolicy = DEFAULT_POLICY) -> Response:
    header, body = stream.finish()
    return Response(api_key, api_version, header, body, policy.response_header_version(api_key, api_version))
