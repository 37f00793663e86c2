"""Timestamps crossing from Spark to the driver: as UTC, whatever the driver's zone.

The pipeline's times are UTC in Spark (the session's `spark.sql.session.timeZone`:
session.py), but PySpark hands a collected `timestamp` value to Python as a naive
datetime in the driver *process's* local zone (`TimestampType.fromInternal` calls
`datetime.fromtimestamp`), whatever the session's zone, and observed metrics
(`Observation.get`) come back the same way. Under `TZ=America/New_York` a line of
12:00Z came back as 07:00, which the watch then read as 07:00 UTC: a watermark five
hours behind (east of UTC, ahead: windows closed early, later lines dropped as late).

So no timestamp is collected as one. Each crosses as its epoch microseconds (a long,
which no zone touches: `unix_micros`) and is made an aware UTC datetime here
(`from_micros`); `collect` and `crossing` do it for a DataFrame's top-level columns,
`micros` for an aggregate. The other way, nothing naive goes to Spark: PySpark reads
a naive datetime in the driver's local zone too (`time.mktime`), so a time the driver
hands Spark is epoch seconds (`F.lit(float)`) or an aware datetime.
tests/pipeline/test_pipeline_time_zones.py runs the report, the watch and the ingest with the
driver (Python and its JVM) in three zones and compares every output.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StructType, TimestampType

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def from_micros(value: int | None) -> dt.datetime | None:
    """Epoch microseconds (Spark's `unix_micros`) as an aware UTC datetime."""
    return None if value is None else EPOCH + dt.timedelta(microseconds=value)


def micros(column: Column | str) -> Column:
    """A timestamp column as its epoch microseconds, to cross to the driver."""
    return F.unix_micros(F.col(column) if isinstance(column, str) else column)


def _holds_timestamp(kind: DataType) -> bool:
    if isinstance(kind, TimestampType):
        return True
    if isinstance(kind, ArrayType):
        return _holds_timestamp(kind.elementType)
    if isinstance(kind, MapType):
        return _holds_timestamp(kind.keyType) or _holds_timestamp(kind.valueType)
    if isinstance(kind, StructType):
        return any(_holds_timestamp(f.dataType) for f in kind.fields)
    return False


def timestamp_columns(schema: StructType) -> list[str]:
    """The top-level timestamp columns of `schema`. A timestamp nested in an array, map
    or struct would cross in the driver's zone: refused (TypeError) rather than wrong."""
    found = []
    for f in schema.fields:
        if isinstance(f.dataType, TimestampType):
            found.append(f.name)
        elif _holds_timestamp(f.dataType):
            raise TypeError(f"column {f.name} holds a timestamp inside {f.dataType.simpleString()}"
                            ": it would reach the driver in the driver's local zone")
    return found


def crossing_columns(schema: StructType) -> tuple[list[Column], list[str]]:
    """`schema`'s columns, each timestamp as its epoch microseconds (same name), and
    the names so converted (for `restore`)."""
    converted = set(timestamp_columns(schema))
    columns = [micros(f.name).alias(f.name) if f.name in converted else F.col(f.name)
               for f in schema.fields]
    return columns, [f.name for f in schema.fields if f.name in converted]


def crossing(df: DataFrame) -> tuple[DataFrame, list[str]]:
    """`df` with its timestamps as epoch microseconds, and their names."""
    columns, names = crossing_columns(df.schema)
    return df.select(*columns), names


def restore(row: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """A row of `crossing`'s columns with those timestamps made aware UTC datetimes."""
    for name in names:
        row[name] = from_micros(row[name])
    return row


def collect(df: DataFrame) -> list[dict[str, Any]]:
    """`df`'s rows (asDict, recursive), every timestamp an aware UTC datetime."""
    crossed, names = crossing(df)
    return [restore(row.asDict(recursive=True), names) for row in crossed.collect()]
