"""aiokafka workload. `workload` runs it in a fresh event loop; the `*_async` calls
can be awaited from an async test."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from support.clients import (
    CONSUME_TIMEOUT_S,
    FETCH_MAX_WAIT_MS,
    TANSU_GROUPS,
    GroupTimeouts,
    Outcome,
    Record,
    attempt_async,
    make_records,
)


async def create_topic_async(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


async def produce_async(
    bootstrap: str,
    topic: str,
    records: list[Record],
    compression: str = "none",
    **extra: Any,
) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if compression == "none" else compression,
        linger_ms=20,
        request_timeout_ms=15000,
        **extra,
    )
    try:
        await producer.start()
        futures = [
            await producer.send(topic, r.value, key=r.key, headers=list(r.headers)) for r in records
        ]
        await asyncio.wait_for(asyncio.gather(*futures), 15)
    finally:
        await producer.stop()


async def consume_async(
    bootstrap: str, topic: str, group: str, count: int, timeouts: GroupTimeouts = TANSU_GROUPS
) -> list[Record]:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=timeouts.session_ms,
        heartbeat_interval_ms=timeouts.heartbeat_ms,
        rebalance_timeout_ms=timeouts.rebalance_ms,
        max_poll_interval_ms=timeouts.rebalance_ms,
        fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
        request_timeout_ms=15000,
    )
    await consumer.start()
    got: list[Record] = []
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                got.extend(Record(m.key, m.value, tuple(m.headers)) for m in batch)
        await consumer.commit()
    finally:
        await consumer.stop()
    return got


async def admin_calls_async(
    bootstrap: str, topic: str, group: str, partition_count: int = 1
) -> dict[str, object]:
    partitions = [TopicPartition(topic, p) for p in range(partition_count)]
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    await admin.start()
    try:
        resource = ConfigResource(ConfigResourceType.TOPIC, topic)
        return {
            "configs": await attempt_async(admin.describe_configs([resource])),
            "groups": await attempt_async(admin.list_consumer_groups()),
            "group": await attempt_async(admin.describe_consumer_groups([group])),
            # explicit partitions: tansu's answer to an all-topics OffsetFetch v3 is malformed
            "offsets": await attempt_async(
                admin.list_consumer_group_offsets(group, partitions=partitions)
            ),
            "deleted": await attempt_async(admin.delete_topics([topic])),
        }
    finally:
        await admin.close()


async def workload_async(
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
    outcome = Outcome("aiokafka", produced=make_records(count, topic))
    await create_topic_async(bootstrap, topic, partitions)
    await produce_async(
        bootstrap, topic, outcome.produced, compression, enable_idempotence=idempotent
    )
    outcome.consumed = await consume_async(bootstrap, topic, group, count, timeouts)
    if admin:
        outcome.admin = await admin_calls_async(bootstrap, topic, group, partitions)
    return outcome


def workload(bootstrap: str, topic: str, **kwargs: Any) -> Outcome:
    return asyncio.run(workload_async(bootstrap, topic, **kwargs))
