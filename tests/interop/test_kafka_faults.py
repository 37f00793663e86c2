"""Apache Kafka brokers failing under load, with kafkalens in front: nothing acknowledged
is lost, clients follow the new leaders, and kafkalens says what happened.

Through a gateway in front of the 3-node cluster (replication factor 3,
min.insync.replicas=2), producers with acks=all and consumers in groups run while one
broker is killed (`kill -9`) and started again, then another is shut down cleanly and
started again. Through a sidecar, the same clients run while its broker is killed and
started again behind it. The clients: librdkafka (an idempotent producer, a classic
group consumer) and the Java client (a producer that is not idempotent, a KIP-848
`group.protocol=consumer` consumer), each with its own client id.

Checked against the truth of others, never kafkalens against itself:
- every record a producer saw acknowledged, a consumer of each group got, at the offset
  the acknowledgement gave, with the checksum of the value the producer made; read
  afterwards directly from the cluster (not through kafkalens), the idempotent producer's
  records are there once each (the other's may repeat: a retry after a lost answer);
- the leaders and brokers the gateway hands out are the cluster's own, as a client of
  the cluster reads them directly, the gateway's own addresses in place of the brokers';
- /readyz names the broker that is down, and says ready again once it is back;
- the request log has a line for every request the clients sent, on the listener they
  sent it to (none went round kafkalens), by the clients' own account: librdkafka's
  protocol log request by request (api, version, correlation id, the port it went to),
  the Java client's request-total per broker. Answered, or `request_incomplete` with a
  reason that fits (the broker gone, or the client); for the producers, whose account
  is whole once flushed, no line more either. The one exception: a request written to a
  connection kafkalens had just closed because of its broker, which no one received;
  librdkafka's log shows it written after that close, and each such connection may
  explain one (support.faults.LateWrites). kafkalens holds nothing afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from support import compat
from support.clients import client_version
from support.faults import (
    Load,
    create_topic,
    finish_and_check,
    observed_gateway,
    readyz,
    survive,
    until,
)
from support.kafka import SharedKafka, observed_sidecar

from proxy.apache_kafka import KafkaCluster

# The compatibility table's row (the gateway's cluster also sees a clean shutdown)
FEATURE = "brokers killed and restarted under load: nothing acknowledged lost"


@contextmanager
def compatibility(broker: str, mode: str, feature: str) -> Iterator[None]:
    """A row of the compatibility table for each client library of the load: a pass if
    the block ends, a failure if it raises (support.compat.checking)."""
    java = broker.rsplit(" ", 1)[-1]  # the Java client of the broker's own version
    with (
        compat.checking(
            broker, "confluent-kafka", client_version("confluent-kafka"), mode, feature
        ),
        compat.checking(broker, "Java (kafka-clients)", java, mode, feature),
    ):
        yield


def test_gateway_cluster_brokers_killed_and_shut_down_under_load(
    apache_kafka_cluster: KafkaCluster, tmp_path: Path
) -> None:
    cluster = apache_kafka_cluster
    topic = f"faults-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, replicas=3)
    feature = FEATURE
    try:
        with (
            compatibility(f"Apache Kafka {cluster.version}", "gateway", feature),
            observed_gateway(cluster, tmp_path / "requests.log") as (px, ports),
        ):
            load = Load(px.bootstrap, topic)
            try:
                load.goes_on()
                survive(cluster, px, ports, load, 1, "kill")
                survive(cluster, px, ports, load, 2, "stop")
                load.goes_on()
                faulted = {"broker-1", "broker-2", "bootstrap"}
                finish_and_check(px, load, cluster.bootstrap, faulted, gateway=True)
            finally:
                load.kill()
    finally:
        for member in cluster.members:
            cluster.start_node(member.node_id)  # whatever happened, the cluster is whole again


# --- a sidecar, its broker restarting behind it ----------------------------------------------


def test_sidecar_broker_killed_and_restarted_under_load(
    apache_kafka: SharedKafka, tmp_path: Path
) -> None:
    kafka = apache_kafka
    node = kafka.cluster.members[0].node_id
    topic = f"faults-{uuid.uuid4().hex[:8]}"
    create_topic(kafka.direct, topic, replicas=1)
    feature = FEATURE
    try:
        with (
            compatibility(f"Apache Kafka {kafka.version}", "sidecar", feature),
            observed_sidecar(kafka, tmp_path / "requests.log") as px,
        ):
            load = Load(kafka.sidecar_address, topic)
            try:
                load.goes_on()
                kafka.cluster.kill_node(node)
                try:
                    until(
                        lambda: (
                            readyz(px.http_port) == (503, f"upstream unreachable: {kafka.upstream}")
                        ),
                        "/readyz to name the broker",
                        30,
                    )
                finally:
                    kafka.cluster.start_node(node)
                until(lambda: readyz(px.http_port) == (200, "ready"), "/readyz ready again", 30)
                load.goes_on()
                finish_and_check(px, load, kafka.direct, {"plaintext"}, gateway=False)
            finally:
                load.kill()
    finally:
        kafka.cluster.start_node(node)


def test_a_late_write_is_explained_only_by_a_close_before_it() -> None:
    """The one tolerance of the request log check (support.faults.LateWrites) holds only
    what it says: one request per connection kafkalens closed for its broker, of that
    connection's client (or any, when it named none), written after the close."""
    from support.faults import LateWrites

    def close(ts: str, reason: str, client_id: str | None) -> dict[str, object]:
        return {
            "event": "connection_close",
            "ts": ts,
            "reason": reason,
            "listener": "broker-1",
            "client_id": client_id,
        }

    at = 1_795_728_433.0  # 2026-11-26T21:27:13Z
    late = LateWrites([
        close("2026-11-26T21:27:13.000000Z", "upstream_error", "a"),
        close("2026-11-26T21:27:20.000000Z", "upstream_connect_failed", None),
        close("2026-11-26T21:27:30.000000Z", "client_eof", "a"),  # the client's: no excuse
    ])  # fmt: skip
    assert not late.explains("broker-1", "a", at - 1.0)  # written before the close
    assert not late.explains("broker-2", "a", at + 0.1)  # another listener
    assert not late.explains("broker-1", "b", at + 0.1)  # another client's connection
    assert late.explains("broker-1", "a", at + 0.1)
    assert not late.explains("broker-1", "a", at + 0.2)  # one request per connection
    assert late.explains("broker-1", "b", at + 7.1)  # a connection that named no client
    assert not late.explains("broker-1", "a", at + 17.1)
    assert not late.explains("broker-1", "a", None)  # a count: nothing left to explain it


def test_the_unlogged_send_of_a_repeated_correlation_id_is_the_one_no_line_is_near() -> None:
    """librdkafka numbers requests per connection: after a reconnect the same (listener,
    api, version, correlation id) is sent again. The send without a line is the one far
    from every line, not the latest (taking the latest blamed a logged send, 23 s after
    the close that explained the other)."""
    from support.faults import unlogged

    assert unlogged([34.96, 58.285], [58.294]) == [34.96]
    assert unlogged([58.285, 34.96], [34.97]) == [58.285]
    assert unlogged([1.0, 2.0], [1.01, 2.02]) == []
    assert unlogged([1.0], []) == [1.0]
