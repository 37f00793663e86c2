"""Who a Java client is and what it measures, as kafkalens says, held to what the Java
client and Apache Kafka say themselves.

- **Observe**: the broker has a KIP-714 receiver (tests/peers/broker-plugins/telemetry,
  a metrics reporter that records every push it gets) and a CLIENT_METRICS
  subscription set through the Admin API; kafkalens forwards GetTelemetrySubscriptions
  and PushTelemetry and decodes the pushes on their way. Apache Kafka's subscriptions
  ask for delta temporality.
- **Collect**: the broker has none (without a receiver Kafka 4.x lists neither API in
  ApiVersions: the Java client direct to it gets no instance id); kafkalens lists both
  and answers them.

Held: each client's own `clientInstanceId()` is the id on every request line of its
connections from its telemetry exchange on, in /clients and on its telemetry series
(and the id the broker's receiver got); the software name and version are what the
client's ApiVersions carries (KIP-511: "apache-kafka-java" and its AppInfoParser
version); the metrics on /metrics are the client's own `metrics()`, every one of them
(the subscription asks for all). Counters move between a push and a read of
/metrics, so the client's metrics are read every 250 ms from before until two more
pushes came (the second was collected after the first read: a client collects a push
only once the last one was answered, and the proxy logs a push as it answers), then
/metrics, then the client once more: a counter's pushed value lies between the first
and last reads (within 1e-9 relative: a delta the client subtracts and kafkalens adds
back may differ in its last bit); a gauge that read the same every time is pushed as
that value exactly (one that cycles, as last-heartbeat-seconds-ago does every 3 s,
is not compared: two reads alone could catch it at the same value on either side of
a push that saw another). Observe mode is also held push by push to the broker's
receiver: each push's gauges as the broker got them, each sum the total of the deltas
the broker got.
"""

from __future__ import annotations

import math
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import compat
from support.kafka import NEWEST, OLDEST, SharedKafka
from support.observed import eventually
from support.telemetry import TelemetryProxy
from support.truth import (
    JAVA_SOFTWARE_NAME,
    JavaDriver,
    Received,
    java_metric_name,
    pushes_received,
    receiver_kafka,
    telemetry_sidecar,
)

from proxy.observe.telemetry.otlp import label_name

PUSH_INTERVAL_MS = 1000
RECORDS = 30
KINDS = {"producer": "producer-", "consumer": "consumer-", "admin": "admin-client-"}
RELATIVE = 1e-9  # a sum of deltas against the client's total: the last bit may differ
SAMPLE_EVERY_S = 0.25
Key = tuple[str, tuple[tuple[str, str], ...]]  # a series: its name, its labels but the three
MIN_COMPARED = 30  # per client (an Admin client has ~60 metrics): many series, not a handful


@pytest.fixture(scope="module", params=[NEWEST, OLDEST], ids=lambda v: f"kafka-{v}")
def broker_with_receiver(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[SharedKafka, Path]]:
    with receiver_kafka(tmp_path_factory.mktemp("receiver"), request.param) as found:
        yield found


class Clients:
    """A producer, a consumer and an Admin client of one JVM, all through `bootstrap`."""

    def __init__(self, java: JavaDriver, bootstrap: str, tag: str) -> None:
        self.java = java
        self.topic = f"truth-telemetry-{tag}"
        self.ids = {kind: f"truth-{kind}-{tag}" for kind in KINDS}
        common = {"bootstrap.servers": bootstrap}
        # (an Admin client pushes only when asked to: enable.metrics.push is false for it)
        admin = {**common, "client.id": self.ids["admin"], "enable.metrics.push": "true"}
        java.call("admin", name="admin", props=admin)
        java.call("create_topic", name="admin", topic=self.topic, partitions=1)
        java.call("producer", name="producer", props={**common, "client.id": self.ids["producer"]})
        java.call("produce", name="producer", topic=self.topic, partition=0, count=RECORDS)
        consumer = {**common, "client.id": self.ids["consumer"], "group.id": self.topic,
                    "auto.offset.reset": "earliest"}  # fmt: skip
        java.call("consumer", name="consumer", props=consumer, topics=[self.topic])
        polled = java.call("poll_until", name="consumer", topic=self.topic, positions={"0": RECORDS})
        assert polled["reached"], polled

    def close(self) -> None:
        """Closed while the sidecar still runs (a consumer's close leaves its group
        through it; with the sidecar gone it waits out its timeout)."""
        for kind in KINDS:
            self.java.call("close", name=kind)

    def instance_ids(self) -> dict[str, str]:
        """kind -> the client's own clientInstanceId() (Kafka's Uuid.toString())."""
        found = {kind: self.java.call("instance_id", name=kind)["client_instance_id"] for kind in KINDS}
        assert all(found.values()), found
        return found


