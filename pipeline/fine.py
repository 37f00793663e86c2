"""One aggregation over the parsed lines, at the grains every table is derived from.

Reading and parsing is most of the report's cost, so each line is read once and folded
at once, in a single hash aggregation, into rows of named parts (PARTS), each keyed at
its own grain: a line makes one row of each part it belongs to (a request line a `g`
and an `l` row, a `t` per topic, a `p` per position and a `c` per committed offset).
Every part's rows have the same columns: its keys are set, the other parts' keys are
null, and of the aggregates those listed for it mean something (pipeline/README.md,
"How the report works", lists them). The result, small next to the lines, is cached by
the one job that reads the files; the tables are derived from it (tables.py). Every
aggregate is fixed-width: a string one would make Spark sort every row instead of
hashing them.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from codec.generated.api_key import ApiKey
from pipeline import semantics
from pipeline.clients import CONN, GROUP_KEYS, IDENTITY
from pipeline.evolve import RETYPED
from pipeline.read import retype_candidates
from pipeline.schema import INCOMPLETE_EVENT, LINE_SCHEMA, REQUEST_EVENTS, TELEMETRY_EVENT

# Plain ints for Spark literals: pyspark 3.5 (still allowed) hands them to py4j as they are.
PRODUCE, FETCH, SHARE_FETCH = int(ApiKey.PRODUCE), int(ApiKey.FETCH), int(ApiKey.SHARE_FETCH)
_COUNT_FIELDS = ("bytes", "records", "batches")


@dataclass(frozen=True)
class Part:
    """A kind of row of the fine aggregation: what one row stands for, its key columns
    and the aggregates that mean something for it (`n`, `first_seen` and `last_seen`
    do for every part)."""

    what: str
    keys: tuple[str, ...]
    values: tuple[str, ...] = ()


PARTS: dict[str, Part] = {
    "g": Part("requests of a connection, api version, identity, group fields and file "
              "(a request the broker refused by closing too)",
              ("api_key", "api", "api_version", *CONN, *IDENTITY, *GROUP_KEYS, "file"),
              ("errors", "expected_errors", "members", "generation_id")),
    "l": Part("requests of a minute, api and latency bin (the latency histograms)",
              ("minute", "api_key", "api", "waits", "lat_bin"),
              ("errors", "expected_errors", "lat_n", "lat_sum", "lat_max")),
    "t": Part("a topic's record counts in Produce requests or Fetch and ShareFetch "
              "responses, per connection and follower",
              ("api_key", *CONN, "topic", "replica_id"), _COUNT_FIELDS),
    "p": Part("a Fetch's position in a partition, per minute, consumer (group, client) "
              "or follower",
              ("minute", "client_id", "client_instance_id", "consumer_group", "replica_id",
               "topic", "partition"),
              ("max_lag", "latest_lag", "latest_offset", "latest_hwm")),
    "c": Part("an OffsetCommit's committed offset in a partition, per group",
              ("group_id", "topic", "partition"),
              ("max_lag", "latest_lag", "latest_offset", "latest_hwm")),
    "m": Part("a client metric series (instance, metric, attributes)",
              ("client_id", "client_instance_id", "client_software_name",
               "client_software_version", "principal", "metric", "metric_type", "attributes"),
              ("latest_value",)),
    "e": Part("other good lines, per event and file", ("event", "file")),
    "b": Part("bad lines, per file, reason and distinct line (its first 200 characters)",
              ("file", "reason", "sample")),
    "r": Part("good lines with fields of another type than the schema's (retyped: read "
              "as lines, those fields null), per file and the fields' names (`reason`)",
              ("file", "reason")),
}
KINDS = tuple(PARTS)
# Every key column, in the fine aggregation's order.
KEYS = ("part", "minute", "api_key", "api", "api_version", "waits", *CONN, *IDENTITY,
        *GROUP_KEYS, "lat_bin", "topic", "file", "reason", "sample", "event", "consumer_group",
        "replica_id", "partition", "metric", "metric_type", "attributes")
assert {k for p in PARTS.values() for k in p.keys} == set(KEYS) - {"part"}


def part_of(kind: str, index: Column | None = None) -> Column:
    """A part as exploded: its kind's number and the index of its topic in per_topic,
    its position or committed offset (read directly, not parsed back from a string)."""
    return F.struct(F.lit(KINDS.index(kind)).alias("k"),
                    (F.lit(0) if index is None else index).alias("i"))


def none() -> Column:  # a function: a Column needs the running session
    return F.array().cast("array<struct<k:int,i:int>>")


def _parts(is_request: Column, refused: Column, good: Column, retyped: Column | None
           ) -> Column:
    """Which rows a line makes: g and l, a t per topic, a p per position and a c per
    committed offset for a request, g alone for a request the broker refused by
    closing, b for a bad line, e and m for a telemetry line, e for another good one;
    and an r beside them for a good line with retyped fields (`retyped`: the line
    has some, when the lines carry the column)."""
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
    refused_parts = F.array(part_of("g"))
    if retyped is not None:  # only a good line has retyped fields (read.parse_lines)
        also = F.when(retyped, F.array(part_of("r"))).otherwise(none())
        request = F.concat(request, also)
        refused_parts = F.concat(refused_parts, also)
        other = F.concat(other, also)
    return (F.when(is_request, request).when(refused, refused_parts)
            .when(good, other).otherwise(F.array(part_of("b"))))


def retyped_names(parsed: DataFrame) -> Column | None:
    """A line's fields of another type than the schema's, the report's (LINE_SCHEMA)
    only, by name in its order, joined by ", " ("" for none); None when the lines have
    no `retyped` column. An ingested table's `retyped` may also name new fields it
    stored (evolve.py), which the report over the raw logs never reads: not counted,
    so that both give the same counts."""
    if RETYPED not in parsed.columns:
        return None
    names = [F.when(F.col(RETYPED)[f.name].isNotNull(), F.lit(f.name))
             for f in retype_candidates(LINE_SCHEMA)]
    return F.when(F.col(RETYPED).isNotNull(), F.concat_ws(", ", *names))


def fine_rows(parsed: DataFrame) -> DataFrame:
    """`parsed` is read.parse_lines(...) (or an ingested table's rows): the aggregation
    described above, one row per part and key; columns not of a row's part are null."""
    return aggregate(keyed_parts(parsed))


def keyed_parts(parsed: DataFrame, carry: tuple[str, ...] = ()) -> DataFrame:
    """The rows the aggregation folds: a line's parts, each with its keys and values
    (and the columns `carry` names, as they are: the rollup's hour, rollup.py)."""
    good = F.col("bad_reason").isNull()
    is_request = good & F.col("event").isin(*REQUEST_EVENTS)
    refused = good & (F.col("event") == INCOMPLETE_EVENT) & (F.size(F.col("errors")) > 0)
    api = semantics.api_name(F.col("api"), F.col("api_key"))
    failure = semantics.failed(F.col("errors"), api)
    latency = F.col("latency_ms")
    names = retyped_names(parsed)
    # A line's own values before the explode (beside it, Spark computes them per part).
    lines = parsed.select(
        "*", api.alias("_api"), failure.alias("_failed"),
        semantics.expected_only(F.col("errors"), failure).alias("_expected"),
        semantics.waits_by_design(F.col("api_key"), F.col("max_wait_ms"),
                                  F.col("api")).alias("_waits"),
        F.date_trunc("minute", F.col("ts")).alias("_minute"),
        semantics.latency_bin(latency).alias("_lat_bin"),
        (F.lit(None).cast("string") if names is None else names).alias("_retyped"),
    )
    retyped = None if names is None else F.col("_retyped") != ""
    lines = lines.select("*", F.explode(_parts(is_request, refused, good, retyped))
                         .alias("part"))
    kind, index = F.col("part.k"), F.col("part.i") + 1

    def on(*parts: str) -> Column:
        return kind.isin(*[KINDS.index(p) for p in parts])

    position = F.when(on("p"), F.element_at(F.col("positions"), index))
    committed = F.when(on("c"), F.element_at(F.col("committed"), index))
    topic_t = F.when(on("t"), F.element_at(F.map_keys(F.col("per_topic")), index))
    # Where a key's value comes from (a line's column, else as named here).
    source: dict[str, Column] = {
        "part": F.element_at(F.array(*map(F.lit, KINDS)), kind + 1),
        "minute": F.col("_minute"), "api": F.col("_api"), "waits": F.col("_waits"),
        "lat_bin": F.col("_lat_bin"),
        # b: why the line is bad; r: its retyped fields' names
        "reason": F.coalesce(F.col("bad_reason"), F.col("_retyped")),
        # The bad line itself (200 characters) is a key, not a min()/max() aggregate
        # (module docstring); bad_lines takes two samples from these few rows.
        "sample": F.col("line"), "metric_type": F.col("type"),
        "topic": F.coalesce(topic_t, F.coalesce(position["topic"], committed["topic"])),
        "partition": F.coalesce(position["partition"], committed["partition"]),
        "attributes": _attributes(),
    }

    def key(name: str) -> Column:
        if name == "part":
            return source["part"].alias(name)
        owners = [kind for kind, p in PARTS.items() if name in p.keys]
        return F.when(on(*owners), source.get(name, F.col(name))).alias(name)

    counts = F.when(on("t"), F.element_at(F.map_values(F.col("per_topic")), index))
    return lines.select(
        *map(key, KEYS), *carry, "ts", "members", "generation_id",
        F.when(on("p", "c", "m"), F.col("ts")).alias("_fleet_ts"),
        F.coalesce(position["lag"], committed["lag"]).alias("_lag"),
        F.coalesce(position["next_offset"], committed["offset"]).alias("_offset"),
        F.coalesce(position["high_watermark"], committed["high_watermark"]).alias("_hwm"),
        F.when(on("m"), F.col("value")).alias("_value"),
        F.when(on("g", "l"), F.col("_failed")).alias("failed"),
        F.when(on("g", "l"), F.col("_expected")).alias("expected"),
        F.when(on("l"), latency).alias("latency"),
        *[counts[field].alias(field) for field in _COUNT_FIELDS],
    )


def aggregate(keyed: DataFrame, by: tuple[str, ...] = ()) -> DataFrame:
    """The aggregates of every part (PARTS says which mean something for which), per
    key (and per the columns `by` names: the rollup's hour). Each is mergeable: rows
    of the same key from disjoint sets of lines make the row of their union (merge)."""
    return keyed.groupBy(*KEYS, *by).agg(
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
        F.max("_lag").alias("max_lag"),  # the largest lag; the newest values:
        F.max_by("_lag", "_fleet_ts").alias("latest_lag"),
        F.max_by("_offset", "_fleet_ts").alias("latest_offset"),
        F.max_by("_hwm", "_fleet_ts").alias("latest_hwm"),
        F.max_by("_value", "_fleet_ts").alias("latest_value"),
    )


def merge(fine: DataFrame) -> DataFrame:
    """Fine rows of the same key (from disjoint sets of lines: the rollup's hours and
    the lines of the others) as the one row the aggregation makes of all those lines:
    counts and sums added, the extremes of extremes, and the newest values of the row
    seen last (`last_seen` is the newest `_fleet_ts` of a p, c or m row; the latest_*
    of other rows are null)."""
    newest = ("latest_lag", "latest_offset", "latest_hwm", "latest_value")
    return fine.groupBy(*KEYS).agg(
        F.sum("n").alias("n"),
        F.sum("errors").alias("errors"),
        F.sum("expected_errors").alias("expected_errors"),
        F.min("first_seen").alias("first_seen"),
        F.max("last_seen").alias("last_seen"),
        F.max("members").alias("members"),
        F.max("generation_id").alias("generation_id"),
        F.sum("lat_n").alias("lat_n"),
        F.sum("lat_sum").alias("lat_sum"),
        F.max("lat_max").alias("lat_max"),
        *[F.sum(field).alias(field) for field in _COUNT_FIELDS],
        F.max("max_lag").alias("max_lag"),
        *[F.max_by(name, "last_seen").alias(name) for name in newest],
    )


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
