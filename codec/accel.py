"""Which interpreter runs a layout: the C one where it was built, else the Python one.

`decoder(struct)` is the decoder of a layout.Struct: `decoder(buf, pos, end, budget)
-> (dict, pos)` and `decoder.skim(buf, pos, end, budget, found) -> pos`, as
codec/interpreter.py's decode and skim. It is the C interpreter's (codec/_accel.c) when
the extension was built (setup.py builds it where a C compiler and the Python headers
are) and the environment variable KAFKALENS_PURE_CODEC is unset or empty (`ACTIVE`);
else the Python interpreter's, which gives the same results and is slower (see the
README's codec paragraph and bench/codec/decode.py).
"""

from __future__ import annotations

import os
from functools import cache, partial
from typing import Any, Protocol

from codec import interpreter, wire
from codec.kinds import ENUMS
from codec.layout import Struct

try:
    from codec import _accel
except ImportError:  # built without a C compiler: pure Python
    _accel = None  # type: ignore[assignment]

AVAILABLE: bool = _accel is not None
ACTIVE: bool = AVAILABLE and not os.environ.get("KAFKALENS_PURE_CODEC")



def check_numbers(built: dict[str, dict[str, int]]) -> None:
    """Refuse an extension whose kinds, framings and entities are not codec/kinds.py's
    (built before codec/generated/kinds.h was regenerated)."""
    if built != {enum.__name__: {member.name: member.value for member in enum} for enum in ENUMS}:
        raise ImportError("codec._accel was built from another codec/kinds.py: rebuild it (pip install -e .)")


if _accel is not None:
    check_numbers(_accel.NUMBERS)
    _accel.configure(wire.short, wire.invalid, wire.uuid_of, wire.MAX_UNKNOWN_TAGS)


class Decoder(Protocol):
    def __call__(self, buf: memoryview, pos: int, end: int, budget: list[int]) -> tuple[dict[str, Any], int]: ...

    def skim(self, buf: memoryview, pos: int, end: int, budget: list[int], found: dict[str, Any]) -> int: ...


class PythonDecoder:
    """The Python interpreter's decode and skim of one layout, as a Decoder."""

    __slots__ = ("layout",)

    def __init__(self, layout: Struct) -> None:
        self.layout = layout

    def __call__(self, buf: memoryview, pos: int, end: int, budget: list[int]) -> tuple[dict[str, Any], int]:
        return interpreter.decode(self.layout, buf, pos, end, budget)

    def skim(self, buf: memoryview, pos: int, end: int, budget: list[int], found: dict[str, Any]) -> int:
        return interpreter.skim(self.layout, buf, pos, end, budget, found)


def c_decoder(layout: Struct) -> Decoder:
    """The C interpreter's decoder of `layout`; calls it does not take (a buffer that is
    not a 1-D byte memoryview, positions outside it, a budget that is not a list holding
    an int) go to the Python interpreter, unchanged."""
    if _accel is None:
        raise RuntimeError("codec._accel is not built")
    built: Decoder = _accel.Decoder(
        layout, partial(interpreter.decode, layout), partial(interpreter.skim, layout)
    )
    return built


@cache
def decoder(layout: Struct, pure: bool = False) -> Decoder:
    """The decoder kafkalens runs for `layout` (C when ACTIVE); `pure`: the Python one."""
    return c_decoder(layout) if ACTIVE and not pure else PythonDecoder(layout)
