"""The explicit schema of one request-log line (never inferred).

Inference would read the whole input twice and would make a column's type depend on
which lines happen to be present; an explicit schema also lets from_json flag a line
whose field has the wrong type as corrupt instead of silently widening the column.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

CORRUPT = "_corrupt_record"

REQUEST_EVENTS = ("request", "request_no_response")
CONNECTION_EVENTS = ("connection_open", "connection_close")
# A data point of a client's own metrics (KIP-714), from the telemetry log (#20).
TELEMETRY_EVENT = "client_metric"
# A line of one of these events whose fields have the wrong types breaks the
# contract and counts as bad; a line of any other event is ignored.
KNOWN_EVENTS = REQUEST_EVENTS + CONNECTION_EVENTS + (TELEMETRY_EVENT,)


def _fields(spec: dict[str, DataType]) -> list[StructField]:
    return [StructField(name, kind) for name, kind in spec.items()]


_COUNTS = StructType(_fields({"batches": LongType(), "records": LongType(), "bytes": LongType()}))

RECORD_STATS = StructType(
    _fields(
        {
            "batches": LongType(),
            "records": LongType(),
            "bytes": LongType(),
            "compression": ArrayType(StringType()),
            "producer_id": LongType(),
            "producer_epoch": IntegerType(),
            "transactional": BooleanType(),
            "control_batches": LongType(),
            "per_topic": MapType(StringType(), _COUNTS),
        }
    )
)

# A Fetch line's partitions answered without error (#21): the consumer's position
# after the response against the partition's offsets.
POSITION = StructType(
    _fields(
        {
            "topic": StringType(),
            "partition": IntegerType(),
            "fetch_offset": LongType(),
            "next_offset": LongType(),
            "high_watermark": LongType(),
            "last_stable_offset": LongType(),
            "log_start_offset": LongType(),
            "lag": LongType(),
        }
    )
)

# An OffsetCommit line's partitions (#21); high_watermark and lag are null when the
# proxy has not seen the partition's high watermark.
COMMITTED = StructType(
    _fields(
        {
            "topic": StringType(),
            "partition": IntegerType(),
            "offset": LongType(),
            "high_watermark": LongType(),
            "lag": LongType(),
        }
    )
)

LINE_SCHEMA = StructType(
    _fields(
        {
            "ts": TimestampType(),
            "event": StringType(),
            "conn": StringType(),
            "listener": StringType(),
            "client_address": StringType(),
            "api_key": IntegerType(),
            "api": StringType(),
            "api_version": IntegerType(),
            "correlation_id": LongType(),
            "client_id": StringType(),
            "client_instance_id": StringType(),
            "client_software_name": StringType(),
            "client_software_version": StringType(),
            "principal": StringType(),
            "latency_ms": DoubleType(),
            "request_bytes": LongType(),
            "response_bytes": LongType(),
            "errors": ArrayType(StringType()),
            "topics": ArrayType(StringType()),
            "group_id": StringType(),
            "member_id": StringType(),
            "generation_id": IntegerType(),
            "protocol_type": StringType(),
            "protocol_name": StringType(),
            "members": IntegerType(),
            # how long the request may wait by design: Fetch/ShareFetch, JoinGroup
            "max_wait_ms": IntegerType(),
            "session_timeout_ms": IntegerType(),
            "rebalance_timeout_ms": IntegerType(),
            "record_stats": RECORD_STATS,
            # Fetch lines (#21): replica_id only on a follower's fetch
            "isolation_level": IntegerType(),
            "replica_id": IntegerType(),
            "consumer_group": StringType(),
            "positions": ArrayType(POSITION),
            "positions_dropped": LongType(),
            # OffsetCommit lines (#21), the group in group_id
            "committed": ArrayType(COMMITTED),
            "committed_dropped": LongType(),
            # client_metric lines of the telemetry log (#20)
            "metric": StringType(),
            "type": StringType(),
            "value": DoubleType(),
            "count": LongType(),
            "attributes": MapType(StringType(), StringType()),
            # connection_close only
            "duration_s": DoubleType(),
            "bytes_in": LongType(),
            "bytes_out": LongType(),
            "requests": MapType(StringType(), LongType()),
            "error_counts": MapType(StringType(), LongType()),
            CORRUPT: StringType(),
        }
    )
)

JSON_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}

# The fields the report uses. Parsing is most of the report's cost and grows with the
# fields converted, so the report parses only these (a type error in another field
# is not noticed); LINE_SCHEMA stays the whole contract.
REPORT_FIELDS = (
    "ts", "event", "conn", "listener", "client_address", "api_key", "api", "api_version",
    "client_id", "client_instance_id", "client_software_name", "client_software_version",
    "principal", "latency_ms", "errors", "group_id", "member_id", "generation_id",
    "protocol_type", "protocol_name", "members", "max_wait_ms", "record_stats",
    # the fleet tables (fleet.py)
    "replica_id", "consumer_group", "positions", "committed",
    "metric", "type", "value", "attributes", CORRUPT,
)


def report_schema() -> StructType:
    fields = []
    for f in LINE_SCHEMA.fields:
        if f.name == "record_stats":  # of the record stats, only the per-topic counts
            f = StructField(f.name, StructType([RECORD_STATS["per_topic"]]))
        if f.name in REPORT_FIELDS:
            fields.append(f)
    return StructType(fields)
