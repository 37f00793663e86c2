"""kio as an independent oracle for the codec, for every (message, version) both know.

For each pair, on Hypothesis-generated values: (a) kafkalens encodes, kio decodes the
bytes, the two agree field by field; (b) kio encodes, kafkalens decodes, they agree;
(c) both encoders write the same bytes. Requests and responses go through whole frames
(so the header version each side picks is checked too); headers and embedded data
messages through their struct codecs.

Generated values stay within what kio can represent (kio_adapter: error codes of its
enum, timestamps in [0, 2**42) ms and 64-bit durations within +-2**50 ms, where its float
conversions are exact) and carry no unknown tagged fields: kio raises KeyError on a tag
it does not know instead of skipping it.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.kio_adapter import (
    canon,
    from_kio,
    kio_class,
    kio_path,
    kio_read,
    kio_write,
    message_strategy,
    shape_mismatches,
    to_kio,
)
from support.matrix import tiered

from codec import (
    DEFAULT_POLICY,
    Request,
    Response,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from codec.generated.schemas import MESSAGES
from codec.messages import decode_data, encode_data
from codec.schema import Definition, message

# Versions whose definition changed in place upstream between kio 0.6.5's snapshot and the
# definitions the codec is generated from (codec/generate.py): none at present.
SKIP: dict[tuple[str, int], str] = {}
ALL_PAIRS = sorted((name, v) for name in MESSAGES for v in message(name).versions)
SHARED = [pair for pair in ALL_PAIRS if kio_path(*pair) is not None]
COMPARED = [pair for pair in SHARED if pair not in SKIP]
KIO_LACKS = [pair for pair in ALL_PAIRS if kio_path(*pair) is None]
API_PAIRS = [p for p in COMPARED if message(p[0]).kind in ("request", "response")]
STRUCT_PAIRS = [p for p in COMPARED if p not in API_PAIRS]
EXAMPLES = settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _definition(name: str, version: int) -> Definition:
    definition = message(name).definition(version)
    assert definition is not None
    return definition


def _draw(data: st.DataObject, name: str, version: int) -> dict[str, Any]:
    return data.draw(message_strategy(name, version))


def _agree(name: str, version: int, ours: dict[str, Any], theirs: Any) -> None:
    fields = _definition(name, version).fields
    assert canon(from_kio(theirs, fields, version, name)) == canon(ours), (name, version)


def test_coverage() -> None:
    """Guards against the oracle silently shrinking (e.g. a kio upgrade renaming things)."""
    assert len(COMPARED) >= 560
    assert {m.kind for m in map(message, (p[0] for p in STRUCT_PAIRS))} == {"header", "data"}
    assert {"RequestHeader", "ResponseHeader"} <= {p[0] for p in STRUCT_PAIRS}


@pytest.mark.parametrize(("name", "version"), SHARED)
def test_shapes(name: str, version: int) -> None:
    """Every compared pair maps field for field; every skip is still a real mismatch."""
    cls = kio_class(name, version)
    problems = shape_mismatches(_definition(name, version).fields, version, cls, name)
    assert bool(problems) == ((name, version) in SKIP), problems


@pytest.mark.parametrize(("name", "version"), [tiered(n, v, n, v) for n, v in STRUCT_PAIRS])
@EXAMPLES
@given(data=st.data())
def test_struct_oracle(name: str, version: int, data: st.DataObject) -> None:
    cls = kio_class(name, version)
    value = _draw(data, name, version)
    ours = encode_data(name, version, value)
    theirs, end = kio_read(cls, ours, 0)
    assert end == len(ours)
    _agree(name, version, value, theirs)
    kio_bytes = kio_write(cls, to_kio(value, _definition(name, version).fields, version, cls, name))
    assert canon(decode_data(name, version, kio_bytes)) == canon(value)
    assert kio_bytes == ours


def _header(name: str, version: int, cls: type) -> tuple[str, int]:
    """Our header message and version for a request/response; kio must pick the same."""
    api_key = message(name).api_key
    assert api_key is not None
    if message(name).kind == "request":
        header_name, header_version = (
            "RequestHeader",
            DEFAULT_POLICY.request_header_version(api_key, version),
        )
    else:
        header_name, header_version = (
            "ResponseHeader",
            DEFAULT_POLICY.response_header_version(api_key, version),
        )
    kio_header = cls.__header_schema__  # type: ignore[attr-defined]
    assert (kio_header.__name__, kio_header.__version__) == (header_name, header_version)
    return header_name, header_version


def _frame(name: str, version: int, header: dict[str, Any], body: dict[str, Any]) -> bytes:
    api_key = message(name).api_key
    assert api_key is not None
    if message(name).kind == "request":
        header.update(request_api_key=api_key, request_api_version=version)
        return encode_request(Request(api_key, version, header, body))
    return encode_response(Response(api_key, version, header, body))


def _decode(name: str, version: int, frame: bytes) -> Request | Response:
    api_key = message(name).api_key
    assert api_key is not None
    if message(name).kind == "request":
        return decode_request(frame)
    return decode_response(frame, api_key, version)


@pytest.mark.parametrize(("name", "version"), [tiered(n, v, n, v) for n, v in API_PAIRS])
@EXAMPLES
@given(data=st.data())
def test_frame_oracle(name: str, version: int, data: st.DataObject) -> None:
    cls = kio_class(name, version)
    header_name, header_version = _header(name, version, cls)
    header_cls = cls.__header_schema__  # type: ignore[attr-defined]
    header = _draw(data, header_name, header_version)
    body = _draw(data, name, version)
    frame = _frame(name, version, header, body)
    # (a) kafkalens encodes, kio decodes.
    kio_header, offset = kio_read(header_cls, frame, 0)
    kio_body, end = kio_read(cls, frame, offset)
    assert end == len(frame)
    _agree(header_name, header_version, header, kio_header)
    _agree(name, version, body, kio_body)
    # (b) kio encodes, kafkalens decodes.
    header_fields = _definition(header_name, header_version).fields
    kio_frame = kio_write(
        header_cls, to_kio(header, header_fields, header_version, header_cls, header_name)
    ) + kio_write(cls, to_kio(body, _definition(name, version).fields, version, cls, name))
    decoded = _decode(name, version, kio_frame)
    assert canon(decoded.header) == canon(header)
    assert canon(decoded.body) == canon(body)
    # (c) the same bytes.
    assert kio_frame == frame
