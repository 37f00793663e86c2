"""`kafkalens` as a user runs it: exit codes, one-line errors, SIGTERM drain, demo.

The demo's default broker is tansu; `--broker apache-kafka`: test_kafka_clients_demo.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from support.cli import (
    children_of,
    http_get,
    http_json,
    http_status,
    kafkalens,
    run,
    workers_config,
)
from support.proxy_harness import (
    LOCAL,
    FakeBroker,
    api_versions_v0,
    is_closed,
    read_frame,
    write_frame,
)

from proxy.tansu import free_port, wait_for_port


def test_check_config() -> None:
    code, out, err = run("check-config", "config/kafkalens.yaml")
    assert (code, err) == (0, "")
    assert out.startswith("config/kafkalens.yaml: OK\n") and "listener plaintext" in out


@pytest.mark.parametrize(
    ("content", "line"),
    [
        (
            "limits: {max_frame_bytes: -1}\n",
            "limits.max_frame_bytes: must be a positive integer, got -1",
        ),
        (
            "listeners: [{name: a, listen: 'h:1', upstream: 'h:2', tls: 3}]\n",
            "listeners[0].tls: must be a mapping",
        ),
        ("limts: {}\n", "limts: unknown key"),
    ],
)
def test_bad_config_is_one_line_and_exit_2(tmp_path: Path, content: str, line: str) -> None:
    path = tmp_path / "k.yaml"
    path.write_text(content)
    for args in (("check-config", str(path)), ("proxy", "--config", str(path))):
        code, out, err = run(*args)
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and err.startswith(f"kafkalens: error: {line}")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("proxy", "--listen", "nope"), "--listen: must be HOST:PORT, got 'nope'"),
        (("proxy", "--upstream", "h:0"), "--upstream: port must be 1..65535, got 0"),
        (("proxy", "--bogus"), "unrecognized arguments: --bogus"),
        (("proxy", "--config", "/no/such.yaml"), "/no/such.yaml: cannot read"),
        (("check-config",), "the following arguments are required: FILE"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(args: tuple[str, ...], line: str) -> None:
    code, _out, err = run(*args)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"kafkalens: error: {line}")


def test_listen_address_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.create_server((LOCAL, 0)) as taken:
        port = taken.getsockname()[1]
        code, _out, err = run(
            "proxy", "--listen", f"{LOCAL}:{port}", "--upstream", f"{LOCAL}:1",
            "--metrics", f"{LOCAL}:0", "--request-log", str(tmp_path / "r.log"),
        )  # fmt: skip
    assert code == 2
    assert err.splitlines()[-1].startswith(
        f"kafkalens: error: listener plaintext: cannot listen on 127.0.0.1:{port}"
    )


class SlowBroker:
    """Answers each request after `delay` seconds; `received` is set on the first."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.received = threading.Event()

    def __call__(self, sock: socket.socket) -> None:
        while True:
            request = read_frame(sock)
            self.received.set()
            time.sleep(self.delay)
            write_frame(sock, request[4:8] + b"ok")


def start_proxy(tmp_path: Path, upstream: str, grace: float) -> tuple[subprocess.Popen[str], int]:
    port = free_port()
    config = tmp_path / "k.yaml"
    config.write_text(
        f"listeners: [{{name: main, listen: '{LOCAL}:{port}', upstream: '{upstream}'}}]\n"
        f"metrics: {{listen: '{LOCAL}:0'}}\n"
        f"request_log: {{path: '{tmp_path / 'requests.log'}'}}\n"
        f"limits: {{shutdown_grace_seconds: {grace}}}\n"
    )
    proc = kafkalens("proxy", "--config", str(config))
    assert wait_for_port(LOCAL, port, 10), proc.stderr
    return proc, port


