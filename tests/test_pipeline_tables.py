"""The client and latency tables built by Arrow's group_by (pipeline.clients,
pipeline.traffic) against a plain Python reference with Spark's aggregate semantics
(nulls a key value like any other, sums, mins and maxes skipping nulls, NaN the
largest double), over random request groups and latency partials full of nulls."""

from __future__ import annotations

import math
import random
from typing import Any

import pyarrow as pa
import pytest

from pipeline import clients, partials, sketch, traffic
from pipeline.agg import Row, add, dmax, dmin, least, most
from pipeline.clients import CONN, IDENTITY, UNKNOWN_API, client_host
from pipeline.merge import _GROUP_SCHEMA, LATENCY_SCHEMA
from pipeline.readiness_data import removed_versions


def _key(row: Row) -> str:
    if row["client_instance_id"] is not None:
        return row["client_instance_id"]
    return "|".join(row[name] or "" for name in (
        "client_id", "client_host", "client_software_name", "client_software_version"))


def reference_usage(groups: list[Row]) -> list[Row]:
    identity: dict[tuple, dict[str, Any]] = {}
    usage: dict[tuple, list] = {}
    for g in groups:
        conn = tuple(g[name] for name in CONN)
        known = identity.setdefault(conn, dict.fromkeys(IDENTITY))
        for name in IDENTITY:
            known[name] = most(known[name], g[name])
        key = (conn, g["api_key"], g["api"], g["api_version"])
        u = usage.setdefault(key, [None, None, None, None])
        u[0], u[1] = add(u[0], g["requests"]), add(u[1], g["errors"])
        u[2], u[3] = least(u[2], g["first_seen"]), most(u[3], g["last_seen"])
    rows = []
    for (conn, api_key, api, version), (n, errors, first, last) in usage.items():
        row = {**dict(zip(CONN, conn, strict=True)), **identity[conn], "api_key": api_key,
               "api": api, "api_version": version, "requests": n, "errors": errors,
               "first_seen": first, "last_seen": last}
        row["client_host"] = client_host(row["client_address"])
        row["client_key"] = _key(row)
        rows.append(row)
    return rows


def _identity(rows: list[Row]) -> Row:
    fields = ("client_instance_id", "client_id", "client_software_name",
              "client_software_version")
    out: Row = dict.fromkeys(fields)
    for r in rows:
        for name in fields:
            out[name] = most(out[name], r[name])
    out["client_hosts"] = sorted({r["client_host"] for r in rows} - {None})
    return out


def _span(rows: list[Row]) -> Row:
    out: Row = {"requests": None, "errors": None, "first_seen": None, "last_seen": None}
    for r in rows:
        out["requests"], out["errors"] = add(out["requests"], r["requests"]), add(
            out["errors"], r["errors"])
        out["first_seen"] = least(out["first_seen"], r["first_seen"])
        out["last_seen"] = most(out["last_seen"], r["last_seen"])
    return out


def _by(rows: list[Row], keys: tuple[str, ...]) -> dict[tuple, list[Row]]:
    grouped: dict[tuple, list[Row]] = {}
    for r in rows:
        grouped.setdefault(tuple(r[k] for k in keys), []).append(r)
    return grouped


def reference_inventory(usage: list[Row]) -> list[Row]:
    rows = []
    for (key,), mine in _by(usage, ("client_key",)).items():
        by_api: dict[str, Any] = {}
        for r in mine:
            api = UNKNOWN_API if r["api"] is None else r["api"]
            by_api[api] = add(by_api.get(api), r["requests"])
        rows.append({"client_key": key, **_identity(mine),
                     "principals": sorted({r["principal"] for r in mine} - {None}),
                     **_span(mine), "connections": len({tuple(r[c] for c in CONN) for r in mine}),
                     "requests_by_api": by_api})
    return rows


