"""The C interpreter (codec/_accel.c) against the Python one (codec/interpreter.py),
which is the reference, both running the same layouts (codec/layout/): on every api
and version, for every input, decoding gives the same dicts (keys in the same order,
values of the same types, bytes fields zero-copy views of the same buffer, fresh lists
and dicts but for shared read-only defaults), the same end position and element budget
left, or the same exception (class, offset and message); skimming finds the same.

Both interpreters run here whatever KAFKALENS_PURE_CODEC says; these tests also keep the
Python one honest (its results round-trip) now that kafkalens runs the C one wherever
the extension is built.
"""

from __future__ import annotations

import contextlib
import gc
import os
import random
import struct
import subprocess
import sys
import tracemalloc
import uuid
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.codec_frames import (
    FRAMES,
    TRUNCATED,
    compare_frame,
    compare_struct,
    decoders,
    fetch_frame,
    golden,
    mutated,
    needs_accel,
    outcome,
    stages,
)
from support.codec_strategies import plain, struct_value
from support.examples import examples
from support.matrix import CASES
from support.paths import REPO

from codec import ApiKey, Request, Response, encode_data, encode_request, encode_response
from codec import accel as accel_module
from codec.accel import Decoder
from codec.kinds import Framing, Kind
from codec.layout import Field as LayoutField
from codec.layout import Struct, layout
from codec.messages import DEFAULT_POLICY, struct_decoder
from codec.schema import ZERO_UUID, Field, data_message_names, message
from codec.skim import CATEGORIES
from codec.wire import DEFAULT_ELEMENT_BUDGET, MAX_UNKNOWN_TAGS


def test_the_extension_is_built_where_required() -> None:
    """CI sets KAFKALENS_REQUIRE_ACCEL=1: there, a build that silently fell back to pure
    Python (setup.py's optional=True) fails here."""
    if os.environ.get("KAFKALENS_REQUIRE_ACCEL") != "1":
        pytest.skip("KAFKALENS_REQUIRE_ACCEL is not set")
    import codec._accel  # noqa: F401

    assert accel_module.AVAILABLE
    assert accel_module.ACTIVE is not bool(os.environ.get("KAFKALENS_PURE_CODEC"))


# --- the two decoders of a struct, and what a call of each gives ------------------------


# --- generated messages of every api, version and direction ------------------------------


def add_explicit_tags(fields: tuple[Field, ...], version: int, value: Any) -> None:
    """Mark every tagged field explicit: the encoder then writes it even when it holds
    its default, and the decoders meet each known tag and its `_explicit_tags`."""
    if not isinstance(value, dict):
        return
    tags = [f.tag for f in fields if f.tag is not None and f.present_in(version)]
    if tags:
        value["_explicit_tags"] = tags
    for field in fields:
        if field.is_struct and field.present_in(version):
            inner = value.get(field.name)
            for item in inner if isinstance(inner, list) else [inner]:
                add_explicit_tags(field.children or (), version, item)


def _header(kind: str, api_key: int, version: int, data: st.DataObject) -> dict[str, Any]:
    name, header_version = stages(kind, api_key, version)[0]
    definition = message(name).definition(header_version)
    assert definition is not None
    flexible = definition.is_flexible(header_version)
    header = data.draw(struct_value(definition.fields, header_version, flexible, unknown_tags=True))
    return header


@needs_accel
@pytest.mark.parametrize(("api_key", "version", "kind"), CASES)
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_frames(api_key: int, version: int, kind: str, data: st.DataObject) -> None:
    name = stages(kind, api_key, version)[1][0]
    definition = message(name).definition(version)
    assert definition is not None
    flexible = definition.is_flexible(version)
    body = data.draw(struct_value(definition.fields, version, flexible, unknown_tags=True))
    if data.draw(st.booleans()):
        add_explicit_tags(definition.fields, version, body)
    header = _header(kind, api_key, version, data)
    if kind == "request":
        frame = encode_request(Request(api_key, version, header, body))
    else:
        frame = encode_response(Response(api_key, version, header, body))
    assert compare_frame(frame, kind, api_key, version)
    # The reference itself still round-trips (the suite's other tests run the C path).
    header_name, header_version = stages(kind, api_key, version)[0]
    pure_header, pos = struct_decoder(header_name, header_version, pure=True)(memoryview(frame), 0, len(frame), [DEFAULT_ELEMENT_BUDGET])
    pure_body, _ = struct_decoder(name, version, pure=True)(memoryview(frame), pos, len(frame), [DEFAULT_ELEMENT_BUDGET])
    assert plain(pure_body) == plain(body)
    # Broken copies of the same frame: cut, a byte changed, junk after it, a small budget.
    cut = data.draw(st.integers(0, len(frame)))
    compare_frame(frame[:cut], kind, api_key, version)
    at = data.draw(st.integers(0, len(frame) - 1))
    flipped = frame[:at] + bytes([data.draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]))]) + frame[at + 1 :]
    compare_frame(flipped, kind, api_key, version)
    compare_frame(frame + data.draw(st.binary(min_size=1, max_size=4)), kind, api_key, version)
    compare_frame(frame, kind, api_key, version, budget=data.draw(st.integers(-1, 4)))


