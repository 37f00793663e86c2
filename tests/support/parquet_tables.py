"""Parquet tables read back for comparison, without Spark (pyarrow): two runs of the
pipeline (local and a cluster, raw logs and an ingested table) must write the same rows."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq


def rows(directory: Path) -> list[tuple[Any, ...]]:
    """A Parquet table's rows, sorted, floats to 6 significant digits (sums of floats
    in another order differ in the last bits)."""
    table = pq.read_table(directory)
    out = []
    for row in table.to_pylist():
        out.append(tuple(sorted((k, comparable(v)) for k, v in row.items())))
    return sorted(out, key=repr)


def comparable(value: Any) -> Any:
    if isinstance(value, float) and math.isfinite(value) and value:
        return float(f"{value:.6g}")
    if isinstance(value, list):
        return [comparable(v) for v in value]
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items()}
    return value


def tables(out: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every table directory under `out` (not `_`- or `.`-hidden ones) and its rows."""
    found = {p.name: rows(p) for p in sorted(out.iterdir())
             if p.is_dir() and not p.name.startswith(("_", "."))}
    assert found, f"no tables in {out}"
    return found


def delta_rows(table: Path) -> list[tuple[Any, ...]]:
    """A Delta table's rows (its current version, as delta-rs reads its log), sorted,
    as `rows` gives them."""
    from deltalake import DeltaTable

    out = [tuple(sorted((k, comparable(v)) for k, v in row.items()))
           for row in DeltaTable(str(table)).to_pyarrow_table().to_pylist()]
    return sorted(out, key=repr)