def reference_api_usage(usage: list[Row]) -> list[Row]:
    keys = ("api", "api_key", "api_version", "client_software_name", "client_software_version")
    return [{**dict(zip(keys, key, strict=True)), **_span(mine),
             "clients": len({r["client_key"] for r in mine})}
            for key, mine in _by(usage, keys).items()]


def reference_readiness(usage: list[Row]) -> list[Row]:
    removed: dict[tuple, int] = {}
    for api_key, _, version, minimum in removed_versions():
        removed[(api_key, version)] = max(minimum, removed.get((api_key, version), minimum))
    keys = ("client_key", "api", "api_key", "api_version")
    refused = [r for r in usage if (r["api_key"], r["api_version"]) in removed]
    rows = []
    for key, mine in _by(refused, keys).items():
        span = _span(mine)
        del span["errors"]
        rows.append({**dict(zip(keys, key, strict=True)), **_identity(mine),
                     "kafka4_min_version": removed[(key[2], key[3])], **span})
    return rows


def random_groups(rng: random.Random, n: int) -> list[Row]:
    def pick(*values: Any) -> Any:
        return rng.choice(values)

    rows = []
    for _ in range(n):
        conn = rng.randrange(12)
        rows.append({
            "listener": pick("plain", "tls", None), "conn": pick(f"c{conn}", None, ""),
            "client_address": pick(f"10.0.0.{conn}:{rng.randrange(9000, 9003)}",
                                   "[::1]:5", "nohost", None, ""),
            "api_key": pick(0, 1, 3, 11, None), "api_version": pick(0, 1, 2, 9, None),
            "api": pick("Produce", "Fetch", "Metadata", None, "ApiKey3"),
            **{name: pick(f"{name}-{rng.randrange(3)}", None, "") for name in IDENTITY},
            **{name: pick("g", None) for name in clients.GROUP_KEYS},
            "requests": rng.randrange(1, 50), "errors": pick(0, 1, 3),
            "first_seen": pick(rng.randrange(10**6), None),
            "last_seen": pick(rng.randrange(10**6, 2 * 10**6), None),
            "members": pick(None, 3), "generation_id": pick(None, 2),
        })
    return rows


def _canon(rows: list[Row]) -> list[str]:
    return sorted(repr(sorted((k, sorted(v.items()) if isinstance(v, dict) else v)
                              for k, v in r.items())) for r in rows)


@pytest.mark.parametrize("seed", range(5))
def test_client_tables_match_the_python_reference(seed: int) -> None:
    groups = random_groups(random.Random(seed), 600)
    table = pa.Table.from_pylist(groups, schema=_GROUP_SCHEMA)
    usage = clients.connection_usage(table)
    want_usage = reference_usage(groups)
    assert _canon(usage.to_pylist()) == _canon(want_usage)
    assert _canon(clients.client_inventory(usage)) == _canon(reference_inventory(want_usage))
    assert _canon(clients.api_usage(usage)) == _canon(reference_api_usage(want_usage))
    assert reference_readiness(want_usage)  # (the random versions include removed ones)
    assert _canon(clients.kafka4_readiness(usage)) == _canon(reference_readiness(want_usage))


def test_client_tables_of_nothing() -> None:
    usage = clients.connection_usage(pa.Table.from_batches([], _GROUP_SCHEMA))
    assert usage.num_rows == 0
    assert clients.client_inventory(usage) == clients.api_usage(usage) == []
    assert clients.kafka4_readiness(usage) == []


# The latency tables: partial rows merged by Arrow and numpy (pipeline.traffic)
# against the merge done value by value with Spark's rules (agg.py) and sketch.py.

