"""`kafkalens report` over what `kafkalens decode` made of a capture: the fleet report
for traffic no proxy saw. The traffic is that of tests/pipeline/test_pipeline_proxy_logs.py
(an old kafka-python, a current confluent-kafka producing and consuming in a group),
straight to tansu, captured with tcpdump; the same checks then hold every table
against the plain-Python reference over the decoded lines.

The traffic is to tansu, which still answers the versions Kafka 4.0 removed that the
readiness table must name; Apache Kafka 4.x refuses them.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from support import ck_client, kp_client
from support.capture import decode, events, tcpdump
from support.proxy_log_checks import (
    OLD,
    check_consumer_group_and_topics_match_the_lines,
    check_inventory_and_usage_match_the_lines,
    check_latency_and_errors_by_api_match_the_lines,
    check_readiness_names_the_old_client,
    records,
)

from pipeline.report import run_report
from pipeline.schema import REQUEST_EVENTS
from proxy.observe.request_log import render


def test_report_over_a_decoded_capture(tansu: Any, tmp_path: Path, spark: SparkSession) -> None:
    bootstrap = f"127.0.0.1:{tansu.port}"
    with tcpdump(tmp_path / "traffic.pcap", tansu.port, interface="any"):
        with contextlib.suppress(Exception):  # tansu refuses Produce v2; the request is there
            kp_client.produce(bootstrap, "legacy", records("old"), api_version=OLD)
        ck_client.produce(bootstrap, "modern", records("new"))
        assert len(ck_client.consume(bootstrap, "modern", "report-readers", 5)) == 5
    lines = decode(tmp_path / "traffic.pcap")  # no --port: told by their first frames
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "capture.jsonl").write_bytes(b"".join(render(line) + b"\n" for line in lines))

    result = run_report(spark, [str(logs)], str(tmp_path / "out"))
    requests = [line for line in lines if line["event"] in REQUEST_EVENTS]
    assert result.counts.bad == 0
    assert result.counts.requests == len(requests) >= 20
    assert not events(lines, "capture_unmatched_response", "capture_stream_error")
    reported = (requests, tmp_path / "out")
    check_readiness_names_the_old_client(spark, reported)
    check_inventory_and_usage_match_the_lines(spark, reported)
    check_latency_and_errors_by_api_match_the_lines(spark, reported)
    check_consumer_group_and_topics_match_the_lines(spark, reported)
