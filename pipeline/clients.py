"""Who the clients are and which api versions they use.

A connection's identity is only learnt part way through it: the software name and
version arrive with ApiVersions, the KIP-714 client instance id with
GetTelemetrySubscriptions, the principal after SASL. So requests are first reduced
to one row per (connection, api, version), and each connection's rows then take the
identity seen on any of its lines; otherwise one client would appear as two.

Built in the driver from the merged partials (merge.py), with Spark's aggregate
semantics (agg.py): the rows are per connection and api version, never per line.
"""

from __future__ import annotations

import re
from typing import Any

from pipeline.agg import Row, add, least, most
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


def _client_key(row: Row) -> str:
    if row["client_instance_id"] is not None:
        return row["client_instance_id"]
    return "|".join(row[name] or "" for name in
                    ("client_id", "client_host", "client_software_name",
                     "client_software_version"))


def connection_usage(groups: list[Row]) -> list[Row]:
    """Request counts per connection and api version, with the connection's identity
    (each field's largest value on any of the connection's rows).

    `groups` are the merged request groups (merge.Merged.group_rows)."""
    identity: dict[tuple, dict[str, Any]] = {}
    usage: dict[tuple, list] = {}
    for g in groups:
        conn = tuple(g[name] for name in CONN)
        known = identity.setdefault(conn, dict.fromkeys(IDENTITY))
        for name in IDENTITY:
            known[name] = most(known[name], g[name])
        key = (conn, g["api_key"], g["api"], g["api_version"])
        u = usage.get(key)
        if u is None:
            usage[key] = [g["requests"], g["errors"], g["first_seen"], g["last_seen"]]
        else:
            u[0], u[1] = add(u[0], g["requests"]), add(u[1], g["errors"])
            u[2], u[3] = least(u[2], g["first_seen"]), most(u[3], g["last_seen"])
    rows = []
    for (conn, api_key, api, api_version), (n, errors, first, last) in usage.items():
        row = {**dict(zip(CONN, conn, strict=True)), **identity[conn], "api_key": api_key,
               "api": api, "api_version": api_version, "requests": n, "errors": errors,
               "first_seen": first, "last_seen": last}
        row["client_host"] = client_host(row["client_address"])
        row["client_key"] = _client_key(row)
        rows.append(row)
    return rows


class _Identity:
    """The identity aggregates of a client's rows: the largest of each field and the
    sorted distinct hosts."""

    FIELDS = ("client_instance_id", "client_id", "client_software_name",
              "client_software_version")

    def __init__(self) -> None:
        self.values: dict[str, Any] = dict.fromkeys(self.FIELDS)
        self.hosts: set[str] = set()

    def add(self, row: Row) -> None:
        for name in self.FIELDS:
            self.values[name] = most(self.values[name], row[name])
        if row["client_host"] is not None:
            self.hosts.add(row["client_host"])

    def columns(self) -> Row:
        return {**self.values, "client_hosts": sorted(self.hosts)}


class _Span:
    """requests, errors, first_seen and last_seen summed over rows."""

    def __init__(self) -> None:
        self.requests = self.errors = self.first = self.last = None

    def add(self, row: Row) -> None:
        self.requests = add(self.requests, row["requests"])
        self.errors = add(self.errors, row.get("errors"))
        self.first = least(self.first, row["first_seen"])
        self.last = most(self.last, row["last_seen"])


def client_inventory(usage: list[Row]) -> list[Row]:
    clients: dict[str, tuple[_Identity, _Span, dict[str, Any]]] = {}
    for row in usage:
        ident, span, extra = clients.get(row["client_key"]) or clients.setdefault(
            row["client_key"], (_Identity(), _Span(),
                                {"principals": set(), "conns": set(), "by_api": {}}))
        ident.add(row)
        span.add(row)
        if row["principal"] is not None:
            extra["principals"].add(row["principal"])
        extra["conns"].add(tuple(row[name] for name in CONN))
        # A map key cannot be null: a request line naming no api counts as "unknown".
        api = UNKNOWN_API if row["api"] is None else row["api"]
        extra["by_api"][api] = add(extra["by_api"].get(api), row["requests"])
    return [{"client_key": key, **ident.columns(), "principals": sorted(extra["principals"]),
             "first_seen": span.first, "last_seen": span.last, "requests": span.requests,
             "errors": span.errors, "connections": len(extra["conns"]),
             "requests_by_api": extra["by_api"]}
            for key, (ident, span, extra) in clients.items()]


def api_usage(usage: list[Row]) -> list[Row]:
    keys = ("api", "api_key", "api_version", "client_software_name", "client_software_version")
    grouped: dict[tuple, tuple[_Span, set[str]]] = {}
    for row in usage:
        span, clients = grouped.setdefault(tuple(row[k] for k in keys), (_Span(), set()))
        span.add(row)
        clients.add(row["client_key"])
    return [{**dict(zip(keys, key, strict=True)), "requests": span.requests,
             "errors": span.errors, "clients": len(clients), "first_seen": span.first,
             "last_seen": span.last}
            for key, (span, clients) in grouped.items()]


def kafka4_readiness(usage: list[Row]) -> list[Row]:
    """One row per client and (api, version) that a Kafka 4.0 broker no longer accepts."""
    removed: dict[tuple[int, int], list[int]] = {}
    for api_key, _, version, minimum in removed_versions():
        removed.setdefault((api_key, version), []).append(minimum)
    keys = ("client_key", "api", "api_key", "api_version")
    grouped: dict[tuple, tuple[_Identity, _Span, list]] = {}
    for row in usage:
        for minimum in removed.get((row["api_key"], row["api_version"]), ()):
            ident, span, top = grouped.setdefault(tuple(row[k] for k in keys),
                                                  (_Identity(), _Span(), [None]))
            ident.add(row)
            span.add(row)
            top[0] = most(top[0], minimum)
    return [{**dict(zip(keys, key, strict=True)), **ident.columns(),
             "kafka4_min_version": top[0], "requests": span.requests,
             "first_seen": span.first, "last_seen": span.last}
            for key, (ident, span, top) in grouped.items()]
