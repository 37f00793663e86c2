"""kafka-python workload (synchronous). See `support.clients` for the shape."""

from __future__ import annotations

import time
from typing import Any

from kafka import (
    KafkaAdminClient,
    KafkaConsumer,
    KafkaProducer,
    OffsetAndMetadata,
    TopicPartition,
)
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

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


def _common(bootstrap: str, api_version: tuple[int, ...] | None) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap_servers": bootstrap, "request_timeout_ms": 15000}
    if api_version is not None:
        conf["api_version"] = api_version
    return conf


def create_topic(
    bootstrap: str, topic: str, partitions: int = 1, api_version: tuple[int, ...] | None = None
) -> None:
    admin = KafkaAdminClient(**_common(bootstrap, api_version))
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def produce(
    bootstrap: str,
    topic: str,
    records: list[Record],
    compression: str = "none",
    api_version: tuple[int, ...] | None = None,
    **extra: Any,
) -> None:
    producer = KafkaProducer(
        **_common(bootstrap, api_version),
        compression_type=None if compression == "none" else compression,
        linger_ms=20,
        **extra,
    )
    try:
        futures = [
            producer.send(topic, r.value, key=r.key, headers=list(r.headers)) for r in records
        ]
        producer.flush(15)
        for fut in futures:
            fut.get(15)
    finally:
        producer.close(5)


def consume(
    bootstrap: str,
    topic: str,
    group: str,
    count: int,
    api_version: tuple[int, ...] | None = None,
    timeouts: GroupTimeouts = TANSU_GROUPS,
) -> list[Record]:
    consumer = KafkaConsumer(
        topic,
        **_common(bootstrap, api_version),
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=timeouts.session_ms,
        heartbeat_interval_ms=timeouts.heartbeat_ms,
        max_poll_interval_ms=timeouts.rebalance_ms,
        fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
    )
    got: list[Record] = []
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                got.extend(Record(m.key, m.value, tuple(m.headers)) for m in batch)
        consumer.commit()
    finally:
        consumer.close()
    return got


def admin_calls(
    bootstrap: str, topic: str, group: str, api_version: tuple[int, ...] | None = None
) -> dict[str, object]:
    admin = KafkaAdminClient(**_common(bootstrap, api_version))
    try:
        resource = ConfigResource(ConfigResourceType.TOPIC, topic)
        return {
            "configs": admin.describe_configs([resource]),
            "groups": admin.list_groups(),
            # tansu answers with authorized_operations bits kafka-python has no enum for
            "group": attempt(lambda: admin.describe_groups([group])),
            "offsets": admin.list_group_offsets({group: None}),
            "deleted": admin.delete_topics([topic]),
        }
    finally:
        admin.close()


def workload(
    bootstrap: str,
    topic: str,
    *,
    compression: str = "none",
    count: int = 5,
    partitions: int = 1,
    group: str | None = None,
    api_version: tuple[int, ...] | None = None,
    admin: bool = True,
    timeouts: GroupTimeouts = TANSU_GROUPS,
) -> Outcome:
    group = group or f"{topic}-group"
    headers = api_version is None or api_version >= (0, 11)
    outcome = Outcome("kafka-python", produced=make_records(count, topic, headers))
    create_topic(bootstrap, topic, partitions, api_version)
    produce(bootstrap, topic, outcome.produced, compression, api_version)
    outcome.consumed = consume(bootstrap, topic, group, count, api_version, timeouts)
    if admin:
        outcome.admin = admin_calls(bootstrap, topic, group, api_version)
    return outcome


def _commit_start(bootstrap: str, topic: str, group: str) -> None:
    admin = KafkaAdminClient(**_common(bootstrap, None))
    try:
        admin.alter_group_offsets(group, {TopicPartition(topic, 0): OffsetAndMetadata(0, "", -1)})
    finally:
        admin.close()


def legacy_workload(
    bootstrap: str, topic: str, api_version: tuple[int, ...], count: int = 3
) -> Outcome:
    """Old protocol versions (pinned `api_version`, e.g. (0, 10, 1) or (0, 9)).

    tansu rejects magic 0/1 message sets, so the old-format produce is attempted and
    its error recorded; a modern producer then writes the records the old consumer reads.
    """
    group = f"{topic}-group"
    outcome = Outcome(f"kafka-python-{'.'.join(map(str, api_version))}")
    old_ok = api_version >= (0, 10, 1)  # CreateTopics v0 arrived in 0.10.1
    create_topic(bootstrap, topic, 1, api_version if old_ok else None)
    outcome.admin["legacy_produce"] = attempt(
        lambda: produce(
            bootstrap, topic, make_records(count, "old", False), "gzip", api_version, retries=0
        )
    )
    outcome.produced = make_records(count, topic)
    produce(bootstrap, topic, outcome.produced)
    if api_version < (0, 10, 1):
        # tansu's ListOffsets v0 answer is malformed: start the old consumer from a
        # committed offset so that it needs no ListOffsets
        _commit_start(bootstrap, topic, group)
    consumed = attempt(lambda: consume(bootstrap, topic, group, count, api_version))
    if isinstance(consumed, list):
        outcome.consumed = consumed
    else:
        outcome.admin["consume"] = consumed
    admin = KafkaAdminClient(**_common(bootstrap, api_version))
    try:
        outcome.admin["groups"] = attempt(admin.list_groups)
        outcome.admin["group"] = attempt(lambda: admin.describe_groups([group]))
    finally:
        admin.close()
    return outcome
