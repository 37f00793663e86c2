"""Skim a message: parse every byte, keep only what a log line needs.

A full decode builds a dict per struct and a list per array; for a Metadata response
with 1,000 partitions that is most of the cost, and a request log needs none of it:
only topic names, group and transactional ids, non-zero error codes, topic ids with
their names, and how many brokers and topics there are. A skimmer is compiled per
(message, version) like a decoder (codec/compiler.py) and checks the same bounds, so
malformed input still raises DecodeError; it just materialises nothing else.

Result: {"topics": [...], "groups": [...], "transactional_ids": [...], "errors": [...],
"topic_ids": [(uuid, name), ...], "counts": {top-level array name: length}}.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable
from functools import cache
from typing import Any

from codec import wire
from codec.compiler import (
    FIXED_TYPES,
    _element_min_size,
    _Source,
    _starts_with_varint,
    _variable,
    emit_count_check,
    emit_length,
    emit_null_check,
    emit_sub,
    emit_tagged_loop,
    write_function,
)
from codec.entities import ERROR_CODES, GROUPS, TOPICS, TRANSACTIONAL_IDS, category
from codec.errors import DecodeError
from codec.messages import DEFAULT_POLICY, HeaderPolicy
from codec.schema import Field, api_messages, message

TOPIC_IDS = "topic_ids"
COUNTS = "counts"
CATEGORIES = (TOPICS, GROUPS, TRANSACTIONAL_IDS, ERROR_CODES, TOPIC_IDS)

Skimmer = Callable[[memoryview, int, int], tuple[dict[str, Any], int]]
RawSkimmer = Callable[[memoryview, int, int, dict[str, Any]], int]  # fills the dict, returns the end
Pair = tuple[str, str] | None  # the variables pairing a topic id with its name
_NAMES = itertools.count()


class SkimBuilder:
    """Writes a skimmer's source; sub-structs are skimmed in line, as in the decoder."""

    def __init__(self, namespace: dict[str, Any], version: int, flexible: bool) -> None:
        self.namespace = namespace
        self.version = version
        self.flexible = flexible
        self.functions: dict[tuple[int, bool], str] = {}  # (id(fields), top) -> its function

    def build(self, fields: tuple[Field, ...], name: str, top: bool = False) -> str:
        if (id(fields), top) in self.functions:
            return self.functions[id(fields), top]
        func = f"S_{name}_{next(_NAMES)}"

        def emit(src: _Source) -> None:
            src.line(0, f"def {func}(b, p, n, a):")
            self.emit_body(src, 1, fields, "n", top)
            src.line(1, "return p")

        write_function(self.namespace, emit)
        self.functions[id(fields), top] = func
        return func

    def emit_body(self, src: _Source, ind: int, fields: tuple[Field, ...], end: str, top: bool) -> None:
        src.depth += 1
        present = [f for f in fields if f.present_in(self.version)]
        pair = None
        if "topic_id" in {f.name for f in present} and any(category(f) == TOPICS for f in present):
            pair = (src.tmp("tid"), src.tmp("tname"))
            src.line(ind, f"{pair[0]} = {pair[1]} = None")
        regular = [f for f in present if f.tag is None]
        first = None
        index = 0
        while index < len(regular):
            run = list(itertools.takewhile(_plain_fixed, regular[index:]))
            index += len(run)
            if run:
                first = self._fixed_run(src, ind, run, end, self._peek(regular[index:]))
                continue
            first = self._field(src, ind, regular[index], end, top, pair, first, self._peek(regular[index + 1 :]))
            index += 1
        if self.flexible:
            self._tagged(src, ind, [f for f in present if f.tag is not None], end, top, pair, first)
        if pair:
            src.line(ind, f"if {pair[0]} is not None and {pair[1]} is not None: a['topic_ids'].append(({pair[0]}, {pair[1]}))")
        src.depth -= 1

    def _peek(self, rest: list[Field]) -> bool:
        if not rest:
            return self.flexible
        return _starts_with_varint(rest[0], self.version, self.flexible)

    def _fixed_run(self, src: _Source, ind: int, run: list[Field], end: str, peek: bool) -> str | None:
        """Fixed-size fields in a row: one bounds check, and only non-zero error codes
        unpacked (two byte tests cost less than an unpack)."""
        size = sum(FIXED_TYPES[f.type][1] for f in run)
        src.line(ind, f"if p + {size + peek} > {end}: raise short(p)")
        offset = 0
        for field in run:
            if category(field) == ERROR_CODES:
                at = f"p + {offset}" if offset else "p"
                src.line(ind, f"if b[{at}] or b[p + {offset + 1}]: a['errors'].append(I16.unpack_from(b, {at})[0])")
            offset += FIXED_TYPES[field.type][1]
        src.line(ind, f"p += {size}")
        if not peek:
            return None
        first = src.tmp("c")
        src.line(ind, f"{first} = b[p]")
        return first

    def _tagged(
        self, src: _Source, ind: int, tagged: list[Field], end: str, top: bool, pair: Pair, first: str | None
    ) -> None:
        src.line(ind, f"if not {first}: p += 1" if first else f"if p < {end} and not b[p]: p += 1")
        src.line(ind, "else:")
        if not tagged:
            src.line(ind + 1, f"_, p = read_unknown_tags(b, p, {end})")
            return
        ind += 1
        tag, stop = emit_tagged_loop(src, ind, end)
        for index, field in enumerate(sorted(tagged, key=lambda f: f.tag or 0)):
            src.line(ind + 1, f"{'elif' if index else 'if'} {tag} == {field.tag}:")
            src.cold += 1
            self._field(src, ind + 2, field, stop, top, pair)
            src.cold -= 1
            src.line(ind + 2, f"if p != {stop}: raise invalid(p, 'tagged field size mismatch')")
        src.line(ind + 1, f"p = {stop}")

    def _field(
        self,
        src: _Source,
        ind: int,
        field: Field,
        end: str,
        top: bool,
        pair: Pair,
        first: str | None = None,
        peek: bool = False,
    ) -> str | None:
        """Skip a field; `first` and `peek` and the result as in DecoderBuilder.emit_field."""
        flex = field.flexible_in(self.version, self.flexible)
        nullable = field.nullable_in(self.version)
        kind = category(field)
        if field.is_array:
            return self._array(src, ind, field, end, flex, nullable, kind, top, first, peek)
        if field.is_struct:
            if nullable:
                src.line(ind, f"if p >= {end}: raise short(p, 'struct marker')")
                src.line(ind, "p += 1")
                src.line(ind, "if b[p - 1] != 0xFF:")
                ind += 1
            self._sub(src, ind, field, end)
            return None
        hold = None
        if pair and field.name == "topic_id":
            hold = pair[0]
        elif pair and kind == TOPICS:
            hold = pair[1]
        return self._scalar(src, ind, field.type, end, flex, nullable, kind, hold, first, peek)

    def _sub(self, src: _Source, ind: int, field: Field, end: str) -> None:
        fields = field.children or ()
        emit_sub(
            src,
            ind,
            fields,
            inline=lambda: self.emit_body(src, ind, fields, end, False),
            call=lambda: src.line(ind, f"p = {self.build(fields, field.name)}(b, p, {end}, a)"),
        )

    def _scalar(
        self,
        src: _Source,
        ind: int,
        type_name: str,
        end: str,
        flex: bool,
        nullable: bool,
        keep: str | None,
        hold: str | None = None,
        first: str | None = None,
        peek: bool = False,
    ) -> str | None:
        """Skip a value; keep it if it is an error code, a name or an id (`hold` names
        the variable that pairs a topic id with its name)."""
        if type_name in FIXED_TYPES:
            code, size = FIXED_TYPES[type_name]
            src.line(ind, f"if p + {size} > {end}: raise short(p)")
            if keep == ERROR_CODES:
                src.line(ind, f"x = {src.const(struct.Struct('>' + code))}.unpack_from(b, p)[0]")
                src.line(ind, "if x: a['errors'].append(x)")
            src.line(ind, f"p += {size}")
            return None
        if type_name == "uuid":
            src.line(ind, f"if p + 16 > {end}: raise short(p, 'uuid')")
            if hold:
                src.line(ind, f"{hold} = uuid_of(b[p:p + 16].tobytes())")
            src.line(ind, "p += 16")
            return None
        length = _variable(src, first, "l")
        string = type_name == "string"
        emit_length(src, ind, length, end, flex, 2 if string else 4, first, wide=not string)
        ind = emit_null_check(src, ind, length, None, nullable, "")
        peek = peek and not nullable
        src.line(ind, f"if p + {length} {'>=' if peek else '>'} {end}: raise short(p, {type_name!r})")
        if hold:
            src.line(ind, f"{hold} = b[p:p + {length}].tobytes().decode(); a['topics'].append({hold})")
        elif keep in (TOPICS, GROUPS, TRANSACTIONAL_IDS):
            src.line(ind, f"a[{keep!r}].append(b[p:p + {length}].tobytes().decode())")
        src.line(ind, f"p += {length}")
        return "b[p]" if peek else None

    def _array(
        self,
        src: _Source,
        ind: int,
        field: Field,
        end: str,
        flex: bool,
        nullable: bool,
        kind: str | None,
        top: bool,
        first: str | None,
        peek: bool,
    ) -> str | None:
        count = _variable(src, first, "c")
        emit_length(src, ind, count, end, flex, 4, first)
        ind = emit_null_check(src, ind, count, None, nullable, "array ")
        element = field.element_type
        fixed = not field.is_struct and element in FIXED_TYPES
        peek = peek and fixed and not nullable
        emit_count_check(src, ind, count, _element_min_size(field, self.version, self.flexible), end, peek)
        if top:
            src.line(ind, f"a['counts'][{field.name!r}] = {count}")
        if fixed:
            src.line(ind, f"p += {count} * {FIXED_TYPES[element][1]}")
            return "b[p]" if peek else None
        src.line(ind, f"for _ in range({count}):")
        if field.is_struct:
            self._sub(src, ind + 1, field, end)
        else:
            self._scalar(src, ind + 1, element, end, flex, False, kind)
        return None


