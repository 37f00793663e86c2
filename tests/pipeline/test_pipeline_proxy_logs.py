"""`kafkalens report` over a request log the proxy itself wrote, from real clients.

kafka-python pinned to 0.10.1 speaks protocol versions Kafka 4.0 removed (Produce v2,
Metadata v1 ...): the readiness table must name it; confluent-kafka speaks current
versions and names its software (KIP-511): the inventory must show it; its consumer
joins a group (JoinGroup waits for the rebalance) and long-polls Fetch. Every table
is held to the plain-Python reference over the same lines (support.report_oracle), and
the same log ingested (`kafkalens ingest`) and reported from the table gives the same
tables.

The broker is tansu, which still answers the versions Kafka 4.0 removed: the old
client's traffic must reach the log whole; Apache Kafka 4.x refuses those versions.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from support import ck_client, kp_client
from support.observed import observed_in_front_of
from support.parquet_tables import tables
from support.proxy_log_checks import (
    OLD,
    check_consumer_group_and_topics_match_the_lines,
    check_fleet_lag_and_access_match_the_lines,
    check_inventory_and_usage_match_the_lines,
    check_latency_and_errors_by_api_match_the_lines,
    check_readiness_names_the_old_client,
    records,
)

from pipeline.ingest import IngestOptions, run_ingest
from pipeline.report import run_report
from pipeline.schema import REQUEST_EVENTS


def proxy_log(tansu_factory: Any, path: Path) -> list[dict[str, Any]]:
    with observed_in_front_of(tansu_factory, path) as px:
        # tansu answers Produce v2 with UNKNOWN_PRODUCER_ID; the requests are logged anyway.
        with contextlib.suppress(Exception):
            kp_client.produce(px.bootstrap, "legacy", records("old"), api_version=OLD)
        ck_client.produce(px.bootstrap, "modern", records("new"))
        got = ck_client.consume(px.bootstrap, "modern", "report-readers", 5)
        assert len(got) == 5
        px.wait_all_closed()
        return px.lines()


def test_report_over_the_proxys_own_log(tansu_factory: Any, tmp_path: Path,
                                        spark: SparkSession) -> None:
    """One broker, one log, one report (tansu_factory is per test): every check on it."""
    reported = report_over_proxy_log(tansu_factory, tmp_path, spark)
    check_readiness_names_the_old_client(spark, reported)
    check_inventory_and_usage_match_the_lines(spark, reported)
    check_latency_and_errors_by_api_match_the_lines(spark, reported)
    check_consumer_group_and_topics_match_the_lines(spark, reported)
    check_fleet_lag_and_access_match_the_lines(spark, reported)
    check_the_ingested_table_gives_the_same_tables(spark, tmp_path)


def check_the_ingested_table_gives_the_same_tables(spark: SparkSession, tmp: Path) -> None:
    """The same log ingested (`kafkalens ingest`), then reported from the table: every
    table is the one the report made from the log itself."""
    table, out = tmp / "table", tmp / "from-table"
    options = IngestOptions(str(tmp / "logs"), str(table), use_spool=False,
                            pattern="requests.log", once=True)
    assert run_ingest(spark, options) == 0
    run_report(spark, [], str(out), table=str(table))
    assert tables(out) == tables(tmp / "out")


def report_over_proxy_log(tansu_factory: Any, tmp: Path, spark: SparkSession
                          ) -> tuple[list[dict[str, Any]], Path]:
    lines = proxy_log(tansu_factory, tmp / "logs" / "requests.log")
    result = run_report(spark, [str(tmp / "logs")], str(tmp / "out"))
    assert result.counts.lines == len(lines) and result.counts.bad == 0
    # request_incomplete lines (a request its connection closed on, e.g. a consumer's
    # last long poll) are events of their own: no response, so no latency or errors
    requests = [line for line in lines if line["event"] in REQUEST_EVENTS]
    assert result.counts.requests == len(requests)
    return requests, tmp / "out"


