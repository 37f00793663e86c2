"""What the Java client tests do, step by step, once directly and once through kafkalens:
each feature (producer, transactions, classic and KIP-848 consumers, share consumer,
Admin) is a list of steps run by `support.kafka_java.JavaClients` against one bootstrap
address, with names (topics, groups, transactional id, client ids) of that run's own.

A test runs a feature twice, `direct` then `proxied`, and compares:

- each step's answer, as the client reported it (records, offsets, partitions, config
  values, errors), after `comparable()` puts the run's own names back to placeholders
  and leaves out what differs by design between two runs (topic ids, which broker leads
  a new topic's partitions in a cluster, where the brokers are, timings);
- what differs by design, against the broker itself: the broker addresses a client was
  given (kafkalens's own, proxied; the broker's, direct) and the leaders it was told
  (the same topic described directly, past the proxy);
- the proxied run against the request log: for every client, the requests and the
  connections it counted itself are the requests and connections the log has for its
  client id, and its Produce requests carry the records and codec it sent.

Each feature also checks its own outcome absolutely (what was produced is what was
consumed, ...), so a step that fails both ways fails too.
"""

from __future__ import annotations

import difflib
import json
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from support.kafka_java import JavaClients

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
REQUEST_EVENTS = ("request", "request_incomplete", "request_no_response")


@dataclass
class Names:
    """One run's names: every topic, group and id carries `tag` (unique per run)."""

    feature: str
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:10])

    def __call__(self, what: str) -> str:
        return f"kj-{self.feature}-{what}-{self.tag}"

    @property
    def topic(self) -> str:
        return self("topic")

    def client(self, step: str) -> str:
        return self(f"client-{step}")


@dataclass
class Target:
    """Where a run's clients connect, and what they should be told about the brokers."""

    bootstrap: str
    brokers: dict[int, tuple[str, int]]  # node id -> the address clients must be given
    replication_factor: int = 1


@dataclass
class Run:
    """One run of a feature: each step's answer by step name, in order."""

    names: Names
    target: Target
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    # client id -> the APIs that client must have sent (checked in the proxied run's log)
    apis: dict[str, set[str]] = field(default_factory=dict)

    def answer(self, step: str) -> dict[str, Any]:
        return self.steps[step]

    def admin_values(self, step: str) -> dict[str, Any]:
        """An Admin step's answers, by action name (the last of a name wins)."""
        return {a["do"]: a.get("value", a.get("error")) for a in self.steps[step]["answers"]}


# --- running steps ----------------------------------------------------------------------------


class Steps:
    """Runs one feature's steps for one target, recording each answer in `run`."""

    def __init__(self, java: JavaClients, run: Run) -> None:
        self.java, self.run = java, run

    def _do(self, step: str, op: str, apis: set[str], **args: Any) -> dict[str, Any]:
        client_id = self.run.names.client(step)
        result = self.java.step(
            op, bootstrap=self.run.target.bootstrap, client_id=client_id, **args
        )
        self.run.steps[step] = result
        self.run.apis[client_id] = apis
        return result

    def admin(self, step: str, actions: list[dict[str, Any]], apis: set[str]) -> dict[str, Any]:
        answer = self._do(step, "admin", apis, actions=actions)
        unsettled = [a for a in answer["answers"] if a.get("unsettled")]
        assert not unsettled, f"{step}: never as awaited: {unsettled}"
        return answer

    def produce(self, step: str, config: dict[str, str], **args: Any) -> dict[str, Any]:
        apis = {"ApiVersions", "Metadata", "Produce"}
        if config.get("enable.idempotence", "true") == "true" or "transactional.id" in config:
            apis.add("InitProducerId")
        if "transactional.id" in config:
            # Kafka 4's transaction.version 2 (KIP-890) adds partitions to a transaction
            # with the Produce itself: no AddPartitionsToTxn from the client.
            apis |= {"FindCoordinator", "EndTxn"}
        return self._do(step, "produce", apis, config=config, **args)

    def consume(
        self, step: str, group: str, protocol: str, topics: list[str], expect: int, **config: str
    ) -> dict[str, Any]:
        apis = {"ApiVersions", "Metadata", "FindCoordinator", "OffsetCommit", "OffsetFetch"}
        apis |= {"JoinGroup", "SyncGroup"} if protocol == "classic" else {"ConsumerGroupHeartbeat"}
        if expect:
            apis.add("Fetch")
        return self._do(
            step,
            "consume",
            apis,
            config={"group.id": group, "group.protocol": protocol, **config},
            topics=topics,
            expect=expect,
        )

    def create_topic(self, step: str, topic: str, partitions: int, **configs: str) -> None:
        """Creates `topic` and waits until every broker it asks knows its leaders."""
        rf = self.run.target.replication_factor
        spec = {"name": topic, "partitions": partitions, "replication_factor": rf}
        self.admin(
            step,
            [{"do": "create_topics", "topics": [{**spec, "configs": configs}]},
             {"do": "describe_topics", "topics": [topic], "until": settled(topic, partitions)}],
            {"ApiVersions", "Metadata", "CreateTopics"},
        )  # fmt: skip


