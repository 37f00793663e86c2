"""Kafka's own view, for the tests that hold kafkalens to it (tests/interop/test_kafka_truth_*.py).

`JavaDriver` runs tests/peers/java/truth/Driver.java (the Java client, one command per
line, one JSON answer per line) on a Kafka version's jars. `receiver_kafka` starts a
small broker of its own with tests/peers/broker-plugins/telemetry (a KIP-714 receiver
that writes every push it gets to a file) and `pushes_received` reads that file back.
`telemetry_sidecar` is a proxy with a telemetry section in front of a SharedKafka's
PROXIED listener. `java_metric_name` is KIP-714's mapping of a Java client metric to
the OTLP name it is pushed under.
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import json
import queue
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

from support.java import start_java
from support.kafka import NEWEST, SharedKafka, broker_plugins, shared_kafka

JAVA_SOFTWARE_NAME = "apache-kafka-java"  # KIP-511: what the Java client's ApiVersions says
RECEIVER_CLASS = "telemetry.RecordingExporter"
RECEIVER_PATH_CONFIG = "kafkalens.telemetry.record.path"
ANSWER_TIMEOUT_S = 120.0


class DriverError(AssertionError):
    pass


class JavaDriver:
    """One JVM running truth.Driver; `call(op, **fields)` sends a command and returns its
    answer (DriverError when the client threw)."""

    def __init__(self, version: str = NEWEST) -> None:
        self.version = version
        self.process: subprocess.Popen[str] = start_java("truth.Driver", version=version)
        self._answers: queue.Queue[str | None] = queue.Queue()
        self.stderr: collections.deque[str] = collections.deque(maxlen=400)
        threading.Thread(target=self._read_answers, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_answers(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._answers.put(line)
        self._answers.put(None)

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line)

    def call(self, op: str, timeout: float = ANSWER_TIMEOUT_S, **fields: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.process.stdin.flush()
        try:
            line = self._answers.get(timeout=timeout)
        except queue.Empty:
            raise DriverError(f"{op}: no answer within {timeout:.0f}s; stderr:\n{self.tail()}") from None
        if line is None:
            raise DriverError(f"{op}: the driver exited; stderr:\n{self.tail()}")
        answer: dict[str, Any] = json.loads(line)
        if not answer.pop("ok"):
            raise DriverError(f"{op} {fields}: {answer['error']}\n{answer.get('trace', '')}")
        return answer

    def tail(self) -> str:
        return "".join(list(self.stderr)[-60:])

    def close(self) -> None:
        """Closes every client (stdin's end), then the JVM; killed if it hangs."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> JavaDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def partition_key(topic: str, partition: int) -> str:
    """How the driver names a partition in its answers."""
    return f"{topic}/{partition}"


@contextmanager
def receiver_kafka(work_dir: Path, version: str = NEWEST) -> Iterator[tuple[SharedKafka, Path]]:
    """A one-node broker of its own whose metrics reporter is the recording KIP-714
    receiver, so it lists and serves GetTelemetrySubscriptions and PushTelemetry; and the
    file the receiver writes each push it gets to."""
    record = work_dir / "pushes-received.jsonl"
    properties = {"metric.reporters": RECEIVER_CLASS, RECEIVER_PATH_CONFIG: str(record)}
    with shared_kafka(
        work_dir, version, classpath=[broker_plugins()], properties=properties
    ) as kafka:
        yield kafka, record


@dataclasses.dataclass(frozen=True)
class Received:
    """One push as the broker's receiver got it."""

    client_instance_id: str
    client_id: str
    terminating: bool
    metrics: MetricsData


def pushes_received(record: Path) -> list[Received]:
    if not record.exists():
        return []
    found = []
    for line in record.read_text().splitlines():
        item = json.loads(line)
        data = MetricsData()
        data.ParseFromString(base64.b64decode(item["data"]))
        found.append(
            Received(item["client_instance_id"], item["client_id"], item["terminating"], data)
        )
    return found


@contextmanager
def telemetry_sidecar(kafka: SharedKafka, log_path: Path, **telemetry: Any) -> Iterator[Any]:
    """A TelemetryProxy (support.telemetry) as the sidecar of `kafka`: on the address the
    broker advertises, forwarding to its PROXIED listener."""
    from proxy.config import Address
    from support.telemetry import TelemetryProxy

    proxy = TelemetryProxy(kafka.upstream, log_path, **telemetry)
    listener = dataclasses.replace(
        proxy.config.listeners[0], listen=Address("127.0.0.1", kafka.sidecar_port)
    )
    proxy.config = dataclasses.replace(proxy.config, listeners=(listener,))
    with proxy:
        yield proxy


def java_metric_name(group: str, name: str) -> str:
    """KIP-714's name for a Java client metric: "org.apache.kafka.", the group without
    its "-metrics" suffix, then the name, dashes made dots
    (producer-metrics/record-send-total -> org.apache.kafka.producer.record.send.total)."""
    return "org.apache.kafka." + f"{group.removesuffix('-metrics')}.{name}".replace("-", ".")
