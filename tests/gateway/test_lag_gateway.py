"""Consumer lag through the gateway, in front of librdkafka's 3-broker mock cluster.

confluent-kafka produces 40 records to each of 4 partitions (leaders spread over the
brokers); a consumer in a group, with fetches and its prefetch queue kept small, reads
a few and pauses. librdkafka's own statistics are the oracle: per partition its
`hi_offset` minus its `next_offset` (the offset it fetches from next) and its
`consumer_lag` (high watermark minus the application's position) are the proxy's lag
within one fetch; committed lag is the high watermark minus what the brokers answer
OffsetFetch and ListOffsets asked directly (not through the gateway).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from support.ck_client import LOG
from support.gateway import gateway_in_front_of, spread_topic

PARTITIONS, PER_PARTITION, READ = 4, 40, 12
ONE_FETCH = 3  # records of ~1 KB in a fetch of at most 3,000 bytes a partition
GROUP, CLIENT_ID = "gw-lag-group", "gw-lag-reader"


def produce(bootstrap: str) -> str:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1, "logger": LOG})
    topic = spread_topic(producer, "gw-lag")
    for i in range(PARTITIONS * PER_PARTITION):
        producer.produce(topic, b"x" * 1000, partition=i % PARTITIONS)
        producer.poll(0)
    assert producer.flush(15) == 0
    return topic


def small_fetch_consumer(bootstrap: str, stats: list[dict[str, Any]]) -> Consumer:
    return Consumer({
        "bootstrap.servers": bootstrap, "group.id": GROUP, "client.id": CLIENT_ID, "logger": LOG,
        "auto.offset.reset": "earliest", "enable.auto.commit": False, "fetch.wait.max.ms": 100,
        "statistics.interval.ms": 200, "stats_cb": lambda text: stats.append(json.loads(text)),
        # a few 1 KB records per fetch and no prefetching ahead: positions move in steps
        "fetch.max.bytes": 3000, "message.max.bytes": 2000, "max.partition.fetch.bytes": 3000,
        "receive.message.max.bytes": 100000, "queued.max.messages.kbytes": 1, "queued.min.messages": 1,
    })  # fmt: skip


def broker_view(cluster: str, topic: str) -> tuple[dict[int, int], dict[int, int]]:
    """High watermarks (ListOffsets) and the group's committed offsets (OffsetFetch),
    asked of the mock brokers themselves."""
    oracle = Consumer({"bootstrap.servers": cluster, "group.id": GROUP, "logger": LOG})
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        highs = {tp.partition: oracle.get_watermark_offsets(tp, timeout=10)[1] for tp in tps}
        committed = {tp.partition: tp.offset for tp in oracle.committed(tps, timeout=10)}
    finally:
        oracle.close()
    return highs, committed


def test_gateway_lag_matches_librdkafka_statistics(mock_cluster: str, tmp_path: Path) -> None:
    stats: list[dict[str, Any]] = []
    with gateway_in_front_of(mock_cluster, tmp_path) as gw:
        topic = produce(gw.px.bootstrap)
        reader = small_fetch_consumer(gw.px.bootstrap, stats)
        try:
            reader.subscribe([topic])
            read = 0
            deadline = time.monotonic() + 60
            while read < READ and time.monotonic() < deadline:
                message = reader.poll(0.5)
                read += message is not None and not message.error()
            reader.commit(asynchronous=False)
            reader.pause(reader.assignment())
            settle = time.monotonic() + 1.5  # statistics of the paused consumer
            while time.monotonic() < settle:
                reader.poll(0.1)
            client = {int(p): v for p, v in stats[-1]["topics"][topic]["partitions"].items() if p != "-1"}
            text = gw.hook_metrics.render().decode()
            gw.px.call(gw.px.server.hooks.inner.log.flush)  # type: ignore[attr-defined]
        finally:
            reader.close()
        highs, committed = broker_view(mock_cluster, topic)
    lag = _samples(text, "kafkalens_consumer_lag_records", ("group", "client", "topic", "partition"))
    committed_lag = _samples(text, "kafkalens_committed_lag_records", ("group", "topic", "partition"))
    assert read == READ and set(client) == set(range(PARTITIONS))
    # KIP-714: the mock assigns a client instance id on the one connection that asks for
    # telemetry subscriptions; the consumer's fetches on every broker are labelled with it
    instance_ids = {
        line["client_instance_id"] for line in _lines(tmp_path / "requests.log")
        if line.get("client_id") == CLIENT_ID and line.get("client_instance_id")
    }
    (label,) = instance_ids or {CLIENT_ID}
    assert {key[1] for key in lag} == {label}
    assert highs == dict.fromkeys(range(PARTITIONS), PER_PARTITION)
    for partition, view in client.items():
        proxy_lag = lag[(GROUP, label, topic, str(partition))]
        assert view["hi_offset"] == PER_PARTITION
        # librdkafka's fetch position, which pausing moves back to the application's
        # (its queue is purged): the proxy's is where the last fetch left it
        assert 0 <= (view["hi_offset"] - view["next_offset"]) - proxy_lag <= ONE_FETCH, (partition, view)
        if view["consumer_lag"] >= 0:  # the application was handed records of it
            assert 0 <= view["consumer_lag"] - proxy_lag <= ONE_FETCH, (partition, view)
        if committed[partition] >= 0:
            assert committed_lag[(GROUP, topic, str(partition))] == highs[partition] - committed[partition]
        else:
            assert (GROUP, topic, str(partition)) not in committed_lag
    assert sum(max(c, 0) for c in committed.values()) == READ


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _samples(text: str, name: str, keys: tuple[str, ...]) -> dict[tuple[str, ...], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {
        tuple(s.labels[k] for k in keys): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }
