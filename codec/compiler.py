"""Compile one message definition at one version into straight-line Python.

The generic way to decode a schema is to interpret it field by field at run time;
that costs a dispatch per field. Instead, like dataclasses and attrs do, we write the
source of a specialised function per (struct, version) once and `exec` it, so a
decode is a run of `unpack_from` calls and bounds checks with no interpretation.
Sub-structs are written into their parent's function (an array element costs no call
and no tuple), and the usual cases take short paths: one-byte lengths and counts, no
tagged fields, a bounds check that also covers the next length's first byte.

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
from codec.absent import shared_default
from codec.errors import EncodeError
from codec.schema import FIXED_TYPES, Field

Decoder = Callable[[memoryview, int, int, list[int]], tuple[dict[str, Any], int]]
Encoder = Callable[[dict[str, Any], list[Any]], None]

_NAMES = itertools.count()


class _Source:
    """Accumulates the lines of one generated function and its constants."""

    def __init__(self, namespace: dict[str, Any], called: frozenset[int] = frozenset()) -> None:
        self.lines: list[str] = []
        self.namespace = namespace
        self.counter = 0
        self.depth = 0  # structs being written; the function's own is 1
        self.cold = 0  # > 0 while writing tagged fields: rare, so their sub-structs are called
        self.called = called  # id(fields) of the own struct's sub-structs to call, not inline
        self.inlined: dict[int, int] = {}  # id(fields) of those written in line -> characters

    def may_inline(self, fields: tuple[Field, ...], ind: int) -> bool:
        if ind > _INLINE_INDENT or self.cold:
            return False
        return not (self.depth == 1 and id(fields) in self.called)

    def size(self) -> int:
        return sum(map(len, self.lines))

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
        "read_unknown_tags": wire.read_unknown_tags,
        "uuid_of": wire.uuid_of,
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
    mutable list or dict, so decoded messages never share (and mutate) one; a struct
    of immutable defaults is shared read-only instead (codec/absent.py)."""
    shared = shared_default(field)
    if shared is not None:
        return src.const(shared)
    default = field.default_value()
    if isinstance(default, list | dict):
        return repr(default)
    return src.const(default)


def _dict_literal(fields: list[Field], values: dict[str, str]) -> str:
    return "{" + ", ".join(f"{f.name!r}: {values[f.name]}" for f in fields) + "}"


def _starts_with_varint(field: Field, version: int, flexible: bool) -> bool:
    """Whether the field's first byte is a compact length or count (a varint)."""
    if not field.flexible_in(version, flexible):
        return False
    return field.is_array or field.type in ("string", "bytes", "records")


def _emit_uvarint(
    src: _Source, ind: int, var: str, end: str, first: str | None = None, wide: bool = False
) -> None:
    """Most varints (lengths, counts) are one byte: read those inline, no call.

    `first`, when given, is the varint's first byte, known to be in bounds: a variable
    the fixed run before read it into, or `b[p]` when the field before checked for it.
    `wide`: lengths of bytes and records are often two bytes, so read those inline too."""
    if first is None:
        src.line(ind, f"if p >= {end}: raise short(p, 'varint')")
        src.line(ind, f"{var} = b[p]")
    elif first != var:
        src.line(ind, f"{var} = {first}")
    src.line(ind, f"if {var} < 128: p += 1")
    if wide:
        src.line(ind, f"elif p + 1 < {end} and b[p + 1] < 128: {var} = {var} & 127 | b[p + 1] << 7; p += 2")
    src.line(ind, f"else: {var}, p = uv(b, p, {end})")


def emit_length(
    src: _Source,
    ind: int,
    var: str,
    end: str,
    flex: bool,
    width: int,
    first: str | None = None,
    wide: bool = False,
) -> None:
    """Read a length or count into `var`: a compact varint (minus one, so -1 is null) in
    flexible versions, else a big-endian int16 or int32 of `width` bytes."""
    if flex:
        _emit_uvarint(src, ind, var, end, first, wide)
        src.line(ind, f"{var} -= 1")
        return
    assert first is None, "only a varint's first byte is read ahead"
    packer = "I16" if width == 2 else "I32"
    src.line(ind, f"if p + {width} > {end}: raise short(p, 'length')")
    src.line(ind, f"{var} = {packer}.unpack_from(b, p)[0]")
    src.line(ind, f"p += {width}")


