"""franz-go (classic groups and its KIP-848 opt-in) and sarama, the Go programs of
tests/peers/go, through kafkalens in front of Apache Kafka: each scenario run straight
to the broker and through a sidecar (or a gateway in front of the 3-node cluster), and
the two runs compared step by step (records with keys, values, headers, partitions and
offsets; transactions; committed and end offsets as the broker's Admin API gives them;
the group as the broker describes it). What kafkalens logs is checked against what the
clients say of themselves: the KIP-511 software name and version each sends."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from support import compat
from support.gateway import gateway_in_front_of
from support.go_clients import (
    FRANZ_GO,
    SARAMA,
    Run,
    client_args,
    module_version,
    run,
    same_steps,
    software_lines,
)
from support.kafka import SharedKafka, observed_sidecar

from proxy.apache_kafka import KafkaCluster

pytestmark = pytest.mark.go  # the franz-go and sarama programs of tests/peers/go

FEATURES = {
    ("franz", "classic"): "produce (5 codecs, idempotent, headers), transactions, classic group, kadm",
    ("franz", "consumer"): "KIP-848 consumer group (ServerSideBalancer)",
    ("sarama", "classic"): "produce (5 codecs, idempotent, headers), transactions, classic group, ClusterAdmin",
}
CLIENT = {"franz": ("franz-go", FRANZ_GO), "sarama": ("sarama", SARAMA)}
# What the library says it sends as ClientSoftwareName: kgo's default config
# (pkg/kgo/config.go, softwareName "kgo") and sarama's api_versions_request.go
# (defaultClientSoftwareName "sarama"); the version is the module's, from the build.
SOFTWARE_NAME = {"franz": "kgo", "sarama": "sarama"}
# Apis each scenario must have sent through kafkalens.
EXPECTED_APIS = {
    # (no AddPartitionsToTxn: on Kafka 4 brokers both clients use KIP-890's transactions,
    # where a Produce adds its partition to the transaction)
    "classic": {"ApiVersions", "Metadata", "CreateTopics", "InitProducerId", "Produce", "EndTxn", "FindCoordinator", "JoinGroup", "SyncGroup",
                "Fetch", "OffsetCommit", "OffsetFetch", "ListOffsets", "DescribeGroups"},
    "consumer": {"ConsumerGroupHeartbeat", "ConsumerGroupDescribe"},
}


def _scenario(program: str, protocol: str, bootstrap: str, tag: str, replicas: int) -> Run:
    extra = ["-replicas", str(replicas), "-n", "12"]
    if program == "franz":
        extra += ["-group-protocol", protocol]
    return run(program, *client_args(bootstrap, f"go-{program}-{tag}", f"go-{program}-g-{tag}", *extra))


def _check_runs(
    program: str, protocol: str, direct: Run, proxied: Run, lines: list[dict[str, Any]],
    broker: str, mode: str,
) -> None:
    name, module = CLIENT[program]
    version = module_version(module)
    differences = same_steps(direct, proxied)
    compat.record(broker, name, version, mode, FEATURES[(program, protocol)],
                  not direct.errors() and not proxied.errors() and not differences)
    assert direct.errors() == {}, direct.stderr[-3000:]
    assert proxied.errors() == {}, proxied.stderr[-3000:]
    assert differences == []
    consumed = proxied.result("consume")["records"]
    produced = sum(len(v) for v in proxied.result("produce").values())
    assert len(consumed) == produced + 4  # and the aborted transaction's 3 records are not there
    assert not any(r["key"].startswith("aborted") for r in consumed)
    described = proxied.result("describe_group")
    assert described["state"] == "Stable" and described["members"] == 1

    requests = [line for line in lines if line["event"] == "request"]
    apis = {line["api"] for line in requests}
    assert EXPECTED_APIS["classic"] - {"JoinGroup", "SyncGroup", "DescribeGroups"} <= apis
    assert EXPECTED_APIS[protocol] <= apis
    if protocol == "consumer":
        assert not {"JoinGroup", "SyncGroup"} & apis  # the group used KIP-848 only
    # Every request and response was decoded; none went unanswered but long polls that
    # the client itself cut short when it closed.
    assert [line for line in lines if "decode_error" in line or "response_decode_error" in line] == []
    assert {(line["api"], line["reason"]) for line in lines if line["event"] == "request_incomplete"} <= {
        ("Fetch", "client_eof"), ("ConsumerGroupHeartbeat", "client_eof")}
    # KIP-511: the name and version the client sends, as the library itself says it
    # sends them (the program asks kgo; sarama's version is its module's).
    said = proxied.result("client")
    assert (said["software_name"], said["software_version"]) == (SOFTWARE_NAME[program], version)
    assert software_lines(requests) == {(SOFTWARE_NAME[program], version)}
    opened = [line for line in lines if line["event"] == "connection_open"]
    closed = [line for line in lines if line["event"] == "connection_close"]
    assert len(opened) == len(closed) >= 3


@pytest.mark.parametrize(
    ("program", "protocol"), [("franz", "classic"), ("franz", "consumer"), ("sarama", "classic")]
)
def test_go_clients_through_a_sidecar_as_directly(
    apache_kafka_each: SharedKafka, tmp_path: Path, program: str, protocol: str
) -> None:
    kafka = apache_kafka_each
    direct = _scenario(program, protocol, kafka.direct, f"d-{uuid.uuid4().hex[:8]}", 1)
    with observed_sidecar(kafka, tmp_path / "requests.log") as px:
        proxied = _scenario(program, protocol, kafka.sidecar_address, f"p-{uuid.uuid4().hex[:8]}", 1)
        px.wait_all_closed()
        lines = px.lines()
    _check_runs(program, protocol, direct, proxied, lines, f"Apache Kafka {kafka.version}", "sidecar")


def test_go_clients_through_a_gateway_as_directly(
    apache_kafka_cluster: KafkaCluster, tmp_path: Path
) -> None:
    cluster = apache_kafka_cluster
    for program, protocol in [("franz", "classic"), ("franz", "consumer"), ("sarama", "classic")]:
        tag = uuid.uuid4().hex[:8]
        direct = _scenario(program, protocol, cluster.bootstrap, f"d-{tag}", 3)
        log_dir = tmp_path / f"{program}-{protocol}"
        log_dir.mkdir()
        with gateway_in_front_of(cluster.bootstrap, log_dir) as gw:
            proxied = _scenario(program, protocol, gw.px.bootstrap, f"p-{tag}", 3)
            assert gw.px.wait_until(lambda: not gw.px.server.clients(), 30)
            hooks = gw.px.server.hooks
            gw.px.call(getattr(hooks, "inner", hooks).log.flush)
        lines = [json.loads(line) for line in (log_dir / "requests.log").read_text().splitlines()]
        _check_runs(program, protocol, direct, proxied, lines,
                    f"Apache Kafka {cluster.version}", "gateway")
        # Every broker the clients reached, they reached through the gateway.
        listeners = {line["listener"] for line in lines if line["event"] == "connection_open"}
        assert len(listeners) >= 2, listeners
