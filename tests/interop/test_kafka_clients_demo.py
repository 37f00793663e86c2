"""`kafkalens demo --broker apache-kafka`: the demo in front of Apache Kafka itself,
started from its jars, as the README says; clients reach the broker only through it,
and Ctrl-C stops both (no JVM left behind)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from support.kafka import NEWEST, kafka_libs
from support.paths import REPO

from proxy.tansu import free_port


def _demo(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "proxy.cli", "demo", *args],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _banner(proc: subprocess.Popen[str], timeout: float) -> str:
    """The demo's output up to its "Ctrl-C" line (the broker starts first): read by a
    thread, since a buffered text pipe hides lines from select()."""
    stdout = proc.stdout
    assert stdout is not None
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    text, deadline = "", time.monotonic() + timeout
    while "Ctrl-C" not in text:
        try:
            text += lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"no banner within {timeout:.0f} s: {text}") from None
        assert proc.poll() is None, f"{text}{proc.stderr.read() if proc.stderr else ''}"
    return text


def _java_processes_in(work_dir: Path) -> list[int]:
    """Processes whose command line names `work_dir` (the broker's config is in it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if str(work_dir).encode() in cmdline:
                found.append(int(entry.name))
    return found


def test_the_demo_runs_in_front_of_apache_kafka(tmp_path: Path) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

    libs = kafka_libs(NEWEST)
    port, metrics_port = free_port(), free_port()
    log = tmp_path / "demo" / "requests.log"
    proc = _demo(
        tmp_path, "--broker", "apache-kafka", "--kafka-libs", str(libs), "--port", str(port),
        "--metrics-port", str(metrics_port), "--log", str(log),
    )  # fmt: skip
    try:
        text = _banner(proc, timeout=180)
        assert f"kafkalens demo: Apache Kafka {NEWEST} behind the proxy" in text, text
        assert f"bootstrap servers: 127.0.0.1:{port}" in text
        bootstrap = f"127.0.0.1:{port}"
        topic = f"demo-{uuid.uuid4().hex[:8]}"
        producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="demo-producer")
        for i in range(5):
            producer.send(topic, b"hello %d" % i).get(30)
        producer.close()
        consumer = KafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id="demo", auto_offset_reset="earliest",
            consumer_timeout_ms=15000, client_id="demo-consumer",
        )  # fmt: skip
        got = [m.value for m, _ in zip(consumer, range(5), strict=False)]
        consumer.close()
        assert got == [b"hello %d" % i for i in range(5)]
        # The broker tells clients about the proxy only: every connection goes through it.
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        brokers = admin.describe_cluster()["brokers"]
        admin.close()
        assert [(b["host"], b["port"]) for b in brokers] == [("127.0.0.1", port)]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(90) == 0
        broker_dir = tmp_path / "demo-kafka"
        assert "Kafka Server started" in (broker_dir / "node-1" / "kafka.log").read_text()
        assert not _java_processes_in(broker_dir)
        lines = log.read_text()
        assert '"api":"Produce"' in lines and '"client_id":"demo-producer"' in lines
        assert '"api":"JoinGroup"' in lines and '"client_id":"demo-consumer"' in lines
    finally:
        proc.kill()
        proc.communicate()


def test_the_demo_says_where_apache_kafka_jars_are_missing(tmp_path: Path) -> None:
    proc = _demo(tmp_path, "--broker", "apache-kafka", "--kafka-libs", str(tmp_path),
                 "--port", str(free_port()), "--metrics-port", str(free_port()))  # fmt: skip
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert f"no Apache Kafka jars (kafka_2.13-*.jar) in {tmp_path}" in err
    assert "--kafka-libs DIR (or set KAFKA_HOME)" in err
    proc = _demo(tmp_path, "--kafka-libs", str(tmp_path), "--port", str(free_port()),
                 "--metrics-port", str(free_port()))  # fmt: skip
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "--kafka-libs is for --broker apache-kafka" in err


def test_the_jars_default_to_kafka_home_else_the_checkouts_newest(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from proxy.demo import default_kafka_libs

    monkeypatch.setenv("KAFKA_HOME", str(tmp_path))
    assert default_kafka_libs() == tmp_path / "libs"
    monkeypatch.delenv("KAFKA_HOME")
    assert default_kafka_libs() == REPO / "tests" / "peers" / "build" / f"kafka-{NEWEST}"
