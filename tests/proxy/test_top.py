"""`kafkalens top` and the /top endpoint it reads.

The view is driven as a user drives it, in tmux (send-keys, capture-pane), against a
live `kafkalens demo` with real kafka-python traffic: what the screen shows is checked
against the proxy's own /metrics, /clients and the traffic the test sent (Produce
requests, records left unread by a group). /top's rates and quantiles are checked
against independent arithmetic (PromQL's histogram_quantile, counts over time).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.needs import needs
from support.paths import REPO

from proxy.admin.top import MAX_ROWS, BadQuery, Query, TopView, cut, quantile
from proxy.tansu import free_port

# --- /top's arithmetic -------------------------------------------------------------------


def test_quantile_is_promqls_histogram_quantile() -> None:
    # 10 observations in (0, 1], 10 in (1, 2], none above: the median is 1.0, p99 1.98.
    buckets = [(1.0, 10.0), (2.0, 20.0), (float("inf"), 20.0)]
    assert quantile(0.5, buckets) == pytest.approx(1.0)
    assert quantile(0.99, buckets) == pytest.approx(1.0 + (19.8 - 10) / 10)
    assert quantile(0.25, buckets) == pytest.approx(0.5)  # from 0 to the first bound
    assert quantile(0.99, [(1.0, 1.0), (float("inf"), 10.0)]) == 1.0  # +Inf: the last bound
    assert quantile(0.5, [(1.0, 0.0), (float("inf"), 0.0)]) is None


def samples(requests: float, buckets: dict[float, float], errors: float = 0.0) -> list[tuple[str, dict[str, str], float]]:
    out = [("kafkalens_requests_total", {"api": "Produce", "api_version": "9"}, requests)]
    cumulative = 0.0
    # Every bucket, as the proxy exposes them (counts per bucket here, cumulated below).
    buckets = {bound: buckets.get(bound, 0.0) for bound in (0.001, 0.01, 0.025, float("inf"))}
    for bound, count in sorted(buckets.items()):
        cumulative += count
        le = "+Inf" if bound == float("inf") else str(bound)
        out.append(("kafkalens_request_duration_seconds_bucket", {"api": "Produce", "le": le}, cumulative))
    if errors:
        out.append(("kafkalens_request_errors_total", {"api": "Produce", "error": "NOT_LEADER_OR_FOLLOWER"}, errors))
    out.append(("kafkalens_consumer_topic_lag_records", {"group": "g", "topic": "a"}, 5.0))
    out.append(("kafkalens_consumer_topic_lag_records", {"group": "g", "topic": "b"}, 7.0))
    return out


def conn(conn_id: str, client_id: str, requests: int, nbytes: int) -> dict[str, Any]:
    return {"conn_id": conn_id, "client": "10.0.0.1:5000", "requests": requests, "bytes_in": nbytes,
            "bytes_out": 0, "in_flight": 0, "identity": {"client_id": client_id}}  # fmt: skip


def test_rates_are_over_the_interval_and_quantiles_over_its_observations() -> None:
    view = TopView()
    first = view.update(samples(100, {0.001: 100, float("inf"): 0}), [conn("c1", "a", 100, 1000)], now=10.0)
    assert first["interval_seconds"] is None and first["apis"][0]["requests_per_second"] is None
    # 2 s later: 40 more requests, all answered between 10 and 25 ms, 4 of them errors;
    # a second connection of client "a" opened meanwhile, and client "b".
    second = view.update(
        samples(140, {0.001: 100, 0.01: 0, 0.025: 40, float("inf"): 0}, errors=4),
        [conn("c1", "a", 120, 3000), conn("c2", "a", 10, 500), conn("c3", "b", 10, 10)],
        now=12.0,
    )
    (api,) = second["apis"]
    assert second["interval_seconds"] == 2.0
    assert api["requests_per_second"] == 20.0 and api["errors_per_second"] == 2.0
    assert api["error_ratio"] == pytest.approx(4 / 40)
    assert api["p50_ms"] == pytest.approx(10 + 15 * 0.5)  # within (10, 25] ms, none older counted
    assert api["top_error"] == "NOT_LEADER_OR_FOLLOWER"
    clients = {c["client_id"]: c for c in second["clients"]}
    assert clients["a"]["connections"] == 2 and clients["a"]["requests_total"] == 130
    assert clients["a"]["requests_per_second"] == (20 + 10) / 2  # c2 is new: all of it
    assert clients["a"]["bytes_per_second"] == (2000 + 500) / 2
    assert second["groups"] == [{"group": "g", "lag": 12.0, "topics": 2, "max_topic": "b", "max_topic_lag": 7.0}]


def test_answers_are_bounded_and_sorted_as_asked() -> None:
    view = TopView()
    connections = [conn(f"c{i}", f"client-{i}" + "x" * 300, i, 10 * (500 - i)) for i in range(500)]
    view.update([], connections, now=0.0)
    full = view.update([], [{**c, "requests": c["requests"] * 2} for c in connections], now=1.0)
    by_requests = cut(full, Query(sort="requests", limit=MAX_ROWS))
    assert len(by_requests["clients"]) == MAX_ROWS and by_requests["clients_count"] == 500
    assert by_requests["clients"][0]["client_id"].startswith("client-499")
    assert len(by_requests["clients"][0]["client_id"]) == 128  # cut, marked with …
    by_bytes = cut(full, Query(sort="total_bytes", limit=3))
    assert [c["bytes_in_total"] for c in by_bytes["clients"]] == [5000, 4990, 4980]
    assert len(json.dumps(by_requests)) < 200_000


@pytest.mark.parametrize(
    ("query", "message"),
    [("sort=fastest", "sort: one of"), ("limit=0", "limit: a whole number"), ("limit=9999", "limit"),
     ("limit=x", "limit"), ("api_sort=zzz", "api_sort: one of"), ("order=1", "unknown parameter 'order'")],
)  # fmt: skip
def test_a_bad_query_is_refused_with_what_is_allowed(query: str, message: str) -> None:
    with pytest.raises(BadQuery, match=message):
        Query.parse(query)
    assert Query.parse("sort=bytes&api_sort=p99&limit=5") == Query("bytes", "p99", 5)


# --- a live demo, and top in tmux --------------------------------------------------------


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def metric_sum(metrics_url: str, name: str, **labels: str) -> float:
    """The sum of a metric's samples matching `labels`, from the proxy's /metrics."""
    total = 0.0
    for line in get(metrics_url)[1].decode().splitlines():
        found = re.match(r"^(\w+)(?:\{(.*)\})? (\S+)$", line)
        if not found or found.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', found.group(2) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(found.group(3))
    return total


class Demo:
    def __init__(self, tmp_path: Path) -> None:
        self.port, self.metrics_port = free_port(), free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "proxy.cli", "demo", "--port", str(self.port),
             "--metrics-port", str(self.metrics_port), "--log", str(tmp_path / "log" / "requests.log")],
            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        text, deadline = "", time.monotonic() + 60
        while "Ctrl-C" not in text and time.monotonic() < deadline:
            text += self.proc.stdout.readline()
            assert self.proc.poll() is None, text
        clients = re.search(r"clients: +http://([\d.]+:\d+)/clients", text)
        assert clients, text
        self.admin = clients.group(1)  # the loopback clients_listen: /top without a token
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        finally:
            self.proc.kill()
            self.proc.communicate()


@pytest.fixture(scope="module")
@needs("broker")  # `kafkalens demo` starts its tansu broker
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    running = Demo(tmp_path_factory.mktemp("top-demo"))
    try:
        yield running
    finally:
        running.stop()


class Tmux:
    """A tmux server of the test's own, one window of `width` x `height`."""

    def __init__(self, width: int = 200, height: int = 60) -> None:
        if shutil.which("tmux") is None:
            if os.environ.get("KAFKALENS_REQUIRE_PEERS") == "1":
                pytest.fail("KAFKALENS_REQUIRE_PEERS=1 but tmux is not installed (.ci/run installs it)")
            pytest.skip("tmux not installed")
        self.socket = f"kafkalens-top-{uuid.uuid4().hex[:8]}"
        self.width, self.height = width, height

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=True).stdout

    def start(self, command: str) -> None:
        # The pane's own size, not one a parent process exported (pytest sets COLUMNS);
        # the command's exit status (130: killed by SIGINT) written where the test reads it
        # (by bash, which outlives a Ctrl-C its child handled: dash would die of it).
        self.status_file = Path(f"/tmp/{self.socket}.status")
        self.stderr_file = Path(f"/tmp/{self.socket}.stderr")
        shell = (f"cd {REPO} && unset COLUMNS LINES && PYTHONPATH={REPO} {command} 2> {self.stderr_file};"
                 f" echo $? > {self.status_file}")  # fmt: skip
        self.tmux("-f", "/dev/null", "new-session", "-d", "-x", str(self.width), "-y", str(self.height), "bash", "-c", shell)

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", *keys)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p")

    def wait_for(self, what: str, timeout: float = 20) -> str:
        deadline, screen = time.monotonic() + timeout, ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if re.search(what, screen):
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{what!r} not on the screen within {timeout} s:\n{screen}")

    def exit_status(self, timeout: float = 10) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.status_file.exists() and self.status_file.read_text().strip():
                return int(self.status_file.read_text())
            time.sleep(0.1)
        raise AssertionError(f"top still running:\n{self.screen()}")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, check=False)
        if hasattr(self, "status_file"):
            self.status_file.unlink(missing_ok=True)
            self.stderr_file.unlink(missing_ok=True)


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    session = Tmux()
    try:
        yield session
    finally:
        session.close()


