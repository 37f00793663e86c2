"""The issue's goals for kafkalens, each judged met/missed with its margin."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Row = dict[str, Any]
IDLE_GOAL_CONNECTIONS = 1000


@dataclass(frozen=True)
class Goal:
    key: str  # a field of the arm's summary row
    label: str
    limit: float
    at_least: bool  # True: value >= limit; False: value <= limit
    unit: str


GOALS = (
    Goal("produce_vs_direct", "produce throughput vs direct", 0.85, True, "x"),
    Goal("consume_vs_direct", "consume throughput vs direct", 0.85, True, "x"),
    Goal("produce_vs_tansu_proxy", "produce throughput vs tansu-proxy", 2.5, True, "x"),
    Goal("consume_vs_tansu_proxy", "consume throughput vs tansu-proxy", 2.5, True, "x"),
    Goal("apiversions_added_p50_us", "added p50, ApiVersions", 100, False, "µs"),
    Goal("apiversions_added_p99_us", "added p99, ApiVersions", 250, False, "µs"),
    Goal("metadata_added_p50_us", "added p50, Metadata", 100, False, "µs"),
    Goal("metadata_added_p99_us", "added p99, Metadata", 250, False, "µs"),
    Goal("cpu_s_per_gb", "CPU per GB forwarded (produce + consume)", 1.5, False, "s"),
    Goal("cpu_us_per_small_request", "CPU per small request/response", 60, False, "µs"),
    Goal("idle_rss_mb", "RSS with 1,000 open connections", 150, False, "MB"),
)


def judge(summary: Row, relay: Row | None = None) -> list[Row]:
    """Each goal for one kafkalens arm. `relay` is the haproxy arm's summary from the
    same run, if it ran: a goal a plain TCP relay misses on this host too is a limit
    of the host (the goals were set where haproxy added ~66 µs), not of kafkalens."""
    rows = [_judge_one(goal, summary) for goal in GOALS]
    if relay is not None:
        for goal, row in zip(GOALS, rows, strict=True):
            _add_relay(goal, row, relay)
    return rows


def _add_relay(goal: Goal, row: Row, relay: Row) -> None:
    value = relay.get(goal.key)
    row["relay_value"] = value
    if value is None:
        row["relay_met"] = None
    else:
        row["relay_met"] = value >= goal.limit if goal.at_least else value <= goal.limit


def _judge_one(goal: Goal, summary: Row) -> Row:
    value = summary.get(goal.key)
    sign = "≥" if goal.at_least else "≤"
    row: Row = {
        "kind": "goal",
        "arm": summary["arm"],
        "goal": goal.label,
        "key": goal.key,
        "target": f"{sign} {_fmt(goal.limit)} {goal.unit}".replace(" x", "x"),
        "value": value,
        "unit": goal.unit,
    }
    if goal.key == "idle_rss_mb" and summary.get("idle_connections") != IDLE_GOAL_CONNECTIONS:
        value = None
        row["note"] = f"measured with {summary.get('idle_connections')} connections, not 1,000"
    if value is None:
        row.update(met=None, verdict="not measured")
        return row
    margin = value - goal.limit if goal.at_least else goal.limit - value
    row["met"] = margin >= 0
    row["margin"] = round(margin, 2)
    row["verdict"] = _verdict(margin, goal)
    return row


def _verdict(margin: float, goal: Goal) -> str:
    word = "met" if margin >= 0 else "missed"
    pct = abs(margin) / goal.limit * 100 if goal.limit else 0.0
    amount = f"{_fmt(abs(margin))}{'x' if goal.unit == 'x' else ' ' + goal.unit}"
    return f"{word} by {amount} ({pct:.0f}%)"


def _fmt(value: float) -> str:
    if value == int(value) and abs(value) >= 10:
        return f"{int(value):,}"
    return f"{value:.2f}".rstrip("0").rstrip(".") if abs(value) < 10 else f"{value:,.0f}"
