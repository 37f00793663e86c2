"""One aggregation over the parsed lines, at the grain every table is derived from.

Parsing is most of the report's cost, so each line is parsed once and folded at once,
in a single hash aggregation, into rows of a few parts, each keyed at its own grain
(pipeline/README.md, "Plan"): `g` request groups (the client tables, consumer groups),
`l` latency histograms (bins 1 % wide, `LATENCY_BIN`: percentiles within 1 % of the
exact value, traffic.py), `t` topics, `b` bad lines (a row per file, reason and
distinct line), `e` other good lines, and the fleet tables' parts (fleet.py): `p` a
Fetch line's positions, `c` an OffsetCommit line's committed offsets, `m` a telemetry
point, and `t` keyed by connection and replica id too (README, the fleet tables, "How
it stays one scan"). A request line makes two to four rows (more for a Fetch of many
partitions); the result, small next to the lines, is cached by the one job that reads
the files. Every aggregate is fixed-width (a string one would make it a sort-based
aggregation). Read, explode and partial aggregation are one generated
stage, each method JIT-compiled (under 8,000 bytes): README, "The scan's CPU per line";
tests/test_pipeline_scan_codegen.py.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipeline import semantics
from pipeline.clients import CONN, GROUP_KEYS, IDENTITY
from pipeline.schema import INCOMPLETE_EVENT, REQUEST_EVENTS, TELEMETRY_EVENT

LATENCY_BIN = 1.01  # each bin spans 1 %: bin b holds [1.01^b, 1.01^(b+1)) ms
MIN_LATENCY_MS = 0.001  # 0 ms and below share the lowest bin
PRODUCE, FETCH, SHARE_FETCH = 0, 1, 78
UNKNOWN_API = "unknown"
_COUNT_FIELDS = ("bytes", "records", "batches")
# Keys of the `g` part that other parts are keyed by too.
KEYED_ALSO: dict[str, tuple[str, ...]] = {
    "listener": ("t",), "client_address": ("t",), "conn": ("t",),
    "client_id": ("p", "m"), "client_instance_id": ("p", "m"),
    "client_software_name": ("m",), "client_software_version": ("m",), "principal": ("m",),
    "group_id": ("c",),
}


def _api() -> Column:
    # Map and group keys must not be null: an unnamed api by its key, else "unknown".
    return F.coalesce(F.col("api"), F.concat(F.lit("ApiKey"), F.col("api_key").cast("string")),
                      F.lit(UNKNOWN_API))


# A part as exploded: its kind's number and the index of its topic in per_topic, its
# position or committed offset (read directly, not parsed back from "t<topic>", "p<i>").
KINDS = ("g", "l", "t", "b", "e", "m", "p", "c")


def part_of(kind: str, index: Column | None = None) -> Column:
    return F.struct(F.lit(KINDS.index(kind)).alias("k"),
                    (F.lit(0) if index is None else index).alias("i"))


def none() -> Column:  # a function: a Column needs the running session
    return F.array().cast("array<struct<k:int,i:int>>")


def _parts(is_request: Column, refused: Column, good: Column) -> Column:
    """Which rows a line makes: g and l, a t per topic, a p per position and a c per
    committed offset for a request, g alone for a request the broker refused by
    closing, b for a bad line, e and m for a telemetry line, e for another good one."""
    carries = F.col("api_key").isin(PRODUCE, FETCH, SHARE_FETCH) & F.col("per_topic").isNotNull()
    topics = F.transform(F.map_keys(F.col("per_topic")), lambda _, i: part_of("t", i))

    def each(array: str, kind: str) -> Column:
        parts = F.transform(F.col(array), lambda _, i: part_of(kind, i))
        return F.when(F.col(array).isNotNull(), parts).otherwise(none())

    request = F.concat(F.array(part_of("g"), part_of("l")),
                       F.when(carries, topics).otherwise(none()),
                       each("positions", "p"), each("committed", "c"))
    other = F.when(F.col("event") == TELEMETRY_EVENT,
                   F.array(part_of("e"), part_of("m"))).otherwise(F.array(part_of("e")))
    return (F.when(is_request, request).when(refused, F.array(part_of("g")))
            .when(good, other).otherwise(F.array(part_of("b"))))


def fine_rows(parsed: DataFrame) -> DataFrame:
    """`parsed` is read.parse_lines(...): the aggregation described above, one row per
    part and key; columns not of a row's part are null."""
    return aggregate(keyed_parts(parsed))


