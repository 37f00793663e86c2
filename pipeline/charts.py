"""The report's charts, rendered with matplotlib's Agg backend to base64 PNG."""

from __future__ import annotations

import base64
import io
import math
from collections import defaultdict
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on servers or in spark-submit drivers
import matplotlib.pyplot as plt  # noqa: E402

Row = dict[str, Any]


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def with_gaps(points: list[tuple[Any, float]], step_seconds: int) -> tuple[list, list]:
    """The points in time order, with a NaN inserted where buckets are missing: the line
    breaks there instead of joining distant points as if data were between them."""
    xs: list[Any] = []
    ys: list[float] = []
    for x, y in sorted(points):
        if xs and (x - xs[-1]).total_seconds() > step_seconds:
            xs.append(xs[-1] + (x - xs[-1]) / 2)
            ys.append(math.nan)
        xs.append(x)
        ys.append(y)
    return xs, ys


def latency_chart(series: list[Row], apis: list[str], step_seconds: int) -> str | None:
    """p95 service latency over time for `apis` (the busiest, report.CHART_APIS); None
    when there is nothing to draw. `series` rows are latency_over_time's, buckets
    `step_seconds` apart."""
    points: dict[str, list[tuple[Any, float]]] = defaultdict(list)
    for row in series:
        if row["api"] in apis and row["p95_ms"] is not None:
            points[row["api"]].append((row["bucket"], row["p95_ms"]))
    if not points:
        return None
    fig, ax = plt.subplots(figsize=(9, 3.5))
    for api in apis:
        if points.get(api):
            xs, ys = with_gaps(points[api], step_seconds)
            ax.plot(xs, ys, marker=".", label=api)
    ax.xaxis_date(tz="UTC")  # the buckets are aware UTC times: ticks in UTC too
    ax.set_yscale("log")  # a Produce and a Metadata lookup differ 100-fold
    ax.set_ylabel("p95 service latency (ms, log)")
    ax.set_title("Service latency by api over time (UTC; long polls and rebalances apart)")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))  # off the lines
    fig.autofmt_xdate()
    return _png(fig)


def software_chart(totals: list[Row]) -> str | None:
    """Requests by client software name/version, busiest first (`totals`: name,
    version, requests; report.CHART_BARS rows at most)."""
    if not totals:
        return None
    top = [(f"{r['client_software_name'] or 'unknown'} {r['client_software_version'] or ''}"
            .strip(), r["requests"]) for r in totals]
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(top) + 1))
    ax.barh([k for k, _ in reversed(top)], [v for _, v in reversed(top)])
    ax.set_xlabel("requests")
    ax.set_title("Requests by client software")
    return _png(fig)
