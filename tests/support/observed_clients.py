"""What the end-to-end observability tests do with each client library, besides the
shared workload (support.clients): keep a producer connected while /metrics and
/clients are read, and produce to a topic that does not exist.

The identity each library announces is derived from the installed versions, so the
tests assert exact values without pinning them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

TIMEOUT_S = 15.0
MISSING_TOPIC_WAIT_MS = 3000


@dataclass(frozen=True)
class Expected:
    """What the proxy should learn about a library's connections."""

    api_versions_version: int  # the ApiVersions version it opens each connection with
    software: tuple[str, str] | None  # KIP-511 name and version; None: it sends none
    default_client_ids: tuple[str, ...]  # client ids its workload's clients use
    group_protocols: tuple[str, ...]  # assignors its consumer offers, in order
    telemetry: bool  # whether it asks for a KIP-714 client instance id


def expected(client: str) -> Expected:
    if client == "kafka-python":
        import kafka

        return Expected(
            4, ("kafka-python", kafka.__version__), (f"kafka-python-{kafka.__version__}",),
            ("range", "roundrobin"), False,
        )  # fmt: skip
    if client == "aiokafka":
        import aiokafka

        # ApiVersions v0 carries no software name (KIP-511 added it in v3).
        return Expected(0, None, (f"aiokafka-{aiokafka.__version__}",), ("roundrobin",), False)
    import confluent_kafka

    # confluent-kafka-python names itself, with librdkafka's version in the version string.
    version = f"{confluent_kafka.__version__}-rdkafka-{confluent_kafka.libversion()[0]}"
    return Expected(
        3, ("confluent-kafka-python", version), ("rdkafka",), ("range", "roundrobin"), True
    )


@contextmanager
def connected_producer(client: str, bootstrap: str, topic: str, client_id: str) -> Iterator[None]:
    """A producer of `client` that has written one record and stays connected inside."""
    if client == "kafka-python":
        from kafka import KafkaProducer

        kp = KafkaProducer(bootstrap_servers=bootstrap, client_id=client_id)
        try:
            kp.send(topic, b"held").get(TIMEOUT_S)
            yield
        finally:
            kp.close(5)
    elif client == "aiokafka":
        with _aio_producer(bootstrap, topic, client_id):
            yield
    else:
        from confluent_kafka import Producer

        ck = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "logger": _LOG})
        try:
            ck.produce(topic, b"held")
            assert ck.flush(TIMEOUT_S) == 0
            yield
        finally:
            ck.close()


@contextmanager
def _aio_producer(bootstrap: str, topic: str, client_id: str) -> Iterator[None]:
    from aiokafka import AIOKafkaProducer

    loop = asyncio.new_event_loop()  # idle inside the block: the connections stay open

    async def start() -> AIOKafkaProducer:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, client_id=client_id)
        await producer.start()
        await producer.send_and_wait(topic, b"held")
        return producer

    try:
        producer = loop.run_until_complete(start())
        try:
            yield
        finally:
            loop.run_until_complete(producer.stop())
    finally:
        loop.close()


def ask_for_missing_topic(client: str, bootstrap: str, topic: str) -> object:
    """Make `client` ask about `topic`, which must not exist, without creating it.

    librdkafka produces with topic auto-creation off. kafka-python's producer ignores
    `allow_auto_create_topics` (3.0.12 does not pass it on to its metadata) and aiokafka
    has no such switch, while tansu creates topics on request: for those two an admin
    client asks for the topic's metadata without auto-creation.
    """
    if client == "confluent-kafka":
        return _ck_produce_to_missing(bootstrap, topic)
    if client == "kafka-python":
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
        try:
            return admin.describe_topics([topic])
        finally:
            admin.close()
    return asyncio.run(_aio_describe(bootstrap, topic))


async def _aio_describe(bootstrap: str, topic: str) -> object:
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.protocol.metadata import MetadataRequest

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:  # describe_topics would create it: ask as it does, auto-creation off
        return await admin._send_request(MetadataRequest([topic], allow_auto_topic_creation=False))
    finally:
        await admin.close()


def _ck_produce_to_missing(bootstrap: str, topic: str) -> object:
    from confluent_kafka import Producer

    errors: list[object] = []
    ck = Producer(
        {
            "bootstrap.servers": bootstrap,
            "allow.auto.create.topics": False,
            "message.timeout.ms": MISSING_TOPIC_WAIT_MS,
            "logger": _LOG,
        }
    )
    ck.produce(topic, b"lost", on_delivery=lambda err, _msg: errors.append(err))
    ck.flush(TIMEOUT_S)
    ck.close()
    assert errors and errors[0] is not None, errors  # never delivered
    return errors[0]


_LOG = logging.getLogger("librdkafka")
