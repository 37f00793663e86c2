"""The fleet tables' share of the one fine aggregation (fine.fine_rows).

Rather than a second pass over the lines, the fleet tables (fleet.py) add parts to the
same aggregation, each keyed at its own grain:

- `p`: a Fetch line's `positions` (#21), one row per minute, consumer group, client,
  replica id, topic and partition: the largest lag in the minute and the latest lag,
  position and high watermark (the values at the newest line);
- `c`: an OffsetCommit line's `committed` (#21), one row per group, topic and
  partition: the latest committed offset, high watermark and lag, and the largest lag;
- `m`: a telemetry line (#20), one row per client instance, metric and attributes:
  its latest value;
- `t` (the topics, fine.py) is keyed by connection and replica id as well, so the
  access map (fleet.topic_access) takes each connection's resolved identity.

The arrays are exploded by Spark SQL: a request line makes a part "p<i>" / "c<i>"
for each element i, which is then read back with element_at. Every aggregate here
is fixed-width (max, max_by of a number by a timestamp), so the aggregation stays
a hash aggregation.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F


def none() -> Column:
    """An empty array of parts (a function: a Column needs the running session)."""
    return F.array().cast("array<string>")

# Existing keys of the `g` part that the fleet parts are keyed by too.
KEYED_ALSO: dict[str, tuple[str, ...]] = {
    "listener": ("t",), "client_address": ("t",), "conn": ("t",),
    "client_id": ("p", "m"), "client_instance_id": ("p", "m"),
    "client_software_name": ("m",), "client_software_version": ("m",), "principal": ("m",),
    "group_id": ("c",),
}
KEY_NAMES = ("consumer_group", "replica_id", "partition", "metric", "metric_type", "attributes")


def _numbered(array: str, prefix: str) -> Column:
    """"<prefix><i>" for each element i of the array column (none when it is null)."""
    named = F.transform(F.col(array), lambda _, i: F.concat(F.lit(prefix), i.cast("string")))
    return F.when(F.col(array).isNotNull(), named).otherwise(none())


def indexed() -> list[Column]:
    """A request line's parts for its positions and committed offsets."""
    return [_numbered("positions", "p"), _numbered("committed", "c")]


def _element(array: str, kind: Column, letter: str) -> Column:
    index = F.expr("try_cast(substring(part, 2) AS INT)") + 1
    return F.when(kind == letter, F.element_at(F.col(array), index))


def _position(kind: Column) -> Column:
    return _element("positions", kind, "p")


def _committed(kind: Column) -> Column:
    return _element("committed", kind, "c")


def topic(kind: Column) -> Column:
    """The topic of a `p` or `c` row (fine.py takes a `t` row's from its part)."""
    return F.coalesce(_position(kind)["topic"], _committed(kind)["topic"])


def _attributes() -> Column:
    """A telemetry point's attributes as one sorted "k=v,k=v" string: a map cannot be
    a grouping key, and the same attributes in another order are the same series."""
    entries = F.array_sort(F.map_entries(F.col("attributes")))
    text = F.concat_ws(",", F.transform(entries, lambda e: F.concat(e["key"], F.lit("="),
                                                                    e["value"])))
    return F.coalesce(text, F.lit(""))


def keys(kind: Column) -> list[Column]:
    on_m = kind == "m"
    return [
        F.when(kind == "p", F.col("consumer_group")).alias("consumer_group"),
        F.when(kind.isin("p", "t"), F.col("replica_id")).alias("replica_id"),
        F.coalesce(_position(kind)["partition"], _committed(kind)["partition"]).alias("partition"),
        F.when(on_m, F.col("metric")).alias("metric"),
        F.when(on_m, F.col("type")).alias("metric_type"),
        F.when(on_m, _attributes()).alias("attributes"),
    ]


def values(kind: Column) -> list[Column]:
    """Per row, the values the fleet aggregates read (null outside their parts)."""
    position, committed = _position(kind), _committed(kind)
    return [
        F.when(kind.isin("p", "c", "m"), F.col("ts")).alias("_fleet_ts"),
        F.coalesce(position["lag"], committed["lag"]).alias("_lag"),
        F.coalesce(position["next_offset"], committed["offset"]).alias("_offset"),
        F.coalesce(position["high_watermark"], committed["high_watermark"]).alias("_hwm"),
        F.when(kind == "m", F.col("value")).alias("_value"),
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
