"""Soak a `kafkalens proxy` process: steady load, its RSS, open files and pending requests
printed over time (bench/README.md, "Soak").

    .venv/bin/python -m bench.proxy.soak --minutes 5

The proxy process and the load are tests/support/load.py's, which tests/proxy/test_load.py
runs for 12 seconds with asserted tolerances.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from support.load import HOST, Load, ProxyProcess

from proxy.tansu import TansuBroker, free_port


def soak(minutes: float, every: float, out: Path) -> int:
    broker_port = free_port()
    proxy = ProxyProcess(out, f"{HOST}:{broker_port}").start()
    broker = TansuBroker(port=broker_port, advertised_port=proxy.port, log_path=out / "tansu.log")
    try:
        broker.start()
        baseline = proxy.baseline()
        print(f"idle      {proxy.figures().line()}", flush=True)
        load = Load(proxy.bootstrap).start()
        started = time.monotonic()
        end = started + minutes * 60
        while time.monotonic() < end:
            time.sleep(min(every, max(0.0, end - time.monotonic())))
            elapsed = time.monotonic() - started
            print(f"{elapsed:6.0f} s  {proxy.figures().line()}  {load.progress()}", flush=True)
        load.stop()
        after = proxy.settle(baseline)
        print(f"after     {after.line()}", flush=True)
        print(f"totals    {load.progress()}", flush=True)
        return 0 if after.open_files <= baseline and after.pending == 0 else 1
    finally:
        proxy.kill()
        broker.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.proxy.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--every", type=float, default=15.0, help="seconds between lines")
    parser.add_argument("--out", type=Path, help="work directory (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        return soak(args.minutes, args.every, args.out)
    with tempfile.TemporaryDirectory(prefix="kafkalens-soak-") as work:
        return soak(args.minutes, args.every, Path(work))


if __name__ == "__main__":
    sys.exit(main())
