"""Percentiles and summaries of latency samples (nanoseconds in, microseconds out)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already-sorted values (q in 0..100)."""
    if not sorted_values:
        return float("nan")
    rank = max(0, min(len(sorted_values) - 1, round(q / 100 * len(sorted_values) + 0.5) - 1))
    return float(sorted_values[rank])


def summarize_ns(samples_ns: Sequence[int]) -> dict[str, Any]:
    """count, p50/p90/p99/max and mean in microseconds."""
    values = sorted(samples_ns)
    if not values:
        return {"count": 0}
    return {
        "count": len(values),
        "p50_us": round(percentile(values, 50) / 1000, 1),
        "p90_us": round(percentile(values, 90) / 1000, 1),
        "p99_us": round(percentile(values, 99) / 1000, 1),
        "max_us": round(values[-1] / 1000, 1),
        "mean_us": round(sum(values) / len(values) / 1000, 1),
    }
