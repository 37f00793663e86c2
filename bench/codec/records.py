"""Timings of codec.records on 1 MiB of records: header summary, CRC, full iteration.

Not a test. Run from the repository root: .venv/bin/python bench/codec/records.py
Batches are built with kafka-python (the tests' oracle), so the test extras are needed.
"""

from __future__ import annotations

import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from support.records_oracle import Spec, build_v2  # noqa: E402

from codec.records import iter_batches, iter_records, summarize  # noqa: E402

MIB = 1 << 20


def specs(count: int, value_size: int) -> list[Spec]:
    out: list[Spec] = []
    for i in range(count):
        value = (b"%08d-" % i * (value_size // 9 + 1))[:value_size]
        out.append((1_700_000_000_000 + i, b"key-%d" % i, value, [("trace", b"%016x" % i)]))
    return out


def per_call(fn: Callable[[], object], seconds: float = 0.5) -> float:
    """Best-of-5 CPU microseconds per call (CPU time: other processes share the box)."""
    fn()
    calls = 1
    while _timed(fn, calls) < seconds / 5:
        calls *= 2
    best = min(_timed(fn, calls) for _ in range(5))
    return best / calls * 1e6


def _timed(fn: Callable[[], object], calls: int) -> float:
    start = time.process_time()
    for _ in range(calls):
        fn()
    return time.process_time() - start


def report(label: str, micros: float, records: int = 0) -> None:
    extra = f"  ({micros * 1000 / records:7.0f} ns/record)" if records else ""
    print(f"{label:52s} {micros:12.1f} µs/call{extra}")


def iterate(buf: bytes) -> Callable[[], object]:
    return lambda: sum(1 for _ in iter_records(buf))


def main() -> None:
    one = build_v2(specs(1000, 1000))  # one ~1 MiB batch, 1000 records of 1 KB
    small = build_v2(specs(10_000, 60))  # ~1 MiB, 10000 small records
    many = b"".join(build_v2(specs(16, 1000), base_offset=16 * i) for i in range(64))
    probe = struct.Struct(">qiibIhiqqqhii")
    header = bytes(61)
    report(
        "calibration: one 61-byte struct.unpack_from", per_call(lambda: probe.unpack_from(header))
    )
    print(f"sizes: one {len(one)} B, small {len(small)} B, many {len(many)} B (64 batches)")
    report("iter_batches, 1 MiB batch", per_call(lambda: list(iter_batches(one))))
    report(
        "iter_batches verify_crc, 1 MiB batch",
        per_call(lambda: list(iter_batches(one, verify_crc=True))),
    )
    report("summarize, 1 MiB batch", per_call(lambda: summarize(one)))
    report("summarize verify_crc, 1 MiB batch", per_call(lambda: summarize(one, verify_crc=True)))
    report("summarize, 64 batches in 1 MiB", per_call(lambda: summarize(many)))
    report("summarize verify_crc, 64 batches", per_call(lambda: summarize(many, verify_crc=True)))
    for label, buf, count in (("1000 x 1 KB", one, 1000), ("10000 x 60 B", small, 10_000)):
        report(f"iter_records none, {label}", per_call(iterate(buf)), count)
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        batch = build_v2(specs(1000, 1000), compression=codec)
        micros = per_call(iterate(batch))
        report(f"iter_records {codec} ({len(batch)} B compressed), 1000 x 1 KB", micros, 1000)


if __name__ == "__main__":
    main()