def settled(topic: str, partitions: int) -> dict[str, Any]:
    """A describe_topics' "until": `partitions` partitions, each led, all in sync."""
    return {topic: {"partition_count": partitions, "leaderless": 0, "under_replicated": 0}}


def records(
    topic: str, count: int, tag: str, base_ts: int, partition: int | None = None
) -> list[dict[str, Any]]:
    """`count` records with keys, compressible values, headers (one empty, one null) and
    explicit timestamps (the same in both runs, so consumed records compare whole)."""
    return [
        {
            "topic": topic,
            "partition": partition,
            "key": f"{tag}-k{i}",
            "value": f"{tag}-value-{i}-" * 8,
            "headers": [["seq", str(i)], ["empty", ""], ["null", None]],
            "timestamp": base_ts + i,
        }
        for i in range(count)
    ]


def as_consumed(sent: dict[str, Any], metadata: dict[str, Any]) -> dict[str, Any]:
    """The record a consumer must read back for `sent`, acknowledged with `metadata`."""
    return {
        "topic": metadata["topic"],
        "partition": metadata["partition"],
        "offset": metadata["offset"],
        "timestamp": sent["timestamp"],
        "timestamp_type": "CreateTime",
        "key": sent["key"],
        "value": sent["value"],
        "headers": sent["headers"],
    }


