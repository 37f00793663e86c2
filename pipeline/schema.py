"""The explicit schema of the request-log lines' fields the pipeline reads (never inferred).

Inference would read the whole input twice and would make a column's type depend on
which lines happen to be present; an explicit schema also lets from_json flag a line
whose field has the wrong type as corrupt instead of silently widening the column.
Parsing is most of the report's cost and grows with the fields converted, so the schema
holds only the fields the pipeline reads (a type error in another field is not noticed;
the log's fields: docs/request-log.md).
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

CORRUPT = "_corrupt_record"

REQUEST_EVENTS = ("request", "request_no_response")
# A request its connection closed on. One with `errors` the broker refused by closing
# (a version it does not support, KIP-896): counted as a request with that error (in the
# client tables and Kafka 4 readiness), without a latency; the others are events.
INCOMPLETE_EVENT = "request_incomplete"
CONNECTION_EVENTS = ("connection_open", "connection_close")
# A data point of a client's own metrics (KIP-714), from the telemetry log (#20).
TELEMETRY_EVENT = "client_metric"
# A line of one of these events whose fields have the wrong types breaks the
# contract and counts as bad; a line of any other event is ignored.
KNOWN_EVENTS = REQUEST_EVENTS + CONNECTION_EVENTS + (TELEMETRY_EVENT, INCOMPLETE_EVENT)


def _struct(spec: dict[str, DataType]) -> StructType:
    return StructType([StructField(name, kind) for name, kind in spec.items()])


_COUNTS = _struct({"batches": LongType(), "records": LongType(), "bytes": LongType()})

# A Fetch line's partitions answered without error (#21): the consumer's position
# after the response against the partition's offsets.
POSITION = _struct({
    "topic": StringType(),
    "partition": IntegerType(),
    "fetch_offset": LongType(),
    "next_offset": LongType(),
    "high_watermark": LongType(),
    "last_stable_offset": LongType(),
    "log_start_offset": LongType(),
    "lag": LongType(),
})

# An OffsetCommit line's partitions (#21); high_watermark and lag are null when the
# proxy has not seen the partition's high watermark.
COMMITTED = _struct({
    "topic": StringType(),
    "partition": IntegerType(),
    "offset": LongType(),
    "high_watermark": LongType(),
    "lag": LongType(),
})

LINE_SCHEMA = _struct({
    # Read as text and converted by read.parse_lines: Spark's JSON reader would take a
    # number as epoch seconds and "2025" as a date (pipeline/README.md, "Reading").
    "ts": StringType(),
    "event": StringType(),
    "conn": StringType(),
    "listener": StringType(),
    "client_address": StringType(),
    "api_key": IntegerType(),
    "api": StringType(),
    "api_version": IntegerType(),
    "client_id": StringType(),
    "client_instance_id": StringType(),
    "client_software_name": StringType(),
    "client_software_version": StringType(),
    "principal": StringType(),
    "latency_ms": DoubleType(),
    "errors": ArrayType(StringType()),
    "group_id": StringType(),
    "member_id": StringType(),
    "generation_id": IntegerType(),
    "protocol_type": StringType(),
    "protocol_name": StringType(),
    "members": IntegerType(),
    # how long the request may wait by design: Fetch/ShareFetch, JoinGroup
    "max_wait_ms": IntegerType(),
    # of the record stats, only the per-topic counts
    "record_stats": _struct({"per_topic": MapType(StringType(), _COUNTS)}),
    # Fetch lines (#21): replica_id only on a follower's fetch
    "replica_id": IntegerType(),
    "consumer_group": StringType(),
    "positions": ArrayType(POSITION),
    # OffsetCommit lines (#21), the group in group_id
    "committed": ArrayType(COMMITTED),
    # client_metric lines of the telemetry log (#20)
    "metric": StringType(),
    "type": StringType(),
    "value": DoubleType(),
    "attributes": MapType(StringType(), StringType()),
    CORRUPT: StringType(),
})

JSON_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
