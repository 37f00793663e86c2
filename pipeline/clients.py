"""Who the clients are and which api versions they use.

A connection's identity is only learnt part way through it: the software name and
version arrive with ApiVersions, the KIP-714 client instance id with
GetTelemetrySubscriptions, the principal after SASL. So requests are first reduced
to one row per (connection, api, version), and each connection's rows then take the
identity seen on any of its lines; otherwise one client would appear as two.

Built in the driver from the merged partials (merge.py), with Spark's aggregate
semantics (agg.py), by Arrow's group_by: the rows are per connection and api version
(~150,000 at 10M lines), never per line, but Python loops over them took ~7 s.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.agg import Row
from pipeline.readiness_data import removed_versions

CONN = ["listener", "client_address", "conn"]
IDENTITY = [
    "client_id",
    "client_instance_id",
    "client_software_name",
    "client_software_version",
    "principal",
]
# Of a consumer group's requests, what consumer_groups (pipeline.traffic) needs.
GROUP_KEYS = ["group_id", "member_id", "protocol_type", "protocol_name"]
UNKNOWN_API = "unknown"

# The host of "ip:port" or "[v6]:port", as the Java regex ^\[?(.*?)\]?:\d+$ that Spark
# ran: "." stops at Java's line terminators and "$" may precede a final one.
_HOST = re.compile(r"^\[?([^\n\r\x85\u2028\u2029]*?)\]?:[0-9]+(?:\r\n|[\n\r\x85\u2028\u2029])?\Z")


def client_host(address: str | None) -> str | None:
    """The host of an address (the port changes with every connection)."""
    if address is None:
        return None
    match = _HOST.search(address)
    return match.group(1) if match and match.group(1) else address


def _renamed(table: pa.Table, names: dict[str, str]) -> pa.Table:
    return table.rename_columns([names.get(c, c) for c in table.column_names])


def _aggregate(table: pa.Table, keys: list[str], aggregates: list[tuple]) -> pa.Table:
    """group_by with Spark's semantics for the aggregates used here: nulls are a key
    value like any other, sums, mins and maxes skip nulls (null if all are), string
    maxes compare UTF-8 bytes (Spark's order, and Python's code points)."""
    return table.group_by(keys, use_threads=False).aggregate(aggregates)


def _null_safe_keys(table: pa.Table, names: list[str]) -> tuple[pa.Table, list[str]]:
    """`table` with join keys standing for `names` under which null equals null (an
    Arrow join, as SQL's, matches no null): each value with nulls as "" plus a flag."""
    keys = []
    for i, name in enumerate(names):
        column = table.column(name)
        table = table.append_column(f"_key{i}", pc.fill_null(column, "")).append_column(
            f"_null{i}", pc.is_null(column))
        keys += [f"_key{i}", f"_null{i}"]
    return table, keys


def connection_usage(groups: pa.Table) -> pa.Table:
    """Request counts per connection and api version, with the connection's identity
    (each field's largest value on any of the connection's rows), client_host and
    client_key.

    `groups` are the merged request groups (merge.Merged.group_table)."""
    identity = _aggregate(groups, CONN, [(name, "max") for name in IDENTITY])
    identity = _renamed(identity, {f"{name}_max": name for name in IDENTITY})
    usage = _aggregate(groups, [*CONN, "api_key", "api", "api_version"], [
        ("requests", "sum"), ("errors", "sum"), ("first_seen", "min"), ("last_seen", "max")])
    usage = _renamed(usage, {"requests_sum": "requests", "errors_sum": "errors",
                             "first_seen_min": "first_seen", "last_seen_max": "last_seen"})
    usage, keys = _null_safe_keys(usage, CONN)
    identity, _ = _null_safe_keys(identity, CONN)
    usage = usage.join(identity.drop_columns(CONN), keys=keys, use_threads=False)
    usage = usage.drop_columns(keys)
    address = pc.dictionary_encode(usage.column("client_address").combine_chunks())
    # Few distinct addresses (one per connection at most): the regex runs once on each.
    hosts = pa.array([client_host(a) for a in address.dictionary.to_pylist()], pa.string())
    usage = usage.append_column("client_host", hosts.take(address.indices))
    # client_instance_id, or client_id|host|software name|version (a null as "").
    joined = pc.binary_join_element_wise(
        *[pc.fill_null(usage.column(name), "") for name in
          ("client_id", "client_host", "client_software_name", "client_software_version")],
        "|")
    instance = usage.column("client_instance_id")
    return usage.append_column("client_key", pc.if_else(pc.is_valid(instance), instance,
                                                        joined))


_IDENTITY_FIELDS = ("client_instance_id", "client_id", "client_software_name",
                    "client_software_version")
_SPAN = [("requests", "sum"), ("errors", "sum"), ("first_seen", "min"), ("last_seen", "max")]
_SPAN_NAMES = {"requests_sum": "requests", "errors_sum": "errors",
               "first_seen_min": "first_seen", "last_seen_max": "last_seen"}


def _identity_columns(row: Row) -> Row:
    """An aggregate row's identity: the largest of each field, sorted distinct hosts."""
    return {**{name: row[f"{name}_max"] for name in _IDENTITY_FIELDS},
            "client_hosts": sorted(row["client_host_distinct"])}


def client_inventory(usage: pa.Table) -> list[Row]:
    by_client = _aggregate(usage, ["client_key"], [
        *[(name, "max") for name in _IDENTITY_FIELDS], ("client_host", "distinct"),
        ("principal", "distinct"), *_SPAN])
    # Distinct connections (a null is a value, as in a Python set of tuples).
    conns = _aggregate(_aggregate(usage, ["client_key", *CONN], []), ["client_key"],
                       [([], "count_all")])
    connections = dict(zip(conns.column("client_key").to_pylist(),
                           conns.column("count_all").to_pylist(), strict=True))
    # A map key cannot be null: a request line naming no api counts as "unknown".
    apis = usage.set_column(usage.schema.get_field_index("api"), "api",
                            pc.fill_null(usage.column("api"), UNKNOWN_API))
    by_api: dict[str, dict[str, Any]] = {}
    for r in _aggregate(apis, ["client_key", "api"], [("requests", "sum")]).to_pylist():
        by_api.setdefault(r["client_key"], {})[r["api"]] = r["requests_sum"]
    rows = []
    for r in _renamed(by_client, _SPAN_NAMES).to_pylist():
        key = r["client_key"]
        rows.append({"client_key": key, **_identity_columns(r),
                     "principals": sorted(r["principal_distinct"]),
                     "first_seen": r["first_seen"], "last_seen": r["last_seen"],
                     "requests": r["requests"], "errors": r["errors"],
                     "connections": connections[key],
                     "requests_by_api": dict(sorted(by_api[key].items()))})
    return rows


def api_usage(usage: pa.Table) -> list[Row]:
    keys = ["api", "api_key", "api_version", "client_software_name", "client_software_version"]
    grouped = _aggregate(usage, keys, [*_SPAN, ("client_key", "count_distinct")])
    grouped = _renamed(grouped, {**_SPAN_NAMES, "client_key_count_distinct": "clients"})
    return grouped.select([*keys, "requests", "errors", "clients", "first_seen", "last_seen"]
                          ).to_pylist()


def kafka4_readiness(usage: pa.Table) -> list[Row]:
    """One row per client and (api, version) that a Kafka 4.0 broker no longer accepts."""
    removed: dict[tuple[int, int], int] = {}
    for api_key, _, version, minimum in removed_versions():
        removed[(api_key, version)] = max(minimum, removed.get((api_key, version), minimum))
    # Only the usage of removed versions: a key api_key * 2^32 + version, null if either is.
    code = pc.add(pc.multiply(pc.cast(usage.column("api_key"), pa.int64()), 2**32),
                  pc.cast(usage.column("api_version"), pa.int64()))
    wanted = pa.array([k * 2**32 + v for k, v in removed], pa.int64())
    refused = usage.filter(pc.fill_null(pc.is_in(code, wanted), False))
    keys = ["client_key", "api", "api_key", "api_version"]
    grouped = _aggregate(refused, keys, [
        *[(name, "max") for name in _IDENTITY_FIELDS], ("client_host", "distinct"),
        ("requests", "sum"), ("first_seen", "min"), ("last_seen", "max")])
    return [{**{name: r[name] for name in keys}, **_identity_columns(r),
             "kafka4_min_version": removed[(r["api_key"], r["api_version"])],
             "requests": r["requests_sum"], "first_seen": r["first_seen_min"],
             "last_seen": r["last_seen_max"]}
            for r in grouped.to_pylist()]
