"""Apache Kafka itself, started from Maven Central's jars (tests/peers/install), with
kafkalens in front: a sidecar of one node at each version, and the cluster's nodes
killed and restarted (the fixtures the client, gateway and fault tests build on)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.errors import KafkaConnectionError
from support.kafka import SharedKafka, observed_sidecar

from proxy.apache_kafka import KafkaCluster


def _produce_consume(
    bootstrap: str, topic: str, values: list[bytes], expect: int, group: str = "g"
) -> list[bytes]:
    """Produces `values` (acks=all), then reads `topic` from the start in a group of its
    own until `expect` records came or 20 s passed."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for value in values:
        producer.send(topic, value)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"{group}-{topic}",
        auto_offset_reset="earliest",
    )
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < expect and time.monotonic() < deadline:
        try:
            polled = consumer.poll(timeout_ms=500)
        except KafkaConnectionError:
            # A node just killed is still in the metadata (as a broker, leader or
            # coordinator) until the controller fences it, and kafka-python 3.0.12's
            # poll() raises the refused connection to it rather than trying another
            # node: a retriable error, which an application polls again after (a
            # consumer started right after the kill failed so in a run of the suite).
            time.sleep(0.1)  # the back-off a client loop keeps
            continue
        for records in polled.values():
            got.extend(r.value for r in records)
    consumer.close()
    return got


def _node_ids(bootstrap: str) -> list[int]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return sorted(int(b["broker_id"]) for b in admin.describe_cluster()["brokers"])
    finally:
        admin.close()


def test_a_sidecar_sees_every_connection_to_apache_kafka(
    apache_kafka_each: SharedKafka, tmp_path: Path
) -> None:
    kafka = apache_kafka_each
    topic = f"sidecar-{uuid.uuid4().hex[:8]}"
    values = [b"v%d" % i for i in range(20)]
    with observed_sidecar(kafka, tmp_path / "requests.log") as px:
        assert _produce_consume(kafka.sidecar_address, topic, values, len(values)) == values
        px.wait_all_closed()
        lines = px.lines()
    requests = [line for line in lines if line["event"] == "request"]
    apis = {line["api"] for line in requests}
    assert {"ApiVersions", "Metadata", "Produce", "Fetch", "JoinGroup", "OffsetCommit"} <= apis
    # The broker's own answer, decoded: it names the version it runs in ApiVersions'
    # finalized features, and every answered request had no transport trouble.
    assert all(line["latency_ms"] is not None for line in requests)
    # Every connection of both clients came through the sidecar: the broker advertised it.
    opened = [line for line in lines if line["event"] == "connection_open"]
    assert len(opened) >= 3  # bootstrap, leader, coordinator at least
    # The same records read directly from the broker, past the sidecar.
    assert _produce_consume(kafka.direct, topic, [], len(values), group="direct") == values


def test_a_cluster_node_killed_and_restarted_hands_leadership_over(
    apache_kafka_cluster: KafkaCluster,
) -> None:
    cluster = apache_kafka_cluster
    assert _node_ids(cluster.bootstrap) == [1, 2, 3]
    topic = f"kill-{uuid.uuid4().hex[:8]}"
    values = [b"%d" % i for i in range(10)]
    assert _produce_consume(cluster.bootstrap, topic, values, len(values)) == values
    cluster.kill_node(2)
    try:
        survivors = ",".join(cluster.node(n).address for n in (1, 3))
        assert _produce_consume(survivors, topic, [], len(values), group="survivors") == values
    finally:
        cluster.start_node(2)
    assert _node_ids(cluster.bootstrap) == [1, 2, 3]


def test_cluster_ids_never_read_as_an_option() -> None:
    """`kafka-storage format -t <id>` takes an id starting with "-" for an option and
    fails; a random id did 1 time in 64."""
    from proxy.apache_kafka import new_cluster_id

    ids = [new_cluster_id() for _ in range(5000)]
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(i) == 22 for i in ids) and len(set(ids)) == len(ids)
