"""What the traffic looks like: latency, errors, topics and consumer groups.

Built in the driver from the merged partials (merge.py), with Spark's aggregate
semantics (agg.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pipeline import sketch
from pipeline.agg import Row, add, least, most
from pipeline.merge import TOPIC_FIELDS, merge_latency

QUANTILES = (0.5, 0.95, 0.99)
MINUTE_US = 60_000_000


def _merged_latency(parts: Iterable[tuple[tuple, list]], quantiles: tuple[float, ...]
                    ) -> list[Row]:
    """Latency stats ([requests, errors, lat_n, lat_sum, lat_max, bins] per key)
    merged per key: requests, errors, the percentiles (sketch.py), avg_ms and max_ms."""
    merged: dict[tuple, list] = {}
    for key, (requests, errors, lat_n, lat_sum, lat_max, bins) in parts:
        s = merged.get(key)
        if s is None:
            s = merged[key] = [0, 0, 0, 0.0, None, {}]
        merge_latency(s, requests, errors, lat_n, lat_sum, lat_max,
                      ((b, c[0], c[1], c[2]) for b, c in bins.items()))
    rows = []
    for key, (requests, errors, n, total, top, bins) in merged.items():
        hist = [(b, c[0], c[1], c[2]) for b, c in sorted(bins.items())]
        row: Row = {"key": key, "requests": requests or 0, "errors": errors}
        for q in quantiles:
            row[f"p{round(q * 100)}_ms"] = sketch.percentile(hist, n, q)
        row["avg_ms"] = total / n if n > 0 else None
        row["max_ms"] = top
        rows.append(row)
    return rows


def latency_by_api(latency: dict[tuple, list]) -> list[Row]:
    """Latency percentiles and error rate per api (acks=0 Produce counts, without
    latency); `latency` is merge.Merged.latency (per api, api_key and minute)."""
    parts = (((api, api_key), stats) for (api, api_key, _), stats in latency.items())
    rows = []
    for r in _merged_latency(parts, QUANTILES):
        api, api_key = r.pop("key")
        rows.append({"api": api, "api_key": api_key, **r,
                     "error_rate": r["errors"] / r["requests"] if r["requests"] else None})
    return rows


def _bucket_start(minute: int, bucket_seconds: int) -> int:
    """The bucket's start in seconds, as Spark's `start - start % bucket` (Java's %
    keeps the dividend's sign)."""
    start = minute * 60
    remainder = abs(start) % bucket_seconds
    return start - (remainder if start >= 0 else -remainder)


def latency_over_time(latency: dict[tuple, list], bucket_seconds: int) -> list[Row]:
    """Per api and time bucket: the series behind the report's latency chart.

    Buckets are whole minutes, so the partials' minutes fall wholly in one."""
    parts = (((_bucket_start(minute, bucket_seconds) * 1_000_000, api), stats)
             for (api, _, minute), stats in latency.items())
    rows = []
    for r in _merged_latency(parts, (0.5, 0.95)):
        bucket, api = r.pop("key")
        del r["avg_ms"], r["max_ms"]
        rows.append({"bucket": bucket, "api": api, **r})
    return rows


def top_topics(topics: dict[str, list]) -> list[Row]:
    """Bytes, records and batches produced (Produce requests) and fetched (Fetch
    responses) per topic, ranked by their total bytes."""
    rows = []
    for topic, sums in topics.items():
        row: Row = {"topic": topic, **dict(zip(TOPIC_FIELDS, sums, strict=True))}
        produced, fetched = row["produced_bytes"], row["fetched_bytes"]
        row["total_bytes"] = None if produced is None or fetched is None else produced + fetched
        rows.append(row)
    # total_bytes descending, nulls last, then topic
    rows.sort(key=lambda r: r["topic"])
    rows.sort(key=lambda r: (r["total_bytes"] is not None, r["total_bytes"]), reverse=True)
    for rank, row in enumerate(rows, 1):
        row["rank"] = rank
    return rows


class _Group:
    """One consumer group's aggregates over its request groups."""

    def __init__(self) -> None:
        # The value on the newest line that has one: (last_seen, value).
        self.latest: dict[str, tuple[Any, Any]] = {}
        self.members: set[str] = set()
        self.software: set[str] = set()
        self.max_members = self.generation = self.requests = self.first = self.last = None

    def add(self, g: Row) -> None:
        for name in ("protocol_type", "protocol_name"):
            seen = self.latest.get(name)
            if g[name] is not None and g["last_seen"] is not None and (
                    seen is None or g["last_seen"] > seen[0]):
                self.latest[name] = (g["last_seen"], g[name])
        if g["member_id"]:
            self.members.add(g["member_id"])
        software = "/".join(v for v in (g["client_software_name"],
                                        g["client_software_version"]) if v is not None)
        if software:
            self.software.add(software)
        self.max_members = most(self.max_members, g["members"])
        self.generation = most(self.generation, g["generation_id"])
        self.requests = add(self.requests, g["requests"])
        self.first = least(self.first, g["first_seen"])
        self.last = most(self.last, g["last_seen"])

    def row(self, group_id: str) -> Row:
        return {
            "group_id": group_id,
            "protocol_type": self.latest.get("protocol_type", (None, None))[1],
            "assignor": self.latest.get("protocol_name", (None, None))[1],
            "distinct_member_ids": len(self.members), "max_members": self.max_members,
            "generation_id": self.generation, "requests": self.requests,
            "client_software": sorted(self.software), "first_seen": self.first,
            "last_seen": self.last,
            # JoinGroup's member list is the group's size at a rebalance; member ids
            # seen over the whole log also count members that have since left.
            "member_count": (self.max_members if self.max_members is not None
                             else len(self.members)),
        }


def consumer_groups(groups: list[Row]) -> list[Row]:
    """Per consumer group; `groups` are the merged request groups, whose rows keep each
    line's own group fields and software (not the connection's resolved identity)."""
    by_group: dict[str, _Group] = {}
    for g in groups:
        if g["group_id"]:
            by_group.setdefault(g["group_id"], _Group()).add(g)
    return [group.row(group_id) for group_id, group in by_group.items()]
