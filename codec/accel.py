"""The optional C accelerator for decoding (codec/_accel.c), and what it runs.

A decoder compiled by codec/compiler.py is straight-line Python; this module lowers
the same (fields, version, flexible) into a small program of nested tuples that one
generic interpreter in C runs. The Python decoders stay the reference: the program
encodes every decision the generated Python makes that shows in its output or its
errors (which bounds check also covers the next byte, where a null is refused, which
arrays cost element budget), and tests/test_codec_accel.py checks that both give the
same dicts, positions, budgets and errors, byte for byte.

`ACTIVE` says whether compile_decoder returns accelerated decoders: the extension was
built (setup.py builds it when a C compiler is there; without one, pure Python) and
the environment variable KAFKALENS_PURE_CODEC is unset or empty.

Program layout (the C side validates it and refuses anything else):

    struct  = (flexible, template, fresh, ops, tagged)
      template: ((key, value), ...) every present field in order; the value is a
                tagged field's default if immutable (or shared read-only: absent.py),
                a regular field's likeliest shared value (_Lowering.likely), else None
      fresh:    ((key, default), ...) tagged fields whose default is a list or a
                dict: a new copy per decode, as the Python decoder's literal makes
      ops:      the regular fields, in wire order
      tagged:   ((tag, key, op, default), ...) sorted by tag
    op      = (FIXED, peek, ((key, code), ...))         a run of fixed-size fields
            | (STRING | BYTES | RECORDS, key, flex, nullable, peek)
            | (UUID, key)
            | (STRUCT, key, nullable, struct)
            | (ARRAY, key, flex, nullable, peek, element_min_size, element)
    element = an op with key None (FIXED: a run of one)

`code` is the field's struct format character (codec.schema.FIXED_TYPES); `peek`
means the op's bounds check also covers one byte after it, as the Python decoder's
does when a varint follows.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Callable
from typing import Any

from codec import wire
from codec.absent import shared_default
from codec.compiler import (
    FIXED_TYPES,
    Decoder,
    _element_min_size,
    _is_fixed,
    _starts_with_varint,
)
from codec.schema import ZERO_UUID, Field

try:
    from codec import _accel
except ImportError:  # built without a C compiler: pure Python
    _accel = None  # type: ignore[assignment]

AVAILABLE: bool = _accel is not None
ACTIVE: bool = AVAILABLE and not os.environ.get("KAFKALENS_PURE_CODEC")

# Op kinds; codec/_accel.c has the same numbers.
FIXED, STRING, BYTES, RECORDS, UUID, STRUCT, ARRAY = range(1, 8)
_SIZED = {"string": STRING, "bytes": BYTES, "records": RECORDS}

Program = tuple[Any, ...]


class _Lowering:
    """Lowers one message version's structs, as DecoderBuilder compiles them."""

    def __init__(self, version: int, flexible: bool) -> None:
        self.version = version
        self.flexible = flexible

    def struct(self, fields: tuple[Field, ...]) -> Program:
        present = [f for f in fields if f.present_in(self.version)]
        if len({f.name for f in present}) != len(present):
            raise ValueError("duplicate field names")
        regular = [f for f in present if f.tag is None]
        tagged = sorted((f for f in present if f.tag is not None), key=lambda f: f.tag or 0)
        if tagged and not self.flexible:
            raise ValueError("tagged fields in a version that is not flexible")
        template, fresh = [], []
        for field in present:
            if field.tag is None:
                template.append((_key(field), self.likely(field)))
                continue
            shared = shared_default(field)
            default = field.default_value() if shared is None else shared
            if shared is None and isinstance(default, list | dict):
                fresh.append((_key(field), default))
                default = None
            template.append((_key(field), default))
        tags = tuple(
            (f.tag, _key(f), self.field(f, peek=False), f.default_value()) for f in tagged
        )
        return (self.flexible, tuple(template), tuple(fresh), self.regular(regular), tags)

    def likely(self, field: Field) -> Any:
        """The template's value for a regular field: a shared object that the field's
        value often is (the C decoder then leaves it in place): None where the field
        may be null, else its default if a small int, False, "" or the zero uuid."""
        if field.nullable_in(self.version) or field.is_array or field.is_struct:
            return None
        default = field.default_value()
        if type(default) is int and -5 <= default <= 256:
            return default
        if default is False or default == "" or default is ZERO_UUID:
            return default
        return None

    def regular(self, fields: list[Field]) -> tuple[Any, ...]:
        """Runs of fixed-size fields and the fields between them (_emit_regular)."""
        ops: list[Any] = []
        index = 0
        while index < len(fields):
            run = list(itertools.takewhile(_is_fixed, fields[index:]))
            index += len(run)
            if run:
                pairs = tuple((_key(f), FIXED_TYPES[f.type][0]) for f in run)
                ops.append((FIXED, self.peek(fields[index:]), pairs))
                continue
            ops.append(self.field(fields[index], self.peek(fields[index + 1 :])))
            index += 1
        return tuple(ops)

    def peek(self, rest: list[Field]) -> bool:
        """DecoderBuilder._peek: whether a varint follows (the tagged field count at
        the end of a flexible struct)."""
        if not rest:
            return self.flexible
        return _starts_with_varint(rest[0], self.version, self.flexible)

    def field(self, field: Field, peek: bool, key: str | None = "") -> tuple[Any, ...]:
        """DecoderBuilder.emit_field, as an op; `key` None for an array element."""
        name = _key(field) if key == "" else key
        nullable = field.nullable_in(self.version)
        flex = field.flexible_in(self.version, self.flexible)
        if field.is_array:
            return self.array(field, name, flex, nullable, peek)
        if field.is_struct:
            return (STRUCT, name, nullable, self.struct(field.children or ()))
        return self.scalar(field.type, name, flex, nullable, peek)

    def scalar(
        self, type_name: str, key: str | None, flex: bool, nullable: bool, peek: bool
    ) -> tuple[Any, ...]:
        if type_name in FIXED_TYPES:  # a tagged field, or an array element: no peek
            return (FIXED, False, ((key, FIXED_TYPES[type_name][0]),))
        if type_name == "uuid":
            return (UUID, key)
        return (_SIZED[type_name], key, flex, nullable, peek and not nullable)

    def array(
        self, field: Field, key: str | None, flex: bool, nullable: bool, peek: bool
    ) -> tuple[Any, ...]:
        element_type = field.element_type
        fixed = not field.is_struct and element_type in FIXED_TYPES
        if field.is_struct:
            element: tuple[Any, ...] = (STRUCT, None, False, self.struct(field.children or ()))
        else:
            element = self.scalar(element_type, None, flex, False, False)
        size = _element_min_size(field, self.version, self.flexible)
        return (ARRAY, key, flex, nullable, peek and fixed and not nullable, size, element)


