"""The client tables built by Arrow's group_by (pipeline.clients) against a plain
Python reference with Spark's aggregate semantics (nulls a key value like any other,
sums, mins and maxes skipping nulls), over random request groups full of nulls."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest

from pipeline import clients
from pipeline.agg import Row, add, least, most
from pipeline.clients import CONN, IDENTITY, UNKNOWN_API, client_host
from pipeline.merge import _GROUP_SCHEMA
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
