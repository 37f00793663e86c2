"""`kafkalens report` over a request log the proxy itself wrote, from real clients.

kafka-python pinned to 0.10.1 speaks protocol versions Kafka 4.0 removed (Produce v2,
Metadata v1 ...): the readiness table must name it; confluent-kafka speaks current
versions and names its software (KIP-511): the inventory must show it.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from support import ck_client, kp_client
from support.clients import Record
from support.observed import observed_in_front_of

from pipeline.readiness_data import removed_versions
from pipeline.report import run_report

OLD = (0, 10, 1)




def records(stem: str) -> list[Record]:
    return [Record(f"{stem}-{i}".encode(), b"v" * 50, ()) for i in range(5)]


def proxy_log(tansu_factory: Any, path: Path) -> list[dict[str, Any]]:
    with observed_in_front_of(tansu_factory, path) as px:
        # tansu answers Produce v2 with UNKNOWN_PRODUCER_ID; the requests are logged anyway.
        with contextlib.suppress(Exception):
            kp_client.produce(px.bootstrap, "legacy", records("old"), api_version=OLD)
        ck_client.produce(px.bootstrap, "modern", records("new"))
        px.wait_all_closed()
        return px.lines()


def test_report_over_the_proxys_own_log(tansu_factory: Any, tmp_path: Path, spark: SparkSession) -> None:
    lines = proxy_log(tansu_factory, tmp_path / "logs" / "requests.log")
    requests = [line for line in lines if line["event"].startswith("request")]
    removed = {(key, version) for key, _, version, _ in removed_versions()}
    old = Counter(
        (line["client_id"], line["api"], line["api_version"])
        for line in requests
        if (line["api_key"], line["api_version"]) in removed
    )
    assert old and all(client.startswith("kafka-python") for client, _, _ in old)
    assert {api for _, api, _ in old} >= {"Produce", "Metadata"}  # Produce v2, Metadata v2

    result = run_report(spark, [str(tmp_path / "logs")], str(tmp_path / "out"))
    assert result is not None
    readiness = [r.asDict() for r in spark.read.parquet(str(tmp_path / "out" / "kafka4_readiness")).collect()]
    got: Counter[tuple[Any, Any, Any]] = Counter()
    for row in readiness:
        got[(row["client_id"], row["api"], row["api_version"])] += row["requests"]
    assert got == old
    inventory = [r.asDict(recursive=True) for r in spark.read.parquet(str(tmp_path / "out" / "client_inventory")).collect()]
    software = {r["client_software_name"] for r in inventory}
    assert "confluent-kafka-python" in software
    usage = spark.read.parquet(str(tmp_path / "out" / "api_usage")).collect()
    total = sum(r["requests"] for r in usage)
    assert total == len(requests)
