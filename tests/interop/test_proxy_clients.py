"""Real clients through the sidecar proxy against real brokers: tansu, and Apache Kafka
at the newest and the oldest version of tests/peers/kafka-versions.

Each library runs the whole workload (support.clients): create a topic, produce
with headers and compression, consume in a group, commit, then describe configs,
list and describe groups and delete the topic. The broker advertises the proxy's
port, so every connection a client makes after bootstrapping goes through it too.
In front of Apache Kafka the proxy is the one `kafkalens proxy` runs (its request log:
every request of the clients decoded). Each test records its compatibility row.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from support import aio_client, compat
from support.clients import (
    APACHE_KAFKA_GROUPS,
    TANSU_GROUPS,
    GroupTimeouts,
    client_version,
    run_workload,
    sort_records,
    supported_compressions,
)
from support.kafka import NEWEST, OLDEST, observed_sidecar
from support.proxy_harness import ProxyThread, proxy_in_front_of

# One group workload per client (JoinGroup waits out tansu's rebalance timeout);
# the other codecs get a produce-and-fetch test without a group below.
WORKLOADS = [
    ("kafka-python", "gzip"),
    ("aiokafka", "zstd"),
    ("confluent-kafka", "lz4"),
]
BROKERS = ["tansu", f"apache-kafka-{NEWEST}", f"apache-kafka-{OLDEST}"]


def broker_name(broker: str) -> str:
    """The compatibility table's name of `broker`."""
    return compat.tansu() if broker == "tansu" else compat.apache_kafka(broker.rsplit("-", 1)[1])


@contextmanager
def sidecar(
    broker: str, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[ProxyThread, GroupTimeouts]]:
    """The proxy in front of `broker`, and the group timeouts that broker takes."""
    if broker == "tansu":
        with proxy_in_front_of(request.getfixturevalue("tansu_factory")) as px:
            yield px, TANSU_GROUPS
        return
    newest = broker.endswith(NEWEST)
    kafka = request.getfixturevalue("apache_kafka" if newest else "apache_kafka_oldest")
    with observed_sidecar(kafka, tmp_path / "requests.log") as observed:
        yield observed, APACHE_KAFKA_GROUPS
        # what the log says of the clients' requests: each one decoded
        observed.wait_all_closed()
        undecoded = {(line["api"], line["api_version"]) for line in observed.lines()
                     if "decode_error" in line}  # fmt: skip
        assert not undecoded, f"kafkalens could not decode {sorted(undecoded)}"


@pytest.mark.parametrize("broker", BROKERS)
@pytest.mark.parametrize(("client", "compression"), WORKLOADS)
def test_workload_through_proxy(
    request: pytest.FixtureRequest, tmp_path: Path, broker: str, client: str, compression: str
) -> None:
    feature = "produce (headers, compression), consume in a group, Admin"
    row = (broker_name(broker), client, client_version(client), "sidecar", feature)
    with compat.checking(*row), sidecar(broker, request, tmp_path) as (px, timeouts):
        # the shared Apache Kafka broker: a topic of this run's own
        topic = f"w-{client.replace('-', '')}-{uuid.uuid4().hex[:8]}"
        outcome = run_workload(
            client, px.bootstrap, topic, compression=compression, count=20, timeouts=timeouts
        )
        assert sort_records(outcome.consumed) == sort_records(outcome.produced)
        admin = outcome.admin
        assert topic in repr(admin["configs"])
        assert f"{topic}-group" in _listed_groups(admin["groups"])
        assert "deleted" in admin  # delete_topics raises on failure
        # every connection was relayed and answered; nothing is left waiting
        assert px.wait_until(lambda: px.server.pending_total() == 0)
        assert px.call(lambda: px.server.metrics.bytes_to_client._value.get()) > 0


def _listed_groups(groups: object) -> str:
    """The list_groups answer of any of the three libraries, as text to search."""
    valid = getattr(groups, "valid", None)  # confluent-kafka's ListConsumerGroupsResult
    if valid is not None:
        return repr([listing.group_id for listing in valid])
    return repr(groups)


@pytest.mark.parametrize("broker", BROKERS[:2])
@pytest.mark.parametrize("client", ["kafka-python", "aiokafka", "confluent-kafka"])
def test_every_supported_compression(
    request: pytest.FixtureRequest, tmp_path: Path, broker: str, client: str
) -> None:
    """Produce with each codec the client has here; read all back by partition."""
    codecs = supported_compressions(client)
    assert set(codecs) == {"none", "gzip", "snappy", "lz4", "zstd"}  # the test extra brings them
    row = (broker_name(broker), client, client_version(client), "sidecar", "every compression")
    with compat.checking(*row), sidecar(broker, request, tmp_path) as (px, _):
        topic = f"c-{client.replace('-', '')}-{uuid.uuid4().hex[:8]}"
        produced = []
        asyncio.run(aio_client.create_topic_async(px.bootstrap, topic, len(codecs)))
        for partition, codec in enumerate(codecs):
            records = _records(codec)
            produced.extend(records)
            _produce(client, px.bootstrap, topic, partition, codec, records)
        consumed = asyncio.run(_fetch_all(px.bootstrap, topic, len(codecs), len(produced)))
        assert sorted(consumed) == sorted(produced)


def _records(codec: str) -> list[tuple[bytes, bytes]]:
    return [(f"{codec}-{i}".encode(), f"value-{codec}-{i}-".encode() * 20) for i in range(10)]


def _produce(
    client: str,
    bootstrap: str,
    topic: str,
    partition: int,
    codec: str,
    records: list[tuple[bytes, bytes]],
) -> None:
    compression = None if codec == "none" else codec
    if client == "kafka-python":
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type=compression)
        futures = [producer.send(topic, v, key=k, partition=partition) for k, v in records]
        producer.flush(15)
        for fut in futures:
            fut.get(15)
        producer.close(5)
    elif client == "confluent-kafka":
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec})
        for k, v in records:
            producer.produce(topic, v, k, partition=partition)
        assert producer.flush(15) == 0
    else:
        asyncio.run(_aio_produce(bootstrap, topic, partition, compression, records))


async def _aio_produce(
    bootstrap: str,
    topic: str,
    partition: int,
    compression: str | None,
    records: list[tuple[bytes, bytes]],
) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=compression)
    await producer.start()
    try:
        for k, v in records:
            await producer.send_and_wait(topic, v, key=k, partition=partition)
    finally:
        await producer.stop()


async def _fetch_all(
    bootstrap: str, topic: str, partitions: int, count: int
) -> list[tuple[bytes, bytes]]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    got: list[tuple[bytes, bytes]] = []
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 15
        while len(got) < count and loop.time() < deadline:
            for batch in (await consumer.getmany(timeout_ms=300)).values():
                got.extend((m.key, m.value) for m in batch)
    finally:
        await consumer.stop()
    return got
