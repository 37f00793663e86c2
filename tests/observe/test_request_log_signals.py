"""The request log of `kafkalens proxy` run as a process: SIGHUP reopens the log file
(logrotate's postrotate) and never stops the proxy, with one process and with workers;
after SIGTERM every line of a request answered before it is in the file; the logrotate
example in deploy/ run by logrotate itself against a live proxy."""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from support.hostile import ScriptedBroker, Sentinel, api_versions_v0_answer, connect
from support.paths import REPO
from support.proxy_harness import LOCAL, FakeBroker, read_frame, request_frame

from codec import ApiKey
from proxy.tansu import free_port, wait_for_port
from proxy.workers import worker_log_path

APIVERSIONS = ApiKey.API_VERSIONS


@contextmanager
def proxy_process(
    tmp_path: Path, upstream: str, *, flush: float, workers: int = 1
) -> Iterator[tuple[subprocess.Popen[bytes], int, int]]:
    """`kafkalens proxy` with its request log at tmp_path/requests.log; killed at the end
    if the test left it running."""
    # the metrics port is the kernel's pick, read from the start line: a port picked
    # here and bound later was once taken meanwhile (by a client's ephemeral port)
    port = free_port()
    config = tmp_path / "k.yaml"
    config.write_text(
        f"workers: {workers}\n"
        f"listeners: [{{name: main, listen: '{LOCAL}:{port}', upstream: '{upstream}'}}]\n"
        f"metrics: {{listen: '{LOCAL}:0'}}\n"
        f"request_log: {{path: '{tmp_path / 'requests.log'}', flush_interval_seconds: {flush}}}\n"
    )
    own_log = tmp_path / "stderr.log"  # the proxy's own log, JSON
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy.cli", "proxy", "--config", str(config), "--log-format", "json"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=open(own_log, "wb"),  # noqa: SIM115 - the child's
    )
    try:
        metrics_port = 0
        deadline = time.monotonic() + 60
        while not metrics_port and time.monotonic() < deadline and proc.poll() is None:
            for line in own_log.read_text().splitlines():
                entry = json.loads(line) if line.startswith("{") else {}
                if entry.get("msg") == "kafkalens started":
                    metrics_port = int(entry["metrics"].rsplit(":", 1)[1].split("/")[0])
            time.sleep(0.1)
        assert metrics_port, own_log.read_text()
        assert wait_for_port(LOCAL, metrics_port, 10)
        assert wait_for_port(LOCAL, port, 10)
        yield proc, port, metrics_port
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def round_trip(sock: socket.socket, corr: int, client_id: str) -> None:
    sock.sendall(request_frame(APIVERSIONS, 0, corr, client_id=client_id))
    assert read_frame(sock) == api_versions_v0_answer(corr)


def logged(paths: list[Path], client_id: str) -> list[int]:
    """Correlation ids of `client_id`'s request lines in `paths` (whole lines only)."""
    found = []
    for path in paths:
        if not path.exists():
            continue
        data = path.read_bytes()
        assert not data or data.endswith(b"\n"), f"{path}: a line written in part"
        for raw in data.splitlines():
            line = json.loads(raw)
            if line["event"] == "request" and line.get("client_id") == client_id:
                found.append(line["correlation_id"])
    return sorted(found)


