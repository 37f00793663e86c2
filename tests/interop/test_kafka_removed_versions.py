"""KIP-896 for real: Apache Kafka 4.x and the request versions Kafka 4.0 removed.

The truth is the broker's: what it lists in its ApiVersions answer, what it does with a
request of each old version (answers it, or closes the connection: Kafka 4 answers no
removed version with an error, it logs an UnsupportedVersionException and closes), and
what its own log says. Against it: the readiness table kafkalens's report uses
(pipeline/data/kafka4_removed_versions.json), its judgement of which closes were version
refusals (proxy/observe/api_versions.refused_version), and what a real client pinned to
old versions (sarama with Version 0.10.2.0) meets through a sidecar: the same errors as
without it, a request_incomplete line per refused request with UNSUPPORTED_VERSION,
the errors counted, and `kafkalens report` naming the client in its readiness table.
"""

from __future__ import annotations

import re
import socket
import struct
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from support import compat
from support.go_clients import SARAMA, Run, client_args, finish, module_version, same_steps, start
from support.kafka import SharedKafka, observed_sidecar
from support.proxy_harness import read_frame

from codec import ApiKey, Request, decode_response, encode_request
from pipeline.readiness_data import removed_versions
from proxy.observe.api_versions import refused_version

API_VERSIONS = ApiKey.API_VERSIONS
# A minimal body where the codec's defaults would not make a request the broker answers:
# Produce's acks default 0 gets no response at all, and a DescribeAcls filter of the
# UNKNOWN (0) types is one the broker cannot parse (it closes, for another reason).
ANY = 1
BODIES: dict[int, dict[str, Any]] = {
    0: {"acks": -1, "timeout_ms": 1000, "topic_data": []},
    29: {"resource_type_filter": ANY, "pattern_type_filter": ANY, "operation": ANY, "permission_type": ANY},
}
# Kafka 4 took these back after KIP-896 removed them (codec/generate.py ACCEPTED_AGAIN).
ACCEPTED_AGAIN = {3: range(0, 4), 11: range(0, 2)}
_REFUSAL = re.compile(rb"Received request for api with key (\d+) \(\w+\) and unsupported version (\d+)")


