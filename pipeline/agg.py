"""Spark SQL's aggregate semantics in plain Python, for the tables built in the driver.

The tables used to be Spark aggregations; built in Python they must give the same
values: sum, min and max ignore nulls (null only when every value is), doubles order
NaN above everything, and sorts put nulls first ascending and last descending.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

Row = dict[str, Any]
EPOCH = dt.datetime(1970, 1, 1)


def add(a: Any, b: Any) -> Any:
    """sum(): nulls ignored, null if both are."""
    return a if b is None else b if a is None else a + b


def most(a: Any, b: Any) -> Any:
    """max() of ints or strings (Spark compares strings by UTF-8 bytes: the same order
    as Python's code points)."""
    return a if b is None or (a is not None and a >= b) else b


def least(a: Any, b: Any) -> Any:
    """min() of ints or strings."""
    return a if b is None or (a is not None and a <= b) else b


def dmax(a: float | None, b: float | None) -> float | None:
    """max() of doubles: NaN is the largest."""
    if a is None or b is None:
        return a if b is None else b
    if a != a or b != b:
        return a if a != a else b
    return a if a >= b else b


def dmin(a: float | None, b: float | None) -> float | None:
    """min() of doubles: NaN only if every value is NaN."""
    if a is None or b is None:
        return a if b is None else b
    if a != a or b != b:
        return b if a != a else a
    return a if a <= b else b


def sort_rows(rows: list[Row], specs: list[str]) -> list[Row]:
    """Rows sorted by "column" (ascending, nulls first) and "column:desc" (nulls last)
    specs, the first the most significant."""
    for spec in reversed(specs):  # stable sorts, least significant first
        column, _, direction = spec.partition(":")
        rows.sort(key=lambda r: (r[column] is not None, r[column]),
                  reverse=direction == "desc")
    return rows


def timestamp(micros: int | None) -> dt.datetime | None:
    """A timestamp column's value as PySpark collects it (naive, here UTC)."""
    return None if micros is None else EPOCH + dt.timedelta(microseconds=micros)
