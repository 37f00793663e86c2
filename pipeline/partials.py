"""One Python pass over the lines: per-partition partial aggregates, merged in the driver.

Parsing and scanning every line in Spark (from_json, a cache of the parsed rows, a
scan of it per table) cost ~20 us of CPU a line; here each Python worker parses its
lines (fastparse) and folds them at once into a few small partial tables, one row
per key, which the driver merges with sums, mins and maxes (merge.py, tables.py):

    kind  rows per partition, keyed by
    n     one: lines, bad, requests, connection events, first and last ts
    b     one per bad line (file, reason, the line): Spark samples and counts them
    g     connection, api version, identity and group fields (merge.Merged.group_table)
    l     api, api_key, minute: requests, errors, latency sum, max and bins (sketch)
    t     topic: produced and fetched bytes, records, batches
    r     one per line fastparse left undecided (the line): Spark's parser decides

The `r` lines go through read.parse_lines and then `fold_rows`, the same fold over
rows Spark has parsed, so every line is counted once, by the same rules. A worker
gets its lines from Spark's text source (fold_text, mapInArrow) or, for local files,
reads them itself (fold_splits, splits.py).
"""

from __future__ import annotations

import gc
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline import fastparse
from pipeline.agg import dmax, dmin
from pipeline.clients import CONN, GROUP_KEYS, IDENTITY
from pipeline.schema import REQUEST_EVENTS
from pipeline.sketch import INV_LN_GAMMA, bin_of
from pipeline.splits import Split, split_lines

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


_group_key = operator.attrgetter(*GROUP_FIELDS)
_API, _API_KEY = GROUP_FIELDS.index("api"), GROUP_FIELDS.index("api_key")
# A group's row: its key, then what Partials._group_sums gives for it.
_GROUP_ROW = (*GROUP_FIELDS, "requests", "errors", "first_us", "last_us", "members",
              "generation_id")


def _add(a: int | None, b: int | None) -> int | None:
    """a + b as Spark's sum: nulls ignored, null if both are."""
    return a if b is None else b if a is None else a + b


def _add_counts(t: list, c: Any) -> None:
    """A topic's [bytes, records, batches] plus a line's per-topic Counts."""
    b, r, n = c.bytes, c.records, c.batches
    if b is not None and t[0] is not None and r is not None and t[1] is not None \
            and n is not None and t[2] is not None:
        t[0] += b
        t[1] += r
        t[2] += n
    else:
        t[0], t[1], t[2] = _add(t[0], b), _add(t[1], r), _add(t[2], n)


