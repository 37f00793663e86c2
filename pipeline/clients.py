"""Who the clients are and which api versions they use.

A connection's identity is only learnt part way through it: the software name and
version arrive with ApiVersions, the KIP-714 client instance id with
GetTelemetrySubscriptions, the principal after SASL. So requests are first reduced
to one row per (connection, api, version), and each connection's rows then take the
identity seen on any of its lines; otherwise one client would appear as two.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from pipeline.readiness_data import removed_versions

CONN = ["listener", "client_address", "conn"]
IDENTITY = ["client_id", "client_instance_id", "client_software_name",
            "client_software_version", "principal"]
# Of a consumer group's requests, what consumer_groups (pipeline.traffic) needs.
GROUP_KEYS = ["group_id", "member_id", "protocol_type", "protocol_name"]
OUTCOMES = ["requests", "errors", "expected_errors"]


def client_host(address: Column) -> Column:
    """The host of "ip:port" or "[v6]:port" (the port changes with every connection)."""
    host = F.regexp_extract(address, r"^\[?(.*?)\]?:\d+$", 1)
    return F.when(host != "", host).otherwise(address)


def groups_of(fine: DataFrame) -> DataFrame:
    """The request groups: a row per connection, api version, identity and group
    fields (fine.fine_rows' `g` part), which connection_usage and consumer_groups both
    start from. Identity and group fields are keys there, not max() aggregates: a
    connection has only a few distinct values (learnt from ApiVersions, telemetry,
    SASL, JoinGroup), and a string aggregate would force a sort-based aggregation."""
    return fine.where(F.col("part") == "g").select(
        *CONN, "api_key", "api", "api_version", *IDENTITY, *GROUP_KEYS,
        F.col("n").alias("requests"), "errors", "expected_errors", "first_seen",
        "last_seen", "members", "generation_id")


def sums(*names: str) -> list[Column]:
    return [F.sum(name).alias(name) for name in names]


def span() -> list[Column]:
    """When first and last seen, of rows with first_seen and last_seen."""
    return [F.min("first_seen").alias("first_seen"), F.max("last_seen").alias("last_seen")]


def connection_usage(groups: DataFrame) -> DataFrame:
    """Request counts per connection and api version, with the connection's identity.

    `groups` is groups_of(fine).
    """
    usage = groups.groupBy(*CONN, "api_key", "api", "api_version").agg(
        *[F.max(name).alias(name) for name in IDENTITY],
        *sums(*OUTCOMES),
        *span(),
    )
    # A field learnt on any of the connection's apis then applies to all of them.
    per_conn = Window.partitionBy(*CONN)
    resolved = usage.select(
        *CONN,
        *[F.max(name).over(per_conn).alias(name) for name in IDENTITY],
        "api_key", "api", "api_version", *OUTCOMES, "first_seen", "last_seen",
    )
    host = client_host(F.col("client_address"))
    fallback = F.concat_ws(
        "|", *[F.coalesce(c, F.lit("")) for c in (F.col("client_id"), host,
               F.col("client_software_name"), F.col("client_software_version"))]
    )
    return resolved.withColumn("client_host", host).withColumn(
        "client_key", F.coalesce(F.col("client_instance_id"), fallback)
    )


def _identity_aggs() -> list[Column]:
    names = ("client_instance_id", "client_id", "client_software_name",
             "client_software_version")
    return [*[F.max(name).alias(name) for name in names],
            F.array_sort(F.collect_set("client_host")).alias("client_hosts")]


def client_inventory(usage: DataFrame) -> DataFrame:
    by_api = usage.groupBy("client_key", "api").agg(F.sum("requests").alias("n"))
    api_map = by_api.groupBy("client_key").agg(
        F.map_from_entries(F.array_sort(F.collect_list(F.struct("api", "n"))))
        .alias("requests_by_api"))
    clients = usage.groupBy("client_key").agg(
        *_identity_aggs(),
        F.array_sort(F.collect_set("principal")).alias("principals"),
        *span(),
        *sums(*OUTCOMES),
        F.count_distinct(F.struct(*CONN)).alias("connections"),
    )
    return clients.join(api_map, "client_key")


def api_usage(usage: DataFrame) -> DataFrame:
    keys = ["api", "api_key", "api_version", "client_software_name", "client_software_version"]
    return usage.groupBy(*keys).agg(
        *sums(*OUTCOMES),
        F.count_distinct("client_key").alias("clients"),
        *span(),
    )


def _kafka4_min_version() -> Column:
    """The lowest version Kafka 4.0 accepts of a removed (api_key, api_version), else
    null: a literal map looked up per row (no join, no Python on the executors)."""
    rows = sorted({(key, version, minimum) for key, _, version, minimum in removed_versions()})
    removed = F.create_map(*[c for k, v, m in rows for c in (F.lit(f"{k}:{v}"), F.lit(m))])
    return F.try_element_at(removed, F.concat_ws(":", "api_key", "api_version"))


def kafka4_readiness(usage: DataFrame) -> DataFrame:
    """One row per client and (api, version) that a Kafka 4.0 broker no longer accepts."""
    hits = usage.withColumn("kafka4_min_version", _kafka4_min_version().cast("int")).where(
        F.col("kafka4_min_version").isNotNull())
    return hits.groupBy("client_key", "api", "api_key", "api_version").agg(
        *_identity_aggs(),
        F.max("kafka4_min_version").alias("kafka4_min_version"),
        F.sum("requests").alias("requests"),
        *span(),
    )
