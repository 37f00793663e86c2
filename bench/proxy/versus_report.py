"""`bench.proxy.versus`'s figures per arm, the issue's goals judged, RESULTS.md and chart.png.

Ratios are to `direct` and to `haproxy` of the same run. "Added" latency: for small
requests the front's percentile minus the paired broker baseline of the same moments
(`bench/proxy/latency.py`); for the fixed-rate runs the arm's percentile minus the `direct`
arm's at the same rate with the same client (the runs alternate arm by arm).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.proxy.mdfmt import fmt, table

Row = dict[str, Any]
SMALL_APIS = ("ApiVersions", "Metadata", "OffsetCommit")
KAFKALENS = ("kafkalens", "kafkalens-detail")


def _workloads(rows: list[Row], arm: str, workload: str) -> list[Row]:
    return [
        r
        for r in rows
        if r.get("kind") == "workload" and r["arm"] == arm and r["workload"] == workload
    ]


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 1)


def _median(values: Any) -> float | None:
    found = sorted(v for v in values if v is not None)
    if not found:
        return None
    mid = len(found) // 2
    return found[mid] if len(found) % 2 else round((found[mid - 1] + found[mid]) / 2, 1)


def _least(values: Any, pick: Any) -> float | None:
    found = [v for v in values if v is not None]
    return pick(found) if found else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 2)


def summarize(rows: list[Row], arm: str) -> Row:
    out: Row = {"kind": "summary", "arm": arm}
    cpu = count = 0.0
    for row in _workloads(rows, arm, "small"):
        key = row["api"].lower()
        base = row.get("baseline") or {}
        for q in ("p50", "p99"):
            out[f"{key}_{q}_us"] = row.get(f"{q}_us")
            out[f"{key}_added_{q}_us"] = _diff(row.get(f"{q}_us"), base.get(f"{q}_us"))
        if row.get("cpu_s") is not None:
            out[f"{key}_cpu_us"] = round(row["cpu_s"] / row["count"] * 1e6, 1)
            cpu, count = cpu + row["cpu_s"], count + row["count"]
    out["cpu_us_per_small_request"] = round(cpu / count * 1e6, 1) if count else None
    for r in _workloads(rows, arm, "session"):
        if "error" in r:
            out["session_error"] = r["error"]
            continue
        out["session_requests"] = r["requests"]
        out["session_requests_total"] = r["requests_total"]
        out["session_logged_total"] = r.get("logged_total")
        if r.get("cpu_s") is not None and r["requests_total"]:
            out["session_cpu_us_per_request"] = round(r["cpu_s"] / r["requests_total"] * 1e6, 1)
            out["session_cpu_s_per_gb"] = round(r["cpu_s"] / (r["bytes"] / 1e9), 2)
    moved = 0
    cpu = 0.0
    for name in ("produce", "consume"):
        done = _workloads(rows, arm, name)
        out[f"{name}_mb_s"] = max((r["mb_s"] for r in done), default=None)
        for r in done:
            if r.get("cpu_s") is not None:
                cpu, moved = cpu + r["cpu_s"], moved + r["bytes"]
    out["cpu_s_per_gb"] = round(cpu / (moved / 1e9), 2) if moved else None
    # this arm's CPU while it stood idle through the other arms' saturation windows, as a
    # share of one core over those windows' time
    idle_cpu = idle_seconds = 0.0
    for r in rows:
        if r.get("workload") in ("produce", "consume") and r.get("arm") != arm:
            used = (r.get("idle_fronts_cpu_s") or {}).get(arm)
            if used is not None:
                idle_cpu, idle_seconds = idle_cpu + used, idle_seconds + r["seconds"]
    out["idle_core_share"] = round(idle_cpu / idle_seconds, 4) if idle_seconds else None
    by_rate: dict[str, list[Row]] = {}
    for r in _workloads(rows, arm, "rate"):
        by_rate.setdefault(f"rate_{r['level']}_{r['client']}", []).append(r)
    for key, runs in by_rate.items():
        out[f"{key}_rate"] = runs[0].get("rate")
        failed = [r for r in runs if "error" in r]
        if failed:
            out[f"{key}_error"] = failed[0]["error"]
            continue
        out[f"{key}_repeats"] = len(runs)
        out[f"{key}_sustained"] = all(r["sustained"] for r in runs)
        out[f"{key}_achieved"] = min(r["achieved_rate"] for r in runs)
        for kind in ("publish", "end_to_end"):
            for q in ("p50", "p99", "p999"):
                # by repetition (round), to pair with direct's of the same round
                by_rep = {r.get("rep", 0): r[kind].get(f"{q}_us") for r in runs}
                out[f"{key}_{kind}_{q}_by_rep"] = by_rep
                out[f"{key}_{kind}_{q}_us"] = _median(by_rep.values())
                out[f"{key}_{kind}_{q}_min_us"] = _least(by_rep.values(), min)
                out[f"{key}_{kind}_{q}_max_us"] = _least(by_rep.values(), max)
        timed = [r for r in runs if r.get("cpu_s") is not None]
        rate_bytes = sum(r["bytes"] for r in timed)
        if timed and rate_bytes:
            rate_cpu = sum(r["cpu_s"] for r in timed)
            out[f"{key}_cpu_s_per_gb"] = round(rate_cpu / (rate_bytes / 1e9), 2)
    for r in _workloads(rows, arm, "idle"):
        n = r["connections"]
        out[f"idle_{n}_rss_mb"] = r.get("rss_open_mb")
        out[f"idle_{n}_kb_per_connection"] = r.get("kb_per_connection")
        if "error" in r:
            out[f"idle_{n}_error"] = r["error"]
    return out


def add_relative(summaries: list[Row]) -> None:
    """Ratios to direct and haproxy, and each rate's added latency over direct's."""
    by = {s["arm"]: s for s in summaries}
    direct, relay = by.get("direct", {}), by.get("haproxy", {})
    for s in summaries:
        for name in ("produce", "consume"):
            s[f"{name}_vs_direct"] = _ratio(s.get(f"{name}_mb_s"), direct.get(f"{name}_mb_s"))
            s[f"{name}_vs_haproxy"] = _ratio(s.get(f"{name}_mb_s"), relay.get(f"{name}_mb_s"))
        for key in [k for k in s if k.startswith("rate_") and k.endswith("_by_rep")]:
            # added in each round: the arm's minus direct's of the same round
            mine, theirs = s[key], direct.get(key) or {}
            added = [_diff(v, theirs.get(rep)) for rep, v in mine.items()]
            added = [a for a in added if a is not None]
            stem = key.removesuffix("_by_rep")
            s[f"{stem}_added_us"] = _median(added)
            s[f"{stem}_added_min_us"] = _least(added, min)
            s[f"{stem}_added_max_us"] = _least(added, max)
        for key in CPU_KEYS:
            s[f"{key}_vs_haproxy"] = _ratio(s.get(key), relay.get(key))


# The front's CPU, compared arm with arm: per small request, per request of the client
# session, per GB at saturation.
CPU_KEYS = ("cpu_us_per_small_request", "session_cpu_us_per_request", "cpu_s_per_gb")


# --- goals -------------------------------------------------------------------------


@dataclass(frozen=True)
class Goal:
    label: str
    key: str
    other: str  # the arm compared with
    factor: float  # value <= factor * other's (or >= with at_least)
    at_least: bool = False


def goals_for(summaries: list[Row]) -> list[Goal]:
    """The cost goals against haproxy (a relay that reads nothing) first, then the
    comparison with Kroxylicious and the latencies."""
    goals = [
        Goal(
            "CPU µs per small request <= 1.2x haproxy's",
            "cpu_us_per_small_request",
            "haproxy",
            1.2,
        ),
        Goal(
            "CPU µs per request, client session <= 1.2x haproxy's",
            "session_cpu_us_per_request",
            "haproxy",
            1.2,
        ),
        Goal("CPU s per GB (saturation) <= 1.3x haproxy's", "cpu_s_per_gb", "haproxy", 1.3),
        Goal("produce MB/s >= 0.95x haproxy's", "produce_mb_s", "haproxy", 0.95, True),
        Goal("consume MB/s >= 0.95x haproxy's", "consume_mb_s", "haproxy", 0.95, True),
    ]
    for api in SMALL_APIS:
        key = f"{api.lower()}_added_p99_us"
        goals.append(Goal(f"added p99 µs, {api} <= haproxy's", key, "haproxy", 1.0))
    for api in SMALL_APIS:
        key = f"{api.lower()}_added_p50_us"
        goals.append(Goal(f"added p50 µs, {api} <= 1.25x haproxy's", key, "haproxy", 1.25))
    goals += [
        Goal("CPU s per GB (saturation) <= Kroxylicious's", "cpu_s_per_gb", "kroxylicious", 1.0),
        Goal(
            "CPU µs per small request <= Kroxylicious's",
            "cpu_us_per_small_request",
            "kroxylicious",
            1.0,
        ),
    ]
    idle = sorted(
        {int(k.split("_")[1]) for s in summaries for k in s if k.endswith("_kb_per_connection")}
    )
    for n in idle:
        key = f"idle_{n}_kb_per_connection"
        goals.append(
            Goal(f"KB per idle connection ({n:,}) <= Kroxylicious's", key, "kroxylicious", 1.0)
        )
    keys = sorted({k for s in summaries for k in s if k.endswith("_publish_p50_added_us")})
    for key in keys:
        for q in ("p50", "p99"):
            k = key.replace("p50", q)
            level, client = k.split("_")[1:3]
            label = f"{client}, {level} rate: added publish {q} (µs) < Kroxylicious's"
            goals.append(Goal(label, k, "kroxylicious", 1.0))
    return goals


def judge(summaries: list[Row]) -> list[Row]:
    by = {s["arm"]: s for s in summaries}
    out: list[Row] = []
    for goal in goals_for(summaries):
        for arm in KAFKALENS:
            if arm not in by:
                continue
            value, other = by[arm].get(goal.key), by.get(goal.other, {}).get(goal.key)
            row: Row = {"kind": "goal", "arm": arm, "goal": goal.label, "key": goal.key}
            row.update(value=value, compared_with=goal.other, other=other)
            spread = _overlap(by[arm], by.get(goal.other, {}), goal.key)
            if value is None or other is None:
                row.update(met=None, verdict=f"not measured ({goal.other} or kafkalens missing)")
            elif spread is not None:
                row.update(met=None, verdict=f"not separable: {spread}")
            else:
                limit = goal.factor * other
                # "lower than": strictly below for latency, at most for the others
                strict = goal.label.endswith("< Kroxylicious's")
                met = (
                    value >= limit
                    if goal.at_least
                    else (value < limit if strict else value <= limit)
                )
                row.update(met=met, limit=round(limit, 2), verdict="met" if met else "missed")
            out.append(row)
    return out


def _overlap(mine: Row, theirs: Row, key: str) -> str | None:
    """For an added latency measured in several rounds: None when the two arms' ranges
    over the rounds do not overlap (the order holds in every round's company), else the
    two ranges. A goal on one round has no range (None)."""
    if not key.endswith("_added_us"):
        return None
    stem = key.removesuffix("_added_us")
    a = (mine.get(f"{stem}_added_min_us"), mine.get(f"{stem}_added_max_us"))
    b = (theirs.get(f"{stem}_added_min_us"), theirs.get(f"{stem}_added_max_us"))
    if None in a or None in b or a[0] == a[1] or b[0] == b[1]:
        return None
    if a[1] < b[0] or b[1] < a[0]:  # type: ignore[operator]
        return None
    return f"ranges overlap over the rounds: {_range(a)} against {_range(b)} µs"


def _range(pair: tuple[Any, Any]) -> str:
    return f"{fmt(pair[0])}..{fmt(pair[1])}"


# --- writing -----------------------------------------------------------------------


def write_all(out: Path, run: Row, rows: list[Row]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    arms = list(run.get("arms", {}))
    summaries = [summarize(rows, arm) for arm in arms]
    add_relative(summaries)
    judged = judge(summaries)
    with open(out / "results.jsonl", "w") as f:
        for row in [run, *rows, *summaries, *judged]:
            f.write(json.dumps(row) + "\n")
    (out / "RESULTS.md").write_text(markdown(run, rows, summaries, judged))
    write_chart(
        out / "chart.png", summaries, f"in front of Apache Kafka {run['kafka']}, {run['started']}"
    )


def markdown(run: Row, rows: list[Row], summaries: list[Row], judged: list[Row]) -> str:
    lines = [
        "# kafkalens and the alternatives, in front of Apache Kafka",
        "",
        f"Written by `{run['command']}` at commit {run['commit']}, {run['started']},"
        f" {run['took_seconds'] / 60:.0f} minutes. ({run['size']} sizes: {_sizes(run['sizes'])}.)",
        "",
        f"* Machine: {run['cpus']} CPUs; pinning: {run['pinning']}.",
        f"* Load before: `{run['uptime_start']}`",
        f"* Load after: `{run['uptime_end']}`",
        f"* {run['python']}; {run['java']}; librdkafka {run['librdkafka']}.",
    ]
    counts = run.get("idle_counts")
    if counts and list(counts) != list(run["sizes"]["idle"]):
        lines.append(
            f"* Idle connections measured: {', '.join(f'{n:,}' for n in counts)}, not"
            f" {', '.join(f'{n:,}' for n in run['sizes']['idle'])}: each front holds two"
            f" descriptors a connection and the hard limit here is {run['fd_limit']:,}."
        )
    skipped = run.get("skipped", {}).items()
    lines += [f"* {name} not measured: {_plain(why)}" for name, why in skipped]
    if run.get("note"):
        lines.append(f"* {run['note']}")
    lines += ["", "Arms:", ""]
    lines += [f"* `{arm}`: {'; '.join(notes)}" for arm, notes in run.get("arms", {}).items()]
    lines += ["", "## Goals", "", *_goals(judged), ""]
    lines += ["## The front's CPU, arm by arm", "", CPU_NOTE, "", *_cpu(summaries), ""]
    lines += ["## Small requests", "", SMALL_NOTE, "", *_small(summaries), ""]
    lines += ["## A client session", "", SESSION_NOTE, "", *_session(summaries), ""]
    lines += ["## Saturation, librdkafka", "", *_saturation(summaries), ""]
    lines += ["## Fixed rate, 1 KiB records", "", RATE_NOTE, "", *_rates(rows, summaries), ""]
    lines += ["## Idle connections", "", *_idle(summaries), ""]
    lines += ["![chart](chart.png)", ""]
    return "\n".join(lines)


SATURATION_NOTE = (
    "librdkafka produces the round's records of 1 KiB as fast as it can through one arm,"
    " then consumes them; every other front stays up, idle, on the same core. The last"
    " column is what an arm burns meanwhile (its CPU over the other arms' windows, as a"
    " share of one core): taken from whichever arm is measured."
)
SMALL_NOTE = (
    "One request at a time on one connection; blocks of 50 alternate with the same"
    " requests straight to the broker (*broker*): added = front minus broker, same moments."
    " CPU is the front process's (/proc utime+stime, 10 ms ticks) over the timed requests."
)
CPU_NOTE = (
    "The front process's CPU (/proc utime+stime) per small request (the three below,"
    " weighted alike), per request of the client session (its own mix, below) and per GB"
    " at saturation (produce + consume), and each as a multiple of haproxy's (a relay that"
    " reads nothing). `python-relay` is the floor of a Python proxy, `kafkalens-bare`"
    " kafkalens's forwarding alone (framing, matching, no observation): the steps from"
    " one to the next are what forwarding and what observing cost."
)
SESSION_NOTE = (
    "A librdkafka producer (acks=all, linger.ms 5) and a consumer in a classic group"
    " (auto commit every second), from their start to their close (`bench/proxy/session.py`):"
    " the requests are those the clients counted themselves (librdkafka's statistics), the"
    " CPU the front's over the whole session. *In the request log*: the session's request"
    " lines in a logging arm's log, which also holds what the clients sent while closing"
    " (LeaveGroup, a last commit), after their count was taken."
)
RATE_NOTE = (
    "Publish: send() to acknowledgement (acks=all). End-to-end: send() to the consumer"
    " holding the record. Added: the arm's percentile minus direct's at the same rate and"
    " client. *sustained*: the steady send rate within 2 % of the target, every record"
    " acknowledged and read back."
)


def _plain(text: str) -> str:
    """A log excerpt without its terminal colours."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _sizes(sizes: Row) -> str:
    return ", ".join(f"{k} {v}" for k, v in sizes.items())


def _goals(judged: list[Row]) -> list[str]:
    rows = [
        [
            r["arm"],
            r["goal"],
            fmt(r["value"], 2),
            f"{r['compared_with']} {fmt(r['other'], 2)}",
            {True: "✅ met", False: "❌ missed", None: "– " + r["verdict"]}[r["met"]],
        ]
        for r in judged
    ]
    return table(["arm", "goal", "kafkalens", "compared with", "verdict"], rows)


def _small(summaries: list[Row]) -> list[str]:
    heads = ["arm"]
    for api in SMALL_APIS:
        heads += [f"{api} p50 / p99 µs", "added p50 / p99 µs", "CPU µs"]
    heads.append("CPU µs / request")
    rows = []
    for s in summaries:
        line = [s["arm"]]
        for api in SMALL_APIS:
            k = api.lower()
            line += [
                f"{fmt(s.get(f'{k}_p50_us'))} / {fmt(s.get(f'{k}_p99_us'))}",
                f"{fmt(s.get(f'{k}_added_p50_us'))} / {fmt(s.get(f'{k}_added_p99_us'))}",
                fmt(s.get(f"{k}_cpu_us")),
            ]
        line.append(fmt(s.get("cpu_us_per_small_request")))
        rows.append(line)
    return table(heads, rows)


def _cpu(summaries: list[Row]) -> list[str]:
    heads = ["arm", "µs / small request", "× haproxy", "µs / session request", "× haproxy"]
    heads += ["s / GB", "× haproxy"]
    rows = []
    for s in summaries:
        if s["arm"] == "direct":
            continue
        line = [s["arm"]]
        for key in CPU_KEYS:
            line += [
                fmt(s.get(key), 2 if key == "cpu_s_per_gb" else 1),
                _x(s.get(f"{key}_vs_haproxy")),
            ]
        rows.append(line)
    return table(heads, rows)


def _session(summaries: list[Row]) -> list[str]:
    apis: dict[str, int] = {}
    for s in summaries:
        for api, n in (s.get("session_requests") or {}).items():
            apis[api] = apis.get(api, 0) + n
    shown = sorted(apis, key=lambda a: -apis[a])
    heads = ["arm", "requests", *shown, "in the request log", "front CPU µs / request"]
    heads.append("front CPU s / GB")
    rows = []
    for s in summaries:
        if "session_error" in s:
            rows.append([s["arm"], "failed: " + s["session_error"][:120].replace("|", "/")])
            continue
        mix = s.get("session_requests") or {}
        line = [s["arm"], fmt(s.get("session_requests_total"), 0)]
        line += [fmt(mix.get(api, 0), 0) for api in shown]
        line.append(fmt(s.get("session_logged_total"), 0))
        line += [fmt(s.get("session_cpu_us_per_request")), fmt(s.get("session_cpu_s_per_gb"), 2)]
        rows.append(line)
    return table(heads, rows)


def _x(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}x"


def _saturation(summaries: list[Row]) -> list[str]:
    rows = [
        [
            s["arm"],
            fmt(s.get("produce_mb_s")),
            _x(s.get("produce_vs_direct")),
            _x(s.get("produce_vs_haproxy")),
            fmt(s.get("consume_mb_s")),
            _x(s.get("consume_vs_direct")),
            _x(s.get("consume_vs_haproxy")),
            fmt(s.get("cpu_s_per_gb"), 2),
            _percent(s.get("idle_core_share")),
        ]
        for s in summaries
    ]
    heads = ["arm", "produce MB/s", "× direct", "× haproxy", "consume MB/s", "× direct"]
    heads += ["× haproxy", "front CPU s / GB", "idle through the others' windows"]
    return [SATURATION_NOTE, "", *table(heads, rows)]


def _percent(share: float | None) -> str:
    return "" if share is None else f"{share * 100:.1f} % of a core"


def _rates(rows: list[Row], summaries: list[Row]) -> list[str]:
    levels = {"low": 0, "high": 1}
    keys = sorted(
        {(r["level"], r["client"]) for r in rows if r.get("workload") == "rate"},
        key=lambda k: (levels.get(k[0], 2), k[1]),
    )
    out: list[str] = []
    for level, client in keys:
        k = f"rate_{level}_{client}"
        rate = next((s.get(f"{k}_rate") for s in summaries if s.get(f"{k}_rate")), None)
        limit = next(
            (r for r in rows if r.get("workload") == "rate-limit" and r["client"] == client), None
        )
        why = "a rate every arm should sustain"
        if level == "high" and limit is None:
            why = "the rate chosen with --high-rate"
        if level == "high" and limit is not None:
            why = (
                f"{limit['high_rate'] / limit['acked_rate']:.1f}x of this client's own limit"
                f" through no proxy, {fmt(limit['acked_rate'], 0)} records/s acknowledged"
            )
        out += [f"**{client}, {fmt(rate, 0)} records/s** ({level}: {why})", ""]
        lines = []
        rated = [s for s in summaries if s.get(f"{k}_rate") is not None]
        for s in rated:
            if f"{k}_error" in s:
                lines.append(
                    [s["arm"], "failed: " + s[f"{k}_error"][:120].replace("|", "/")] + [""] * 8
                )
                continue
            lines.append(
                [
                    s["arm"],
                    "yes"
                    if s.get(f"{k}_sustained")
                    else f"no ({fmt(s.get(f'{k}_achieved'), 0)}/s)",
                    _triple(s, f"{k}_publish", ""),
                    _spread(s, f"{k}_publish_p50"),
                    _spread(s, f"{k}_publish_p99"),
                    _triple(s, f"{k}_end_to_end", ""),
                    _spread(s, f"{k}_end_to_end_p50"),
                    _spread(s, f"{k}_end_to_end_p99"),
                    fmt(s.get(f"{k}_cpu_s_per_gb"), 2),
                ]
            )
        runs = max((s.get(f"{k}_repeats") or 0 for s in rated), default=0)
        heads = ["arm", "sustained", "publish p50 / p99 / p99.9 ms", "added p50 ms"]
        heads += ["added p99 ms", "end-to-end p50 / p99 / p99.9 ms", "added p50 ms"]
        heads += ["added p99 ms", "front CPU s / GB"]
        out += table(heads, lines)
        out.append(
            f"Added latency: the median over {runs} rounds [least..most]. The fronts by it,"
            " lowest first (`<`: apart in every round, `≈`: the rounds' ranges overlap,"
            " `?`: one round):"
        )
        out.append("")
        for kind, q in (("publish", "p50"), ("publish", "p99"), ("end_to_end", "p99")):
            out.append(f"* {kind.replace('_', '-')} {q}: {_ranking(rated, f'{k}_{kind}_{q}')}")
        out.append("")
    return out


def _spread(s: Row, stem: str) -> str:
    """The median added latency over the rounds in ms, with its least and most."""
    if s["arm"] == "direct":
        return "–"
    mid, low, high = (s.get(f"{stem}_added{x}_us") for x in ("", "_min", "_max"))
    if mid is None:
        return "–"
    if low is None or high is None or low == high:
        return f"{mid / 1000:.2f}"
    return f"{mid / 1000:.2f} [{low / 1000:.2f}..{high / 1000:.2f}]"


def _ranking(rated: list[Row], stem: str) -> str:
    """The proxies by median added latency; `<` where the rounds' ranges do not overlap
    (the order held in every round), `≈` where they do."""
    arms = [s for s in rated if s["arm"] != "direct" and s.get(f"{stem}_added_us") is not None]
    arms.sort(key=lambda s: s[f"{stem}_added_us"])
    if not arms:
        return "not measured"
    text = f"{arms[0]['arm']} {arms[0][f'{stem}_added_us'] / 1000:.2f}"
    for before, s in zip(arms, arms[1:], strict=False):
        one_round = any(
            x.get(f"{stem}_added_min_us") == x.get(f"{stem}_added_max_us") for x in (before, s)
        )
        apart = _overlap(before, s, f"{stem}_added_us") is None
        sign = "?" if one_round else "<" if apart else "≈"
        text += f" {sign} {s['arm']} {s[f'{stem}_added_us'] / 1000:.2f}"
    return text


def _triple(s: Row, prefix: str, added: str) -> str:
    values = [s.get(f"{prefix}_{q}{added}_us") for q in ("p50", "p99", "p999")]
    return " / ".join("–" if v is None else f"{v / 1000:.2f}" for v in values)


def _idle(summaries: list[Row]) -> list[str]:
    counts = sorted(
        {int(k.split("_")[1]) for s in summaries for k in s if k.endswith("_kb_per_connection")}
    )
    heads = ["arm"]
    for n in counts:
        heads += [f"{n:,} open: RSS MB", "KB / connection"]
    rows = []
    for s in summaries:
        line = [s["arm"]]
        for n in counts:
            if f"idle_{n}_error" in s:
                line += ["failed", s[f"idle_{n}_error"][:80]]
            else:
                line += [fmt(s.get(f"idle_{n}_rss_mb")), fmt(s.get(f"idle_{n}_kb_per_connection"))]
        rows.append(line)
    return table(heads, rows)


# --- the chart ---------------------------------------------------------------------


def write_chart(path: Path, summaries: list[Row], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    proxies = [s for s in summaries if s["arm"] != "direct"]
    arms = [s["arm"] for s in proxies]
    rate_keys = sorted(
        {
            k.removesuffix("_publish_p50_added_us")
            for s in proxies
            for k in s
            if k.endswith("_publish_p50_added_us")
        }
    )
    panels: list[tuple[str, list[tuple[str, str]]]] = [
        (
            "Added publish latency p50, ms (p99s in the tables)",
            [(f"{k}_publish_p50_added_us", k.removeprefix("rate_")) for k in rate_keys],
        ),
        ("Small requests: added p50, µs", [(f"{a.lower()}_added_p50_us", a) for a in SMALL_APIS]),
        (
            "Throughput × haproxy",
            [("produce_vs_haproxy", "produce"), ("consume_vs_haproxy", "consume")],
        ),
        ("Front CPU s per GB (saturation)", [("cpu_s_per_gb", "produce + consume")]),
        (
            "Front CPU µs per request",
            [
                ("cpu_us_per_small_request", "small: ApiVersions, Metadata, OffsetCommit"),
                ("session_cpu_us_per_request", "a client session's mix"),
            ],
        ),
        (
            "KB per idle connection",
            [
                (k, k.split("_")[1] + " open")
                for k in sorted({k for s in proxies for k in s if k.endswith("_kb_per_connection")})
            ],
        ),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(18, 9))
    for ax, (name, series) in zip(axes.flat, panels, strict=True):
        width = 0.8 / max(1, len(series))
        for i, (key, label) in enumerate(series):
            scale = 1000.0 if ", ms" in name else 1.0
            values = [_num(s.get(key)) / scale for s in proxies]
            xs = [n + (i - (len(series) - 1) / 2) * width for n in range(len(arms))]
            bars = ax.bar(xs, values, width, label=label)
            ax.bar_label(bars, labels=[_label(v) for v in values], fontsize=6)
        ax.set_xticks(range(len(arms)), arms, rotation=15, fontsize=8)
        ax.set_title(name, fontsize=10)
        if len(series) > 1:
            ax.legend(fontsize=6)
    fig.suptitle(f"kafkalens and the alternatives, {title}")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _num(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else math.nan


def _label(v: float) -> str:
    if math.isnan(v):
        return ""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"
