"""The proxy's own log, as an operator meets it: `kafkalens proxy` in a subprocess,
its stderr read as a log collector reads it (JSON, since it is no terminal), with real
signals and upstreams that refuse, do not resolve, do not answer, fail TLS and come
back."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from importlib.metadata import version
from pathlib import Path

import pytest
from support.cli import children_of, http_get
from support.own_log import REPO, own_log
from support.proxy_harness import LOCAL, FakeBroker, api_versions_v0, read_frame, write_frame

from proxy.tansu import free_port, wait_for_port


def write_config(tmp_path: Path, upstream: str, *, grace: float = 5, extra: str = "") -> tuple[Path, int]:
    port = free_port()
    config = tmp_path / "k.yaml"
    config.write_text(
        f"listeners: [{{name: main, listen: '{LOCAL}:{port}', upstream: '{upstream}'}}]\n"
        f"metrics: {{listen: '{LOCAL}:0'}}\n"
        f"request_log: {{path: '{tmp_path / 'requests.log'}'}}\n"
        f"limits: {{shutdown_grace_seconds: {grace}}}\n" + extra
    )
    return config, port


class HeldBroker:
    """Answers each request after `release` is set (or at once, if it is)."""

    def __init__(self) -> None:
        self.received = threading.Event()
        self.release = threading.Event()

    def __call__(self, sock: socket.socket) -> None:
        while True:
            request = read_frame(sock)
            self.received.set()
            self.release.wait(30)
            write_frame(sock, request[4:8] + b"ok")


def test_one_line_at_start_and_the_drain_on_sigterm_with_what_was_in_flight(tmp_path: Path) -> None:
    """The start line names what an operator checks first (each value as it really is:
    the bound port, the metrics URL that answers, the package's version), stdout stays
    empty, and SIGTERM is said with the connections and requests it found in flight,
    then how the drain ended."""
    held = HeldBroker()
    with FakeBroker(held) as broker:
        config, port = write_config(tmp_path, broker.address)
        with own_log(config, stdout=subprocess.PIPE) as proxy:
            [started] = proxy.wait_message("kafkalens started")
            assert started["level"] == "info" and started["ts"].endswith("Z")
            assert started["version"] == version("kafkalens")
            assert started["config"] == str(config) and started["mode"] == "sidecar"
            assert started["listeners"] == [f"main {LOCAL}:{port} -> {broker.address}"]
            assert started["upstreams"] == [broker.address]
            assert started["request_log"] == str(tmp_path / "requests.log")
            assert started["pid"] == proxy.proc.pid and started["workers"] == 1
            assert started["max_connections"] > 100 and started["open_file_limit"] > 200
            metrics_port = int(started["metrics"].rsplit(":", 1)[1].split("/")[0])
            assert "kafkalens_build_info" in http_get(metrics_port, "/metrics")
            [reachable] = proxy.wait_message("upstream reachable")
            assert reachable["upstream"] == broker.address
            busy = socket.create_connection((LOCAL, port), timeout=5)
            idle = socket.create_connection((LOCAL, port), timeout=5)
            busy.sendall(api_versions_v0(1))
            assert held.received.wait(10)
            time.sleep(0.2)  # the idle one accepted too
            proxy.proc.send_signal(signal.SIGTERM)
            [stopping] = proxy.wait_message("stopping")
            assert stopping["signal"] == "SIGTERM" and stopping["grace_s"] == 5
            assert (stopping["connections"], stopping["requests_in_flight"]) == (2, 1)
            held.release.set()
            assert read_frame(busy) == b"\x00\x00\x00\x01ok"
            assert proxy.proc.wait(10) == 0
            proxy.stop()
            [stopped] = proxy.messages("stopped")
            assert (stopped["connections_cut"], stopped["requests_cut"]) == (0, 0)
            assert 0 <= stopped["took_s"] < 5
            assert [line["msg"] for line in proxy.lines] == [
                "kafkalens started", "upstream reachable", "stopping", "stopped"
            ]  # fmt: skip
            assert proxy.proc.stdout is not None and proxy.proc.stdout.read() == b""
            busy.close()
            idle.close()


def test_sigint_past_the_grace_period_says_what_it_cut(tmp_path: Path) -> None:
    held = HeldBroker()
    with FakeBroker(held) as broker:
        config, port = write_config(tmp_path, broker.address, grace=0.5)
        with own_log(config) as proxy:
            proxy.wait_message("kafkalens started")
            busy = socket.create_connection((LOCAL, port), timeout=5)
            busy.sendall(api_versions_v0(1))
            assert held.received.wait(10)
            assert proxy.stop(signal.SIGINT) == 0
            [stopping] = proxy.messages("stopping")
            assert stopping["signal"] == "SIGINT" and stopping["requests_in_flight"] == 1
            [cut] = proxy.messages("closing connections after the grace period")
            assert cut["level"] == "warning" and (cut["left"], cut["requests_in_flight"]) == (1, 1)
            [stopped] = proxy.messages("stopped")
            assert (stopped["connections_cut"], stopped["requests_cut"]) == (1, 1)
            busy.close()
        held.release.set()


@pytest.mark.slow  # three probe intervals, each state held two probes (~12 s)
def test_upstream_down_up_down_is_said_once_each_from_the_start(tmp_path: Path) -> None:
    """No client comes: the proxy says at once that its upstream refuses, once however
    many probes (every 2 s) fail; that it is back, with how long it was down; and that
    it went again."""
    upstream_port = free_port()
    config, _port = write_config(tmp_path, f"{LOCAL}:{upstream_port}")
    with own_log(config) as proxy:
        [down] = proxy.wait_message("upstream unreachable", timeout=10)
        went_down = time.monotonic()
        assert down["level"] == "warning" and down["upstream"] == f"{LOCAL}:{upstream_port}"
        assert (down["reason"], down["error"]) == ("connect_refused", "Connection refused")
        time.sleep(2.5)  # another probe
        with socket.create_server((LOCAL, upstream_port)) as listener:
            [back] = proxy.wait_message("upstream reachable again", timeout=10)
            elapsed = time.monotonic() - went_down
            assert back["was"] == "connect_refused" and back["level"] == "info"
            assert elapsed - 2.5 <= back["down_for_s"] <= elapsed + 0.5, (back, elapsed)
            time.sleep(2.5)
            assert listener  # up all that while: nothing more said
        proxy.wait_message("upstream unreachable", count=2, timeout=10)
        time.sleep(2.5)
        proxy.stop()
    said = [line["msg"] for line in proxy.lines if line["msg"].startswith("upstream")]
    assert said == ["upstream unreachable", "upstream reachable again", "upstream unreachable"]


def full_backlog_listener() -> tuple[socket.socket, list[socket.socket]]:
    """A port whose accept queue is full: Linux drops further SYNs, so a connect there
    waits out its timeout (as behind a firewall that drops)."""
    listener = socket.socket()
    listener.bind((LOCAL, 0))
    listener.listen(0)
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(listener.getsockname())
        fillers.append(filler)
    time.sleep(0.2)
    return listener, fillers


class NotTls:
    """Answers anything with a plain-text line and hangs up."""

    def __init__(self) -> None:
        self.server = socket.create_server((LOCAL, 0))
        self.address = f"{LOCAL}:{self.server.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            conn.close()


def test_each_reason_an_upstream_is_unreachable_is_named(tmp_path: Path) -> None:
    """dns (a name that does not resolve), timeout (SYNs dropped), tls (upstream_tls
    in front of something that does not speak it), each with the error in words."""
    if sys.platform != "linux":
        pytest.skip("the full accept queue that drops SYNs is Linux's")
    listener, fillers = full_backlog_listener()
    not_tls = NotTls()
    cases = {
        "dns": ("kafkalens-no-such-host.invalid:9092", ""),
        "timeout": (f"{LOCAL}:{listener.getsockname()[1]}", ""),
        "tls": (not_tls.address, "upstream_tls: {check_hostname: false}\n"),
    }
    try:
        for reason, (upstream, extra) in cases.items():
            folder = tmp_path / reason
            folder.mkdir()
            config, _ = write_config(folder, upstream, extra=extra)
            with own_log(config) as proxy:
                [down] = proxy.wait_message("upstream unreachable", timeout=15)
                proxy.stop()
            assert (down["upstream"], down["reason"]) == (upstream, reason), down
            assert down["error"], down
    finally:
        listener.close()
        not_tls.server.close()
        for filler in fillers:
            filler.close()


def test_a_gateway_whose_brokers_do_not_resolve_says_so(tmp_path: Path) -> None:
    """In one process and as the parent of workers, which probes for them."""
    for workers in (1, 2):
        port = free_port()
        config = tmp_path / f"gateway-{workers}.yaml"
        config.write_text(
            "mode: gateway\n"
            f"workers: {workers}\n"
            "gateway:\n"
            f"  bootstrap_listen: '{LOCAL}:{port}'\n"
            "  bootstrap_servers: [broker-0.kafkalens-test.invalid:9092,"
            " broker-1.kafkalens-test.invalid:9092]\n"
            "  advertised_host: localhost\n"
            f"  listen_host: '{LOCAL}'\n"
            f"  broker_port_base: {free_port()}\n"
            f"metrics: {{listen: '{LOCAL}:0'}}\n"
            f"request_log: {{path: '{tmp_path / 'requests.log'}'}}\n"
        )
        with own_log(config) as proxy:
            down = proxy.wait_message("upstream unreachable", count=2, timeout=30)
            [started] = proxy.messages("kafkalens started")
            proxy.stop()
        assert started["mode"] == "gateway" and started["workers"] == workers
        assert started["listeners"][0] == (
            f"bootstrap {LOCAL}:{port} -> broker-0.kafkalens-test.invalid:9092,"
            " broker-1.kafkalens-test.invalid:9092"
        )
        assert sorted((line["upstream"], line["reason"]) for line in down) == [
            ("broker-0.kafkalens-test.invalid:9092", "dns"),
            ("broker-1.kafkalens-test.invalid:9092", "dns"),
        ]


def test_a_clients_failed_broker_connection_is_logged_with_its_reason(tmp_path: Path) -> None:
    config, port = write_config(tmp_path, f"{LOCAL}:{free_port()}")
    with own_log(config) as proxy:
        proxy.wait_message("kafkalens started")
        with socket.create_connection((LOCAL, port), timeout=5) as client:
            client.sendall(api_versions_v0(1))
            [failed] = proxy.wait_message("upstream connect failed: client connection closed")
        proxy.stop()
    assert failed["level"] == "warning" and failed["reason"] == "connect_refused"
    assert failed["error"] == "Connection refused"


def test_workers_are_named_and_their_lines_carry_their_id(tmp_path: Path) -> None:
    """`ps` shows `kafkalens: worker N`; the parent says it started once, with the
    number of workers; on SIGTERM each worker says what it drained."""
    port = free_port()
    config = tmp_path / "k.yaml"
    config.write_text(
        f"workers: 2\nlisteners: [{{name: main, listen: '{LOCAL}:{port}', upstream: '{LOCAL}:1'}}]\n"
        f"metrics: {{listen: '{LOCAL}:0'}}\nrequest_log: {{path: '{tmp_path / 'r.log'}'}}\n"
    )
    with own_log(config) as proxy:
        [started] = proxy.wait_message("kafkalens started", timeout=60)
        assert started["workers"] == 2 and "worker" not in started
        children = children_of(proxy.proc.pid)
        titles = sorted(Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0") for pid in children)
        assert titles == [b"kafkalens: worker 0", b"kafkalens: worker 1"], titles
        comms = sorted(Path(f"/proc/{pid}/comm").read_text().strip() for pid in children)
        assert comms == ["kafkalens: work", "kafkalens: work"]  # the kernel keeps 15 bytes
        assert proxy.stop() == 0
    stopping = proxy.messages("stopping")
    assert sorted(line.get("worker", -1) for line in stopping) == [-1, 0, 1]
    assert sorted(line.get("worker", -1) for line in proxy.messages("stopped")) == [-1, 0, 1]
    assert all(line["msg"] and line["ts"] for line in proxy.lines)  # every line whole JSON


def test_format_and_level_flags_and_keys(tmp_path: Path) -> None:
    config, port = write_config(tmp_path, f"{LOCAL}:1")

    def run(*flags: str, extra: str = "") -> subprocess.CompletedProcess[str]:
        if extra:
            config.write_text(config.read_text() + extra)
        proc = subprocess.Popen(
            [sys.executable, "-m", "proxy.cli", "proxy", "--config", str(config), *flags],
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while proc.poll() is None and time.monotonic() < deadline:
            if wait_for_port(LOCAL, port, 0.2):
                time.sleep(0.5)  # the probe's first verdict comes as the port opens
                break
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    console = run("--log-format", "console")
    assert console.returncode == 0 and "[info     ] kafkalens started" in console.stderr
    with pytest.raises(json.JSONDecodeError):
        json.loads(console.stderr.splitlines()[0])
    quiet = run("--log-level", "warning")
    said = [json.loads(line)["msg"] for line in quiet.stderr.splitlines()]
    assert said == ["upstream unreachable"], quiet.stderr
    bad = run("--log-format", "xml")
    assert (bad.returncode, bad.stdout) == (2, "")
    assert bad.stderr == (
        "kafkalens: error: argument --log-format: invalid choice: 'xml'"
        " (choose from 'auto', 'json', 'console')\n"
    )
    from_file = run(extra="log: {level: error, format: console}\n")
    assert from_file.returncode == 0 and from_file.stderr == ""
    config.write_text(config.read_text().replace("level: error", "level: loud"))
    key = run()
    assert key.returncode == 2 and key.stderr == (
        "kafkalens: error: log.level: must be one of debug, info, warning, error, got 'loud'\n"
    )


def test_the_request_log_on_stdout_stays_apart_from_the_proxys_lines(tmp_path: Path) -> None:
    """`request_log.path: "-"` asks for stdout: only request log lines there, only the
    proxy's own lines on stderr (its `msg`, the request log's `event`)."""
    with FakeBroker(lambda sock: write_frame(sock, read_frame(sock)[4:8] + b"ok")) as broker:
        config, port = write_config(tmp_path, broker.address)
        config.write_text(config.read_text().replace(str(tmp_path / "requests.log"), "-"))
        with own_log(config, stdout=subprocess.PIPE) as proxy:
            [started] = proxy.wait_message("kafkalens started")
            assert started["request_log"] == "stdout"
            assert wait_for_port(LOCAL, port, 10)
            with socket.create_connection((LOCAL, port), timeout=5) as client:
                client.sendall(api_versions_v0(7))
                read_frame(client)
            proxy.stop()
            assert proxy.proc.stdout is not None
            out = [json.loads(line) for line in proxy.proc.stdout.read().splitlines()]
    assert {line["event"] for line in out} == {"connection_open", "request", "connection_close"}
    assert all("msg" not in line for line in out)
    assert all("event" not in line and "msg" in line for line in proxy.lines)