def emit_tagged_loop(src: _Source, ind: int, end: str) -> tuple[str, str]:
    """Open the loop over a struct's tagged fields (count checked against the bytes
    left); returns the variables of each field's tag and of its end offset."""
    count, tag, size, stop = (src.tmp(s) for s in ("tc", "tag", "sz", "e"))
    _emit_uvarint(src, ind, count, end)
    src.line(ind, f"if {count} > {end} - p: raise invalid(p, 'tagged field count exceeds the bytes left')")
    src.line(ind, f"for _ in range({count}):")
    src.line(ind + 1, f"{tag}, p = uv(b, p, {end})")
    src.line(ind + 1, f"{size}, p = uv(b, p, {end})")
    src.line(ind + 1, f"{stop} = p + {size}")
    src.line(ind + 1, f"if {stop} > {end}: raise short(p, 'tagged field')")
    return tag, stop


def emit_null_check(src: _Source, ind: int, length: str, var: str | None, nullable: bool, what: str) -> int:
    """A negative length is null: `var = None` when nullable, else a DecodeError.
    Returns the indent for the non-null case."""
    if nullable:
        src.line(ind, f"if {length} < 0: {var} = None" if var else f"if {length} >= 0:")
        if var:
            src.line(ind, "else:")
        return ind + 1
    src.line(ind, f"if {length} < 0: raise invalid(p, 'null {what}in a field that is not nullable')")
    return ind


def emit_count_check(src: _Source, ind: int, count: str, element_size: int, end: str, peek: bool) -> None:
    """Refuse a count the bytes left cannot hold, before allocating for it; with `peek`,
    also make sure of the byte after fixed-size elements."""
    src.line(
        ind,
        f"if {count} * {element_size} {'>=' if peek else '>'} {end} - p:"
        " raise invalid(p, 'array count exceeds the bytes left')",
    )


def _variable(src: _Source, first: str | None, stem: str) -> str:
    """The variable for a length or count: the one already holding its first byte."""
    return first if first and first.isidentifier() else src.tmp(stem)


# Sub-structs are decoded in line (no call and tuple per element) while the function
# stays within _FUNCTION_CHARS characters of source and _INLINE_INDENT levels. Compiling
# a function peaks at ~100 bytes of memory per character: this keeps the peak where it
# was before inlining (the fuzzer bounds the memory of a decode, and the first decode of
# a message compiles it).
_FUNCTION_CHARS = 6000
_INLINE_INDENT = 24


def write_function(namespace: dict[str, Any], emit: Callable[[_Source], None]) -> None:
    """Write a function with `emit` and exec it. While it is too long, write it again
    with its biggest sub-struct in a function of its own: the outer levels are called
    (once per topic, say) and the inner ones (per partition) stay in line."""
    called: frozenset[int] = frozenset()
    while True:
        src = _Source(namespace, called)
        emit(src)
        text = "\n".join(src.lines)
        if len(text) <= _FUNCTION_CHARS or not src.inlined:
            break
        called |= {max(src.inlined, key=src.inlined.__getitem__)}
    exec(text, namespace)  # noqa: S102 - our own generated source


def emit_sub(
    src: _Source, ind: int, fields: tuple[Field, ...], inline: Callable[[], Any], call: Callable[[], Any]
) -> Any:
    """Write a sub-struct with `inline` if the function may have it in line, else with
    `call`; remembers how long the own struct's sub-structs are, for write_function."""
    if not src.may_inline(fields, ind):
        return call()
    before = src.size()
    result = inline()
    if src.depth == 1:
        src.inlined[id(fields)] = src.size() - before
    return result


