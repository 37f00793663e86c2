"""What the traffic looks like: latency, errors, topics and groups (consumer, share...).

Percentiles are service latency, read from histograms of 1 %-wide bins (`quantile`:
the estimator the report and the watch share); requests that wait by design and errors
that are protocol steps are counted apart (semantics.py; pipeline/README.md, "What the
numbers mean for Kafka").
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from pipeline.clients import OUTCOMES, span, sums
from pipeline.fine import FETCH, PRODUCE, SHARE_FETCH, bucketed

QUANTILES = (0.5, 0.95, 0.99)
WAITING_QUANTILES = (0.5, 0.99)


def quantile(bins: Column, total: Column, q: float) -> Column:
    """The latency at quantile q of a histogram (an array of (lat_bin, c, v) in bin
    order; `total` the sum of its counts c): the largest latency `v` in the first bin
    whose cumulative count reaches rank r = ceil(q * total); null for no bins.

    The bound, against the nearest-rank quantile x (the r-th smallest latency): the
    result is a latency that occurred, in x's bin, so x <= result < 1.01 * x (for x
    above semantics.MIN_LATENCY_MS, below which all share one bin). It is not Spark's
    `percentile`, which interpolates between the latencies either side of position
    q * (n - 1) (counted from 0): where latencies are sparse, neighbours differ by more
    than 1 %, and so can the two results.
    """
    # The rank is a column of the row, not an expression over `bins` inside the lambda:
    # there Spark evaluates it again for every bin, a histogram's square per quantile
    # (bench/PIPELINE.md, "Where the time after the scan goes").
    rank = F.greatest(F.lit(1), F.ceil(total * F.lit(q)))
    start = F.struct(F.lit(0).cast("bigint").alias("cum"), F.lit(None).cast("double").alias("v"))
    return F.aggregate(bins, start, lambda acc, b: F.when(acc["cum"] >= rank, acc).otherwise(
        F.struct((acc["cum"] + b["c"]).alias("cum"), b["v"].alias("v"))), lambda acc: acc["v"])


def latency_stats(latency: DataFrame, keys: list[str], quantiles: tuple[float, ...],
                  waiting: tuple[float, ...], binned: bool = False) -> DataFrame:
    """Per `keys`, from histogram rows (fine.fine_rows' `l` part, or the watch's bins:
    `waits`, `lat_bin`, `n`, `errors`, `expected_errors`, `lat_n`, `lat_sum`,
    `lat_max`): requests and failures, the service latency's mean, maximum and
    percentiles and, for requests that wait by design, their count, maximum and
    percentiles. Two aggregations, no join or window: per bin, then per key with the
    histograms as arrays (one entry per bin) read by `quantile`. `binned`: `latency`
    has a row per key and bin already (the first aggregation is done)."""
    bins = latency if binned else latency.groupBy(*keys, "waits", "lat_bin").agg(
        *sums("n", "errors", "expected_errors", "lat_n", "lat_sum"),
        F.max("lat_max").alias("lat_max"))
    service, waits = ~F.col("waits"), F.col("waits")

    def binned_on(side: Column) -> Column:
        return side & F.col("lat_bin").isNotNull()

    def histogram(side: Column) -> Column:
        entry = F.struct("lat_bin", F.col("lat_n").alias("c"), F.col("lat_max").alias("v"))
        return F.array_sort(F.collect_list(F.when(binned_on(side), entry)))

    def total(side: Column) -> Column:  # the histogram's counts, summed
        return F.sum(F.when(binned_on(side), F.col("lat_n")))

    stats = bins.groupBy(*keys).agg(
        F.sum("n").alias("requests"), *sums("errors", "expected_errors"),
        (F.sum(F.when(service, F.col("lat_sum"))) / F.sum(F.when(service, F.col("lat_n"))))
        .alias("avg_ms"),
        F.max(F.when(service, F.col("lat_max"))).alias("max_ms"),
        F.sum(F.when(waits, F.col("n")).otherwise(0)).alias("waiting_requests"),
        F.max(F.when(waits, F.col("lat_max"))).alias("waiting_max_ms"),
        histogram(service).alias("_service"), histogram(waits).alias("_waiting"),
        total(service).alias("_service_n"), total(waits).alias("_waiting_n"))
    service_bins, waiting_bins = F.col("_service"), F.col("_waiting")
    return stats.select(
        "*", *[quantile(service_bins, F.col("_service_n"), q).alias(f"p{round(q * 100)}_ms")
               for q in quantiles],
        *[quantile(waiting_bins, F.col("_waiting_n"), q).alias(f"waiting_p{round(q * 100)}_ms")
          for q in waiting])


def latency_tables(latency: DataFrame, bucket_seconds: int,
                   share: Callable[[DataFrame], DataFrame] = lambda df: df
                   ) -> tuple[DataFrame, DataFrame]:
    """latency_by_api and latency_over_time from one aggregation of `latency`
    (fine.fine_rows' `l` part): the histograms per api and per time bucket and api
    (GROUPING SETS), read by `latency_stats`; both tables select their rows from it.

    latency_by_api, per api: requests (acks=0 Produce counted, without latency),
    failures, service latency percentiles, and the latency of requests that wait by
    design apart. latency_over_time, per api and time bucket (whole minutes): the series
    behind the latency chart. `share` is given the aggregation both select from (to
    cache it: each table's query would otherwise compute it again)."""
    rows = bucketed(latency, bucket_seconds)
    bins = rows.groupingSets(
        [["api", "api_key", "waits", "lat_bin"], ["bucket", "api", "waits", "lat_bin"]],
        "bucket", "api", "api_key", "waits", "lat_bin",
    ).agg(*sums("n", "errors", "expected_errors", "lat_n", "lat_sum"),
          F.max("lat_max").alias("lat_max"), (F.grouping("bucket") == 0).alias("over_time"))
    stats = share(latency_stats(bins,
                                ["over_time", "bucket", "api", "api_key"], QUANTILES,
                                (0.5, 0.95, 0.99), binned=True))
    by_api = stats.where(~F.col("over_time")).select(
        "api", "api_key", *OUTCOMES,
        *[f"p{round(q * 100)}_ms" for q in QUANTILES], "avg_ms", "max_ms",
        "waiting_requests", *[f"waiting_p{round(q * 100)}_ms" for q in WAITING_QUANTILES],
        "waiting_max_ms", (F.col("errors") / F.col("requests")).alias("error_rate"))
    by_time = stats.where(F.col("over_time")).select(
        "bucket", "api", *OUTCOMES, "p50_ms", "p95_ms", "p99_ms", "waiting_p95_ms")
    return by_api, by_time


def top_topics(topics: DataFrame) -> DataFrame:
    """Bytes, records and batches produced (Produce requests) and fetched (Fetch
    responses) per topic; `topics` is fine.fine_rows' `t` part."""
    directed = [
        F.sum(F.when(F.col("api_key") == key, F.col(field)).otherwise(0)).alias(f"{verb}_{field}")
        for key, verb in ((PRODUCE, "produced"), (FETCH, "fetched"), (SHARE_FETCH, "share_fetched"))
        for field in ("bytes", "records", "batches")
    ]
    totals = topics.groupBy("topic").agg(*directed).withColumn(
        "total_bytes", F.col("produced_bytes") + F.col("fetched_bytes") + F.col("share_fetched_bytes")
    )
    # One partition for the rank: a row per topic, few next to the lines.
    order = Window.orderBy(F.desc_nulls_last("total_bytes"), F.asc("topic"))
    return totals.withColumn("rank", F.row_number().over(order))


def _latest(column: str) -> Column:
    """The value on the newest line that has one (null orderings are skipped)."""
    newest = F.when(F.col(column).isNotNull(), F.col("last_seen"))
    return F.max_by(column, newest).alias(column)


# The kind of group an api's line shows (the others, OffsetCommit ..., any kind).
GROUP_TYPES = {
    "JoinGroup": "classic", "SyncGroup": "classic", "Heartbeat": "classic", "LeaveGroup": "classic",
    "ConsumerGroupHeartbeat": "consumer", "StreamsGroupHeartbeat": "streams",
    "ShareGroupHeartbeat": "share", "ShareFetch": "share", "ShareAcknowledge": "share",
}  # fmt: skip


def consumer_groups(groups: DataFrame) -> DataFrame:
    """Per group, classic, consumer (KIP-848), streams or share (KIP-932): `group_type`
    from the apis its lines name; `groups` is clients.groups_of(fine), whose rows keep
    each line's own group fields and software (not the connection's resolved identity)."""
    grouped = groups.where(F.col("group_id").isNotNull() & (F.col("group_id") != ""))
    member = F.when(F.col("member_id") != "", F.col("member_id"))
    software = F.concat_ws("/", "client_software_name", "client_software_version")
    kinds = F.create_map(*[F.lit(x) for pair in sorted(GROUP_TYPES.items()) for x in pair])
    types = F.array_sort(F.collect_set(F.element_at(kinds, F.col("api"))))
    stats = grouped.groupBy("group_id").agg(
        F.when(F.size(types) > 0, F.array_join(types, ",")).alias("group_type"),
        _latest("protocol_type"),
        _latest("protocol_name").alias("assignor"),
        F.count_distinct(member).alias("distinct_member_ids"),
        F.max("members").alias("max_members"),
        F.max("generation_id").alias("generation_id"),
        *sums(*OUTCOMES),
        F.array_sort(F.collect_set(F.when(software != "", software))).alias("client_software"),
        *span(),
    )
    # JoinGroup's member list is the group's size at a rebalance; member ids seen over
    # the whole log also count members that have since left, so they are the fallback.
    return stats.withColumn(
        "member_count", F.coalesce(F.col("max_members"), F.col("distinct_member_ids"))
    )

