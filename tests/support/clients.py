"""Realistic workloads with each Kafka client library, for tests and golden captures.

Every workload does the same thing against one bootstrap address: create a topic
(admin), produce records with headers and a given compression, consume them back
in a consumer group, commit, then a few admin calls (describe configs, list and
describe groups, delete the topic). It returns what was produced and consumed so
a test can assert equality.

Timeouts are short on purpose: tansu's JoinGroup waits for the whole rebalance
timeout before answering, so the default 45-300 s would stall every test.

Codecs available here (see `supported_compressions`): aiokafka brings all of
them through cramjam, librdkafka has them built in; kafka-python only has gzip
unless `python-snappy`, `lz4` and `zstandard` are installed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
SESSION_TIMEOUT_MS = 3000
REBALANCE_TIMEOUT_MS = 3000
HEARTBEAT_MS = 500
FETCH_MAX_WAIT_MS = 300  # not any client's default: a request line must show what was sent
CONSUME_TIMEOUT_S = 20.0

Header = tuple[str, bytes | None]


@dataclass(frozen=True)
class GroupTimeouts:
    """A consumer group's timeouts, per broker: tansu answers a JoinGroup only after the
    rebalance timeout (short ones keep tests quick); Apache Kafka refuses a session
    timeout under its group.min.session.timeout.ms (6 s by default) and answers a lone
    member's JoinGroup at once."""

    session_ms: int = SESSION_TIMEOUT_MS
    rebalance_ms: int = REBALANCE_TIMEOUT_MS
    heartbeat_ms: int = HEARTBEAT_MS


TANSU_GROUPS = GroupTimeouts()
APACHE_KAFKA_GROUPS = GroupTimeouts(session_ms=6000, rebalance_ms=6000, heartbeat_ms=1000)


@dataclass(frozen=True)
class Record:
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


@dataclass
class Outcome:
    """What a workload did: records in and out, and the admin calls' findings."""

    client: str
    produced: list[Record] = field(default_factory=list)
    consumed: list[Record] = field(default_factory=list)
    admin: dict[str, object] = field(default_factory=dict)


def make_records(count: int, tag: str = "r", headers: bool = True) -> list[Record]:
    """`count` small records with keys and two headers each (one with an empty value).

    `headers=False` for the old message formats (magic 0/1) that have none.
    """
    return [
        Record(
            key=f"{tag}-key-{i}".encode(),
            value=f"{tag}-value-{i}-".encode() * 4,
            headers=(("seq", str(i).encode()), ("trace", b"")) if headers else (),
        )
        for i in range(count)
    ]


def sort_records(records: list[Record]) -> list[Record]:
    """Consumption order across partitions is not defined: compare sorted."""
    return sorted(records, key=lambda r: (r.key or b"", r.value or b""))


def attempt(call: Callable[[], object]) -> object:
    """The call's result, or its error as a string: a broker quirk must not stop a workload."""
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - recorded for the caller to look at
        return f"error: {exc!r}"


async def attempt_async(call: Awaitable[object]) -> object:
    """`attempt` for a coroutine."""
    try:
        return await call
    except Exception as exc:  # noqa: BLE001 - recorded for the caller to look at
        return f"error: {exc!r}"


def supported_compressions(client: str) -> tuple[str, ...]:
    """The codecs `client` can produce with in this environment."""
    if client.startswith("kafka-python"):
        import kafka.codec as codec

        has: dict[str, Callable[[], bool]] = {
            "gzip": codec.has_gzip,
            "snappy": codec.has_snappy,
            "lz4": codec.has_lz4,
            "zstd": codec.has_zstd,
        }
        return ("none", *(name for name, check in has.items() if check()))
    return COMPRESSIONS


def client_version(client: str) -> str:
    """The installed version of a client library, as the compatibility table names it."""
    if client == "kafka-python":
        import kafka

        return str(kafka.__version__)
    if client == "aiokafka":
        import aiokafka

        return str(aiokafka.__version__)
    import confluent_kafka

    return f"{confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})"


def run_workload(client: str, bootstrap: str, topic: str, **kwargs: Any) -> Outcome:
    """Dispatch to one library's workload: kafka-python, aiokafka or confluent-kafka."""
    if client == "kafka-python":
        from support import kp_client

        return kp_client.workload(bootstrap, topic, **kwargs)
    if client == "aiokafka":
        from support import aio_client

        return aio_client.workload(bootstrap, topic, **kwargs)
    if client == "confluent-kafka":
        from support import ck_client

        return ck_client.workload(bootstrap, topic, **kwargs)
    raise ValueError(f"unknown client {client!r}")