def _address(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    return host, int(port)


def broker_ranges(bootstrap: str) -> dict[int, tuple[int, int]]:
    """The broker's own ApiVersions answer (v0: every broker answers it)."""
    with socket.create_connection(_address(bootstrap), timeout=10) as sock:
        frame = encode_request(Request(API_VERSIONS, 0, {"correlation_id": 1, "client_id": "probe"}, {}))
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        body = decode_response(read_frame(sock), API_VERSIONS, 0).body
    return {e["api_key"]: (e["min_version"], e["max_version"]) for e in body["api_keys"]}


def answered(bootstrap: str, api_key: int, version: int) -> bool:
    """Whether the broker answers a request of this version (else it closed on it)."""
    request = Request(api_key, version, {"correlation_id": 7, "client_id": "probe"}, BODIES.get(api_key, {}))
    frame = encode_request(request)
    with socket.create_connection(_address(bootstrap), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        try:
            response = read_frame(sock)
        except ConnectionError:
            return False
    assert struct.unpack_from(">i", response)[0] == 7
    return True


def refusals_logged(kafka: SharedKafka, since: int) -> set[tuple[int, int]]:
    """(api key, version) of the refusals the broker logged after byte `since`."""
    with open(kafka.cluster.node(1).log_path, "rb") as log:
        log.seek(since)
        return {(int(k), int(v)) for k, v in _REFUSAL.findall(log.read())}


def log_size(kafka: SharedKafka) -> int:
    return kafka.cluster.node(1).log_path.stat().st_size


def test_the_readiness_table_is_what_kafka_4_refuses(apache_kafka_each: SharedKafka) -> None:
    kafka = apache_kafka_each
    ranges = broker_ranges(kafka.direct)
    table = {(key, version) for key, _, version, _ in removed_versions()}
    first_kept = {(key, minimum) for key, _, _, minimum in removed_versions()}
    taken_back = {(key, v) for key, versions in ACCEPTED_AGAIN.items() for v in versions}
    since = log_size(kafka)
    probed = {pair: answered(kafka.direct, *pair) for pair in sorted(table | first_kept | taken_back)}
    refused = {pair for pair, ok in probed.items() if not ok}
    # What the broker refuses is the table, no more, no less ...
    assert refused == table
    # ... each refusal in the broker's own words ...
    deadline = time.monotonic() + 10
    while refusals_logged(kafka, since) != refused and time.monotonic() < deadline:
        time.sleep(0.1)  # the broker's log is written by its own thread
    assert refusals_logged(kafka, since) == refused
    # ... and what kafkalens judges a refusal, from the broker's ApiVersions ranges, is it
    # too: every removed version is below the broker's listed minimum but Produce v0-2,
    # which Kafka 4 lists and refuses.
    assert {pair for pair in probed if refused_version(ranges, *pair)} == refused
    listed_but_refused = {(k, v) for k, v in refused if ranges[k][0] <= v}
    assert listed_but_refused == {(0, 0), (0, 1), (0, 2)}


def _legacy_run(bootstrap: str, topic: str, wait_for: Any) -> Run:
    """sarama pinned to Version 0.10.2.0: runs until its fetch step waits, then until
    `wait_for()` says the broker's refusal of its Fetch v3 was seen."""
    proc = start("sarama", *client_args(bootstrap, topic, f"legacy-g-{topic}", "-legacy", "-version", "0.10.2.0"))
    try:
        deadline = time.monotonic() + 60
        while not wait_for() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert wait_for(), "the Fetch v3 refusal never came"
        return finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.go  # sarama, pinned to Kafka 0.10.2's versions
def test_a_client_pinned_to_removed_versions_through_a_sidecar(
    apache_kafka: SharedKafka, tmp_path: Path, spark: Any
) -> None:
    from pipeline.report import run_report
    from pipeline.summary import summary_lines

    kafka = apache_kafka
    topic = f"legacy-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=kafka.direct)
    try:
        admin.create_topics([NewTopic(topic, 3, 1)])
    finally:
        admin.close()
    fetch_v3 = (1, 3)

    since = log_size(kafka)
    direct = _legacy_run(kafka.direct, topic, lambda: fetch_v3 in refusals_logged(kafka, since))
    refused_direct = refusals_logged(kafka, since)

    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    since = log_size(kafka)
    with observed_sidecar(kafka, log_dir / "requests.log") as px:

        def fetch_refused() -> bool:
            return any(line["event"] == "request_incomplete" and line["api"] == "Fetch" and line.get("errors")
                       for line in px.lines())

        proxied = _legacy_run(kafka.sidecar_address, topic, fetch_refused)
        px.wait_all_closed()
        lines = px.lines()
        metrics = px.metrics()
    refused_proxied = refusals_logged(kafka, since)

    version = module_version(SARAMA)
    # What the client sees is the same with kafkalens and without: the broker's close.
    differences = same_steps(direct, proxied)
    compat.record(f"Apache Kafka {kafka.version}", "sarama (Version 0.10.2.0)", version, "sidecar",
                  "KIP-896 removed versions: refused as without kafkalens", not differences)
    assert differences == []
    assert direct["create_topic"]["error"] == direct["produce"]["error"] == "EOF"
    assert direct["metadata"]["error"] == "" and direct.result("fetch") == {"records": 0}
    # The broker refused the same versions either way: CreateTopics v1, Produce v2, Fetch v3.
    assert refused_direct == refused_proxied == {(19, 1), (0, 2), (1, 3)}

    # Each refused request has a line: its api, version, what it was about, the error,
    # and the range the broker listed; the client is named as it named itself.
    ranges = broker_ranges(kafka.direct)
    refusals = [line for line in lines if line["event"] == "request_incomplete"]
    assert {(line["api_key"], line["api_version"]) for line in refusals} == refused_proxied
    for line in refusals:
        assert line["reason"] == "upstream_eof" and line["errors"] == ["UNSUPPORTED_VERSION"]
        assert line["broker_versions"] == list(ranges[line["api_key"]])
        assert line["topics"] and line["topics"][0].startswith(topic)
        assert (line["client_software_name"], line["client_software_version"]) == ("sarama", version)
    # Its Metadata v2 is a removed version Kafka 4 took back: answered, no error.
    assert {(line["api"], line["api_version"], tuple(line["errors"])) for line in lines
            if line["event"] == "request" and line["api"] == "Metadata"} == {("Metadata", 2, ())}
    # Counted as the broker's UNSUPPORTED_VERSION, per api, as many as the lines.
    for api in ("CreateTopics", "Produce", "Fetch"):
        want = sum(1 for line in refusals if line["api"] == api)
        assert metrics.value("kafkalens_request_errors_total", api=api, error="UNSUPPORTED_VERSION") == want
    closes = [line for line in lines if line["event"] == "connection_close"]
    assert sum(line["error_counts"].get("UNSUPPORTED_VERSION", 0) for line in closes) == len(refusals)

    # The report over this very log names the client in its Kafka 4 readiness table.
    result = run_report(spark, [str(log_dir)], str(tmp_path / "out"))
    readiness = result.shown["kafka4_readiness"]
    assert {(r["client_software_name"], r["client_software_version"], r["api"], r["api_version"])
            for r in readiness} == {("sarama", version, api, v) for api, v in
                                    [("CreateTopics", 1), ("Produce", 2), ("Fetch", 3)]}
    assert {r["requests"] for r in readiness} and sum(r["requests"] for r in readiness) == len(refusals)
    summary = "\n".join(summary_lines(result))
    assert f"sarama {version}" in summary and "would be refused" in summary
