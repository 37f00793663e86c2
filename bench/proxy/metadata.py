"""Workload (d): many partitions, then Metadata for every topic, one request at a time."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from support import wire

from bench.proxy.latency import sequential

PARTITIONS_PER_TOPIC = 10


def create_topics(bootstrap: str, partitions: int) -> list[str]:
    """Topics `bench-md-NNNN` of 10 partitions each, `partitions` in total; their names."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    count = max(1, partitions // PARTITIONS_PER_TOPIC)
    names = [f"bench-md-{n:04d}" for n in range(count)]
    topics = [NewTopic(name, PARTITIONS_PER_TOPIC, 1) for name in names]
    for future in admin.create_topics(topics, operation_timeout=60).values():
        future.result(timeout=60)
    _wait_visible(admin, set(names))
    return names


def _wait_visible(admin: AdminClient, names: set[str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if names <= set(admin.list_topics(timeout=10).topics):
            return
        time.sleep(0.2)
    raise RuntimeError("created topics did not show up in Metadata")


def all_topics(
    host: str,
    port: int,
    sizes: tuple[int, int, int],
    pid: int | None,
    baseline: int | None = None,
) -> dict[str, Any]:
    """Create topics (`sizes`: partitions, requests, warm-up), then time Metadata requests
    for all topics, alternating with `baseline` (see latency.sequential)."""
    partitions, count, warmup = sizes
    names = create_topics(f"{host}:{port}", partitions)
    result = sequential(host, port, wire.metadata(None), count, warmup, pid, baseline)
    result["topics"] = len(names)
    result["partitions"] = len(names) * PARTITIONS_PER_TOPIC
    return result
