"""What the traffic looks like: latency, errors, topics and consumer groups.

Latency percentiles are service latency: requests that wait by design (long polls,
JoinGroup, semantics.waits_by_design) are counted in `requests` but their latency
goes to the `waiting_*` columns, so the slowest api is a slow broker, not a consumer
with nothing to read. `errors` are failures; errors that are protocol steps
(semantics.expected_errors) are `expected_errors`, left out of `error_rate`.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

PRODUCE, FETCH = 0, 1
QUANTILES = (0.5, 0.95, 0.99)
WAITING_QUANTILES = (0.5, 0.99)


def _service() -> Column:
    return F.when(~F.col("waits"), F.col("latency_ms"))


def _waiting() -> Column:
    return F.when(F.col("waits"), F.col("latency_ms"))


def _percentiles(latency: Column, quantiles: tuple[float, ...], prefix: str = "") -> list[Column]:
    approx = F.percentile_approx(latency, list(quantiles))
    return [approx[i].alias(f"{prefix}p{round(q * 100)}_ms") for i, q in enumerate(quantiles)]


def _outcomes() -> list[Column]:
    return [F.count(F.lit(1)).alias("requests"), F.sum("failed").alias("errors"),
            F.sum("expected_error").alias("expected_errors")]


def latency_by_api(requests: DataFrame) -> DataFrame:
    """Per api: requests (acks=0 Produce counted, without latency), failures, service
    latency percentiles, and the latency of requests that wait by design apart."""
    stats = requests.groupBy("api", "api_key").agg(
        *_outcomes(),
        *_percentiles(_service(), QUANTILES),
        F.avg(_service()).alias("avg_ms"),
        F.max(_service()).alias("max_ms"),
        F.count(F.when(F.col("waits"), 1)).alias("waiting_requests"),
        *_percentiles(_waiting(), WAITING_QUANTILES, "waiting_"),
        F.max(_waiting()).alias("waiting_max_ms"),
    )
    return stats.withColumn("error_rate", F.col("errors") / F.col("requests"))


def latency_over_time(requests: DataFrame, bucket_seconds: int) -> DataFrame:
    """Per api and time bucket: the series behind the report's latency chart."""
    epoch = F.unix_seconds("ts")
    bucket = F.timestamp_seconds(epoch - epoch % bucket_seconds).alias("bucket")
    return requests.groupBy(bucket, "api").agg(
        *_outcomes(), *_percentiles(_service(), (0.5, 0.95)),
        *_percentiles(_waiting(), (0.95,), "waiting_"))


def _sum_where(api_key: int, field: str) -> Column:
    return F.sum(F.when(F.col("api_key") == api_key, F.col("c")[field]).otherwise(0))


def top_topics(requests: DataFrame) -> DataFrame:
    """Bytes, records and batches produced (Produce requests) and fetched (Fetch responses)."""
    carrying = requests.where(F.col("api_key").isin(PRODUCE, FETCH))
    per_topic = carrying.select("api_key", F.explode("per_topic").alias("topic", "c"))
    sums = [
        _sum_where(key, field).alias(f"{verb}_{field}")
        for key, verb in ((PRODUCE, "produced"), (FETCH, "fetched"))
        for field in ("bytes", "records", "batches")
    ]
    totals = per_topic.groupBy("topic").agg(*sums).withColumn(
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
    """Per consumer group; `groups` is clients.request_groups(requests), whose rows keep
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
