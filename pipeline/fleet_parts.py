"""The fleet tables' share of the one fine aggregation (fine.fine_rows).

Rather than a second pass over the lines, the fleet tables (fleet.py) add parts to the
same aggregation: `p` (a Fetch line's positions), `c` (an OffsetCommit line's committed
offsets), `m` (a telemetry point), and `t` keyed by connection and replica id too; each
at its grain, exploded by Spark SQL and read back with element_at (pipeline/README.md,
the fleet tables, "How it stays one scan"). Every aggregate here is fixed-width (max,
max_by of a number by a timestamp), so the aggregation stays a hash aggregation.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column
from pyspark.sql import functions as F

# Existing keys of the `g` part that the fleet parts are keyed by too.
KEYED_ALSO: dict[str, tuple[str, ...]] = {
    "listener": ("t",), "client_address": ("t",), "conn": ("t",),
    "client_id": ("p", "m"), "client_instance_id": ("p", "m"),
    "client_software_name": ("m",), "client_software_version": ("m",), "principal": ("m",),
    "group_id": ("c",),
}
KEY_NAMES = ("consumer_group", "replica_id", "partition", "metric", "metric_type", "attributes")


Part = Callable[[str, Column], Column]
On = Callable[..., Column]


def indexed(part_of: Part, none: Column) -> list[Column]:
    """A request line's parts for its positions and committed offsets (`part_of`
    makes a part of a kind and index, `none` is no parts)."""
    def each(array: str, kind: str) -> Column:
        parts = F.transform(F.col(array), lambda _, i: part_of(kind, i))
        return F.when(F.col(array).isNotNull(), parts).otherwise(none)

    return [each("positions", "p"), each("committed", "c")]


def _position(on: On, index: Column) -> Column:
    return F.when(on("p"), F.element_at(F.col("positions"), index))


def _committed(on: On, index: Column) -> Column:
    return F.when(on("c"), F.element_at(F.col("committed"), index))


def topic(on: On, index: Column) -> Column:
    """A `p` or `c` row's topic; `on(*kinds)` is true on those kinds' rows."""
    return F.coalesce(_position(on, index)["topic"], _committed(on, index)["topic"])


def _attributes() -> Column:
    """A telemetry point's attributes as one sorted "k=v,k=v" string: a map cannot be
    a grouping key, and the same attributes in another order are the same series."""
    # sort_array: array_sort has no generated code and would split the scan's stage.
    entries = F.sort_array(F.map_entries(F.col("attributes")))
    text = F.concat_ws(",", F.transform(entries, lambda e: F.concat(e["key"], F.lit("="),
                                                                    e["value"])))
    return F.coalesce(text, F.lit(""))


def keys(on: On, index: Column) -> list[Column]:
    on_m = on("m")
    position, committed = _position(on, index), _committed(on, index)
    return [
        F.when(on("p"), F.col("consumer_group")).alias("consumer_group"),
        F.when(on("p", "t"), F.col("replica_id")).alias("replica_id"),
        F.coalesce(position["partition"], committed["partition"]).alias("partition"),
        F.when(on_m, F.col("metric")).alias("metric"),
        F.when(on_m, F.col("type")).alias("metric_type"),
        F.when(on_m, _attributes()).alias("attributes"),
    ]


def values(on: On, index: Column) -> list[Column]:
    """Per row, the values the fleet aggregates read (null outside their parts)."""
    position, committed = _position(on, index), _committed(on, index)
    return [
        F.when(on("p", "c", "m"), F.col("ts")).alias("_fleet_ts"),
        F.coalesce(position["lag"], committed["lag"]).alias("_lag"),
        F.coalesce(position["next_offset"], committed["offset"]).alias("_offset"),
        F.coalesce(position["high_watermark"], committed["high_watermark"]).alias("_hwm"),
        F.when(on("m"), F.col("value")).alias("_value"),
    ]


def aggregates() -> list[Column]:
    newest = F.col("_fleet_ts")
    return [
        F.max("_lag").alias("max_lag"),
        F.max_by("_lag", newest).alias("latest_lag"),
        F.max_by("_offset", newest).alias("latest_offset"),
        F.max_by("_hwm", newest).alias("latest_hwm"),
        F.max_by("_value", newest).alias("latest_value"),
    ]
