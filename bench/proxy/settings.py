"""Workload sizes: `full` (the numbers to report), `quick` (a smoke run), `tiny` (the test)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace


@dataclass(frozen=True)
class Sizes:
    records: int  # produced, then consumed, in each round
    rounds: int  # of produce + consume; the best MB/s of the rounds is reported
    record_bytes: int
    requests: int  # per small-request api, one at a time, after `warmup`
    warmup: int
    busy_connections: int
    busy_seconds: float
    idle_connections: int
    partitions: int  # metadata-heavy: topics of 10 partitions totalling this
    metadata_requests: int
    metadata_warmup: int


PRESETS = {
    "full": Sizes(200_000, 2, 1000, 5000, 500, 500, 10.0, 1000, 1000, 300, 20),
    "quick": Sizes(20_000, 1, 1000, 1000, 100, 100, 3.0, 1000, 200, 50, 5),
    "tiny": Sizes(2_000, 1, 1000, 200, 20, 20, 1.0, 50, 50, 20, 2),
}


def sizes_for(preset: str, overrides: dict[str, object]) -> Sizes:
    """A preset with the non-None `overrides` (field name -> value) applied."""
    names = {f.name for f in fields(Sizes)}
    chosen = {k: v for k, v in overrides.items() if k in names and v is not None}
    return replace(PRESETS[preset], **chosen)  # type: ignore[arg-type]
