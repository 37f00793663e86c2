"""Share groups (KIP-932) through a sidecar in front of Apache Kafka, checked against
the Java share consumer's own account and the broker's.

Kafka's own KafkaShareConsumer (explicit acknowledgement) reads a topic through the
sidecar: it releases some records twice before accepting them (delivered three
times), rejects some, renews some (KIP-1222) before accepting them, and accepts the
rest, acknowledging with ShareFetch and ShareAcknowledge alike. What the request log
and /metrics say must be what the program received (records, delivery counts) and did
(acknowledgements), and what the broker says (Admin describeShareGroups:
member and assignment; listShareGroupOffsets: nothing left to deliver).
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

from support import compat
from support.kafka import SharedKafka, observed_sidecar
from support.share import (
    COUNTED,
    ShareDriver,
    actions,
    broker_deliveries,
    logged_actions,
    logged_deliveries,
    share_lines,
)

RECORDS = 40
PARTITIONS = 2


def test_share_consumer_as_the_program_and_the_broker_see_it(
    apache_kafka_each: SharedKafka, tmp_path: Path
) -> None:
    kafka = apache_kafka_each
    topic, group = f"share-{uuid.uuid4().hex[:8]}", f"sg-{uuid.uuid4().hex[:8]}"
    passed = False
    try:
        with observed_sidecar(kafka, tmp_path / "requests.log") as px, ShareDriver(kafka.version) as driver:
            driver.must("topic", kafka.direct, topic, PARTITIONS)
            produced = driver.must("produce", kafka.sidecar_address, topic, RECORDS)["produced"]
            driver.must("earliest", kafka.direct, group)
            renewable = driver.ask("renewable", kafka.direct, group)
            # Renew acknowledgements need share.renew.acknowledge.enable on 4.4; 4.2
            # takes them without (and has no such group config).
            assert "error" not in renewable or "Unknown group config" in renewable["error"], renewable
            consumed = driver.must("consume", kafka.sidecar_address, group, topic, RECORDS)
            assert consumed["complete"], consumed
            while_member = driver.must("describe", kafka.direct, group)
            driver.must("close")
            after = driver.must("describe", kafka.direct, group)
            metrics = px.metrics()
            lines = px.lines()

        deliveries = consumed["deliveries"]
        logged = share_lines(lines, group)
        # The program's plan happened: released twice, renewed, rejected, accepted.
        did = Counter(d["action"] for d in deliveries)
        assert did["release"] == 2 * (RECORDS // 10) and did["renew"] == RECORDS // 10
        assert max(d["delivery_count"] for d in deliveries) == 3

        # Every record the broker delivered, with its delivery count, is in the log's
        # acquired ranges, and nothing else is.
        assert logged_deliveries(logged, topic) == broker_deliveries(deliveries)
        # Every acknowledgement the program made, and only those, the broker confirmed.
        assert logged_actions(logged, topic) == actions(deliveries)
        assert {line["api"] for line in logged if line.get("acknowledgements")} == {
            "ShareFetch", "ShareAcknowledge"
        }  # both carried acknowledgements
        assert all(line["member_id"] == logged[0]["member_id"] for line in logged)

        # The metrics say the same per group and topic.
        labels = {"group": group, "topic": topic}
        delivered = broker_deliveries(deliveries)
        assert metrics.value("kafkalens_share_records_delivered_total", **labels) == sum(delivered.values())
        redelivered = sum(n for (_, _, count), n in delivered.items() if count > 1)
        assert metrics.value("kafkalens_share_records_redelivered_total", **labels) == redelivered
        for kind in COUNTED:
            assert metrics.value("kafkalens_share_records_acknowledged_total", type=kind, **labels) == did[kind]
        assert metrics.total("kafkalens_share_ranges_invalid_total") == 0

        # The broker's view: the member the log names, with the assignment its last
        # heartbeat answer gave, and every record done with (accepted or rejected).
        (member,) = while_member["members"]
        assert member["member_id"] == logged[0]["member_id"]
        beats = [
            line for line in lines
            if line.get("api") == "ShareGroupHeartbeat" and line.get("member_id") == member["member_id"]
            and "assignment" in line
        ]  # fmt: skip
        last = beats[-1]["assignment"]
        assert {(a["topic"], p) for a in last for p in a["partitions"]} == {tuple(tp) for tp in member["assignment"]}
        assert after["state"] == "Empty" and after["members"] == []
        per_partition = Counter(p["partition"] for p in produced)
        finished = Counter(d["partition"] for d in deliveries if d["action"] in ("accept", "reject"))
        assert finished == per_partition
        for partition, count in per_partition.items():
            offsets = after["offsets"][f"{topic}:{partition}"]
            assert offsets["lag"] in (0, None), offsets  # nothing left to deliver
            confirmed = sum(
                n for (p, _, kind), n in logged_actions(logged, topic).items()
                if p == partition and kind in ("accept", "reject")
            )  # fmt: skip
            assert confirmed == count
        passed = True
    finally:
        compat.record(
            f"Apache Kafka {kafka.version}", "Java (kafka-clients)", kafka.version, "sidecar",
            "KIP-932 share consumer, explicit acknowledgement", passed,
        )
