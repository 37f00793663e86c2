"""Every request and response, every version, every header version: encode, decode, re-encode."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codec import (
    DEFAULT_POLICY,
    Request,
    Response,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from codec.schema import api_messages, message
from tests.codec_strategies import plain, struct_value

CASES = [
    (api_key, version, kind)
    for api_key, (req, _) in api_messages().items()
    for version in req.versions
    for kind in ("request", "response")
]


def _header_fields(kind: str, api_key: int, version: int) -> tuple[object, int, bool]:
    if kind == "request":
        header_version = DEFAULT_POLICY.request_header_version(api_key, version)
        header = message("RequestHeader")
    else:
        header_version = DEFAULT_POLICY.response_header_version(api_key, version)
        header = message("ResponseHeader")
    definition = header.definition(header_version)
    assert definition is not None
    return definition.fields, header_version, definition.is_flexible(header_version)


@st.composite
def exchange(draw: st.DrawFn, api_key: int, version: int, kind: str) -> Request | Response:
    req, resp = api_messages()[api_key]
    msg = req if kind == "request" else resp
    definition = msg.definition(version)
    assert definition is not None
    flexible = definition.is_flexible(version)
    body = draw(struct_value(definition.fields, version, flexible, unknown_tags=True))
    fields, header_version, header_flexible = _header_fields(kind, api_key, version)
    header = draw(struct_value(fields, header_version, header_flexible, unknown_tags=True))  # type: ignore[arg-type]
    if kind == "request":
        header["request_api_key"] = api_key
        header["request_api_version"] = version
        return Request(api_key, version, header, body, header_version)
    return Response(api_key, version, header, body, header_version)


@pytest.mark.parametrize(("api_key", "version", "kind"), CASES)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip(api_key: int, version: int, kind: str, data: st.DataObject) -> None:
    original = data.draw(exchange(api_key, version, kind))
    if kind == "request":
        frame = encode_request(original)  # type: ignore[arg-type]
        decoded = decode_request(frame)
        again = encode_request(decoded)
    else:
        frame = encode_response(original)  # type: ignore[arg-type]
        decoded = decode_response(frame, api_key, version)  # type: ignore[assignment]
        again = encode_response(decoded)  # type: ignore[arg-type]
    assert plain(decoded.body) == plain(original.body)
    assert plain(decoded.header) == plain(original.header)
    assert decoded.header_version == original.header_version
    assert again == frame
