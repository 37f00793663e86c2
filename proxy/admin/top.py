"""/top: who is doing what to this proxy right now, for `kafkalens top`.

One JSON answer, made of two things the proxy already has: its open connections (what
/clients lists: each with the client's identity and its request and byte counters) and
the samples of a few of its metrics (the same series /metrics exposes: requests, request
durations, errors and bytes by api, connections by client software, consumer lag by
group and topic). Rates are the difference from the previous answer's counters over the
time between them, so they mean "over the last second or so" whoever asks; the
latency quantiles come from the duration histogram's buckets over that interval,
interpolated within a bucket as PromQL's histogram_quantile does.

Bounded whoever asks and however many clients there are: an answer is computed at most
every MIN_INTERVAL_SECONDS (more frequent requests share the last one), each list is cut
to `limit` rows (at most MAX_ROWS), sorted by the key asked for, with the number of rows
there were; every string is cut to MAX_STRING characters. Served behind the same access
rule as /clients (proxy/admin/http.py): it names clients too.

`TopView.update` is pure (samples and connections in, a dict out); `TopSource` gathers
its inputs, the metrics off the event loop, as /metrics is rendered.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

MIN_INTERVAL_SECONDS = 0.5
DEFAULT_ROWS = 20
MAX_ROWS = 200
MAX_STRING = 128

CLIENT_SORTS = ("requests", "bytes", "total_requests", "total_bytes", "connections")
API_SORTS = ("requests", "errors", "p99", "bytes", "name")

# The samples /top reads, by name (the exposition's names: counters with _total).
REQUESTS = "kafkalens_requests_total"
DURATION_BUCKET = "kafkalens_request_duration_seconds_bucket"
ERRORS = "kafkalens_request_errors_total"
REQUEST_BYTES = "kafkalens_request_bytes_total"
RESPONSE_BYTES = "kafkalens_response_bytes_total"
CONNECTIONS = "kafkalens_connections"
GROUP_LAG = "kafkalens_consumer_topic_lag_records"
SAMPLES = frozenset({REQUESTS, DURATION_BUCKET, ERRORS, REQUEST_BYTES, RESPONSE_BYTES, CONNECTIONS, GROUP_LAG})
# Metric family names (as a registry's collect() gives them) holding those samples.
FAMILIES = frozenset({
    "kafkalens_requests", "kafkalens_request_duration_seconds", "kafkalens_request_errors",
    "kafkalens_request_bytes", "kafkalens_response_bytes", "kafkalens_connections",
    "kafkalens_consumer_topic_lag_records",
})  # fmt: skip

IDENTITY = ("client_id", "client_software_name", "client_software_version", "client_instance_id", "principal")


class BadQuery(ValueError):
    """A /top query parameter out of its range: the message says which and what is allowed."""


@dataclass(frozen=True)
class Query:
    sort: str = "requests"
    api_sort: str = "requests"
    limit: int = DEFAULT_ROWS

    @classmethod
    def parse(cls, query: str) -> Query:
        values: dict[str, str] = {}
        for part in query.split("&"):
            if part:
                key, _, value = part.partition("=")
                values[key] = value
        unknown = set(values) - {"sort", "api_sort", "limit"}
        if unknown:
            raise BadQuery(f"unknown parameter {sorted(unknown)[0]!r}: sort, api_sort, limit")
        sort = values.get("sort", "requests")
        if sort not in CLIENT_SORTS:
            raise BadQuery(f"sort: one of {', '.join(CLIENT_SORTS)}")
        api_sort = values.get("api_sort", "requests")
        if api_sort not in API_SORTS:
            raise BadQuery(f"api_sort: one of {', '.join(API_SORTS)}")
        try:
            limit = int(values.get("limit", DEFAULT_ROWS))
        except ValueError:
            limit = -1
        if not 1 <= limit <= MAX_ROWS:
            raise BadQuery(f"limit: a whole number from 1 to {MAX_ROWS}")
        return cls(sort, api_sort, limit)


def _text(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_STRING:
        return value[: MAX_STRING - 1] + "…"
    return value


def _rate(now: float, before: float | None, interval: float | None) -> float | None:
    if before is None or not interval:
        return None
    return max(0.0, now - before) / interval


def quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """PromQL's histogram_quantile over cumulative (upper bound, count) buckets, +Inf
    last: None without observations; a rank in the +Inf bucket gives the highest
    finite bound."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    lower, below = 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if math.isinf(upper):
                return lower
            if count == below:
                return upper
            return lower + (upper - lower) * (rank - below) / (count - below)
        lower, below = upper, count
    return lower


