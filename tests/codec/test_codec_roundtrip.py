"""Every request and response, every version, every header version: encode, decode, re-encode."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.codec_frames import exchange
from support.codec_strategies import plain
from support.matrix import CASES

from codec import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)


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
