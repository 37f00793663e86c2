"""The workers' partial aggregates (partials.py rows) merged in the driver.

The partials are small (a row per connection and api version, per api and minute,
per topic; not per line), so the driver merges them as they arrive instead of Spark
merging them in some fifty small jobs (planning, code generation and task launch on
a cold JVM took ~125 s of CPU at 10M lines where the whole line pass took ~100 s).
The merge follows Spark's aggregates (agg.py), so the tables keep their values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.agg import add, least, most
from pipeline.partials import ARROW_SCHEMA, GROUP_FIELDS, TOPIC_FIELDS

SAMPLE_CHARS = 200
_GROUP_AGGREGATES = {"requests": "sum", "errors": "sum", "first_us": "min", "last_us": "max",
                     "members": "max", "generation_id": "max"}
_GROUP_OUTPUTS = [(how, out) for how, out in zip(
    _GROUP_AGGREGATES.values(),
    ("requests", "errors", "first_seen", "last_seen", "members", "generation_id"),
    strict=True)]
_GROUP_SCHEMA = pa.schema([(f.name, f.type) for f in ARROW_SCHEMA if f.name in GROUP_FIELDS]
                          + [(out, ARROW_SCHEMA.field(name).type) for name, (_, out) in
                             zip(_GROUP_AGGREGATES, _GROUP_OUTPUTS, strict=True)])
# The columns each kind of partial row fills (partials.Partials.batch).
_COLUMNS = {
    "n": ["lines", "bad", "requests", "conn_events", "first_us", "last_us"],
    "b": ["file", "reason", "line"],
    "r": ["file", "line"],
    "g": [*GROUP_FIELDS, *_GROUP_AGGREGATES],
    "l": ["api", "api_key", "minute", "requests", "errors", "lat_n", "lat_sum", "lat_max",
          "bins", "bin_counts", "bin_lo", "bin_hi"],
    "t": ["topic", *TOPIC_FIELDS],
}
LATENCY_COLUMNS = _COLUMNS["l"]
LATENCY_SCHEMA = pa.schema([ARROW_SCHEMA.field(name) for name in LATENCY_COLUMNS])


def sample(line: bytes | None) -> str | None:
    """A bad line as shown in bad_lines: its first SAMPLE_CHARS characters (invalid
    UTF-8 shown as U+FFFD: Parquet strings must be UTF-8)."""
    return None if line is None else line.decode("utf-8", "replace")[:SAMPLE_CHARS]


def undecided_lines(table: pa.Table) -> list[tuple[str, bytes]]:
    """The (file, line) of the lines the workers could not decide (kind `r`)."""
    rows = table.filter(pc.equal(table.column("kind"), "r")).select(_COLUMNS["r"])
    return [(r["file"], r["line"]) for r in rows.to_pylist()]


@dataclass
class Merged:
    lines: int = 0
    bad: int = 0
    requests: int = 0
    conn_events: int = 0
    first_us: int | None = None
    last_us: int | None = None
    topics: dict[str, list] = field(default_factory=dict)  # topic -> TOPIC_FIELDS sums
    # (file, reason) -> [bad lines, smallest sample, largest sample]
    bad_lines: dict[tuple, list] = field(default_factory=dict)
    _group_tables: list[pa.Table] = field(default_factory=list)
    _latency_tables: list[pa.Table] = field(default_factory=list)

    def add_table(self, table: pa.Table) -> None:
        """Partial rows (partials.ARROW_SCHEMA) of any number of workers."""
        kinds = table.column("kind")
        # Undecided rows (kind r) are not merged: undecided_lines hands them to Spark.
        for kind, merge in (("n", self._counts), ("b", self._bad), ("t", self._topic)):
            rows = table.filter(pc.equal(kinds, kind))
            if rows.num_rows:
                for row in rows.select(_COLUMNS[kind]).to_pylist():
                    merge(row)
        # A row per connection and api version: the most numerous partials, merged
        # by Arrow (group_table) rather than row by row; so are the latency rows, each
        # with its histogram (traffic.py merges them per the key each table wants).
        self._group_tables.append(table.filter(pc.equal(kinds, "g")).select(_COLUMNS["g"]))
        self._latency_tables.append(table.filter(pc.equal(kinds, "l")).select(_COLUMNS["l"]))

    def group_table(self) -> pa.Table:
        """The request groups merged: per GROUP_FIELDS, requests, errors, first_seen,
        last_seen (microseconds), members, generation_id."""
        if not self._group_tables:
            return pa.Table.from_batches([], _GROUP_SCHEMA)
        groups = pa.concat_tables(self._group_tables)
        self._group_tables = [groups]
        # Arrow's hash aggregates skip nulls, and a sum of nulls is null: Spark's rules.
        merged = groups.group_by(list(GROUP_FIELDS), use_threads=False).aggregate(
            [(name, how) for name, how in _GROUP_AGGREGATES.items()])
        renamed = {f"{name}_{how}": out for name, (how, out) in
                   zip(_GROUP_AGGREGATES, _GROUP_OUTPUTS, strict=True)}
        return merged.rename_columns([renamed.get(c, c) for c in merged.column_names])

    def latency_table(self) -> pa.Table:
        """The partial latency rows (LATENCY_COLUMNS) of every worker, not merged: one
        per api, api_key and minute of each partition."""
        if not self._latency_tables:
            return pa.Table.from_batches([], LATENCY_SCHEMA)
        latency = pa.concat_tables(self._latency_tables)
        self._latency_tables = [latency]
        return latency

    def _counts(self, r: dict[str, Any]) -> None:
        self.lines += r["lines"]
        self.bad += r["bad"]
        self.requests += r["requests"]
        self.conn_events += r["conn_events"]
        self.first_us = least(self.first_us, r["first_us"])
        self.last_us = most(self.last_us, r["last_us"])

    def _bad(self, r: dict[str, Any]) -> None:
        text = sample(r["line"])
        b = self.bad_lines.get((r["file"], r["reason"]))
        if b is None:
            self.bad_lines[(r["file"], r["reason"])] = [1, text, text]
        else:
            b[0] += 1
            b[1], b[2] = least(b[1], text), most(b[2], text)

    def _topic(self, r: dict[str, Any]) -> None:
        t = self.topics.get(r["topic"])
        if t is None:
            self.topics[r["topic"]] = [r[name] for name in TOPIC_FIELDS]
        else:
            for i, name in enumerate(TOPIC_FIELDS):
                t[i] = add(t[i], r[name])

