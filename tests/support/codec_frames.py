"""Codec test frames and comparisons shared by the codec's test modules: hand-made
frames that exercise the interpreters' bounds checks, realistic and golden seeds and
their mutations, Hypothesis exchanges of any api and version, the skimmer's expected
result, and the C interpreter compared with the Python one."""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest
from hypothesis import strategies as st

from codec import (
    DEFAULT_POLICY,
    ApiKey,
    Request,
    Response,
    decode_response,
    encode_request,
    encode_response,
)
from codec import accel as accel_module
from codec.absent import ReadOnlyDict
from codec.accel import Decoder, PythonDecoder
from codec.entities import collector
from codec.layout import layout
from codec.schema import api_messages, message
from codec.skim import skim_response
from codec.wire import DEFAULT_ELEMENT_BUDGET
from support.codec_strategies import struct_value
from support.paths import GOLDEN


def join_group(metadata_size: int, version: int) -> tuple[Response, bytes]:
    members = [
        {"member_id": "m", "group_instance_id": None, "metadata": bytes(range(256)) * (metadata_size // 256)
         + bytes(metadata_size % 256)}
    ]
    body = {"generation_id": 1, "protocol_type": "consumer", "protocol_name": "range", "leader": "m",
            "member_id": "m", "members": members}  # fmt: skip
    response = Response(ApiKey.JOIN_GROUP, version, {"correlation_id": 1}, body)
    return response, encode_response(response)


def fetch_frame() -> bytes:
    partition = {
        "partition_index": 0, "error_code": 3, "high_watermark": 5, "last_stable_offset": 5,
        "log_start_offset": 0, "aborted_transactions": [{"producer_id": 1, "first_offset": 2}],
        "preferred_read_replica": -1, "records": b"r" * 130,
        "diverging_epoch": {"epoch": 2, "end_offset": 9},
        "_unknown_tags": [(9, b"x")],
    }  # fmt: skip
    empty = {**partition, "aborted_transactions": None, "records": None, "_unknown_tags": []}
    topic = {"topic_id": uuid.UUID(int=3), "partitions": [partition, empty]}
    body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 1, "responses": [topic],
            "node_endpoints": [{"node_id": 1, "host": "h", "port": 1, "rack": None}]}  # fmt: skip
    return encode_response(Response(ApiKey.FETCH, 17, {"correlation_id": 1}, body))


def metadata_frame() -> bytes:
    partitions = [
        {"error_code": e, "partition_index": i, "leader_id": 1, "leader_epoch": 0, "replica_nodes": [1, 2],
         "isr_nodes": [1], "offline_replicas": list(range(300)) if i == 1 else []}
        for i, e in enumerate((0, 9))
    ]  # fmt: skip
    topic = {"error_code": 0, "name": "t", "topic_id": uuid.UUID(int=5), "is_internal": False,
             "partitions": partitions, "topic_authorized_operations": -1}  # fmt: skip
    body = {"throttle_time_ms": 0, "brokers": [{"node_id": 1, "host": "b", "port": 1, "rack": "r"}],
            "cluster_id": None, "controller_id": 1, "topics": [topic, {**topic, "name": None}]}  # fmt: skip
    return encode_response(Response(ApiKey.METADATA, 13, {"correlation_id": 1}, body))


def metadata_v0_request(topic_count: int) -> bytes:
    return struct.pack(">hhih", ApiKey.METADATA, 0, 1, 2) + b"ab" + struct.pack(">i", topic_count)


def seed_frames() -> list[tuple[str, bytes, int, int]]:
    """(direction, frame, api_key, version) of a few realistic messages."""
    produce = Request(
        ApiKey.PRODUCE, 9, {"correlation_id": 7, "client_id": "p"},
        {"transactional_id": None, "acks": -1, "timeout_ms": 3000, "topic_data": [
            {"name": "orders", "partition_data": [{"index": 0, "records": b"\x00" * 70}]}]},
    )
    metadata = Response(ApiKey.METADATA, 12, {"correlation_id": 9}, {
        "throttle_time_ms": 0, "brokers": [{"node_id": 1, "host": "b1", "port": 9092, "rack": None}],
        "cluster_id": "c", "controller_id": 1, "topics": [{
            "error_code": 0, "name": "orders", "topic_id": None, "is_internal": False,
            "partitions": [{"error_code": 0, "partition_index": i, "leader_id": 1, "leader_epoch": 0,
                            "replica_nodes": [1], "isr_nodes": [1], "offline_replicas": []}
                           for i in range(3)],
            "topic_authorized_operations": -1}]})
    metadata.body["topics"][0]["topic_id"] = __import__("uuid").UUID(int=5)
    join = Response(ApiKey.JOIN_GROUP, 5, {"correlation_id": 3}, {
        "throttle_time_ms": 0, "error_code": 0, "generation_id": 4, "protocol_name": "range",
        "leader": "m1", "member_id": "m1",
        "members": [{"member_id": "m1", "group_instance_id": None, "metadata": b"\x00\x01meta"}]})
    return [
        ("request", encode_request(produce), 0, 9),
        ("response", encode_response(metadata), 3, 12),
        ("response", encode_response(join), 11, 5),
        ("request", metadata_v0_request(1)[:-4] + struct.pack(">i", 1) + b"\x00\x01t", 3, 0),
    ]


