"""Share groups (KIP-932) through a sidecar in front of Apache Kafka, checked against
the Java share consumer's own account and the broker's.

Kafka's own KafkaShareConsumer (explicit acknowledgement) reads a topic through the
sidecar: it releases some records twice before accepting them (delivered three
times), rejects some, renews some (KIP-1222) before accepting them, and accepts the
rest, acknowledging with ShareFetch and ShareAcknowledge alike. What the request log
and /metrics say must be what the program received (records, delivery counts) and did
(acknowledgements), and what the broker says (Admin describeShareGroups: member and
assignment; listShareGroupOffsets: nothing left to deliver); the report lists the
group as a share group with the broker's members.
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support import compat
from support.kafka import NEWEST, SharedKafka, observed_sidecar
from support.observed import Samples
from support.share import (
    COUNTED,
    RawShareMember,
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
    apache_kafka_each: SharedKafka, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    kafka = apache_kafka_each
    topic, group = f"share-{uuid.uuid4().hex[:8]}", f"sg-{uuid.uuid4().hex[:8]}"
    with compat.checking(compat.apache_kafka(kafka.version), "Java (kafka-clients)", kafka.version, "sidecar",
                         "share groups as kafkalens reports them: deliveries, acknowledgements, members"):
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
        # No broker setting turned share groups on: `kafka-storage format` finalizes the
        # share.version feature (1 on 4.2, 2 on 4.4); 4.0's group.share.enable is gone.
        log = kafka.cluster.node(1).log_path.read_text(errors="replace")
        assert re.search(r"share\.version=[12]\b", log), "share.version not finalized"
        check_the_log(lines, deliveries, topic, group)
        check_the_metrics(metrics, deliveries, topic, group)
        check_the_brokers_view(lines, deliveries, produced, while_member, after, topic, group)
        if kafka.version == NEWEST:  # the report once: Spark takes its time
            check_the_report(request.getfixturevalue("spark"), tmp_path, deliveries, while_member, topic, group)


def check_the_log(lines: list[dict[str, Any]], deliveries: list[dict[str, Any]], topic: str, group: str) -> None:
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


def check_the_metrics(metrics: Samples, deliveries: list[dict[str, Any]], topic: str, group: str) -> None:
    labels = {"group": group, "topic": topic}
    delivered = broker_deliveries(deliveries)
    assert metrics.value("kafkalens_share_records_delivered_total", **labels) == sum(delivered.values())
    redelivered = sum(n for (_, _, count), n in delivered.items() if count > 1)
    assert metrics.value("kafkalens_share_records_redelivered_total", **labels) == redelivered
    did = Counter(d["action"] for d in deliveries)
    for kind in COUNTED:
        assert metrics.value("kafkalens_share_records_acknowledged_total", type=kind, **labels) == did[kind]
    assert metrics.total("kafkalens_share_ranges_invalid_total") == 0


def check_the_brokers_view(
    lines: list[dict[str, Any]], deliveries: list[dict[str, Any]], produced: list[dict[str, Any]],
    while_member: dict[str, Any], after: dict[str, Any], topic: str, group: str,
) -> None:
    """The member the log names, with the assignment its last heartbeat answer gave,
    and every record done with (accepted or rejected) as the broker's offsets say."""
    logged = share_lines(lines, group)
    (member,) = while_member["members"]
    assert member["member_id"] == logged[0]["member_id"]
    beats = [
        line for line in lines
        if line.get("api") == "ShareGroupHeartbeat" and line.get("member_id") == member["member_id"]
        and "assignment" in line
    ]  # fmt: skip
    last = beats[-1]["assignment"]
    assigned = {tuple(tp) for tp in member["assignment"]}
    assert {(a["topic"], p) for a in last for p in a["partitions"]} == assigned
    # the partitions its ShareFetch requests put in their share session (one broker:
    # every partition's leader)
    fetched = {(e["topic"], p) for line in logged for e in line.get("fetch_partitions") or () for p in e["partitions"]}
    assert fetched == assigned
    assert after["state"] == "Empty" and after["members"] == []
    per_partition = Counter(p["partition"] for p in produced)
    finished = Counter(d["partition"] for d in deliveries if d["action"] in ("accept", "reject"))
    assert finished == per_partition
    done = Counter(p for (p, _, kind), n in logged_actions(logged, topic).items() for _ in range(n)
                   if kind in ("accept", "reject"))  # fmt: skip
    assert done == per_partition
    for partition in per_partition:
        offsets = after["offsets"][f"{topic}:{partition}"]
        assert offsets["lag"] in (0, None), offsets  # nothing left to deliver