def eventually(check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


def longest_wait(sentinel: Sentinel) -> float:
    times = [*sentinel.times, time.monotonic()]
    return max(b - a for a, b in zip(times, times[1:], strict=False))


@pytest.mark.slow
def test_sighup_reopens_the_log_and_the_proxy_goes_on(tmp_path: Path) -> None:
    log, rotated = tmp_path / "requests.log", tmp_path / "requests.log.1"
    with (
        FakeBroker(ScriptedBroker()) as broker,
        proxy_process(tmp_path, broker.address, flush=0.2) as (proc, port, _),
        Sentinel(port) as sentinel,
    ):
        sock = connect(port)
        for corr in range(1, 6):
            round_trip(sock, corr, "before")
        log.rename(rotated)  # logrotate's rotation, then its postrotate:
        proc.send_signal(signal.SIGHUP)
        assert eventually(log.exists, timeout=5)  # reopened: created at the path
        later = connect(port)  # a line's client_id is its connection's
        for corr in range(6, 11):
            round_trip(later, corr, "after")
        assert eventually(lambda: logged([log], "after") == [6, 7, 8, 9, 10], timeout=3)
        assert logged([rotated], "before") == [1, 2, 3, 4, 5]
        assert logged([log], "before") == [] and logged([rotated], "after") == []
        for _ in range(3):  # again and again: every SIGHUP is handled, none is fatal
            proc.send_signal(signal.SIGHUP)
            assert sentinel.wait_for_more(5)
        assert proc.poll() is None
        sentinel.healthy()
        assert longest_wait(sentinel) < 1.0
        sock.close()
        later.close()
    stderr = (tmp_path / "stderr.log").read_text()
    assert stderr.count("SIGHUP: reopening the request log") == 4 and "Traceback" not in stderr


def test_after_sigterm_every_answered_request_is_in_the_log(tmp_path: Path) -> None:
    log = tmp_path / "requests.log"
    with (
        FakeBroker(ScriptedBroker()) as broker,
        proxy_process(tmp_path, broker.address, flush=600) as (proc, port, _),
    ):
        socks = [connect(port) for _ in range(3)]
        for corr in range(30):
            round_trip(socks[corr % 3], corr, "answered")
        assert logged([log], "answered") == []  # still queued: a flush is 10 minutes away
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        assert logged([log], "answered") == list(range(30))
        for sock in socks:
            sock.close()


@pytest.mark.slow
def test_sighup_reaches_every_worker(tmp_path: Path) -> None:
    logs = [tmp_path / "requests-w0.log", tmp_path / "requests-w1.log"]
    with (
        FakeBroker(ScriptedBroker()) as broker,
        proxy_process(tmp_path, broker.address, flush=0.2, workers=2) as (proc, port, metrics),
    ):
        workers = children_of(proc.pid)
        assert len(workers) == 2

        def one_each(client_id: str, count: int) -> None:
            for corr in range(count):  # new connections: SO_REUSEPORT spreads them
                with connect(port) as sock:
                    round_trip(sock, corr, client_id)

        one_each("before", 40)
        assert eventually(lambda: all(logged([p], "before") for p in logs), timeout=3)
        rotated = [p.with_name(p.name + ".1") for p in logs]
        for path, old in zip(logs, rotated, strict=True):
            path.rename(old)
        proc.send_signal(signal.SIGHUP)
        assert eventually(lambda: all(p.exists() for p in logs), timeout=5)  # each reopened
        one_each("after", 40)
        assert eventually(lambda: logged(logs, "after") == list(range(40)), timeout=3)
        assert logged(rotated, "before") == list(range(40))
        assert proc.poll() is None and children_of(proc.pid) == workers  # none restarted
        text = http_get(metrics, "/metrics")
        assert "kafkalens_request_log_errors_total 0.0" in text
        assert 'kafkalens_request_log_dropped_lines_total{reason="write_failed"} 0.0' in text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0


def children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return sorted(found)


def http_get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://{LOCAL}:{port}{path}", timeout=5) as response:
        return str(response.read().decode())


LOGROTATE_EXAMPLE = REPO / "deploy" / "logrotate" / "kafkalens"
POSTROTATE = "pkill -HUP -o -f '[k]afkalens proxy' || true"


def test_the_logrotate_example_renames_and_signals_and_takes_the_worker_files() -> None:
    text = LOGROTATE_EXAMPLE.read_text()
    rules = [line.split("#")[0].strip() for line in text.splitlines()]
    assert "copytruncate" not in rules and POSTROTATE in rules
    pattern = next(rule for rule in rules if rule.endswith("{")).removesuffix("{").strip()
    default = "/var/log/kafkalens/requests.log"
    assert Path(pattern).parent == Path(default).parent
    names = [default, worker_log_path(default, 0), worker_log_path(default, 1)]
    assert all(fnmatch.fnmatch(name, pattern) for name in names)
    assert not fnmatch.fnmatch(default + ".1", pattern)  # never a rotated file again


def test_the_logrotate_example_rotates_a_running_proxy(tmp_path: Path) -> None:
    logrotate = shutil.which("logrotate")
    if logrotate is None:
        pytest.skip("logrotate is not installed")
    log = tmp_path / "requests.log"
    with (
        FakeBroker(ScriptedBroker()) as broker,
        proxy_process(tmp_path, broker.address, flush=0.2) as (proc, port, _),
        Sentinel(port) as sentinel,
    ):
        # Our own proxy's pid rather than pkill's pattern: other kafkalens processes
        # may be running on this machine.
        config = tmp_path / "logrotate.conf"
        text = LOGROTATE_EXAMPLE.read_text().replace("/var/log/kafkalens/", f"{tmp_path}/")
        config.write_text(text.replace(POSTROTATE, f"kill -HUP {proc.pid}"))
        with connect(port) as sock:
            for corr in range(5):
                round_trip(sock, corr, "before")
        assert eventually(lambda: logged([log], "before") == list(range(5)), timeout=3)
        done = subprocess.run(
            [logrotate, "--force", "--state", str(tmp_path / "state"), str(config)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert eventually(log.exists, timeout=5)
        with connect(port) as sock:
            for corr in range(5, 10):
                round_trip(sock, corr, "after")
        assert eventually(lambda: logged([log], "after") == list(range(5, 10)), timeout=3)
        assert logged([tmp_path / "requests.log.1"], "before") == list(range(5))
        assert proc.poll() is None
        sentinel.healthy()
        assert longest_wait(sentinel) < 1.0