@pytest.mark.slow
def test_sigterm_drains_in_flight_requests(tmp_path: Path) -> None:
    slow = SlowBroker(delay=0.8)
    with FakeBroker(slow) as broker:
        proc, port = start_proxy(tmp_path, broker.address, grace=5)
        try:
            busy = socket.create_connection((LOCAL, port), timeout=5)
            idle = socket.create_connection((LOCAL, port), timeout=5)
            busy.sendall(api_versions_v0(1))
            assert slow.received.wait(5)
            proc.send_signal(signal.SIGTERM)
            assert is_closed(idle, timeout=0.5)  # nothing in flight: closed at once
            time.sleep(0.1)
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection((LOCAL, port), timeout=1)  # no longer accepting
            assert read_frame(busy) == b"\x00\x00\x00\x01ok"  # the in-flight answer arrives
            assert is_closed(busy, timeout=2)
            assert proc.wait(5) == 0
        finally:
            proc.kill()
            proc.communicate()


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_as_soon_as_the_port_answers_is_a_clean_stop(tmp_path: Path, workers: int) -> None:
    """An orchestrator may stop a proxy the moment its port answers: that is a graceful
    stop (exit 0), not the default action of SIGTERM during the rest of start-up."""
    port, metrics_port = free_port(), free_port()
    config = workers_config(tmp_path, port, metrics_port, f"{LOCAL}:1", tmp_path / "requests.log")
    if workers == 1:
        config.write_text(config.read_text().replace("workers: 2", "workers: 1"))
    proc = kafkalens("proxy", "--config", str(config))
    try:
        assert wait_for_port(LOCAL, port, 30), proc.stderr
        proc.send_signal(signal.SIGTERM)  # before: the default action, 10 times in 10
        assert proc.wait(30) == 0, proc.communicate()[1]
    finally:
        proc.kill()
        proc.communicate()


@pytest.mark.slow
def test_sigterm_cuts_off_after_the_grace_period(tmp_path: Path) -> None:
    slow = SlowBroker(delay=5)
    with FakeBroker(slow) as broker:
        proc, port = start_proxy(tmp_path, broker.address, grace=0.5)
        try:
            busy = socket.create_connection((LOCAL, port), timeout=5)
            busy.sendall(api_versions_v0(1))
            assert slow.received.wait(5)
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert is_closed(busy, timeout=3)
            assert proc.wait(5) == 0
            assert 0.4 < time.monotonic() - started < 2.5
        finally:
            proc.kill()
            proc.communicate()


@pytest.mark.broker
def test_demo_runs_and_stops_cleanly(tmp_path: Path) -> None:
    port, metrics_port = free_port(), free_port()
    log = tmp_path / "demo" / "requests.log"
    import resource

    proc = kafkalens(
        "demo", "--port", str(port), "--metrics-port", str(metrics_port), "--log", str(log),
        cwd=tmp_path,
        # a common shell's limit: the demo must fit it without warnings
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096)),
    )  # fmt: skip
    try:
        banner: list[str] = []
        assert proc.stdout is not None
        while not banner or "Ctrl-C" not in banner[-1]:
            line = proc.stdout.readline()
            assert line, proc.stderr.read() if proc.stderr else ""
            banner.append(line)
        text = "".join(banner)
        assert banner[0].startswith("kafkalens demo:"), text  # the title first
        assert f"rotated at 100 MiB; for kafkalens watch {log.parent}, run the demo with --rotate-every 60" in text
        assert f"bootstrap servers: 127.0.0.1:{port}" in text
        assert f"tail -f {log} | jq ." in text
        assert f"http://127.0.0.1:{metrics_port}/metrics" in text
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}")
        producer.send("demo-topic", b"hello").get(15)
        producer.close()
        import urllib.request

        clients_url = text.split("clients:", 1)[1].split()[0]
        assert clients_url.startswith("http://127.0.0.1:") and clients_url.endswith("/clients")
        with urllib.request.urlopen(clients_url, timeout=5) as r:
            assert isinstance(json.load(r), list)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(15) == 0
        assert proc.stderr is not None
        said = [json.loads(line) for line in proc.stderr.read().splitlines()]
        assert [line for line in said if line["level"] != "info"] == []  # no warning at all
        assert {line["msg"] for line in said} == {"upstream reachable"}, said
        # the request log is opened where the banner said (its lines are the hooks' job)
        assert log.exists() and (tmp_path / "demo-tansu.log").exists()
        assert {path.name for path in (tmp_path / "demo").iterdir()} <= {"requests.log", "requests.log.1"}
    finally:
        proc.kill()
        proc.communicate()


def test_demo_port_taken(tmp_path: Path) -> None:
    with socket.create_server((LOCAL, 0)) as taken:
        port = taken.getsockname()[1]
        code, _out, err = run("demo", "--port", str(port), cwd=tmp_path)
    assert code == 2
    assert err == f"kafkalens: error: port {port} is already in use; choose another with --port\n"


