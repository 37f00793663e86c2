"""One Python pass over the lines: per-partition partial aggregates, merged by Spark.

Parsing and scanning every line in Spark (from_json, a cache of the parsed rows, a
scan of it per table) cost ~20 us of CPU a line; here each Python worker parses its
lines (fastparse) and folds them at once into a few small partial tables, one row
per key, which the report's tables merge with sums, mins and maxes (tables.py):

    kind  rows per partition, keyed by
    n     one: lines, bad, requests, connection events, first and last ts
    b     one per bad line (file, reason, the line): Spark samples and counts them
    g     connection, api version, identity and group fields (clients.request_groups)
    l     api, api_key, minute: requests, errors, latency sum, max and bins (sketch)
    t     topic: produced and fetched bytes, records, batches
    r     one per line fastparse left undecided (the line): Spark's parser decides

The `r` lines go through read.parse_lines and then `fold_parsed`, the same fold over
rows Spark has parsed, so every line is counted once, by the same rules.
"""

from __future__ import annotations

import gc
import math
import operator
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

from pipeline import fastparse
from pipeline.clients import CONN, GROUP_KEYS, IDENTITY
from pipeline.schema import REQUEST_EVENTS
from pipeline.sketch import INV_LN_GAMMA, bin_of

MINUTE_US = 60_000_000
PRODUCE, FETCH = 0, 1
TOPIC_FIELDS = tuple(f"{verb}_{field}" for verb in ("produced", "fetched")
                     for field in ("bytes", "records", "batches"))
GROUP_FIELDS = (*CONN, "api_key", "api", "api_version", *IDENTITY, *GROUP_KEYS)
# A worker hands its partials over when this many keys are held, bounding its memory
# whatever the partition (partials of the same key merge anyway).
MAX_KEYS = 200_000

_INT = {"api_key", "api_version", "members", "generation_id"}
_TYPES: dict[str, pa.DataType] = {
    "kind": pa.string(), "file": pa.string(), "reason": pa.string(), "line": pa.binary(),
    **{name: pa.int32() if name in _INT else pa.string() for name in GROUP_FIELDS},
    "requests": pa.int64(), "errors": pa.int64(), "first_us": pa.int64(),
    "last_us": pa.int64(), "members": pa.int32(), "generation_id": pa.int32(),
    "minute": pa.int64(), "lat_n": pa.int64(), "lat_sum": pa.float64(),
    "lat_max": pa.float64(), "bins": pa.list_(pa.int32()),
    "bin_counts": pa.list_(pa.int64()), "bin_lo": pa.list_(pa.float64()),
    "bin_hi": pa.list_(pa.float64()),
    "topic": pa.string(), **{name: pa.int64() for name in TOPIC_FIELDS},
    "lines": pa.int64(), "bad": pa.int64(), "conn_events": pa.int64(),
}
ARROW_SCHEMA = pa.schema(list(_TYPES.items()))
_SPARK_TYPES = {pa.string(): "string", pa.binary(): "binary", pa.int32(): "int",
                pa.int64(): "bigint", pa.float64(): "double",
                pa.list_(pa.int32()): "array<int>", pa.list_(pa.int64()): "array<bigint>",
                pa.list_(pa.float64()): "array<double>"}
SPARK_SCHEMA = ", ".join(f"{name} {_SPARK_TYPES[t]}" for name, t in _TYPES.items())


def _max(a: Any, b: Any) -> Any:
    """max() as Spark's aggregate: nulls ignored."""
    return b if a is None or (b is not None and b > a) else a


_group_key = operator.attrgetter(*GROUP_FIELDS)
_log, _ceil, _INF = math.log, math.ceil, math.inf


def _add(a: int | None, b: int | None) -> int | None:
    """a + b as Spark's sum: nulls ignored, null if both are."""
    return a if b is None else b if a is None else a + b


