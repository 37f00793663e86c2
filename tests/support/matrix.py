"""The api × version × direction matrix, defined once: every request and every response
of every api at every version the codec reads, for the tests that run the codec over
all of it (tests/codec: round trips, the C interpreter against the Python one, frames
fed in pieces, the skimmer, unknown tags, kio as an oracle).

The fast tier (`-m fast`, tests/conftest.py) runs a sample of it: each message at its
oldest version, its first flexible version (where the wire changes form: compact
strings and arrays, tagged fields) and its newest. The versions between are marked
`slow` and run with the whole suite; a case's marks never change its id."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest

from codec.schema import api_messages, message

KINDS = ("request", "response")


@cache
def sampled(name: str) -> frozenset[int]:
    """The versions of the message `name` (RequestHeader, FetchResponse ...) the fast
    tier runs."""
    msg = message(name)
    versions = list(msg.versions)
    flexible = [v for v in versions if (d := msg.definition(v)) is not None and d.is_flexible(v)]
    return frozenset({versions[0], versions[-1], *flexible[:1]})


def tiered(name: str, version: int, *values: Any) -> Any:
    """`pytest.param(*values)`, marked `slow` unless `version` is one of the fast tier's
    versions of the message `name`."""
    marks = () if version in sampled(name) else (pytest.mark.slow,)
    return pytest.param(*values, marks=marks)


# (api_key, version, kind) for every request and response.
CASES = [
    tiered(request.name, version, api_key, version, kind)
    for api_key, (request, _) in api_messages().items()
    for version in request.versions
    for kind in KINDS
]
# (api_key, version) for every response.
RESPONSES = [
    tiered(response.name, version, api_key, version)
    for api_key, (_, response) in api_messages().items()
    for version in response.versions
]
# (api_key, version) for every response of a flexible version (tagged fields).
FLEXIBLE_RESPONSES = [
    tiered(response.name, version, api_key, version)
    for api_key, (_, response) in api_messages().items()
    for version in response.versions
    if (definition := response.definition(version)) is not None and definition.is_flexible(version)
]
