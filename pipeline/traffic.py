"""What the traffic looks like: latency, errors, topics and consumer groups.

Percentiles are read from the latency histograms of fine.fine_rows (bins 1 % wide):
each is a latency that occurred, within 1 % of the exact one at its rank. They are
service latency: requests that wait by design (long polls,
JoinGroup, semantics.waits_by_design) are counted in `requests` but their latency
goes to the `waiting_*` columns, so the slowest api is a slow broker, not a consumer
with nothing to read. `errors` are failures; errors that are protocol steps
(semantics.expected_errors) are `expected_errors`, left out of `error_rate`.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from pipeline.fine import hist_percentiles

PRODUCE, FETCH = 0, 1
QUANTILES = (0.5, 0.95, 0.99)
WAITING_QUANTILES = (0.5, 0.99)


def _outcomes() -> list[Column]:
    return [F.sum("n").alias("requests"), F.sum("errors").alias("errors"),
            F.sum("expected_errors").alias("expected_errors")]


def _joined(totals: DataFrame, keys: list[str], *percentiles: DataFrame) -> DataFrame:
    # Null-safe: an api_key may be null (a request line naming no api key).
    for p in percentiles:
        renamed = p.select(*[F.col(k).alias(f"_key_{k}") for k in keys],
                           *[c for c in p.columns if c not in keys])
        condition = [F.col(k).eqNullSafe(F.col(f"_key_{k}")) for k in keys]
        totals = totals.join(renamed, condition, "left").drop(*[f"_key_{k}" for k in keys])
    return totals


def latency_by_api(latency: DataFrame) -> DataFrame:
    """Per api: requests (acks=0 Produce counted, without latency), failures, service
    latency percentiles, and the latency of requests that wait by design apart.
    `latency` is fine.fine_rows' `l` part."""
    keys = ["api", "api_key"]
    service, waiting = latency.where(~F.col("waits")), latency.where(F.col("waits"))
    totals = latency.groupBy(*keys).agg(
        *_outcomes(),
        (F.sum(F.when(~F.col("waits"), F.col("lat_sum")))
         / F.sum(F.when(~F.col("waits"), F.col("lat_n")))).alias("avg_ms"),
        F.max(F.when(~F.col("waits"), F.col("lat_max"))).alias("max_ms"),
        F.sum(F.when(F.col("waits"), F.col("n")).otherwise(0)).alias("waiting_requests"),
        F.max(F.when(F.col("waits"), F.col("lat_max"))).alias("waiting_max_ms"),
    )
    stats = _joined(totals, keys, hist_percentiles(service, keys, QUANTILES),
                    hist_percentiles(waiting, keys, WAITING_QUANTILES, "waiting_"))
    return stats.select(
        *keys, "requests", "errors", "expected_errors",
        *[f"p{round(q * 100)}_ms" for q in QUANTILES], "avg_ms", "max_ms",
        "waiting_requests", *[f"waiting_p{round(q * 100)}_ms" for q in WAITING_QUANTILES],
        "waiting_max_ms", (F.col("errors") / F.col("requests")).alias("error_rate"))


def latency_over_time(latency: DataFrame, bucket_seconds: int) -> DataFrame:
    """Per api and time bucket (whole minutes): the series behind the latency chart."""
    epoch = F.unix_seconds("minute")
    bucketed = latency.withColumn(
        "bucket", F.timestamp_seconds(epoch - epoch % bucket_seconds))
    keys = ["bucket", "api"]
    totals = bucketed.groupBy(*keys).agg(*_outcomes())
    stats = _joined(totals, keys,
                    hist_percentiles(bucketed.where(~F.col("waits")), keys, (0.5, 0.95)),
                    hist_percentiles(bucketed.where(F.col("waits")), keys, (0.95,), "waiting_"))
    return stats.select(*keys, "requests", "errors", "expected_errors", "p50_ms", "p95_ms",
                        "waiting_p95_ms")


def _sum_where(api_key: int, field: str) -> Column:
    return F.sum(F.when(F.col("api_key") == api_key, F.col(field)).otherwise(0))


def top_topics(topics: DataFrame) -> DataFrame:
    """Bytes, records and batches produced (Produce requests) and fetched (Fetch
    responses) per topic; `topics` is fine.fine_rows' `t` part."""
    sums = [
        _sum_where(key, field).alias(f"{verb}_{field}")
        for key, verb in ((PRODUCE, "produced"), (FETCH, "fetched"))
        for field in ("bytes", "records", "batches")
    ]
    totals = topics.groupBy("topic").agg(*sums).withColumn(
        "total_bytes", F.col("produced_bytes") + F.col("fetched_bytes")
    )
    # One partition for the rank: a row per topic, few next to the lines.
    order = Window.orderBy(F.desc_nulls_last("total_bytes"), F.asc("topic"))
    return totals.withColumn("rank", F.row_number().over(order))


def _latest(column: str) -> Column:
    """The value on the newest line that has one (null orderings are skipped)."""
    newest = F.when(F.col(column).isNotNull(), F.col("last_seen"))
    return F.max_by(column, newest).alias(column)


def consumer_groups(groups: DataFrame) -> DataFrame:
    """Per consumer group; `groups` is clients.groups_of(fine), whose rows keep
    each line's own group fields and software (not the connection's resolved identity)."""
    grouped = groups.where(F.col("group_id").isNotNull() & (F.col("group_id") != ""))
    member = F.when(F.col("member_id") != "", F.col("member_id"))
    software = F.concat_ws("/", "client_software_name", "client_software_version")
    stats = grouped.groupBy("group_id").agg(
        _latest("protocol_type"),
        _latest("protocol_name").alias("assignor"),
        F.count_distinct(member).alias("distinct_member_ids"),
        F.max("members").alias("max_members"),
        F.max("generation_id").alias("generation_id"),
        F.sum("requests").alias("requests"),
        F.sum("errors").alias("errors"),
        F.sum("expected_errors").alias("expected_errors"),
        F.array_sort(F.collect_set(F.when(software != "", software))).alias("client_software"),
        F.min("first_seen").alias("first_seen"),
        F.max("last_seen").alias("last_seen"),
    )
    # JoinGroup's member list is the group's size at a rebalance; member ids seen over
    # the whole log also count members that have since left, so they are the fallback.
    return stats.withColumn(
        "member_count", F.coalesce(F.col("max_members"), F.col("distinct_member_ids"))
    )
