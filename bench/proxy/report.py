"""results.jsonl and results.md from the rows of one run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.proxy import tables

Row = dict[str, Any]


def write_jsonl(path: Path, rows: list[Row]) -> None:
    with path.open("w") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


def markdown(run: Row, summaries: list[Row], goals: list[Row], skipped: list[Row]) -> str:
    parts = [f"# kafkalens benchmark: {run['size']} run", "", *tables.header(run)]
    parts += ["## Goals", "", *tables.goals(goals)]
    parts += ["## Throughput (librdkafka, acks=all)", "", *tables.throughput(summaries, run)]
    parts += ["## Small requests, one at a time on one connection", ""]
    parts += tables.small(summaries, run)
    parts += ["## Many connections", "", *tables.busy(summaries, run)]
    parts += ["## Metadata for every topic", "", *tables.metadata(summaries)]
    parts += ["## Memory", "", *tables.memory(summaries)]
    if skipped:
        parts += ["## Arms not run", "", *tables.skipped(skipped)]
    return "\n".join(parts).rstrip() + "\n"
