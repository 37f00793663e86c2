"""The reference interpreter of the layout description (codec/layout/), in Python.

`decode` turns a struct's bytes into a dict; `skim` walks the same bytes with the same
checks but keeps only what a log line needs (codec/skim.py); `encode` writes a dict
back. The C interpreter (codec/_accel.c) runs the same description in the same shape
(`decode_struct`, `read_value`, `read_array`, `read_tagged` there); tests/codec/test_codec_accel.py
holds the two to the same dicts, positions, element budgets and errors (class,
message, offset) on every api and version. This one runs where the C one was not
built (or KAFKALENS_PURE_CODEC is set), and is the reference: read it to know what a
decode does.

A struct is read from b[p:end] of a memoryview; `bytes` and `records` values are
zero-copy views of it. `k` is a one-item list, the element budget left: each struct,
string, bytes or uuid element of an array costs one, and going below 0 is refused, so a
small hostile frame cannot make us allocate much (a one-byte element becomes a ~200-byte
dict). Every length and count is checked against the bytes left before anything is
allocated. Bad input raises DecodeError (codec/wire.py's `short` and `invalid`), or
UnicodeDecodeError for a string that is not UTF-8 (codec/messages.py turns that into a
DecodeError too).
"""

from __future__ import annotations

import struct
from typing import Any

from codec.errors import EncodeError
from codec.kinds import FORMATS, Entity, Framing, Kind
from codec.layout import Field, Struct
from codec.wire import (
    INT16,
    INT32,
    MAX_UNKNOWN_TAGS,
    invalid,
    read_uvarint,
    short,
    uuid_bytes,
    uuid_of,
    write_uvarint,
)

# skim()'s `found`: what it keeps, by key (codec/skim.py builds it).
TOPICS, GROUPS, TRANSACTIONAL_IDS, ERRORS = "topics", "groups", "transactional_ids", "errors"
TOPIC_IDS, COUNTS = "topic_ids", "counts"
# ... and, skimming a picked layout (codec.layout.picked), its rows and the row being made
ROWS, ROW = "rows", "row"
FOUND_KEYS = {Entity.TOPIC: TOPICS, Entity.GROUP: GROUPS, Entity.TRANSACTIONAL_ID: TRANSACTIONAL_IDS}

# Enum members read once: a read through the enum class costs many times a plain
# constant's (bench.proxy.choices, "enum member read").
_BOOL, _UUID, _STRING, _STRUCT, _ARRAY = Kind.BOOL, Kind.UUID, Kind.STRING, Kind.STRUCT, Kind.ARRAY
_COMPACT, _INT16, _MARKER, _TOPIC_ID = Framing.COMPACT, Framing.INT16, Framing.MARKER, Entity.TOPIC_ID
_UNPACK = {kind: struct.Struct(">" + code).unpack_from for kind, code in FORMATS.items()}
_PACK = {kind: struct.Struct(">" + code).pack for kind, code in FORMATS.items()}
_NAMES = {Kind.STRING: "string", Kind.BYTES: "bytes", Kind.RECORDS: "records"}
_NULL = {_COMPACT: b"\x00", _INT16: b"\xff\xff", Framing.INT32: b"\xff\xff\xff\xff", _MARKER: b"\xff"}
_ARRAYS: dict[tuple[Kind, int], struct.Struct] = {}  # (element kind, count < 256): its format


def decode(s: Struct, b: memoryview, p: int, end: int, k: list[int]) -> tuple[dict[str, Any], int]:
    """The struct at b[p:end] as a dict, and the position after it."""
    return _struct(s, b, p, end, k, None, None)


def skim(s: Struct, b: memoryview, p: int, end: int, k: list[int], found: dict[str, Any]) -> int:
    """Walk the struct at b[p:end] as decode() does, appending to `found`'s lists the
    topic names, group ids, transactional ids, non-zero error codes and (topic id, topic
    name) pairs on the way, and the count of each of its own arrays to found["counts"];
    strings nobody keeps are not decoded. A picked layout's (codec.layout.picked) rows
    go to found["rows"]: a tuple of its columns after each element of the struct that
    `emits`, the columns as they were when it was read (each None until read). Returns
    the position after it."""
    if not s.columns:
        return _struct(s, b, p, end, k, found, found[COUNTS])[1]
    found[ROW] = [None] * len(s.columns)  # the row being made: gone once the walk ends
    try:
        return _struct(s, b, p, end, k, found, found[COUNTS])[1]
    finally:
        del found[ROW]


