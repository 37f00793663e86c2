"""Decode and encode whole request and response frames.

A frame here is the bytes after the 4-byte length prefix. Decoding a response needs
only the api key and version of its request: no other state.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from codec import accel, interpreter
from codec.accel import Decoder
from codec.errors import DecodeError, EncodeError
from codec.generated.api_key import ApiKey
from codec.layout import layout
from codec.schema import Message, api_messages, message
from codec.wire import DEFAULT_ELEMENT_BUDGET

_API_KEY_AND_VERSION = struct.Struct(">hh")


class UnknownApiError(DecodeError):
    """An api key or version the codec has no definition for (forward it untouched)."""


@dataclass(slots=True)
class Request:
    api_key: int
    api_version: int
    header: dict[str, Any]
    body: dict[str, Any]
    header_version: int = 1

    @property
    def correlation_id(self) -> int:
        return int(self.header["correlation_id"])


@dataclass(slots=True)
class Response:
    api_key: int
    api_version: int
    header: dict[str, Any]
    body: dict[str, Any]
    header_version: int = 0

    @property
    def correlation_id(self) -> int:
        return int(self.header["correlation_id"])


@dataclass(frozen=True)
class HeaderPolicy:
    """Which request header version each (api key, version) uses.

    The schemas say it for the messages they cover (flexible versions use header v2,
    KIP-1313's `headerVersions` name v3). `header_v3` declares more, as data, for
    brokers that adopt KIP-1313 for every RPC: {api_key: first version on header v3},
    or {api_key: (first, last)} for a closed range. A declared version past the
    schema's newest reuses the newest body, since the KIP changes only the header of
    those RPCs.
    """

    header_v3: Mapping[int, int | tuple[int, int | None]] = field(default_factory=dict)
    # Decode with the Python interpreter even where the C one is active (codec/accel.py):
    # the reference, for tests and benchmarks that compare the two.
    pure: bool = False
    # (api key, version, is response) -> (header version, header decoder, body decoder):
    # asked for every frame, and the answer never changes for a policy.
    _plans: dict[tuple[int, int, bool], tuple[int, Decoder, Decoder]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def plan(self, api_key: int, version: int, response: bool) -> tuple[int, Decoder, Decoder]:
        """(header version, header decoder, body decoder) of a frame; UnknownApiError
        for an api key or version without a definition."""
        key = (api_key, version, response)
        found = self._plans.get(key)
        if found is None:
            found = self._plans[key] = self._make_plan(api_key, version, response)
        return found

    def _make_plan(self, api_key: int, version: int, response: bool) -> tuple[int, Decoder, Decoder]:
        request, reply = messages_for(api_key, version)
        if response:
            header_version = self.response_header_version(api_key, version)
            header = struct_decoder("ResponseHeader", header_version, self.pure)
        else:
            header_version = self.request_header_version(api_key, version)
            header = struct_decoder("RequestHeader", header_version, self.pure)
        name = (reply if response else request).name
        return header_version, header, struct_decoder(name, self.body_version(api_key, version), self.pure)

    def declares_v3(self, api_key: int, version: int) -> bool:
        rule = self.header_v3.get(api_key)
        if rule is None:
            return False
        first, last = (rule, None) if isinstance(rule, int) else rule
        return version >= first and (last is None or version <= last)

    def request_header_version(self, api_key: int, version: int) -> int:
        if self.declares_v3(api_key, version):
            return 3
        request, _ = messages_for(api_key, version)
        definition = request.definition(self.body_version(api_key, version))
        assert definition is not None
        declared = definition.header_version(version)
        if declared is not None:
            return declared
        if api_key == ApiKey.CONTROLLED_SHUTDOWN and version == 0:
            return 0
        return 2 if definition.is_flexible(version) else 1

    def response_header_version(self, api_key: int, version: int) -> int:
        _, response = messages_for(api_key, version)
        definition = response.definition(self.body_version(api_key, version))
        assert definition is not None
        declared = definition.header_version(version)
        if declared is not None:
            return declared
        if api_key == ApiKey.API_VERSIONS:
            # KIP-511: clients read the error code at a fixed offset, whatever the version.
            return 0
        return 1 if definition.is_flexible(self.body_version(api_key, version)) else 0

    def body_version(self, api_key: int, version: int) -> int:
        request, _ = messages_for(api_key, None)
        if version in request.versions:
            return version
        if version > request.max_version and self.declares_v3(api_key, version):
            return request.max_version
        raise UnknownApiError(f"unknown version {version}", api_key=api_key, api_version=version)

    def knows(self, api_key: int, version: int) -> bool:
        try:
            self.body_version(api_key, version)
        except UnknownApiError:
            return False
        return True


DEFAULT_POLICY = HeaderPolicy()
PURE_POLICY = HeaderPolicy(pure=True)


def messages_for(api_key: int, version: int | None) -> tuple[Message, Message]:
    pair = api_messages().get(api_key)
    if pair is None:
        raise UnknownApiError("unknown api key", api_key=api_key, api_version=version)
    return pair


@cache
def struct_decoder(name: str, version: int, pure: bool = False) -> Decoder:
    """The decoder of message `name` at `version` (codec/accel.py: C when active; `pure`:
    the Python interpreter); UnknownApiError if the schemas do not define it."""
    try:
        described = layout(name, version)
    except KeyError:
        api_key = message(name).api_key  # a name the schemas do not have: KeyError
        raise UnknownApiError(f"{name} has no version {version}", api_key=api_key, api_version=version) from None
    return accel.decoder(described, pure)


# What an interpreter raises on malformed input besides DecodeError (a ValueError
# itself, re-raised first): UnicodeDecodeError for a string that is not UTF-8, the rest
# as a guard. Translated to DecodeError at the offset where that decode began.
_MALFORMED = (UnicodeDecodeError, struct.error, IndexError, OverflowError, ValueError, TypeError)


def _malformed(exc: Exception, pos: int) -> DecodeError:
    if isinstance(exc, UnicodeDecodeError):
        return DecodeError(f"invalid UTF-8 in a string: {exc.reason}", offset=pos)
    return DecodeError(f"malformed input: {type(exc).__name__}", offset=pos)


def _run(
    decoder: Decoder, buf: memoryview, pos: int, end: int, budget: list[int]
) -> tuple[dict[str, Any], int]:
    try:
        return decoder(buf, pos, end, budget)
    except DecodeError:
        raise
    except _MALFORMED as exc:
        raise _malformed(exc, pos) from None


TRAILING = "_trailing"


def _header_and_body(
    header_decoder: Decoder, body_decoder: Decoder, buf: memoryview, budget: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """_run for the header, then the body, in one call: it runs on every frame the
    proxy decodes, and two Python calls fewer a frame count (bench.proxy.hooks_cost
    --instructions counts them).

    Bytes after the message's last field are kept, as a view, for the encoder to put
    back, not refused: Kafka's brokers and clients ignore them (librdkafka 2.16 sends
    three after its Metadata v12 request)."""
    end = len(buf)
    pos = 0
    try:
        header, pos = header_decoder(buf, 0, end, [budget])
        body, pos = body_decoder(buf, pos, end, [budget])
    except DecodeError:
        raise
    except _MALFORMED as exc:
        raise _malformed(exc, pos) from None
    if pos != end:
        body[TRAILING] = buf[pos:]
    return header, body


def _view(frame: bytes | bytearray | memoryview) -> memoryview:
    if type(frame) is bytes or type(frame) is bytearray:
        return memoryview(frame)  # always 1-D unsigned bytes: skip the checks below
    view = frame if isinstance(frame, memoryview) else memoryview(frame)
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def decode_request_header(
    frame: bytes | bytearray | memoryview,
    policy: HeaderPolicy = DEFAULT_POLICY,
    budget: int = DEFAULT_ELEMENT_BUDGET,
) -> tuple[dict[str, Any], int, int]:
    """(header, header version, offset of the body) of a request frame."""
    buf = _view(frame)
    if len(buf) < 4:
        raise DecodeError("request shorter than its api key and version", direction="request", offset=0)
    api_key, version = _API_KEY_AND_VERSION.unpack_from(buf, 0)
    try:
        header_version, header_decoder, _ = policy.plan(api_key, version, False)
        header, pos = _run(header_decoder, buf, 0, len(buf), [budget])
    except DecodeError as exc:
        raise exc.with_context(api_key=api_key, api_version=version, direction="request") from None
    return header, header_version, pos


def decode_request(
    frame: bytes | bytearray | memoryview,
    policy: HeaderPolicy = DEFAULT_POLICY,
    budget: int = DEFAULT_ELEMENT_BUDGET,
) -> Request:
    buf = _view(frame)
    if len(buf) < 4:
        raise DecodeError("request shorter than its api key and version", direction="request", offset=0)
    api_key, version = _API_KEY_AND_VERSION.unpack_from(buf, 0)
    try:
        header_version, header_decoder, body_decoder = policy.plan(api_key, version, False)
        header, body = _header_and_body(header_decoder, body_decoder, buf, budget)
    except DecodeError as exc:
        raise exc.with_context(api_key=api_key, api_version=version, direction="request") from None
    return Request(api_key, version, header, body, header_version)


def decode_response(
    frame: bytes | bytearray | memoryview,
    api_key: int,
    api_version: int,
    policy: HeaderPolicy = DEFAULT_POLICY,
    budget: int = DEFAULT_ELEMENT_BUDGET,
) -> Response:
    buf = _view(frame)
    try:
        header_version, header_decoder, body_decoder = policy.plan(api_key, api_version, True)
        header, body = _header_and_body(header_decoder, body_decoder, buf, budget)
    except DecodeError as exc:
        raise exc.with_context(api_key=api_key, api_version=api_version, direction="response") from None
    return Response(api_key, api_version, header, body, header_version)


def _encode(name: str, version: int, value: dict[str, Any], out: list[Any]) -> None:
    try:
        described = layout(name, version)
    except KeyError:
        raise EncodeError(f"{name} has no version {version}") from None
    try:
        interpreter.encode(described, value, out)
    except EncodeError:
        raise
    except (TypeError, AttributeError, struct.error, OverflowError, ValueError) as exc:
        raise EncodeError(f"cannot encode {name} v{version}: {exc}") from None


def encode_request(request: Request, policy: HeaderPolicy = DEFAULT_POLICY) -> bytes:
    """The frame (without its length prefix) of a request."""
    header = dict(request.header)
    header["request_api_key"] = request.api_key
    header["request_api_version"] = request.api_version
    header_version = policy.request_header_version(request.api_key, request.api_version)
    req, _ = messages_for(request.api_key, request.api_version)
    out: list[Any] = []
    _encode("RequestHeader", header_version, header, out)
    _encode(req.name, policy.body_version(request.api_key, request.api_version), request.body, out)
    out.append(request.body.get(TRAILING, b""))
    return b"".join(out)


def encode_response(response: Response, policy: HeaderPolicy = DEFAULT_POLICY) -> bytes:
    """The frame (without its length prefix) of a response."""
    header_version = policy.response_header_version(response.api_key, response.api_version)
    _, resp = messages_for(response.api_key, response.api_version)
    out: list[Any] = []
    _encode("ResponseHeader", header_version, response.header, out)
    _encode(resp.name, policy.body_version(response.api_key, response.api_version), response.body, out)
    out.append(response.body.get(TRAILING, b""))
    return b"".join(out)


def decode_data(
    name: str, version: int, data: bytes | memoryview, budget: int = DEFAULT_ELEMENT_BUDGET
) -> dict[str, Any]:
    """An embedded message (e.g. ConsumerProtocolSubscription) at a known version."""
    buf = _view(data)
    try:
        body, pos = _run(struct_decoder(name, version), buf, 0, len(buf), [budget])
        if pos != len(buf):
            raise DecodeError(f"{len(buf) - pos} bytes after the end of the message", offset=pos)
    except DecodeError as exc:
        raise exc.with_context(direction=name) from None
    return body


def encode_data(name: str, version: int, value: dict[str, Any]) -> bytes:
    out: list[Any] = []
    _encode(name, version, value, out)
    return b"".join(out)