def row(screen: str, first: str) -> list[str]:
    """The cells of the screen's table row that starts with `first`."""
    for line in screen.splitlines():
        cells = line.split()
        if cells and cells[0] == first:
            return cells
    raise AssertionError(f"no row {first!r} on the screen:\n{screen}")


def number(cell: str) -> float:
    return float(cell.replace(",", ""))


def test_top_shows_what_the_proxy_counted_as_a_user_sees_it(demo: Demo, tmux: Tmux) -> None:
    from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition

    topic, group = f"top-{uuid.uuid4().hex[:6]}", f"top-readers-{uuid.uuid4().hex[:4]}"
    sent, unread = 40, 7
    producer = KafkaProducer(bootstrap_servers=demo.bootstrap, client_id="top-writer", linger_ms=0)
    produced_before = metric_sum(demo.metrics_url, "kafkalens_requests_total", api="Produce")
    for i in range(sent):  # one Produce request each: sent, then waited for
        producer.send(topic, b"record %d" % i, partition=0).get(30)
    # A reader in a group (assigned, so no rebalance wait) reads everything and commits...
    consumer = KafkaConsumer(bootstrap_servers=demo.bootstrap, group_id=group, client_id="top-reader",
                             enable_auto_commit=False, auto_offset_reset="earliest")  # fmt: skip
    partition = TopicPartition(topic, 0)
    consumer.assign([partition])
    # A commit first: the proxy learns the group of this client before its Fetches.
    consumer.commit({partition: OffsetAndMetadata(0, "", -1)})
    got = 0
    deadline = time.monotonic() + 30
    while got < sent and time.monotonic() < deadline:
        got += sum(len(batch) for batch in consumer.poll(timeout_ms=500).values())
    assert got == sent
    consumer.commit()
    consumer.close()
    # ... then `unread` more records arrive that it never reads: its lag.
    for i in range(unread):
        producer.send(topic, b"late %d" % i, partition=0).get(30)

    tmux.start(f"{sys.executable} -m proxy.cli top {demo.admin} --interval 1")
    tmux.wait_for(r"clients by requests/s")
    time.sleep(2.5)  # two refreshes with no traffic: the rates are 0
    screen = tmux.wait_for(rf"\n *{group} ")
    produce = row(screen, "Produce")
    produce_requests = metric_sum(demo.metrics_url, "kafkalens_requests_total", api="Produce")
    assert produce_requests - produced_before == sent + unread  # the proxy counted what was sent
    assert number(produce[-2]) == produce_requests  # ... and top shows the proxy's count
    assert produce[1] == "0.0", produce  # nothing produced in the last second
    errors = metric_sum(demo.metrics_url, "kafkalens_request_errors_total", api="Produce")
    assert number(produce[-1]) == errors
    lag = metric_sum(demo.metrics_url, "kafkalens_consumer_topic_lag_records", group=group)
    assert lag == unread
    assert number(row(screen, group)[1]) == unread
    assert row(screen, group)[3] == topic
    # The writer's row: its requests as the proxy's own /clients counts them.
    status, body = get(f"http://{demo.admin}/clients")
    assert status == 200
    mine = [c for c in json.loads(body) if (c.get("identity") or {}).get("client_id") == "top-writer"]
    writer = row(screen, "top-writer")
    # ... requests, bytes/s, bytes in, bytes out (two cells each, "1.2 KiB") from the end
    assert number(writer[-5]) == sum(c["requests"] for c in mine)  # requests, as /clients has them
    assert number(writer[-9]) == len(mine)  # connections
    header = screen.splitlines()[1]
    connections = metric_sum(demo.metrics_url, "kafkalens_connections")
    assert f"connections {int(connections)} " in header

    # While records flow, Produce leads the apis by requests/s and its rate is not 0.
    stop = time.monotonic() + 4
    while time.monotonic() < stop:
        producer.send(topic, b"busy", partition=0).get(30)
    screen = tmux.screen()
    apis = screen[screen.index("apis by requests/s"):].splitlines()
    first = apis[[i for i, line in enumerate(apis) if line.strip().startswith("─")][0] + 1].split()
    assert first[0] == "Produce" and number(first[1]) > 0, screen
    producer.close()

    # Keys: s and a change the order (and say so), q quits with status 0.
    tmux.keys("s")
    tmux.wait_for(r"clients by bytes/s")
    tmux.keys("a")
    tmux.wait_for(r"apis by errors/s")
    tmux.keys("q")
    assert tmux.exit_status() == 0
    assert tmux.stderr_file.read_text() == ""


