"""One aggregation over the parsed lines, at the grain every table is derived from.

Parsing is most of the report's cost, and a cache of the parsed lines cost as much
again to build (1M lines: ~25 s of JVM CPU to parse, ~15 s more to cache, then every
table scanned the cache). So each line is parsed once and folded at once, in a
single hash aggregation, into rows of a few parts, each keyed at its own grain:

- `g` (request groups): a row per connection, api version, identity and group
  fields (the client tables, consumer groups);
- `l` (latency): a row per minute, api, waits-by-design and latency bin: bins 1 %
  wide (`LATENCY_BIN`), so percentiles are read from the histogram (traffic.py)
  within 1 % of the exact value, and requests and errors per minute sum exactly;
- `t` (topics): a row per topic and api (Produce, Fetch) with the record counts;
- `b` (bad lines): a row per file, reason and distinct bad line (its first 200
  characters), with the count;
- `e` (other good lines): a row per event, for the line counts and time span;
- the fleet tables' parts (fleet.py): `t` rows are also keyed by connection and
  replica id (the topic access map); `p` a row per minute, group, client, replica,
  topic and partition of a Fetch line's `positions` (lag: max and latest); `c` a row
  per group, topic and partition of an OffsetCommit line's `committed`; `m` (a
  telemetry line also makes an `e` row) a row per client instance, metric and
  attributes with its latest value.

A request line makes a `g` and an `l` row (and a `t` row per topic it carries, a `p`
or `c` row per partition), so the aggregation sees two to four rows per line (more
for a Fetch of many partitions); its output is small next to the lines
(but for inputs of many distinct bad lines: a row each), cached by the job that reads
the files, and no other job reads the files.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipeline import fleet_parts, semantics
from pipeline.clients import CONN, GROUP_KEYS, IDENTITY
from pipeline.schema import REQUEST_EVENTS, TELEMETRY_EVENT

LATENCY_BIN = 1.01  # each bin spans 1 %: bin b holds [1.01^b, 1.01^(b+1)) ms
MIN_LATENCY_MS = 0.001  # 0 ms and below share the lowest bin
PRODUCE, FETCH = 0, 1
UNKNOWN_API = "unknown"
_COUNT_FIELDS = ("bytes", "records", "batches")


def _api() -> Column:
    # Map and group keys must not be null: an unnamed api by its key, else "unknown".
    return F.coalesce(F.col("api"), F.concat(F.lit("ApiKey"), F.col("api_key").cast("string")),
                      F.lit(UNKNOWN_API))


def _parts(is_request: Column, good: Column) -> Column:
    """Which rows a line makes: ["g", "l"], "t<topic>" per topic, "p<i>" per position
    and "c<i>" per committed offset for a request, ["b"] for a bad line, ["e", "m"] for
    a telemetry line, ["e"] for another good one."""
    carries = F.col("api_key").isin(PRODUCE, FETCH) & F.col("per_topic").isNotNull()
    topics = F.transform(F.map_keys(F.col("per_topic")), lambda t: F.concat(F.lit("t"), t))
    request = F.concat(F.array(F.lit("g"), F.lit("l")),
                       F.when(carries, topics).otherwise(fleet_parts.none()),
                       *fleet_parts.indexed())
    other = F.when(F.col("event") == TELEMETRY_EVENT, F.array(F.lit("e"), F.lit("m"))).otherwise(
        F.array(F.lit("e")))
    return F.when(is_request, request).when(good, other).otherwise(F.array(F.lit("b")))


def fine_rows(parsed: DataFrame) -> DataFrame:
    """`parsed` is read.parse_lines(...): the aggregation described above, one row per
    part and key; columns not of a row's part are null."""
    good = F.col("bad_reason").isNull()
    is_request = good & F.col("event").isin(*REQUEST_EVENTS)
    api = _api()
    failure = semantics.failed(F.col("errors"), api)
    lines = parsed.select(
        "*", api.alias("_api"), failure.alias("_failed"),
        semantics.expected_only(F.col("errors"), failure).alias("_expected"),
        semantics.waits_by_design(F.col("api_key"), F.col("max_wait_ms")).alias("_waits"),
        F.explode(_parts(is_request, good)).alias("part"))
    part = F.col("part")
    kind = F.substring(part, 1, 1)
    topic_t = F.when(kind == "t", F.expr("substring(part, 2)"))
    topic = F.coalesce(topic_t, fleet_parts.topic(kind))

    def on(*parts: str) -> Column:
        return kind.isin(*parts)

    def key(column: str | Column, *parts: str, name: str | None = None) -> Column:
        value = F.col(column) if isinstance(column, str) else column
        alias = name or (column if isinstance(column, str) else None)
        assert alias is not None
        return F.when(on(*parts), value).alias(alias)

    latency = F.col("latency_ms")
    lat_bin = F.floor(F.log(LATENCY_BIN, F.greatest(latency, F.lit(MIN_LATENCY_MS))))
    counts = F.element_at(F.col("per_topic"), topic_t)
    keys = [
        kind.alias("part"),
        key(F.date_trunc("minute", F.col("ts")), "l", "p", name="minute"),
        key("api_key", "g", "l", "t"),
        key("_api", "g", "l", name="api"),
        key("api_version", "g"),
        key("_waits", "l", name="waits"),
        *[key(name, *fleet_parts.KEYED_ALSO.get(name, ()), "g")
          for name in (*CONN, *IDENTITY, *GROUP_KEYS)],
        key(lat_bin, "l", name="lat_bin"),
        topic.alias("topic"),
        key("file", "b"),
        key("bad_reason", "b", name="reason"),
        # The bad line itself (200 characters) is a key, not a min()/max() aggregate: a
        # string aggregate would make Spark sort every row of the aggregation instead
        # of hashing them; bad_lines takes the samples from these few rows.
        key("line", "b", name="sample"),
        key("event", "e"),
        *fleet_parts.keys(kind),
    ]
    keyed = lines.select(
        *keys, "ts", "members", "generation_id", *fleet_parts.values(kind),
        F.when(on("g", "l"), F.col("_failed")).alias("failed"),
        F.when(on("g", "l"), F.col("_expected")).alias("expected"),
        F.when(on("l"), latency).alias("latency"),
        *[counts[field].alias(field) for field in _COUNT_FIELDS],
    )
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
        *fleet_parts.aggregates(),
    )


_KEY_NAMES = {"part", "minute", "api_key", "api", "api_version", "waits", *CONN, *IDENTITY,
              *GROUP_KEYS, "lat_bin", "topic", "file", "reason", "sample", "event",
              *fleet_parts.KEY_NAMES}


def part(fine: DataFrame, name: str) -> DataFrame:
    return fine.where(F.col("part") == name)