def _struct(
    s: Struct, b: memoryview, p: int, end: int, k: list[int], found: dict[str, Any] | None, counts: Any
) -> tuple[dict[str, Any], int]:
    """decode (found None) or skim (then the dict holds only what was kept)."""
    d = s.template.copy() if found is None else {}
    for f in s.fields:
        kind = f.kind
        if kind <= _BOOL:  # fixed size: a run's first field checks for the run
            if f.check and p + f.check > end:
                raise short(p)
            value = _UNPACK[kind](b, p)[0]
            p += f.size
            if found is not None:
                if value and f.entity:
                    found[ERRORS].append(value)
                if f.pick:
                    found[ROW][f.pick - 1] = value
            d[f.name] = value
        else:
            d[f.name], p = _value(f, b, p, end, k, found, counts)
            if found is not None and f.pick:
                found[ROW][f.pick - 1] = d[f.name]
    if s.flexible:
        if found is None:
            for f in s.fresh:
                d[f.name] = fresh(f.default)
        if p < end and not b[p]:  # no tagged fields: the usual case
            p += 1
        else:
            p = _tagged(s, d, b, p, end, k, found, counts)
    if s.topic_pair is not None and found is not None:
        topic_id, topic = d.get(s.topic_pair[0]), d.get(s.topic_pair[1])
        if topic_id is not None and topic is not None:
            found[TOPIC_IDS].append((topic_id, topic))
    if s.emits and found is not None:
        found[ROWS].append(tuple(found[ROW]))
    return d, p


def fresh(default: Any) -> Any:
    """A new copy of a list or dict default, nested ones too (anything else is shared:
    immutable, or read-only)."""
    if type(default) is list:
        return [fresh(item) for item in default]
    if type(default) is dict:
        return {key: fresh(item) for key, item in default.items()}
    return default


def _value(
    f: Field, b: memoryview, p: int, end: int, k: list[int], found: dict[str, Any] | None, counts: Any
) -> tuple[Any, int]:
    """One field's value (any kind but a fixed-size one in a run), and the position after."""
    kind = f.kind
    if kind <= _BOOL:
        if p + f.check > end:
            raise short(p)
        value = _UNPACK[kind](b, p)[0]
        if value and f.entity and found is not None:
            found[ERRORS].append(value)
        return value, p + f.size
    if kind == _UUID:
        if p + 16 > end:
            raise short(p, "uuid")
        if found is not None and f.entity != _TOPIC_ID and not f.pick:
            return None, p + 16
        return uuid_of(b[p : p + 16].tobytes()), p + 16
    if kind == _STRUCT:
        if f.framing == _MARKER:
            if p >= end:
                raise short(p, "struct marker")
            p += 1
            if b[p - 1] == 0xFF:
                return None, p
        assert f.struct is not None
        return _struct(f.struct, b, p, end, k, found, None)
    if f.framing == _COMPACT:
        n, p = read_uvarint(b, p, end)
        n -= 1
    else:
        width = 2 if f.framing == _INT16 else 4
        if p + width > end:
            raise short(p, "length")
        n = (INT16 if width == 2 else INT32).unpack_from(b, p)[0]
        p += width
    if n < 0:
        if f.nullable:
            return None, p
        raise invalid(p, f"null {'array ' if kind == _ARRAY else ''}in a field that is not nullable")
    if kind == _ARRAY:
        return _array(f, n, b, p, end, k, found, counts)
    stop = p + n
    if stop > end or (f.peek and stop == end):
        raise short(p, _NAMES[kind])
    if kind != _STRING:
        return (b[p:stop] if found is None or f.pick else None), stop
    if found is None:
        return b[p:stop].tobytes().decode(), stop
    if not f.entity:
        return (b[p:stop].tobytes().decode() if f.pick else None), stop
    text = b[p:stop].tobytes().decode()
    found[FOUND_KEYS[f.entity]].append(text)
    return text, stop


def _array(
    f: Field, n: int, b: memoryview, p: int, end: int, k: list[int], found: dict[str, Any] | None, counts: Any
) -> tuple[Any, int]:
    """The elements of an array of `n` (its count read), and the position after."""
    room = end - p
    if n * f.min_size > room or (f.peek and n * f.min_size == room):
        raise invalid(p, "array count exceeds the bytes left")
    if counts is not None:
        counts[f.name] = n
    e = f.element
    assert e is not None
    if e.kind <= _BOOL:  # all at once; they cost no budget
        stop = p + n * e.size
        if found is not None or not n:
            return (None if found is not None else []), stop
        packer = _ARRAYS.get((e.kind, n))
        if packer is None:
            packer = struct.Struct(f">{n}{FORMATS[e.kind]}")
            if n < 256:
                _ARRAYS[e.kind, n] = packer
        return [*packer.unpack_from(b, p)], stop
    items: list[Any] = []
    if n:
        k[0] -= n
        if k[0] < 0:
            raise invalid(p, "more array elements than the decode budget")
    for _ in range(n):
        if e.kind == _STRUCT:
            assert e.struct is not None
            item, p = _struct(e.struct, b, p, end, k, found, None)
        else:
            item, p = _value(e, b, p, end, k, found, None)
        items.append(item)
    return (items if found is None else None), p


