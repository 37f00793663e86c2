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
from codec.compiler import FIXED_TYPES, _element_min_size, _emit_uvarint, _Source, emit_length
from codec.entities import ERROR_CODES, GROUPS, TOPICS, TRANSACTIONAL_IDS, category
from codec.errors import DecodeError
from codec.messages import DEFAULT_POLICY, HeaderPolicy, UnknownApiError, struct_decoder
from codec.schema import Field, api_messages, message

TOPIC_IDS = "topic_ids"
COUNTS = "counts"
CATEGORIES = (TOPICS, GROUPS, TRANSACTIONAL_IDS, ERROR_CODES, TOPIC_IDS)

Skimmer = Callable[[memoryview, int, int], tuple[dict[str, Any], int]]
_NAMES = itertools.count()


class SkimBuilder:
    def __init__(self, namespace: dict[str, Any], version: int, flexible: bool) -> None:
        self.namespace = namespace
        self.version = version
        self.flexible = flexible

    def build(self, fields: tuple[Field, ...], name: str, top: bool = False) -> str:
        src = _Source(self.namespace)
        func = f"S_{name}_{next(_NAMES)}"
        src.line(0, f"def {func}(b, p, n, a):")
        present = [f for f in fields if f.present_in(self.version)]
        names = {f.name for f in present}
        pair = "topic_id" in names and any(category(f) == TOPICS for f in present)
        regular = [f for f in present if f.tag is None]
        index = 0
        while index < len(regular):
            run = list(itertools.takewhile(_plain_fixed, regular[index:]))
            if len(run) > 1:
                self._fixed_run(src, run)
                index += len(run)
            else:
                self._field(src, 1, regular[index], "n", top, pair)
                index += 1
        if self.flexible:
            self._tagged(src, [f for f in present if f.tag is not None], pair, top)
        if pair:
            src.line(1, "if tid is not None and tname is not None: a['topic_ids'].append((tid, tname))")
        src.line(1, "return p")
        if pair:
            src.lines.insert(1, "    tid = tname = None")
        exec("\n".join(src.lines), self.namespace)  # noqa: S102 - our own generated source
        return func

    def _fixed_run(self, src: _Source, run: list[Field]) -> None:
        """Fixed-size fields in a row: one bounds check, and only error codes read."""
        size = sum(FIXED_TYPES[f.type][1] for f in run)
        src.line(1, f"if p + {size} > n: raise short(p)")
        offset = 0
        for field in run:
            if category(field) == ERROR_CODES:
                src.line(1, f"x = I16.unpack_from(b, p + {offset})[0]")
                src.line(1, "if x: a['errors'].append(x)")
            offset += FIXED_TYPES[field.type][1]
        src.line(1, f"p += {size}")

    def _tagged(self, src: _Source, tagged: list[Field], pair: bool, top: bool) -> None:
        _emit_uvarint(src, 1, "tc", "n")
        src.line(1, "if tc > n - p: raise invalid(p, 'tagged field count exceeds the bytes left')")
        src.line(1, "for _ in range(tc):")
        src.line(2, "tag, p = uv(b, p, n)")
        src.line(2, "sz, p = uv(b, p, n)")
        src.line(2, "e = p + sz")
        src.line(2, "if e > n: raise short(p, 'tagged field')")
        keyword = "if"
        for field in sorted(tagged, key=lambda f: f.tag or 0):
            src.line(2, f"{keyword} tag == {field.tag}:")
            self._field(src, 3, field, "e", top, pair)
            src.line(3, "if p != e: raise invalid(p, 'tagged field size mismatch')")
            keyword = "elif"
        src.line(2, "p = e")

    def _field(self, src: _Source, ind: int, field: Field, end: str, top: bool, pair: bool) -> None:
        flex = field.flexible_in(self.version, self.flexible)
        nullable = field.nullable_in(self.version)
        kind = category(field)
        if field.is_array:
            self._array(src, ind, field, end, flex, nullable, kind, top)
        elif field.is_struct:
            sub = self.build(field.children or (), field.name)
            if nullable:
                src.line(ind, f"if p >= {end}: raise short(p, 'struct marker')")
                src.line(ind, "p += 1")
                src.line(ind, f"if b[p - 1] != 0xFF: p = {sub}(b, p, {end}, a)")
            else:
                src.line(ind, f"p = {sub}(b, p, {end}, a)")
        else:
            keep = kind
            if pair and field.name == "topic_id":
                keep = "tid"
            elif pair and kind == TOPICS:
                keep = "tname"
            self._scalar(src, ind, field.type, end, flex, nullable, keep)

    def _scalar(
        self, src: _Source, ind: int, type_name: str, end: str, flex: bool, nullable: bool, keep: str | None
    ) -> None:
        if type_name in FIXED_TYPES:
            code, size = FIXED_TYPES[type_name]
            src.line(ind, f"if p + {size} > {end}: raise short(p)")
            if keep == ERROR_CODES:
                src.line(ind, f"x = {src.const(struct.Struct('>' + code))}.unpack_from(b, p)[0]")
                src.line(ind, "if x: a['errors'].append(x)")
            src.line(ind, f"p += {size}")
            return
        if type_name == "uuid":
            src.line(ind, f"if p + 16 > {end}: raise short(p, 'uuid')")
            if keep == "tid":
                src.line(ind, "tid = read_uuid(b, p)")
            src.line(ind, "p += 16")
            return
        emit_length(src, ind, "l", end, flex, 2 if type_name == "string" else 4)
        src.line(ind, "if l < 0:")
        src.line(ind + 1, "pass" if nullable else "raise invalid(p, 'null in a field that is not nullable')")
        src.line(ind, "else:")
        src.line(ind + 1, f"if p + l > {end}: raise short(p, {type_name!r})")
        if keep in (TOPICS, GROUPS, TRANSACTIONAL_IDS):
            src.line(ind + 1, f"a[{keep!r}].append(str(b[p:p + l], 'utf-8'))")
        elif keep == "tname":
            src.line(ind + 1, "tname = str(b[p:p + l], 'utf-8'); a['topics'].append(tname)")
        src.line(ind + 1, "p += l")

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
    ) -> None:
        count = src.tmp("c")
        emit_length(src, ind, count, end, flex, 4)
        src.line(ind, f"if {count} < 0:")
        src.line(ind + 1, "pass" if nullable else "raise invalid(p, 'null array in a field that is not nullable')")
        src.line(ind, "else:")
        size = _element_min_size(field, self.version, self.flexible)
        src.line(ind + 1, f"if {count} * {size} > {end} - p: raise invalid(p, 'array count exceeds the bytes left')")
        if top:
            src.line(ind + 1, f"a['counts'][{field.name!r}] = {count}")
        element = field.element_type
        if not field.is_struct and element in FIXED_TYPES:
            src.line(ind + 1, f"p += {count} * {FIXED_TYPES[element][1]}")
            return
        src.line(ind + 1, f"for _ in range({count}):")
        if field.is_struct:
            sub = self.build(field.children or (), field.name)
            src.line(ind + 2, f"p = {sub}(b, p, {end}, a)")
        else:
            self._scalar(src, ind + 2, element, end, flex, False, kind)