def golden_seeds(limit_bytes: int = 600) -> list[tuple[str, bytes, int, int]]:
    """One real captured frame per (direction, api key, version), small ones first."""
    folder = GOLDEN
    seen: dict[tuple[str, int, int], tuple[str, bytes, int, int]] = {}
    for entry in sorted(json.loads((folder / "index.json").read_text())["frames"], key=lambda e: e["size"]):
        direction = "request" if entry["direction"] == "req" else "response"
        key = (direction, entry["api_key"], entry["api_version"])
        if key not in seen and entry["size"] <= limit_bytes:
            seen[key] = (direction, (folder / entry["file"]).read_bytes(), entry["api_key"], entry["api_version"])
    return list(seen.values())


TRUNCATION_SEEDS = seed_frames()


SEEDS = TRUNCATION_SEEDS + golden_seeds()


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, bytes, int, int]:
    direction, frame, api_key, version = draw(st.sampled_from(SEEDS))
    data = bytearray(frame)
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "int32"]))
        pos = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == "flip" and data:
            data[pos] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete" and data:
            del data[pos : pos + draw(st.integers(1, 8))]
        elif kind == "int32" and len(data) >= pos + 4:
            data[pos : pos + 4] = struct.pack(">i", draw(st.sampled_from([-2, -1, 2**31 - 1, 2**24])))
    return direction, bytes(data), api_key, version


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


def expected(frame: bytes, api_key: int, version: int) -> dict[str, Any]:
    response = decode_response(frame, api_key, version)
    name = api_messages()[api_key][1].name
    found = collector(name, version)(response.body)
    found["counts"] = {k: len(v) for k, v in response.body.items() if isinstance(v, list) and not k.startswith("_")}
    return found


def compare(frame: bytes, api_key: int, version: int) -> None:
    want = expected(frame, api_key, version)
    _, got = skim_response(frame, api_key, version)
    # Same values; the skimmer meets them in wire order, the collector level by level.
    for category in ("topics", "groups", "transactional_ids", "errors"):
        assert sorted(set(got[category]), key=repr) == sorted(set(want[category]), key=repr), category
    # An absent tagged array decodes to its default []: count only arrays with elements.
    assert {k: v for k, v in got["counts"].items() if v} == {k: v for k, v in want["counts"].items() if v}




FRAMES: list[dict[str, Any]] = json.loads((GOLDEN / "index.json").read_text())["frames"]


needs_accel = pytest.mark.skipif(not accel_module.AVAILABLE, reason="codec._accel is not built")


@cache
def decoders(name: str, version: int) -> tuple[Decoder, Decoder]:
    """(Python, C) decoders of a message version."""
    struct = layout(name, version)
    return PythonDecoder(struct), accel_module.c_decoder(struct)


def outcome(decoder: Decoder, buf: Any, pos: Any, end: Any, budget: Any, skim: bool = False) -> tuple[Any, ...]:
    """("ok", value, end, budget left) or ("error", class, offset, message, budget left);
    `skim`: the value is what skimming found."""
    k = [budget]
    try:
        if skim:
            value = {"topics": [], "groups": [], "transactional_ids": [], "errors": [], "topic_ids": [], "counts": {}}
            stop = decoder.skim(buf, pos, end, k, value)
        else:
            value, stop = decoder(buf, pos, end, k)
    except Exception as exc:  # noqa: BLE001 - compared, whatever it is
        return ("error", type(exc), getattr(exc, "offset", None), str(exc), k[0])
    return ("ok", value, stop, k[0])