def keyed_parts(parsed: DataFrame) -> DataFrame:
    """The rows the aggregation folds: a line's parts, each with its keys and values."""
    good = F.col("bad_reason").isNull()
    is_request = good & F.col("event").isin(*REQUEST_EVENTS)
    refused = good & (F.col("event") == INCOMPLETE_EVENT) & (F.size(F.col("errors")) > 0)
    api = _api()
    failure = semantics.failed(F.col("errors"), api)
    latency = F.col("latency_ms")
    # A line's own values before the explode (beside it, Spark computes them per part).
    lines = parsed.select(
        "*", api.alias("_api"), failure.alias("_failed"),
        semantics.expected_only(F.col("errors"), failure).alias("_expected"),
        semantics.waits_by_design(F.col("api_key"), F.col("max_wait_ms")).alias("_waits"),
        F.date_trunc("minute", F.col("ts")).alias("_minute"),
        F.floor(F.log(LATENCY_BIN, F.greatest(latency, F.lit(MIN_LATENCY_MS)))).alias("_lat_bin"),
    ).select("*", F.explode(_parts(is_request, refused, good)).alias("part"))
    kind, index = F.col("part.k"), F.col("part.i") + 1

    def on(*parts: str) -> Column:
        return kind.isin(*[KINDS.index(p) for p in parts])

    position = F.when(on("p"), F.element_at(F.col("positions"), index))
    committed = F.when(on("c"), F.element_at(F.col("committed"), index))
    topic_t = F.when(on("t"), F.element_at(F.map_keys(F.col("per_topic")), index))
    topic = F.coalesce(topic_t, F.coalesce(position["topic"], committed["topic"]))

    def key(column: str, *parts: str, name: str | None = None) -> Column:
        return F.when(on(*parts), F.col(column)).alias(name or column)

    counts = F.when(on("t"), F.element_at(F.map_values(F.col("per_topic")), index))
    keys = [
        F.element_at(F.array(*map(F.lit, KINDS)), kind + 1).alias("part"),
        key("_minute", "l", "p", name="minute"),
        key("api_key", "g", "l", "t"),
        key("_api", "g", "l", name="api"),
        key("api_version", "g"),
        key("_waits", "l", name="waits"),
        *[key(name, *KEYED_ALSO.get(name, ()), "g")
          for name in (*CONN, *IDENTITY, *GROUP_KEYS)],
        key("_lat_bin", "l", name="lat_bin"),
        topic.alias("topic"),
        key("file", "b"),
        key("bad_reason", "b", name="reason"),
        # The bad line itself (200 characters) is a key, not a min()/max() aggregate: a
        # string aggregate would make Spark sort every row of the aggregation instead
        # of hashing them; bad_lines takes the samples from these few rows.
        key("line", "b", name="sample"),
        key("event", "e"),
        key("consumer_group", "p"),
        key("replica_id", "p", "t"),
        F.coalesce(position["partition"], committed["partition"]).alias("partition"),
        key("metric", "m"),
        key("type", "m", name="metric_type"),
        F.when(on("m"), _attributes()).alias("attributes"),
    ]
    return lines.select(
        *keys, "ts", "members", "generation_id",
        key("ts", "p", "c", "m", name="_fleet_ts"),
        F.coalesce(position["lag"], committed["lag"]).alias("_lag"),
        F.coalesce(position["next_offset"], committed["offset"]).alias("_offset"),
        F.coalesce(position["high_watermark"], committed["high_watermark"]).alias("_hwm"),
        key("value", "m", name="_value"),
        F.when(on("g", "l"), F.col("_failed")).alias("failed"),
        F.when(on("g", "l"), F.col("_expected")).alias("expected"),
        F.when(on("l"), latency).alias("latency"),
        *[counts[field].alias(field) for field in _COUNT_FIELDS],
    )


def aggregate(keyed: DataFrame) -> DataFrame:
    return keyed.groupBy(*[c for c in keyed.columns if c in _KEY_NAMES]).agg(
        F.count(F.lit(1)).alias("n"),
        F.sum("failed").alias("errors"),
        F.sum("expected").alias("expected_errors"),
        F.min("ts").alias("first_seen"),
        F.max("ts").alias("last_seen"),
        F.max("members").alias("members"),
        F.max("generation_id").alias("generation_id"),
        F.count("latency").alias("lat_n"),
        F.sum("latency").alias("lat_sum"),
        F.max("latency").alias("lat_max"),
        *[F.sum(field).alias(field) for field in _COUNT_FIELDS],
        F.max("_lag").alias("max_lag"),  # the fleet parts: the largest lag, the newest values
        F.max_by("_lag", "_fleet_ts").alias("latest_lag"),
        F.max_by("_offset", "_fleet_ts").alias("latest_offset"),
        F.max_by("_hwm", "_fleet_ts").alias("latest_hwm"),
        F.max_by("_value", "_fleet_ts").alias("latest_value"),
    )


_KEY_NAMES = {"part", "minute", "api_key", "api", "api_version", "waits", *CONN, *IDENTITY,
              *GROUP_KEYS, "lat_bin", "topic", "file", "reason", "sample", "event",
              "consumer_group", "replica_id", "partition", "metric", "metric_type", "attributes"}


def _attributes() -> Column:
    """A telemetry point's attributes as one sorted "k=v,k=v" string: a map cannot be
    a grouping key, and the same attributes in another order are the same series."""
    # sort_array: array_sort has no generated code and would split the scan's stage.
    entries = F.sort_array(F.map_entries(F.col("attributes")))
    text = F.concat_ws(",", F.transform(entries, lambda e: F.concat(e["key"], F.lit("="),
                                                                    e["value"])))
    return F.coalesce(text, F.lit(""))


def part(fine: DataFrame, name: str) -> DataFrame:
    return fine.where(F.col("part") == name)


def bucketed(rows: DataFrame, bucket_seconds: int) -> DataFrame:
    """Fine rows with their minute's time bucket (`bucket`, whole minutes)."""
    epoch = F.unix_seconds("minute")
    return rows.withColumn("bucket", F.timestamp_seconds(epoch - epoch % bucket_seconds))

