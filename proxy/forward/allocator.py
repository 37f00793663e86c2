"""Keep glibc's malloc from handing large buffers back to the kernel after every frame.

A Produce request or Fetch response the observer reads whole (~1 MB and ~4.6 MB in
the benchmark) is joined from its chunks into one buffer, used and freed. glibc's
default thresholds adapt to such sizes but keep trimming the heap's top as soon as
the free space there passes twice the last large allocation, so the next frame
faults the same pages in again (zeroed by the kernel): through the proxy with
librdkafka, tens of minor faults per MB, and the system CPU per GB nearly halved once
fixed thresholds stop it (bench/PROFILE.md, "Kept, and what it saved").

Fixed thresholds: allocations up to 32 MiB come from the heap (glibc's largest
allowed value), and up to 64 MiB of free space stays at the heap's top for the next
frame. The cost is that much memory kept after a burst of large frames, bounded.
Only on glibc; a threshold the user set through glibc's own environment variables
(MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_) is left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 2**20
TRIM_THRESHOLD = 64 * 2**20
_SETTINGS = (
    ("MALLOC_MMAP_THRESHOLD_", M_MMAP_THRESHOLD, MMAP_THRESHOLD),
    ("MALLOC_TRIM_THRESHOLD_", M_TRIM_THRESHOLD, TRIM_THRESHOLD),
)


def keep_large_buffers() -> list[str]:
    """Set the thresholds; returns what was set (empty without glibc's mallopt)."""
    mallopt = _glibc_mallopt()
    if mallopt is None:
        return []
    done = []
    for variable, option, value in _SETTINGS:
        if variable not in os.environ and mallopt(option, value) == 1:
            done.append(f"{variable}={value}")
    return done


def _glibc_mallopt() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        if not hasattr(libc, "gnu_get_libc_version"):
            return None  # musl and others: different allocator, different options
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt
