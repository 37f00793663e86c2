"""All of the report's tables, by name, in writing order.

Every table is a DataFrame derived from the lines' one aggregation (fine.fine_rows);
Spark computes and writes them all.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipeline import clients, fleet, traffic
from pipeline.fine import part

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
}


@dataclass(frozen=True)
class Counts:
    lines: int
    bad: int
    requests: int
    connection_events: int
    other_events: int
    first_ts: dt.datetime | None
    last_ts: dt.datetime | None


def count_columns() -> list[Column]:
    """Over fine.fine_rows: the line counts, the time span and the number of rows."""
    part = F.col("part")
    return [
        F.sum(F.when(part.isin("g", "b", "e"), F.col("n"))).alias("lines"),
        F.sum(F.when(part == "b", F.col("n"))).alias("bad"),
        F.sum(F.when(part == "g", F.col("n"))).alias("requests"),
        F.sum(F.when((part == "e") & F.col("event").startswith("connection_"), F.col("n")))
        .alias("conn"),
        F.min(F.when(part.isin("g", "e"), F.col("first_seen"))).alias("first_ts"),
        F.max(F.when(part.isin("g", "e"), F.col("last_seen"))).alias("last_ts"),
        F.count(F.lit(1)).alias("rows"),
    ]


def counts_of(row: dict[str, Any]) -> Counts:
    """Counts from count_columns' values."""
    lines, bad, requests, conn = (row[name] or 0 for name in ("lines", "bad", "requests", "conn"))
    return Counts(lines, bad, requests, conn, lines - bad - requests - conn,
                  row["first_ts"], row["last_ts"])


def bad_lines(fine: DataFrame) -> DataFrame:
    """Per file and reason: how many bad lines, and up to two samples of them (the
    smallest and the largest: deterministic, bounded however many lines are bad)."""
    return part(fine, "b").groupBy("file", "reason").agg(
        F.sum("n").alias("bad_lines"),
        F.array_distinct(F.array(F.min("sample"), F.max("sample"))).alias("samples"))


def bucket_seconds(c: Counts, points: int = 120) -> int:
    """A whole number of minutes giving at most about `points` buckets over the span."""
    if c.first_ts is None or c.last_ts is None:
        return 60
    span = (c.last_ts - c.first_ts).total_seconds()
    return max(1, int(span // (60 * points)) + 1) * 60


def build_tables(fine: DataFrame, bucket: int, usage: DataFrame) -> dict[str, DataFrame]:
    """`fine` is fine.fine_rows(parsed), `bucket` the time buckets' seconds and `usage`
    clients.connection_usage(groups), which four tables share."""
    latency, groups = part(fine, "l"), clients.groups_of(fine)
    # The topic lag reads the partition lag's cache (an aggregate: small).
    lag = fleet.consumer_lag(fine, bucket).persist(StorageLevel.MEMORY_AND_DISK)
    return {
        "client_inventory": clients.client_inventory(usage),
        "api_usage": clients.api_usage(usage),
        "kafka4_readiness": clients.kafka4_readiness(usage),
        "latency_by_api": traffic.latency_by_api(latency),
        "latency_over_time": traffic.latency_over_time(latency, bucket),
        "top_topics": traffic.top_topics(part(fine, "t")),
        "consumer_groups": traffic.consumer_groups(groups),
        "consumer_lag": lag,
        "consumer_topic_lag": fleet.consumer_topic_lag(lag),
        "committed_lag": fleet.committed_lag(fine),
        "replication_lag": fleet.replication_lag(fine, bucket),
        "topic_access": fleet.topic_access(fine, usage),
        "client_telemetry": fleet.client_telemetry(fine),
        "client_telemetry_top": fleet.client_telemetry_top(fine),
        "bad_lines": bad_lines(fine),
    }


def sort_columns(name: str) -> list[Column]:
    return [F.desc_nulls_last(spec.removesuffix(":desc")) if spec.endswith(":desc")
            else F.asc(spec) for spec in TABLE_ORDER[name]]
