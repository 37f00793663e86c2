"""The plain-Python reference the report's tests hold Spark's tables to: what a
request log line means (expected_errors.json, waits by design, the client identity),
computed the straightforward way."""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from codec import ApiKey

EXPECTED_FILE = Path(__file__).resolve().parents[2] / "pipeline" / "data" / "expected_errors.json"
EXPECTED = {api: set(names) for api, names in json.loads(EXPECTED_FILE.read_text()).items()
            if not api.startswith("_")}


def failed(e: dict[str, Any]) -> bool:
    """The reference's reading of expected_errors.json: an error not a protocol step."""
    return bool(set(e.get("errors") or ()) - EXPECTED.get(e.get("api") or "", set()))


def expected_only(e: dict[str, Any]) -> bool:
    return bool(e.get("errors")) and not failed(e)


def waits(e: dict[str, Any]) -> bool:
    """Long polls allowed to wait (max_wait_ms > 0 or not logged) and JoinGroup; a line
    without api_key is known by its api name."""
    key = e.get("api_key")
    if key is None:
        key = {"Fetch": ApiKey.FETCH, "ShareFetch": ApiKey.SHARE_FETCH, "JoinGroup": ApiKey.JOIN_GROUP}.get(
            e.get("api") or "")
    if key in (ApiKey.FETCH, ApiKey.SHARE_FETCH):
        return e.get("max_wait_ms") is None or e["max_wait_ms"] > 0
    return key == ApiKey.JOIN_GROUP


def micros(ts: str) -> int:
    t = dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))
    return int(t.timestamp()) * 1_000_000 + t.microsecond


def micros_of(t: dt.datetime | None) -> int:
    assert t is not None
    return int(t.replace(tzinfo=dt.UTC).timestamp()) * 1_000_000 + t.microsecond


def host(address: str) -> str:
    return address.rsplit(":", 1)[0]


def resolved(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each request with its connection's identity (the max of each field on the conn)."""
    fields = ("client_id", "client_instance_id", "client_software_name",
              "client_software_version", "principal")
    per_conn: dict[tuple, dict[str, Any]] = defaultdict(dict)
    for e in requests:
        ident = per_conn[(e["listener"], e["client_address"], e["conn"])]
        for f in fields:
            if e[f] is not None and (ident.get(f) is None or e[f] > ident[f]):
                ident[f] = e[f]
    out = []
    for e in requests:
        ident = per_conn[(e["listener"], e["client_address"], e["conn"])]
        r = {**e, **{f: ident.get(f) for f in fields}}
        r["key"] = r["client_instance_id"] or "|".join([
            r["client_id"] or "", host(e["client_address"]),
            r["client_software_name"] or "", r["client_software_version"] or ""])
        out.append(r)
    return out
