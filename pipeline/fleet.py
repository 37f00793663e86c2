"""The fleet's tables: consumer and replication lag, committed lag, the topic access map
and the clients' own metrics, joined from every sidecar's logs.

Each sidecar sees only its broker's partitions: its Fetch lines' `positions` name
those, so the union of all sidecars' lines holds every partition once (a partition
whose leader moved is in two sidecars' logs, each for its own time: the newest line
wins). All are derived from the fine aggregation's `p`, `c`, `m` and `t` rows
(fine.py), never from the lines themselves.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from pipeline.clients import CONN, IDENTITY, span, sums
from pipeline.fine import PRODUCE, bucketed, part

TOP_INSTANCES = 5  # client_telemetry_top: instances per metric
ACCESS_CLIENTS = 20  # topic_access: client keys listed per row (all are counted)


def _newest(column: str, name: str) -> Column:
    """Of fine rows, the value of the one seen last (each row's value is its own
    newest line's)."""
    return F.max_by(column, "last_seen").alias(name)


def _lag_stats(position: str) -> list[Column]:
    return [
        _newest("latest_lag", "latest_lag"),
        F.max("max_lag").alias("max_lag"),
        _newest("latest_offset", position),
        _newest("latest_hwm", "high_watermark"),
        F.sum("n").alias("fetches"),
        F.max("last_seen").alias("last_seen"),
    ]


def lag_tables(fine: DataFrame, bucket_seconds: int,
               share: Callable[[DataFrame], DataFrame] = lambda df: df
               ) -> tuple[DataFrame, DataFrame]:
    """consumer_lag and replication_lag from one aggregation of fine.fine_rows' `p`
    rows (GROUPING SETS: a consumer's rows by its group, a follower's by its replica
    id), each table selecting its rows.

    consumer_lag, per time bucket, consumer group (else client, `group_known` false),
    topic and partition: the latest and largest lag, position and high watermark
    (README). replication_lag, per time bucket, follower (replica id), topic and
    partition: the follower's lag behind the leader's high watermark, from its Fetch
    lines (never counted as a consumer). `share` is given the aggregation both select
    from (to cache it: each table's query would otherwise compute it again)."""
    rows = bucketed(part(fine, "p"), bucket_seconds)
    follower = F.col("replica_id").isNotNull()
    client = F.coalesce("client_instance_id", "client_id")
    group = F.when(F.col("consumer_group") != "", F.col("consumer_group"))
    rows = rows.drop("group_id").select(
        "*", F.when(~follower, F.coalesce(group, client)).alias("group_id"),
        F.when(~follower, group.isNotNull()).alias("group_known"),
        F.when(~follower, client).alias("client"))
    lag = share(rows.groupingSets(
        [["bucket", "group_id", "group_known", "topic", "partition"],
         ["bucket", "replica_id", "topic", "partition"]],
        "bucket", "group_id", "group_known", "replica_id", "topic", "partition",
    ).agg(*_lag_stats("position"), F.array_sort(F.collect_set("client")).alias("consumers"),
          F.grouping("replica_id").alias("_by_group")))
    # A follower's rows in the groups' set, a consumer's in the followers': none of theirs.
    by_group = F.col("_by_group") == 1
    consumer = lag.where(by_group & F.col("group_known").isNotNull()).select(
        "bucket", "group_id", "group_known", "topic", "partition", "latest_lag", "max_lag",
        "position", "high_watermark", "fetches", "last_seen", "consumers")
    replication = lag.where(~by_group & F.col("replica_id").isNotNull()).select(
        "bucket", "replica_id", "topic", "partition", "latest_lag", "max_lag", "position",
        "high_watermark", "fetches", "last_seen")
    return consumer, replication


def consumer_topic_lag(lag: DataFrame) -> DataFrame:
    """Per time bucket, group and topic: the sum of its partitions' latest lag (of the
    partitions fetched in the bucket) and the largest partition lag. `lag` is
    lag_tables(...)'s consumer_lag."""
    return lag.groupBy("bucket", "group_id", "group_known", "topic").agg(
        F.sum("latest_lag").alias("total_lag"),
        F.max("max_lag").alias("max_partition_lag"),
        F.count(F.lit(1)).alias("partitions"),
        F.max("last_seen").alias("last_seen"))


def committed_lag(fine: DataFrame) -> DataFrame:
    """Per group, topic and partition: the latest committed offset, its lag as the
    committing sidecar saw it, and `fleet_lag` from the newest high watermark any
    sidecar saw, as kafka-consumer-groups shows (README)."""
    commits = part(fine, "c").groupBy("group_id", "topic", "partition").agg(
        _newest("latest_offset", "committed_offset"),
        _newest("latest_hwm", "high_watermark"),
        _newest("latest_lag", "lag"),
        F.max("max_lag").alias("max_lag"),
        F.sum("n").alias("commits"),
        *span())
    newest_hwm = part(fine, "p").groupBy("topic", "partition").agg(
        _newest("latest_hwm", "fleet_high_watermark"))
    joined = commits.join(newest_hwm, ["topic", "partition"], "left")
    fleet_lag = F.greatest(F.col("fleet_high_watermark") - F.col("committed_offset"), F.lit(0))
    return joined.withColumn("fleet_lag", fleet_lag)


def _direction() -> Column:
    return (F.when(F.col("replica_id").isNotNull(), F.lit("replicate"))
            .when(F.col("api_key") == PRODUCE, F.lit("produce")).otherwise(F.lit("fetch")))


def topic_access(fine: DataFrame, usage: DataFrame) -> DataFrame:
    """Per topic, direction (produce, fetch, replicate: a follower's fetch), principal and
    client software: the clients (resolved per connection as in client_inventory) with
    records, bytes and batches. `usage` is clients.connection_usage(...)."""
    identity = usage.select(*CONN, *IDENTITY, "client_key").distinct()
    identity = identity.select(*[F.col(c).alias(f"_id_{c}") for c in CONN],
                               *IDENTITY, "client_key")
    topics = part(fine, "t").select(*CONN, "api_key", "replica_id", "topic", "n", "records",
                                    "bytes", "batches", "first_seen", "last_seen")
    same_conn = [F.col(c).eqNullSafe(F.col(f"_id_{c}")) for c in CONN]
    rows = topics.join(identity, same_conn, "left").withColumn("direction", _direction())
    keys = ["topic", "direction", "principal", "client_software_name", "client_software_version"]
    return rows.groupBy(*keys).agg(
        F.count_distinct("client_key").alias("clients"),
        F.array_sort(F.collect_set("client_id")).alias("client_ids"),
        F.slice(F.array_sort(F.collect_set("client_key")), 1, ACCESS_CLIENTS)
        .alias("client_keys"),
        F.sum("n").alias("requests"),
        *sums("records", "bytes", "batches"),
        *span())


def _telemetry(fine: DataFrame) -> DataFrame:
    return part(fine, "m").withColumn(
        "instance", F.coalesce("client_instance_id", "client_id"))


def client_telemetry(fine: DataFrame) -> DataFrame:
    """Per client software and metric: how many instances pushed it, and across their
    series (an instance's metric with one set of attributes) the latest values'
    minimum, median and maximum."""
    keys = ["client_software_name", "client_software_version", "metric", "metric_type"]
    return _telemetry(fine).groupBy(*keys).agg(
        F.count_distinct("instance").alias("instances"),
        F.count(F.lit(1)).alias("series"),
        F.min("latest_value").alias("min_value"),
        F.median("latest_value").alias("median_value"),
        F.max("latest_value").alias("max_value"),
        F.sum("n").alias("points"),
        F.max("last_seen").alias("last_seen"))


def client_telemetry_top(fine: DataFrame) -> DataFrame:
    """Per metric, the TOP_INSTANCES series with the largest latest value."""
    order = Window.partitionBy("metric").orderBy(
        F.desc_nulls_last("latest_value"), "instance", "attributes", "client_id")
    ranked = _telemetry(fine).withColumn("rank", F.row_number().over(order))
    return ranked.where(F.col("rank") <= TOP_INSTANCES).select(
        "metric", "rank", "instance", "client_id", "client_software_name",
        "client_software_version", "principal", "attributes", "latest_value", "last_seen")
