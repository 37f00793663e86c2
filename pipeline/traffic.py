"""What the traffic looks like: latency, errors, topics and consumer groups.

Built in the driver from the merged partials (merge.py), with Spark's aggregate
semantics (agg.py).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.agg import Row, add, least, most
from pipeline.merge import TOPIC_FIELDS

QUANTILES = (0.5, 0.95, 0.99)
MINUTE_US = 60_000_000


def _spark_aggregates(table: pa.Table, by: list[str], sums: list[str], mins: list[str],
                      maxes: list[str]) -> pa.Table:
    """Spark's sum, min and max per `by`, sorted by it: nulls skipped (null if every
    value is), NaN the largest double. Arrow's min agrees; its max skips NaN, so a
    group with a NaN is given NaN here."""
    flags = [f"{name}_nan" for name in maxes]
    for name, flag in zip(maxes, flags, strict=True):
        table = table.append_column(flag, pc.is_nan(table.column(name)))
    merged = table.group_by(by, use_threads=False).aggregate(
        [(name, "sum") for name in sums] + [(name, "min") for name in mins]
        + [(name, "max") for name in maxes] + [(flag, "any") for flag in flags])
    merged = merged.sort_by([(name, "ascending") for name in by])
    for name, flag in zip(maxes, flags, strict=True):
        nan = pc.fill_null(merged.column(f"{flag}_any"), False)
        top = pc.if_else(nan, pa.scalar(math.nan), merged.column(f"{name}_max"))
        merged = merged.set_column(merged.schema.get_field_index(f"{name}_max"),
                                   f"{name}_max", top)
    return merged


class _Histograms:
    """Every key's histogram merged, for sketch.percentile's walk done for all keys at
    once: bins sorted by key id then bin, and their counts summed over the keys."""

    def __init__(self, kid: pa.Array, parts: pa.Table, keys: int) -> None:
        bins = parts.column("bins")
        flat = pa.table({
            "kid": pc.take(kid, pc.list_parent_indices(bins)), "bin": pc.list_flatten(bins),
            "count": pc.list_flatten(parts.column("bin_counts")),
            "lo": pc.list_flatten(parts.column("bin_lo")),
            "hi": pc.list_flatten(parts.column("bin_hi"))})
        hist = _spark_aggregates(flat, ["kid", "bin"], ["count"], ["lo"], ["hi"])
        self.counts = hist.column("count_sum").to_numpy()
        self.lo, self.hi = hist.column("lo_min").to_numpy(), hist.column("hi_max").to_numpy()
        self.cum = np.cumsum(self.counts)
        kids = hist.column("kid").to_numpy()
        starts = np.searchsorted(kids, np.arange(keys), "left")
        self.ends = np.searchsorted(kids, np.arange(keys), "right")
        self.below = np.concatenate(([0], self.cum))[starts]  # the counts of earlier keys

    def percentile(self, n: np.ndarray, q: float) -> list[float | None]:
        """Per key, the q-th percentile of its n values (None when n is 0)."""
        rank = np.maximum(1, np.ceil(n * q)).astype(np.int64)
        at = np.searchsorted(self.cum, self.below + rank, "left")  # the bin reaching it
        found = (n > 0) & (at < self.ends)
        if not found.any():
            return [None] * n.size
        at = np.where(found, at, 0)
        below = self.cum[at] - self.counts[at] - self.below
        value = np.where((rank - below) * 2 <= self.counts[at] + 1, self.lo[at], self.hi[at])
        return [v if ok else None for v, ok in zip(value.tolist(), found.tolist(), strict=True)]


def _merged_latency(keys: list[tuple], parts: pa.Table, quantiles: tuple[float, ...]
                    ) -> list[Row]:
    """Partial latency rows (merge.Merged.latency_table) merged per key, `keys[i]` that
    of row i, in the order keys first appear: requests, errors, the percentiles
    (sketch.py), avg_ms and max_ms. Arrow and numpy merge them: row by row in Python
    it took ~2 s of the driver at 10M lines, while one core sat idle."""
    ids: dict[tuple, int] = {}
    kid = pa.array([ids.setdefault(key, len(ids)) for key in keys], pa.int64())
    sums = ["requests", "errors", "lat_n", "lat_sum"]
    totals = _spark_aggregates(parts.select([*sums, "lat_max"]).append_column("kid", kid),
                               ["kid"], sums, [], ["lat_max"])
    # Sums start at 0, as the merge's did: never null.
    requests, errors, n, total = (
        pc.fill_null(totals.column(f"{name}_sum"), 0).to_pylist() for name in sums)
    hist = _Histograms(kid, parts, len(ids))
    counts = np.asarray(n, dtype=np.int64)
    percentiles = {f"p{round(q * 100)}_ms": hist.percentile(counts, q) for q in quantiles}
    top = totals.column("lat_max_max").to_pylist()
    rows = []
    for i, key in enumerate(ids):
        row: Row = {"key": key, "requests": requests[i], "errors": errors[i]}
        for name, values in percentiles.items():
            row[name] = values[i]
        row["avg_ms"] = total[i] / n[i] if n[i] > 0 else None
        row["max_ms"] = top[i]
        rows.append(row)
    return rows


def latency_by_api(latency: pa.Table) -> list[Row]:
    """Latency percentiles and error rate per api (acks=0 Produce counts, without
    latency); `latency` is merge.Merged.latency_table() (per api, api_key and minute)."""
    keys = list(zip(latency.column("api").to_pylist(), latency.column("api_key").to_pylist(),
                    strict=True))
    rows = []
    for r in _merged_latency(keys, latency, QUANTILES):
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


def latency_over_time(latency: pa.Table, bucket_seconds: int) -> list[Row]:
    """Per api and time bucket: the series behind the report's latency chart.

    Buckets are whole minutes, so the partials' minutes fall wholly in one."""
    keys = [(_bucket_start(minute, bucket_seconds) * 1_000_000, api) for minute, api in zip(
        latency.column("minute").to_pylist(), latency.column("api").to_pylist(), strict=True)]
    rows = []
    for r in _merged_latency(keys, latency, (0.5, 0.95)):
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
