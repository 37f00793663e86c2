"""All of the report's tables from the parsed lines, by name, in writing order.

Every table is a DataFrame over the cached parsed lines or over their one wide
aggregation (clients.request_groups); Spark computes and writes them all.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipeline import clients, semantics, traffic
from pipeline.schema import REQUEST_EVENTS

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
UNKNOWN_API = "unknown"


@dataclass(frozen=True)
class Counts:
    lines: int
    bad: int
    requests: int
    connection_events: int
    other_events: int
    first_ts: dt.datetime | None
    last_ts: dt.datetime | None


def request_rows(parsed: DataFrame) -> DataFrame:
    """The good request lines, each with `failed`, `expected_error` (0/1) and `waits`."""
    good = parsed.where(F.col("bad_reason").isNull() & F.col("event").isin(*REQUEST_EVENTS))
    # Map and group keys must not be null: an unnamed api by its key, else "unknown".
    api = F.coalesce(F.col("api"), F.concat(F.lit("ApiKey"), F.col("api_key").cast("string")),
                     F.lit(UNKNOWN_API))
    failure = semantics.failed(F.col("errors"), api)
    return good.select(
        *[c for c in good.columns if c not in ("api", "errors", "line", "file", "bad_reason")],
        api.alias("api"),
        failure.alias("failed"),
        semantics.expected_only(F.col("errors"), failure).alias("expected_error"),
        semantics.waits_by_design(F.col("api_key"), F.col("max_wait_ms")).alias("waits"),
    )


def counts(parsed: DataFrame) -> Counts:
    is_good = F.col("bad_reason").isNull()
    row = parsed.agg(
        F.count(F.lit(1)).alias("lines"),
        F.count("bad_reason").alias("bad"),
        F.count(F.when(is_good & F.col("event").isin(*REQUEST_EVENTS), 1)).alias("requests"),
        F.count(F.when(is_good & F.col("event").startswith("connection_"), 1)).alias("conn"),
        F.min(F.when(is_good, F.col("ts"))).alias("first_ts"),
        F.max(F.when(is_good, F.col("ts"))).alias("last_ts"),
    ).first()
    assert row is not None
    other = row["lines"] - row["bad"] - row["requests"] - row["conn"]
    return Counts(row["lines"], row["bad"], row["requests"], row["conn"], other,
                  row["first_ts"], row["last_ts"])


def bad_lines(parsed: DataFrame) -> DataFrame:
    """Per file and reason: how many bad lines, and up to two samples of them."""
    bad = parsed.where(F.col("bad_reason").isNotNull())
    return bad.groupBy("file", F.col("bad_reason").alias("reason")).agg(
        F.count(F.lit(1)).alias("bad_lines"),
        # Two deterministic samples in bounded memory, however many bad lines there are.
        F.array_distinct(F.array(F.min("line"), F.max("line"))).alias("samples"),
    )


def bucket_seconds(c: Counts, points: int = 120) -> int:
    """A whole number of minutes giving at most about `points` buckets over the span."""
    if c.first_ts is None or c.last_ts is None:
        return 60
    span = (c.last_ts - c.first_ts).total_seconds()
    return max(1, int(span // (60 * points)) + 1) * 60


def build_tables(requests: DataFrame, parsed: DataFrame, c: Counts, groups: DataFrame,
                 usage: DataFrame) -> dict[str, DataFrame]:
    """`requests` is request_rows(parsed), `groups` clients.request_groups(requests)
    and `usage` clients.connection_usage(groups), which three tables share."""
    return {
        "client_inventory": clients.client_inventory(usage),
        "api_usage": clients.api_usage(usage),
        "kafka4_readiness": clients.kafka4_readiness(usage),
        "latency_by_api": traffic.latency_by_api(requests),
        "latency_over_time": traffic.latency_over_time(requests, bucket_seconds(c)),
        "top_topics": traffic.top_topics(requests),
        "consumer_groups": traffic.consumer_groups(groups),
        "bad_lines": bad_lines(parsed),
    }


def sort_columns(name: str) -> list[Column]:
    cols = []
    for spec in TABLE_ORDER[name]:
        column, _, direction = spec.partition(":")
        cols.append(F.desc_nulls_last(column) if direction == "desc" else F.asc(column))
    return cols
