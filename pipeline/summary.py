"""The report's summary in plain words: what traffic, which clients, what is wrong. The
terminal prints it (summary_lines) and report.html opens with it (story), from what
the report collected: the line counts, each table's first rows and the charts' series.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pipeline.progress import duration, human_bytes
from pipeline.progress import plural as _plural
from pipeline.sections import software_label
from pipeline.tables import Counts

Row = dict[str, Any]
# An api failing at least this share of its requests needs attention (protocol steps
# such as MEMBER_ID_REQUIRED are never failures: pipeline/README.md).
ERROR_RATE_ATTENTION = 0.01
NAMED = 3  # apis, topics, software ... named in a sentence; the rest counted


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
    # table -> "driver" (small: collected and written by the driver) or "spark" (by
    # Spark's writer): report.write_small_or_large
    written_by: dict[str, str] = field(default_factory=dict)

    @property
    def lines_per_second(self) -> float:
        return self.counts.lines / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Story:
    """The summary: a headline, sentences on the traffic, and what needs attention (each
    with the anchor of the section that says more), or what was checked and found
    fine."""

    headline: str
    traffic: list[str]
    attention: list[tuple[str, str]]  # (sentence, section anchor)
    all_clear: str


def when(t: dt.datetime | None) -> str:
    """An aware time as UTC, to the second."""
    return "-" if t is None else f"{t.astimezone(dt.UTC):%Y-%m-%d %H:%M:%S}"


def span(c: Counts) -> str:
    """From when to when, UTC (the day once when both are on it), and how long."""
    if c.first_ts is None or c.last_ts is None:
        return "no line with a time"
    first, last = when(c.first_ts), when(c.last_ts)
    if first[:10] == last[:10]:
        last = last[11:]
    return f"from {first} to {last} UTC ({duration((c.last_ts - c.first_ts).total_seconds())})"


def _share(part: int, whole: int) -> str:
    share = part / whole if whole else 0.0
    return f"{share:.0%}" if share >= 0.01 else "<1%"


def _listed(items: list[str], total: int | None = None) -> str:
    """a, b and c; a, b, c and 4 more (`total`: how many there are, if not `items`';
    None: the first NAMED, the rest unsaid)."""
    named = items[:NAMED]
    rest = (len(named) if total is None else total) - len(named)
    if rest > 0:
        return ", ".join(named) + f" and {rest:,} more"
    if len(named) <= 1:
        return "".join(named)
    return ", ".join(named[:-1]) + f" and {named[-1]}"


def story(r: ReportResult) -> Story:
    c = r.counts
    read = r.files - len(r.left_out)
    clients = r.table_rows.get("client_inventory", 0)
    headline = (f"{_plural(c.requests, 'request')} from {_plural(clients, 'client')}, "
                f"{span(c)}")
    traffic = [_lines_sentence(r, read)]
    apis = r.shown.get("latency_by_api", [])
    if apis and c.requests:
        busiest = [f"{a['api']} ({_share(a['requests'], c.requests)})" for a in apis]
        rate = ""
        if c.first_ts and c.last_ts and c.last_ts > c.first_ts:
            per_second = c.requests / (c.last_ts - c.first_ts).total_seconds()
            rate = f", {per_second:,.1f} a second on average"
        traffic.append(f"Most requests were {_listed(busiest, len(busiest))}{rate}.")
    software = r.series.get("software", [])
    if software:
        kinds = [f"{software_label(s['client_software_name'], s['client_software_version'])} "
                 f"({_plural(s['clients'], 'client')})" for s in software]
        traffic.append(f"Client software: {_listed(kinds, len(kinds))}.")
    topics = r.shown.get("top_topics", [])
    if topics:
        named = [f"{t['topic']} ({human_bytes(t['total_bytes'] or 0)})" for t in topics]
        traffic.append(f"{_plural(r.table_rows.get('top_topics', 0), 'topic')} carried "
                       f"records; the busiest: {_listed(named, r.table_rows['top_topics'])}.")
    traffic += _groups(r)
    slow = sorted((a for a in apis if a["p99_ms"] is not None), key=lambda a: -a["p99_ms"])
    if slow:
        named = [f"{a['api']} {a['p99_ms']:,.1f} ms" for a in slow]
        traffic.append("Slowest service latency (p99; long polls and rebalances apart): "
                       f"{_listed(named)}.")
    attention = [*_failing(apis), *_readiness(r), *_bad_lines(r), *_retyped(r), *_left_out(r)]
    return Story(headline, traffic, attention, ALL_CLEAR)


def _lines_sentence(r: ReportResult, read: int) -> str:
    c = r.counts
    parts = [f"{_plural(c.lines, 'line')} read from {_plural(read, 'file')}"]
    if c.bad:
        parts.append(f"{c.bad:,} of them bad")
    others = c.connection_events + c.other_events
    if others:
        parts.append(f"{c.connection_events:,} connection events and {c.other_events:,} "
                     "other lines beside the requests")
    return "; ".join(parts) + "."


def _groups(r: ReportResult) -> list[str]:
    groups = r.table_rows.get("consumer_groups", 0)
    if not groups:
        return []
    sentence = f"{_plural(groups, 'consumer group')}"
    lag = r.shown.get("consumer_topic_lag", [])
    if lag:
        newest = [row for row in lag if row["bucket"] == lag[0]["bucket"]]
        worst = max(newest, key=lambda row: row["total_lag"] or 0)
        if worst["total_lag"]:
            owner = "group" if worst["group_known"] else "client (in no group)"
            sentence += (f"; the largest lag at the end: {owner} {worst['group_id']} on "
                         f"{worst['topic']}, {_plural(worst['total_lag'], 'record')} behind")
        else:
            sentence += "; at the end every consumer had caught up"
    return [sentence + "."]


def _failing(apis: list[Row]) -> list[tuple[str, str]]:
    failing = sorted((a for a in apis if a["error_rate"] and
                      a["error_rate"] >= ERROR_RATE_ATTENTION),
                     key=lambda a: (-a["error_rate"], a["api"]))
    return [(f"{a['api']}: {a['error_rate']:.1%} of its {a['requests']:,} requests failed "
             f"({a['errors']:,}).", "latency") for a in failing[:NAMED]] + (
        [(f"{_plural(len(failing) - NAMED, 'more api')} failed "
          f"{ERROR_RATE_ATTENTION:.0%} or more of their requests.", "latency")]
        if len(failing) > NAMED else [])


def _readiness(r: ReportResult) -> list[tuple[str, str]]:
    total = r.table_rows.get("kafka4_readiness", 0)
    if not total:
        return []
    rows = r.shown.get("kafka4_readiness", [])
    by_software: dict[str, list[str]] = {}
    for row in rows:
        who = software_label(row["client_software_name"], row["client_software_version"])
        if not row["client_software_name"] and row["client_id"]:
            who = f"client {row['client_id']}"
        used = f"{row['api']} v{row['api_version']}"
        if used not in by_software.setdefault(who, []):
            by_software[who].append(used)
    named = [f"{who} ({', '.join(used)})" for who, used in by_software.items()]
    clients = len({row["client_key"] for row in rows})
    counted = f"{clients:,}" if total <= len(rows) else f"at least {clients:,}"
    return [(f"{counted} client{'' if clients == 1 else 's'} use api versions that would "
             f"be refused by Kafka 4.0: {_listed(named, len(named))}.", "kafka4")]


def _bad_lines(r: ReportResult) -> list[tuple[str, str]]:
    if not r.counts.bad:
        return []
    reasons: Counter[str] = Counter()
    for row in r.shown.get("bad_lines", []):
        if row["bad_lines"]:
            reasons[row["reason"]] += row["bad_lines"]
    why = ", ".join(f"{reason}: {n:,}" for reason, n in reasons.most_common(NAMED))
    return [(f"{_plural(r.counts.bad, 'line')} could not be read ({why}).", "bad-lines")]


def _retyped(r: ReportResult) -> list[tuple[str, str]]:
    c = r.counts
    if not c.retyped:
        return []
    fields = sorted(c.retyped_fields, key=lambda f: (-f[1], f[0]))
    named = [f"{name} ({_plural(n, 'line')})" for name, n in fields]
    return [(f"{_plural(c.retyped, 'line')} held a field of another type than the "
             f"request log's, read as lines without that field: {_listed(named, len(named))}.",
             "files")]


def _left_out(r: ReportResult) -> list[tuple[str, str]]:
    if not r.left_out:
        return []
    named = ", ".join(f"{path} ({why})" for path, why in sorted(r.left_out.items()))
    return [(f"{_plural(len(r.left_out), 'input file')} LEFT OUT (their lines are not "
             f"counted): {named}.", "files")]


ALL_CLEAR = (f"Nothing needs attention: no api failed {ERROR_RATE_ATTENTION:.0%} or more "
             "of its requests, every client is ready for Kafka 4.0, and every line of every "
             "file was read.")


def summary_lines(r: ReportResult) -> list[str]:
    """The summary as the terminal shows it (without the command's own heading)."""
    s = story(r)
    lines = [s.headline, *s.traffic]
    if s.attention:
        lines.append("Needs attention:")
        lines += [f"- {sentence}" for sentence, _ in s.attention]
    else:
        lines.append(s.all_clear)
    lines.append(f"Took {r.seconds:.1f} s ({r.lines_per_second:,.0f} lines/s; reading "
                 f"{r.scan_seconds:.1f} s, tables {r.seconds - r.scan_seconds:.1f} s).")
    return lines
