"""Kafka Connect group protocol metadata and assignments, against hand-encoded Java layouts."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from codec.connect_protocol import (
    CONNECTOR_TASK,
    decode_connect_assignment,
    decode_connect_metadata,
)
from codec.errors import DecodeError

# --- a test-only encoder, field by field as ConnectProtocol / IncrementalCooperative... ---

Connectors = list[tuple[str, list[int]]] | None


def _i16(v: int) -> bytes:
    return struct.pack(">h", v)


def _i32(v: int) -> bytes:
    return struct.pack(">i", v)


def _i64(v: int) -> bytes:
    return struct.pack(">q", v)


def _str(s: str) -> bytes:
    raw = s.encode()
    return _i16(len(raw)) + raw


def _connectors(entries: Connectors) -> bytes:
    if entries is None:
        return _i32(-1)
    out = _i32(len(entries))
    for name, tasks in entries:
        out += _str(name) + _i32(len(tasks)) + b"".join(_i32(t) for t in tasks)
    return out


def _metadata(version: int, url: str, offset: int, allocation: bytes | None = b"") -> bytes:
    out = _i16(version) + _str(url) + _i64(offset)
    if version == 0 or allocation == b"":
        return out  # v0 has no allocation; b"" here means "field left out"
    return out + (_i32(-1) if allocation is None else _i32(len(allocation)) + allocation)


def _assignment_head(version: int, error: int, leader: str, url: str, offset: int) -> bytes:
    return _i16(version) + _i16(error) + _str(leader) + _str(url) + _i64(offset)


def _assignment(
    version: int,
    assigned: Connectors,
    revoked: Connectors = None,
    delay: int = 0,
) -> bytes:
    out = _assignment_head(version, 0, "worker-1", "http://w1:8083/", 17) + _connectors(assigned)
    return out if version == 0 else out + _connectors(revoked) + _i32(delay)


ASSIGNED = [("orders-sink", [CONNECTOR_TASK, 0, 1]), ("users-src", [2])]
REVOKED = [("old-conn", [CONNECTOR_TASK, 3])]


def _as_dicts(entries: Connectors) -> list[dict[str, object]] | None:
    if entries is None:
        return None
    return [{"connector": name, "tasks": tasks} for name, tasks in entries]


# --- metadata ----------------------------------------------------------------------------


def test_metadata_v0() -> None:
    data = _metadata(0, "http://w1:8083/", 42)
    assert decode_connect_metadata(data) == {
        "version": 0,
        "url": "http://w1:8083/",
        "config_offset": 42,
    }


@pytest.mark.parametrize("version", [1, 2])
def test_metadata_incremental_with_previous_assignment(version: int) -> None:
    allocation = _assignment(version, ASSIGNED, REVOKED, delay=300)
    result = decode_connect_metadata(_metadata(version, "http://w2:8083/", -1, allocation))
    assert result["version"] == version
    assert result["url"] == "http://w2:8083/"
    assert result["config_offset"] == -1
    assert result["allocation"] == {
        "version": version,
        "error": 0,
        "leader": "worker-1",
        "leader_url": "http://w1:8083/",
        "config_offset": 17,
        "assignment": _as_dicts(ASSIGNED),
        "revoked": _as_dicts(REVOKED),
        "delay": 300,
    }


@pytest.mark.parametrize("allocation", [None, b""])
def test_metadata_v1_null_or_missing_allocation(allocation: bytes | None) -> None:
    result = decode_connect_metadata(_metadata(1, "u", 5, allocation))
    assert result == {"version": 1, "url": "u", "config_offset": 5, "allocation": None}


def test_metadata_accepts_memoryview_and_ignores_trailing_bytes() -> None:
    data = memoryview(_metadata(0, "u", 1) + b"future fields")
    assert decode_connect_metadata(data)["url"] == "u"


def test_bad_allocation_reports_its_absolute_offset() -> None:
    # version (2) + "u" string (3) + offset (8) + allocation length (4): the inner
    # assignment starts at 17, its error field at 19, its leader length at 21.
    inner = _i16(1) + _i16(0) + _i16(-5)
    with pytest.raises(DecodeError) as info:
        decode_connect_metadata(_metadata(1, "u", 0, inner))
    assert info.value.direction == "connect"
    assert info.value.offset == 23  # just past the bad length
    assert "leader" in str(info.value)


# --- assignment --------------------------------------------------------------------------


def test_assignment_v0() -> None:
    result = decode_connect_assignment(_assignment(0, ASSIGNED))
    assert result == {
        "version": 0,
        "error": 0,
        "leader": "worker-1",
        "leader_url": "http://w1:8083/",
        "config_offset": 17,
        "assignment": _as_dicts(ASSIGNED),
    }


@pytest.mark.parametrize("version", [1, 2, 3])
def test_assignment_incremental(version: int) -> None:
    result = decode_connect_assignment(_assignment(version, [], REVOKED, delay=5000))
    assert result["version"] == version
    assert result["assignment"] == []
    assert result["revoked"] == _as_dicts(REVOKED)
    assert result["delay"] == 5000


def test_assignment_incremental_null_arrays() -> None:
    result = decode_connect_assignment(_assignment(1, None, None, delay=0))
    assert result["assignment"] is None and result["revoked"] is None


def test_assignment_incremental_missing_tail_takes_defaults() -> None:
    # Kafka's ASSIGNMENT_V1 tolerates missing trailing fields that have defaults.
    head = _assignment_head(1, 1, "l", "u", 9)
    assert decode_connect_assignment(head) == {
        "version": 1,
        "error": 1,
        "leader": "l",
        "leader_url": "u",
        "config_offset": 9,
        "assignment": None,
        "revoked": None,
        "delay": 0,
    }
    with_assigned = decode_connect_assignment(head + _connectors(ASSIGNED))
    assert with_assigned["assignment"] == _as_dicts(ASSIGNED)
    assert with_assigned["revoked"] is None and with_assigned["delay"] == 0


def test_invalid_utf8_is_replaced_like_java() -> None:
    data = _i16(0) + _i16(2) + b"\xff\xfe" + _i64(0)
    assert decode_connect_metadata(data)["url"] == "\ufffd\ufffd"


# --- bad input ---------------------------------------------------------------------------


def _decode_error(decode: object, data: bytes) -> DecodeError:
    assert callable(decode)
    with pytest.raises(DecodeError) as info:
        decode(data)
    assert info.value.direction == "connect"
    return info.value


@pytest.mark.parametrize("decode", [decode_connect_metadata, decode_connect_assignment])
def test_negative_version_is_refused(decode: object) -> None:
    assert _decode_error(decode, _i16(-1) + b"\x00" * 40).offset == 0


def test_every_truncation_of_a_v0_message_is_refused() -> None:
    for data, decode in [
        (_metadata(0, "http://w1:8083/", 1), decode_connect_metadata),
        (_assignment(0, ASSIGNED), decode_connect_assignment),
    ]:
        for end in range(len(data)):
            _decode_error(decode, data[:end])


def test_truncations_of_an_incremental_assignment_decode_or_fail_cleanly() -> None:
    data = _assignment(1, ASSIGNED, REVOKED, delay=7)
    full = decode_connect_assignment(data)
    for end in range(len(data)):
        try:
            partial = decode_connect_assignment(data[:end])
        except DecodeError:
            continue
        assert partial != full  # only field boundaries decode, with defaults after them


_HEAD_V0 = _assignment_head(0, 0, "l", "u", 0)
_HEAD_V1 = _assignment_head(1, 0, "l", "u", 0)


@pytest.mark.parametrize(
    ("decode", "data", "message"),
    [
        (decode_connect_metadata, _i16(0) + _i16(-1) + _i64(0), "negative length"),
        (decode_connect_metadata, _i16(0) + _i16(100) + b"short", "needs 100 bytes"),
        (decode_connect_metadata, _metadata(1, "u", 0) + _i32(2**31 - 1), "needs"),
        (decode_connect_assignment, _HEAD_V0 + _i32(-1), "negative count"),
        (decode_connect_assignment, _HEAD_V0 + _i32(2**31 - 1), "exceeds"),
        (decode_connect_assignment, _HEAD_V1 + _i32(1) + _str("c") + _i32(10**9), "exceeds"),
        (decode_connect_assignment, _HEAD_V1 + _i32(1) + _str("c") + _i32(-1), "negative"),
    ],
)
def test_bad_lengths_are_refused_before_allocating(
    decode: object, data: bytes, message: str
) -> None:
    assert message in str(_decode_error(decode, data))


@settings(max_examples=examples(400), deadline=None)
@given(data=st.binary(max_size=200))
def test_any_bytes_give_a_dict_or_decode_error(data: bytes) -> None:
    for decode in (decode_connect_metadata, decode_connect_assignment):
        try:
            assert isinstance(decode(data), dict)
        except DecodeError as exc:
            assert exc.direction == "connect"


@settings(max_examples=examples(300), deadline=None)
@given(data=st.data())
def test_mutated_valid_messages_give_a_dict_or_decode_error(data: st.DataObject) -> None:
    version = data.draw(st.integers(0, 2))
    message = _metadata(version, "http://w:1/", 3, _assignment(max(version, 1), ASSIGNED))
    pos = data.draw(st.integers(0, len(message) - 1))
    mutated = message[:pos] + bytes([data.draw(st.integers(0, 255))]) + message[pos + 1 :]
    try:
        assert isinstance(decode_connect_metadata(mutated), dict)
    except DecodeError as exc:
        assert exc.offset is not None and 0 <= exc.offset <= len(mutated)
