"""All of the report's tables, by name, in writing order.

Every table is a DataFrame derived from the lines' one aggregation (fine.fine_rows);
Spark computes and writes them all.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass
from typing import Any, cast

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from pipeline import clients, fleet, traffic
from pipeline.fine import part
from pipeline.utc import from_micros, micros

# Each table is written (and shown) in this order; the sort is for people reading it
# (the fleet's: newest buckets first, the largest lag first).
TABLE_ORDER: dict[str, list[str]] = {
    "client_inventory": ["requests:desc", "client_key"],
    "api_usage": ["api_key", "api_version", "client_software_name", "client_software_version"],
    "kafka4_readiness": ["requests:desc", "client_key", "api_key", "api_version"],
    "latency_by_api": ["requests:desc", "api"],
    "latency_over_time": ["bucket", "api"],
    "top_topics": ["rank"],
    "consumer_groups": ["group_id"],
    "consumer_lag": ["bucket:desc", "latest_lag:desc", "group_id", "topic", "partition"],
    "consumer_topic_lag": ["bucket:desc", "total_lag:desc", "group_id", "topic"],
    "committed_lag": ["lag:desc", "group_id", "topic", "partition"],
    "replication_lag": ["bucket:desc", "latest_lag:desc", "replica_id", "topic", "partition"],
    "topic_access": ["topic", "direction", "bytes:desc", "principal", "client_software_name",
                     "client_software_version"],
    "client_telemetry": ["client_software_name", "client_software_version", "metric"],
    "client_telemetry_top": ["metric", "rank"],
    "bad_lines": ["bad_lines:desc", "file", "reason"],
    "input_files": ["file"],
}
READ, LEFT_OUT = "read", "left out"  # input_files' status


@dataclass(frozen=True)
class Counts:
    lines: int
    bad: int
    requests: int
    connection_events: int
    other_events: int
    first_ts: dt.datetime | None  # aware, UTC
    last_ts: dt.datetime | None
    files_with_lines: frozenset[str] = frozenset()
    # Good lines with fields of another type than the schema's (read as lines, those
    # fields null: evolve.py), and per field (name, lines), by name.
    retyped: int = 0
    retyped_fields: tuple[tuple[str, int], ...] = ()


def count_columns() -> list[Column]:
    """Over fine.fine_rows: the line counts, the time span and the number of rows."""
    part = F.col("part")
    return [
        F.sum(F.when(part.isin("g", "b", "e"), F.col("n"))).alias("lines"),
        F.sum(F.when(part == "b", F.col("n"))).alias("bad"),
        F.sum(F.when(part == "g", F.col("n"))).alias("requests"),
        F.sum(F.when((part == "e") & F.col("event").startswith("connection_"), F.col("n")))
        .alias("conn"),
        # epoch micros: a timestamp would reach the driver in its local zone (utc.py)
        micros(F.min(F.when(part.isin("g", "e"), F.col("first_seen")))).alias("first_ts"),
        micros(F.max(F.when(part.isin("g", "e"), F.col("last_seen")))).alias("last_ts"),
        F.count(F.lit(1)).alias("rows"),
        # at most a file name per input file
        F.collect_set(F.when(part.isin("g", "e", "b"), F.col("file"))).alias("files"),
        F.sum(F.when(part == "r", F.col("n"))).alias("retyped"),
        # a row per file and set of retyped fields
        F.collect_list(F.when(part == "r", F.struct("reason", "n"))).alias("retyped_by"),
    ]


def counts_of(row: dict[str, Any]) -> Counts:
    """Counts from count_columns' values."""
    lines, bad, requests, conn = (row[name] or 0 for name in ("lines", "bad", "requests", "conn"))
    fields: Counter[str] = Counter()
    for names, n in row.get("retyped_by") or ():
        for name in names.split(", "):
            fields[name] += n
    return Counts(lines, bad, requests, conn, lines - bad - requests - conn,
                  from_micros(row["first_ts"]), from_micros(row["last_ts"]),
                  frozenset(row.get("files") or ()), row.get("retyped") or 0,
                  tuple(sorted(fields.items())))


def bad_lines(fine: DataFrame, left_out: dict[str, str]) -> DataFrame:
    """Per file and reason: how many bad lines, and up to two samples of them (the
    smallest and the largest: deterministic, bounded however many lines are bad); and
    a row per file left out (`left_out`: file -> why), its lines not counted (null)."""
    lines = part(fine, "b").groupBy("file", "reason").agg(
        F.sum("n").alias("bad_lines"),
        F.array_distinct(F.array(F.min("sample"), F.max("sample"))).alias("samples"))
    files = literal_rows(fine.sparkSession, BAD_LINES_SCHEMA, [
        (path, f"file left out: {why}", None, []) for path, why in sorted(left_out.items())])
    return lines.unionByName(files)


BAD_LINES_SCHEMA = "file string, reason string, bad_lines bigint, samples array<string>"
INPUT_FILES_SCHEMA = ("file string, lines bigint, bad_lines bigint, retyped_lines bigint, "
                      "status string, reason string")


def input_files(fine: DataFrame, files: list[str], counted: frozenset[str],
                left_out: dict[str, str]) -> DataFrame:
    """A row per input file the listing found: its lines, bad lines and lines with
    retyped fields as read (status `read`), or null and why it was left out (status
    `left out`). `counted`: the files that had lines in `fine` (the rest were read and
    held none)."""
    rows = fine.where(F.col("part").isin("g", "e", "b", "r"))
    kind = F.col("part")
    read = rows.groupBy("file").agg(
        F.sum(F.when(kind != "r", F.col("n"))).alias("lines"),
        F.sum(F.when(kind == "b", F.col("n")).otherwise(0)).alias("bad_lines"),
        F.sum(F.when(kind == "r", F.col("n")).otherwise(0)).alias("retyped_lines"),
    ).select("*", F.lit(READ).alias("status"), F.lit(None).cast("string").alias("reason"))
    empty = [(path, 0, 0, 0, READ, None)
             for path in sorted(set(files) - counted - set(left_out))]
    gone = [(path, None, None, None, LEFT_OUT, why) for path, why in sorted(left_out.items())]
    return read.unionByName(literal_rows(fine.sparkSession, INPUT_FILES_SCHEMA, empty + gone))


