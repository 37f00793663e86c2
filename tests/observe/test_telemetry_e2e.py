"""KIP-714 client telemetry end to end: confluent-kafka (librdkafka) through the proxy to
tansu, which knows nothing of telemetry.

Collect mode: the proxy lists GetTelemetrySubscriptions and PushTelemetry in its
ApiVersions, hands each client an instance id and a 1 s push interval, and the
clients' own metrics reach /metrics and the telemetry log. The oracle is each client's
own statistics callback (statistics.interval.ms). Observe mode: a second kafkalens in
collect mode stands in for a broker that hands out subscriptions (client -> observing
proxy -> collecting proxy -> tansu), and the observing proxy decodes what it forwards.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from support.ck_client import create_topic
from support.clients import HEARTBEAT_MS, SESSION_TIMEOUT_MS
from support.observed import Samples, eventually
from support.proxy_harness import LOCAL
from support.telemetry import TelemetryProxy

from proxy.observe.identity import kafka_uuid
from proxy.tansu import free_port

PREFIX = "kafkalens_client_org_apache_kafka_"
RECORDS = 200
CONTRACT_FIELDS = {
    "event", "ts", "client_instance_id", "client_id", "client_software_name",
    "client_software_version", "principal", "listener", "metric", "type", "value",
    "count", "attributes",
}  # fmt: skip


class Client:
    """A librdkafka client with its statistics callback kept."""

    def __init__(
        self, kind: type[Producer] | type[Consumer], bootstrap: str, client_id: str, **extra: Any
    ) -> None:
        self.stats: list[dict[str, Any]] = []
        self.consumed = 0
        self.handle = kind(
            {
                "bootstrap.servers": bootstrap,
                "client.id": client_id,
                "statistics.interval.ms": 500,
                "stats_cb": lambda text: self.stats.append(json.loads(text)),
                **extra,
            }
        )

    def poll(self, timeout: float) -> None:
        """Serve callbacks; a consumer counts the records it got."""
        message = self.handle.poll(timeout)  # a Producer's answer is a count of events
        if isinstance(self.handle, Consumer) and message is not None and not message.error():
            self.consumed += 1

    def connects(self) -> int:
        """Connections the client made, by its own count (every broker handle's)."""
        return sum(b["connects"] for b in self.stats[-1]["brokers"].values())

    def rtt_bounds_ms(self) -> tuple[float, float]:
        """The least and most round trip its statistics ever showed, in ms."""
        rtts = [b["rtt"] for s in self.stats for b in s["brokers"].values() if b["rtt"]["cnt"]]
        return min(r["min"] for r in rtts) / 1000, max(r["max"] for r in rtts) / 1000


def consumer_config() -> dict[str, Any]:
    return {
        "group.id": "telemetry-group",
        "auto.offset.reset": "earliest",
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": HEARTBEAT_MS,
        "max.poll.interval.ms": SESSION_TIMEOUT_MS,
    }


def serve(producer: Client, consumer: Client, until: Any, timeout: float = 40.0) -> Any:
    """Poll both clients (their callbacks and telemetry run then) until `until()`."""
    deadline = time.monotonic() + timeout
    while True:
        producer.poll(0)
        consumer.poll(0.2)
        value = until()
        if value or time.monotonic() > deadline:
            return value


def instance_ids(lines: list[dict[str, Any]]) -> dict[str, str]:
    """client id -> the instance id its GetTelemetrySubscriptions answer carried."""
    return {
        line["client_id"]: line["client_instance_id"]
        for line in lines
        if line.get("api") == "GetTelemetrySubscriptions" and line.get("client_instance_id")
    }


def sample(metrics: Samples, name: str, instance: str, **labels: str) -> float | None:
    return metrics.value(PREFIX + name, client_instance_id=instance, **labels)


def test_collect_mode_gives_every_client_an_id_and_its_metrics_reach_prometheus(
    tansu_factory: Any, tmp_path: Path
) -> None:
    broker_port = free_port()
    with TelemetryProxy(
        f"{LOCAL}:{broker_port}", tmp_path / "requests.log", collect=True, push_interval_ms=1000
    ) as px:
        tansu_factory(advertised_port=px.port, port=broker_port)
        create_topic(px.bootstrap, "tel", 1)
        producer = Client(Producer, px.bootstrap, "tel-producer", **{"linger.ms": 5})
        consumer = Client(Consumer, px.bootstrap, "tel-consumer", **consumer_config())
        consumer.handle.subscribe(["tel"])
        for i in range(RECORDS):
            producer.handle.produce("tel", f"v{i}".encode())
        producer.handle.flush(15)
        assert serve(producer, consumer, lambda: consumer.consumed >= RECORDS), consumer.consumed

        clients = {"tel-producer", "tel-consumer"}
        found = eventually(
            lambda: clients <= set(instance_ids(px.lines())) and instance_ids(px.lines())
        )
        assert found, instance_ids(px.lines())
        ids = {client: found[client] for client in clients}
        assert len({kafka_uuid(i) for i in found.values()}) == len(found)  # one each
        p_id, c_id = ids["tel-producer"], ids["tel-consumer"]

        def matches_statistics() -> bool:
            metrics = px.metrics()
            return (
                sample(metrics, "producer_connection_creation_total", p_id) == producer.connects()
                and sample(metrics, "consumer_connection_creation_total", c_id)
                == consumer.connects()
                and sample(metrics, "consumer_coordinator_assigned_partitions", c_id)
                == consumer.stats[-1]["cgrp"]["assignment_size"]
                == 1
            )

        assert serve(producer, consumer, matches_statistics, timeout=20), px.metrics().text
        metrics = px.metrics()
        low, high = producer.rtt_bounds_ms()
        latency = sample(metrics, "producer_node_request_latency_avg", p_id, node_id="111")
        assert latency is not None and low <= latency <= high, (latency, low, high)
        labels = [
            ls
            for n, ls, _ in metrics.samples
            if n.startswith(PREFIX) and ls["client_instance_id"] == p_id
        ]
        assert labels and all(
            ls["client_id"] == "tel-producer"
            and ls["software"].startswith("confluent-kafka-python/")
            for ls in labels
        )

        clients = px.http_clients()
        consumer.handle.close()
        producer.handle.flush(5)
        lines = px.lines()
        telemetry_lines = px.telemetry_lines()

    # The same instance id on every line of the client's connections from its first
    # telemetry exchange on (its other connections joined through its client id).
    for client_id, instance in ids.items():
        first = next(
            i for i, line in enumerate(lines) if line.get("client_instance_id") == instance
        )
        later = [line for line in lines[first:] if line.get("client_id") == client_id]
        assert {line.get("client_instance_id") for line in later} == {instance}
        open_conns = [c for c in clients if c["identity"]["client_id"] == client_id]
        assert open_conns and {c["identity"]["client_instance_id"] for c in open_conns} == {
            instance
        }
    # the consumer's group coordinator and fetch connections both logged with the id
    consumer_lines = [
        line for line in lines if line.get("client_instance_id") == ids["tel-consumer"]
    ]
    assert {"Fetch", "Heartbeat"} <= {line.get("api") for line in consumer_lines}
    # (a terminating push at close may also leave a request_incomplete line)
    pushes = [
        line for line in lines if line.get("api") == "PushTelemetry" and line["event"] == "request"
    ]
    assert pushes and all(
        line["answered_by"] == "proxy" and line["telemetry_metrics"] > 0 for line in pushes
    )
    assert telemetry_lines and all(set(line) == CONTRACT_FIELDS for line in telemetry_lines)
    assert {p_id, c_id} <= {
        line["client_instance_id"] for line in telemetry_lines
    }  # (and the admin client)
    kinds = {line["metric"]: line["type"] for line in telemetry_lines}
    assert kinds["org.apache.kafka.producer.connection.creation.total"] == "sum"
    assert kinds["org.apache.kafka.producer.node.request.latency.avg"] == "gauge"


def test_observe_mode_decodes_the_pushes_it_forwards(tansu_factory: Any, tmp_path: Path) -> None:
    broker_port, collector_port = free_port(), free_port()
    collector = TelemetryProxy(
        f"{LOCAL}:{broker_port}", tmp_path / "collector.log", collect=True, push_interval_ms=1000
    )
    collector.config = _listening_on(collector.config, collector_port)
    with (
        collector,
        TelemetryProxy(f"{LOCAL}:{collector_port}", tmp_path / "observer.log") as observer,
    ):
        tansu_factory(advertised_port=observer.port, port=broker_port)
        producer = Client(Producer, observer.bootstrap, "observed-producer")
        producer.handle.produce("observed", b"v")
        producer.handle.flush(15)

        def pushed_twice() -> bool:
            producer.handle.poll(0.2)
            pushes = [
                line
                for line in observer.lines()
                if line.get("api") == "PushTelemetry" and line["event"] == "request"
            ]
            return len(pushes) >= 2

        assert eventually(pushed_twice, timeout=30)
        instance = instance_ids(collector.lines())["observed-producer"]
        assert instance_ids(observer.lines())["observed-producer"] == instance
        forwarded = [
            line
            for line in observer.lines()
            if line.get("api") == "PushTelemetry" and line["event"] == "request"
        ]
        assert all(
            "answered_by" not in line and line["telemetry_metrics"] > 0 for line in forwarded
        )
        assert all(line["client_instance_id"] == instance for line in forwarded)
        observed = observer.metrics()
        value = sample(observed, "producer_connection_creation_total", instance)
        assert value is not None and value >= 1
        assert (
            observer.call(lambda: observer.telemetry.store.instances[instance].interval_s)
            == 1.0
        )
        producer.handle.flush(5)


def _listening_on(config: Any, port: int) -> Any:
    import dataclasses

    from proxy.config import Address

    listener = dataclasses.replace(config.listeners[0], listen=Address(LOCAL, port))
    return dataclasses.replace(config, listeners=(listener,))


def test_gateway_collect_mode_answers_in_place_of_brokers_that_ask_for_nothing(
    mock_cluster: str, tmp_path: Path
) -> None:
    """librdkafka's mock cluster knows KIP-714 but subscribes to no metric: in collect
    mode (answer: proxy) the gateway answers instead, whichever broker a client asks."""
    import dataclasses

    from support.gateway import brokers_of, gateway_config
    from support.proxy_harness import ProxyThread

    from proxy.features import build_hooks
    from proxy.metrics import Metrics
    from proxy.observe.telemetry.config import TelemetryConfig

    ports = {node: free_port() for node in brokers_of(mock_cluster)}
    config = gateway_config(mock_cluster, ports, str(tmp_path / "requests.log"))
    config = dataclasses.replace(
        config, telemetry=TelemetryConfig(collect=True, push_interval_ms=1000)
    )
    metrics = Metrics()
    with ProxyThread(config, build_hooks(config, metrics)) as px:
        producer = Client(Producer, px.bootstrap, "gw-producer")
        for i in range(10):
            producer.handle.produce("gw-telemetry", f"v{i}".encode())
        assert producer.handle.flush(15) == 0

        def pushed() -> bool:
            producer.poll(0.2)
            samples = Samples(metrics.render().decode())
            value = samples.value(
                PREFIX + "producer_connection_creation_total", client_id="gw-producer"
            )
            return value is not None and value == producer.connects()

        assert eventually(pushed, timeout=20), metrics.render().decode()
        producer.handle.flush(5)