class Partials:
    """The partial aggregates of one partition (or of part of one).

    `add` runs once per line, millions of times: it is written flat (no helper calls,
    locals for globals) because every call and lookup shows in the report's speed.
    """

    def __init__(self) -> None:
        self.lines = self.bad = self.requests = self.conn_events = 0
        self.first: int | None = None
        self.last: int | None = None
        self.bad_rows: list[tuple[str, str, bytes]] = []
        self.raw: list[tuple[str, bytes]] = []
        self.groups: dict[tuple, list] = {}
        self.latency: dict[tuple, list] = {}
        # Per topic, [bytes, records, batches] of the Produce (Fetch) lines naming it.
        self.produced: dict[str, list] = {}
        self.fetched: dict[str, list] = {}

    def keys(self) -> int:
        return (len(self.groups) + len(self.latency) + len(self.produced) + len(self.fetched)
                + len(self.raw) + len(self.bad_rows))

    def add(self, line: Any, reason: str | None = None) -> str | None:
        """One parsed line (a fastparse.Line, `ts` in microseconds) and the bad reason
        if Spark's parser found one; returns the line's bad reason, if any, for the
        caller to keep the line with its file."""
        self.lines += 1
        ts, event = line.ts, line.event
        if reason is None and (ts is None or event is None):
            reason = "missing or invalid ts/event"
        if reason is not None:
            self.bad += 1
            return reason
        if self.first is None or ts < self.first:
            self.first = ts
        if self.last is None or ts > self.last:
            self.last = ts
        if event not in REQUEST_EVENTS:
            if event.startswith("connection_"):
                self.conn_events += 1
            return None
        self.requests += 1
        api_key = line.api_key
        if line.api is None and api_key is not None:  # keys must not be null
            line.api = f"ApiKey{api_key}"
        error = 1 if line.errors else 0
        key = _group_key(line)
        g = self.groups.get(key)
        if g is None:
            self.groups[key] = [1, error, ts, ts, line.members, line.generation_id]
        else:
            g[0] += 1
            g[1] += error
            if ts < g[2]:
                g[2] = ts
            elif ts > g[3]:
                g[3] = ts
            if (members := line.members) is not None and (g[4] is None or members > g[4]):
                g[4] = members
            if (gen := line.generation_id) is not None and (g[5] is None or gen > g[5]):
                g[5] = gen
        # Latency per api and minute: [requests, errors, n, sum, max, {bin: [n, lo, hi]}]
        key = (line.api, api_key, ts // MINUTE_US)
        s = self.latency.get(key)
        if s is None:
            s = self.latency[key] = [0, 0, 0, 0.0, None, {}]
        s[0] += 1
        s[1] += error
        x = line.latency_ms
        if x is not None:
            s[2] += 1
            s[3] += x
            if 0.0 < x < _INF:
                if s[4] is None or x > s[4]:
                    s[4] = x
                b = _ceil(_log(x) * INV_LN_GAMMA)
                c = s[5].get(b)
                if c is None:
                    s[5][b] = [1, x, x]
                else:
                    c[0] += 1
                    if x < c[1]:
                        c[1] = x
                    elif x > c[2]:
                        c[2] = x
            else:
                self._odd_latency(s, x)
        if api_key in (PRODUCE, FETCH):
            stats = line.record_stats
            if stats is not None and stats.per_topic:
                self._topics(self.produced if api_key == PRODUCE else self.fetched,
                             stats.per_topic)
        return None

    @staticmethod
    def _odd_latency(s: list, x: float) -> None:
        """A latency that is not a positive finite number, in Spark's order of doubles
        (NaN above everything; only Spark's parser lets NaN and inf through)."""
        if s[4] is None or x != x or (x > s[4] and s[4] == s[4]):
            s[4] = x
        b = bin_of(x)
        c = s[5].setdefault(b, [0, x, x])
        c[0] += 1
        if x == x and (c[1] != c[1] or x < c[1]):
            c[1] = x
        if x != x or (c[2] == c[2] and x > c[2]):
            c[2] = x

    @staticmethod
    def _topics(sums: dict[str, list], per_topic: dict[str, Any]) -> None:
        for topic, c in per_topic.items():
            t = sums.get(topic)
            if t is None:
                sums[topic] = [None, None, None] if c is None else [c.bytes, c.records,
                                                                     c.batches]
            elif c is not None:
                t[0], t[1], t[2] = _add(t[0], c.bytes), _add(t[1], c.records), \
                    _add(t[2], c.batches)

    def _topic_rows(self) -> Iterator[tuple[str, list]]:
        """Per topic the six sums, as Spark's sums over the lines would give them: a
        Produce line adds its counts to the produced side and 0 to the fetched side."""
        for topic in self.produced.keys() | self.fetched.keys():
            p, f = self.produced.get(topic), self.fetched.get(topic)
            sides = [p if p is not None else [None] * 3, f if f is not None else [None] * 3]
            produced = [0 if v is None and f is not None else v for v in sides[0]]
            fetched = [0 if v is None and p is not None else v for v in sides[1]]
            yield topic, produced + fetched

    def batch(self) -> pa.RecordBatch:
        cols: dict[str, list] = {name: [] for name in _TYPES}
        rows = 0

        def row(kind: str, **values: Any) -> None:
            nonlocal rows
            for name, column in cols.items():
                column.append(values.get(name, kind if name == "kind" else None))
            rows += 1

        row("n", lines=self.lines, bad=self.bad, requests=self.requests,
            conn_events=self.conn_events, first_us=self.first, last_us=self.last)
        for file, reason, line in self.bad_rows:
            row("b", file=file, reason=reason, line=line)
        for file, line in self.raw:
            row("r", file=file, line=line)
        for key, (n, errors, first, last, members, generation) in self.groups.items():
            row("g", **dict(zip(GROUP_FIELDS, key, strict=True)), requests=n, errors=errors,
                first_us=first, last_us=last, members=members, generation_id=generation)
        for (api, api_key, minute), (n, errors, lat_n, total, hi, bins) in \
                self.latency.items():
            stats = list(bins.values())
            row("l", api=api, api_key=api_key, minute=minute, requests=n, errors=errors,
                lat_n=lat_n, lat_sum=total, lat_max=hi, bins=list(bins),
                bin_counts=[c[0] for c in stats], bin_lo=[c[1] for c in stats],
                bin_hi=[c[2] for c in stats])
        for topic, sums in self._topic_rows():
            row("t", topic=topic, **dict(zip(TOPIC_FIELDS, sums, strict=True)))
        return pa.RecordBatch.from_pydict(cols, schema=ARROW_SCHEMA)


def _folded(batches: Iterable[pa.RecordBatch],
            fold: Callable[[Partials, pa.RecordBatch], None]) -> Iterator[pa.RecordBatch]:
    # The fold makes no reference cycles, and the cycle collector, run every few
    # hundred allocations over the ever more objects the partials hold, took half the
    # time (a parsed line is a dict of ~25 objects): off while folding.
    enabled = gc.isenabled()
    gc.disable()
    try:
        partials = Partials()
        for batch in batches:
            fold(partials, batch)
            if partials.keys() > MAX_KEYS:
                yield partials.batch()
                partials = Partials()
        yield partials.batch()
    finally:
        if enabled:
            gc.enable()


def _fold_text(partials: Partials, batch: pa.RecordBatch) -> None:
    # As bytes: Spark's text source keeps invalid UTF-8, which only Spark should judge.
    values = batch.column(0).cast(pa.binary()).to_pylist()
    files = batch.column(1)  # read only for the few lines kept with their file
    parse, add = fastparse.parse, partials.add
    for i, raw in enumerate(values):
        line = parse(raw) if raw is not None else None
        if line is None:
            if raw is not None and raw.strip(b" "):  # Spark's trim(): blanks are no lines
                partials.raw.append((files[i].as_py(), raw))
        elif (reason := add(line)) is not None:
            partials.bad_rows.append((files[i].as_py(), reason, raw))


def fold_text(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow over (value, file) lines: their partials."""
    return _folded(batches, _fold_text)


def _line(row: dict[str, Any]) -> Any:
    """A row read.parse_lines made, as the fastparse.Line the fold takes."""
    per_topic = row.pop("per_topic")
    if per_topic is not None:
        per_topic = {t: c if c is None else fastparse.Counts(**c) for t, c in per_topic}
    # The fold asks of `errors` only whether it is empty.
    errors = [None] * row.pop("error")
    return fastparse.Line(**row, errors=errors, record_stats=fastparse.RecordStats(per_topic))


def _fold_rows(partials: Partials, batch: pa.RecordBatch) -> None:
    for row in batch.to_pylist():
        reason, line, file = row.pop("bad_reason"), row.pop("line"), row.pop("file")
        if (reason := partials.add(_line(row), reason)) is not None:
            partials.bad_rows.append((file, reason, line))


def fold_parsed(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow over rows read.parse_lines made (see tables.fallback_partials)."""
    return _folded(batches, _fold_rows)
