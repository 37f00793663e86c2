"""What a request line says about how long the broker may hold the request by design.

A Fetch (and ShareFetch) is a long poll: with nothing to read the broker answers after
`max_wait_ms`; a JoinGroup is answered when the rebalance completes, up to the
rebalance timeout (the session timeout before v1). The lines carry these so that
latency can be read against them (the report, the alert rules). Each version's frame
is encoded, decoded and summarised as the proxy does.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.codec_strategies import struct_value

from codec import DEFAULT_POLICY, ApiKey, Request, decode_request, encode_request
from codec.schema import api_messages, message
from proxy.observe.summary import SummaryOptions, TopicIds, request_fields

FETCH, JOIN_GROUP, SHARE_FETCH = ApiKey.FETCH, ApiKey.JOIN_GROUP, ApiKey.SHARE_FETCH
INT32 = st.integers(-(2**31), 2**31 - 1)


def _versions(api_key: int) -> list[tuple[int, int]]:
    return [(api_key, v) for v in api_messages()[api_key][0].versions]


def _request(draw: st.DrawFn, api_key: int, version: int, **fields: object) -> Request:
    """A random valid request of that version with `fields` set, through the wire."""
    definition = api_messages()[api_key][0].definition(version)
    assert definition is not None
    body = draw(struct_value(definition.fields, version, definition.is_flexible(version)))
    body.update(fields)
    header_version = DEFAULT_POLICY.request_header_version(api_key, version)
    header_def = message("RequestHeader").definition(header_version)
    assert header_def is not None
    header = draw(struct_value(header_def.fields, header_version,
                               header_def.is_flexible(header_version)))
    return decode_request(encode_request(Request(api_key, version, header, body, header_version)))


def _line(request: Request) -> dict[str, object]:
    return request_fields(request, SummaryOptions(), TopicIds())


@pytest.mark.parametrize(("api_key", "version"), _versions(FETCH) + _versions(SHARE_FETCH))
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), wait=INT32)
def test_fetch_lines_carry_max_wait_ms(
    api_key: int, version: int, data: st.DataObject, wait: int
) -> None:
    line = _line(_request(data.draw, api_key, version, max_wait_ms=wait))
    assert line["max_wait_ms"] == wait


@pytest.mark.parametrize(("api_key", "version"), _versions(JOIN_GROUP))
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), session=INT32, rebalance=INT32)
def test_join_group_lines_carry_session_and_rebalance_timeouts(
    api_key: int, version: int, data: st.DataObject, session: int, rebalance: int
) -> None:
    fields = {"session_timeout_ms": session}
    if version >= 1:
        fields["rebalance_timeout_ms"] = rebalance
    line = _line(_request(data.draw, api_key, version, **fields))
    assert line["session_timeout_ms"] == session
    # v0 has no rebalance timeout: the coordinator waits up to the session timeout.
    assert line["rebalance_timeout_ms"] == (rebalance if version >= 1 else session)