def literal_rows(spark: Any, ddl: str, rows: list[tuple[Any, ...]]) -> DataFrame:
    """A DataFrame of a few rows known to the driver (empty files, files left out),
    as literals in the plan: no Python runs anywhere to make it."""
    schema = cast(StructType, StructType.fromDDL(ddl))
    if not rows:
        return spark.range(0).select(*[F.lit(None).cast(f.dataType).alias(f.name)
                                       for f in schema.fields])
    structs = [F.struct(*[F.lit(v).cast(f.dataType).alias(f.name)
                          for v, f in zip(row, schema.fields, strict=True)]) for row in rows]
    return spark.range(1).select(F.inline(F.array(*structs)))


# The time buckets' sizes, in minutes: each divides the next (and from 1 to 60 each
# divides the hour, from an hour to a day the day), so rows folded into buckets of one
# size fold exactly into buckets of any larger size. The hourly rollup keeps its
# minute rows at the largest size a report over its table can still need (rollup.py),
# which the report's bucket is then a multiple of; past a day, whole days, doubling.
BUCKET_MINUTES = (1, 2, 6, 12, 60, 120, 360, 720, 1440)
POINTS = 120


def ladder_seconds(at_least: float) -> int:
    """The smallest bucket size of the ladder (BUCKET_MINUTES, then days doubling), in
    seconds, that is at least `at_least` seconds."""
    for minutes in BUCKET_MINUTES:
        if minutes * 60 >= at_least:
            return minutes * 60
    size = BUCKET_MINUTES[-1] * 60
    while size < at_least:
        size *= 2
    return size


def span_bucket_seconds(span: float, points: int = POINTS) -> int:
    """The bucket size for a span of `span` seconds: the ladder's smallest giving at
    most `points` buckets over it (one minute at the least). It never shrinks as the
    span grows."""
    return ladder_seconds(max(60.0, span / points))


def bucket_seconds(c: Counts, points: int = POINTS) -> int:
    """The bucket size for the lines' span (span_bucket_seconds)."""
    if c.first_ts is None or c.last_ts is None:
        return 60
    return span_bucket_seconds((c.last_ts - c.first_ts).total_seconds(), points)


# Tables written one after another by one worker (tables.FAMILIES' order), because
# they read the same cached aggregation (their family's first table fills it); the
# families are written side by side.
FAMILIES: list[tuple[str, ...]] = [
    ("latency_by_api", "latency_over_time"),
    ("consumer_lag", "consumer_topic_lag", "replication_lag"),
    ("client_inventory", "api_usage", "kafka4_readiness", "topic_access"),
    ("top_topics", "consumer_groups", "committed_lag"),
    ("client_telemetry", "client_telemetry_top", "bad_lines", "input_files"),
]
assert sorted(n for f in FAMILIES for n in f) == sorted(TABLE_ORDER)


@dataclass
class Built:
    """Every table's DataFrame, and the aggregations several of them share (cached:
    unpersist once written)."""

    tables: dict[str, DataFrame]
    shared: list[DataFrame]


def build_tables(fine: DataFrame, bucket: int, files: list[str], counts: Counts,
                 left_out: dict[str, str]) -> Built:
    """`fine` is fine.fine_rows(parsed), `bucket` the time buckets' seconds, `files`
    the input files listed, `left_out` those not read (file -> why). Tables that share
    a grain come from one aggregation, cached: the connections' usage (four tables), the
    latency histograms (two), the partitions' lag (three)."""
    shared: list[DataFrame] = []

    def share(df: DataFrame) -> DataFrame:
        shared.append(df.persist(StorageLevel.MEMORY_AND_DISK))
        return shared[-1]

    usage = share(clients.connection_usage(clients.groups_of(fine)))
    # Each pair of tables selects from one aggregation, cached (the first table of the
    # pair to be written fills it): caching the tables instead left it computed twice.
    by_api, over_time = traffic.latency_tables(part(fine, "l"), bucket, share)
    consumer, replication = fleet.lag_tables(fine, bucket, share)
    tables = {
        "client_inventory": clients.client_inventory(usage),
        "api_usage": clients.api_usage(usage),
        "kafka4_readiness": clients.kafka4_readiness(usage),
        "latency_by_api": by_api,
        "latency_over_time": over_time,
        "top_topics": traffic.top_topics(part(fine, "t")),
        "consumer_groups": traffic.consumer_groups(clients.groups_of(fine)),
        "consumer_lag": consumer,
        "consumer_topic_lag": fleet.consumer_topic_lag(consumer),
        "committed_lag": fleet.committed_lag(fine),
        "replication_lag": replication,
        "topic_access": fleet.topic_access(fine, usage),
        "client_telemetry": fleet.client_telemetry(fine),
        "client_telemetry_top": fleet.client_telemetry_top(fine),
        "bad_lines": bad_lines(fine, left_out),
        "input_files": input_files(fine, files, counts.files_with_lines, left_out),
    }
    return Built({name: tables[name] for name in TABLE_ORDER}, shared)


def sort_columns(name: str) -> list[Column]:
    return [F.desc_nulls_last(spec.removesuffix(":desc")) if spec.endswith(":desc")
            else F.asc(spec) for spec in TABLE_ORDER[name]]
