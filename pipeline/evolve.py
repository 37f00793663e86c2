"""The ingested table's schema as the log's fields change: a field the read schema does
not name is stored (a new one, or one the report does not read), a field whose type
changed is kept as text (pipeline/README.md, "New and retyped fields").

The lines are read with an explicit schema (schema.py, only what the report reads).
Spark's JSON reader skips every key its schema does not name, and finding them in
every line would parse every line twice (the text source, then from_json or
json_object_keys: the JSON source alone takes half the CPU, bench/PIPELINE.md, "The
JSON source against text + from_json"), on the ingest's largest cost. So they are
found in a sample, on the driver, before the query reads a file: the first
SAMPLE_LINES lines of each file waiting to be read (the rotated files in LOGDIR and
the spool's staged ones; LOGDIR's files with --no-spool, when local). A field found
there joins the read schema with the type its sampled values have (`true`/`false`:
boolean; integers: bigint; other numbers: double; anything else, objects and arrays
too: string, holding the value's JSON text, which Spark's reader gives a string
column), and Delta's schema evolution (`mergeSchema` on the ingest's own writes only)
adds it to the table as a column of its own. A field once stored keeps its column and
its type. A continuous ingest samples each rotated file before it stages it and, when
one brings a new field, stops its query between batches and starts it again with the
wider schema once the file is staged (from its checkpoint: no line twice). The limit
of a sample: a field in none of a file's first SAMPLE_LINES lines is not stored from
that file, only from a later file that shows it early.

A known field whose value has another type than the schema's (`"latency_ms": "12"`,
an object where a number was) makes Spark's reader flag the whole line as corrupt.
Such a line of a known event, with a valid `ts`, is kept as a line (not quarantined):
the typed column is null and the value's text is in the `retyped` column (map of field
name to text), which `kafkalens ingest` counts per field when it ends (and per batch
when it runs on). Only lines Spark flagged as corrupt are read again
(read.retyped_fields), so the other lines cost nothing more. A field of a string type
never mismatches: Spark's reader keeps any value's JSON text in it.
"""

from __future__ import annotations

import bz2
import gzip
import json
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from pyspark.sql.types import (
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from pipeline.schema import CORRUPT, LINE_SCHEMA

RETYPED = "retyped"  # the table's column: field -> the value's text, on a retyped line
SAMPLE_LINES = 1000  # the lines of each file read on the driver for new fields
# Characters a Parquet column of a Delta table without column mapping may not hold.
# (and `.` and backticks, which Spark's column references read as syntax).
_NOT_IN_A_NAME = set(" ,;{}()\n\t=.`")
# Hadoop's other codecs: Spark reads them, the driver's Python does not.
_NOT_SAMPLED = {".deflate", ".lz4", ".snappy", ".zst", ".xz", ".br"}


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "bigint"
    if isinstance(value, float):
        return "double"
    return "string"


def column_type(kinds: set[str]) -> DataType:
    """The column a new field gets from the kinds of value sampled: one kind, that
    kind; integers and other numbers, double; anything else, string (its JSON text)."""
    kinds = kinds - {"null"}
    if kinds == {"boolean"}:
        return BooleanType()
    if kinds == {"bigint"}:
        return LongType()
    if kinds and kinds <= {"bigint", "double"}:
        return DoubleType()
    return StringType()


def _open(path: Path) -> IO[str] | None:
    """The file as text, or None for a codec Python does not read (not sampled)."""
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    if path.suffix == ".bz2":
        return bz2.open(path, "rt", encoding="utf-8", errors="replace")
    if path.suffix in _NOT_SAMPLED:
        return None
    return path.open("rt", encoding="utf-8", errors="replace")


def sample_keys(path: Path, lines: int = SAMPLE_LINES) -> dict[str, set[str]]:
    """The top-level keys of the first `lines` JSON objects of a file -> the kinds of
    value they held (a line that is not a JSON object is passed over: the ingest's
    quarantine says why). A file gone meanwhile (read and deleted) gives none."""
    found: dict[str, set[str]] = {}
    try:
        opened = _open(path)
        if opened is None:
            return found
        with opened as f:
            for _, line in zip(range(lines), f, strict=False):
                try:
                    value = json.loads(line)
                except ValueError:
                    continue
                if isinstance(value, dict):
                    for key, item in value.items():
                        found.setdefault(key, set()).add(_kind(item))
    except (OSError, EOFError, UnicodeError, ValueError):
        pass  # cut short or gone: Spark's read says so if it matters
    return found


def storable(name: str) -> bool:
    return bool(name) and not (_NOT_IN_A_NAME & set(name))


class Evolution:
    """The read schema of one ingest: LINE_SCHEMA, the table's own stored new fields,
    and the new fields sampled in the files waiting to be read."""

    def __init__(self, reserved: Iterable[str], stored: StructType) -> None:
        # the table's own columns, and what parse_lines adds: never a log field's
        self.reserved = {name.lower() for name in reserved} | {CORRUPT.lower(), "file_mtime"}
        self.extra: dict[str, DataType] = {f.name: f.dataType for f in stored.fields}
        self.sampled: set[tuple[int, int, int, int]] = set()
        self.skipped: set[str] = set()  # names no column can take, said once
        self.pending: dict[str, set[str]] = {}

    def known_names(self) -> set[str]:
        """Every name a log field may not add (lower case: Spark's names are not case
        sensitive)."""
        return (self.reserved | {n.lower() for n in self.extra}
                | {n.lower() for n in LINE_SCHEMA.fieldNames()})

    def sample(self, files: Iterable[Path]) -> bool:
        """Samples the files not sampled before, of all those waiting to be read
        (`files`); True when they hold new fields (taken by `widen`). What it remembers
        is the files waiting now: as many as wait, however long an ingest runs."""
        known = self.known_names()
        waiting: set[tuple[int, int, int, int]] = set()
        for path in files:
            try:
                stat = path.stat()
            except OSError:
                continue  # read and deleted meanwhile, or rotated away
            # A rotated file changes names (requests.log.1 becomes .2): known by inode.
            seen = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
            waiting.add(seen)
            if seen in self.sampled:
                continue
            for key, kinds in sample_keys(path).items():
                if key.lower() not in known:
                    self.pending.setdefault(key, set()).update(kinds)
        self.sampled = waiting
        return bool(self.pending)

    def widen(self) -> tuple[dict[str, DataType], list[str]]:
        """The sampled new fields taken into the schema (name -> type), and the names
        left out (a character no Delta column name may hold)."""
        added: dict[str, DataType] = {}
        left: list[str] = []
        for key, kinds in sorted(self.pending.items()):
            if not storable(key):
                if key not in self.skipped:
                    self.skipped.add(key)
                    left.append(key)
                continue
            added[key] = column_type(kinds)
        self.pending.clear()
        self.extra.update(added)
        return added, left

    @property
    def schema(self) -> StructType:
        """The read schema: LINE_SCHEMA's fields, the new ones, then the corrupt column."""
        base = [f for f in LINE_SCHEMA.fields if f.name != CORRUPT]
        return StructType([*base, *(StructField(n, t) for n, t in self.extra.items()),
                           LINE_SCHEMA[CORRUPT]])

    @property
    def names(self) -> list[str]:
        return list(self.extra)


def described(fields: dict[str, DataType]) -> str:
    return ", ".join(f"{name} ({kind.simpleString()})" for name, kind in fields.items())
