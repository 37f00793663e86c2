"""Skim a response: parse every byte, keep only what a log line needs.

A full decode builds a dict per struct and a list per array; for a Metadata response
with 1,000 partitions that is most of the cost, and a request log needs none of it:
only topic names, group and transactional ids, non-zero error codes, topic ids with
their names, and how many elements the message's own arrays have. Skimming walks the
same layout description with the same checks as decoding (codec/interpreter.py's
`skim`, in C where it was built), so it refuses what decoding refuses, except a string
it does not keep, which it does not decode (bad UTF-8 in a host name passes).

Result: {"topics": [...], "groups": [...], "transactional_ids": [...], "errors": [...],
"topic_ids": [(uuid, name), ...], "counts": {top-level array name: length}}, in the
order the frame holds them.
"""

from __future__ import annotations

from typing import Any

from codec.errors import DecodeError
from codec.interpreter import COUNTS, ERRORS, GROUPS, TOPIC_IDS, TOPICS, TRANSACTIONAL_IDS
from codec.messages import DEFAULT_POLICY, HeaderPolicy
from codec.wire import DEFAULT_ELEMENT_BUDGET

CATEGORIES = (TOPICS, GROUPS, TRANSACTIONAL_IDS, ERRORS, TOPIC_IDS)


def skim_response(
    frame: bytes | memoryview,
    api_key: int,
    api_version: int,
    policy: HeaderPolicy = DEFAULT_POLICY,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(response header, what the body says that a log line needs)."""
    buf = frame if isinstance(frame, memoryview) else memoryview(frame)
    found: dict[str, Any] = {TOPICS: [], GROUPS: [], TRANSACTIONAL_IDS: [], ERRORS: [], TOPIC_IDS: [], COUNTS: {}}
    try:
        _, header_decoder, body_decoder = policy.plan(api_key, api_version, True)
        header, pos = header_decoder(buf, 0, len(buf), [1])
        body_decoder.skim(buf, pos, len(buf), [DEFAULT_ELEMENT_BUDGET], found)
    except DecodeError as exc:
        raise exc.with_context(api_key=api_key, api_version=api_version, direction="response") from None
    except UnicodeDecodeError as exc:
        raise DecodeError(f"invalid UTF-8 in a string: {exc.reason}", api_key=api_key,
                          api_version=api_version, direction="response") from None
    return header, found