def by_position(consumed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records in partition and offset order (the order across partitions is not defined)."""
    return sorted(consumed, key=lambda r: (r["topic"], r["partition"], r["offset"]))


def no_errors(sent: list[dict[str, Any]]) -> None:
    errors = [s["error"] for s in sent if "error" in s]
    assert not errors, errors


# --- the features -----------------------------------------------------------------------------


def producer(java: JavaClients, run: Run, base_ts: int) -> None:
    """An idempotent producer (acks=all) per codec, each to a partition of its own, and a
    non-idempotent one with acks=1; then the records read back in a classic group."""
    steps, names = Steps(java, run), run.names
    per_producer = 25
    steps.create_topic("create", names.topic, len(CODECS) + 1)
    produced: list[dict[str, Any]] = []
    for partition, codec in enumerate(CODECS):
        sent = records(names.topic, per_producer, codec, base_ts, partition)
        config = {"enable.idempotence": "true", "acks": "all", "compression.type": codec,
                  "linger.ms": "20"}  # fmt: skip
        answer = steps.produce(f"produce-{codec}", config, records=sent)
        no_errors(answer["sent"])
        assert [m["offset"] for m in answer["sent"]] == list(range(per_producer))
        produced += [as_consumed(s, m) for s, m in zip(sent, answer["sent"], strict=True)]
    plain = records(names.topic, per_producer, "acks1", base_ts, len(CODECS))
    answer = steps.produce(
        "produce-acks1", {"enable.idempotence": "false", "acks": "1"}, records=plain
    )
    no_errors(answer["sent"])
    produced += [as_consumed(s, m) for s, m in zip(plain, answer["sent"], strict=True)]
    answer = steps.consume("consume", names("group"), "classic", [names.topic], len(produced))
    assert by_position(answer["records"]) == by_position(produced)


def transactions(java: JavaClients, run: Run, base_ts: int) -> None:
    """A transactional producer commits, aborts, commits; a read_committed consumer reads
    the committed records only, a read_uncommitted one all of them."""
    steps, names = Steps(java, run), run.names
    steps.create_topic("create", names.topic, 2)
    batches = [(6, "commit"), (4, "abort"), (5, "commit")]
    transactions_ = [
        {"records": records(names.topic, n, f"t{i}", base_ts + 100 * i), "end": end}
        for i, (n, end) in enumerate(batches)
    ]
    config = {"transactional.id": names("txn"), "acks": "all", "compression.type": "lz4"}
    answer = steps.produce("produce", config, transactions=transactions_)
    committed: list[dict[str, Any]] = []
    every: list[dict[str, Any]] = []
    for transaction, outcome in zip(transactions_, answer["transactions"], strict=True):
        no_errors(outcome["sent"])
        assert outcome["end"] == transaction["end"]
        read = [as_consumed(s, m) for s, m in zip(transaction["records"], outcome["sent"], strict=True)]
        every += read
        if transaction["end"] == "commit":
            committed += read
    answer = steps.consume(
        "read-committed", names("committed"), "classic", [names.topic], len(committed),
        **{"isolation.level": "read_committed"},
    )  # fmt: skip
    assert by_position(answer["records"]) == by_position(committed)
    answer = steps.consume(
        "read-uncommitted", names("uncommitted"), "consumer", [names.topic], len(every),
        **{"isolation.level": "read_uncommitted"},
    )  # fmt: skip
    assert by_position(answer["records"]) == by_position(every)
    steps.admin(
        "offsets",
        [
            {"do": "list_offsets", "topic": names.topic, "partitions": 2, "spec": "latest",
             "isolation": isolation}
            for isolation in ("READ_COMMITTED", "READ_UNCOMMITTED")
        ],
        {"ApiVersions", "Metadata", "ListOffsets"},
    )  # fmt: skip


def consumer_group(protocol: str) -> Callable[[JavaClients, Run, int], None]:
    """A consumer group of `protocol` ("classic", or "consumer": KIP-848): reads and commits,
    reads nothing more once committed, the group's offsets moved back through Admin, then
    reads the rewound partition again."""

    def feature(java: JavaClients, run: Run, base_ts: int) -> None:
        steps, names = Steps(java, run), run.names
        group = names("group")
        steps.create_topic("create", names.topic, 3)
        sent = records(names.topic, 30, "g", base_ts)
        for i, record in enumerate(sent):
            record["partition"] = i % 3
        answer = steps.produce("produce", {"acks": "all"}, records=sent)
        no_errors(answer["sent"])
        produced = [as_consumed(s, m) for s, m in zip(sent, answer["sent"], strict=True)]
        answer = steps.consume("first", group, protocol, [names.topic], len(produced))
        assert by_position(answer["records"]) == by_position(produced)
        assert answer["committed"] == {f"{names.topic}-{p}": 10 for p in range(3)}
        assert answer["member_id_assigned"]
        answer = steps.consume("again", group, protocol, [names.topic], 0)
        assert answer["records"] == []
        expected_type = "Classic" if protocol == "classic" else "Consumer"
        admin = steps.admin(
            "admin",
            [
                {"do": "describe_groups", "groups": [group]},
                {"do": "list_groups", "groups": [group]},
                {"do": "list_group_offsets", "group": group},
                {"do": "alter_group_offsets", "group": group, "topic": names.topic,
                 "offsets": {"0": 4}},
                {"do": "list_group_offsets", "group": group},
            ],
            {"ApiVersions", "Metadata", "FindCoordinator", "DescribeGroups"
             if protocol == "classic" else "ConsumerGroupDescribe", "ListGroups",
             "OffsetFetch", "OffsetCommit"},
        )  # fmt: skip
        described = admin["answers"][0]["value"][group]
        assert (described["state"], described["type"]) == ("Empty", expected_type)
        assert admin["answers"][4]["value"][f"{names.topic}-0"]["offset"] == 4
        answer = steps.consume("rewound", group, protocol, [names.topic], 6)
        assert by_position(answer["records"]) == [
            r for r in by_position(produced) if r["partition"] == 0 and r["offset"] >= 4
        ]

    return feature


def share_consumer(java: JavaClients, run: Run, base_ts: int) -> None:
    """A share group (KIP-932) reading from the start: every record accepted once, those at
    odd offsets released first and delivered again (delivery count 2)."""
    steps, names = Steps(java, run), run.names
    group = names("share")
    steps.create_topic("create", names.topic, 2)
    steps.admin(
        "group-config",
        [{"do": "alter_configs", "type": "GROUP", "name": group,
          "set": {"share.auto.offset.reset": "earliest"}},
         {"do": "describe_configs", "type": "GROUP", "name": group,
          "keys": ["share.auto.offset.reset"],
          "until": {"share.auto.offset.reset": {"value": "earliest"}}}],
        {"ApiVersions", "Metadata", "IncrementalAlterConfigs", "DescribeConfigs"},
    )  # fmt: skip
    sent = records(names.topic, 12, "s", base_ts)
    for i, record in enumerate(sent):
        record["partition"] = i % 2
    answer = steps.produce("produce", {"acks": "all"}, records=sent)
    no_errors(answer["sent"])
    produced = [as_consumed(s, m) for s, m in zip(sent, answer["sent"], strict=True)]
    client_id = names.client("share")
    result = java.step(
        "share_consume", bootstrap=run.target.bootstrap, client_id=client_id, group=group,
        topic=names.topic, expect=len(produced),
    )  # fmt: skip
    run.steps["share"] = result
    run.apis[client_id] = {"ApiVersions", "Metadata", "FindCoordinator", "ShareGroupHeartbeat",
                           "ShareFetch", "ShareAcknowledge"}  # fmt: skip
    expected = []
    for record in by_position(produced):
        expected.append({**record, "delivery_count": 1})
        if record["offset"] % 2 == 1:
            expected.append({**record, "delivery_count": 2})
    assert result["deliveries"] == expected
    assert {o for commit in result["commits"] for o in commit.values()} == {"ok"}
    steps.admin(
        "describe",
        [{"do": "describe_share_groups", "groups": [group]},
         {"do": "list_groups", "groups": [group]}],
        {"ApiVersions", "Metadata", "FindCoordinator", "ShareGroupDescribe", "ListGroups"},
    )  # fmt: skip


def admin(java: JavaClients, run: Run, base_ts: int) -> None:
    """Admin: topics (created, created twice, partitions added, described, deleted),
    configs (described, altered), the cluster, offsets and delete records, a group's
    offsets, and a CLIENT_METRICS config resource (created, described, listed, deleted)."""
    steps, names = Steps(java, run), run.names
    topic, missing, group = names.topic, names("missing"), names("group")
    metrics = names("metrics")
    rf = run.target.replication_factor
    config_keys = ["cleanup.policy", "max.message.bytes", "min.insync.replicas", "retention.ms",
                   "segment.bytes"]  # fmt: skip
    steps.admin(
        "topics",
        [
            {"do": "create_topics", "topics": [{"name": topic, "partitions": 2,
             "replication_factor": rf, "configs": {"retention.ms": "3600000"}}]},
            {"do": "create_topics", "topics": [{"name": topic, "partitions": 2,
             "replication_factor": rf}]},
            {"do": "describe_topics", "topics": [topic], "until": settled(topic, 2)},
            {"do": "create_partitions", "topic": topic, "total": 4},
            {"do": "describe_topics", "topics": [topic], "until": settled(topic, 4)},
            {"do": "describe_topics", "topics": [missing]},
            {"do": "describe_configs", "type": "TOPIC", "name": topic, "keys": config_keys,
             "until": {"retention.ms": {"value": "3600000"}}},
            {"do": "alter_configs", "type": "TOPIC", "name": topic,
             "set": {"retention.ms": "7200000", "cleanup.policy": "compact,delete"},
             "delete": ["max.message.bytes"]},
            {"do": "describe_configs", "type": "TOPIC", "name": topic, "keys": config_keys,
             "until": {"retention.ms": {"value": "7200000"},
                       "cleanup.policy": {"value": "compact,delete"}}},
            {"do": "describe_cluster"},
        ],
        {"ApiVersions", "Metadata", "CreateTopics", "CreatePartitions", "DescribeConfigs",
         "IncrementalAlterConfigs", "DescribeCluster"},
    )  # fmt: skip
    values = run.admin_values("topics")
    answers = run.steps["topics"]["answers"]
    assert values["create_topics"]["class"].endswith("TopicExistsException")
    assert len(answers[4]["value"][topic]["partitions"]) == 4
    assert answers[5]["error"]["class"].endswith("UnknownTopicOrPartitionException")
    assert answers[8]["value"]["retention.ms"]["value"] == "7200000"
    sent = records(topic, 20, "a", base_ts)
    for i, record in enumerate(sent):
        record["partition"] = i % 4
    no_errors(steps.produce("produce", {"acks": "all"}, records=sent)["sent"])
    steps.admin(
        "records",
        [
            {"do": "list_offsets", "topic": topic, "partitions": 4, "spec": "earliest"},
            {"do": "list_offsets", "topic": topic, "partitions": 4, "spec": "latest"},
            {"do": "list_offsets", "topic": topic, "partitions": 4, "spec": "max_timestamp"},
            {"do": "list_offsets", "topic": topic, "partitions": 4, "spec": str(base_ts + 9)},
            {"do": "delete_records", "topic": topic, "before": {"0": 3, "2": 5}},
            {"do": "list_offsets", "topic": topic, "partitions": 4, "spec": "earliest"},
            {"do": "alter_group_offsets", "group": group, "topic": topic,
             "offsets": {"1": 2, "3": 5}},
            {"do": "list_group_offsets", "group": group},
            {"do": "describe_groups", "groups": [group]},
            {"do": "delete_groups", "groups": [group]},
            {"do": "list_group_offsets", "group": group},
        ],
        {"ApiVersions", "Metadata", "ListOffsets", "DeleteRecords", "FindCoordinator",
         "OffsetCommit", "OffsetFetch", "DeleteGroups"},
    )  # fmt: skip
    answers = run.steps["records"]["answers"]
    assert answers[1]["value"] == {str(p): {"offset": 5, "timestamp": -1} for p in range(4)}
    assert answers[4]["value"] == {"0": 3, "2": 5}
    assert {p: v["offset"] for p, v in answers[5]["value"].items()} == {"0": 3, "1": 0, "2": 5, "3": 0}
    assert {k: v["offset"] for k, v in answers[7]["value"].items()} == {
        f"{topic}-1": 2, f"{topic}-3": 5}  # fmt: skip
    assert answers[10]["value"] == {}
    match = f"client_id={names('nobody')}"  # a subscription no client of the run matches
    steps.admin(
        "client-metrics",
        [
            {"do": "alter_configs", "type": "CLIENT_METRICS", "name": metrics,
             "set": {"metrics": "org.apache.kafka.producer.", "interval.ms": "60000",
                     "match": match}},
            {"do": "describe_configs", "type": "CLIENT_METRICS", "name": metrics,
             "until": {"interval.ms": {"value": "60000"}}},
            {"do": "list_config_resources", "types": ["CLIENT_METRICS"], "names": [metrics],
             "until": [f"CLIENT_METRICS:{metrics}"]},
            {"do": "alter_configs", "type": "CLIENT_METRICS", "name": metrics,
             "delete": ["metrics", "interval.ms", "match"]},
            {"do": "list_config_resources", "types": ["CLIENT_METRICS"], "names": [metrics],
             "until": []},
            {"do": "delete_topics", "topics": [topic]},
            {"do": "describe_topics", "topics": [topic],
             "until_error": "UnknownTopicOrPartitionException"},
        ],
        {"ApiVersions", "Metadata", "IncrementalAlterConfigs", "DescribeConfigs",
         "ListConfigResources", "DeleteTopics"},
    )  # fmt: skip
    answers = run.steps["client-metrics"]["answers"]
    assert answers[1]["value"]["interval.ms"]["value"] == "60000"
    assert answers[2]["value"] == [f"CLIENT_METRICS:{metrics}"]
    assert answers[4]["value"] == []
    assert answers[6]["error"]["class"].endswith("UnknownTopicOrPartitionException")


FEATURES: dict[str, tuple[str, Callable[[JavaClients, Run, int], None]]] = {
    # key: (the compatibility table's wording, the steps)
    "producer": ("producer: idempotent, acks=1, every compression, headers", producer),
    "transactions": ("producer: transactions, read_committed", transactions),
    "classic": ("consumer: classic group", consumer_group("classic")),
    "kip848": ("consumer: KIP-848 group (group.protocol=consumer)", consumer_group("consumer")),
    "share": ("share consumer (KIP-932)", share_consumer),
    "admin": ("Admin: topics, partitions, configs, group offsets, delete records, "
              "cluster, CLIENT_METRICS", admin),  # fmt: skip
}


# --- comparing a direct and a proxied run ----------------------------------------------------

# Differ between two runs by design: checked separately (addresses, leaders) or not at all.
_TIMINGS = ("first_record_ms", "done_ms")


def comparable(run: Run) -> dict[str, Any]:
    """Every step's answer with the run's names replaced by placeholders, client counts,
    topic ids and timings left out, and a cluster's placement reduced to its shape (which
    node leads a new topic's partition is the controller's choice, run by run):
    `leaders_and_addresses` checks those against the broker itself."""
    text = json.dumps(run.steps, sort_keys=True).replace(run.names.tag, "<run>")
    steps: dict[str, Any] = json.loads(text)
    for answer in steps.values():
        answer.pop("client_counts", None)
        for key in _TIMINGS:
            answer.pop(key, None)
        if "records" in answer:  # consumption order across partitions is not defined
            answer["records"] = by_position(answer["records"])
        if "commits" in answer:  # how acknowledgements batch into commits is timing
            answer["commits"] = sorted({o for commit in answer["commits"] for o in commit.values()})
        if "generation_id" in answer:  # a KIP-848 member's epoch depends on heartbeat timing
            answer["generation_id"] = answer["generation_id"] > 0
        for action in answer.get("answers", ()):
            _shape(action)
    return steps


def _shape(action: dict[str, Any]) -> None:
    value = action.get("value")
    if action["do"] == "describe_topics" and isinstance(value, dict):
        for topic in value.values():
            topic.pop("topic_id")
            topic["partitions"] = [
                {"partition": p["partition"], "replicas": len(p["replicas"]),
                 "isr": len(p["isr"]), "led": p["leader"] >= 0}
                for p in topic["partitions"]
            ]  # fmt: skip
    elif action["do"] == "describe_cluster" and isinstance(value, dict):
        value["nodes"] = [node["id"] for node in value["nodes"]]
        value["controller"] = value["controller"] in value["nodes"]
    elif "error" in action:
        # The exception's class is what the client reports; its message names addresses
        # and the run's names.
        action["error"] = {"class": action["error"]["class"]}


def assert_same(direct: Run, proxied: Run) -> None:
    """Step by step, the proxied run's answers are the direct run's."""
    a, b = comparable(direct), comparable(proxied)
    assert list(a) == list(b)
    for step in a:
        if b[step] != a[step]:
            diff = difflib.unified_diff(
                json.dumps(a[step], indent=1, sort_keys=True).splitlines(),
                json.dumps(b[step], indent=1, sort_keys=True).splitlines(),
                "direct", "proxied", lineterm="", n=2,
            )  # fmt: skip
            raise AssertionError(f"step {step!r} differs:\n" + "\n".join(list(diff)[:80]))


def described_clusters(run: Run) -> list[dict[str, Any]]:
    return [
        action["value"]
        for answer in run.steps.values()
        for action in answer.get("answers", ())
        if action["do"] == "describe_cluster"
    ]


def assert_addresses(run: Run) -> None:
    """The brokers the run's clients were told about are the run's target's."""
    for cluster in described_clusters(run):
        told = {node["id"]: (node["host"], node["port"]) for node in cluster["nodes"]}
        assert told == run.target.brokers