@dataclass
class _Sample:
    at: float
    apis: dict[str, dict[str, Any]]
    conns: dict[str, tuple[int, int, int]]  # conn_id -> (requests, bytes_in, bytes_out)


@dataclass
class TopView:
    """Turns successive (samples, connections) into /top answers."""

    previous: _Sample | None = None

    def update(self, samples: Iterable[tuple[str, dict[str, str], float]], connections: list[dict[str, Any]], now: float) -> dict[str, Any]:
        apis, software, lag = self._read(samples)
        previous, self.previous = self.previous, _Sample(now, apis, {})
        interval = now - previous.at if previous is not None else None
        rows = [self._api_row(name, api, previous, interval) for name, api in apis.items()]
        clients = self._clients(connections, previous, interval)
        groups: dict[str, dict[str, Any]] = {}
        for (group, topic), value in lag.items():
            row = groups.setdefault(group, {"group": _text(group), "lag": 0.0, "topics": 0, "max_topic": "", "max_topic_lag": -1.0})
            row["lag"] += value
            row["topics"] += 1
            if value > row["max_topic_lag"]:
                row["max_topic"], row["max_topic_lag"] = _text(topic), value
        return {
            "interval_seconds": interval,
            "connections": len(connections),
            "connections_by_software": sorted(
                ({"client_software_name": _text(n), "client_software_version": _text(v), "connections": int(c)}
                 for (n, v), c in software.items() if c > 0),
                key=lambda r: (-r["connections"], r["client_software_name"], r["client_software_version"]),
            ),
            "requests_per_second": _sum_rates(rows, "requests_per_second"),
            "errors_per_second": _sum_rates(rows, "errors_per_second"),
            "requests_total": sum(r["requests_total"] for r in rows),
            "apis": rows,
            "clients": clients,
            "groups": list(groups.values()),
        }  # fmt: skip

    @staticmethod
    def _read(samples: Iterable[tuple[str, dict[str, str], float]]) -> tuple[dict[str, dict[str, Any]], dict[tuple[str, str], float], dict[tuple[str, str], float]]:
        apis: dict[str, dict[str, Any]] = {}
        software: dict[tuple[str, str], float] = {}
        lag: dict[tuple[str, str], float] = {}

        def api(name: str) -> dict[str, Any]:
            return apis.setdefault(name, {"requests": 0.0, "errors": {}, "buckets": {}, "in": 0.0, "out": 0.0})

        for name, labels, value in samples:
            if name == REQUESTS:
                api(labels["api"])["requests"] += value
            elif name == DURATION_BUCKET:
                buckets = api(labels["api"])["buckets"]
                bound = float(labels["le"])
                buckets[bound] = buckets.get(bound, 0.0) + value
            elif name == ERRORS:
                errors = api(labels["api"])["errors"]
                errors[labels["error"]] = errors.get(labels["error"], 0.0) + value
            elif name == REQUEST_BYTES:
                api(labels["api"])["in"] += value
            elif name == RESPONSE_BYTES:
                api(labels["api"])["out"] += value
            elif name == CONNECTIONS:
                key = (labels["client_software_name"], labels["client_software_version"])
                software[key] = software.get(key, 0.0) + value
            elif name == GROUP_LAG:
                key = (labels["group"], labels["topic"])
                lag[key] = lag.get(key, 0.0) + value
        return apis, software, lag

    @staticmethod
    def _api_row(name: str, api: dict[str, Any], previous: _Sample | None, interval: float | None) -> dict[str, Any]:
        before = previous.apis.get(name) if previous is not None else None
        if previous is not None and before is None:  # first seen since: all of it is new
            before = {"requests": 0.0, "errors": {}, "buckets": {}, "in": 0.0, "out": 0.0}
        buckets = sorted(api["buckets"].items())
        responses = buckets[-1][1] if buckets else 0.0
        errors = sum(api["errors"].values())
        row: dict[str, Any] = {
            "api": _text(name),
            "requests_total": int(api["requests"]),
            "responses_total": int(responses),
            "errors_total": int(errors),
            "request_bytes_total": int(api["in"]),
            "response_bytes_total": int(api["out"]),
            "requests_per_second": None, "errors_per_second": None, "error_ratio": None,
            "bytes_per_second": None, "p50_ms": None, "p99_ms": None, "top_error": None,
        }  # fmt: skip
        worst = max(api["errors"].items(), key=lambda kv: kv[1], default=None)
        if worst is not None and worst[1] > 0:
            row["top_error"] = _text(worst[0])
        if before is None or not interval:
            return row
        earlier = before["buckets"]
        window = [(bound, count - earlier.get(bound, 0.0)) for bound, count in buckets]
        answered = window[-1][1] if window else 0.0
        errors_then = sum(before["errors"].values())
        row["requests_per_second"] = _rate(api["requests"], before["requests"], interval)
        row["errors_per_second"] = _rate(errors, errors_then, interval)
        row["bytes_per_second"] = _rate(api["in"] + api["out"], before["in"] + before["out"], interval)
        if answered > 0:
            row["error_ratio"] = max(0.0, errors - errors_then) / answered
            for q, key in ((0.5, "p50_ms"), (0.99, "p99_ms")):
                seconds = quantile(q, window)
                row[key] = None if seconds is None else seconds * 1000
        recent = {e: c - before["errors"].get(e, 0.0) for e, c in api["errors"].items()}
        worst_now = max(recent.items(), key=lambda kv: kv[1], default=None)
        if worst_now is not None and worst_now[1] > 0:
            row["top_error"] = _text(worst_now[0])
        return row

    def _clients(self, connections: list[dict[str, Any]], previous: _Sample | None, interval: float | None) -> list[dict[str, Any]]:
        assert self.previous is not None
        seen = self.previous.conns
        clients: dict[tuple[Any, ...], dict[str, Any]] = {}
        for conn in connections:
            # /clients names identity fields as the request log does, at the top; a
            # worker of the release before nests them in `identity` and names `conn_id`
            identity = {k: conn.get(k, (conn.get("identity") or {}).get(k)) for k in IDENTITY}
            address = conn.get("client_address") or conn.get("client") or ""
            host = address.rsplit(":", 1)[0] if ":" in address else address
            counts = (int(conn.get("requests", 0)), int(conn.get("bytes_in", 0)), int(conn.get("bytes_out", 0)))
            conn_id = str(conn.get("conn") or conn.get("conn_id"))
            seen[conn_id] = counts
            key = (*(identity.get(k) for k in IDENTITY), host)
            row = clients.get(key)
            if row is None:
                row = clients[key] = {k: _text(identity.get(k)) for k in IDENTITY}
                row.update(client_host=_text(host), connections=0, in_flight=0, requests_total=0,
                           bytes_in_total=0, bytes_out_total=0, requests_per_second=None, bytes_per_second=None,
                           _requests=0, _bytes=0)  # fmt: skip
            row["connections"] += 1
            row["in_flight"] += int(conn.get("in_flight", 0))
            row["requests_total"] += counts[0]
            row["bytes_in_total"] += counts[1]
            row["bytes_out_total"] += counts[2]
            if previous is not None:
                # A connection not in the previous answer opened since: all its counts are new.
                was = previous.conns.get(conn_id, (0, 0, 0))
                row["_requests"] += max(0, counts[0] - was[0])
                row["_bytes"] += max(0, counts[1] - was[1]) + max(0, counts[2] - was[2])
        for row in clients.values():
            requests, nbytes = row.pop("_requests"), row.pop("_bytes")
            if previous is not None and interval:
                row["requests_per_second"] = requests / interval
                row["bytes_per_second"] = nbytes / interval
        return list(clients.values())


