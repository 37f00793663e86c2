"""`kafkalens report` on the inputs that broke the former driver-side report: they must
complete with Spark's default driver memory (1g), the driver's memory not growing
with the input.

    .venv/bin/python bench/pipeline/report_inputs.py                 # both inputs
    .venv/bin/python bench/pipeline/report_inputs.py --only bad      # 3M bad + 200k good lines
    .venv/bin/python bench/pipeline/report_inputs.py --only conns    # 200k short connections

`bad`: 3,000,000 lines that are not JSON (and 200,000 good ones), in 10 gzip files.
`conns`: 200,000 connections of five lines each (open, ApiVersions, Metadata, Produce,
close), 1,000,000 lines, each connection from its own client address, so the client
tables have a row per connection. Generated once into --dir and reused.

Each report runs as `python -m pipeline.cli report` with `--driver-memory 1g` (Spark's
default; the local session otherwise takes a quarter of RAM); printed: wall time,
the driver's Python peak RSS and the JVM's (VmHWM from /proc at the end, sampled
every 0.2 s too), the exit code and the report's own summary line.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

BAD_LINES = 3_000_000
GOOD_LINES = 200_000
CONNECTIONS = 200_000
FILES = 10


def _request(ts: str, conn: int, api: str, key: int, version: int, address: str) -> str:
    return json.dumps({
        "ts": ts, "event": "request", "conn": f"c{conn}", "listener": "plaintext",
        "client_address": address, "api_key": key, "api": api, "api_version": version,
        "client_id": f"app-{conn % 997}", "client_software_name": "librdkafka",
        "client_software_version": "2.3.0", "latency_ms": 1.0 + conn % 50, "errors": [],
    }, separators=(",", ":"))


def _ts(i: int) -> str:
    seconds = i // 1000
    return f"2025-03-01T{12 + seconds // 3600:02d}:{seconds // 60 % 60:02d}:" \
           f"{seconds % 60:02d}.{i % 1000:03d}000Z"


def generate_bad(root: Path) -> Path:
    target = root / "bad"
    if (target / "done").exists():
        return target
    target.mkdir(parents=True, exist_ok=True)
    per_file = (BAD_LINES + GOOD_LINES) // FILES
    good_every = (BAD_LINES + GOOD_LINES) // GOOD_LINES
    n = 0
    for f in range(FILES):
        with gzip.open(target / f"requests.log.{f + 1}.gz", "wt", compresslevel=1) as out:
            for _ in range(per_file):
                if n % good_every == 0:
                    out.write(_request(_ts(n // 10), n, "Produce", 0, 9, f"10.0.0.1:{n % 60000}"))
                else:
                    out.write(f"garbage line {n}: not json at all, as a misrouted log would be")
                out.write("\n")
                n += 1
    (target / "done").touch()
    return target


def generate_conns(root: Path) -> Path:
    target = root / "conns"
    if (target / "done").exists():
        return target
    target.mkdir(parents=True, exist_ok=True)
    per_file = CONNECTIONS // FILES
    for f in range(FILES):
        with gzip.open(target / f"requests.log.{f + 1}.gz", "wt", compresslevel=1) as out:
            for c in range(f * per_file, (f + 1) * per_file):
                address = f"10.{c >> 16 & 255}.{c >> 8 & 255}.{c & 255}:{40000 + c % 20000}"
                base = {"conn": f"c{c}", "listener": "plaintext", "client_address": address}
                ts = _ts(c)
                out.write(json.dumps({"ts": ts, "event": "connection_open", **base}) + "\n")
                for api, key, version in (("ApiVersions", 18, 3), ("Metadata", 3, 12),
                                          ("Produce", 0, 9)):
                    out.write(_request(ts, c, api, key, version, address) + "\n")
                out.write(json.dumps({"ts": ts, "event": "connection_close", **base}) + "\n")
    (target / "done").touch()
    return target


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    kids = [int(p) for p in text.split()]
    return kids + [g for k in kids for g in _children(k)]


def _rss_kib(pid: int, field: str = "VmRSS") -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def run(logs: Path, out: Path) -> None:
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS": "--driver-memory 1g pyspark-shell"}
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "report", str(logs), "--out",
                             str(out)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    peaks: dict[str, int] = {"driver": 0, "jvm": 0}
    while proc.poll() is None:
        peaks["driver"] = max(peaks["driver"], _rss_kib(proc.pid, "VmHWM"))
        for kid in _children(proc.pid):
            if _name(kid) == "java":
                peaks["jvm"] = max(peaks["jvm"], _rss_kib(kid, "VmHWM"))
        time.sleep(0.2)
    wall = time.monotonic() - started
    assert proc.stdout is not None
    printed = proc.stdout.read().splitlines()
    summary = next((line.strip() for line in printed if " lines (" in line), "-")
    print(f"{logs.name}: exit {proc.returncode}, {wall:.1f} s wall, driver Python peak RSS "
          f"{peaks['driver'] / 1024:.0f} MiB, JVM peak RSS {peaks['jvm'] / 1024:.0f} MiB")
    print(f"  {summary}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dir", type=Path, default=Path("/tmp/kafkalens-bench-inputs"))
    p.add_argument("--only", choices=("bad", "conns"))
    args = p.parse_args()
    for kind, make in (("bad", generate_bad), ("conns", generate_conns)):
        if args.only in (None, kind):
            logs = make(args.dir)
            run(logs, args.dir / f"out-{kind}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