def _plain_fixed(field: Field) -> bool:
    return not field.is_array and field.type in FIXED_TYPES


def _namespace() -> dict[str, Any]:
    return {
        "uv": wire.read_uvarint,
        "short": wire.short,
        "invalid": wire.invalid,
        "read_uuid": wire.read_uuid,
        "I16": wire.INT16,
        "I32": wire.INT32,
    }


@cache
def skimmer(message_name: str, version: int) -> Skimmer:
    definition = message(message_name).definition(version)
    if definition is None:
        raise DecodeError(f"{message_name} has no version {version}", api_version=version)
    namespace = _namespace()
    builder = SkimBuilder(namespace, version, definition.is_flexible(version))
    func = namespace[builder.build(definition.fields, message_name, top=True)]

    def skim(buf: memoryview, pos: int, end: int) -> tuple[dict[str, Any], int]:
        found: dict[str, Any] = {c: [] for c in CATEGORIES}
        found[COUNTS] = {}
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
        _, response = api_messages().get(api_key) or (None, None)
        if response is None:
            raise UnknownApiError("unknown api key", api_key=api_key)
        header_version = policy.response_header_version(api_key, api_version)
        header, pos = struct_decoder("ResponseHeader", header_version)(buf, 0, len(buf), [1])
        found, _ = skimmer(response.name, policy.body_version(api_key, api_version))(buf, pos, len(buf))
    except DecodeError as exc:
        raise exc.with_context(api_key=api_key, api_version=api_version, direction="response") from None
    except UnicodeDecodeError as exc:
        raise DecodeError(f"invalid UTF-8 in a string: {exc.reason}", api_key=api_key,
                          api_version=api_version, direction="response") from None
    return header, found
