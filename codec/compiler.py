"""Compile one message definition at one version into straight-line Python.

The generic way to decode a schema is to interpret it field by field at run time;
that costs a dispatch per field. Instead, like dataclasses and attrs do, we write the
source of a specialised function per (struct, version) once and `exec` it, so a
decode is a run of `unpack_from` calls and bounds checks with no interpretation.

Decoders: `f(buf, pos, end, budget) -> (dict, pos)`; `buf` is a memoryview, so
`bytes`/`records` fields come out as zero-copy slices. Every length and count is
checked against what remains before anything is allocated.
Encoders: `f(value: dict, out: list) -> None`, appending byte pieces to `out`.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable
from typing import Any
from uuid import UUID

from codec import wire
from codec.errors import EncodeError
from codec.schema import FIXED_TYPES, Field

Decoder = Callable[[memoryview, int, int, list[int]], tuple[dict[str, Any], int]]
Encoder = Callable[[dict[str, Any], list[Any]], None]

_NAMES = itertools.count()


class _Source:
    """Accumulates the lines of one generated function and its constants."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        self.lines: list[str] = []
        self.namespace = namespace
        self.counter = 0

    def line(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def tmp(self, stem: str = "t") -> str:
        self.counter += 1
        return f"{stem}{self.counter}"

    def const(self, value: Any) -> str:
        name = f"K{next(_NAMES)}"
        self.namespace[name] = value
        return name


# Struct objects for primitive arrays of up to _SMALL_ARRAY elements, by type code: a
# format string built per call costs more than the unpacking itself.
_SMALL_ARRAY = 256
_ARRAY_STRUCTS = {
    code: [struct.Struct(f">{n}{code}") for n in range(_SMALL_ARRAY)]
    for code, _ in FIXED_TYPES.values()
}


def _base_namespace() -> dict[str, Any]:
    return {
        "uv": wire.read_uvarint,
        "wuv": wire.write_uvarint,
        "short": wire.short,
        "invalid": wire.invalid,
        "read_uuid": wire.read_uuid,
        "uuid_bytes": wire.uuid_bytes,
        "I16": wire.INT16,
        "I32": wire.INT32,
        "unpack_from": struct.unpack_from,
        "pack": struct.pack,
        "EncodeError": EncodeError,
        "UUID": UUID,
        "MAX_UNKNOWN_TAGS": wire.MAX_UNKNOWN_TAGS,
    }


def _is_fixed(field: Field) -> bool:
    return not field.is_array and field.type in FIXED_TYPES


def min_size(fields: tuple[Field, ...], version: int, flexible: bool) -> int:
    """Fewest bytes a struct can take on the wire: bounds hostile array counts."""
    total = 1 if flexible else 0
    for field in fields:
        if field.present_in(version) and field.tag is None:
            total += _field_min_size(field, version, flexible)
    return total


def _field_min_size(field: Field, version: int, flexible: bool) -> int:
    flex = field.flexible_in(version, flexible)
    if field.is_array:
        return 1 if flex else 4
    if field.is_struct:
        if field.nullable_in(version):
            return 1
        return min_size(field.children or (), version, flexible)
    if field.type in FIXED_TYPES:
        return FIXED_TYPES[field.type][1]
    if field.type == "uuid":
        return 16
    if field.type == "string":
        return 1 if flex else 2
    return 1 if flex else 4  # bytes, records


def _element_min_size(field: Field, version: int, flexible: bool) -> int:
    element = field.element_type
    if field.is_struct:
        return max(1, min_size(field.children or (), version, flexible))
    if element in FIXED_TYPES:
        return FIXED_TYPES[element][1]
    if element == "uuid":
        return 16
    return 1 if field.flexible_in(version, flexible) else 2


def _fresh_default(src: _Source, field: Field) -> str:
    """An expression for the field's default: a new object each time when it is a
    mutable list or dict, so decoded messages never share (and mutate) one."""
    default = field.default_value()
    if isinstance(default, list | dict):
        return repr(default)
    return src.const(default)


def _emit_uvarint(src: _Source, ind: int, var: str, end: str) -> None:
    """Most varints (lengths, counts) are one byte: read those inline, no call."""
    src.line(ind, f"if p >= {end}: raise short(p, 'varint')")
    src.line(ind, f"{var} = b[p]")
    src.line(ind, f"if {var} < 128: p += 1")
    src.line(ind, f"else: {var}, p = uv(b, p, {end})")


def emit_length(src: _Source, ind: int, var: str, end: str, flex: bool, width: int) -> None:
    """Read a length or count into `var`: a compact varint (minus one, so -1 is null) in
    flexible versions, else a big-endian int16 or int32 of `width` bytes."""
    if flex:
        _emit_uvarint(src, ind, var, end)
        src.line(ind, f"{var} -= 1")
        return
    packer = "I16" if width == 2 else "I32"
    src.line(ind, f"if p + {width} > {end}: raise short(p, 'length')")
    src.line(ind, f"{var} = {packer}.unpack_from(b, p)[0]")
    src.line(ind, f"p += {width}")


class DecoderBuilder:
    """Writes the decoder source for a struct and, recursively, its sub-structs."""

    def __init__(self, namespace: dict[str, Any], version: int, flexible: bool) -> None:
        self.namespace = namespace
        self.version = version
        self.flexible = flexible

    def build(self, fields: tuple[Field, ...], name: str) -> str:
        src = _Source(self.namespace)
        func = f"D_{name}_{next(_NAMES)}"
        src.line(0, f"def {func}(b, p, n, k):")
        present = [f for f in fields if f.present_in(self.version)]
        regular = [f for f in present if f.tag is None]
        tagged = [f for f in present if f.tag is not None]
        names: dict[str, str] = {}
        self._emit_regular(src, regular, names)
        if self.flexible:
            self._emit_tagged(src, tagged, names)
        items = ", ".join(f"{f.name!r}: {names[f.name]}" for f in present)
        src.line(1, f"r = {{{items}}}")
        if self.flexible:
            src.line(1, "if unk is not None: r['_unknown_tags'] = unk")
            src.line(1, "if exp is not None: r['_explicit_tags'] = exp")
        src.line(1, "return r, p")
        exec("\n".join(src.lines), self.namespace)  # noqa: S102 - our own generated source
        return func

    def _emit_regular(self, src: _Source, fields: list[Field], names: dict[str, str]) -> None:
        index = 0
        while index < len(fields):
            run = list(itertools.takewhile(_is_fixed, fields[index:]))
            if len(run) > 1:
                self._emit_fixed_run(src, run, names)
                index += len(run)
                continue
            var = src.tmp("v")
            names[fields[index].name] = var
            self.emit_field(src, 1, fields[index], var, "n")
            index += 1

    def _emit_fixed_run(self, src: _Source, run: list[Field], names: dict[str, str]) -> None:
        fmt = ">" + "".join(FIXED_TYPES[f.type][0] for f in run)
        packer = src.const(struct.Struct(fmt))
        size = struct.calcsize(fmt)
        variables = [src.tmp("v") for _ in run]
        for field, var in zip(run, variables, strict=True):
            names[field.name] = var
        src.line(1, f"if p + {size} > n: raise short(p)")
        src.line(1, f"{', '.join(variables)}, = {packer}.unpack_from(b, p)")
        src.line(1, f"p += {size}")

    def _emit_tagged(self, src: _Source, tagged: list[Field], names: dict[str, str]) -> None:
        for field in tagged:
            var = src.tmp("v")
            names[field.name] = var
            src.line(1, f"{var} = {_fresh_default(src, field)}")
        src.line(1, "unk = exp = None")
        _emit_uvarint(src, 1, "tc", "n")
        src.line(1, "if tc:")
        src.line(2, "if tc > n - p: raise invalid(p, 'tagged field count exceeds the bytes left')")
        src.line(2, "for _ in range(tc):")
        src.line(3, "tag, p = uv(b, p, n)")
        src.line(3, "sz, p = uv(b, p, n)")
        src.line(3, "e = p + sz")
        src.line(3, "if e > n: raise short(p, 'tagged field')")
        keyword = "if"
        for field in sorted(tagged, key=lambda f: f.tag or 0):
            var = names[field.name]
            src.line(3, f"{keyword} tag == {field.tag}:")
            self.emit_field(src, 4, field, var, "e")
            src.line(4, "if p != e: raise invalid(p, 'tagged field size mismatch')")
            default = src.const(field.default_value())
            src.line(4, f"if {var} == {default}: exp = (exp or []) + [{field.tag}]")
            keyword = "elif"
        if tagged:
            src.line(3, "else:")
            indent = 4
        else:
            indent = 3
        src.line(indent, "if unk is None: unk = []")
        src.line(indent, "elif len(unk) >= MAX_UNKNOWN_TAGS: raise invalid(p, 'too many tagged fields')")
        src.line(indent, "unk.append((tag, b[p:e]))")
        src.line(indent, "p = e")

    def emit_field(self, src: _Source, ind: int, field: Field, var: str, end: str) -> None:
        nullable = field.nullable_in(self.version)
        flex = field.flexible_in(self.version, self.flexible)
        if field.is_array:
            self._emit_array(src, ind, field, var, end, nullable, flex)
        elif field.is_struct:
            self._emit_struct(src, ind, field, var, end, nullable)
        else:
            self._emit_scalar(src, ind, field.type, var, end, nullable, flex)

    def _emit_scalar(
        self, src: _Source, ind: int, type_name: str, var: str, end: str, nullable: bool, flex: bool
    ) -> None:
        if type_name in FIXED_TYPES:
            code, size = FIXED_TYPES[type_name]
            packer = src.const(struct.Struct(">" + code))
            src.line(ind, f"if p + {size} > {end}: raise short(p)")
            src.line(ind, f"{var} = {packer}.unpack_from(b, p)[0]")
            src.line(ind, f"p += {size}")
        elif type_name == "uuid":
            src.line(ind, f"if p + 16 > {end}: raise short(p, 'uuid')")
            src.line(ind, f"{var} = read_uuid(b, p)")
            src.line(ind, "p += 16")
        else:
            self._emit_sized(src, ind, type_name, var, end, nullable, flex)

    def _emit_sized(
        self, src: _Source, ind: int, type_name: str, var: str, end: str, nullable: bool, flex: bool
    ) -> None:
        length = src.tmp("l")
        emit_length(src, ind, length, end, flex, 2 if type_name == "string" else 4)
        src.line(ind, f"if {length} < 0:")
        if nullable:
            src.line(ind + 1, f"{var} = None")
        else:
            src.line(ind + 1, "raise invalid(p, 'null in a field that is not nullable')")
        src.line(ind, "else:")
        src.line(ind + 1, f"if p + {length} > {end}: raise short(p, {type_name!r})")
        if type_name == "string":
            src.line(ind + 1, f"{var} = str(b[p:p + {length}], 'utf-8')")
        else:
            src.line(ind + 1, f"{var} = b[p:p + {length}]")
        src.line(ind + 1, f"p += {length}")

    def _emit_struct(
        self, src: _Source, ind: int, field: Field, var: str, end: str, nullable: bool
    ) -> None:
        sub = self.build(field.children or (), field.name)
        if nullable:
            src.line(ind, f"if p >= {end}: raise short(p, 'struct marker')")
            src.line(ind, "p += 1")
            src.line(ind, "if b[p - 1] == 0xFF:")
            src.line(ind + 1, f"{var} = None")
            src.line(ind, "else:")
            src.line(ind + 1, f"{var}, p = {sub}(b, p, {end}, k)")
        else:
            src.line(ind, f"{var}, p = {sub}(b, p, {end}, k)")

    def _emit_array(
        self,
        src: _Source,
        ind: int,
        field: Field,
        var: str,
        end: str,
        nullable: bool,
        flex: bool,
    ) -> None:
        count = src.tmp("c")
        emit_length(src, ind, count, end, flex, 4)
        src.line(ind, f"if {count} < 0:")
        if nullable:
            src.line(ind + 1, f"{var} = None")
        else:
            src.line(ind + 1, "raise invalid(p, 'null array in a field that is not nullable')")
        src.line(ind, "else:")
        element_size = _element_min_size(field, self.version, self.flexible)
        src.line(
            ind + 1,
            f"if {count} * {element_size} > {end} - p: raise invalid(p, 'array count exceeds the bytes left')",
        )
        element = field.element_type
        if not field.is_struct and element in FIXED_TYPES:
            code, size = FIXED_TYPES[element]
            table = src.const(_ARRAY_STRUCTS[code])
            src.line(ind + 1, f"if {count} < {_SMALL_ARRAY}: {var} = list({table}[{count}].unpack_from(b, p))")
            src.line(ind + 1, f"else: {var} = list(unpack_from('>%d{code}' % {count}, b, p))")
            src.line(ind + 1, f"p += {count} * {size}")
            return
        src.line(ind + 1, f"k[0] -= {count}")
        src.line(ind + 1, "if k[0] < 0: raise invalid(p, 'more array elements than the decode budget')")
        item = src.tmp("x")
        src.line(ind + 1, f"{var} = []")
        src.line(ind + 1, f"for _ in range({count}):")
        if field.is_struct:
            sub = self.build(field.children or (), field.name)
            src.line(ind + 2, f"{item}, p = {sub}(b, p, {end}, k)")
        else:
            self._emit_scalar(src, ind + 2, element, item, end, False, flex)
        src.line(ind + 2, f"{var}.append({item})")


def _null_marker(type_name: str, flex: bool) -> bytes:
    """How null is written: compact length 0, or a classic length of -1."""
    if flex:
        return b"\x00"
    return b"\xff\xff" if type_name == "string" else b"\xff\xff\xff\xff"


class EncoderBuilder:
    """Writes the encoder source for a struct and its sub-structs."""

    def __init__(self, namespace: dict[str, Any], version: int, flexible: bool) -> None:
        self.namespace = namespace
        self.version = version
        self.flexible = flexible

    def build(self, fields: tuple[Field, ...], name: str) -> str:
        src = _Source(self.namespace)
        func = f"E_{name}_{next(_NAMES)}"
        src.line(0, f"def {func}(d, out):")
        src.line(1, "ap = out.append")
        present = [f for f in fields if f.present_in(self.version)]
        for field in present:
            if field.tag is None:
                var = src.tmp("v")
                src.line(1, f"{var} = d.get({field.name!r}, {src.const(field.default_value())})")
                self.emit_field(src, 1, field, var, "ap")
        if self.flexible:
            self._emit_tagged(src, [f for f in present if f.tag is not None])
        src.line(1, "return None")
        exec("\n".join(src.lines), self.namespace)  # noqa: S102 - our own generated source
        return func

    def _emit_tagged(self, src: _Source, tagged: list[Field]) -> None:
        src.line(1, "tags = list(d.get('_unknown_tags') or ())")
        if tagged:
            src.line(1, "exp = d.get('_explicit_tags') or ()")
        for field in tagged:
            var = src.tmp("v")
            default = src.const(field.default_value())
            src.line(1, f"{var} = d.get({field.name!r}, {default})")
            src.line(1, f"if {var} != {default} or {field.tag} in exp:")
            src.line(2, "sub = []")
            self.emit_field(src, 2, field, var, "sub.append")
            src.line(2, f"tags.append(({field.tag}, b''.join(sub)))")
        src.line(1, "if len(tags) > 1: tags.sort(key=lambda t: t[0])")
        src.line(1, "ap(wuv(len(tags)))")
        src.line(1, "for tag, raw in tags:")
        src.line(2, "ap(wuv(tag)); ap(wuv(len(raw))); ap(raw)")

    def emit_field(self, src: _Source, ind: int, field: Field, var: str, ap: str) -> None:
        nullable = field.nullable_in(self.version)
        flex = field.flexible_in(self.version, self.flexible)
        if field.is_array:
            self._emit_array(src, ind, field, var, ap, nullable, flex)
        elif field.is_struct:
            sub = self.build(field.children or (), field.name)
            out = "out" if ap == "ap" else ap.removesuffix(".append")
            if nullable:
                src.line(ind, f"if {var} is None: {ap}(b'\\xff')")
                src.line(ind, f"else: {ap}(b'\\x01'); {sub}({var}, {out})")
            else:
                src.line(ind, f"{sub}({var}, {out})")
        else:
            self._emit_scalar(src, ind, field.type, var, ap, nullable, flex, field.name)

    def _emit_scalar(
        self,
        src: _Source,
        ind: int,
        type_name: str,
        var: str,
        ap: str,
        nullable: bool,
        flex: bool,
        name: str,
    ) -> None:
        if type_name in FIXED_TYPES:
            packer = src.const(struct.Struct(">" + FIXED_TYPES[type_name][0]))
            src.line(ind, f"{ap}({packer}.pack({var}))")
            return
        if type_name == "uuid":
            src.line(ind, f"{ap}(uuid_bytes({var}))")
            return
        src.line(ind, f"if {var} is None:")
        if nullable:
            src.line(ind + 1, f"{ap}({_null_marker(type_name, flex)!r})")
        else:
            src.line(ind + 1, f"raise EncodeError('{name} is null but not nullable in this version')")
        src.line(ind, "else:")
        raw = src.tmp("s")
        if type_name == "string":
            src.line(ind + 1, f"{raw} = {var}.encode('utf-8')")
        else:
            src.line(ind + 1, f"{raw} = {var}")
        src.line(ind + 1, f"{ap}({self._length(type_name, raw, flex)})")
        src.line(ind + 1, f"{ap}({raw})")

    @staticmethod
    def _length(type_name: str, raw: str, flex: bool) -> str:
        if flex:
            return f"wuv(len({raw}) + 1)"
        return f"{'I16' if type_name == 'string' else 'I32'}.pack(len({raw}))"

    def _emit_array(
        self, src: _Source, ind: int, field: Field, var: str, ap: str, nullable: bool, flex: bool
    ) -> None:
        src.line(ind, f"if {var} is None:")
        if nullable:
            src.line(ind + 1, f"{ap}({_null_marker('array', flex)!r})")
        else:
            src.line(ind + 1, f"raise EncodeError('{field.name} is null but not nullable')")
        src.line(ind, "else:")
        count = f"wuv(len({var}) + 1)" if flex else f"I32.pack(len({var}))"
        src.line(ind + 1, f"{ap}({count})")
        element = field.element_type
        if not field.is_struct and element in FIXED_TYPES:
            code = FIXED_TYPES[element][0]
            src.line(ind + 1, f"{ap}(pack('>%d{code}' % len({var}), *{var}))")
            return
        item = src.tmp("x")
        src.line(ind + 1, f"for {item} in {var}:")
        if field.is_struct:
            sub = self.build(field.children or (), field.name)
            out = "out" if ap == "ap" else ap.removesuffix(".append")
            src.line(ind + 2, f"{sub}({item}, {out})")
        else:
            self._emit_scalar(src, ind + 2, element, item, ap, False, flex, field.name)


def compile_decoder(fields: tuple[Field, ...], version: int, flexible: bool, name: str) -> Decoder:
    namespace = _base_namespace()
    func = DecoderBuilder(namespace, version, flexible).build(fields, name)
    decoder: Decoder = namespace[func]
    return decoder


def compile_encoder(fields: tuple[Field, ...], version: int, flexible: bool, name: str) -> Encoder:
    namespace = _base_namespace()
    func = EncoderBuilder(namespace, version, flexible).build(fields, name)
    encoder: Encoder = namespace[func]
    return encoder