def test_ctrl_c_ends_top_cleanly(demo: Demo, tmux: Tmux) -> None:
    tmux.start(f"{sys.executable} -m proxy.cli top {demo.admin}")
    tmux.wait_for(r"clients by requests/s")
    tmux.keys("C-c")
    assert tmux.exit_status() == 0
    assert tmux.stderr_file.read_text() == ""  # no traceback, nothing left to say


def test_a_wrong_address_is_one_line_and_exit_2(demo: Demo) -> None:
    def top(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "proxy.cli", "top", *args], capture_output=True, text=True,
                              timeout=30, env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip

    closed = free_port()
    for args, says in (
        ([f"127.0.0.1:{closed}"], f"cannot read http://127.0.0.1:{closed}/top: Connection refused"),
        # The open metrics port serves no client data without the token:
        ([f"127.0.0.1:{demo.metrics_port}"], "HTTP 404: /clients is off"),
        (["ftp://x"], "ftp://x: not host:port or an http(s):// URL"),
        ([demo.admin, "--token-file", "/nonexistent/token"], "--token-file: No such file or directory"),
        ([demo.admin, "--interval", "0"], "--interval: from 0.1 to 3600 seconds"),
        ([demo.admin, "--sort", "fastest"], "invalid choice: 'fastest'"),
    ):
        done = top(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert done.stderr.count("\n") == 1 and says in done.stderr, (args, done.stderr)
        assert done.stdout == ""


def test_once_prints_a_view_for_pipes(demo: Demo) -> None:
    done = subprocess.run([sys.executable, "-m", "proxy.cli", "top", demo.admin, "--once", "--interval", "0.5"],
                          capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "160"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "clients by requests/s" in done.stdout and "apis by requests/s" in done.stdout
    assert "\x1b[?1049h" not in done.stdout  # no alternate screen in a pipe


def test_top_is_behind_the_clients_access_rule(demo: Demo) -> None:
    status, body = get(f"http://127.0.0.1:{demo.metrics_port}/top")
    assert status == 404 and b"/clients is off" in body
    status, body = get(f"http://{demo.admin}/top?limit=1&sort=bytes")
    view = json.loads(body)
    assert status == 200 and len(view["clients"]) <= 1 and view["sort"] == "bytes"
    status, body = get(f"http://{demo.admin}/top?limit=0")
    assert status == 400 and body == b"/top: limit: a whole number from 1 to 200\n"