DATA = [(name, version) for name in data_message_names() for version in message(name).versions]


@needs_accel
@pytest.mark.parametrize(("name", "version"), DATA)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_data_messages(name: str, version: int, data: st.DataObject) -> None:
    definition = message(name).definition(version)
    assert definition is not None
    value = data.draw(struct_value(definition.fields, version, definition.is_flexible(version), unknown_tags=True))
    frame = encode_data(name, version, value)
    assert compare_struct(name, version, frame)[0] == "ok"
    for cut in range(len(frame)):
        compare_struct(name, version, frame[:cut])


# --- real frames, and broken copies of them ----------------------------------------------


@needs_accel
def test_every_golden_frame_whole_with_junk_and_mutated() -> None:
    rng = random.Random(4)
    for entry in FRAMES:
        frame, kind, api_key, version = golden(entry)
        assert compare_frame(frame, kind, api_key, version), entry["file"]
        for junk in (b"\x00", b"\xff" * 7):
            assert compare_frame(frame + junk, kind, api_key, version)
        for _ in range(8):
            data = bytearray(frame)
            at = rng.randrange(len(data))
            if rng.random() < 0.5:
                data[at] = rng.choice((0x00, 0x01, 0x7F, 0x80, 0xFF))
            else:
                data[at : at + 4] = struct.pack(">i", rng.choice((-1, -2, 2**31 - 1, len(data) - at)))
            compare_frame(bytes(data), kind, api_key, version)
        compare_frame(frame[: rng.randrange(len(frame))], kind, api_key, version)


@needs_accel
@pytest.mark.parametrize(("frame", "kind", "api_key", "version"), TRUNCATED)
def test_every_truncation_and_byte_flip(frame: bytes, kind: str, api_key: int, version: int) -> None:
    for cut in range(len(frame)):
        assert not compare_frame(frame[:cut], kind, api_key, version)
    if len(frame) > 800:
        return
    for pos in range(len(frame)):
        for byte in (0x00, 0x01, 0x7F, 0x80, 0xFF):
            compare_frame(frame[:pos] + bytes([byte]) + frame[pos + 1 :], kind, api_key, version)


@needs_accel
@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=mutated())
def test_mutated_frames(case: tuple[str, bytes, int, int]) -> None:
    kind, frame, api_key, version = case
    if kind == "request":
        if len(frame) < 4:
            return
        api_key, version = struct.unpack_from(">hh", frame)
        if not DEFAULT_POLICY.knows(api_key, version):
            return
    compare_frame(frame, kind, api_key, version)


@needs_accel
@pytest.mark.parametrize("budget", [-1, 0, 1, 2, 3, 5, 50])
def test_element_budget(budget: int) -> None:
    for frame, kind, api_key, version in TRUNCATED:
        compare_frame(frame, kind, api_key, version, budget)


# --- hand-made edge cases ----------------------------------------------------------------


def api_versions_v3(tags: bytes) -> bytes:
    """An ApiVersions v3 request whose header's tagged section is `tags`."""
    return struct.pack(">hhih", ApiKey.API_VERSIONS, 3, 1, 1) + b"c" + tags + b"\x02a\x02b\x00"


VARINT_TAGS = [
    b"\x80\x00",  # zero tagged fields, written in two bytes
    b"\x01\x80\x80\x80\x80\x00\x00",  # tag 0 in five bytes
    b"\x01\x80\x80\x80\x80\x80\x00\x00",  # six bytes: too long
    b"\x01\xff\xff\xff\xff\x7f\x00",  # the largest 5-byte tag
    b"\x01\x05\xff\xff\xff\xff\x0f",  # a size past the end
    b"\x02\x05\x01x",  # fewer fields than counted
    b"\x7f",  # a count past the bytes left
    b"\x81",  # a varint cut short
    bytes([0x80 | (1025 & 0x7F), 1025 >> 7]) + b"".join(bytes([t & 0x7F | 0x80, t >> 7, 0]) for t in range(1025)),
]


