"""Kafka's own Java client through kafkalens in front of Apache Kafka, each step run
directly and then proxied and compared (support.kafka_java_steps says how): the
producer (idempotent, acks=1, transactional, every codec, headers), the consumer in a
classic and a KIP-848 group, the share consumer (KIP-932) and the Admin client.

Three places: a sidecar in front of one node at the newest and at the oldest Kafka
version of tests/peers/kafka-versions (the client of the same version), and a gateway
in front of the 3-node cluster (replication factor 3). Each test records its row of
docs/compatibility.md's table.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support import compat
from support.gateway import gateway_in_front_of
from support.kafka import NEWEST, OLDEST, SharedKafka, observed_sidecar
from support.kafka_java import JavaClients
from support.kafka_java_steps import (
    FEATURES,
    Names,
    Run,
    Target,
    assert_addresses,
    assert_logged,
    assert_same,
    described_topics,
)

from proxy.apache_kafka import KafkaCluster

JAVA_CLIENT = "Java (kafka-clients)"
PLACES = [("sidecar", NEWEST), ("sidecar", OLDEST), ("gateway", NEWEST)]


@pytest.fixture(scope="module")
def java_clients(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[[str], JavaClients]]:
    """The Java client of a Kafka version, one JVM per version for the module."""
    started: dict[str, JavaClients] = {}
    work = tmp_path_factory.mktemp("java-clients")

    def of(version: str) -> JavaClients:
        if version not in started:
            started[version] = JavaClients(work, version)
        return started[version]

    yield of
    for java in started.values():
        java.close()


def _address(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


# A place to run: the direct and the proxied targets, and the proxied run's log lines.
Place = Iterator[tuple[Target, Target, Callable[[], list[dict[str, Any]]]]]


@contextmanager
def _sidecar(kafka: SharedKafka, log: Path) -> Place:
    direct = Target(kafka.direct, {1: _address(kafka.direct)})
    with observed_sidecar(kafka, log) as px:
        proxied = Target(kafka.sidecar_address, {1: _address(kafka.sidecar_address)})

        def lines() -> list[dict[str, Any]]:
            px.wait_all_closed()
            return px.lines()

        yield direct, proxied, lines


@contextmanager
def _gateway(cluster: KafkaCluster, tmp_path: Path) -> Place:
    brokers = {node.node_id: (node.host, node.port) for node in cluster.members}
    direct = Target(cluster.bootstrap, brokers, replication_factor=3)
    with gateway_in_front_of(cluster.bootstrap, tmp_path) as gw:
        proxied = Target(
            gw.px.bootstrap,
            {node: ("127.0.0.1", port) for node, port in gw.ports.items()},
            replication_factor=3,
        )

        def lines() -> list[dict[str, Any]]:
            assert gw.px.wait_until(lambda: not gw.px.server.clients(), 30)
            observing = gw.px.server.hooks.inner  # type: ignore[attr-defined]
            gw.px.call(observing.log.flush)
            text = (tmp_path / "requests.log").read_text()
            return [json.loads(line) for line in text.splitlines()]

        yield direct, proxied, lines


@pytest.mark.parametrize("feature", list(FEATURES))
@pytest.mark.parametrize(("mode", "version"), PLACES, ids=[f"{m}-{v}" for m, v in PLACES])
def test_java_client_direct_and_proxied(
    request: pytest.FixtureRequest,
    java_clients: Callable[[str], JavaClients],
    tmp_path: Path,
    mode: str,
    version: str,
    feature: str,
) -> None:
    java = java_clients(version)
    wording, steps = FEATURES[feature]
    if mode == "sidecar":
        kafka: SharedKafka = request.getfixturevalue(
            "apache_kafka" if version == NEWEST else "apache_kafka_oldest"
        )
        place = _sidecar(kafka, tmp_path / "requests.log")
    else:
        place = _gateway(request.getfixturevalue("apache_kafka_cluster"), tmp_path)
    broker = compat.apache_kafka(version)
    # Both runs stamp their records with the same times, so they compare whole.
    base_ts = int(time.time() * 1000)
    with compat.checking(broker, JAVA_CLIENT, java.client_version, mode, wording):
        with place as (direct_target, proxied_target, logged_lines):
            direct = Run(Names(feature), direct_target)
            steps(java, direct, base_ts)
            proxied = Run(Names(feature), proxied_target)
            steps(java, proxied, base_ts)
            lines = logged_lines()
        assert_same(direct, proxied)
        assert_addresses(direct)
        assert_addresses(proxied)
        assert_logged(proxied, lines)
        _assert_placement_is_the_brokers(java, direct_target, proxied)


def _assert_placement_is_the_brokers(java: JavaClients, direct: Target, proxied: Run) -> None:
    """What the proxied run's clients were told about each topic still there (leaders,
    replicas, in-sync replicas, topic id) is what the broker says directly."""
    told = described_topics(proxied)
    if not told:
        return
    answer = java.step(
        "admin", bootstrap=direct.bootstrap, client_id="kj-placement",
        actions=[{"do": "describe_topics", "topics": [topic]} for topic in told],
    )  # fmt: skip
    for topic, action in zip(told, answer["answers"], strict=True):
        if "error" in action:  # the run deleted it
            assert action["error"]["class"].endswith("UnknownTopicOrPartitionException")
            continue
        assert action["value"][topic] == told[topic], topic
