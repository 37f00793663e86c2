"""What the traffic looks like: latency, errors, topics and consumer groups."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from pipeline import sketch
from pipeline.partials import TOPIC_FIELDS

QUANTILES = (0.5, 0.95, 0.99)


def _merge_latency(latency: DataFrame, keys: list[str], quantiles: tuple[float, ...]
                   ) -> DataFrame:
    """Partial latency rows (partials kind `l`) merged per key: requests, errors,
    percentiles (sketch.py), avg_ms and max_ms.

    Two aggregations, both small: per key and bin (a partial's scalars ride along on
    its first bin only, so each is added once), then per key, collecting the bins.
    """
    bins = F.arrays_zip(F.col("bins").alias("bin"), F.col("bin_counts").alias("n"),
                        F.col("bin_lo").alias("lo"), F.col("bin_hi").alias("hi"))
    exploded = latency.select(*keys, "requests", "errors", "lat_n", "lat_sum", "lat_max",
                              F.posexplode_outer(bins).alias("pos", "b"))
    first = F.col("pos").isNull() | (F.col("pos") == 0)
    per_bin = exploded.groupBy(*keys, F.col("b.bin").alias("bin")).agg(
        *[F.sum(F.when(first, F.col(c))).alias(c)
          for c in ("requests", "errors", "lat_n", "lat_sum")],
        F.max("lat_max").alias("lat_max"),
        F.sum("b.n").alias("n"),
        F.min("b.lo").alias("lo"),
        F.max("b.hi").alias("hi"),
    )
    merged = per_bin.groupBy(*keys).agg(
        *[F.sum(c).alias(c) for c in ("requests", "errors", "lat_n", "lat_sum")],
        F.max("lat_max").alias("lat_max"),
        F.sort_array(F.collect_list(
            F.when(F.col("bin").isNotNull(), F.struct("bin", "n", "lo", "hi"))
        )).alias("hist"),
    )
    n = F.col("lat_n")
    return merged.select(
        # Not null, as the count it replaces (the tables' Parquet schemas stay the same).
        *keys, F.coalesce("requests", F.lit(0).cast("long")).alias("requests"), "errors",
        *[sketch.percentile(F.col("hist"), n, q).alias(f"p{round(q * 100)}_ms")
          for q in quantiles],
        F.when(n > 0, F.col("lat_sum") / n).alias("avg_ms"),
        F.col("lat_max").alias("max_ms"),
    )


def latency_by_api(latency: DataFrame) -> DataFrame:
    """Latency percentiles and error rate per api (acks=0 Produce counts, without latency).

    `latency` is the partials' kind `l` rows (per api, api_key and minute)."""
    stats = _merge_latency(latency, ["api", "api_key"], QUANTILES)
    return stats.withColumn("error_rate", F.col("errors") / F.col("requests"))


def latency_over_time(latency: DataFrame, bucket_seconds: int) -> DataFrame:
    """Per api and time bucket: the series behind the report's latency chart.

    Buckets are whole minutes, so the partials' minutes fall wholly in one."""
    start = F.col("minute") * 60
    with_bucket = latency.withColumn(
        "bucket", F.timestamp_seconds(start - start % bucket_seconds))
    stats = _merge_latency(with_bucket, ["bucket", "api"], (0.5, 0.95))
    return stats.drop("avg_ms", "max_ms")


def top_topics(topics: DataFrame) -> DataFrame:
    """Bytes, records and batches produced (Produce requests) and fetched (Fetch
    responses); `topics` is the partials' kind `t` rows (per topic)."""
    # A topic is a JSON key, never null; coalesce tells Spark so (the written schema
    # keeps topic as not null).
    topic = F.coalesce("topic", F.lit("")).alias("topic")
    totals = topics.groupBy(topic).agg(
        *[F.sum(name).alias(name) for name in TOPIC_FIELDS]
    ).withColumn("total_bytes", F.col("produced_bytes") + F.col("fetched_bytes"))
    order = Window.orderBy(F.desc("total_bytes"), F.asc("topic"))
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
        F.array_sort(F.collect_set(F.when(software != "", software))).alias("client_software"),
        F.min("first_seen").alias("first_seen"),
        F.max("last_seen").alias("last_seen"),
    )
    # JoinGroup's member list is the group's size at a rebalance; member ids seen over
    # the whole log also count members that have since left, so they are the fallback.
    return stats.withColumn(
        "member_count", F.coalesce(F.col("max_members"), F.col("distinct_member_ids"))
    )
