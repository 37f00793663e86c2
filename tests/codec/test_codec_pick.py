"""Picking (codec.layout.picked, codec.skim.Picks): a skim that also keeps a few
fields as rows. The C interpreter (codec/_accel.c) against the Python one, which is the
reference, on Produce and Fetch answers of every version, generated, cut, flipped,
padded, with small budgets, and on real ones: the same rows and findings (values of the
same types, records as zero-copy views of the same buffer), end position and budget
left, or the same error. The rows are those of the body decoded whole (`rows_of`), and
the findings a plain skim's. And what may be picked is checked, by both sides."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.codec_frames import FRAMES, assert_same_outcome, exchange, golden, needs_accel
from support.examples import examples

from codec import ApiKey, decode_response, encode_response
from codec import accel as accel_module
from codec.accel import PythonDecoder
from codec.errors import DecodeError
from codec.interpreter import ROWS
from codec.layout import MAX_COLUMNS, layout, picked
from codec.messages import DEFAULT_POLICY, PURE_POLICY
from codec.schema import message
from codec.skim import Picks, rows_of, skim_response
from codec.wire import DEFAULT_ELEMENT_BUDGET

PRODUCE_PATHS = (
    ("responses", "name"), ("responses", "topic_id"), ("responses", "partition_responses", "index"),
    ("responses", "partition_responses", "error_code"), ("responses", "partition_responses", "base_offset"),
)  # fmt: skip
FETCH_PATHS = (
    ("responses", "topic"), ("responses", "topic_id"), ("responses", "partitions", "partition_index"),
    ("responses", "partitions", "error_code"), ("responses", "partitions", "high_watermark"),
    ("responses", "partitions", "last_stable_offset"), ("responses", "partitions", "records"),
    ("throttle_time_ms",),
)  # fmt: skip
PATHS = {int(ApiKey.PRODUCE): PRODUCE_PATHS, int(ApiKey.FETCH): FETCH_PATHS}


def response_name(api_key: int) -> str:
    return "ProduceResponse" if api_key == ApiKey.PRODUCE else "FetchResponse"


CASES = [(key, version) for key in PATHS for version in message(response_name(key)).versions]


def outcome(decoder: Any, buf: memoryview, pos: int, budget: int) -> tuple[Any, ...]:
    """("ok", what the skim found with its rows, end, budget left) or ("error", class,
    offset, message, budget left)."""
    k = [budget]
    found: dict[str, Any] = {
        "topics": [], "groups": [], "transactional_ids": [], "errors": [], "topic_ids": [], "counts": {}, ROWS: [],
    }  # fmt: skip
    try:
        stop = decoder.skim(buf, pos, len(buf), k, found)
    except Exception as exc:  # noqa: BLE001 - compared, whatever it is
        return ("error", type(exc), getattr(exc, "offset", None), str(exc), k[0])
    return ("ok", found, stop, k[0])


def compare(frame: bytes, api_key: int, version: int, budget: int = DEFAULT_ELEMENT_BUDGET) -> tuple[Any, ...]:
    """Both interpreters' picks of the answer's body (after its header): the same."""
    try:
        header_end = skim_header_end(frame, api_key, version)
    except DecodeError:
        return ("error",)
    described = picked(response_name(api_key), version, PATHS[api_key])
    buf = memoryview(frame)
    pure = outcome(PythonDecoder(described), buf, header_end, budget)
    fast = outcome(accel_module.c_decoder(described), buf, header_end, budget)
    assert_same_outcome(pure, fast, frame)
    return pure


def skim_header_end(frame: bytes, api_key: int, version: int) -> int:
    _, header_decoder, _ = DEFAULT_POLICY.plan(api_key, version, True)
    return int(header_decoder(memoryview(frame), 0, len(frame), [1])[1])


def assert_whole(frame: bytes, api_key: int, version: int) -> None:
    """A good answer: the rows of its body decoded whole, a plain skim's findings, both
    interpreters through Picks.read alike."""
    result = compare(frame, api_key, version)
    assert result[0] == "ok", result
    paths = PATHS[api_key]
    body = decode_response(frame, api_key, version).body
    expected = rows_of(body, paths)
    assert [tuple(_plain(v) for v in row) for row in result[1][ROWS]] == [tuple(_plain(v) for v in row) for row in expected]
    picks = Picks(paths)
    _, found, rows = picks.read(frame, api_key, version)
    _, pure_found, pure_rows = picks.read(frame, api_key, version, PURE_POLICY)
    assert picks.read(frame, api_key, version)[2] == rows  # its decoders kept, per policy
    assert found == pure_found == skim_response(frame, api_key, version)[1]
    assert [tuple(map(_plain, row)) for row in rows] == [tuple(map(_plain, row)) for row in pure_rows]
    assert len(rows) == sum(len(topic[paths[2][1]] or ()) for topic in body["responses"] or ())


def _plain(value: Any) -> Any:
    return value.tobytes() if isinstance(value, memoryview) else value


@needs_accel
@pytest.mark.parametrize(("api_key", "version"), CASES)
@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_answers_picked_alike(api_key: int, version: int, data: st.DataObject) -> None:
    frame = encode_response(data.draw(exchange(api_key, version, "response")))  # type: ignore[arg-type]
    assert_whole(frame, api_key, version)
    compare(frame[: data.draw(st.integers(0, len(frame)))], api_key, version)
    at = data.draw(st.integers(0, len(frame) - 1))
    compare(frame[:at] + bytes([data.draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]))]) + frame[at + 1 :], api_key, version)
    compare(frame + data.draw(st.binary(min_size=1, max_size=4)), api_key, version)
    compare(frame, api_key, version, budget=data.draw(st.integers(-1, 4)))


GOLDEN = [
    (frame, api_key, version)
    for frame, kind, api_key, version in map(golden, FRAMES)
    if kind == "response" and api_key in PATHS
]


@needs_accel
def test_real_answers_every_truncation_and_byte_flip() -> None:
    assert len({api_key for _, api_key, _ in GOLDEN}) == 2
    for frame, api_key, version in GOLDEN:
        assert_whole(frame, api_key, version)
    small = sorted(GOLDEN, key=lambda case: len(case[0]))
    for frame, api_key, version in [next(c for c in small if c[1] == key and len(c[0]) > 40) for key in PATHS]:
        for cut in range(len(frame)):
            assert compare(frame[:cut], api_key, version)[0] == "error"
        for pos in range(len(frame)):
            for byte in (0x00, 0x01, 0x7F, 0x80, 0xFF):
                compare(frame[:pos] + bytes([byte]) + frame[pos + 1 :], api_key, version)


def test_a_path_this_version_lacks_gives_none() -> None:
    """ProduceResponse names its topics until v12, by id from v13."""
    for version, named in ((12, True), (13, False)):
        described = picked("ProduceResponse", version, PRODUCE_PATHS)
        topic = described.fields[0].element.struct  # type: ignore[union-attr]
        picks = {field.name: field.pick for field in topic.fields}
        assert (picks.get("name"), picks.get("topic_id")) == ((1, None) if named else (None, 2))
        assert topic.emits is False and topic.fields[-1].element.struct.emits  # type: ignore[union-attr]
        assert described.columns == tuple(".".join(path) for path in PRODUCE_PATHS)
    assert layout("ProduceResponse", 13).columns == ()  # the one description is left as it is


@pytest.mark.parametrize(
    ("paths", "why"),
    [
        ((), "between 1"),
        ((("responses",),), "only a scalar"),
        ((("responses", "partition_responses"),), "only a scalar"),
        ((("responses", "name", "x"),), "neither a struct"),
        ((("responses", "name"), ("throttle_time_ms", "x", "y")), "one chain"),
        ((("responses", "partition_responses", "index"), ("throttle_time_ms",)), "picked after"),
        ((("node_endpoints", "host"),), "a tagged field"),
        (tuple(("throttle_time_ms",) for _ in range(MAX_COLUMNS + 1)), "between 1"),
    ],
)
def test_what_may_be_picked(paths: tuple[tuple[str, ...], ...], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        picked("ProduceResponse", 10, paths)


@needs_accel
def test_the_c_interpreter_refuses_a_pick_it_cannot_make() -> None:
    """Layouts picked() never makes: the C loader refuses them (memory safety must not
    rest on picked's checks)."""
    base = layout("ProduceResponse", 10)
    topics = base.fields[0]
    assert topics.element is not None and topics.element.struct is not None
    bad = {
        "an array": replace(base, fields=(replace(topics, pick=1), *base.fields[1:]), columns=("a",)),
        "an array's element": replace(
            base, fields=(replace(topics, element=replace(topics.element, pick=1)), *base.fields[1:]), columns=("a",)
        ),
        "a column past the last": replace(base, fields=(*base.fields[:-1], replace(base.fields[-1], pick=MAX_COLUMNS + 1))),
        "too many columns": replace(base, columns=("a",) * (MAX_COLUMNS + 1)),
        "a tagged field": replace(
            base, tagged=(replace(base.tagged[0], pick=1),), columns=("a",)
        ),
    }
    for why, described in bad.items():
        with pytest.raises(ValueError, match="invalid layout"):
            accel_module.c_decoder(described)
        assert why


@needs_accel
def test_rows_need_a_list_else_the_python_interpreter_answers() -> None:
    """A found without "rows" is a call the C one does not take: the Python one then
    raises as it would."""
    frame = next(frame for frame, api_key, _ in GOLDEN if api_key == ApiKey.PRODUCE)
    version = next(v for f, k, v in GOLDEN if f is frame)
    described = picked("ProduceResponse", version, PRODUCE_PATHS)
    found: dict[str, Any] = {"topics": [], "groups": [], "transactional_ids": [], "errors": [], "topic_ids": [], "counts": {}}
    with pytest.raises(KeyError, match="rows"):
        accel_module.c_decoder(described).skim(memoryview(frame), skim_header_end(frame, 0, version), len(frame), [100], found)