def assert_identical(ours: Any, theirs: Any, base: Any, where: str = "") -> None:
    """Same types and values all the way down; views over `base` on both sides."""
    assert type(ours) is type(theirs), (where, ours, theirs)
    if isinstance(ours, dict):
        assert list(ours) == list(theirs), where
        for key in ours:
            assert_identical(ours[key], theirs[key], base, f"{where}.{key}")
    elif isinstance(ours, list | tuple):
        assert len(ours) == len(theirs), where
        for index, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            assert_identical(a, b, base, f"{where}[{index}]")
    elif isinstance(ours, memoryview):
        assert ours.obj is base and theirs.obj is base, where  # zero-copy, same buffer
        assert ours.tobytes() == theirs.tobytes(), where
        for attribute in ("format", "itemsize", "ndim", "shape", "strides", "readonly", "c_contiguous"):
            assert getattr(ours, attribute) == getattr(theirs, attribute), (where, attribute)
    elif isinstance(ours, float):
        assert struct.pack(">d", ours) == struct.pack(">d", theirs), where  # NaN too
    else:
        assert ours == theirs, (where, ours, theirs)


def containers(value: Any) -> Iterator[Any]:
    if isinstance(value, dict | list):
        yield value
        for item in value.values() if isinstance(value, dict) else value:
            yield from containers(item)
    elif isinstance(value, tuple):
        for item in value:
            yield from containers(item)


def assert_same_outcome(pure: tuple[Any, ...], fast: tuple[Any, ...], base: Any) -> None:
    assert pure[0] == fast[0], (pure, fast)
    if pure[0] == "error":
        assert pure[1:] == fast[1:], (pure, fast)
        return
    assert_identical(fast[1], pure[1], base)
    assert fast[2:] == pure[2:], (pure[2:], fast[2:])
    # Decoded lists and dicts are never shared (within a message or with the layout),
    # but for the read-only defaults of absent tagged structs (codec/absent.py).
    found = [c for c in containers(fast[1]) if not isinstance(c, ReadOnlyDict)]
    assert len({id(c) for c in found}) == len(found)


def compare_struct(name: str, version: int, frame: bytes, pos: int = 0, budget: int = DEFAULT_ELEMENT_BUDGET) -> tuple[Any, ...]:
    """Decode and skim the struct at `pos` with both interpreters; the decode's outcome."""
    buf = memoryview(frame)
    pure, fast = decoders(name, version)
    expected = outcome(pure, buf, pos, len(buf), budget)
    assert_same_outcome(expected, outcome(fast, buf, pos, len(buf), budget), frame)
    skimmed = outcome(pure, buf, pos, len(buf), budget, skim=True)
    assert_same_outcome(skimmed, outcome(fast, buf, pos, len(buf), budget, skim=True), frame)
    return expected


def stages(kind: str, api_key: int, version: int) -> list[tuple[str, int]]:
    """(message, version) of the header and the body decoder, as codec.messages plans."""
    request, response = api_messages()[api_key]
    body = DEFAULT_POLICY.body_version(api_key, version)
    if kind == "request":
        return [("RequestHeader", DEFAULT_POLICY.request_header_version(api_key, version)), (request.name, body)]
    return [("ResponseHeader", DEFAULT_POLICY.response_header_version(api_key, version)), (response.name, body)]


def compare_frame(frame: bytes, kind: str, api_key: int, version: int, budget: int = DEFAULT_ELEMENT_BUDGET) -> bool:
    """Header then body from where the header ended, both ways; True if both decoded."""
    pos = 0
    for name, stage_version in stages(kind, api_key, version):
        result = compare_struct(name, stage_version, frame, pos, budget)
        if result[0] == "error":
            return False
        pos = result[2]
    return True


def golden(entry: dict[str, Any]) -> tuple[bytes, str, int, int]:
    kind = "request" if entry["direction"] == "req" else "response"
    return (GOLDEN / entry["file"]).read_bytes(), kind, entry["api_key"], entry["api_version"]


FEW_APIS = frozenset({
    ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP,
    ApiKey.API_VERSIONS, ApiKey.CREATE_TOPICS, ApiKey.INIT_PRODUCER_ID,
})


def few_golden_frames() -> list[tuple[bytes, str, int, int]]:
    """One small real frame each of a few apis that matter, both directions."""
    chosen: dict[tuple[str, int], tuple[bytes, str, int, int]] = {}
    for entry in sorted(FRAMES, key=lambda e: e["size"]):
        frame, kind, api_key, version = golden(entry)
        if api_key in FEW_APIS and 40 <= len(frame) <= 4000:
            chosen.setdefault((kind, api_key), (frame, kind, api_key, version))
    return list(chosen.values())


TRUNCATED = few_golden_frames() + [
    (fetch_frame(), "response", 1, 17),
    (metadata_frame(), "response", 3, 13),
    (join_group(300, 9)[1], "response", 11, 9),
    (join_group(300, 5)[1], "response", 11, 5),
]
