"""Which interpreter runs a layout: the C one where it was built, else the Python one.

`decoder(struct)` is the decoder of a layout.Struct: `decoder(buf, pos, end, budget)
-> (dict, pos)` and `decoder.skim(buf, pos, end, budget, found) -> pos`, as
codec/interpreter.py's decode and skim. It is the C interpreter's (codec/_accel.c) when
the extension was built (setup.py builds it where a C compiler and the Python headers
are) and the environment variable KAFKALENS_PURE_CODEC is unset or empty (`ACTIVE`);
else the Python interpreter's, which gives the same results and is slower (see the
README's codec paragraph and bench/codec/decode.py).

`c_collector(node)` is codec/entities.py's collector of an entities node tree run in C
(the same dict of distinct values), which entities.collector gives when ACTIVE.

`records_summarizer(...)` is the C walk of a records field's batch headers, which
codec/records/stats.py's summarize runs when ACTIVE: `summarize(buf, allow_partial_tail,
max_bytes)` gives the RecordStats the Python walk gives, or raises the same DecodeError,
or returns NotImplemented for a call it does not take (then the Python walk runs).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
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


def c_collector(node: Any) -> Callable[[dict[str, Any]], dict[str, list[Any]]]:
    """The C collector of an entities._Node tree (see codec/entities.py)."""
    if _accel is None:
        raise RuntimeError("codec._accel is not built")
    built: Callable[[dict[str, Any]], dict[str, list[Any]]] = _accel.Collector(node)
    return built


# Whether the C summarize makes a RecordStats by filling its slots (records_summarizer).
records_direct = False


def records_summarizer(
    record_stats: type, error: Callable[..., Exception], compression_names: tuple[str, ...],
    layout: dict[str, tuple[int, str] | int],
) -> Callable[[Any, bool, int], Any] | None:
    """The C summarize of codec/records/stats.py (None where the extension is not built),
    given the RecordStats class, the records error factory and the compression names it
    returns and raises. `layout`: the header fields and constants codec/records describes
    (codec.records.batch.layout() and legacy.layout()); an extension that reads others,
    or passes RecordStats its fields in another order, is refused as one built from other
    sources (ImportError)."""
    if _accel is None:
        return None
    if layout != _accel.RECORD_LAYOUT:
        raise ImportError("codec._accel reads record batch headers at other offsets than codec/records: rebuild it")
    names = tuple(field.name for field in dataclasses.fields(record_stats))
    if names != _accel.RECORD_STATS_FIELDS:
        raise ImportError(f"codec._accel builds RecordStats{_accel.RECORD_STATS_FIELDS}, not {names}: rebuild it")
    # A dataclass whose __init__ only assigns its fields (no __post_init__, no field left
    # out of it) and object's __new__: the C fills a new instance's slots itself.
    params = getattr(record_stats, "__dataclass_params__", None)
    direct = (
        params is not None and params.init and all(f.init for f in dataclasses.fields(record_stats))
        and not hasattr(record_stats, "__post_init__") and record_stats.__new__ is object.__new__
    )  # fmt: skip
    global records_direct
    records_direct = _accel.configure_records(record_stats, error, compression_names, direct)
    return _accel.summarize_records


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