def _identity_agrees(px: TelemetryProxy, clients: Clients, ids: dict[str, str], version: str) -> None:
    for instance in ids.values():  # series come with a client's first push
        assert eventually(lambda: _pushes(px, instance) > 0, timeout=30), instance  # noqa: B023
    lines = px.lines()
    open_clients = px.http_clients()
    series = px.metrics().samples
    for kind, client_id in clients.ids.items():
        instance = ids[kind]
        own = [line for line in lines if line.get("client_id") == client_id and line.get("event") == "request"]
        first = next(i for i, line in enumerate(own) if line.get("client_instance_id") is not None)
        assert {line["client_instance_id"] for line in own[first:]} == {instance}, kind
        assert any(line["api"] == "GetTelemetrySubscriptions" for line in own[first:])
        # KIP-511: each connection opens with an ApiVersions naming the client's software
        for conn in {line["conn"] for line in own}:
            on_it = [line for line in lines if line.get("conn") == conn and line.get("event") == "request"]
            assert on_it[0]["api"] == "ApiVersions", on_it[0]
            assert {(line["client_software_name"], line["client_software_version"]) for line in on_it} == {
                (JAVA_SOFTWARE_NAME, version)}, (kind, conn)  # fmt: skip
        connections = [c for c in open_clients if c["identity"]["client_id"] == client_id]
        assert connections and {c["identity"]["client_instance_id"] for c in connections} == {instance}
        if kind == "consumer":  # its lag is labelled with its instance id too
            lag = {(labels["group"], labels["client"]) for name, labels, _ in series
                   if name == "kafkalens_consumer_lag_records" and labels["topic"] == clients.topic}  # fmt: skip
            assert lag == {(clients.topic, instance)}, lag
        labelled = [labels for name, labels, _ in series if labels.get("client_id") == client_id]
        assert labelled and all(
            labels["client_instance_id"] == instance and labels["software"] == f"{JAVA_SOFTWARE_NAME}/{version}"
            for labels in labelled
        ), kind


def _client_version(java: JavaDriver, jars: str) -> str:
    """The version the client puts in ApiVersions: its own AppInfoParser's."""
    answer = java.call("version")
    assert answer == {"software_name": JAVA_SOFTWARE_NAME, "version": jars}, answer
    return str(answer["version"])


def _pushes(px: TelemetryProxy, instance: str) -> int:
    return sum(
        1
        for line in px.lines()
        if line.get("api") == "PushTelemetry" and line.get("event") == "request"
        and line.get("client_instance_id") == instance and line.get("telemetry_metrics")
    )  # fmt: skip


def _metrics_agree(java: JavaDriver, px: TelemetryProxy, ids: dict[str, str]) -> dict[str, dict[str, int]]:
    """Each client's metrics(), read every SAMPLE_EVERY_S until two more pushes of each
    came, /metrics read before the last client read."""
    pushed = {kind: _pushes(px, instance) for kind, instance in ids.items()}
    reads: dict[str, list[dict[Key, float]]] = {kind: [] for kind in ids}
    deadline = time.monotonic() + 30
    while True:
        for kind in ids:
            reads[kind].append(_java_metrics(java, kind))
        if all(_pushes(px, ids[kind]) >= pushed[kind] + 2 for kind in ids):
            break
        assert time.monotonic() < deadline, pushed
        time.sleep(SAMPLE_EVERY_S)
    text = px.metrics().text
    for kind in ids:
        reads[kind].append(_java_metrics(java, kind))
    return {kind: _agree(kind, reads[kind], _series(text, ids[kind])) for kind in ids}


def _series(text: str, instance: str) -> dict[Key, tuple[str, float]]:
    """The instance's samples on /metrics: (name, labels but the three of every series)
    -> (its family's type, value)."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("client_instance_id") == instance:
                rest = {k: v for k, v in sample.labels.items() if k not in ("client_instance_id", "client_id", "software")}
                found[(sample.name, tuple(sorted(rest.items())))] = (family.type, sample.value)
    return found


def _agree(kind: str, reads: list[dict[Key, float]], shown: dict[Key, tuple[str, float]]) -> dict[str, int]:
    counted = {"counters": 0, "gauges": 0, "moving gauges": 0}
    missing = []
    for key, low in reads[0].items():
        name, attributes = key
        seen = [read.get(key) for read in reads]
        found = [shown[(n, attributes)] for n in (name, name + "_total") if (n, attributes) in shown]
        if not found:
            missing.append(key)
            continue
        kind_of, value = found[0]
        high = seen[-1]
        if kind_of == "counter":
            assert high is not None and low * (1 - RELATIVE) <= value <= high * (1 + RELATIVE), (key, low, value, high)
            counted["counters"] += 1
        elif len(set(seen)) == 1 and not math.isnan(low):
            assert value == low, (key, low, value)
            counted["gauges"] += 1
        else:
            counted["moving gauges"] += 1
    assert not missing, f"{kind}: the client has these, /metrics does not: {missing}"
    assert counted["counters"] + counted["gauges"] >= MIN_COMPARED, (kind, counted)
    return counted


def _java_metrics(java: JavaDriver, kind: str) -> dict[Key, float]:
    """The client's own metrics of its kind, keyed as kafkalens names their series:
    KIP-714's metric name made a Prometheus name, the tags but client-id as labels."""
    found = {}
    for metric in java.call("metrics", name=kind)["metrics"]:
        if not metric["group"].startswith(KINDS[kind]) or isinstance(metric["value"], str):
            continue
        name = "kafkalens_client_" + re.sub(r"[^a-zA-Z0-9_]+", "_", java_metric_name(metric["group"], metric["name"]))
        attributes = tuple(sorted(
            (label_name(tag.replace("-", "_")), value) for tag, value in metric["tags"].items() if tag != "client-id"
        ))  # fmt: skip
        found[(name, attributes)] = float(metric["value"])
    return found


def _record(version: str, feature: str, check: Callable[[], None]) -> None:
    passed = False
    try:
        check()
        passed = True
    finally:
        compat.record(f"Apache Kafka {version}", "Java (kafka-clients)", version, "sidecar", feature, passed)


def test_collect_mode_gives_the_java_client_its_id_and_its_own_metrics(
    apache_kafka_each: SharedKafka, tmp_path: Path
) -> None:
    kafka = apache_kafka_each

    def check() -> None:
        tag = uuid.uuid4().hex[:8]
        with JavaDriver(kafka.version) as java:
            # Direct: the broker has no receiver, so no telemetry API and no id
            java.call("producer", name="direct", props={"bootstrap.servers": kafka.direct})
            java.call("produce", name="direct", topic=f"truth-direct-{tag}", partition=0, count=1)
            assert java.call("instance_id", name="direct", timeout_ms=3000)["client_instance_id"] is None
            java.call("close", name="direct")
            with telemetry_sidecar(
                kafka, tmp_path / "requests.log", collect=True, push_interval_ms=PUSH_INTERVAL_MS
            ) as px:
                clients = Clients(java, kafka.sidecar_address, tag)
                try:
                    ids = clients.instance_ids()
                    assert len(set(ids.values())) == len(ids)
                    subscriptions = [line for line in px.lines() if line.get("api") == "GetTelemetrySubscriptions"]
                    assert subscriptions and all(line["answered_by"] == "proxy" for line in subscriptions)
                    _identity_agrees(px, clients, ids, _client_version(java, kafka.version))
                    _metrics_agree(java, px, ids)
                finally:
                    clients.close()

    _record(kafka.version, "KIP-714 collect mode: instance ids, metrics", check)


