"""A response that answers a request with an error, as a broker would."""

from __future__ import annotations

from typing import Any

from codec.messages import DEFAULT_POLICY, HeaderPolicy, Response, encode_response
from codec.schema import api_messages


def error_response(
    api_key: int,
    api_version: int,
    correlation_id: int,
    error_code: int,
    policy: HeaderPolicy = DEFAULT_POLICY,
) -> bytes | None:
    """The frame body of a response whose top-level error code is `error_code`.

    None when the response has no top-level error code at this version (Produce and
    Metadata, say, report errors per topic or partition only): the caller must then
    close the connection, which is what a Kafka broker does with a request it rejects
    that way.
    """
    _, response = api_messages()[api_key]
    body_version = policy.body_version(api_key, api_version)
    definition = response.definition(body_version)
    if definition is None:
        return None
    body: dict[str, Any] = {}
    has_error_code = False
    for field in definition.fields:
        if not field.present_in(body_version):
            continue
        body[field.name] = field.default_value()
        if field.name == "error_code":
            body[field.name] = error_code
            has_error_code = True
    if not has_error_code:
        return None
    frame = Response(api_key, api_version, {"correlation_id": correlation_id}, body)
    return encode_response(frame, policy)
