"""Mergeable latency histograms: percentiles from per-partition partial aggregates.

A latency x > 0 falls in bin ceil(log(x) / log(1.01)): the values in a bin differ by
less than 1%. A partial keeps per bin its count and its smallest and largest value,
which merge exactly across partitions (sum, min, max). The percentile q of n
latencies is read off the bin holding the value of rank ceil(q n): that bin's
smallest value if the rank falls in its lower half, else its largest. So a
percentile is a latency that occurred (as with percentile_approx, which this
replaces), within 1% of the exact value at its rank, and off in rank by at most half
of its bin's count (none when the bin holds one value, as for small groups). The bins
from 0.001 ms to 1 hour number about 2,200; a group holds only those its latencies
fill.
"""

from __future__ import annotations

import math

GAMMA = 1.01
INV_LN_GAMMA = 1 / math.log(GAMMA)
# Not a log bin: zero (and negative) latencies, and infinite or NaN ones.
ZERO_BIN = -(2**31)
TOP_BIN = 2**31 - 1

# A merged histogram: (bin, count, smallest, largest) per bin, sorted by bin.
Hist = list[tuple[int, int, float, float]]


def bin_of(x: float) -> int:
    if x > 0.0 and x != math.inf:
        return math.ceil(math.log(x) * INV_LN_GAMMA)
    return ZERO_BIN if x <= 0.0 else TOP_BIN  # NaN compares false: top, as Spark sorts it


def percentile(hist: Hist, n: int, q: float) -> float | None:
    """The q-th percentile of a histogram of n values; None when n is 0. (The rule
    itself: the report applies it to every key at once, traffic._Histograms, and
    test_pipeline_tables holds the two equal.)"""
    if n <= 0:
        return None
    rank = max(1, math.ceil(n * q))
    below = 0
    for _, count, lo, hi in hist:
        if below + count >= rank:
            # The rank's place in this bin: its lower half gets the bin's smallest value.
            return lo if (rank - below) * 2 <= count + 1 else hi
        below += count
    return None