@pytest.mark.slow
def test_workers_share_the_port_and_metrics_add_up(tmp_path: Path) -> None:
    from support.proxy_harness import echo_broker

    port, metrics_port = free_port(), free_port()
    with FakeBroker(echo_broker) as broker:
        clients_port = free_port()
        config = workers_config(
            tmp_path, port, metrics_port, broker.address, tmp_path / "requests.log", clients_port
        )
        proc = kafkalens("proxy", "--config", str(config))
        try:
            assert wait_for_port(LOCAL, metrics_port, 30), proc.stderr
            socks = []
            for corr in range(40):  # SO_REUSEPORT spreads these over both workers
                sock = socket.create_connection((LOCAL, port), timeout=5)
                sock.sendall(api_versions_v0(corr))
                assert read_frame(sock) == corr.to_bytes(4, "big") + b"ok"
                socks.append(sock)
            assert http_status(metrics_port, "/clients") == 404  # off on the open port
            assert wait_for_port(LOCAL, clients_port, 5)
            clients = http_json(clients_port, "/clients", wait_for=lambda c: len(c) == 40)
            pids = {c["conn_id"].split("-")[0] for c in clients}
            assert len(pids) == 2
            metrics = http_get(metrics_port, "/metrics")
            opened = [
                line
                for line in metrics.splitlines()
                if line.startswith("kafkalens_connections_opened_total{")
            ]
            assert opened == ['kafkalens_connections_opened_total{listener="main"} 40.0']
            assert "_created" not in metrics
            # the parent's own counter, beside the workers': the /clients refusal above
            assert 'kafkalens_admin_refused_total{reason="clients_off"} 1.0' in metrics
            assert http_get(metrics_port, "/readyz") == "ready\n"
            # the parent's probe, as a metric too
            assert f'kafkalens_upstream_reachable{{upstream="{broker.address}"}} 1.0' in metrics
            proc.send_signal(signal.SIGTERM)
            assert all(is_closed(sock, timeout=5) for sock in socks)
            assert proc.wait(15) == 0
        finally:
            proc.kill()
            proc.communicate()


@pytest.mark.slow
def test_a_dead_worker_is_started_again(tmp_path: Path) -> None:
    """The parent's only children are its workers (no helper process such as
    multiprocessing's resource tracker), and a killed worker is replaced."""
    from support.proxy_harness import echo_broker

    port, metrics_port = free_port(), free_port()
    with FakeBroker(echo_broker) as broker:
        config = workers_config(tmp_path, port, metrics_port, broker.address, "-")
        proc = kafkalens("proxy", "--config", str(config))
        try:
            assert wait_for_port(LOCAL, metrics_port, 30), proc.stderr
            first = children_of(proc.pid)
            assert len(first) == 2
            os.kill(first[0], signal.SIGKILL)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                now = children_of(proc.pid)
                if len(now) == 2 and first[0] not in now:
                    break
                time.sleep(0.2)
            assert len(now) == 2 and first[0] not in now and first[1] in now
            assert http_get(metrics_port, "/readyz") == "ready\n"
            for corr in range(10):  # both workers serve again
                with socket.create_connection((LOCAL, port), timeout=5) as sock:
                    sock.sendall(api_versions_v0(corr))
                    assert read_frame(sock) == corr.to_bytes(4, "big") + b"ok"
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(15) == 0
        finally:
            proc.kill()
            proc.communicate()


def test_help_names_the_built_in_defaults() -> None:
    """`--help` says what a flag left out means: the same values the config loader uses."""
    from proxy.config import DEFAULT_LISTENER, MetricsConfig, RequestLogConfig
    from proxy.features import load_config

    code, out, _ = run("proxy", "--help")
    assert code == 0
    text = " ".join(out.split())  # argparse wraps lines
    built_in = load_config(None)
    assert built_in.listeners[0] == DEFAULT_LISTENER and built_in.metrics == MetricsConfig()
    for value in (DEFAULT_LISTENER.listen, DEFAULT_LISTENER.upstream, MetricsConfig().listen):
        assert f"built-in default {value}" in text
    assert f'built-in default "{RequestLogConfig().path}"' in text
    code, out, _ = run("demo", "--help")
    text = " ".join(out.split())
    assert code == 0
    # the README's demo promises: 127.0.0.1:9092, :9180, ./kafkalens-demo/requests.log
    for default in (
        "--port PORT proxy port for clients (default 9092)",
        "HTTP metrics port (default 9180)",
        "request log (default kafkalens-demo/requests.log)",
    ):
        assert default in text
    code, out, _ = run("check-config", "--help")
    assert code == 0 and "FILE the kafkalens.yaml to check" in " ".join(out.split())


def test_the_start_line_names_addresses_as_flags_take_them(tmp_path: Path) -> None:
    proc, port = start_proxy(tmp_path, f"{LOCAL}:19", grace=1)
    time.sleep(0.5)  # the port answers a moment before the line is written
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    line = next(json.loads(line) for line in err.splitlines() if "kafkalens started" in line)
    assert line["listeners"] == [f"main {LOCAL}:{port} -> {LOCAL}:19"], line
