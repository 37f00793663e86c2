"""The plain-Python reference for the report's fleet tables (pipeline/fleet.py): lag,
committed lag, the topic access map and client telemetry, computed straight from the
events the sidecars logged, as the shared contract of #20/#21 defines their fields."""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from support.report_oracle import micros, resolved

Event = dict[str, Any]
REQUEST_EVENTS = ("request", "request_no_response")
TOP = 5


def _bucket(ts: str, step: int) -> int:
    seconds = micros(ts) // 1_000_000
    return (seconds - seconds % step) * 1_000_000


def _fold_lag(rows: dict[tuple, dict[str, Any]], key: tuple, e: Event, p: Event,
              client: str | None = None) -> None:
    row = rows.setdefault(key, {"max_lag": p["lag"], "fetches": 0, "consumers": set(),
                                "newest": -1})
    row["max_lag"] = max(row["max_lag"], p["lag"])
    row["fetches"] += 1
    if client is not None:
        row["consumers"].add(client)
    t = micros(e["ts"])
    if t > row["newest"]:
        row.update(newest=t, latest_lag=p["lag"], position=p["next_offset"],
                   high_watermark=p["high_watermark"], last_seen=t)


def consumer_lag(requests: list[Event], step: int) -> dict[tuple, dict[str, Any]]:
    """(bucket, group, group_known, topic, partition) -> the lag figures."""
    rows: dict[tuple, dict[str, Any]] = {}
    for e in requests:
        if e.get("replica_id") is not None:
            continue
        client = e["client_instance_id"] or e["client_id"]
        group = e.get("consumer_group") or None
        for p in e.get("positions") or ():
            key = (_bucket(e["ts"], step), group or client, group is not None, p["topic"],
                   p["partition"])
            _fold_lag(rows, key, e, p, client)
    return rows


def consumer_topic_lag(lag: dict[tuple, dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    out: dict[tuple, dict[str, Any]] = {}
    for (bucket, group, known, topic, _), row in lag.items():
        t = out.setdefault((bucket, group, known, topic),
                           {"total_lag": 0, "max_partition_lag": 0, "partitions": 0,
                            "last_seen": 0})
        t["total_lag"] += row["latest_lag"]
        t["max_partition_lag"] = max(t["max_partition_lag"], row["max_lag"])
        t["partitions"] += 1
        t["last_seen"] = max(t["last_seen"], row["last_seen"])
    return out


def replication_lag(requests: list[Event], step: int) -> dict[tuple, dict[str, Any]]:
    rows: dict[tuple, dict[str, Any]] = {}
    for e in requests:
        if e.get("replica_id") is None:
            continue
        for p in e.get("positions") or ():
            _fold_lag(rows, (_bucket(e["ts"], step), e["replica_id"], p["topic"],
                             p["partition"]), e, p)
    return rows


def committed_lag(requests: list[Event]) -> dict[tuple, dict[str, Any]]:
    """(group, topic, partition) -> the newest commit, and the fleet's lag for it."""
    newest_hw: dict[tuple, tuple[int, int]] = {}
    for e in requests:
        for p in e.get("positions") or ():
            key, t = (p["topic"], p["partition"]), micros(e["ts"])
            if key not in newest_hw or t > newest_hw[key][0]:
                newest_hw[key] = (t, p["high_watermark"])
    rows: dict[tuple, dict[str, Any]] = {}
    for e in requests:
        for c in e.get("committed") or ():
            key, t = (e["group_id"], c["topic"], c["partition"]), micros(e["ts"])
            row = rows.setdefault(key, {"commits": 0, "max_lag": None, "first_seen": t,
                                        "last_seen": -1})
            row["commits"] += 1
            if c["lag"] is not None:
                row["max_lag"] = max(row["max_lag"] or 0, c["lag"])
            row["first_seen"] = min(row["first_seen"], t)
            if t > row["last_seen"]:
                row.update(last_seen=t, committed_offset=c["offset"],
                           high_watermark=c["high_watermark"], lag=c["lag"])
    for (_, topic, partition), row in rows.items():
        hw = newest_hw.get((topic, partition))
        row["fleet_high_watermark"] = hw and hw[1]
        row["fleet_lag"] = None if hw is None else max(0, hw[1] - row["committed_offset"])
    return rows


def topic_access(requests: list[Event]) -> dict[tuple, dict[str, Any]]:
    """(topic, direction, principal, software name, version) -> who and how much, each
    request with its connection's identity (report_oracle.resolved)."""
    rows: dict[tuple, dict[str, Any]] = {}
    for r in resolved(requests):
        if r.get("api_key") not in (0, 1):
            continue
        direction = ("replicate" if r.get("replica_id") is not None
                     else "produce" if r["api_key"] == 0 else "fetch")
        for topic, c in ((r.get("record_stats") or {}).get("per_topic") or {}).items():
            key = (topic, direction, r["principal"], r["client_software_name"],
                   r["client_software_version"])
            row = rows.setdefault(key, {"keys": set(), "client_ids": set(), "requests": 0,
                                        "records": 0, "bytes": 0, "batches": 0, "ts": []})
            row["keys"].add(r["key"])
            row["client_ids"].add(r["client_id"])
            row["requests"] += 1
            for field in ("records", "bytes", "batches"):
                row[field] += c[field]
            row["ts"].append(micros(r["ts"]))
    return rows


def attributes(e: Event) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted((e.get("attributes") or {}).items()))


def telemetry_series(metrics: list[Event]) -> dict[tuple, dict[str, Any]]:
    """(instance, metric, attributes) -> the newest point of that series."""
    series: dict[tuple, dict[str, Any]] = {}
    for e in metrics:
        key = (e["client_instance_id"] or e["client_id"], e["metric"], attributes(e))
        row = series.setdefault(key, {"points": 0, "newest": -1})
        row["points"] += 1
        if micros(e["ts"]) > row["newest"]:
            row.update(newest=micros(e["ts"]), value=e["value"], event=e)
    return series


def client_telemetry(metrics: list[Event]) -> dict[tuple, dict[str, Any]]:
    """(software name, version, metric, type) -> instances and the latest values' spread."""
    grouped: dict[tuple, list[tuple]] = defaultdict(list)
    for (instance, metric, _), row in telemetry_series(metrics).items():
        e = row["event"]
        key = (e["client_software_name"], e["client_software_version"], metric, e["type"])
        grouped[key].append((instance, row["value"], row["points"], row["newest"]))
    return {key: {"instances": len({i for i, *_ in rows}), "series": len(rows),
                  "min_value": min(v for _, v, *_ in rows),
                  "median_value": statistics.median(v for _, v, *_ in rows),
                  "max_value": max(v for _, v, *_ in rows),
                  "points": sum(n for *_, n, _ in rows),
                  "last_seen": max(t for *_, t in rows)}
            for key, rows in grouped.items()}


def client_telemetry_top(metrics: list[Event]) -> dict[tuple, tuple]:
    """(metric, rank) -> (instance, attributes, value) of the TOP largest latest values."""
    by_metric: dict[str, list[tuple]] = defaultdict(list)
    for (instance, metric, attrs), row in telemetry_series(metrics).items():
        by_metric[metric].append((-row["value"], instance, attrs, row["event"]["client_id"]))
    out = {}
    for metric, rows in by_metric.items():
        for rank, (value, instance, attrs, _) in enumerate(sorted(rows)[:TOP], 1):
            out[(metric, rank)] = (instance, attrs, -value)
    return out
