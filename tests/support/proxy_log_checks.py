"""Checks of `kafkalens report`'s tables against the request-log lines they were made
from (the plain-Python reference of support.report_oracle), for the proxy's own logs:
written by it from real clients, or decoded from a capture by `kafkalens decode`."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipeline.readiness_data import removed_versions
from support.clients import Record
from support.report_oracle import expected_only, failed, micros, resolved, waits

OLD = (0, 10, 1)


def records(stem: str) -> list[Record]:
    return [Record(f"{stem}-{i}".encode(), b"v" * 50, ()) for i in range(5)]


def rows(spark: SparkSession, out: Path, name: str) -> list[dict[str, Any]]:
    df = spark.read.parquet(str(out / name))
    stamps = [F.unix_micros(c).alias(c) for c, t in df.dtypes if t == "timestamp"]
    other = [c for c, t in df.dtypes if t != "timestamp"]
    return [r.asDict(recursive=True) for r in df.select(*other, *stamps).collect()]


def check_readiness_names_the_old_client(spark: SparkSession, reported: tuple) -> None:
    requests, out = reported
    removed = {(key, version) for key, _, version, _ in removed_versions()}
    old = Counter(
        (line["client_id"], line["api"], line["api_version"])
        for line in requests
        if (line["api_key"], line["api_version"]) in removed
    )
    assert old and all(client.startswith("kafka-python") for client, _, _ in old)
    assert {api for _, api, _ in old} >= {"Produce"}  # Produce v2 (its Metadata v2 is
    # one Kafka 4 accepts again: tests/interop/test_kafka_removed_versions.py)
    got: Counter[tuple[Any, Any, Any]] = Counter()
    for row in rows(spark, out, "kafka4_readiness"):
        got[(row["client_id"], row["api"], row["api_version"])] += row["requests"]
    assert got == old


def check_inventory_and_usage_match_the_lines(spark: SparkSession, reported: tuple) -> None:
    requests, out = reported
    want: dict[str, list] = defaultdict(lambda: [0, 0, 0, Counter(), set()])
    for r in resolved(requests):
        w = want[r["key"]]
        w[0] += 1
        w[1] += failed(r)
        w[2] += expected_only(r)
        w[3][r["api"]] += 1
        w[4].add(r["conn"])
    inventory = {r["client_key"]: r for r in rows(spark, out, "client_inventory")}
    assert {k: [r["requests"], r["errors"], r["expected_errors"], r["requests_by_api"],
                r["connections"]] for k, r in inventory.items()} == {
        k: [n, e, x, dict(apis), len(conns)] for k, (n, e, x, apis, conns) in want.items()}
    assert "confluent-kafka-python" in {r["client_software_name"] for r in inventory.values()}
    usage: Counter[tuple] = Counter()
    for r in rows(spark, out, "api_usage"):
        usage[(r["api"], r["api_version"])] += r["requests"]
    assert usage == Counter((line["api"], line["api_version"]) for line in requests)


def check_latency_and_errors_by_api_match_the_lines(spark: SparkSession, reported: tuple
                                                   ) -> None:
    requests, out = reported
    by_api = {r["api"]: r for r in rows(spark, out, "latency_by_api")}
    for api, row in by_api.items():
        mine = [e for e in requests if e["api"] == api]
        assert (row["requests"], row["errors"], row["expected_errors"]) == (
            len(mine), sum(map(failed, mine)), sum(map(expected_only, mine))), api
        assert row["waiting_requests"] == sum(map(waits, mine)), api
        service = [e["latency_ms"] for e in mine if e["latency_ms"] is not None and not waits(e)]
        waiting = [e["latency_ms"] for e in mine if e["latency_ms"] is not None and waits(e)]
        assert row["max_ms"] == (max(service) if service else None), api
        assert row["waiting_max_ms"] == (max(waiting) if waiting else None), api
    # The consumer's group: JoinGroup waited for the rebalance, Fetch long-polled.
    assert by_api["JoinGroup"]["waiting_requests"] == by_api["JoinGroup"]["requests"] > 0
    assert by_api["JoinGroup"]["p99_ms"] is None
    assert by_api["Fetch"]["waiting_requests"] > 0


def check_consumer_group_and_topics_match_the_lines(spark: SparkSession, reported: tuple
                                                   ) -> None:
    requests, out = reported
    groups = {r["group_id"]: r for r in rows(spark, out, "consumer_groups")}
    mine = [e for e in requests if e.get("group_id") == "report-readers"]
    group = groups["report-readers"]
    assert group["requests"] == len(mine)
    assert (group["errors"], group["expected_errors"]) == (
        sum(map(failed, mine)), sum(map(expected_only, mine)))
    assert group["first_seen"] == min(micros(e["ts"]) for e in mine)
    assert group["distinct_member_ids"] == len({e["member_id"] for e in mine if e.get("member_id")})
    topics = {r["topic"]: r for r in rows(spark, out, "top_topics")}
    produced: Counter[str] = Counter()
    fetched: Counter[str] = Counter()
    for e in requests:
        for topic, c in ((e.get("record_stats") or {}).get("per_topic") or {}).items():
            (produced if e["api_key"] == 0 else fetched)[topic] += c["records"]
    assert {t: (r["produced_records"], r["fetched_records"]) for t, r in topics.items()} == {
        t: (produced[t], fetched[t]) for t in produced.keys() | fetched.keys()}
    assert topics["modern"]["produced_records"] == 5 and topics["modern"]["fetched_records"] >= 5


def check_fleet_lag_and_access_match_the_lines(spark: SparkSession, reported: tuple) -> None:
    """The proxy's own lag fields (Fetch `positions`, group learnt from the consumer's
    JoinGroup on this sidecar) and record counts, as the fleet tables give them back."""
    requests, out = reported
    newest: dict[tuple[str, int], tuple[str, int]] = {}
    for e in requests:
        for pos in e.get("positions") or ():
            key = (pos["topic"], pos["partition"])
            if key not in newest or e["ts"] >= newest[key][0]:
                newest[key] = (e["ts"], pos["lag"])
    assert ("modern", 0) in newest
    lag = rows(spark, out, "consumer_lag")
    latest: dict[tuple[str, int], tuple[int, int]] = {}
    for r in lag:
        key = (r["topic"], r["partition"])
        if key not in latest or r["last_seen"] >= latest[key][0]:
            latest[key] = (r["last_seen"], r["latest_lag"])
    assert {k: v[1] for k, v in latest.items()} == {k: v[1] for k, v in newest.items()}
    assert {r["group_id"] for r in lag if r["topic"] == "modern"} == {"report-readers"}
    access: Counter[tuple[str, str]] = Counter()
    for r in rows(spark, out, "topic_access"):
        access[(r["topic"], r["direction"])] += r["records"]
    want: Counter[tuple[str, str]] = Counter()
    for e in requests:
        for topic, c in ((e.get("record_stats") or {}).get("per_topic") or {}).items():
            want[(topic, "produce" if e["api_key"] == 0 else "fetch")] += c["records"]
    assert access == want and access[("modern", "produce")] == 5
