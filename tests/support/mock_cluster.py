"""librdkafka's in-process mock Kafka cluster, reachable by any client.

A confluent-kafka client configured with `test.mock.num.brokers: N` starts N mock
brokers on 127.0.0.1 ephemeral ports and ignores its own `bootstrap.servers`. The
addresses are in the client's metadata (and in its NOTICE log line "Mock cluster
enabled: original bootstrap.servers and security.protocol ignored and replaced
with 127.0.0.1:P1,..."); other clients (kafka-python, a proxy) can connect to them
for as long as the owning client lives.

Quirks of the mock seen with librdkafka 2.16 (they matter to clients other than
librdkafka): it supports ApiVersions up to v2 only and its UNSUPPORTED_VERSION
answer to v3/v4 is neither the v0 nor the flexible layout, so kafka-python must be
pinned (`api_version=(2, 3)` or lower) to bootstrap; its Metadata names controller
id 0, which is no broker, so CreateTopics from any admin client finds no
controller. Topics are auto-created on first use with 4 partitions, replication
factor 3, leaders spread over the brokers.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from confluent_kafka import Producer

LOG = logging.getLogger("librdkafka.mock")
# The highest client api_version kafka-python may assume against the mock (see above).
KAFKA_PYTHON_API_VERSION = (2, 3)


def mock_bootstrap(owner: Producer, timeout: float = 10.0) -> str:
    """The mock brokers' addresses, from the owning client's metadata."""
    brokers = owner.list_topics(timeout=timeout).brokers
    return ",".join(f"{b.host}:{b.port}" for _, b in sorted(brokers.items()))


@contextmanager
def mock_cluster(brokers: int = 3) -> Iterator[str]:
    """A running mock cluster of `brokers` brokers; yields its bootstrap string."""
    owner = Producer(
        {
            "bootstrap.servers": "127.0.0.1:9",  # ignored once the mock is enabled
            "test.mock.num.brokers": brokers,
            "logger": LOG,
        }
    )
    try:
        yield mock_bootstrap(owner)
    finally:
        owner.close()
        del owner
        gc.collect()
