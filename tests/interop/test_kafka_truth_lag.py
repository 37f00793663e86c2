"""Consumer and committed lag as kafkalens reports them, held to Apache Kafka's own
figures: the broker's (Admin listOffsets latest, listConsumerGroupOffsets, asked
directly, past the sidecar) and the Java consumer's (`position()`, `currentLag()`).

A Java consumer of a group with `group.protocol=classic` (JoinGroup, SyncGroup,
Heartbeat) or `=consumer` (KIP-848: ConsumerGroupHeartbeat only) reads, through a
sidecar, a topic of two partitions that holds single-record batches, a few records a
fetch (`max.partition.fetch.bytes`), three a poll, stops at a position, pauses and
commits; more records come, it reads them all and pauses again.

The bound between the proxy's lag and the client's: the proxy's position is the offset
past the last batch a Fetch answer returned; the client's is past the last record
`poll()` handed out. Between the two lie the records the client fetched and holds
unread, and the Java consumer (both protocols) fetches a partition only when it holds
nothing of it: at most the records of the last Fetch answer that returned any for the
partition (its `step` below). Once the client has read everything, both are exactly 0.
The proxy's high watermark and its committed lag are the broker's exactly: nothing is
produced while they are read.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from support import compat
from support.kafka import SharedKafka, observed_sidecar
from support.observed import ObservedProxy, eventually
from support.truth import JavaDriver, partition_key

PARTITIONS = (0, 1)
FIRST = 60  # records per partition before the consumer starts
STOP_AT = 20  # where it pauses the first time
THEN = 25  # records per partition produced after its commit
GROUP_APIS_CLASSIC = {"JoinGroup", "SyncGroup"}  # (a Heartbeat comes after 3 s)
CONSUMER_PROPS = {
    "enable.auto.commit": "false",
    "auto.offset.reset": "earliest",
    "max.poll.records": "3",
    # single-record batches of ~170 bytes: a fetch returns three or so per partition
    "max.partition.fetch.bytes": "600",
    "fetch.max.wait.ms": "100",
}
LAG = "kafkalens_consumer_lag_records"
COMMITTED_LAG = "kafkalens_committed_lag_records"


def _fetches(lines: list[dict[str, Any]], client_id: str, topic: str) -> dict[int, dict[str, Any]]:
    """Per partition, the consumer's last Fetch answer that had it, with `step`: the
    records the last answer that returned any returned."""
    last: dict[int, dict[str, Any]] = {}
    for line in lines:
        if line.get("api") != "Fetch" or line.get("client_id") != client_id:
            continue
        for point in line.get("positions") or ():
            if point["topic"] == topic:
                before = last.get(point["partition"], {})
                step = point["next_offset"] - point["fetch_offset"] or before.get("step", 0)
                last[point["partition"]] = {**point, "step": step, "group": line.get("consumer_group")}
    return last


def _snapshot(px: ObservedProxy, client_id: str, topic: str) -> tuple[dict[int, dict[str, Any]], Any]:
    """The log's last Fetch answers and /metrics, read so that no Fetch answer came in
    between (the log read before and after the scrape agree)."""

    def read() -> tuple[dict[int, dict[str, Any]], Any] | None:
        before = _fetches(px.lines(), client_id, topic)
        metrics = px.metrics()
        after = _fetches(px.lines(), client_id, topic)
        return (after, metrics) if before == after and set(after) == set(PARTITIONS) else None

    found = eventually(read, timeout=30)
    assert found, _fetches(px.lines(), client_id, topic)
    return found  # type: ignore[no-any-return]


def _by_partition(answer: dict[str, int], topic: str) -> dict[int, int]:
    return {p: answer[partition_key(topic, p)] for p in PARTITIONS}


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_lag_agrees_with_the_brokers_offsets_and_the_java_consumers_position(
    apache_kafka_each: SharedKafka, protocol: str, tmp_path: Path
) -> None:
    kafka = apache_kafka_each
    name = uuid.uuid4().hex[:8]
    topic, group, client_id = f"truth-lag-{name}", f"truth-lag-{name}", f"truth-consumer-{name}"
    passed = False
    try:
        # the driver (and its consumer) closes first: through the sidecar, not past its end
        with observed_sidecar(kafka, tmp_path / "requests.log") as px, JavaDriver(kafka.version) as java:
            java.call("admin", name="broker", props={"bootstrap.servers": kafka.direct})
            java.call("create_topic", name="broker", topic=topic, partitions=len(PARTITIONS))
            java.call("producer", name="producer", props={"bootstrap.servers": kafka.direct})

            def produce(count: int) -> dict[int, int]:
                for partition in PARTITIONS:
                    java.call("produce", name="producer", topic=topic, partition=partition, count=count)
                ends = java.call("end_offsets", name="broker", topic=topic, partitions=list(PARTITIONS))
                return _by_partition(ends["offsets"], topic)

            def proxy_view() -> tuple[dict[int, dict[str, Any]], dict[int, float], dict[int, float]]:
                fetched, metrics = _snapshot(px, client_id, topic)
                lag = {int(k[3]): v for k, v in metrics.by_labels(LAG, "group", "client", "topic", "partition").items()
                       if k[1:3] == (client_id, topic)}  # fmt: skip
                groups = {k[0] for k in metrics.by_labels(LAG, "group", "client", "topic") if k[1:] == (client_id, topic)}
                assert groups == {group}, groups
                committed = {int(k[2]): v for k, v in metrics.by_labels(COMMITTED_LAG, "group", "topic", "partition").items()
                             if k[:2] == (group, topic)}  # fmt: skip
                return fetched, lag, committed

            end = produce(FIRST)
            assert end == dict.fromkeys(PARTITIONS, FIRST)
            props = {"bootstrap.servers": kafka.sidecar_address, "client.id": client_id, "group.id": group,
                     "group.protocol": protocol, **CONSUMER_PROPS}  # fmt: skip
            java.call("consumer", name="consumer", props=props, topics=[topic])
            polled = java.call("poll_until", name="consumer", topic=topic, positions=dict.fromkeys(map(str, PARTITIONS), STOP_AT))
            assert polled["reached"], polled
            paused = java.call("pause", name="consumer")
            position = _by_partition(paused["positions"], topic)
            assert _by_partition(paused["lags"], topic) == {p: end[p] - position[p] for p in PARTITIONS}
            described = java.call("describe_group", name="broker", group=group)
            assert described["type"].lower() == protocol, described  # the protocol the group runs

            # Before any commit: the group is known from the group protocol's own requests
            apis = {line.get("api") for line in px.lines() if line.get("client_id") == client_id}
            if protocol == "consumer":
                assert "ConsumerGroupHeartbeat" in apis and not apis & (GROUP_APIS_CLASSIC | {"Heartbeat", "OffsetCommit"}), apis
            else:
                assert apis >= GROUP_APIS_CLASSIC and "OffsetCommit" not in apis, apis
            fetched, lag, committed_lag = proxy_view()
            assert committed_lag == {}
            for p in PARTITIONS:
                point = fetched[p]
                assert point["group"] == group
                assert point["high_watermark"] == end[p], point
                assert lag[p] == point["lag"] == end[p] - point["next_offset"], (p, point, lag)
                client_lag = end[p] - position[p]
                assert 0 < lag[p] <= client_lag <= lag[p] + point["step"], (p, point, lag, position)

            # Committed: the broker's own committed offsets, against its end offsets
            committed = _by_partition(java.call("commit", name="consumer")["committed"], topic)
            assert committed == position
            in_broker = _by_partition(java.call("group_offsets", name="broker", group=group)["offsets"], topic)
            assert in_broker == committed
            commits = [line for line in px.lines() if line.get("api") == "OffsetCommit" and line.get("client_id") == client_id]
            assert [(c["group_id"], c["topics"]) for c in commits] == [(group, [topic])]
            assert {c["partition"]: c["offset"] for c in commits[0]["committed"] if c["topic"] == topic} == in_broker
            _, _, committed_lag = proxy_view()
            assert committed_lag == {p: end[p] - in_broker[p] for p in PARTITIONS}

            # More records; the consumer reads them all: both lags exactly 0, the committed
            # lag the broker's new end offsets against the committed offsets
            end = produce(THEN)
            assert end == dict.fromkeys(PARTITIONS, FIRST + THEN)
            java.call("resume", name="consumer")
            polled = java.call("poll_until", name="consumer", topic=topic, positions={str(p): end[p] for p in PARTITIONS})
            assert polled["reached"], polled
            paused = java.call("pause", name="consumer")
            assert _by_partition(paused["positions"], topic) == end
            assert _by_partition(paused["lags"], topic) == dict.fromkeys(PARTITIONS, 0)
            in_broker = _by_partition(java.call("group_offsets", name="broker", group=group)["offsets"], topic)
            assert in_broker == committed
            fetched, lag, committed_lag = proxy_view()
            assert {p: fetched[p]["high_watermark"] for p in PARTITIONS} == end
            assert lag == dict.fromkeys(PARTITIONS, 0)
            assert committed_lag == {p: end[p] - in_broker[p] for p in PARTITIONS}
            java.call("close", name="consumer")
        passed = True
    finally:
        feature = "consumer lag, KIP-848 group" if protocol == "consumer" else "consumer lag, classic group"
        compat.record(f"Apache Kafka {kafka.version}", "Java (kafka-clients)", kafka.version, "sidecar", feature, passed)
