"""The report's charts, rendered with matplotlib's Agg backend to base64 PNG."""

from __future__ import annotations

import base64
import io
from collections import defaultdict
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on servers or in spark-submit drivers
import matplotlib.pyplot as plt  # noqa: E402

Row = dict[str, Any]
MAX_SERIES = 6
MAX_BARS = 15


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def latency_chart(series: list[Row], apis: list[str]) -> str | None:
    """p95 latency over time for the busiest apis; None when there is nothing to draw."""
    points: dict[str, list[tuple[Any, float]]] = defaultdict(list)
    for row in series:
        if row["api"] in apis[:MAX_SERIES] and row["p95_ms"] is not None:
            points[row["api"]].append((row["bucket"], row["p95_ms"]))
    if not points:
        return None
    fig, ax = plt.subplots(figsize=(9, 3.5))
    for api in apis[:MAX_SERIES]:
        if points.get(api):
            xs, ys = zip(*sorted(points[api]), strict=True)
            ax.plot(xs, ys, marker=".", label=api)
    ax.set_yscale("log")  # a Fetch long poll and a Metadata lookup differ 1000-fold
    ax.set_ylabel("p95 latency (ms, log scale)")
    ax.set_title("Latency by api over time (UTC)")
    ax.legend(fontsize="small")
    fig.autofmt_xdate()
    return _png(fig)


def software_chart(usage: list[Row]) -> str | None:
    """Requests by client software name/version, busiest first."""
    totals: dict[str, int] = defaultdict(int)
    for row in usage:
        name = row["client_software_name"] or "unknown"
        totals[f"{name} {row['client_software_version'] or ''}".strip()] += row["requests"]
    if not totals:
        return None
    top = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_BARS]
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(top) + 1))
    ax.barh([k for k, _ in reversed(top)], [v for _, v in reversed(top)])
    ax.set_xlabel("requests")
    ax.set_title("Requests by client software")
    return _png(fig)
