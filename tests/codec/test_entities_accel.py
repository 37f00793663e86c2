"""The C collector (codec/_accel.c's Collector) against the Python one (codec/entities.py's
walk, the reference): the topics, groups, transactional ids and error codes of a decoded
body, for every message and version, generated and real, the same dict (same values, same
order, same types); and on bodies that are not what a decoder makes, the same values or
an exception of the same class."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.codec_frames import needs_accel, stages
from support.codec_strategies import struct_value
from support.examples import examples
from support.replay import sessions

from codec import accel, decode_request, decode_response, encode_request, encode_response
from codec.entities import collector
from codec.messages import Request, Response
from codec.schema import api_messages, message

pytestmark = needs_accel

MESSAGES = [
    (api_key, version, kind, pair[kind == "response"].name)
    for api_key, pair in sorted(api_messages().items())
    for version in pair[0].versions
    for kind in ("request", "response")
]


def both(name: str, version: int, body: Any) -> tuple[Any, Any]:
    """(Python's, C's) outcome: the dict with each value's type, or the exception class.
    `body` may be a function making it (each walk then gets its own)."""

    def run(pure: bool) -> Any:
        try:
            found = collector(name, version, pure)(body() if callable(body) else body)
        except Exception as exc:  # noqa: BLE001 - the class is what is compared
            return type(exc)
        return found, {key: [type(v) for v in values] for key, values in found.items()}

    return run(True), run(False)


def test_the_codec_runs_the_c_collector_when_active() -> None:
    made = collector("ProduceRequest", 10)
    assert (type(made).__name__ == "Collector") == accel.ACTIVE
    assert type(collector("ProduceRequest", 10, True)).__name__ == "partial"


@settings(max_examples=examples(600), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(MESSAGES), data=st.data())
def test_c_and_python_collect_the_same_from_generated_and_decoded_bodies(
    case: tuple[int, int, str, str], data: st.DataObject
) -> None:
    api_key, version, kind, name = case
    definition = api_messages()[api_key][kind == "response"].definition(version)
    assert definition is not None
    body = data.draw(struct_value(definition.fields, version, definition.is_flexible(version)))
    python, c = both(name, version, body)
    assert python == c
    header_name, header_version = stages(kind, api_key, version)[0]
    header_definition = message(header_name).definition(header_version)
    assert header_definition is not None
    header = data.draw(struct_value(header_definition.fields, header_version, header_definition.is_flexible(header_version)))
    if kind == "request":
        header.update(request_api_key=api_key, request_api_version=version)
        decoded = decode_request(encode_request(Request(api_key, version, header, body))).body
    else:
        frame = encode_response(Response(api_key, version, header, body))
        decoded = decode_response(frame, api_key, version).body
    python, c = both(name, version, decoded)
    assert python == c


def test_c_and_python_collect_the_same_from_real_sessions() -> None:
    compared = 0
    for exchanges in sessions().values():
        for exchange in exchanges:
            request, answer = api_messages()[exchange.api_key]
            bodies = [(request.name, decode_request(exchange.request).body)]
            if exchange.response is not None:
                decoded = decode_response(exchange.response, exchange.api_key, exchange.api_version)
                bodies.append((answer.name, decoded.body))
            for name, body in bodies:
                python, c = both(name, exchange.api_version, body)
                assert python == c
                compared += 1
    assert compared > 300


class Getter(dict[str, Any]):
    """A dict whose get says otherwise: read through its method, as Python reads it."""

    def get(self, key: str, default: Any = None) -> Any:
        return ["from-get"] if key == "topic_data" else super().get(key, default)


def lazily(items: list[Any]) -> Iterator[Any]:
    yield from items


ODD = [
    lambda: {},
    lambda: {"topic_data": None, "transactional_id": None},
    lambda: {"topic_data": [], "transactional_id": ""},
    lambda: {"topic_data": [{"name": "a"}, {"name": "a"}, {"name": None}, {"name": "b"}], "transactional_id": "t"},
    lambda: {"topic_data": lazily([{"name": "x"}, {"name": "y"}])},
    lambda: {"topic_data": ({"name": "tuple"},)},
    lambda: {"topic_data": [{"name": 5}, {"name": 5.0}, {"name": True}]},
    lambda: Getter(),
    lambda: {"topic_data": Getter(name="not walked as an array")},
    lambda: {"topic_data": [7]},
    lambda: {"topic_data": 7},
    lambda: {"topic_data": [{"name": ["unhashable"]}, {"name": ["unhashable"]}]},
    lambda: [],
    lambda: None,
]


@pytest.mark.parametrize("make", ODD, ids=range(len(ODD)))
def test_odd_bodies_give_the_same_values_or_the_same_exception_class(make: Callable[[], Any]) -> None:
    """Each walk gets its own copy (a generator is walked once)."""
    python, c = both("ProduceRequest", 10, make)
    assert python == c
    python, c = both("ProduceResponse", 10, lambda: {"responses": [{"name": "n", "partition_responses": make()}]})
    assert python == c
