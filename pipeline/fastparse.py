"""A request-log line parsed in Python, for the lines whose outcome is certain.

Spark's from_json (Jackson, PERMISSIVE) defines what a line means: read.parse_lines.
Decoding in the Python workers (msgspec, typed: no dict per line, types checked in C)
costs a fraction of it, but the two parsers differ at the edges: Jackson takes single
quotes and NaN, turns a number found where a string is expected into its text, keeps
the fields before a type error ... So this parser decides only the lines where both
must agree: a JSON object whose report fields are each absent, null or exactly of
the schema's type, and whose ts has the form the proxy writes. Anything else
(malformed, truncated, a field of another type, invalid UTF-8) is left undecided
(None) and goes to Spark's parser, so bad lines are still found, counted and
explained by Spark's own rules.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Any

import msgspec
from pyspark.sql.types import (
    ArrayType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestampType,
)

from pipeline.schema import CORRUPT, report_schema

_EPOCH = dt.datetime(1970, 1, 1)
_INT = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
_LONG = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


def _python_type(kind: DataType, name: str) -> Any:
    """The msgspec type of a schema field: exactly what from_json takes unchanged."""
    if isinstance(kind, StringType | TimestampType):  # ts: checked by ts_micros
        return str
    if isinstance(kind, IntegerType):
        return _INT
    if isinstance(kind, LongType):
        return _LONG
    if isinstance(kind, DoubleType):
        return float  # a JSON integer too, as for Spark; NaN and 1e400 are not taken
    if isinstance(kind, ArrayType):
        # Spark turns any element into a string; the report only asks if it is empty.
        return list
    if isinstance(kind, MapType):
        return dict[str, _python_type(kind.valueType, name) | None]  # type: ignore[misc]
    if isinstance(kind, StructType):
        return _struct(kind, name)
    raise TypeError(f"no msgspec type for {name}: {kind}")


STRUCTS: dict[str, Any] = {}  # by the field holding them: record_stats, per_topic


def _struct(schema: StructType, name: str) -> Any:
    fields = [(f.name, _python_type(f.dataType, f.name) | None, None)
              for f in schema.fields if f.name != CORRUPT]
    # Not tracked by the cycle collector: a decoded line holds no cycles.
    STRUCTS[name] = msgspec.defstruct(name, fields, gc=False)
    return STRUCTS[name]


# The report's fields (schema.report_schema), decoded into attributes of a Line.
Line = _struct(report_schema(), "Line")
RecordStats, Counts = STRUCTS["record_stats"], STRUCTS["per_topic"]
decode = msgspec.json.Decoder(Line).decode  # raises ValueError: undecided

_DATE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:[0-5]\d")
_second_cache: dict[str, int] = {}


def _second(prefix: str) -> int | None:
    """Microseconds since the epoch of "2025-03-01T12:00:00", or None."""
    if not _DATE.fullmatch(prefix):
        return None
    try:
        start = dt.datetime.strptime(prefix[:16], "%Y-%m-%dT%H:%M")
    except ValueError:  # month 13, Feb 30 ...: Spark's affair
        return None
    micros = (start - _EPOCH) // dt.timedelta(microseconds=1) + int(prefix[17:]) * 1_000_000
    if len(_second_cache) > 100_000:  # lines come in time order: few seconds recur
        _second_cache.clear()
    _second_cache[prefix] = micros
    return micros


def ts_micros(ts: str) -> int | None:
    """Microseconds since the epoch of a "2025-03-01T12:00:00.123456Z" ts, or None
    for any other form (Spark takes more; those lines are left to it)."""
    second = _second_cache.get(ts[:19])
    if second is None and (second := _second(ts[:19])) is None:
        return None
    if len(ts) == 27:  # the proxy's own form, six digits: the common case, checked first
        fraction = ts[20:26]
        if ts[19] == "." and ts[26] == "Z" and fraction.isdigit() and fraction.isascii():
            return second + int(fraction)
        return None
    tail = ts[19:]
    if tail == "Z":
        return second
    fraction = tail[1:-1]
    if (tail[:1] != "." or tail[-1:] != "Z" or not 1 <= len(fraction) <= 6
            or not (fraction.isascii() and fraction.isdigit())):
        return None
    return second + int(fraction.ljust(6, "0"))


def parse(raw: bytes) -> Any:
    """The line as a Line with `ts` in microseconds (int) or None, or None when
    undecided. A decided line is never corrupt for Spark; whether it is bad (no valid
    ts or event) is the caller's question."""
    try:
        line = decode(raw)
    except ValueError:  # malformed, a type Spark may convert or reject, bad UTF-8
        return None
    ts = line.ts
    if ts is not None and (ts := ts_micros(ts)) is None:
        return None
    line.ts = ts
    return line
