"""The memory probe of support.hostile checked, so a bound asserted with it means something."""

from __future__ import annotations

import time

from support.hostile import MIB, PeakGrowth


def test_the_probe_sees_a_short_lived_allocation() -> None:
    with PeakGrowth() as grown:
        block = b"\x01" * (64 * MIB)  # touched pages, unlike a calloc'd bytearray
        del block
    assert grown.bytes >= 48 * MIB, grown


def test_the_probe_forgets_an_earlier_peak() -> None:
    block = b"\x01" * (64 * MIB)
    del block
    with PeakGrowth() as grown:
        time.sleep(0.05)
    assert grown.bytes < 16 * MIB, grown
