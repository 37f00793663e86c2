"""All of the report's tables from the merged partials, by name, in writing order.

The tables are small (rows per client, api version, topic, group, minute), so they
are built in the driver in plain Python (clients.py, traffic.py) and written with
pyarrow; their Parquet schemas are those Spark wrote before (column order, types,
which columns are never null), so readers see the same tables.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipeline import clients, traffic
from pipeline.agg import Row, sort_rows, timestamp
from pipeline.merge import Merged

# Each table is written (and shown) in this order; the sort is for people reading it.
TABLE_ORDER: dict[str, list[str]] = {
    "client_inventory": ["requests:desc", "client_key"],
    "api_usage": ["api_key", "api_version", "client_software_name", "client_software_version"],
    "kafka4_readiness": ["requests:desc", "client_key", "api_key", "api_version"],
    "latency_by_api": ["requests:desc", "api"],
    "latency_over_time": ["bucket", "api"],
    "top_topics": ["rank"],
    "consumer_groups": ["group_id"],
    "bad_lines": ["bad_lines:desc", "file", "reason"],
}

_TS = pa.timestamp("us", tz="UTC")
_NAMES = pa.list_(pa.field("element", pa.string(), nullable=False))
_SAMPLES = pa.list_(pa.string())
_I32, _I64, _F64, _STR = pa.int32(), pa.int64(), pa.float64(), pa.string()
_REQUIRED = "!"  # a column Spark wrote as never null


def _schema(*columns: str) -> pa.Schema:
    """A schema from "name" ("name!" when never null), the type by the name."""
    fields = []
    for spec in columns:
        name = spec.rstrip(_REQUIRED)
        fields.append(pa.field(name, _TYPES[name], nullable=not spec.endswith(_REQUIRED)))
    return pa.schema(fields)


_TYPES: dict[str, pa.DataType] = {
    **dict.fromkeys(["client_key", "client_instance_id", "client_id", "client_software_name",
                     "client_software_version", "api", "group_id", "protocol_type",
                     "assignor", "topic", "file", "reason"], _STR),
    **dict.fromkeys(["api_key", "api_version", "kafka4_min_version", "max_members",
                     "generation_id", "rank"], _I32),
    **dict.fromkeys(["requests", "errors", "connections", "clients", "distinct_member_ids",
                     "member_count", "bad_lines", *traffic.TOPIC_FIELDS, "total_bytes"], _I64),
    **dict.fromkeys(["p50_ms", "p95_ms", "p99_ms", "avg_ms", "max_ms", "error_rate"], _F64),
    **dict.fromkeys(["first_seen", "last_seen", "bucket"], _TS),
    "client_hosts": _NAMES, "principals": _NAMES, "client_software": _NAMES,
    "samples": _SAMPLES, "requests_by_api": pa.map_(_STR, _I64),
}
_IDENTITY = ("client_instance_id", "client_id", "client_software_name",
             "client_software_version", "client_hosts!")
SCHEMAS: dict[str, pa.Schema] = {
    "client_inventory": _schema("client_key!", *_IDENTITY, "principals!", "first_seen",
                                "last_seen", "requests", "errors", "connections!",
                                "requests_by_api!"),
    "api_usage": _schema("api", "api_key", "api_version", "client_software_name",
                         "client_software_version", "requests", "errors", "clients!",
                         "first_seen", "last_seen"),
    "kafka4_readiness": _schema("client_key!", "api", "api_key", "api_version", *_IDENTITY,
                                "kafka4_min_version", "requests", "first_seen", "last_seen"),
    "latency_by_api": _schema("api", "api_key", "requests!", "errors", "p50_ms", "p95_ms",
                              "p99_ms", "avg_ms", "max_ms", "error_rate"),
    "latency_over_time": _schema("bucket", "api", "requests!", "errors", "p50_ms", "p95_ms"),
    "top_topics": _schema("topic!", *traffic.TOPIC_FIELDS, "total_bytes", "rank!"),
    "consumer_groups": _schema("group_id", "protocol_type", "assignor", "distinct_member_ids!",
                               "max_members", "generation_id", "requests", "client_software!",
                               "first_seen", "last_seen", "member_count!"),
    "bad_lines": _schema("file", "reason", "bad_lines!", "samples!"),
}


@dataclass(frozen=True)
class Counts:
    lines: int
    bad: int
    requests: int
    connection_events: int
    other_events: int
    first_ts: dt.datetime | None
    last_ts: dt.datetime | None


def counts(m: Merged) -> Counts:
    return Counts(m.lines, m.bad, m.requests, m.conn_events,
                  m.lines - m.bad - m.requests - m.conn_events,
                  timestamp(m.first_us), timestamp(m.last_us))


@dataclass(frozen=True)
class Table:
    name: str
    rows: list[Row]  # sorted (TABLE_ORDER); timestamps in microseconds

    def arrow(self) -> pa.Table:
        schema = SCHEMAS[self.name]
        return pa.table([pa.array([r[f.name] for r in self.rows], f.type) for f in schema],
                        schema=schema)

    def shown(self, limit: int) -> list[Row]:
        """The first rows as PySpark would collect them: timestamps as datetimes."""
        stamps = [f.name for f in SCHEMAS[self.name] if f.type == _TS]
        return [{**r, **{name: timestamp(r[name]) for name in stamps}}
                for r in self.rows[:limit]]


def bad_lines(m: Merged) -> list[Row]:
    """Per file and reason: how many bad lines, and up to two samples of them."""
    return [{"file": file, "reason": reason, "bad_lines": n,
             "samples": [lo] if lo == hi else [lo, hi]}
            for (file, reason), (n, lo, hi) in m.bad_lines.items()]


def bucket_seconds(c: Counts, points: int = 120) -> int:
    """A whole number of minutes giving at most about `points` buckets over the span."""
    if c.first_ts is None or c.last_ts is None:
        return 60
    span = (c.last_ts - c.first_ts).total_seconds()
    return max(1, int(span // (60 * points)) + 1) * 60


def build_tables(m: Merged, c: Counts) -> dict[str, Table]:
    groups, latency = m.group_table(), m.latency_table()
    usage = clients.connection_usage(groups)
    # Of the groups, consumer_groups needs those of a group (not most requests).
    in_group = groups.filter(pc.fill_null(pc.not_equal(groups.column("group_id"), ""), False))
    built: dict[str, list[dict[str, Any]]] = {
        "client_inventory": clients.client_inventory(usage),
        "api_usage": clients.api_usage(usage),
        "kafka4_readiness": clients.kafka4_readiness(usage),
        "latency_by_api": traffic.latency_by_api(latency),
        "latency_over_time": traffic.latency_over_time(latency, bucket_seconds(c)),
        "top_topics": traffic.top_topics(m.topics),
        "consumer_groups": traffic.consumer_groups(in_group.to_pylist()),
        "bad_lines": bad_lines(m),
    }
    return {name: Table(name, sort_rows(built[name], TABLE_ORDER[name]))
            for name in TABLE_ORDER}
