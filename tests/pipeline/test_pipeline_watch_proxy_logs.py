"""`kafkalens watch` over a request log the proxy wrote for real clients.

A kafka-python consumer group through the proxy to tansu: tansu answers the first
JoinGroup with MEMBER_ID_REQUIRED (KIP-394), a protocol step; an idle consumer's
Fetches at the end of the topic wait out their max_wait_ms. The watch must count the
first as no failure and the second as waits, not service latency; its per-window
counts must be those of the log's lines (the reference: support.report_oracle, the
report's definitions).

The broker is tansu: what is tested is the watch's reading of the log, the same whatever
the broker (the log's lines in front of Apache Kafka: test_observability_e2e.py).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from support.clients import FETCH_MAX_WAIT_MS, run_workload
from support.observed import observed_in_front_of
from support.report_oracle import failed, waits
from support.synth import iso

from pipeline.watch import WatchOptions, run_watch

IDLE_POLL_S = 3.0


def _idle_consumer(bootstrap: str, topic: str) -> None:
    """Fetches at the end of the topic: each waits max_wait_ms and comes back empty."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, client_id="idle",
                             auto_offset_reset="latest", fetch_max_wait_ms=FETCH_MAX_WAIT_MS)
    try:
        deadline = time.monotonic() + IDLE_POLL_S
        while time.monotonic() < deadline:
            consumer.poll(timeout_ms=500)
    finally:
        consumer.close()


def _ts(line: dict[str, Any]) -> dt.datetime:
    return dt.datetime.fromisoformat(line["ts"].replace("Z", "+00:00")).replace(tzinfo=None)


def expected(requests: list[dict[str, Any]]) -> dict[tuple[dt.datetime, str], tuple[int, ...]]:
    """(minute, api) -> (requests, failures, waits by design), from the lines."""
    out: Counter = Counter()
    for line in requests:
        key = (_ts(line).replace(second=0, microsecond=0), line["api"])
        out[(key, "requests")] += 1
        out[(key, "errors")] += failed(line)
        out[(key, "waited")] += waits(line)
    keys = {k for k, _ in out}
    return {k: (out[(k, "requests")], out[(k, "errors")], out[(k, "waited")]) for k in keys}


def test_watch_over_the_proxys_own_log(
    tansu_factory: Any, tmp_path: Path, spark: SparkSession
) -> None:
    logs, out = tmp_path / "logs", tmp_path / "out"
    log = logs / "requests.log"
    topic = "watched"
    with observed_in_front_of(tansu_factory, log) as px:
        outcome = run_workload("kafka-python", px.bootstrap, topic, count=5, admin=False)
        assert len(outcome.consumed) == 5
        _idle_consumer(px.bootstrap, topic)
        px.wait_all_closed()
        lines = px.lines()
    requests = [x for x in lines if x["event"] in ("request", "request_no_response")]
    joins = [x for x in requests if x["api"] == "JoinGroup"]
    assert any("MEMBER_ID_REQUIRED" in x["errors"] for x in joins)  # tansu's first answer
    idle = [x for x in requests if x["api"] == "Fetch" and x["client_id"] == "idle"]
    assert idle and all(x["max_wait_ms"] == FETCH_MAX_WAIT_MS for x in idle)
    assert any(x["latency_ms"] >= FETCH_MAX_WAIT_MS for x in idle)

    # Rotated as the proxy rotates; a later line (another file) moves the watermark past
    # every minute of the traffic, so that all its windows are final.
    log.rename(logs / "requests.log.2")
    later = max(map(_ts, requests)) + dt.timedelta(minutes=5)
    marker = {"event": "request", "ts": iso(later.replace(tzinfo=dt.UTC).timestamp()),
              "api": "Metadata", "errors": [], "latency_ms": 1.0}
    (logs / "requests.log.1").write_text(json.dumps(marker) + "\n")
    # The spool takes files not written to for a moment; the traffic's file is the older,
    # so it is read first (files of one modification time are read in no set order, and
    # the marker read first would make every window of the traffic late: dropped).
    settled = time.time() - 10
    os.utime(logs / "requests.log.2", (settled - 5, settled - 5))
    os.utime(logs / "requests.log.1", (settled, settled))
    # The marker is dated 5 minutes ahead of the traffic, so ahead of its arrival:
    # --max-skew lets it through unclamped (by default it would be clamped to its
    # arrival plus a minute, and the traffic's windows stay open).
    assert run_watch(spark, WatchOptions(str(logs), out=str(out), once=True,
                                         max_files_per_trigger=1, max_skew="10 minutes")) == 0

    table = spark.read.parquet(str(out / "by_api")).select(
        F.date_format("window_start", "yyyy-MM-dd HH:mm").alias("start"), "*").collect()
    got = {(dt.datetime.strptime(r["start"], "%Y-%m-%d %H:%M"), r["api"]):
           (r["requests"], r["errors"], r["waiting_requests"]) for r in table}
    assert got == expected(requests)
    by_api: Counter = Counter()
    for (_, api), (_, errors, waited) in got.items():
        by_api[(api, "errors")] += errors
        by_api[(api, "waited")] += waited
    assert by_api[("JoinGroup", "errors")] == 0 and by_api[("JoinGroup", "waited")] == len(joins)
    fetches = [x for x in requests if x["api"] == "Fetch"]
    assert by_api[("Fetch", "waited")] == len(fetches)  # every fetch may long-poll
    # The service latency leaves the waits out: no Fetch is in it.
    assert all(r["p99_ms"] is None for r in table if r["api"] == "Fetch")
