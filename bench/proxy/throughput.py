"""Workload (a): librdkafka produces N records of 1 KB (acks=all, batched), then consumes them."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TOPIC = "bench-throughput"
PARTITIONS = 4
PRODUCER = {
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "compression.type": "none",
    "queue.buffering.max.kbytes": 262_144,
    "queue.buffering.max.messages": 500_000,
}
CONSUMER = {
    "group.id": "kafkalens-bench",
    "enable.auto.commit": False,
    "fetch.max.bytes": 52_428_800,
    "max.partition.fetch.bytes": 4_194_304,
    "fetch.wait.max.ms": 100,
}


@dataclass
class Transfer:
    records: int
    bytes: int
    seconds: float

    @property
    def mb_s(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0


def create_topic(bootstrap: str, name: str = TOPIC, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=30)
    for future in futures.values():
        future.result(timeout=30)


def produce(bootstrap: str, records: int, size: int = 1000, topic: str = TOPIC) -> Transfer:
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER})
    producer.list_topics(topic, timeout=10)  # connected and warm before the clock starts
    value = bytes(i % 251 for i in range(size))
    failures: list[str] = []

    def delivered(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    start = time.perf_counter()
    for _ in range(records):
        _produce_one(producer, topic, value, delivered)
    left = producer.flush(120)
    seconds = time.perf_counter() - start
    if left or failures:
        raise RuntimeError(f"produce: {left} undelivered, {len(failures)} failed {failures[:3]}")
    return Transfer(records, records * size, seconds)


def _produce_one(
    producer: Producer, topic: str, value: bytes, callback: Callable[..., None]
) -> None:
    while True:
        try:
            producer.produce(topic, value, on_delivery=callback)
            return
        except BufferError:
            producer.poll(0.01)


def consume(bootstrap: str, records: int, topic: str = TOPIC, timeout: float = 120.0) -> Transfer:
    consumer = Consumer({"bootstrap.servers": bootstrap, **CONSUMER})
    try:
        consumer.list_topics(topic, timeout=10)
        start = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        count, size = _drain(consumer, records, start + timeout)
        seconds = time.perf_counter() - start
    finally:
        consumer.close()
    if count < records:
        raise RuntimeError(f"consume: got {count} of {records} records in {timeout}s")
    return Transfer(count, size, seconds)


def _drain(consumer: Consumer, records: int, deadline: float) -> tuple[int, int]:
    count = size = 0
    while count < records and time.perf_counter() < deadline:
        for msg in consumer.consume(min(records - count, 10_000), 0.5):
            err = msg.error()
            if err is not None and err.fatal():
                raise KafkaException(err)
            if err is None:
                count += 1
                size += len(msg.value() or b"")
    return count, size