def described_topics(run: Run) -> dict[str, dict[str, Any]]:
    """The last description of each topic the run's clients were given."""
    found: dict[str, dict[str, Any]] = {}
    for answer in run.steps.values():
        for action in answer.get("answers", ()):
            if action["do"] == "describe_topics" and isinstance(action.get("value"), dict):
                found.update(action["value"])
    return found


# --- the proxied run against the request log --------------------------------------------------


def assert_logged(run: Run, lines: list[dict[str, Any]]) -> None:
    """Every client of the run went through kafkalens, and the log says what it did: per
    client id, the requests and connections the client counted itself are the log's, the
    APIs the step needs are there, and its Produce lines carry the records it sent, with
    its codec."""
    requests = [line for line in lines if line["event"] in REQUEST_EVENTS]
    closed = Counter(line.get("client_id") for line in lines if line["event"] == "connection_close")
    by_client = Counter(line.get("client_id") for line in requests)
    for step, answer in run.steps.items():
        counts = answer.get("client_counts")
        if counts is None:
            continue
        client_id = run.names.client(step)
        assert by_client[client_id] == counts["requests"], (
            f"{step}: the client sent {counts['requests']} requests, "
            f"the log has {by_client[client_id]}"
        )
        assert closed[client_id] == counts["connections"], (
            f"{step}: the client opened {counts['connections']} connections, "
            f"the log closed {closed[client_id]}"
        )
        mine = [line for line in requests if line.get("client_id") == client_id]
        undecoded = {(line["api"], line["api_version"]) for line in mine if "decode_error" in line}
        assert not undecoded, f"{step}: kafkalens could not decode {sorted(undecoded)}"
        apis = {line["api"] for line in mine}
        missing = run.apis[client_id] - apis
        assert not missing, f"{step}: no {sorted(missing)} in the log (it has {sorted(apis)})"
        if step.startswith("produce"):
            _assert_produce_logged(step, answer, client_id, requests)