def test_observe_mode_agrees_with_the_brokers_receiver_and_the_java_client(
    broker_with_receiver: tuple[SharedKafka, Path], tmp_path: Path
) -> None:
    kafka, record = broker_with_receiver

    def check() -> None:
        tag = uuid.uuid4().hex[:8]
        with JavaDriver(kafka.version) as java:
            java.call("admin", name="setup", props={"bootstrap.servers": kafka.direct})
            java.call("subscribe_metrics", name="setup", subscription=f"truth-{tag}",
                      configs={"metrics": "org.apache.kafka.", "interval.ms": str(PUSH_INTERVAL_MS),
                               "match": f"client_id=truth-.*-{tag}"})  # fmt: skip
            with telemetry_sidecar(kafka, tmp_path / "requests.log") as px:
                clients = Clients(java, kafka.sidecar_address, tag)
                try:
                    ids = clients.instance_ids()
                    subscriptions = [line for line in px.lines() if line.get("api") == "GetTelemetrySubscriptions"]
                    assert subscriptions and not any("answered_by" in line for line in subscriptions)
                    _identity_agrees(px, clients, ids, _client_version(java, kafka.version))
                    _metrics_agree(java, px, ids)
                    received = [push for push in pushes_received(record) if push.client_id in clients.ids.values()]
                    for kind, client_id in clients.ids.items():
                        got = [push for push in received if push.client_id == client_id]
                        assert got and {push.client_instance_id for push in got} == {ids[kind]}
                        _pushes_agree(px, ids[kind], got)
                finally:
                    clients.close()

    _record(kafka.version, "KIP-714 observe mode: instance ids, metrics", check)


def _pushes_agree(px: TelemetryProxy, instance: str, received: list[Received]) -> None:
    """Push by push, the telemetry log's points against the broker's: gauges as they
    came, a delta sum as the total of the broker's deltas so far."""
    logged = [line for line in px.telemetry_lines() if line["client_instance_id"] == instance]
    totals: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    at = compared = 0
    for push in received:
        points = list(_points(push))
        block = logged[at : at + len(points)]
        if len(block) < len(points):
            break  # the broker got it, the telemetry log's writer has not written it yet
        at += len(points)
        compared += 1
        for (name, attributes, value, delta), line in zip(points, block, strict=True):
            assert (line["metric"], tuple(sorted(line["attributes"].items()))) == (name, attributes)
            if delta:
                value = totals[(name, attributes)] = totals.get((name, attributes), 0.0) + value
            if math.isnan(value):  # (an average of nothing yet: JSON has no NaN, the log says null)
                assert line["value"] is None, (name, attributes, line["value"])
            else:
                assert line["value"] == value, (name, attributes, line["value"], value)
    assert compared >= 2 and any(totals.values()), (compared, len(received))


def _points(push: Received) -> Iterator[tuple[str, tuple[tuple[str, str], ...], float, bool]]:
    for resource in push.metrics.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                kind = metric.WhichOneof("data")
                data = getattr(metric, kind)
                delta = kind == "sum" and data.aggregation_temporality == 1
                for dp in data.data_points:
                    attributes = tuple(sorted((a.key, a.value.string_value) for a in dp.attributes))
                    value = dp.as_double if dp.WhichOneof("value") == "as_double" else float(dp.as_int)
                    yield metric.name, attributes, value, delta