class Partials:
    """The partial aggregates of one partition (or of part of one).

    `add` runs once per line, millions of times: it is written flat (no helper calls,
    locals for globals) and does only what cannot wait. A request costs one lookup of
    its group (GROUP_FIELDS) and one of the minute in that group, an int key: the
    group's first and last ts live in the group, its count, errors and latencies in
    the minute. `batch` sums the rest from them: the groups' requests and errors, the
    latency rows per (api, api_key, minute), the partition's totals; it bins the
    latencies at once.
    """

    def __init__(self) -> None:
        self.lines = self.bad = self.conn_events = 0
        # Of the lines that are not requests (a request's ts is in its group).
        self.first: int | None = None
        self.last: int | None = None
        self.bad_rows: list[tuple[str, str, bytes]] = []
        self.raw: list[tuple[str, bytes]] = []
        # GROUP_FIELDS -> [first ts, last ts, members, generation_id,
        #                  {minute: [requests, errors, [latency_ms, ...]]}]
        self.groups: dict[tuple, list] = {}
        self.minutes = 0  # minute entries in all groups
        # Per topic, [bytes, records, batches] of the Produce (Fetch) lines naming it.
        self.produced: dict[str, list] = {}
        self.fetched: dict[str, list] = {}

    def keys(self) -> int:
        """How much is held: keys, kept lines, and latencies (a quarter: they are
        floats; counted as the lines folded, an upper bound kept off the hot path)."""
        return (len(self.groups) + self.minutes + len(self.produced) + len(self.fetched)
                + len(self.raw) + len(self.bad_rows) + self.lines // 4)

    def add(self, line: Any, reason: str | None = None) -> str | None:
        """One parsed line (a fastparse.Line, `ts` in microseconds) and the bad reason
        if Spark's parser found one; returns the line's bad reason, if any, for the
        caller to keep the line with its file."""
        self.lines += 1
        ts, event = line.ts, line.event
        if reason is not None or ts is None or event is None:
            self.bad += 1
            return reason or "missing or invalid ts/event"
        if event not in REQUEST_EVENTS:
            self._other(ts, event)
            return None
        api_key = line.api_key
        if line.api is None and api_key is not None:  # keys must not be null
            line.api = f"ApiKey{api_key}"
        key = _group_key(line)
        g = self.groups.get(key)
        if g is None:
            g = self.groups[key] = [ts, ts, line.members, line.generation_id, {}]
        else:
            if ts < g[0]:
                g[0] = ts
            elif ts > g[1]:
                g[1] = ts
            if (members := line.members) is not None and (g[2] is None or members > g[2]):
                g[2] = members
            if (gen := line.generation_id) is not None and (g[3] is None or gen > g[3]):
                g[3] = gen
        minute = ts // MINUTE_US
        m = g[4].get(minute)
        if m is None:
            m = g[4][minute] = [0, 0, []]
            self.minutes += 1
        m[0] += 1
        if line.errors:
            m[1] += 1
        if (x := line.latency_ms) is not None:
            m[2].append(x)
        if api_key in (PRODUCE, FETCH):
            stats = line.record_stats
            if stats is not None and (per_topic := stats.per_topic):
                sums = self.produced if api_key == PRODUCE else self.fetched
                for topic, c in per_topic.items():
                    t = sums.get(topic)
                    if t is None:
                        sums[topic] = [None] * 3 if c is None else [c.bytes, c.records,
                                                                    c.batches]
                    elif c is not None:
                        _add_counts(t, c)
        return None

    def _other(self, ts: int, event: str) -> None:
        """A line of another event than a request: its ts and connection events."""
        if self.first is None or ts < self.first:
            self.first = ts
        if self.last is None or ts > self.last:
            self.last = ts
        if event.startswith("connection_"):
            self.conn_events += 1

    def _group_sums(self) -> tuple[list[tuple], dict[tuple, list]]:
        """Per group (in `groups` order): requests, errors, first ts, last ts, members,
        generation_id; and per (api, api_key, minute): [requests, errors, latencies]."""
        rows = []
        latency: dict[tuple, list] = {}
        for key, (first, last, members, generation, minutes) in self.groups.items():
            api, api_key = key[_API], key[_API_KEY]
            n = errors = 0
            for minute, (count, failed, values) in minutes.items():
                n += count
                errors += failed
                s = latency.get((api, api_key, minute))
                if s is None:
                    latency[(api, api_key, minute)] = [count, failed, list(values)]
                else:
                    s[0] += count
                    s[1] += failed
                    s[2].extend(values)
            rows.append((n, errors, first, last, members, generation))
        return rows, latency

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
        """The partials as rows of ARROW_SCHEMA, built a column at a time (a row at a
        time cost ~0.5 us per folded line)."""
        rows = _Rows()
        group_rows, latency = self._group_sums()
        first = [r[2] for r in group_rows] + [self.first] * (self.first is not None)
        last = [r[3] for r in group_rows] + [self.last] * (self.last is not None)
        rows.add("n", [{"lines": self.lines, "bad": self.bad, "conn_events": self.conn_events,
                        "requests": sum(r[0] for r in group_rows),
                        "first_us": min(first, default=None),
                        "last_us": max(last, default=None)}])
        rows.add("b", [{"file": f, "reason": r, "line": line} for f, r, line in self.bad_rows])
        rows.add("r", [{"file": f, "line": line} for f, line in self.raw])
        table = [key + sums for key, sums in zip(self.groups, group_rows, strict=True)]
        # (no groups: no columns, each then null)
        columns = dict(zip(_GROUP_ROW, zip(*table, strict=True), strict=False))
        rows.add_columns("g", len(table), columns)
        rows.add("l", [{"api": api, "api_key": api_key, "minute": minute, "requests": n,
                        "errors": errors, **latency_stats(values)}
                       for (api, api_key, minute), (n, errors, values) in latency.items()])
        rows.add("t", [{"topic": topic, **dict(zip(TOPIC_FIELDS, sums, strict=True))}
                       for topic, sums in self._topic_rows()])
        return pa.RecordBatch.from_pydict(rows.columns, schema=ARROW_SCHEMA)


class _Rows:
    """Columns of partial rows of every kind; a column a kind does not fill is null."""

    def __init__(self) -> None:
        self.columns: dict[str, list] = {name: [] for name in _TYPES}

    def add(self, kind: str, rows: list[dict[str, Any]]) -> None:
        names = {name for row in rows for name in row}
        self.add_columns(kind, len(rows), {name: [row.get(name) for row in rows]
                                           for name in names})

    def add_columns(self, kind: str, n: int, values: Mapping[str, Sequence]) -> None:
        for name, column in self.columns.items():
            column.extend([kind] * n if name == "kind" else values.get(name, (None,) * n))


def latency_stats(values: list[float]) -> dict[str, Any]:
    """A key's latencies as the partial row's columns: lat_n, lat_sum, lat_max and the
    histogram's bins (sketch.py) with each bin's count, smallest and largest value."""
    hist: dict[int, list] = {}
    top = None
    array = np.asarray(values, dtype=np.float64)
    usual = (array > 0.0) & (array < np.inf)
    if not usual.all():  # zero or negative (or, from Spark's parser, NaN and inf)
        for x in array[~usual].tolist():
            top = dmax(top, x)
            c = hist.setdefault(bin_of(x), [0, x, x])
            c[0], c[1], c[2] = c[0] + 1, dmin(c[1], x), dmax(c[2], x)
    positive = array[usual]
    if positive.size:
        top = dmax(top, float(positive.max()))
        for b, n, lo, hi in zip(*_log_bins(positive), strict=True):
            hist[b] = [n, lo, hi]
    bins = sorted(hist)
    return {"lat_n": len(values), "lat_sum": sum(values, 0.0), "lat_max": top, "bins": bins,
            "bin_counts": [hist[b][0] for b in bins], "bin_lo": [hist[b][1] for b in bins],
            "bin_hi": [hist[b][2] for b in bins]}


def _log_bins(x: np.ndarray) -> tuple[list[int], list[int], list[float], list[float]]:
    """Positive finite latencies binned at once (sketch.bin_of): bins, counts, lows, highs."""
    scaled = np.log(x) * INV_LN_GAMMA
    bins = np.ceil(scaled)
    # numpy's log may differ from math.log in the last bit: at a bin's edge, ask math.
    edge = np.abs(scaled - np.round(scaled)) < 1e-6
    if edge.any():
        bins[edge] = [bin_of(v) for v in x[edge].tolist()]
    order = np.lexsort((x, bins))
    bins, x = bins[order], x[order]
    starts = np.flatnonzero(np.r_[True, bins[1:] != bins[:-1]])
    ends = np.r_[starts[1:], bins.size]
    return (bins[starts].astype(np.int64).tolist(), (ends - starts).tolist(),
            x[starts].tolist(), x[ends - 1].tolist())


def _folded(batches: Iterable[Any], fold: Callable[[Partials, Any], None]
            ) -> Iterator[pa.RecordBatch]:
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


def _fold_lines(partials: Partials, values: list[bytes] | list[bytes | None],
                file_at: Callable[[int], str]) -> None:
    """Parses and folds lines; `file_at(i)` names the file of line i (asked only for
    the few lines kept with their file: bad and undecided ones)."""
    decode, ts_micros, add = fastparse.decode, fastparse.ts_micros, partials.add
    for i, raw in enumerate(values):
        # fastparse.parse, inlined (a call per line is ~3% of the pass)
        try:
            line = decode(raw)  # type: ignore[arg-type]
        except (ValueError, TypeError):  # undecided (TypeError: a null line)
            line = None
        else:
            if (ts := line.ts) is not None and (ts := ts_micros(ts)) is None:
                line = None
            else:
                line.ts = ts
        if line is None:
            if raw is not None and raw.strip(b" "):  # Spark's trim(): blanks are no lines
                partials.raw.append((file_at(i), raw))
        elif (reason := add(line)) is not None:
            partials.bad_rows.append((file_at(i), reason, raw or b""))  # (decoded: not null)


def _fold_text(partials: Partials, batch: pa.RecordBatch) -> None:
    # As bytes: Spark's text source keeps invalid UTF-8, which only Spark should judge.
    files = batch.column(1)
    _fold_lines(partials, batch.column(0).cast(pa.binary()).to_pylist(),
                lambda i: files[i].as_py())


def fold_text(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow over (value, file) lines: their partials."""
    return _folded(batches, _fold_text)


def _fold_split_lines(partials: Partials, item: tuple[str, list[bytes]]) -> None:
    file, lines = item
    _fold_lines(partials, lines, lambda _: file)


def fold_splits(splits: Iterable[Split]) -> Iterator[bytes]:
    """mapPartitions over splits of local files (splits.py), which the worker reads
    itself: their partials, as Arrow IPC streams (the driver merges them)."""
    for split in splits:
        lines = ((split.file, chunk) for chunk in split_lines(split))
        for batch in _folded(lines, _fold_split_lines):
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, batch.schema) as writer:
                writer.write_batch(batch)
            yield sink.getvalue().to_pybytes()


def _line(row: dict[str, Any]) -> Any:
    """A row read.parse_lines made, as the fastparse.Line the fold takes."""
    per_topic = row.pop("per_topic")
    if per_topic is not None:
        per_topic = {t: c if c is None else fastparse.Counts(**c) for t, c in per_topic}
    # The fold asks of `errors` only whether it is empty.
    errors = [None] * row.pop("error")
    return fastparse.Line(**row, errors=errors, record_stats=fastparse.RecordStats(per_topic))


def fold_rows(partials: Partials, rows: pa.Table | pa.RecordBatch) -> None:
    """Folds rows read.parse_lines made (Spark's parse of the undecided lines)."""
    for row in rows.to_pylist():
        reason, line, file = row.pop("bad_reason"), row.pop("line"), row.pop("file")
        if (reason := partials.add(_line(row), reason)) is not None:
            partials.bad_rows.append((file, reason, line))
