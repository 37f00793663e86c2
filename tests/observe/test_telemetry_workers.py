"""`workers: 2` in collect mode: each worker keeps the clients that pushed to it, and
the parent's /metrics merges every worker's client metrics into one family per name;
each worker writes its own telemetry log (telemetry-w0.log, telemetry-w1.log)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.cli import http_get, http_json, kafkalens
from support.proxy_harness import LOCAL, FakeBroker, echo_broker
from support.telemetry import RawClient, metrics_data

from proxy.observe.identity import kafka_uuid, kafka_uuid_text
from proxy.tansu import free_port, wait_for_port

CLIENTS = 16  # connections SO_REUSEPORT spreads over both workers
METRIC = "kafkalens_client_queue_time_avg"


@pytest.mark.slow
def test_workers_keep_their_own_clients_and_metrics_merge_them(tmp_path: Path) -> None:
    port, metrics_port, clients_port = free_port(), free_port(), free_port()
    with FakeBroker(echo_broker) as broker:
        config = tmp_path / "k.yaml"
        config.write_text(
            f"workers: 2\n"
            f"listeners: [{{name: main, listen: '{LOCAL}:{port}', upstream: '{broker.address}'}}]\n"
            f"metrics: {{listen: '{LOCAL}:{metrics_port}', clients_listen: '{LOCAL}:{clients_port}'}}\n"
            f"request_log: {{path: '{tmp_path / 'requests.log'}'}}\n"
            f"telemetry: {{collect: true, metrics: [''], log: {{path: '{tmp_path / 'telemetry.log'}'}}}}\n"
        )
        proc = kafkalens("proxy", "--config", str(config))
        try:
            assert wait_for_port(LOCAL, metrics_port, 30), proc.stderr
            pushed: dict[str, float] = {}
            clients = [RawClient(port) for _ in range(CLIENTS)]
            for number, client in enumerate(clients):
                instance, subscription = client.subscribe()
                assert (
                    client.push(instance, subscription, metrics_data({"queue.time.avg": number}))
                    == 0
                )
                pushed[kafka_uuid_text(instance)] = float(number)

            def ids(listed: list[dict[str, object]]) -> set[object]:
                return {c["identity"]["client_instance_id"] for c in listed}  # type: ignore[index]

            connections = http_json(
                clients_port, "/clients", wait_for=lambda c: ids(c) == set(pushed)
            )
            assert len({c["conn_id"].split("-")[0] for c in connections}) == 2  # both workers
            assert ids(connections) == set(pushed)

            def merged() -> dict[str, float]:
                text = http_get(metrics_port, "/metrics")
                return {
                    s.labels["client_instance_id"]: s.value
                    for family in text_string_to_metric_families(text)
                    for s in family.samples
                    if s.name == METRIC
                }

            deadline = time.monotonic() + 10  # workers write their snapshot every second
            while merged() != pushed and time.monotonic() < deadline:
                time.sleep(0.2)
            assert merged() == pushed
            assert http_get(metrics_port, "/metrics").count(f"# TYPE {METRIC} gauge") == 1
            for client in clients:
                client.sock.close()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(15) == 0
        finally:
            proc.kill()
            proc.communicate()
    logged = {}
    for worker in (0, 1):
        for line in (tmp_path / f"telemetry-w{worker}.log").read_text().splitlines():
            entry = json.loads(line)
            logged[entry["client_instance_id"]] = entry["value"]
    assert logged == pushed and all(kafka_uuid_text(kafka_uuid(i)) == i for i in logged)