class DecoderBuilder:
    """Writes the decoder source for a struct, its sub-structs decoded in line."""

    def __init__(self, namespace: dict[str, Any], version: int, flexible: bool) -> None:
        self.namespace = namespace
        self.version = version
        self.flexible = flexible
        self.functions: dict[int, str] = {}  # id(fields) -> its function, once written

    def build(self, fields: tuple[Field, ...], name: str) -> str:
        if id(fields) in self.functions:
            return self.functions[id(fields)]
        func = f"D_{name}_{next(_NAMES)}"

        def emit(src: _Source) -> None:
            src.line(0, f"def {func}(b, p, n, k):")
            result = self.emit_body(src, 1, fields, "n")
            src.line(1, f"return {result}, p")

        write_function(self.namespace, emit)
        self.functions[id(fields)] = func
        return func

    def emit_body(self, src: _Source, ind: int, fields: tuple[Field, ...], end: str) -> str:
        """Decode one struct from `p`, leaving its dict in the variable returned."""
        src.depth += 1
        present = [f for f in fields if f.present_in(self.version)]
        names: dict[str, str] = {}
        first = self._emit_regular(src, ind, [f for f in present if f.tag is None], names, end)
        result = src.tmp("r")
        if self.flexible:
            self._emit_tagged(src, ind, present, names, end, result, first)
        else:
            src.line(ind, f"{result} = {_dict_literal(present, names)}")
        src.depth -= 1
        return result

    def _emit_regular(
        self, src: _Source, ind: int, fields: list[Field], names: dict[str, str], end: str
    ) -> str | None:
        """Returns the byte after the fields (see _emit_uvarint's `first`) if the last
        of them made sure it is in bounds."""
        first = None
        index = 0
        while index < len(fields):
            run = list(itertools.takewhile(_is_fixed, fields[index:]))
            index += len(run)
            if run:
                first = self._emit_fixed_run(src, ind, run, names, end, self._peek(fields[index:]))
                continue
            var = src.tmp("v")
            names[fields[index].name] = var
            peek = self._peek(fields[index + 1 :])
            first = self.emit_field(src, ind, fields[index], var, end, first, peek)
            index += 1
        return first

    def _peek(self, rest: list[Field]) -> bool:
        """Whether what follows starts with a varint: the field before then checks that
        its first byte is in bounds too (or a fixed run reads it), saving a check."""
        if not rest:
            return self.flexible  # the count of tagged fields
        return _starts_with_varint(rest[0], self.version, self.flexible)

    def _emit_fixed_run(
        self, src: _Source, ind: int, run: list[Field], names: dict[str, str], end: str, peek: bool
    ) -> str | None:
        fmt = ">" + "".join(FIXED_TYPES[f.type][0] for f in run)
        size = struct.calcsize(fmt)
        packer = src.const(struct.Struct(fmt + ("B" if peek else "")))
        variables = [src.tmp("v") for _ in run]
        for field, var in zip(run, variables, strict=True):
            names[field.name] = var
        first = src.tmp("c") if peek else None
        targets = ", ".join(variables + ([first] if first else []))
        src.line(ind, f"if p + {size + peek} > {end}: raise short(p)")
        src.line(ind, f"{targets}, = {packer}.unpack_from(b, p)")
        src.line(ind, f"p += {size}")
        return first

    def _emit_tagged(
        self,
        src: _Source,
        ind: int,
        present: list[Field],
        names: dict[str, str],
        end: str,
        result: str,
        first: str | None,
    ) -> None:
        """Tagged fields, behind a fast path for the usual case: none (a 0 byte)."""
        tagged = [f for f in present if f.tag is not None]
        defaults = {f.name: _fresh_default(src, f) for f in tagged}
        src.line(ind, f"if not {first}:" if first else f"if p < {end} and not b[p]:")
        src.line(ind + 1, "p += 1")
        src.line(ind + 1, f"{result} = {_dict_literal(present, names | defaults)}")
        src.line(ind, "else:")
        if not tagged:
            unknown = src.tmp("unk")
            src.line(ind + 1, f"{unknown}, p = read_unknown_tags(b, p, {end})")
            src.line(ind + 1, f"{result} = {_dict_literal(present, names)}")
            src.line(ind + 1, f"if {unknown}: {result}['_unknown_tags'] = {unknown}")
            return
        for field in tagged:
            names[field.name] = src.tmp("v")
            src.line(ind + 1, f"{names[field.name]} = {defaults[field.name]}")
        unknown, explicit = self._emit_tag_loop(src, ind + 1, tagged, names, end)
        src.line(ind + 1, f"{result} = {_dict_literal(present, names)}")
        src.line(ind + 1, f"if {unknown} is not None: {result}['_unknown_tags'] = {unknown}")
        src.line(ind + 1, f"if {explicit} is not None: {result}['_explicit_tags'] = {explicit}")

    def _emit_tag_loop(
        self, src: _Source, ind: int, tagged: list[Field], names: dict[str, str], end: str
    ) -> tuple[str, str]:
        unk, exp = src.tmp("unk"), src.tmp("exp")
        src.line(ind, f"{unk} = {exp} = None")
        tag, stop = emit_tagged_loop(src, ind, end)
        for index, field in enumerate(sorted(tagged, key=lambda f: f.tag or 0)):
            var = names[field.name]
            src.line(ind + 1, f"{'elif' if index else 'if'} {tag} == {field.tag}:")
            src.cold += 1
            self.emit_field(src, ind + 2, field, var, stop)
            src.cold -= 1
            src.line(ind + 2, f"if p != {stop}: raise invalid(p, 'tagged field size mismatch')")
            default = src.const(field.default_value())
            src.line(ind + 2, f"if {var} == {default}: {exp} = ({exp} or []) + [{field.tag}]")
        src.line(ind + 1, "else:")
        src.line(ind + 2, f"if {unk} is None: {unk} = []")
        src.line(ind + 2, f"elif len({unk}) >= MAX_UNKNOWN_TAGS: raise invalid(p, 'too many tagged fields')")
        src.line(ind + 2, f"{unk}.append(({tag}, b[p:{stop}]))")
        src.line(ind + 2, f"p = {stop}")
        return unk, exp

    def emit_field(
        self,
        src: _Source,
        ind: int,
        field: Field,
        var: str,
        end: str,
        first: str | None = None,
        peek: bool = False,
    ) -> str | None:
        """Decode a field into `var`. `peek`: a varint follows; returns `b[p]` if the
        field's last bounds check covered its first byte."""
        nullable = field.nullable_in(self.version)
        flex = field.flexible_in(self.version, self.flexible)
        if field.is_array:
            return self._emit_array(src, ind, field, var, end, nullable, flex, first, peek)
        if field.is_struct:
            self._emit_struct(src, ind, field, var, end, nullable)
            return None
        if field.type in FIXED_TYPES or field.type == "uuid":
            self._emit_scalar(src, ind, field.type, var, end, nullable, flex)
            return None
        return self._emit_sized(src, ind, field.type, var, end, nullable, flex, first, peek)

    def _emit_scalar(
        self, src: _Source, ind: int, type_name: str, var: str, end: str, nullable: bool, flex: bool
    ) -> None:
        if type_name in FIXED_TYPES:
            code, size = FIXED_TYPES[type_name]
            packer = src.const(struct.Struct(">" + code))
            src.line(ind, f"if p + {size} > {end}: raise short(p)")
            src.line(ind, f"{var}, = {packer}.unpack_from(b, p)")
            src.line(ind, f"p += {size}")
        elif type_name == "uuid":
            src.line(ind, f"if p + 16 > {end}: raise short(p, 'uuid')")
            src.line(ind, f"{var} = uuid_of(b[p:p + 16].tobytes())")
            src.line(ind, "p += 16")
        else:
            self._emit_sized(src, ind, type_name, var, end, nullable, flex)

    def _emit_sized(
        self,
        src: _Source,
        ind: int,
        type_name: str,
        var: str,
        end: str,
        nullable: bool,
        flex: bool,
        first: str | None = None,
        peek: bool = False,
    ) -> str | None:
        length, stop = _variable(src, first, "l"), src.tmp("q")
        string = type_name == "string"
        emit_length(src, ind, length, end, flex, 2 if string else 4, first, wide=not string)
        ind = emit_null_check(src, ind, length, var, nullable, "")
        peek = peek and not nullable
        src.line(ind, f"{stop} = p + {length}")
        src.line(ind, f"if {stop} {'>=' if peek else '>'} {end}: raise short(p, {type_name!r})")
        # bytes.decode() takes a fast path that str(view, 'utf-8') does not.
        src.line(ind, f"{var} = b[p:{stop}]" + (".tobytes().decode()" if string else ""))
        src.line(ind, f"p = {stop}")
        return "b[p]" if peek else None

    def _emit_sub(self, src: _Source, ind: int, field: Field, end: str) -> str:
        """Decode a sub-struct in line or by a call; returns its variable."""
        fields = field.children or ()
        return str(
            emit_sub(
                src,
                ind,
                fields,
                inline=lambda: self.emit_body(src, ind, fields, end),
                call=lambda: self._emit_call(src, ind, field, end),
            )
        )

    def _emit_call(self, src: _Source, ind: int, field: Field, end: str) -> str:
        sub = self.build(field.children or (), field.name)
        item = src.tmp("x")
        src.line(ind, f"{item}, p = {sub}(b, p, {end}, k)")
        return item

    def _emit_struct(
        self, src: _Source, ind: int, field: Field, var: str, end: str, nullable: bool
    ) -> None:
        if nullable:
            src.line(ind, f"if p >= {end}: raise short(p, 'struct marker')")
            src.line(ind, "p += 1")
            src.line(ind, f"if b[p - 1] == 0xFF: {var} = None")
            src.line(ind, "else:")
            ind += 1
        src.line(ind, f"{var} = {self._emit_sub(src, ind, field, end)}")

    def _emit_array(
        self,
        src: _Source,
        ind: int,
        field: Field,
        var: str,
        end: str,
        nullable: bool,
        flex: bool,
        first: str | None = None,
        peek: bool = False,
    ) -> str | None:
        count = _variable(src, first, "c")
        emit_length(src, ind, count, end, flex, 4, first)
        ind = emit_null_check(src, ind, count, var, nullable, "array ")
        element = field.element_type
        fixed = not field.is_struct and element in FIXED_TYPES
        peek = peek and fixed and not nullable
        emit_count_check(src, ind, count, _element_min_size(field, self.version, self.flexible), end, peek)
        if fixed:
            code, size = FIXED_TYPES[element]
            table = src.const(_ARRAY_STRUCTS[code])
            src.line(ind, f"if not {count}: {var} = []")
            src.line(ind, f"elif {count} < {_SMALL_ARRAY}: {var} = [*{table}[{count}].unpack_from(b, p)]")
            src.line(ind, f"else: {var} = [*unpack_from('>%d{code}' % {count}, b, p)]")
            src.line(ind, f"p += {count} * {size}")
            return "b[p]" if peek else None
        src.line(ind, f"{var} = []")
        src.line(ind, f"if {count}:")  # often empty (aborted transactions): skip the budget
        src.line(ind + 1, f"k[0] -= {count}")
        src.line(ind + 1, "if k[0] < 0: raise invalid(p, 'more array elements than the decode budget')")
        src.line(ind + 1, f"for _ in range({count}):")
        if field.is_struct:
            item = self._emit_sub(src, ind + 2, field, end)
        else:
            item = src.tmp("x")
            self._emit_scalar(src, ind + 2, element, item, end, False, flex)
        src.line(ind + 2, f"{var}.append({item})")
        return None


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
    """The C decoder (codec/accel.py) when it is built and not turned off by
    KAFKALENS_PURE_CODEC, else the Python one; both give the same results."""
    from codec import accel  # here: codec.accel lowers fields with this module's helpers

    if accel.ACTIVE:
        fallback = accel.lazy(lambda: compile_python_decoder(fields, version, flexible, name))
        return accel.compile_accel_decoder(fields, version, flexible, name, fallback)
    return compile_python_decoder(fields, version, flexible, name)


def compile_python_decoder(fields: tuple[Field, ...], version: int, flexible: bool, name: str) -> Decoder:
    """The reference decoder: generated Python."""
    namespace = _base_namespace()
    func = DecoderBuilder(namespace, version, flexible).build(fields, name)
    decoder: Decoder = namespace[func]
    return decoder


def compile_encoder(fields: tuple[Field, ...], version: int, flexible: bool, name: str) -> Encoder:
    namespace = _base_namespace()
    func = EncoderBuilder(namespace, version, flexible).build(fields, name)
    encoder: Encoder = namespace[func]
    return encoder