def _sum_rates(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r[key] is not None]
    return sum(values) if values else None


def _number(value: Any) -> float:
    return -1.0 if value is None else float(value)


CLIENT_KEYS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "requests": lambda r: (_number(r["requests_per_second"]), r["requests_total"]),
    "bytes": lambda r: (_number(r["bytes_per_second"]), r["bytes_in_total"] + r["bytes_out_total"]),
    "total_requests": lambda r: r["requests_total"],
    "total_bytes": lambda r: r["bytes_in_total"] + r["bytes_out_total"],
    "connections": lambda r: (r["connections"], r["requests_total"]),
}
API_KEYS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "requests": lambda r: (_number(r["requests_per_second"]), r["requests_total"]),
    "errors": lambda r: (_number(r["errors_per_second"]), r["errors_total"]),
    "p99": lambda r: (_number(r["p99_ms"]), r["requests_total"]),
    "bytes": lambda r: (_number(r["bytes_per_second"]), r["request_bytes_total"] + r["response_bytes_total"]),
}


def cut(full: dict[str, Any], query: Query) -> dict[str, Any]:
    """The answer for `query`: each list sorted by its key, at most `limit` rows, with
    how many rows there were."""
    out = dict(full)
    clients = sorted(full["clients"], key=CLIENT_KEYS[query.sort], reverse=True)
    if query.api_sort == "name":
        apis = sorted(full["apis"], key=lambda r: r["api"])
    else:
        apis = sorted(full["apis"], key=API_KEYS[query.api_sort], reverse=True)
    groups = sorted(full["groups"], key=lambda r: (r["lag"], r["group"]), reverse=True)
    software = full["connections_by_software"]
    for key, rows in (("clients", clients), ("apis", apis), ("groups", groups), ("connections_by_software", software)):
        out[key] = rows[: query.limit]
        out[f"{key}_count"] = len(rows)
    out["sort"], out["api_sort"], out["limit"] = query.sort, query.api_sort, query.limit
    return out