def _assert_produce_logged(
    step: str, answer: dict[str, Any], client_id: str, requests: list[dict[str, Any]]
) -> None:
    produce = [
        line for line in requests
        if line.get("client_id") == client_id and line["api"] == "Produce"
    ]  # fmt: skip
    sent = answer.get("sent") or [s for t in answer["transactions"] for s in t["sent"]]
    # A Produce the broker refused in part or whole (CONCURRENT_TRANSACTIONS while the
    # previous transaction's markers are written, NOT_LEADER_OR_FOLLOWER while a new
    # topic's leaders settle) is sent again: the records the log shows are at least those
    # sent, and exactly those when every Produce was answered without an error.
    stats = [line["record_stats"] for line in produce]
    logged = sum(s["records"] for s in stats)
    refused = any(line.get("errors") for line in produce)
    assert logged >= len(sent) if refused else logged == len(sent), (
        step, len(sent), [(line["event"], line["record_stats"]["records"], line.get("errors"))
                          for line in produce])  # fmt: skip
    codecs = {c for s in stats for c in s["compression"]}
    codec = step.removeprefix("produce-") if step.removeprefix("produce-") in CODECS else None
    if codec is not None:
        assert codecs == {codec}, (step, codecs)
    if "transactions" in answer:
        assert all(s["transactional"] for s in stats), step
