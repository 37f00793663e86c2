"""The admin port as an operator's tools meet it: /livez for Kubernetes, process_* and
python_info for Prometheus (checked against the kernel's own figures in /proc, one
series per process with `workers: N`), /clients named as the request log names things."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from support.cli import children_of, http_get, http_status
from support.own_log import own_log
from support.proxy_harness import (
    LOCAL,
    FakeBroker,
    api_versions_v0,
    read_frame,
    request_frame,
    write_frame,
)

from codec import ApiKey
from proxy.tansu import free_port


def proc_status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise LookupError(field)


def soft_open_files(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise LookupError("Max open files")


def samples(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = http_get(port, "/metrics")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def answer(sock: socket.socket) -> None:
    while True:
        write_frame(sock, read_frame(sock)[4:8] + b"ok")


def test_livez_process_metrics_and_clients_of_one_process(tmp_path: Path) -> None:
    with FakeBroker(answer) as broker:
        port = free_port()
        config = tmp_path / "k.yaml"
        config.write_text(
            f"listeners: [{{name: main, listen: '{LOCAL}:{port}', upstream: '{broker.address}'}}]\n"
            f"metrics: {{listen: '{LOCAL}:0', clients_listen: '{LOCAL}:0'}}\n"
            f"request_log: {{path: '{tmp_path / 'requests.log'}'}}\n"
        )
        with own_log(config) as proxy:
            [started] = proxy.wait_message("kafkalens started")
            metrics_port = int(started["metrics"].split(":")[2].split("/")[0])
            clients_port = int(started["clients"].split(":")[2].split("/")[0])
            assert (http_status(metrics_port, "/livez"), http_get(metrics_port, "/livez")) == (200, "ok\n")
            assert http_status(metrics_port, "/healthz") == 200
            pid = proxy.proc.pid
            got = samples(metrics_port)
            rss = got[("process_resident_memory_bytes", frozenset())]
            assert abs(rss - proc_status(pid, "VmRSS")) < 0.2 * rss
            assert abs(got[("process_open_fds", frozenset())] - len(os.listdir(f"/proc/{pid}/fd"))) < 5
            assert got[("process_max_fds", frozenset())] == soft_open_files(pid)
            assert 0 < got[("process_cpu_seconds_total", frozenset())] < 60
            assert abs(got[("process_start_time_seconds", frozenset())] - time.time()) < 60
            assert [labels for (name, labels) in got if name == "python_info"]
            assert got[("kafkalens_build_info", frozenset({("version", version("kafkalens"))}))] == 1

            before = time.time()
            client = socket.create_connection((LOCAL, port), timeout=5)
            client.sendall(api_versions_v0(1))
            read_frame(client)
            [conn] = json.loads(http_get(clients_port, "/clients"))
            host, cport = client.getsockname()
            # the request log's names: its connection lines are the oracle
            log = tmp_path / "requests.log"
            deadline = time.monotonic() + 5  # written within request_log.flush_interval_seconds
            while '"request"' not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.1)
            [request] = [line for line in map(json.loads, log.read_text().splitlines())
                         if line["event"] == "request"]  # fmt: skip
            for field in ("conn", "client_address", "client_id", "client_software_name"):
                assert conn[field] == request[field], field
            assert conn["client_address"] == f"{host}:{cport}" and conn["client_id"] == "t"
            opened = datetime.strptime(conn["opened"], "%Y-%m-%dT%H:%M:%S.%f%z")
            assert opened.tzinfo == UTC and before - 1 <= opened.timestamp() <= time.time()
            assert 0 <= conn["duration_s"] < 10
            # the names of the release before, kept one more
            assert conn["conn_id"] == conn["conn"] and conn["client"] == conn["client_address"]
            assert conn["opened_at"] == opened.timestamp() or abs(conn["opened_at"] - opened.timestamp()) < 1e-5
            assert conn["identity"]["client_id"] == "t"
            client.close()
            proxy.stop()


def test_with_workers_each_process_has_its_own_series(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "k.yaml"
    config.write_text(
        f"workers: 2\nlisteners: [{{name: main, listen: '{LOCAL}:{port}', upstream: '{LOCAL}:1'}}]\n"
        f"metrics: {{listen: '{LOCAL}:0'}}\nrequest_log: {{path: '{tmp_path / 'r.log'}'}}\n"
    )
    with own_log(config) as proxy:
        [started] = proxy.wait_message("kafkalens started", timeout=60)
        metrics_port = int(started["metrics"].split(":")[2].split("/")[0])
        assert http_status(metrics_port, "/livez") == 200
        workers = {
            Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode().rsplit(" ", 1)[1]: pid
            for pid in children_of(proxy.proc.pid)
        }
        pids = {"parent": proxy.proc.pid, **workers}
        assert sorted(pids) == ["0", "1", "parent"]
        got = samples(metrics_port)
        for worker, pid in pids.items():
            rss = got[("process_resident_memory_bytes", frozenset({("worker", worker)}))]
            assert abs(rss - proc_status(pid, "VmRSS")) < 0.2 * rss, worker
            start = got[("process_start_time_seconds", frozenset({("worker", worker)}))]
            assert abs(start - time.time()) < 120
        assert ("process_resident_memory_bytes", frozenset()) not in got  # one series a process
        assert [labels for (name, labels) in got if name == "python_info"]
        proxy.stop()


def test_top_of_a_proxy_with_workers_counts_every_workers_requests(tmp_path: Path) -> None:
    """With `workers: 2`, /top is the whole proxy's: the api totals and the clients are the
    sums over the workers, as the clients that sent the requests count them. (The kernel
    spreads the 8 connections over both workers' SO_REUSEPORT listeners; all on one, a
    1-in-128 chance, still has to give the same sums.)"""
    sent = {f"w{n}": n + 1 for n in range(8)}  # client id -> requests it sends
    with FakeBroker(answer) as broker:
        port = free_port()
        config = tmp_path / "k.yaml"
        config.write_text(
            f"workers: 2\nlisteners: [{{name: main, listen: '{LOCAL}:{port}', upstream: '{broker.address}'}}]\n"
            f"metrics: {{listen: '{LOCAL}:0', clients_listen: '{LOCAL}:0'}}\n"
            f"request_log: {{path: '{tmp_path / 'requests.log'}'}}\n"
        )
        with own_log(config) as proxy:
            [started] = proxy.wait_message("kafkalens started", timeout=60)
            clients_port = int(started["clients"].split(":")[2].split("/")[0])
            socks = []
            for client_id, count in sent.items():
                sock = socket.create_connection((LOCAL, port), timeout=5)
                socks.append(sock)
                for corr in range(count):
                    sock.sendall(request_frame(ApiKey.API_VERSIONS, 0, corr, client_id=client_id))
                    read_frame(sock)
            # each worker writes its connections every second: /top sees them all within a few
            deadline = time.monotonic() + 10
            while True:
                top = json.loads(http_get(clients_port, "/top?limit=50"))
                clients = {c["client_id"]: c for c in top["clients"]}
                if set(clients) == set(sent) or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            pids = {
                Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode().rsplit(" ", 1)[1]: pid
                for pid in children_of(proxy.proc.pid)
            }
            assert sorted(pids) == ["0", "1"]
            assert {c: clients[c]["requests_total"] for c in clients} == sent
            assert top["connections"] == len(sent)
            [api] = [row for row in top["apis"] if row["api"] == "ApiVersions"]
            assert api["requests_total"] == top["requests_total"] == sum(sent.values())
            for sock in socks:
                sock.close()
            proxy.stop()


def test_workers_stop_when_their_parent_is_killed(tmp_path: Path) -> None:
    """SIGKILL (or the OOM killer) to the parent: its workers do not serve on unsupervised;
    they stop, and their port is free again."""
    port = free_port()
    config = tmp_path / "k.yaml"
    config.write_text(
        f"workers: 2\nlisteners: [{{name: main, listen: '{LOCAL}:{port}', upstream: '{LOCAL}:1'}}]\n"
        f"metrics: {{listen: '{LOCAL}:0'}}\nrequest_log: {{path: '{tmp_path / 'r.log'}'}}\n"
    )
    with own_log(config) as proxy:
        proxy.wait_message("kafkalens started", timeout=60)
        workers = children_of(proxy.proc.pid)
        assert len(workers) == 2
        proxy.proc.kill()
        proxy.proc.wait()

        def running(pid: int) -> bool:  # gone, or a zombie nobody reaped: not running
            with contextlib.suppress(OSError):
                return b"zombie" not in Path(f"/proc/{pid}/status").read_bytes().lower()
            return False

        deadline = time.monotonic() + 15
        while any(map(running, workers)) and time.monotonic() < deadline:
            time.sleep(0.1)
        alive = [pid for pid in workers if running(pid)]
        for pid in alive:  # leave nothing behind, whatever the verdict
            os.kill(pid, 9)
        assert alive == [], "workers outlived their killed parent"
        with socket.socket() as probe:
            assert probe.connect_ex((LOCAL, port)) != 0  # nobody listens there any more