def reference_latency(keys: list[tuple], parts: list[Row], quantiles: tuple[float, ...]
                      ) -> list[Row]:
    merged: dict[tuple, list] = {}
    for key, p in zip(keys, parts, strict=True):
        s = merged.setdefault(key, [0, 0, 0, 0.0, None, {}])
        s[0], s[1] = add(s[0], p["requests"]), add(s[1], p["errors"])
        s[2], s[3], s[4] = add(s[2], p["lat_n"]), add(s[3], p["lat_sum"]), dmax(s[4], p["lat_max"])
        for b, n, lo, hi in zip(p["bins"], p["bin_counts"], p["bin_lo"], p["bin_hi"],
                                strict=True):
            c = s[5].setdefault(b, [0, lo, hi])
            c[0], c[1], c[2] = c[0] + n, dmin(c[1], lo), dmax(c[2], hi)
    rows = []
    for key, (requests, errors, n, total, top, bins) in merged.items():
        hist = [(b, c[0], c[1], c[2]) for b, c in sorted(bins.items())]
        row: Row = {"key": key, "requests": requests, "errors": errors}
        for q in quantiles:
            row[f"p{round(q * 100)}_ms"] = sketch.percentile(hist, n, q)
        row.update(avg_ms=total / n if n > 0 else None, max_ms=top)
        rows.append(row)
    return rows


def random_latency_parts(rng: random.Random, n: int) -> list[Row]:
    """Partial latency rows as workers make them (partials.latency_stats), of a few
    apis and minutes, with zero, negative, infinite and NaN latencies (Spark's parser
    takes NaN) and minutes without any."""
    special = [0.0, -1.0, math.inf, math.nan]
    parts = []
    for _ in range(n):
        count = rng.choice([0, 0, 1, 2, 5, 40])
        values = [rng.choice(special) if rng.random() < 0.05
                  else round(rng.lognormvariate(1, 2), 3) for _ in range(count)]
        errors = rng.choice([None, 0, 1, count])
        parts.append({"api": rng.choice(["Produce", "Fetch", "Metadata", None]),
                      "api_key": rng.choice([0, 1, 3]), "minute": rng.randrange(29013840, 29013900),
                      "requests": rng.choice([None, count + 3]), "errors": errors,
                      **partials.latency_stats(values)})
    for values in ([math.nan, 2.0], [math.inf, 0.0, 2.0]):  # one bin with inf and NaN
        parts.insert(rng.randrange(len(parts) + 1), {
            "api": "Produce", "api_key": 0, "minute": 29013840, "requests": 3, "errors": 0,
            **partials.latency_stats(values)})
    return parts


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-12, abs=0)
    return a == b and type(a) is type(b)


@pytest.mark.parametrize("seed", range(6))
def test_latency_tables_match_the_value_by_value_merge(seed: int) -> None:
    rng = random.Random(seed)
    parts = random_latency_parts(rng, rng.choice([1, 30, 400]))
    table = pa.Table.from_pylist(parts, schema=LATENCY_SCHEMA)
    by_api = traffic.latency_by_api(table)
    want = reference_latency([(p["api"], p["api_key"]) for p in parts], parts,
                             traffic.QUANTILES)
    assert [(r["api"], r["api_key"]) for r in by_api] == [w.pop("key") for w in want]
    for got, w in zip(by_api, want, strict=True):
        assert all(_same(got[name], value) for name, value in w.items()), (got, w)
    over_time = traffic.latency_over_time(table, 180)
    keys = [(traffic._bucket_start(p["minute"], 180) * 1_000_000, p["api"]) for p in parts]
    want = reference_latency(keys, parts, (0.5, 0.95))
    assert [(r["bucket"], r["api"]) for r in over_time] == [w.pop("key") for w in want]
    for got, w in zip(over_time, want, strict=True):
        assert all(_same(got[name], w[name]) for name in ("requests", "errors", "p50_ms",
                                                          "p95_ms")), (got, w)
    (produce,) = [r for r in by_api if (r["api"], r["api_key"]) == ("Produce", 0)]
    assert math.isnan(produce["max_ms"])  # a NaN is the largest, as in Spark


def test_latency_tables_of_nothing() -> None:
    empty = pa.Table.from_batches([], LATENCY_SCHEMA)
    assert traffic.latency_by_api(empty) == traffic.latency_over_time(empty, 60) == []
