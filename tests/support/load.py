"""A `kafkalens proxy` process and the load driven through it, for tests/proxy/test_load.py,
tests/proxy/test_failures.py, tests/proxy/test_memory_bounds.py and the long soak
(`python -m bench.proxy.soak`): `ProxyProcess` (the CLI as a user runs it, on fixed
ports so it can be restarted in place), `Figures` (what /proc and /metrics say about
it), the load loops (`ProducerLoop` records every record the broker acknowledged,
`ConsumerLoop`, `SmallRequests`, all of them at once as `Load`; `GroupLoad`, the soak's
mix with a consumer group in front of Apache Kafka) and `read_all`.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from proxy.tansu import free_port
from support import wire
from support.paths import REPO
from support.procs import memory_kib

HOST = "127.0.0.1"


@dataclass(frozen=True)
class Figures:
    """One look at the proxy process."""

    rss_mb: float  # VmRSS, MB = 10^6 bytes
    open_files: int  # entries of /proc/PID/fd
    pending: int  # the kafkalens_pending_requests gauge
    connections: int  # entries of /clients

    def line(self) -> str:
        return (
            f"rss {self.rss_mb:6.1f} MB  open files {self.open_files:5d}"
            f"  pending {self.pending:4d}  connections {self.connections:5d}"
        )


@dataclass
class ProxyProcess:
    """`kafkalens proxy` in a subprocess, from the working tree, with fixed ports."""

    work: Path
    upstream: str
    grace: float = 5.0
    port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    clients_port: int = field(default_factory=free_port)  # /clients: loopback listener
    process: subprocess.Popen[bytes] | None = None
    # put before the checkout on the process's path (a test's sitecustomize.py)
    python_path: tuple[Path, ...] = ()

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def config_text(self) -> str:
        # the request log rotates small: a long soak must not fill the disk
        log = self.work / "requests.log"
        return (
            f"listeners: [{{name: main, listen: '{self.bootstrap}', upstream: '{self.upstream}'}}]\n"
            f"metrics: {{listen: '{HOST}:{self.metrics_port}',"
            f" clients_listen: '{HOST}:{self.clients_port}'}}\n"
            f"request_log: {{path: '{log}', max_bytes: 10000000, backups: 1}}\n"
            f"limits: {{shutdown_grace_seconds: {self.grace}, max_connections_per_ip: 5000}}\n"
        )

    def start(self, timeout: float = 30.0) -> ProxyProcess:
        config = self.work / "kafkalens.yaml"
        config.write_text(self.config_text())
        # the checkout's code, whatever is installed
        path = os.pathsep.join(str(p) for p in (*self.python_path, REPO))
        env = {**os.environ, "PYTHONPATH": path}
        cmd = [sys.executable, "-m", "proxy.cli", "proxy", "--config", str(config)]
        with open(self.work / "proxy.log", "ab") as out:
            self.process = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=out)
        # The metrics endpoint opens after the listeners (proxy/runner.py); both are
        # checked, with the process alive, so that another process that happens to hold
        # one of the free ports picked cannot pass for the proxy.
        deadline = time.monotonic() + timeout
        while not (_port_open(self.port) and _port_open(self.metrics_port)) or self.process.poll() is not None:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"kafkalens proxy did not start: {self.log_tail()}")
            time.sleep(0.05)
        return self

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM (a graceful drain), then its exit code."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout)
        self.process = None
        return code

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None

    def log_tail(self, chars: int = 2000) -> str:
        path = self.work / "proxy.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def http(self, path: str) -> tuple[int, str]:
        """Status and body of GET `path` on the metrics endpoint (/clients: its own)."""
        port = self.clients_port if path.startswith("/clients") else self.metrics_port
        url = f"http://{HOST}:{port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def pending(self) -> int:
        _, text = self.http("/metrics")
        for line in text.splitlines():
            if line.startswith("kafkalens_pending_requests "):
                return int(float(line.split()[1]))
        raise AssertionError("no kafkalens_pending_requests in /metrics")

    def open_files(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def figures(self) -> Figures:
        connections = len(json.loads(self.http("/clients")[1]))
        rss = memory_kib(self.pid, "VmRSS") * 1024 / 1e6
        return Figures(round(rss, 1), self.open_files(), self.pending(), connections)

    def baseline(self) -> int:
        """Open files with no client: the least of a few looks, as the readiness probe's
        connection to the broker comes and goes every 2 s."""
        looks = []
        for _ in range(5):
            looks.append(self.open_files())
            time.sleep(0.05)
        return min(looks)

    def settle(self, open_files: int, connections: int = 0, timeout: float = 20.0) -> Figures:
        """Figures once nothing is pending, `connections` clients are connected and the open
        files are back to `open_files` (2 more per connection; closing sockets takes a
        moment), or as they are at `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            now = self.figures()
            quiet = now.pending == 0 and now.connections == connections
            if quiet and now.open_files <= open_files + 2 * connections:
                return now
            if time.monotonic() > deadline:
                return now
            time.sleep(0.2)


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


# --- load -------------------------------------------------------------------------------

LOG = logging.getLogger("librdkafka")  # librdkafka's logs, instead of stderr


def client_config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """Clients that retry quickly and for long: a broker or proxy away for a few seconds
    must cost time, not records."""
    return {
        "bootstrap.servers": bootstrap,
        "logger": LOG,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
        "socket.timeout.ms": 10000,
        "topic.metadata.refresh.interval.ms": 1000,
        **extra,
    }


def create_topic(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(client_config(bootstrap))
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(timeout)


class Loop:
    """A daemon thread running `_run` until `stop`."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=type(self).__name__)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self, timeout: float = 60.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"{type(self).__name__} did not stop"

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _run(self) -> None:
        raise NotImplementedError


class Pace:
    """`wait()` returns `rate` times a second on average (at once while behind)."""

    def __init__(self, rate: float) -> None:
        self.step = 1.0 / rate
        self.next = time.monotonic()

    def wait(self) -> None:
        # after a stall, at most a second is made up: no long burst
        self.next = max(self.next + self.step, time.monotonic() - 1.0)
        left = self.next - time.monotonic()
        if left > 0:
            time.sleep(left)


class ProducerLoop(Loop):
    """Produces `rate` records a second (acks=all), keys `<tag>-<n>`; `acks` gets (time, key)
    of every record the broker acknowledged, from librdkafka's delivery reports."""

    def __init__(self, bootstrap: str, topic: str, tag: str, rate: int = 200) -> None:
        super().__init__()
        self.bootstrap, self.topic, self.tag, self.rate = bootstrap, topic, tag, rate
        self.acks: list[tuple[float, str]] = []
        self.errors: list[str] = []
        self.sent = 0

    def acked_after(self, moment: float) -> list[str]:
        """Keys whose delivery report was served after `moment` (a little after the
        broker's answer arrived: reports wait in librdkafka until polled)."""
        return [key for at, key in list(self.acks) if at > moment]

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acks.append((time.monotonic(), bytes(msg.key() or b"").decode()))
        else:
            self.errors.append(str(err))

    def _run(self) -> None:
        # plain at-least-once producer (librdkafka's default, not idempotent): a retry may
        # duplicate a record, which is no loss; the checks are acknowledged ⊆ consumed
        # message.timeout 120 s: a broker or proxy away for a while costs time, not records
        # linger 50 ms: a few Produce requests a second, not hundreds: tansu on a shared
        # 2-core machine falls behind on many tiny ones, and its backlog is not the proxy's
        extra = {"acks": "all", "linger.ms": 50, "message.timeout.ms": 120000}
        producer = Producer(client_config(self.bootstrap, **extra))
        pace = Pace(self.rate)
        while not self.stopping:
            key = f"{self.tag}-{self.sent}"
            try:
                producer.produce(self.topic, key.encode() * 8, key, on_delivery=self._delivered)
                self.sent += 1
            except BufferError:  # the queue is full while the broker is away
                pass
            producer.poll(0)  # delivery reports
            pace.wait()
        producer.flush(60)


class ConsumerLoop(Loop):
    """Reads every partition of `topic` from the start, without a group (tansu's group joins
    wait out the rebalance timeout), counting what it gets."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__()
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.consumed = 0

    def _run(self) -> None:
        consumer = _assigned_consumer(self.bootstrap, self.topic, self.partitions)
        try:
            while not self.stopping:
                msg = consumer.poll(0.2)
                if msg is not None and not msg.error():
                    self.consumed += 1
        finally:
            consumer.close()


def _assigned_consumer(bootstrap: str, topic: str, partitions: int) -> Consumer:
    extra = {
        "group.id": f"soak-{uuid.uuid4().hex[:8]}",  # required, though no group is joined
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",  # also after a restarted broker lost the log
    }
    consumer = Consumer(client_config(bootstrap, **extra))
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    return consumer


def read_all(
    bootstrap: str,
    topic: str,
    expect: Collection[str] = (),
    quiet: float = 2.0,
    timeout: float = 60.0,
) -> list[str]:
    """The keys of the records of every partition of `topic`, read from the start until
    every key of `expect` was seen or, without `expect`, until `quiet` seconds pass with no
    record after the first (a fetch brings all there is, so a short pause means the end);
    `timeout` at most. Not up to the high watermarks: tansu's can be one short of the log's
    end. The partitions are the broker's: one that recreated the topic may have more."""
    consumer = _assigned_consumer(bootstrap, topic, 0)
    keys: list[str] = []
    todo = set(expect)
    try:
        partitions = consumer.list_topics(topic, 30).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = time.monotonic() + timeout
        last = deadline  # no quiet end before the first record
        while time.monotonic() < min(deadline, last + quiet):
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                keys.append(bytes(msg.key() or b"").decode())
                todo.discard(keys[-1])
                last = deadline if expect else time.monotonic()
                if expect and not todo:
                    break
    finally:
        consumer.close()
    return keys


class SmallRequests(Loop):
    """ApiVersions and Metadata round trips over raw sockets, `rate` a second, a new
    connection every `per_connection` requests (connection churn finds leaks)."""

    def __init__(self, host: str, port: int, topic: str, rate: int = 100) -> None:
        super().__init__()
        self.host, self.port, self.rate = host, port, rate
        self.templates = (wire.api_versions(), wire.metadata([topic]))
        self.per_connection = 100
        self.done = 0
        self.errors = 0

    def _run(self) -> None:
        while not self.stopping:
            try:
                with wire.connect(self.host, self.port) as sock:
                    self._session(sock)
            except OSError:
                self.errors += 1
                time.sleep(0.2)

    def _session(self, sock: socket.socket) -> None:
        pace = Pace(self.rate)
        for n in range(self.per_connection):
            if self.stopping:
                return
            wire.roundtrip(sock, self.templates[n % 2].frame(self.done))
            self.done += 1
            pace.wait()


@dataclass
class Load:
    """The steady mix: producers, consumers reading it all back, small requests."""

    bootstrap: str
    topic: str = "soak"
    partitions: int = 4
    loops: list[Loop] = field(default_factory=list)

    def start(self, producers: int = 2, consumers: int = 2, small: int = 3) -> Load:
        create_topic(self.bootstrap, self.topic, self.partitions)
        host, port = self.bootstrap.rsplit(":", 1)
        self.loops = [ProducerLoop(self.bootstrap, self.topic, f"p{i}") for i in range(producers)]
        self.loops += [
            ConsumerLoop(self.bootstrap, self.topic, self.partitions) for _ in range(consumers)
        ]
        self.loops += [SmallRequests(host, int(port), self.topic) for _ in range(small)]
        for loop in self.loops:
            loop.start()
        return self

    def stop(self) -> None:
        for loop in self.loops:
            loop.stop()

    def counts(self) -> dict[str, int]:
        producers = [x for x in self.loops if isinstance(x, ProducerLoop)]
        small = [x for x in self.loops if isinstance(x, SmallRequests)]
        return {
            "acked": sum(len(p.acks) for p in producers),
            "produce errors": sum(len(p.errors) for p in producers),
            "consumed": sum(x.consumed for x in self.loops if isinstance(x, ConsumerLoop)),
            "small requests": sum(s.done for s in small),
            "small errors": sum(s.errors for s in small),
        }

    def progress(self) -> str:
        return "  ".join(f"{name} {n}" for name, n in self.counts().items())


class GroupConsumerLoop(Loop):
    """A consumer in a classic group, subscribed to `topic`, as applications run one:
    Fetch, a Heartbeat and an OffsetCommit (auto commit) every second, a Metadata every
    second (`client_config`'s refresh interval)."""

    def __init__(self, bootstrap: str, topic: str, group: str, tag: str) -> None:
        super().__init__()
        self.bootstrap, self.topic, self.group, self.tag = bootstrap, topic, group, tag
        self.consumed = 0

    def _run(self) -> None:
        consumer = group_consumer(self.bootstrap, self.group, self.tag)
        consumer.subscribe([self.topic])
        try:
            while not self.stopping:
                msg = consumer.poll(0.2)
                if msg is not None and not msg.error():
                    self.consumed += 1
        finally:
            consumer.close()


def group_consumer(bootstrap: str, group: str, tag: str) -> Consumer:
    extra = {
        "group.id": group,
        "client.id": tag,
        "enable.auto.commit": True,
        "auto.commit.interval.ms": 1000,
        "heartbeat.interval.ms": 1000,
        "session.timeout.ms": 10000,
        "auto.offset.reset": "earliest",
    }
    return Consumer(client_config(bootstrap, **extra))


class GroupChurn(Loop):
    """Every `period` seconds a new consumer joins the group, reads for `stay` seconds
    and leaves: new connections, JoinGroup, SyncGroup, OffsetFetch, LeaveGroup, and a
    rebalance of the steady members each time."""

    def __init__(self, bootstrap: str, topic: str, group: str, period: float, stay: float):
        super().__init__()
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.period, self.stay = period, stay
        self.joins = 0

    def _run(self) -> None:
        while not self.stopping:
            started = time.monotonic()
            consumer = group_consumer(self.bootstrap, self.group, f"churn-{self.joins}")
            consumer.subscribe([self.topic])
            try:
                while time.monotonic() < started + self.stay and not self.stopping:
                    consumer.poll(0.2)
            finally:
                consumer.close()
            self.joins += 1
            self._stop.wait(max(0.0, started + self.period - time.monotonic()))


@dataclass
class GroupLoad(Load):
    """The soak's mix in front of Apache Kafka: producers, a consumer group reading it
    all back (Fetch, Heartbeat, OffsetCommit, Metadata), a member joining and leaving now
    and then, and small requests on connections that come and go."""

    group: str = "kafkalens-soak"

    def start(
        self, producers: int = 2, consumers: int = 2, small: int = 2, churn: float = 60.0
    ) -> GroupLoad:
        create_topic(self.bootstrap, self.topic, self.partitions)
        host, port = self.bootstrap.rsplit(":", 1)
        self.loops = [ProducerLoop(self.bootstrap, self.topic, f"p{i}") for i in range(producers)]
        self.loops += [
            GroupConsumerLoop(self.bootstrap, self.topic, self.group, f"c{i}")
            for i in range(consumers)
        ]
        if churn:
            self.loops.append(GroupChurn(self.bootstrap, self.topic, self.group, churn, churn / 3))
        self.loops += [SmallRequests(host, int(port), self.topic) for _ in range(small)]
        for loop in self.loops:
            loop.start()
        return self

    def counts(self) -> dict[str, int]:
        out = super().counts()
        out["consumed"] = sum(x.consumed for x in self.loops if isinstance(x, GroupConsumerLoop))
        out["joins"] = sum(x.joins for x in self.loops if isinstance(x, GroupChurn))
        return out