def _tagged(
    s: Struct,
    d: dict[str, Any],
    b: memoryview,
    p: int,
    end: int,
    k: list[int],
    found: dict[str, Any] | None,
    counts: Any,
) -> int:
    """The tagged-field section: known tags into `d` (a value equal to its default is
    remembered in `_explicit_tags`, so the encoder writes it back), unknown ones kept as
    (tag, view) in `_unknown_tags`, at most MAX_UNKNOWN_TAGS of them."""
    count, p = read_uvarint(b, p, end)
    if count > end - p:
        raise invalid(p, "tagged field count exceeds the bytes left")
    unknown: list[tuple[int, memoryview]] | None = None
    explicit: list[int] | None = None
    for _ in range(count):
        tag, p = read_uvarint(b, p, end)
        size, p = read_uvarint(b, p, end)
        stop = p + size
        if stop > end:
            raise short(p, "tagged field")
        f = next((t for t in s.tagged if t.tag == tag), None)
        if f is None:
            if unknown is None:
                unknown = []
            elif len(unknown) >= MAX_UNKNOWN_TAGS:
                raise invalid(p, "too many tagged fields")
            unknown.append((tag, b[p:stop]))
            p = stop
            continue
        value, p = _value(f, b, p, stop, k, found, counts)
        if p != stop:
            raise invalid(p, "tagged field size mismatch")
        d[f.name] = value
        if found is None and value == f.default:
            if explicit is None:
                explicit = []
            explicit.append(tag)
    if found is None:
        if unknown is not None:
            d["_unknown_tags"] = unknown
        if explicit is not None:
            d["_explicit_tags"] = explicit
    return p


# --- encoding ------------------------------------------------------------------------------


def encode(s: Struct, d: dict[str, Any], out: list[Any]) -> None:
    """Append the struct's bytes to `out`. A missing key takes its field's default;
    `_unknown_tags` are written back, and tagged fields at their default only if
    `_explicit_tags` names them."""
    for f in s.fields:
        _put(f, d.get(f.name, f.default), out)
    if not s.flexible:
        return
    tags = list(d.get("_unknown_tags") or ())
    explicit = d.get("_explicit_tags") or ()
    for f in s.tagged:
        value = d.get(f.name, f.default)
        if value != f.default or f.tag in explicit:
            raw: list[Any] = []
            _put(f, value, raw)
            tags.append((f.tag, b"".join(raw)))
    tags.sort(key=lambda pair: pair[0])  # stable: unknown ones first among equal tags
    out.append(write_uvarint(len(tags)))
    for tag, raw_value in tags:
        out += (write_uvarint(tag), write_uvarint(len(raw_value)), raw_value)


def _put(f: Field, value: Any, out: list[Any]) -> None:
    kind = f.kind
    if kind <= _BOOL:
        out.append(_PACK[kind](value))
        return
    if kind == _UUID:
        out.append(uuid_bytes(value))
        return
    if value is None:
        if not f.nullable:
            raise EncodeError(f"{f.name or 'an array element'} is null but not nullable in this version")
        out.append(_NULL[f.framing])
        return
    if kind == _STRUCT:
        assert f.struct is not None
        if f.framing == _MARKER:
            out.append(b"\x01")
        encode(f.struct, value, out)
        return
    raw = value.encode("utf-8") if kind == _STRING else value
    if f.framing == _COMPACT:
        out.append(write_uvarint(len(raw) + 1))
    else:
        out.append((INT16 if f.framing == _INT16 else INT32).pack(len(raw)))
    if kind != _ARRAY:
        out.append(raw)
        return
    e = f.element
    assert e is not None
    if e.kind <= _BOOL:
        out.append(struct.pack(f">{len(value)}{FORMATS[e.kind]}", *value))
    elif e.kind == _STRUCT:
        assert e.struct is not None
        for item in value:
            encode(e.struct, item, out)
    else:
        for item in value:
            _put(e, item, out)