def _key(field: Field) -> str:
    return sys.intern(field.name)


def lower(fields: tuple[Field, ...], version: int, flexible: bool) -> Program:
    """The program of a struct at a version (see the module's docstring)."""
    return _Lowering(version, flexible).struct(fields)


_HELPERS = (
    wire.short,
    wire.invalid,
    wire.uuid_of,
    wire.MAX_UNKNOWN_TAGS,
    sys.intern("_unknown_tags"),
    sys.intern("_explicit_tags"),
)


def compile_accel_decoder(
    fields: tuple[Field, ...], version: int, flexible: bool, name: str, fallback: Decoder
) -> Decoder:
    """A C decoder for the struct; it hands calls it does not take (a buffer that is
    not a 1-D byte memoryview, positions out of the buffer, a budget that is not a
    list holding an int) to `fallback`, the Python decoder, unchanged."""
    if _accel is None:
        raise RuntimeError("codec._accel is not built")
    decoder: Decoder = _accel.make_decoder(lower(fields, version, flexible), fallback, _HELPERS, name)
    return decoder


def lazy(compile_python: Callable[[], Decoder]) -> Decoder:
    """The Python decoder, compiled the first time the C one hands it a call (never,
    for frames from codec.messages): compiling costs more than lowering."""
    compiled: list[Decoder] = []

    def fallback(buf: memoryview, pos: int, end: int, budget: list[int]) -> tuple[dict[str, Any], int]:
        if not compiled:
            compiled.append(compile_python())
        return compiled[0](buf, pos, end, budget)

    return fallback
