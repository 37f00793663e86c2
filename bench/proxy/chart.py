"""chart.png: the per-arm figures side by side (matplotlib, Agg backend)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402

Row = dict[str, Any]
# (title, summary keys, legend labels, log scale)
PANELS: tuple[tuple[str, tuple[str, ...], tuple[str, ...], bool], ...] = (
    ("Throughput, MB/s", ("produce_mb_s", "consume_mb_s"), ("produce", "consume"), False),
    (
        "Throughput and requests/s, × direct",
        ("produce_vs_direct", "consume_vs_direct", "busy_vs_direct"),
        ("produce", "consume", "many connections"),
        False,
    ),
    (
        "Small requests one at a time, µs",
        ("apiversions_p50_us", "apiversions_p99_us", "metadata_p50_us", "metadata_p99_us"),
        ("ApiVersions p50", "ApiVersions p99", "Metadata p50", "Metadata p99"),
        True,
    ),
    ("Many connections, requests/s", ("busy_requests_per_s",), ("requests/s",), False),
    (
        "Metadata, all topics, µs",
        ("metadata_all_p50_us", "metadata_all_p99_us"),
        ("p50", "p99"),
        True,
    ),
    ("Proxy CPU s per GB", ("cpu_s_per_gb",), ("produce + consume",), False),
    (
        "Proxy CPU µs per small request",
        ("cpu_us_per_small_request", "busy_cpu_us_per_request"),
        ("one at a time", "many connections"),
        False,
    ),
    ("Proxy memory, MB", ("idle_rss_mb", "peak_rss_mb"), ("idle connections open", "peak"), False),
)

# Dashed lines: the goals for kafkalens.
GOAL_LINES = {
    "Throughput and requests/s, × direct": 0.85,
    "Proxy CPU s per GB": 1.5,
    "Proxy CPU µs per small request": 60.0,
    "Proxy memory, MB": 150.0,
}


def write_chart(path: Path, summaries: list[Row], title: str) -> None:
    fig, axes = plt.subplots(2, 4, figsize=(20, 8.5))
    for ax, (name, keys, labels, log) in zip(axes.flat, PANELS, strict=True):
        _bars(ax, summaries, keys, labels)
        ax.set_title(name, fontsize=10)
        if log:
            ax.set_yscale("log")
        if name in GOAL_LINES:
            ax.axhline(GOAL_LINES[name], color="grey", linestyle="--", linewidth=1)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _bars(ax: Axes, summaries: list[Row], keys: tuple[str, ...], labels: tuple[str, ...]) -> None:
    arms = [s["arm"] for s in summaries]
    width = 0.8 / len(keys)
    for i, (key, label) in enumerate(zip(keys, labels, strict=True)):
        values = [_number(s.get(key)) for s in summaries]
        xs = [n + (i - (len(keys) - 1) / 2) * width for n in range(len(arms))]
        bars = ax.bar(xs, values, width, label=label)
        ax.bar_label(bars, labels=[_label(v) for v in values], fontsize=6)
    ax.set_xticks(range(len(arms)), arms, rotation=20, fontsize=8)
    if len(keys) > 1:
        ax.legend(fontsize=7)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else math.nan


def _label(value: float) -> str:
    if math.isnan(value):
        return ""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
