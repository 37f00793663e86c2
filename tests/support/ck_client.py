"""confluent-kafka (librdkafka) workload. librdkafka's logs go to the `librdkafka`
Python logger instead of stderr."""

from __future__ import annotations

import logging
import time
from functools import partial
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from support.clients import (
    CONSUME_TIMEOUT_S,
    FETCH_MAX_WAIT_MS,
    TANSU_GROUPS,
    GroupTimeouts,
    Outcome,
    Record,
    attempt,
    make_records,
)

LOG = logging.getLogger("librdkafka")
TIMEOUT_S = 15.0


def _common(bootstrap: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "logger": LOG, "socket.timeout.ms": 15000, **extra}


def _wait(futures: dict[Any, Any]) -> dict[str, object]:
    return {str(key): attempt(partial(fut.result, TIMEOUT_S)) for key, fut in futures.items()}


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient(_common(bootstrap))
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=TIMEOUT_S)
    for fut in futures.values():
        fut.result(TIMEOUT_S)


def produce(
    bootstrap: str, topic: str, records: list[Record], compression: str = "none", **extra: Any
) -> None:
    producer = Producer(
        _common(bootstrap, **{"compression.type": compression, "linger.ms": 20}, **extra)
    )
    failures: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(err)

    for r in records:
        producer.produce(topic, r.value, r.key, headers=list(r.headers), on_delivery=on_delivery)
    left = producer.flush(TIMEOUT_S)
    if left or failures:
        raise RuntimeError(f"confluent-kafka produce: {left} undelivered, errors {failures}")


def consume(
    bootstrap: str, topic: str, group: str, count: int, timeouts: GroupTimeouts = TANSU_GROUPS
) -> list[Record]:
    consumer = Consumer(
        _common(
            bootstrap,
            **{
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": timeouts.session_ms,
                "heartbeat.interval.ms": timeouts.heartbeat_ms,
                # also the JoinGroup rebalance timeout; librdkafka wants it >= session timeout
                "max.poll.interval.ms": max(timeouts.session_ms, timeouts.rebalance_ms),
                "fetch.wait.max.ms": FETCH_MAX_WAIT_MS,
            },
        )
    )
    consumer.subscribe([topic])
    got: list[Record] = []
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            headers = tuple(msg.headers() or ())  # a list of (str, bytes | None) here
            got.append(Record(msg.key(), msg.value(), headers))  # type: ignore[arg-type]
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def admin_calls(bootstrap: str, topic: str, group: str, partitions: int = 1) -> dict[str, object]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = AdminClient(_common(bootstrap))
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    return {
        "configs": _wait(admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])),
        "groups": attempt(lambda: admin.list_consumer_groups().result(TIMEOUT_S)),
        "group": _wait(admin.describe_consumer_groups([group])),
        "offsets": _wait(
            admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])
        ),
        "deleted": _wait(admin.delete_topics([topic], operation_timeout=TIMEOUT_S)),
    }


def workload(
    bootstrap: str,
    topic: str,
    *,
    compression: str = "none",
    count: int = 5,
    partitions: int = 1,
    group: str | None = None,
    admin: bool = True,
    idempotent: bool = False,
    timeouts: GroupTimeouts = TANSU_GROUPS,
) -> Outcome:
    group = group or f"{topic}-group"
    outcome = Outcome("confluent-kafka", produced=make_records(count, topic))
    create_topic(bootstrap, topic, partitions)
    produce(bootstrap, topic, outcome.produced, compression, **{"enable.idempotence": idempotent})
    outcome.consumed = consume(bootstrap, topic, group, count, timeouts)
    if admin:
        outcome.admin = admin_calls(bootstrap, topic, group, partitions)
    return outcome
