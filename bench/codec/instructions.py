"""Instructions and estimated cycles per decode, kafkalens's C decoders vs kio (callgrind).

Not a test. Wall-clock figures on a shared machine swing by ±20 %; instruction counts
do not (the same binary, input and environment give the same count whatever else the
machine runs), so "no slower than kio" is also checked this way:

    .venv/bin/python -m bench.codec.instructions            # every case, ~5 minutes
    .venv/bin/python -m bench.codec.instructions fetch_100_partitions
    .venv/bin/python -m bench.codec.instructions --streamed   # codec.stream alone, no kio

`--streamed` counts kafkalens's streaming decoder (codec/stream.py) instead, the frame
fed in pieces of STREAM_PIECE bytes, as the proxy decodes frames too big to hold.

For each case (bench_codec's frames) and codec, a child Python decodes the frame N
times under `valgrind --tool=callgrind`, for two values of N; the difference of the
two totals divided by the difference of N is the cost of one decode (start-up,
imports and building the frame cancel out). Freeing each result is included, as in
bench_codec. PYTHONHASHSEED=0 keeps dict layouts, hence counts, repeatable.

Instructions alone miss what allocation costs in cache misses (a dict per partition
is bigger than a slotted object), so callgrind also simulates the caches and reports
its estimated cycles: instructions + 10 x first-level misses + 100 x last-level
misses (the weights KCachegrind uses). Both are deterministic.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable

from bench.codec.decode import (
    Case,
    fetch_case,
    join_group_case,
    kafkalens_decoder,
    kio_decoder,
    metadata_case,
)

CASES: dict[str, Callable] = {
    "fetch_100_partitions": fetch_case,
    "metadata_1000_partitions": metadata_case,
    "join_group_50_members": join_group_case,
}
SIDES = ("kafkalens", "kio")
STREAM_PIECE = 16384
STREAMED_CALLS = (2, 12)  # a streamed decode is Python, 10-50x the C's instructions
FEW, MANY = 5, 105
COUNTERS = {  # callgrind's summary lines (--cache-sim=yes) -> weight in estimated cycles
    "I   refs": 1, "I1  misses": 10, "D1  misses": 10, "LLi misses": 100, "LLd misses": 100,
}


def streamed_decoder(case: Case) -> Callable[[], object]:
    """The frame fed to codec.stream in STREAM_PIECE pieces, then finished."""
    from codec.stream import request_stream, response_stream

    frame = memoryview(case.frame)
    start = request_stream if case.kind == "request" else response_stream

    def decode() -> object:
        stream = start(case.api_key, case.version, len(frame))
        for at in range(0, len(frame), STREAM_PIECE):
            stream.feed(frame[at : at + STREAM_PIECE])
        return stream.finish()

    return decode


def run_child(case_name: str, side: str, calls: int) -> None:
    case = CASES[case_name]()
    sides = {"kafkalens": kafkalens_decoder, "kio": kio_decoder, "streamed": streamed_decoder}
    decode = sides[side](case)
    decode()  # warm: lazily built decoders and caches are not what is counted
    gc.collect()
    gc.freeze()
    for _ in range(calls):
        decode()


def counters(case_name: str, side: str, calls: int) -> dict[str, int]:
    command = [
        "valgrind", "--tool=callgrind", "--cache-sim=yes", "--callgrind-out-file=/dev/null",
        sys.executable, "-m", "bench.codec.instructions", "--child", case_name, side, str(calls),
    ]
    env = dict(os.environ, PYTHONHASHSEED="0")
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    found = {}
    for name in COUNTERS:
        match = re.search(re.escape(name) + r":\s*([\d,]+)", done.stderr)
        if match is None:
            raise RuntimeError(f"no {name!r} in callgrind's summary: {done.stderr[-800:]}")
        found[name] = int(match.group(1).replace(",", ""))
    return found


def estimated_cycles(found: dict[str, int]) -> int:
    return sum(found[name] * weight for name, weight in COUNTERS.items())


def per_decode(case_name: str, side: str, calls: tuple[int, int] = (FEW, MANY)) -> tuple[float, float]:
    """(instructions, estimated cycles) of one decode."""
    few, many = (counters(case_name, side, n) for n in calls)
    instructions = (many["I   refs"] - few["I   refs"]) / (calls[1] - calls[0])
    return instructions, (estimated_cycles(many) - estimated_cycles(few)) / (calls[1] - calls[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="*", metavar="CASE", help=", ".join(CASES))
    parser.add_argument("--streamed", action="store_true", help="count codec.stream's decode, not kio's")
    parser.add_argument("--child", nargs=3, metavar=("CASE", "SIDE", "CALLS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_child(args.child[0], args.child[1], int(args.child[2]))
        return
    unknown = set(args.cases) - set(CASES)
    if unknown:
        parser.error(f"unknown case(s) {sorted(unknown)}; choose from {', '.join(CASES)}")
    if args.streamed:
        for name in args.cases or CASES:
            instructions, cycles = per_decode(name, "streamed", STREAMED_CALLS)
            print(json.dumps({"case": name, "streamed": round(instructions), "streamed_cycles": round(cycles)}))
        return
    rows = []
    for name in args.cases or CASES:
        (ours, our_cycles), (theirs, their_cycles) = (per_decode(name, side) for side in SIDES)
        row = {
            "case": name, "kafkalens": round(ours), "kio": round(theirs), "ratio": round(ours / theirs, 3),
            "kafkalens_cycles": round(our_cycles), "kio_cycles": round(their_cycles),
            "cycles_ratio": round(our_cycles / their_cycles, 3),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| case | kafkalens C instructions | kio instructions | ratio"
          " | kafkalens C est. cycles | kio est. cycles | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['case']} | {r['kafkalens']:,} | {r['kio']:,} | {r['ratio']:.2f}"
              f" | {r['kafkalens_cycles']:,} | {r['kio_cycles']:,} | {r['cycles_ratio']:.2f} |")


if __name__ == "__main__":
    main()
