"""The Python clients (kafka-python, aiokafka, confluent-kafka) through a gateway in front
of the 3-node Apache Kafka cluster (replication factor 3, min.insync.replicas 2): a topic
whose partition leaders sit on different brokers, produced with acks=all and read back in
a consumer group, through the gateway's bootstrap address only. The clients are told
only the gateway's addresses, reach every leader through its listener, and every request
is in the request log, decoded. Each test records its compatibility row."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest
from support import aio_client, ck_client, compat, kp_client
from support.clients import (
    APACHE_KAFKA_GROUPS,
    Record,
    client_version,
    make_records,
    sort_records,
)
from support.gateway import assert_only_gateway_addresses, brokers_of, gateway_in_front_of, opened

from proxy.apache_kafka import KafkaCluster

CLIENTS = ["kafka-python", "aiokafka", "confluent-kafka"]
FEATURE = "produce (acks=all), consume in a group, leaders on 3 brokers"


def _spread_topic(bootstrap: str, stem: str) -> tuple[str, set[int]]:
    """A topic of 3 partitions, replication factor 3, whose leaders are on more than one
    broker (the controller places them; 3 partitions on 3 brokers rarely share one)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": ck_client.LOG})
    for attempt in range(5):
        topic = f"{stem}-{attempt}"
        admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(30)
        leaders: set[int] = set()
        for _ in range(100):  # until every partition has a leader in the metadata
            partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
            leaders = {p.leader for p in partitions.values()}
            if len(partitions) == 3 and -1 not in leaders:
                break
        if len(leaders) > 1:
            return topic, leaders
    raise AssertionError("five topics had all their leaders on one broker")


@pytest.mark.parametrize("client", CLIENTS)
def test_a_python_client_through_the_gateway_in_front_of_apache_kafka(
    apache_kafka_cluster: KafkaCluster, tmp_path: Path, client: str
) -> None:
    cluster = apache_kafka_cluster
    row = (compat.apache_kafka(cluster.version), client, client_version(client), "gateway", FEATURE)
    with compat.checking(*row):
        with gateway_in_front_of(cluster.bootstrap, tmp_path) as gw:
            px, ports = gw.px, gw.ports
            stem = f"gw-{client.replace('-', '')}-{uuid.uuid4().hex[:8]}"
            topic, leaders = _spread_topic(px.bootstrap, stem)
            consumed, records = _produce_consume(client, px.bootstrap, topic)
            assert sort_records(consumed) == sort_records(records)
            assert_only_gateway_addresses(brokers_of(px.bootstrap), ports)
            assert all(opened(px, f"broker-{node}") > 0 for node in leaders)
            assert px.wait_until(lambda: not px.server.clients(), 30)
        # the gateway stopped: its log is whole
        lines = [json.loads(x) for x in (tmp_path / "requests.log").read_text().splitlines()]
        requests = [line for line in lines if line["event"] == "request"]
        apis = {line["api"] for line in requests}
        assert {"Produce", "Fetch", "JoinGroup", "SyncGroup", "OffsetCommit"} <= apis, apis
        undecoded = {(line["api"], line["api_version"]) for line in requests
                     if "decode_error" in line}  # fmt: skip
        assert not undecoded, f"kafkalens could not decode {sorted(undecoded)}"


def _produce_consume(client: str, bootstrap: str, topic: str) -> tuple[list[Record], list[Record]]:
    """30 records produced with acks=all, then read in a group: (consumed, produced)."""
    group, records = f"{topic}-group", make_records(30, topic)
    if client == "kafka-python":
        kp_client.produce(bootstrap, topic, records, acks="all")
        consumed = kp_client.consume(bootstrap, topic, group, len(records),
                                     timeouts=APACHE_KAFKA_GROUPS)  # fmt: skip
    elif client == "aiokafka":
        asyncio.run(aio_client.produce_async(bootstrap, topic, records, acks="all"))
        consumed = asyncio.run(aio_client.consume_async(
            bootstrap, topic, group, len(records), APACHE_KAFKA_GROUPS))  # fmt: skip
    else:
        ck_client.produce(bootstrap, topic, records, acks="all")
        consumed = ck_client.consume(bootstrap, topic, group, len(records), APACHE_KAFKA_GROUPS)
    return consumed, records
