"""All of the report's tables from the lines' partial aggregates, by name, in writing order."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline import clients, traffic
from pipeline.read import SAMPLE_CHARS

# Each table is written (and shown) in this order; the sort is for people reading it.
TABLE_ORDER: dict[str, list[str]] = {
    "client_inventory": ["requests:desc", "client_key"],
    "api_usage": ["api_key", "api_version", "client_software_name", "client_software_version"],
    "kafka4_readiness": ["requests:desc", "client_key", "api_key", "api_version"],
    "latency_by_api": ["requests:desc", "api"],
    "latency_over_time": ["bucket", "api"],
    "top_topics": ["rank"],
    "consumer_groups": ["group_id"],
    "bad_lines": ["bad_lines:desc", "file", "reason"],
}


@dataclass(frozen=True)
class Counts:
    lines: int
    bad: int
    requests: int
    connection_events: int
    other_events: int
    first_ts: object
    last_ts: object


def kind(partials: DataFrame, name: str) -> DataFrame:
    """The partials' rows of one kind (see partials.py)."""
    return partials.where(F.col("kind") == name)


def counts(partials: DataFrame) -> Counts:
    row = kind(partials, "n").agg(
        F.sum("lines").alias("lines"),
        F.sum("bad").alias("bad"),
        F.sum("requests").alias("requests"),
        F.sum("conn_events").alias("conn"),
        F.timestamp_micros(F.min("first_us")).alias("first_ts"),
        F.timestamp_micros(F.max("last_us")).alias("last_ts"),
    ).first()
    assert row is not None
    lines, bad, requests, conn = (row[k] or 0 for k in ("lines", "bad", "requests", "conn"))
    return Counts(lines, bad, requests, conn, lines - bad - requests - conn,
                  row["first_ts"], row["last_ts"])


def bad_lines(partials: DataFrame) -> DataFrame:
    """Per file and reason: how many bad lines, and up to two samples of them."""
    bad = kind(partials, "b").select(
        "file", "reason", F.substring(F.col("line").cast("string"), 1, SAMPLE_CHARS).alias("line")
    )
    return bad.groupBy("file", "reason").agg(
        F.count(F.lit(1)).alias("bad_lines"),
        # Two deterministic samples in bounded memory, however many bad lines there are.
        F.array_distinct(F.array(F.min("line"), F.max("line"))).alias("samples"),
    )


def bucket_seconds(c: Counts, points: int = 120) -> int:
    """A whole number of minutes giving at most about `points` buckets over the span."""
    if c.first_ts is None or c.last_ts is None:
        return 60
    span = (c.last_ts - c.first_ts).total_seconds()  # type: ignore[operator]
    return max(1, int(span // (60 * points)) + 1) * 60


def build_tables(
    spark: SparkSession, partials: DataFrame, c: Counts, groups: DataFrame, usage: DataFrame
) -> dict[str, DataFrame]:
    """`groups` is clients.request_groups(kind(partials, "g")), and `usage` is
    clients.connection_usage(groups), which three tables share."""
    latency = kind(partials, "l")
    return {
        "client_inventory": clients.client_inventory(usage),
        "api_usage": clients.api_usage(usage),
        "kafka4_readiness": clients.kafka4_readiness(spark, usage),
        "latency_by_api": traffic.latency_by_api(latency),
        "latency_over_time": traffic.latency_over_time(latency, bucket_seconds(c)),
        "top_topics": traffic.top_topics(kind(partials, "t")),
        "consumer_groups": traffic.consumer_groups(groups),
        "bad_lines": bad_lines(partials),
    }


def sort_columns(name: str) -> list:
    cols = []
    for spec in TABLE_ORDER[name]:
        column, _, direction = spec.partition(":")
        cols.append(F.desc(column) if direction == "desc" else F.asc(column))
    return cols
