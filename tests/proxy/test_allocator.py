"""proxy/forward/allocator.py: large frames freed and joined again stop faulting pages in."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from proxy.forward.allocator import _glibc_mallopt

# Frames joined from chunks and freed, as the observer does with Produce requests:
# sizes vary a little, as real batches do. Prints the minor page faults it caused.
JOIN_FRAMES = """
import json, os, random, resource, sys
if sys.argv[1] == "keep":
    from proxy.forward.allocator import keep_large_buffers
    keep_large_buffers()
chunks = [os.urandom(262144) for _ in range(4)]
ballast = [bytes(300_000) for _ in range(8)]  # other large objects living on the heap
rng = random.Random(7)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(300):
    pieces = [memoryview(c) for c in chunks[:3]] + [memoryview(chunks[3])[: rng.randrange(200_000, 262_144)]]
    frame = b"".join(pieces)
    ballast[i % 8] = bytes(rng.randrange(250_000, 400_000))
    del frame
print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before))
"""


def faults(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    done = subprocess.run(
        [sys.executable, "-c", JOIN_FRAMES, mode], env=env, capture_output=True, text=True, check=True
    )
    return int(json.loads(done.stdout))


@pytest.mark.skipif(_glibc_mallopt() is None, reason="not glibc: its mallopt thresholds do not apply")
def test_fixed_thresholds_stop_refaulting_large_frames() -> None:
    default, kept = faults("default"), faults("keep")
    assert kept * 5 < default, (default, kept)


def test_a_threshold_the_user_set_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    from proxy.forward import allocator

    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1000000")
    calls: list[tuple[int, int]] = []

    def mallopt(option: int, value: int) -> int:
        calls.append((option, value))
        return 1

    monkeypatch.setattr(allocator, "_glibc_mallopt", lambda: mallopt)
    assert allocator.keep_large_buffers() == [f"MALLOC_MMAP_THRESHOLD_={allocator.MMAP_THRESHOLD}"]
    assert calls == [(allocator.M_MMAP_THRESHOLD, allocator.MMAP_THRESHOLD)]
