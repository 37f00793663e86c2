"""`python -m bench.proxy.run`: every arm, every workload, then results.jsonl, results.md, chart.png.

See bench/README.md. Exit code 1 when an arm that started failed mid-run.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.proxy import arms as arm_mod
from bench.proxy import outputs
from bench.proxy.arms import ArmSkipped, start_arm
from bench.proxy.profiling import Profiler
from bench.proxy.settings import PRESETS, Sizes, sizes_for
from bench.proxy.workloads import Row, arm_row, run_arm

DEFAULT_OUT = Path(__file__).resolve().parent / "results"


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.proxy.run", description=__doc__)
    p.add_argument("--size", choices=sorted(PRESETS), default="full")
    p.add_argument(
        "--quick",
        dest="size",
        action="store_const",
        const="quick",
        help="the same as --size quick (about a minute)",
    )
    p.add_argument(
        "--arms",
        default=",".join(arm_mod.ALL_ARMS),
        help=f"comma-separated, in order (also: {', '.join(arm_mod.EXTRA_ARMS)})",
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results directory")
    p.add_argument("--note", default="", help="a line for results.md, e.g. what else ran")
    for name in (
        "records",
        "rounds",
        "requests",
        "busy-connections",
        "idle-connections",
        "partitions",
    ):
        p.add_argument(f"--{name}", type=int, help="override the size preset")
    p.add_argument("--busy-seconds", type=float, help="override the size preset")
    p.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="py-spy the kafkalens arms into DIR (figures then include its cost)",
    )
    p.add_argument("--profile-rate", type=int, default=250, help="py-spy samples per second")
    p.add_argument("--profile-native", action="store_true", help="py-spy --native")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    sizes = sizes_for(args.size, vars(args))
    names = [n.strip() for n in args.arms.split(",") if n.strip()]
    work = args.out / "work"
    work.mkdir(parents=True, exist_ok=True)
    _raise_fd_limit()
    profiler = Profiler(args.profile, args.profile_rate, args.profile_native)
    run = outputs.run_row(args.size, sizes, args.note, args.profile is not None)
    rows: list[Row] = []
    failed = False
    for name in names:
        arm_rows, ok = one_arm(name, sizes, work, profiler)
        rows += arm_rows
        failed |= not ok
    outputs.finish_run_row(run)
    outputs.write_all(args.out, run, rows)
    print(f"results in {args.out}/results.md", file=sys.stderr)
    return 1 if failed else 0


def one_arm(name: str, sizes: Sizes, work: Path, profiler: Profiler) -> tuple[list[Row], bool]:
    """The arm's rows, and False when it started but failed."""
    started = time.monotonic()
    _say(name, "starting")
    try:
        arm = start_arm(name, work)
    except ArmSkipped as exc:
        _say(name, f"skipped: {exc}")
        return [{"kind": "arm", "arm": name, "skipped": str(exc)}], True
    except Exception as exc:
        _say(name, f"FAILED to start: {exc}")
        return [{"kind": "arm", "arm": name, "skipped": f"failed to start: {exc}"}], False
    rows: list[Row] = []
    error = None
    try:
        rows = run_arm(arm, sizes, profiler, lambda row: _say(name, outputs.brief(row)))
    except Exception as exc:  # an arm failing must not lose the others' results
        error = f"{type(exc).__name__}: {exc}"
        _say(name, f"FAILED: {error}")
    finally:
        summary = arm_row(arm, started)
        arm.stop()
    summary["request_log_bytes"] = outputs.drop_request_logs(work, name)
    if error is not None:
        summary["error"] = error
    return [*rows, summary], error is None


def _say(arm: str, text: str) -> None:
    print(f"[{arm}] {text}", file=sys.stderr, flush=True)


def _raise_fd_limit() -> None:
    """The idle-connection workload needs a few thousand descriptors (ours and the arms')."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


if __name__ == "__main__":
    sys.exit(main())