def check_the_report(
    spark: Any, tmp_path: Path, deliveries: list[dict[str, Any]], while_member: dict[str, Any], topic: str, group: str
) -> None:
    """The report's consumer_groups table has the group as a share group with the
    members the broker knew; the share consumer's fetches are its topic's traffic."""
    from pipeline.report import run_report

    out = tmp_path / "report"
    run_report(spark, [str(tmp_path / "requests.log")], str(out))
    (row,) = [r.asDict() for r in spark.read.parquet(str(out / "consumer_groups")).collect() if r["group_id"] == group]
    assert row["group_type"] == "share"
    assert row["distinct_member_ids"] == len(while_member["members"])
    (topics,) = [r.asDict() for r in spark.read.parquet(str(out / "top_topics")).collect() if r["topic"] == topic]
    # every delivery came in a ShareFetch answer holding its record's batch
    assert topics["share_fetched_records"] >= sum(broker_deliveries(deliveries).values())
    access = [r.asDict() for r in spark.read.parquet(str(out / "topic_access")).collect()]
    assert any(a["topic"] == topic and a["direction"] == "fetch" for a in access)


# Acknowledgement batches no client of Kafka's would send, each in a ShareFetch of its
# own (first offset, last offset, types), and what kafkalens calls them.
MALFORMED = (
    ([(0, 5, [1]), (3, 9, [1])], "overlapping"),
    ([(9, 0, [1])], "reversed"),
    ([(0, 9, [1, 2])], "types_length"),
    ([(0, 9, [7])], "unknown_type"),
    ([(0, 2**40, [1])], "too_long"),
    ([(-3, 2, [1])], "negative_offset"),
)
# then a well-formed one: accept 0-1, then a type per offset (a gap at 2, a reject at 4,
# a release at 9)
WELL_FORMED = [(0, 1, [1]), (2, 9, [0, 1, 3, 1, 1, 1, 1, 2])]


def test_malformed_acknowledgements_the_broker_refuses_too(apache_kafka: SharedKafka, tmp_path: Path) -> None:
    """A member speaking the protocol itself acknowledges ten acquired records with
    malformed batches through the sidecar: Apache Kafka refuses each (INVALID_REQUEST),
    kafkalens names each fault and counts none; the well-formed batches after them the
    broker confirms, and kafkalens counts exactly those."""
    kafka = apache_kafka
    topic, group = f"raw-{uuid.uuid4().hex[:8]}", f"rg-{uuid.uuid4().hex[:8]}"
    with ShareDriver(kafka.version) as driver:
        driver.must("topic", kafka.direct, topic, 1)
        driver.must("produce", kafka.direct, topic, 10)
        driver.must("earliest", kafka.direct, group)
    with observed_sidecar(kafka, tmp_path / "requests.log") as px:
        member = RawShareMember(kafka.sidecar_address, group)
        try:
            topic_id = member.topic_id(topic)
            assert member.join(topic) == [0]
            first = member.share_fetch(0, topic_id, 0, [])
            (acquired,) = [p["acquired_records"] for t in first["responses"] for p in t["partitions"]]
            assert acquired == [{"first_offset": 0, "last_offset": 9, "delivery_count": 1}]
            verdicts = []
            for epoch, (batches, _) in enumerate((*MALFORMED, (WELL_FORMED, None)), start=1):
                answer = member.share_fetch(epoch, topic_id, 0, batches, max_wait_ms=0)
                assert answer["error_code"] == 0
                verdicts.append(answer["responses"][0]["partitions"][0]["acknowledge_error_code"])
        finally:
            member.close()
        metrics = px.metrics()
        lines = [line for line in px.lines() if line.get("api") == "ShareFetch" and line.get("group_id") == group]
    assert verdicts == [42] * len(MALFORMED) + [0]  # INVALID_REQUEST, then none
    logged = [line["acknowledgements"][0] for line in lines if line.get("acknowledgements")]
    assert [(a.get("invalid"), a["confirmed"], a["error"]) for a in logged] == [
        *((fault, False, "INVALID_REQUEST") for _, fault in MALFORMED), (None, True, None)
    ]
    assert {k: logged[-1][k] for k in ("accept", "release", "reject", "renew", "gap")} == {
        "accept": 7, "release": 1, "reject": 1, "renew": 0, "gap": 1
    }
    labels = {"group": group, "topic": topic}
    counted = {kind: metrics.value("kafkalens_share_records_acknowledged_total", type=kind, **labels)
               for kind in COUNTED}  # fmt: skip
    assert counted == {"accept": 7, "release": 1, "reject": 1, "renew": None}
    for _, fault in MALFORMED:
        assert metrics.value("kafkalens_share_ranges_invalid_total", what="acknowledgement", reason=fault) == 1
