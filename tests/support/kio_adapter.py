"""Bridge between kafkalens's body dicts and kio's dataclasses, for the oracle tests.

kio (Aiven's independent Kafka protocol library, native reader) names fields like we
do, except that it drops `_ms` from durations and timestamps (which it types as
timedelta/datetime), appends `_` to Python builtins (`id_`, `type_`), types error
codes as an IntEnum and the zero uuid as None. The converters below undo exactly
that, field by field, driven by our schema, and fail on anything else.
"""

from __future__ import annotations

import dataclasses
import io
import typing
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any
from uuid import UUID

from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.index import PayloadEntityType, api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from codec.schema import Field, message
from support.codec_strategies import scalar

MS = timedelta(milliseconds=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# kio's own (float based) timedelta/datetime conversions are exact only in these ranges
# and it rejects negative timestamps and error codes that are not in its enum.
TIMEDELTA_I64_BOUND = 2**50
DATETIME_BOUND = 2**42 - 1
# Fields Kafka renamed after kio 0.6.5's snapshot, ours -> kio's (same wire form):
# TxnOffsetCommit's generation id also carries a KIP-848 member epoch in Kafka 4.4, and
# StreamsGroupHeartbeat v1 widened the recovery lag to int64, renaming v0's.
ALIASES = {
    "TxnOffsetCommitRequest": {"generation_id_or_member_epoch": "generation_id"},
    "StreamsGroupHeartbeatResponse": {"acceptable_recovery_lag_legacy": "acceptable_recovery_lag"},
}


@cache
def _paths_by_class() -> dict[tuple[str, int], str]:
    """(kio class name, version) -> import path, for headers and data messages."""
    return {
        (path.rsplit(":", 1)[1], version): path
        for versions in schema_name_map.values()
        for version, kinds in versions.items()
        for kind, path in kinds.items()
        if kind in (EntityType.header, EntityType.data)
    }


def kio_path(name: str, version: int) -> str | None:
    """Where kio defines one of our messages at a version (None if kio lacks it)."""
    msg = message(name)
    if msg.kind not in ("request", "response"):
        return _paths_by_class().get((name, version))
    snake = api_key_map.get(-1 if msg.api_key is None else msg.api_key)
    kind: PayloadEntityType = EntityType.request if msg.kind == "request" else EntityType.response
    return schema_name_map.get(snake or "", {}).get(version, {}).get(kind)


@cache
def kio_class(name: str, version: int) -> type:
    path = kio_path(name, version)
    assert path is not None, f"kio lacks {name} v{version}"
    module, cls_name = path.split(":")
    cls: type = getattr(__import__(module, fromlist=[cls_name]), cls_name)
    return cls


@cache
def kio_fields(cls: type) -> dict[str, tuple[dataclasses.Field[Any], Any]]:
    hints = typing.get_type_hints(cls)
    return {f.name: (f, hints[f.name]) for f in dataclasses.fields(cls)}


def kio_name(field: Field, cls: type, owner: str) -> str | None:
    names = kio_fields(cls)
    alias = ALIASES.get(owner, {}).get(field.name)
    for candidate in (alias, field.name, field.name + "_", field.name.removesuffix("_ms")):
        if candidate in names:
            return candidate
    return None


def entity_of(hint: Any) -> type:
    """The dataclass inside `X`, `X | None`, `tuple[X, ...]` or `tuple[X, ...] | None`."""
    if dataclasses.is_dataclass(hint):
        return typing.cast(type, hint)
    for arg in typing.get_args(hint):
        if arg is not Ellipsis and arg is not type(None):
            return entity_of(arg)
    raise TypeError(f"no entity in {hint}")


def shape_mismatches(fields: tuple[Field, ...], version: int, cls: type, owner: str) -> list[str]:
    """Our fields kio lacks and kio fields we lack, recursively ('' when they match)."""
    present = [f for f in fields if f.present_in(version)]
    mapped = {f.name: kio_name(f, cls, owner) for f in present}
    problems = [f"{cls.__name__} lacks {n}" for n, k in mapped.items() if k is None]
    extra = set(kio_fields(cls)) - set(mapped.values())
    problems += [f"{cls.__name__} has extra {n}" for n in sorted(extra)]
    for f in present:
        kname = mapped[f.name]
        if f.is_struct and kname is not None:
            sub = entity_of(kio_fields(cls)[kname][1])
            problems += shape_mismatches(f.children or (), version, sub, owner)
    return problems


def _optional(hint: Any) -> bool:
    return type(None) in typing.get_args(hint)


def _leaf(field: Field, kfield: dataclasses.Field[Any], hint: Any) -> st.SearchStrategy[Any]:
    kafka_type = kfield.metadata.get("kafka_type")
    if kafka_type == "error_code":
        return st.sampled_from(sorted(int(code) for code in ErrorCode))
    if kafka_type == "timedelta_i64":
        return st.integers(-TIMEDELTA_I64_BOUND, TIMEDELTA_I64_BOUND)
    if kafka_type == "datetime_i64":
        stamps = st.integers(0, DATETIME_BOUND)
        return st.one_of(st.just(-1), stamps) if _optional(hint) else stamps
    return scalar(field.element_type)


def oracle_value(
    fields: tuple[Field, ...], version: int, flexible: bool, cls: type, owner: str
) -> st.SearchStrategy[dict[str, Any]]:
    """Like codec_strategies.struct_value, within the values kio can represent."""
    present: dict[str, st.SearchStrategy[Any]] = {}
    for field in fields:
        if not field.present_in(version):
            continue
        kfield, hint = kio_fields(cls)[kio_name(field, cls, owner) or ""]
        if field.is_struct:
            sub = entity_of(hint)
            element = oracle_value(field.children or (), version, flexible, sub, owner)
        else:
            element = _leaf(field, kfield, hint)
        if field.tag is not None and not (field.is_struct or field.is_array):
            # Both sides omit a tagged field at its default: make that case frequent.
            element = st.one_of(st.just(field.default_value()), element)
        value = st.lists(element, max_size=3) if field.is_array else element
        present[field.name] = st.one_of(st.none(), value) if field.nullable_in(version) else value
    return st.fixed_dictionaries(present)


@cache
def message_strategy(name: str, version: int) -> st.SearchStrategy[dict[str, Any]]:
    """oracle_value for one of our messages at a version (built once: Hypothesis is
    much faster drawing from a strategy it has already validated)."""
    definition = message(name).definition(version)
    assert definition is not None
    flexible = definition.is_flexible(version)
    return oracle_value(definition.fields, version, flexible, kio_class(name, version), name)


def from_kio(obj: Any, fields: tuple[Field, ...], version: int, owner: str) -> dict[str, Any]:
    """A kio entity in our dict shape."""
    cls = type(obj)
    out: dict[str, Any] = {}
    for field in fields:
        if field.present_in(version):
            kname = kio_name(field, cls, owner)
            assert kname is not None, f"{cls.__name__} lacks {field.name}"
            raw = getattr(obj, kname)
            out[field.name] = _from_kio_value(field, raw, version, owner)
    return out


def _from_kio_value(field: Field, raw: Any, version: int, owner: str) -> Any:
    if raw is None and (field.is_array or field.is_struct):
        return None
    if field.is_array:
        return [_from_kio_element(field, item, version, owner) for item in raw]
    return _from_kio_element(field, raw, version, owner)


def _from_kio_element(field: Field, raw: Any, version: int, owner: str) -> Any:
    if field.is_struct:
        return from_kio(raw, field.children or (), version, owner)
    if isinstance(raw, timedelta):
        millis, rest = divmod(raw, MS)
        assert not rest, f"{field.name}: {raw!r} is not whole milliseconds"
        return millis
    if isinstance(raw, datetime):
        return _from_kio_element(field, raw - EPOCH, version, owner)
    if field.element_type == "uuid":
        return UUID(int=0) if raw is None else raw
    if field.element_type == "int64" and raw is None:
        return -1  # kio's nullable timestamp
    if isinstance(raw, bytes | memoryview):
        return bytes(raw)
    if isinstance(raw, bool | float | str) or raw is None:
        return raw
    return int(raw)


def to_kio(
    value: dict[str, Any], fields: tuple[Field, ...], version: int, cls: type, owner: str
) -> Any:
    """Our dict as a kio entity of class `cls`."""
    kwargs: dict[str, Any] = {}
    for field in fields:
        if field.present_in(version):
            kname = kio_name(field, cls, owner)
            assert kname is not None, f"{cls.__name__} lacks {field.name}"
            kfield, hint = kio_fields(cls)[kname]
            kwargs[kname] = _to_kio_value(field, value[field.name], version, kfield, hint, owner)
    return cls(**kwargs)


def _to_kio_value(
    field: Field, raw: Any, version: int, kfield: dataclasses.Field[Any], hint: Any, owner: str
) -> Any:
    if raw is None:
        return None
    if field.is_struct:
        sub = entity_of(hint)
        if field.is_array:
            return tuple(to_kio(item, field.children or (), version, sub, owner) for item in raw)
        return to_kio(raw, field.children or (), version, sub, owner)
    kafka_type = kfield.metadata.get("kafka_type")
    if field.is_array:
        return tuple(_to_kio_scalar(kafka_type, item) for item in raw)
    return _to_kio_scalar(kafka_type, raw)


def _to_kio_scalar(kafka_type: str | None, raw: Any) -> Any:
    if kafka_type == "error_code":
        return ErrorCode(raw)
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return raw * MS
    if kafka_type == "datetime_i64":
        return None if raw == -1 else EPOCH + raw * MS
    if isinstance(raw, memoryview):
        return bytes(raw)
    if isinstance(raw, UUID) and not raw.int:
        return None  # kio's zero uuid (what its reader returns; a tagged one is then omitted)
    return raw


def kio_read(cls: type, buf: bytes, offset: int) -> tuple[Any, int]:
    """kio's decode of `cls` at `offset`: (entity, offset after it)."""
    entity: Any
    entity, size = entity_reader(cls)(buf, offset)
    return entity, offset + size


def kio_write(cls: type, entity: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(cls)(out, entity)
    return out.getvalue()


def canon(value: Any) -> Any:
    """A value in a form where equal means identical on the wire (types, -0.0, bools)."""
    if isinstance(value, dict):
        return {k: canon(v) for k, v in value.items() if k != "_explicit_tags"}
    if isinstance(value, list | tuple):
        return [canon(v) for v in value]
    if isinstance(value, memoryview | bytes | bytearray):
        return ("bytes", bytes(value))
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, float):
        return ("float", value.hex())
    if isinstance(value, int):
        return ("int", int(value))
    return (type(value).__name__, value)