@needs_accel
@pytest.mark.parametrize("tags", VARINT_TAGS, ids=range(len(VARINT_TAGS)))
def test_varints_and_unknown_tags(tags: bytes) -> None:
    compare_frame(api_versions_v3(tags), "request", 18, 3)
    compare_frame(api_versions_v3(tags)[:-1], "request", 18, 3)


def test_unknown_tags_up_to_the_limit_are_kept() -> None:
    count = MAX_UNKNOWN_TAGS
    tags = bytes([0x80 | (count & 0x7F), count >> 7]) + b"".join(
        bytes([t & 0x7F | 0x80, t >> 7, 1, t & 0xFF]) for t in range(count)
    )
    frame = api_versions_v3(tags)
    if accel_module.AVAILABLE:
        assert compare_frame(frame, "request", 18, 3)
    header, _ = decoders("RequestHeader", 2)[0](memoryview(frame), 0, len(frame), [10])
    assert len(header["_unknown_tags"]) == count


BAD_UTF8 = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80", b"ok\xe2\x82"]


@needs_accel
@pytest.mark.parametrize("raw", BAD_UTF8, ids=range(len(BAD_UTF8)))
def test_invalid_utf8(raw: bytes) -> None:
    # client id (classic string) and software name (compact string) of ApiVersions v3
    header = struct.pack(">hhih", ApiKey.API_VERSIONS, 3, 1, len(raw)) + raw + b"\x00"
    compare_frame(header + b"\x02a\x02b\x00", "request", 18, 3)
    ok = struct.pack(">hhih", ApiKey.API_VERSIONS, 3, 1, 1) + b"c\x00"
    compare_frame(ok + bytes([len(raw) + 1]) + raw + b"\x02b\x00", "request", 18, 3)


