"""The run's own row, progress lines, and writing the three output files."""

from __future__ import annotations

import dataclasses
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.proxy import chart, figures, goals, report
from bench.proxy.settings import Sizes

Row = dict[str, Any]


def run_row(size: str, sizes: Sizes, note: str, profiled: bool) -> Row:
    import confluent_kafka

    load = [round(x, 2) for x in os.getloadavg()]
    return {
        "kind": "run",
        "started": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "size": size,
        "sizes": dataclasses.asdict(sizes),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        # The proxy arms run this interpreter's venv: its build moves their CPU.
        "python_executable": sys.executable,
        "librdkafka": confluent_kafka.libversion()[0],
        "loadavg_start": load,
        "note": note,
        "profiled": profiled,
        "_t0": time.monotonic(),
    }


def finish_run_row(run: Row) -> None:
    run["took_seconds"] = round(time.monotonic() - run.pop("_t0"), 1)
    run["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    run["machine_note"] = machine_note(run)


def machine_note(run: Row) -> str:
    busiest = max(run["loadavg_start"][0], run["loadavg_end"][1])
    parts = []
    if busiest > 0.5:
        parts.append(
            f"The machine was shared: other work kept the load average near {busiest:.1f}"
            f" on {run['cpus']} CPUs, so absolute figures are low and p99s noisy;"
            " ratios between arms are the meaningful part."
        )
    if run["profiled"]:
        parts.append("py-spy was sampling the kafkalens arms: their figures include its cost.")
    if run["note"]:
        parts.append(run["note"])
    return " ".join(parts)


def brief(row: Row) -> str:
    keys = ("api", "mb_s", "p50_us", "p99_us", "requests_per_s", "rss_open_mb", "cpu_s")
    shown = " ".join(f"{k}={row[k]}" for k in keys if row.get(k) is not None)
    return f"{row['workload']}: {shown}"


def drop_request_logs(work: Path, arm: str) -> int:
    """The bytes of request log the arm wrote; the files are removed (they can be large)."""
    total = 0
    for path in work.glob(f"{arm}-requests.log*"):
        total += path.stat().st_size
        path.unlink()
    return total


def write_all(out: Path, run: Row, rows: list[Row]) -> None:
    ran = [r["arm"] for r in rows if r.get("kind") == "arm" and "skipped" not in r]
    skipped = [r for r in rows if r.get("kind") == "arm" and "skipped" in r]
    summaries = [figures.summarize(rows, arm) for arm in ran]
    relay = next((s for s in summaries if s["arm"] == "haproxy"), None)
    judged = [
        g for s in summaries if s["arm"].startswith("kafkalens") for g in goals.judge(s, relay)
    ]
    report.write_jsonl(out / "results.jsonl", [run, *rows, *summaries, *judged])
    (out / "results.md").write_text(report.markdown(run, summaries, judged, skipped))
    title = f"kafkalens benchmark ({run['size']}, {run['started']})"
    chart.write_chart(out / "chart.png", summaries, title)