Samples = Iterable[tuple[str, dict[str, str], float]]


def samples_of(families: Iterable[Any]) -> Samples:
    """(name, labels, value) of the samples /top reads, from prometheus-client metric
    families (a registry's or a collector's collect())."""
    for family in families:
        if family.name in FAMILIES:
            for sample in family.samples:
                if sample.name in SAMPLES:
                    yield sample.name, sample.labels, sample.value


@dataclass
class TopSource:
    """Answers /top: `families` gives the metric families (called in a thread),
    `connections` the open connections (called on the loop), `before` runs on the loop
    first (the hot path's counts handed to prometheus-client)."""

    families: Callable[[], Iterable[Any]]
    connections: Callable[[], list[dict[str, Any]]]
    before: Callable[[], None] | None = None
    clock: Callable[[], float] = time.monotonic
    view: TopView = field(default_factory=TopView)
    _last: tuple[float, dict[str, Any]] | None = None
    _making: asyncio.Future[dict[str, Any]] | None = None

    async def answer(self, query: Query) -> dict[str, Any]:
        last = self._last
        if last is not None and self.clock() - last[0] < MIN_INTERVAL_SECONDS:
            return cut(last[1], query)
        if self._making is None:
            making = asyncio.ensure_future(self._make())
            self._making = making
            making.add_done_callback(lambda _: setattr(self, "_making", None))
        return cut(await asyncio.shield(self._making), query)

    async def _make(self) -> dict[str, Any]:
        if self.before is not None:
            self.before()
        connections = self.connections()
        samples = await asyncio.to_thread(lambda: list(samples_of(self.families())))
        now = self.clock()
        full = self.view.update(samples, connections, now)
        self._last = (now, full)
        return full


def metrics_families(metrics: Any) -> Callable[[], Iterable[Any]]:
    """A single process's families: its lag tables published (as a /metrics collection
    does), then the few metrics /top reads, each collected on its own."""

    def collect() -> Iterable[Any]:
        for publish in metrics.collectors:
            publish()
        for metric in (metrics.requests, metrics.request_duration, metrics.request_errors,
                       metrics.request_bytes, metrics.response_bytes, metrics.connections,
                       metrics.family(GROUP_LAG)):  # fmt: skip
            if metric is not None:  # the lag feature's, when the proxy has it
                yield from metric.collect()

    return collect


TopAnswer = Callable[[Query], Awaitable[dict[str, Any]]]