def _plain_fixed(field: Field) -> bool:
    return not field.is_array and field.type in FIXED_TYPES


def _namespace() -> dict[str, Any]:
    return {
        "uv": wire.read_uvarint,
        "short": wire.short,
        "invalid": wire.invalid,
        "read_unknown_tags": wire.read_unknown_tags,
        "uuid_of": wire.uuid_of,
        "I16": wire.INT16,
        "I32": wire.INT32,
    }


def _found() -> dict[str, Any]:
    return {TOPICS: [], GROUPS: [], TRANSACTIONAL_IDS: [], ERROR_CODES: [], TOPIC_IDS: [], COUNTS: {}}


@cache
def _compiled(message_name: str, version: int) -> RawSkimmer:
    definition = message(message_name).definition(version)
    if definition is None:
        raise DecodeError(f"{message_name} has no version {version}", api_version=version)
    namespace = _namespace()
    builder = SkimBuilder(namespace, version, definition.is_flexible(version))
    func: RawSkimmer = namespace[builder.build(definition.fields, message_name, top=True)]
    return func


@cache
def _response_skimmer(api_key: int, body_version: int) -> RawSkimmer:
    return _compiled(api_messages()[api_key][1].name, body_version)


def skimmer(message_name: str, version: int) -> Skimmer:
    func = _compiled(message_name, version)

    def skim(buf: memoryview, pos: int, end: int) -> tuple[dict[str, Any], int]:
        found = _found()
        return found, func(buf, pos, end, found)

    return skim


def skim_response(
    frame: bytes | memoryview,
    api_key: int,
    api_version: int,
    policy: HeaderPolicy = DEFAULT_POLICY,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(response header, what the body says that a log line needs)."""
    buf = frame if isinstance(frame, memoryview) else memoryview(frame)
    try:
        # Run on every response: the policy's memo and ours spare the schema lookups.
        _, header_decoder, _ = policy.plan(api_key, api_version, True)
        header, pos = header_decoder(buf, 0, len(buf), [1])
        found = _found()
        _response_skimmer(api_key, policy.body_version(api_key, api_version))(buf, pos, len(buf), found)
    except DecodeError as exc:
        raise exc.with_context(api_key=api_key, api_version=api_version, direction="response") from None
    except UnicodeDecodeError as exc:
        raise DecodeError(f"invalid UTF-8 in a string: {exc.reason}", api_key=api_key,
                          api_version=api_version, direction="response") from None
    return header, found
