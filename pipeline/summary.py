"""The few lines the report prints to the console (and heads report.html with)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from pipeline.progress import human_bytes
from pipeline.tables import Counts

Row = dict[str, Any]


@dataclass
class ReportResult:
    out: str
    inputs: list[str]
    counts: Counts
    seconds: float
    table_rows: dict[str, int] = field(default_factory=dict)
    shown: dict[str, list[Row]] = field(default_factory=dict)  # each table's first rows
    series: dict[str, list[Row]] = field(default_factory=dict)  # the charts' points
    bucket_seconds: int = 60
    scan_seconds: float = 0.0  # from the start to the scan's end (reading and folding)
    files: int = 0  # input files listed
    left_out: dict[str, str] = field(default_factory=dict)  # file -> why it was not read

    @property
    def lines_per_second(self) -> float:
        return self.counts.lines / self.seconds if self.seconds > 0 else 0.0


def summary_lines(r: ReportResult) -> list[str]:
    c = r.counts
    lines = [
        f"{c.lines:,} lines ({c.bad:,} bad) in {r.seconds:.1f} s "
        f"({r.lines_per_second:,.0f} lines/s; reading {r.scan_seconds:.1f} s, tables "
        f"{r.seconds - r.scan_seconds:.1f} s); {c.requests:,} requests, "
        f"{c.connection_events:,} connection events, {c.other_events:,} other events",
        _files(r),
        f"time span: {_utc(c.first_ts)} .. {_utc(c.last_ts)} UTC",
        f"clients: {r.table_rows.get('client_inventory', 0):,}; "
        f"consumer groups: {r.table_rows.get('consumer_groups', 0):,}",
    ]
    lines.append(_readiness(r.shown.get("kafka4_readiness", []),
                            r.table_rows.get("kafka4_readiness", 0)))
    lines.append("top topics: " + (", ".join(
        f"{t['topic']} ({human_bytes(t['total_bytes'] or 0)})"
        for t in r.shown.get("top_topics", [])[:3]) or "-"))
    apis = r.shown.get("latency_by_api", [])
    slow = sorted((a for a in apis if a["p99_ms"] is not None), key=lambda a: -a["p99_ms"])[:3]
    lines.append("slowest p99 (service latency, long polls and rebalances apart): " + (
        ", ".join(f"{a['api']} {a['p99_ms']:.1f} ms" for a in slow) or "-"))
    failing = sorted((a for a in apis if a["errors"]),
                     key=lambda a: (-(a["error_rate"] or 0), a["api"]))[:3]
    lines.append("highest error rates (protocol steps such as MEMBER_ID_REQUIRED apart): " + (
        ", ".join(f"{a['api']} {a['error_rate']:.2%}" for a in failing) or "-"))
    return lines


def _utc(t: dt.datetime | None) -> str:
    """An aware time as UTC, to the microsecond the log has (none: "-")."""
    if t is None:
        return "-"
    return t.astimezone(dt.UTC).replace(tzinfo=None).isoformat(sep=" ")


def _files(r: ReportResult) -> str:
    read = r.files - len(r.left_out)
    line = f"input files: {read:,} read"
    if r.left_out:
        named = ", ".join(f"{path} ({why})" for path, why in sorted(r.left_out.items()))
        line += f", {len(r.left_out):,} LEFT OUT (their lines are not counted): {named}"
    return line


def _readiness(rows: list[Row], total: int) -> str:
    if not total:
        return "Kafka 4.0 readiness: no client used a removed api version"
    labels = [
        f"{r['client_software_name'] or r['client_id'] or r['client_key']}"
        f" {r['client_software_version'] or ''} {r['api']} v{r['api_version']}".replace("  ", " ")
        for r in rows
    ]
    worst = ", ".join(list(dict.fromkeys(labels))[:3])  # one per software, not per instance
    return f"Kafka 4.0 readiness: {total:,} client/api versions would be refused, e.g. {worst}"
