"""What KIP-714 telemetry costs the throughput workload: the `kafkalens-telemetry-off`
and `kafkalens-telemetry` arms (bench/arms.py) side by side, rounds interleaved.

    .venv/bin/python -m bench.telemetry_cost                 # 4 rounds of 100,000 records
    .venv/bin/python -m bench.telemetry_cost --rounds 2 --records 20000

Both arms run at once (each its own tansu broker and kafkalens); each round produces
then consumes N records of 1,000 bytes (bench/throughput.py: librdkafka, acks=all)
through one arm, then the other, in alternating order, so load from other processes
on the machine falls on both alike. In the telemetry arm every client gets a
subscription to all its metrics with a 1 s push interval (collect mode), so the proxy
answers, decodes, keeps and logs a push from each client every second. Reported:
median MB/s and proxy CPU seconds per round, and the ratios on/off.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from support.procs import CpuWindow

from bench import throughput
from bench.arms import RunningArm, start_arm

ARMS = ("kafkalens-telemetry-off", "kafkalens-telemetry")


def one_round(arm: RunningArm, records: int, topic: str) -> dict[str, float]:
    throughput.create_topic(arm.bootstrap, topic)
    out: dict[str, float] = {}
    for name, run in (("produce", throughput.produce), ("consume", throughput.consume)):
        window = CpuWindow(arm.pid).start()
        moved = run(arm.bootstrap, records, topic=topic)  # type: ignore[operator]
        out[f"{name}_mb_s"] = moved.mb_s
        out[f"{name}_cpu_s"] = window.stop() or 0.0
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--records", type=int, default=100_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kafkalens-telemetry-cost-"))
    arms = {name: start_arm(name, work) for name in ARMS}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in ARMS}
    try:
        for n in range(args.rounds):
            order = ARMS if n % 2 == 0 else ARMS[::-1]
            for name in order:
                row = one_round(arms[name], args.records, f"telemetry-cost-{n}")
                results[name].append(row)
                print(f"round {n} {name}: {json.dumps({k: round(v, 2) for k, v in row.items()})}",
                      file=sys.stderr)  # fmt: skip
    finally:
        for arm in arms.values():
            arm.stop()
    pushes = sum(1 for _ in (work / "kafkalens-telemetry-telemetry.log").open()) if (
        work / "kafkalens-telemetry-telemetry.log").exists() else 0  # fmt: skip
    medians = {
        name: {key: statistics.median(r[key] for r in rows) for key in rows[0]}
        for name, rows in results.items()
    }
    off, on = (medians[name] for name in ARMS)
    print(
        f"| median of {args.rounds} rounds, {args.records} records | telemetry off | on | on/off |"
    )
    print("|---|---|---|---|")
    for key in off:
        print(f"| {key} | {off[key]:.2f} | {on[key]:.2f} | {on[key] / off[key]:.3f} |")
    print(f"\ntelemetry log lines (one per pushed data point kept): {pushes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