@needs_accel
def test_floats_bools_and_unsigned_ints() -> None:
    entry = {"entity": [{"entity_type": "user", "entity_name": None}],
             "values": [{"key": "producer_byte_rate", "value": 1.5}]}  # fmt: skip
    response = Response(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"correlation_id": 1}, {"throttle_time_ms": 0, "error_code": 0,
                                                        "error_message": None, "entries": [entry]})  # fmt: skip
    frame = encode_response(response)
    at = frame.index(struct.pack(">d", 1.5))
    for value in (b"\x7f\xf8\x00\x00\x00\x00\x00\x01", b"\xff\xf0" + bytes(6), b"\x80" + bytes(7), bytes(8)):
        assert compare_frame(frame[:at] + value + frame[at + 8 :], "response", 48, 1)
    # a bool byte of 2 is True; uint16 ports up to 65535
    request = Request(ApiKey.CREATE_TOPICS, 5, {"correlation_id": 1, "client_id": "c"}, {"topics": [{
        "name": "t", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout_ms": 1, "validate_only": True})  # fmt: skip
    frame = encode_request(request)
    assert compare_frame(frame[:-2] + b"\x02\x00", "request", 19, 5)
    endpoint = {"name": "l", "host": "h", "port": 65535}
    vote = Response(ApiKey.VOTE, 1, {"correlation_id": 1}, {"error_code": 0, "topics": [],
                                                   "node_endpoints": [{"node_id": 1, **endpoint}]})  # fmt: skip
    assert compare_frame(encode_response(vote), "response", 52, 1)


@needs_accel
def test_uuids_nullable_structs_and_tagged_defaults() -> None:
    topic_id = uuid.UUID(int=1 << 100)
    for tid in (ZERO_UUID, topic_id):
        partition = {"partition_index": 0, "error_code": 0, "high_watermark": 1, "last_stable_offset": 1,
                     "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
                     "records": None, "diverging_epoch": {"epoch": -1, "end_offset": -1},
                     "_explicit_tags": [0]}  # fmt: skip
        body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
                "responses": [{"topic_id": tid, "partitions": [partition, partition]}]}  # fmt: skip
        frame = encode_response(Response(ApiKey.FETCH, 16, {"correlation_id": 1}, body))
        assert compare_frame(frame, "response", 1, 16)
    # a nullable struct (ConsumerGroupHeartbeat's assignment, last): 0xFF is null,
    # any other marker byte is a struct
    heartbeat = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": "m",
                 "member_epoch": 1, "heartbeat_interval_ms": 5, "assignment": None}  # fmt: skip
    frame = encode_response(Response(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, {"correlation_id": 1}, heartbeat))
    assert frame[-2:] == b"\xff\x00"
    for marker in (b"\xff", b"\x00", b"\x01", b"\x7f", b"\x80", b"\xfe"):
        for rest in (b"\x00", b"\x01\x00\x00", b"\x02\x00\x00\x00"):
            compare_frame(frame[:-2] + marker + rest, "response", 68, 0)


@needs_accel
def test_calls_the_c_decoder_does_not_take_go_to_the_python_one() -> None:
    frame = fetch_frame()
    pure, fast = decoders("FetchResponse", 17)
    view = memoryview(frame)
    odd: list[tuple[Any, Any, Any, Any]] = [
        (frame, 5, len(frame), DEFAULT_ELEMENT_BUDGET),  # bytes, not a memoryview
        (bytearray(frame), 5, len(frame), DEFAULT_ELEMENT_BUDGET),
        (view, 5, len(frame) + 10, DEFAULT_ELEMENT_BUDGET),  # end past the buffer
        (view, -3, len(frame), DEFAULT_ELEMENT_BUDGET),
        (view, 9, 5, DEFAULT_ELEMENT_BUDGET),  # pos past end
        (view, True, len(frame), DEFAULT_ELEMENT_BUDGET),
        (view, 5, float(len(frame)), DEFAULT_ELEMENT_BUDGET),
        (view, 5, len(frame), 2**70),
        (view, 5, len(frame), True),
        (memoryview(frame * 2)[::2], 5, len(frame), DEFAULT_ELEMENT_BUDGET),  # strided
        (view.cast("b"), 5, len(frame), DEFAULT_ELEMENT_BUDGET),
    ]
    for buf, pos, end, budget in odd:
        for skim in (False, True):
            expected = outcome(pure, buf, pos, end, budget, skim)
            got = outcome(fast, buf, pos, end, budget, skim)
            assert expected[0] == got[0] and plain(expected[1:]) == plain(got[1:])
    assert fast(view, 5, len(frame), [DEFAULT_ELEMENT_BUDGET])[1] == len(frame)
    with pytest.raises(TypeError):
        fast(view, 5)
    with pytest.raises(KeyError):  # skimming into a dict that is not skim's: the Python one's error
        fast.skim(view, 5, len(frame), [DEFAULT_ELEMENT_BUDGET], {"topics": ()})
    released = memoryview(frame)
    released.release()
    assert outcome(pure, released, 5, 20, 9)[:2] == outcome(fast, released, 5, 20, 9)[:2]


@needs_accel
def test_the_buffer_stays_exported_while_views_of_it_live() -> None:
    frame = bytearray(fetch_frame())
    _, fast = decoders("FetchResponse", 17)
    body, _ = fast(memoryview(frame), 5, len(frame), [DEFAULT_ELEMENT_BUDGET])
    records = body["responses"][0]["partitions"][0]["records"]
    with pytest.raises(BufferError):
        frame.append(0)  # a view of it is alive: it cannot move
    assert records.obj is frame and bytes(records) == b"r" * 130


def _nested(depth: int) -> Struct:
    struct = Struct("Leaf", False, (), (), {}, (), 0, None)
    for _ in range(depth):
        inner = LayoutField("s", Kind.STRUCT, struct=struct)
        struct = Struct("Level", False, (inner,), (), {"s": None}, (), struct.min_size, None)
    return struct


def _bad_layouts() -> dict[str, Struct]:
    """Layouts the C interpreter must refuse: each would make it read out of bounds, or
    is not what the description can mean."""
    good = layout("FetchResponse", 17)
    partition = good.fields[-1].element.struct.fields[-1].element.struct  # type: ignore[union-attr]
    first = partition.fields[0]
    int32 = LayoutField("a", Kind.INT32, size=4, check=4)
    one = {"a": None}
    return {
        "a run's check short of its fields": replace(partition, fields=(replace(first, check=5),) + partition.fields[1:]),
        "a fixed field no check covers": replace(partition, fields=(replace(first, check=0),) + partition.fields[1:]),
        "a size not its kind's": Struct("S", False, (replace(int32, size=8, check=8),), (), one, (), 8, None),
        "a field not in the template": Struct("S", False, (int32,), (), {"b": None}, (), 4, None),
        "a key of no field": Struct("S", False, (int32,), (), {"a": None, "b": None}, (), 4, None),
        "a tagged field, not flexible": Struct("S", False, (), (replace(int32, tag=1),), one, (), 0, None),
        "a tagged field among the regular ones": Struct("S", True, (replace(int32, tag=1),), (), one, (), 5, None),
        "a string framed as int32": Struct("S", False, (LayoutField("a", Kind.STRING, Framing.INT32),), (), one, (), 4, None),
        "an array of arrays": Struct("S", False, (LayoutField("a", Kind.ARRAY, Framing.INT32, min_size=4, element=LayoutField("", Kind.ARRAY, Framing.INT32, min_size=4, element=int32)),), (), one, (), 4, None),
        "an element smaller than its size": Struct("S", False, (LayoutField("a", Kind.ARRAY, Framing.INT32, min_size=2, element=int32),), (), one, (), 4, None),
        "a kind out of range": Struct("S", False, (replace(int32, kind=99),), (), one, (), 4, None),
        "nested too deep": _nested(40),
    }


BAD_LAYOUTS = _bad_layouts()


@needs_accel
@pytest.mark.parametrize("why", BAD_LAYOUTS)
def test_layouts_are_validated(why: str) -> None:
    with pytest.raises(ValueError, match="invalid layout"):
        accel_module.c_decoder(BAD_LAYOUTS[why])


@needs_accel
def test_a_good_layout_loads_and_fallbacks_must_be_callable() -> None:
    from codec import _accel

    accel_module.c_decoder(_nested(20))
    with pytest.raises(TypeError):
        _accel.Decoder(layout("FetchResponse", 17), 3, print)


@needs_accel
def test_an_extension_built_from_other_kinds_is_refused() -> None:
    from codec import _accel

    accel_module.check_numbers(_accel.NUMBERS)  # what codec.accel does at import
    stale = {enum: dict(members) for enum, members in _accel.NUMBERS.items()}
    stale["Kind"]["INT8"] = 99
    with pytest.raises(ImportError, match="rebuild it"):
        accel_module.check_numbers(stale)


# --- no leaks on any path ----------------------------------------------------------------


def hostile_inputs() -> list[tuple[Decoder, bytes, int, int]]:
    """(C decoder, frame, body offset, budget): failures at every byte and successes."""
    found = []
    for frame, kind, api_key, version in TRUNCATED[-4:]:
        header, body = stages(kind, api_key, version)
        fast = decoders(*body)[1]
        start = decoders(*header)[0](memoryview(frame), 0, len(frame), [9])[1]
        for cut in range(start, len(frame) + 1):
            found.append((fast, frame[:cut], start, DEFAULT_ELEMENT_BUDGET))
        for pos in range(start, len(frame), 3):
            found.append((fast, frame[:pos] + b"\xff" + frame[pos + 1 :], start, DEFAULT_ELEMENT_BUDGET))
        found += [(fast, frame, start, budget) for budget in (0, 1, 2)]
    header = decoders("RequestHeader", 2)[1]
    found += [(header, api_versions_v3(tags), 0, 9) for tags in VARINT_TAGS]
    found += [(header, struct.pack(">hhih", ApiKey.API_VERSIONS, 3, 1, 1) + b"\xff\x00", 0, 9)]  # bad UTF-8
    return found


def _refcounts() -> list[int]:
    return [sys.getrefcount(obj) for obj in (None, True, False, 0, -1, 1, "", ZERO_UUID, MAX_UNKNOWN_TAGS)]


@pytest.mark.slow
@needs_accel
def test_hostile_inputs_decoded_and_skimmed_30k_times_leak_nothing() -> None:
    inputs = hostile_inputs()
    calls = [(fast, memoryview(frame), start, len(frame), budget) for fast, frame, start, budget in inputs]

    def run(times: int) -> None:
        for index in range(times):
            fast, view, start, end, budget = calls[index % len(calls)]
            with contextlib.suppress(ValueError):  # DecodeError, and bad UTF-8 before _run
                if index & 1:
                    fast(view, start, end, [budget])
                else:
                    found: dict[str, Any] = {key: [] for key in CATEGORIES}
                    fast.skim(view, start, end, [budget], found | {"counts": {}})

    run(len(calls) * 2)
    gc.collect()
    refs = _refcounts()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    run(30_000)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert after - before < 64 * 1024, after - before
    # a reference leaked per call would show 15,000 times; caches warming show a few
    assert all(abs(b - a) < 100 for a, b in zip(refs, _refcounts(), strict=True)), (refs, _refcounts())


# --- which decoders kafkalens runs -------------------------------------------------------


def _active_in_child(env: dict[str, str]) -> str:
    code = "import codec.accel, codec.messages as m; print(codec.accel.ACTIVE, type(m.struct_decoder('FetchResponse', 17)).__name__)"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@needs_accel
def test_kafkalens_pure_codec_turns_the_c_decoders_off() -> None:
    env = {k: v for k, v in os.environ.items() if k != "KAFKALENS_PURE_CODEC"}
    assert _active_in_child(env) == "True Decoder"
    assert _active_in_child({**env, "KAFKALENS_PURE_CODEC": ""}) == "True Decoder"
    assert _active_in_child({**env, "KAFKALENS_PURE_CODEC": "1"}) == "False PythonDecoder"
