"""The small measurements behind choices the code's comments give a reason for: each
comment says why and cites this command; the figures are in bench/README.md ("The
measurements behind the code's choices"), as this prints them.

    .venv/bin/python -m bench.proxy.choices          # about 15 s

- `the codec's schema tables`: what loading them (`codec.schema.api_messages()` and
  `api_names()`, as the check of `request_log.apis` names does) adds to a bare
  interpreter's RSS.
- `the parent of workers' imports`: the RSS of what the parent of `workers: N` imports
  (proxy/workers.py's `_parent`), and whether the codec's tables are among them;
  `proxy.runner on top of those`: what importing the forwarding proxy would add.
- `full GC, start-up objects`: a full `gc.collect()` in a process that has built a
  proxy's hooks, with the objects start-up made tracked, then after `gc.freeze()`
  (proxy/runner.py's `freeze_startup_objects`): median of 7 each.
- `resource tracker RSS`: the process multiprocessing's "spawn" starts beside its
  children (proxy/workers.py starts its workers as plain processes instead).
- `enum member read`: `Kind.BOOL` read through the enum class against a module
  constant, per read (codec/interpreter.py and codec/stream.py read members once).
- `a request line rendered`: bench.proxy.request_log_cost's Metadata line with orjson
  (proxy/observe/request_log.py's `render`) against structlog's JSONRenderer, the
  standard library's encoder (what renders the proxy's own log), best of 5.

Each RSS figure is measured in a fresh interpreter (VmRSS from /proc, Linux), so what
this process imported does not count; the timings are best or median of several runs
on whatever machine runs it, so compare them with each other, not across machines.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import timeit
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

RSS = """
import json, sys
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
base_imports, measured = sys.argv[1], sys.argv[2]
exec(base_imports)
before = rss()
exec(measured)
print(json.dumps(rss() - before))
"""

GC = """
import gc, json, time
from proxy.config import Config
from proxy.metrics import Metrics
from proxy.observe.observer import build_hooks
import proxy.runner
hooks = build_hooks(Config(), Metrics())
def full():
    runs = []
    for _ in range(7):
        start = time.perf_counter()
        gc.collect()
        runs.append(time.perf_counter() - start)
    runs.sort()
    return runs[len(runs) // 2]
gc.collect()
tracked = len(gc.get_objects())
with_them = full()
gc.freeze()
without = full()
print(json.dumps([tracked, with_them, without]))
"""

TRACKER = """
import json, time
from multiprocessing import resource_tracker
resource_tracker.ensure_running()
pid = resource_tracker._resource_tracker._pid
time.sleep(2)  # started: an interpreter importing multiprocessing's tracker
for line in open(f"/proc/{pid}/status"):
    if line.startswith("VmRSS:"):
        print(json.dumps(int(line.split()[1]) * 1024))
"""


def _python(code: str, *args: str) -> object:
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=True)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def _rss(base: str, measured: str, runs: int = 3) -> float:
    return statistics.median(float(_python(RSS, base, measured)) for _ in range(runs))  # type: ignore[arg-type]


def _mb(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def measure() -> list[tuple[str, str, str]]:
    """(what, figure, where the code relies on it)."""
    parent = ("import proxy.workers, proxy.announce, proxy.admin.http, proxy.admin.readiness,"
              " proxy.admin.top, proxy.metrics, proxy.signals")
    tables = "from codec.schema import api_messages, api_names; api_messages(); api_names()"
    holds = _python("import sys; " + parent + "; print(int('codec.schema' in sys.modules))")
    rows = [
        ("the codec's schema tables", _mb(_rss("import json, struct", tables)),
         "proxy/preflight.py `check_startup`, proxy/workers.py `_parent`"),
        ("the parent of workers' imports", _mb(_rss("import json, struct", parent))
         + (", the codec's tables among them" if holds else ", without the codec's tables"),
         "proxy/workers.py `_parent`"),
        ("proxy.runner on top of those", _mb(_rss(parent, "import proxy.runner")),
         "proxy/workers.py `_parent`"),
    ]
    tracked, with_them, without = _python(GC)  # type: ignore[misc]
    rows.append((
        "full GC, start-up objects",
        f"{tracked:,} objects tracked: {with_them * 1e3:.1f} ms; frozen: {without * 1e6:.1f} µs",
        "proxy/runner.py `freeze_startup_objects`",
    ))
    rows.append(("resource tracker RSS", _mb(float(_python(TRACKER))),  # type: ignore[arg-type]
                 "proxy/workers.py `_BOOTSTRAP`"))  # fmt: skip
    setup = "from codec.kinds import Kind; BOOL = Kind.BOOL"
    through = min(timeit.repeat("Kind.BOOL", setup, number=1_000_000, repeat=5))
    constant = min(timeit.repeat("BOOL", setup, number=1_000_000, repeat=5))
    rows.append((
        "enum member read",
        f"{through * 1e3:.0f} ns through the class, {constant * 1e3:.0f} ns a constant",
        "codec/interpreter.py, codec/stream.py",
    ))
    rows.append(_rendering())
    return rows


def _rendering() -> tuple[str, str, str]:
    import structlog

    from bench.proxy.request_log_cost import fields
    from proxy.observe.request_log import render

    line = fields()
    stdlib = structlog.processors.JSONRenderer()
    n = 100_000
    with_orjson = min(timeit.repeat(lambda: render(line), number=n, repeat=5)) / n
    with_stdlib = min(timeit.repeat(lambda: stdlib(None, "info", dict(line)), number=n,
                                    repeat=5)) / n  # fmt: skip
    return ("a request line rendered",
            f"orjson {with_orjson * 1e6:.2f} µs, structlog's JSONRenderer {with_stdlib * 1e6:.2f} µs",
            "proxy/observe/request_log.py `render`")


def main() -> None:
    rows = measure()
    print("| What | Measured | Relied on by |")
    print("|---|---|---|")
    for what, figure, where in rows:
        print(f"| {what} | {figure} | {where} |")


if __name__ == "__main__":
    main()
