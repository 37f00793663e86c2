"""Instructions and estimated cycles per decode, kafkalens's C decoders vs kio (callgrind).

Not a test. Wall-clock figures on a shared machine swing by ±20 %; instruction counts
do not (the same binary, input and environment give the same count whatever else the
machine runs), so "no slower than kio" is also checked this way:

    .venv/bin/python -m bench.codec_instructions            # every case, ~5 minutes
    .venv/bin/python -m bench.codec_instructions fetch_100_partitions

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

from bench.bench_codec import (
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
FEW, MANY = 5, 105
COUNTERS = {  # callgrind's summary lines (--cache-sim=yes) -> weight in estimated cycles
    "I   refs": 1, "I1  misses": 10, "D1  misses": 10, "LLi misses": 100, "LLd misses": 100,
}


def run_child(case_name: str, side: str, calls: int) -> None:
    case = CASES[case_name]()
    decode = kafkalens_decoder(case) if side == "kafkalens" else kio_decoder(case)
    decode()  # warm: lazily built decoders and caches are not what is counted
    gc.collect()
    gc.freeze()
    for _ in range(calls):
        decode()


def counters(case_name: str, side: str, calls: int) -> dict[str, int]:
    command = [
        "valgrind", "--tool=callgrind", "--cache-sim=yes", "--callgrind-out-file=/dev/null",
        sys.executable, "-m", "bench.codec_instructions", "--child", case_name, side, str(calls),
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


def per_decode(case_name: str, side: str) -> tuple[float, float]:
    """(instructions, estimated cycles) of one decode."""
    few, many = (counters(case_name, side, calls) for calls in (FEW, MANY))
    instructions = (many["I   refs"] - few["I   refs"]) / (MANY - FEW)
    return instructions, (estimated_cycles(many) - estimated_cycles(few)) / (MANY - FEW)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="*", metavar="CASE", help=", ".join(CASES))
    parser.add_argument("--child", nargs=3, metavar=("CASE", "SIDE", "CALLS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_child(args.child[0], args.child[1], int(args.child[2]))
        return
    unknown = set(args.cases) - set(CASES)
    if unknown:
        parser.error(f"unknown case(s) {sorted(unknown)}; choose from {', '.join(CASES)}")
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
