"""Clients kept running while Apache Kafka brokers fail, the faults, and what is checked
afterwards (tests/interop/test_kafka_faults.py, and its long run: bench/proxy/kafka_faults.py).

Producers (acks=all) note every record the broker acknowledged: its id (the key), the
partition and offset it got and a checksum of its value (the first 16 hex digits of its
SHA-256, computed where the value was made). Consumers note every record they got, with
the checksum of the value as it arrived. librdkafka's clients run in threads here; the
Java ones are tests/peers/java/faults/Load.java in a JVM each. Every client reports the
requests it sent, by its own account, to hold the request log against: librdkafka's
protocol debug log names each request it wrote whole ("Sent MetadataRequest (v12, ...,
CorrId 5)"); the Java client counts them (`request-total`). (librdkafka's statistics
count per broker, and forget a broker's counts when a metadata answer no longer lists it:
measured, 47 Produce requests of 150 sent.)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import random
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from codec.schema import api_names
from proxy.apache_kafka import KafkaCluster
from proxy.tansu import free_port
from support.gateway import gateway_config
from support.java import start_java
from support.observed import ObservedProxy
from support.proxy_harness import LOCAL

LOG = logging.getLogger("librdkafka")
# librdkafka's names of apis where they differ from Kafka's (and kafkalens's).
_RDKAFKA_API_NAMES = {"ApiVersion": "ApiVersions", "Offset": "ListOffsets"}
# librdkafka's debug line for a request written whole to its socket, after the broker
# it went to ("127.0.0.1:9092/1: Sent MetadataRequest (v12, 46 bytes @ 0, CorrId 2)").
_SENT = re.compile(r"\S+:(\d+)/\S+: Sent (\w+)Request \(v(\d+), \d+ bytes @ \d+, CorrId (\d+)\)")


def checksum(value: bytes) -> str:
    return hashlib.sha256(value).hexdigest()[:16]


@dataclass(frozen=True)
class Seen:
    """A record as a producer's acknowledgement or a consumer's fetch gave it."""

    key: str
    partition: int
    offset: int
    sha: str


@dataclass
class Client:
    """What every client of a fault test keeps."""

    name: str
    client_id: str
    acked: list[Seen] = field(default_factory=list)
    consumed: list[Seen] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # The requests the client says it sent, and where: (where, api, version, correlation
    # id) each, where "port:P" is the port it sent it to (librdkafka); or how many to
    # each broker, under ("node:N", "*", 0, 0) (the Java client; N < 0: a bootstrap one).
    requests: Counter[tuple[str, str, int, int]] = field(default_factory=Counter)
    # librdkafka's: when each was logged, served a moment after it was written (epoch s)
    sent_at: dict[tuple[str, str, int, int], list[float]] = field(default_factory=dict)
    # Whether that account is whole (a producer's, after its flush): then the request
    # log must have exactly those lines, else at least those.
    exact: bool = False


class SentRequests(logging.Handler):
    """A librdkafka client's log (`debug: protocol`): each request it sent is counted
    into its Client; what is not debug goes on to the `librdkafka` logger."""

    def __init__(self, client: Client) -> None:
        super().__init__(logging.DEBUG)
        self.client = client
        self.known = set(api_names().values())
        self.logger = logging.getLogger(f"librdkafka.{client.client_id}")
        self.logger.setLevel(logging.DEBUG)
        self.logger.propagate = False
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno > logging.DEBUG:
            LOG.handle(record)
            return
        sent = _SENT.search(record.getMessage())
        if sent is None:
            return
        port, name, version, corr = sent.groups()
        api = _RDKAFKA_API_NAMES.get(name, name)
        if api not in self.known:
            self.client.errors.append(f"librdkafka sent an api kafkalens does not know: {name}")
        key = (f"port:{port}", api, int(version), int(corr))
        self.client.requests[key] += 1
        self.client.sent_at.setdefault(key, []).append(record.created)


def _common(bootstrap: str, client: Client, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "client.id": client.client_id,
        "logger": SentRequests(client).logger,
        "debug": "protocol",
        **extra,
    }


class RdkafkaProducer(threading.Thread):
    """librdkafka (confluent-kafka), acks=all, idempotent or not, `rate` records a second."""

    def __init__(
        self, bootstrap: str, topic: str, client: Client, rate: int, idempotent: bool
    ) -> None:
        super().__init__(daemon=True)
        self.client, self.topic, self.rate = client, topic, rate
        settings = {
            "acks": "all",
            "enable.idempotence": idempotent,
            "linger.ms": 20,
            "message.timeout.ms": 180_000,
        }
        self.producer = Producer(_common(bootstrap, client, **settings))
        self.stopping = threading.Event()
        self.random = random.Random(client.client_id)
        self.sent = 0

    def run(self) -> None:
        pause = 1.0 / self.rate
        while not self.stopping.is_set():
            key = f"{self.client.name}-{self.sent}"
            value = self.random.randbytes(self.random.randint(100, 1000))
            sha = checksum(value)
            try:
                self.producer.produce(self.topic, value, key, on_delivery=self._delivered(key, sha))
                self.sent += 1
            except BufferError:  # the queue is full while a broker is away
                pass
            self.producer.poll(0)
            self.stopping.wait(pause)

    def _delivered(self, key: str, sha: str) -> Any:
        def report(err: Any, msg: Any) -> None:
            if err is None:
                self.client.acked.append(Seen(key, msg.partition(), msg.offset(), sha))
            else:
                self.client.errors.append(f"{key}: {err}")

        return report

    def stop(self) -> None:
        """Stops producing and waits for every record's report; the log of what it sent
        is served meanwhile, whole (nothing is sent after a flush)."""
        self.stopping.set()
        self.join(30)
        left = self.producer.flush(120)
        assert left == 0, f"{self.client.name}: {left} records never reported"
        self.client.exact = True
        del self.producer  # librdkafka's destroy: the connections close


class RdkafkaConsumer(threading.Thread):
    """librdkafka in a consumer group (classic protocol), committing what it got."""

    def __init__(self, bootstrap: str, topic: str, client: Client, group: str) -> None:
        super().__init__(daemon=True)
        self.client, self.topic = client, topic
        settings = {
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 1_000,
        }
        self.consumer = Consumer(_common(bootstrap, client, **settings))
        self.stopping = threading.Event()

    def run(self) -> None:
        self.consumer.subscribe([self.topic])
        while not self.stopping.is_set():
            msg = self.consumer.poll(0.2)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    self.client.errors.append(str(error))
                continue
            self.client.consumed.append(seen(msg))
            try:
                self.consumer.commit(message=msg, asynchronous=True)
            except Exception as exc:  # noqa: BLE001 - kept for the test to show
                self.client.errors.append(f"commit: {exc}")

    def stop(self) -> None:
        """Stops consuming and closes. What it logs while closing may not come out (the
        log is served by poll): its account is of what it sent, at least."""
        self.stopping.set()
        self.join(30)
        self.consumer.close()


class JavaLoad:
    """tests/peers/java/faults/Load.java: a Java producer or consumer in its own JVM."""

    def __init__(self, client: Client, *args: str) -> None:
        self.client = client
        self.process: subprocess.Popen[str] = start_java("faults.Load", *args)
        self.closed = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.stderr: list[str] = []
        threading.Thread(target=self._errors, daemon=True).start()

    @classmethod
    def producer(
        cls, bootstrap: str, topic: str, client: Client, rate: int, *settings: str
    ) -> JavaLoad:
        return cls(
            client,
            "produce",
            bootstrap,
            topic,
            client.name,
            str(rate),
            f"client.id={client.client_id}",
            *settings,
        )

    @classmethod
    def consumer(
        cls, bootstrap: str, topic: str, client: Client, group: str, *settings: str
    ) -> JavaLoad:
        return cls(
            client, "consume", bootstrap, topic, group, f"client.id={client.client_id}", *settings
        )

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            event = json.loads(line)
            if "ack" in event:
                self.client.acked.append(Seen(event["ack"], event["p"], event["o"], event["sha"]))
            elif "rec" in event:
                self.client.consumed.append(
                    Seen(event["rec"], event["p"], event["o"], event["sha"])
                )
            elif "requests" in event:
                self.client.requests = Counter(
                    {
                        (f"node:{node.removeprefix('node-')}", "*", 0, 0): count
                        for node, count in event["requests"].items()
                    }
                )
            elif "closed" in event:
                self.closed.set()
            else:
                self.client.errors.append(str(event))

    def _errors(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line)

    def stop(self, exact: bool) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("stop\n")
        self.process.stdin.flush()
        assert self.closed.wait(120), "".join(self.stderr[-40:])
        self.process.wait(30)
        self.reader.join(10)
        self.client.exact = exact

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


# --- what is checked ----------------------------------------------------------------------


def seen(msg: Any) -> Seen:
    """A consumed record: its key, where it was, its value's checksum as it arrived."""
    partition, offset = msg.partition(), msg.offset()
    assert partition is not None and offset is not None
    return Seen((msg.key() or b"").decode(), partition, offset, checksum(msg.value() or b""))


def admin(bootstrap: str) -> AdminClient:
    settings: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": LOG}
    return AdminClient(settings)


def lost(producer: Client, consumer: Client) -> list[Seen]:
    """The records `producer` had acknowledged that `consumer` did not get as acknowledged:
    at the same partition and offset, with the same key and checksum."""
    got = {(s.partition, s.offset): s for s in consumer.consumed}
    return [ack for ack in producer.acked if got.get((ack.partition, ack.offset)) != ack]


def copies(records: list[Seen], prefix: str) -> Counter[str]:
    """How many offsets hold each key of a producer (keys start with its name)."""
    distinct = {(s.partition, s.offset): s.key for s in records}
    return Counter(key for key in distinct.values() if key.startswith(prefix + "-"))


def read_topic(bootstrap: str, topic: str, timeout: float = 60.0) -> list[Seen]:
    """Every record of `topic` up to each partition's end as the brokers give it now,
    read from the start by a consumer of no group."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}",
            "enable.auto.commit": False,
            "logger": LOG,
        }
    )
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
        for p in partitions
    }
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    records: dict[tuple[int, int], Seen] = {}
    deadline = time.monotonic() + timeout
    try:
        while any(records_below(records, p, end) for p, end in ends.items()):
            assert time.monotonic() < deadline, f"{topic} not read to its end in {timeout}s"
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            record = seen(msg)
            records[(record.partition, record.offset)] = record
    finally:
        consumer.close()
    return list(records.values())


def records_below(records: dict[tuple[int, int], Seen], partition: int, end: int) -> bool:
    """Whether the record before `end` of `partition` is still to come."""
    return end > 0 and (partition, end - 1) not in records


def leaders(bootstrap: str, topic: str) -> tuple[dict[int, int], dict[int, tuple[str, int]]]:
    """(partition -> leader node id, node id -> (host, port)) as `bootstrap` answers."""
    metadata = admin(bootstrap).list_topics(topic, timeout=10)
    parts = {p.id: p.leader for p in metadata.topics[topic].partitions.values()}
    brokers = {b.id: (str(b.host), b.port) for b in metadata.brokers.values()}
    return parts, brokers


def in_sync(bootstrap: str, topic: str) -> dict[int, set[int]]:
    """partition -> its in-sync replicas, as the cluster says."""
    metadata = admin(bootstrap).list_topics(topic, timeout=10)
    return {p.id: set(p.isrs) for p in metadata.topics[topic].partitions.values()}


def readyz(http_port: int) -> tuple[int, str]:
    url = f"http://127.0.0.1:{http_port}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read().decode().strip()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode().strip()


# --- the load, and what is checked -------------------------------------------------------

PARTITIONS = 6
RATE = 40  # records a second, per producer
# Why a request may go unanswered here: its broker went away (killed: a reset, or the
# connection ends; shut down: it ends), or the client closed first (a consumer's
# long-poll Fetch at its close), or the broker could not be reached for it at all.
UPSTREAM_GONE = {"upstream_eof", "upstream_error", "upstream_connect_failed"}
CLIENT_GONE = {"client_eof", "client_error"}


def until(check: Callable[[], Any], what: str, timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f}s waiting for {what}"
        time.sleep(0.25)


def create_topic(bootstrap: str, topic: str, replicas: int) -> None:
    client = admin(bootstrap)  # held until the answer: destroyed, it fails its futures
    for future in client.create_topics([NewTopic(topic, PARTITIONS, replicas)]).values():
        future.result(30)


@contextmanager
def observed_gateway(
    cluster: KafkaCluster, log_path: Path
) -> Iterator[tuple[ObservedProxy, dict[int, int]]]:
    """A gateway with the hooks `kafkalens proxy` runs (request log at `log_path`) in
    front of the cluster; node id -> the gateway's port for that broker."""
    ports = {member.node_id: free_port() for member in cluster.members}
    proxy = ObservedProxy(cluster.members[0].address, log_path)  # its config replaced:
    proxy.config = dataclasses.replace(
        gateway_config(cluster.bootstrap, ports, str(log_path)),
        limits=proxy.config.limits,
    )
    with proxy:
        yield proxy, ports


class Load:
    """The four clients of a fault test, through `bootstrap`."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        run = uuid.uuid4().hex[:6]
        self.topic = topic
        self.ck_producer = Client("ckp", f"faults-ck-producer-{run}")
        self.java_producer = Client("jvp", f"faults-java-producer-{run}")
        self.ck_consumer = Client("ckc", f"faults-ck-consumer-{run}")
        self.java_consumer = Client("jvc", f"faults-java-consumer-{run}")
        self.rd_producer = RdkafkaProducer(
            bootstrap, topic, self.ck_producer, RATE, idempotent=True
        )
        self.rd_consumer = RdkafkaConsumer(bootstrap, topic, self.ck_consumer, f"faults-ck-{run}")
        self.jv_producer = JavaLoad.producer(
            bootstrap, topic, self.java_producer, RATE, "enable.idempotence=false", "linger.ms=20"
        )
        self.jv_consumer = JavaLoad.consumer(
            bootstrap, topic, self.java_consumer, f"faults-java-{run}", "group.protocol=consumer"
        )
        self.rd_producer.start()
        self.rd_consumer.start()

    @property
    def producers(self) -> list[Client]:
        return [self.ck_producer, self.java_producer]

    @property
    def consumers(self) -> list[Client]:
        return [self.ck_consumer, self.java_consumer]

    @property
    def clients(self) -> list[Client]:
        return self.producers + self.consumers

    def progress(self) -> tuple[int, ...]:
        return tuple(len(c.acked) for c in self.producers) + tuple(
            len(c.consumed) for c in self.consumers
        )

    def goes_on(self, more: int = 40, timeout: float = 120.0) -> None:
        """Until every producer had `more` records acknowledged and every consumer got
        `more` records, from now."""
        start = self.progress()
        until(
            lambda: all(
                now >= then + more for now, then in zip(self.progress(), start, strict=True)
            ),
            f"every client to get {more} more records done (then {start})",
            timeout,
        )

    def finish(self) -> None:
        """Producers stop (every record reported), consumers read on until they got every
        acknowledged record, then stop."""
        self.rd_producer.stop()
        self.jv_producer.stop(exact=True)
        for consumer in self.consumers:

            def caught_up(consumer: Client = consumer) -> bool:
                return not any(lost(p, consumer) for p in self.producers)

            until(caught_up, f"{consumer.name} to get every acknowledged record")
        self.rd_consumer.stop()
        self.jv_consumer.stop(exact=False)

    def kill(self) -> None:
        """Whatever is left running (a failed test)."""
        self.jv_producer.kill()
        self.jv_consumer.kill()
        self.rd_producer.stopping.set()
        self.rd_consumer.stopping.set()


def check_nothing_lost(load: Load, direct: str) -> dict[str, int]:
    """Every acknowledged record consumed by each group, and in the topic as read
    directly; the idempotent producer's once each. Returns each producer's duplicates."""
    for producer in load.producers:
        assert producer.acked, f"{producer.name}: nothing acknowledged"
        assert not producer.errors, f"{producer.name}: {producer.errors[:5]}"
        for consumer in load.consumers:
            missing = lost(producer, consumer)
            assert not missing, (
                f"{len(missing)} of {len(producer.acked)} records {producer.name} had "
                f"acknowledged were not consumed by {consumer.name}: {missing[:5]}"
            )
    stored = read_topic(direct, load.topic)
    duplicates = {}
    for producer in load.producers:
        held = copies(stored, producer.name)
        assert set(held) == {ack.key for ack in producer.acked}, producer.name
        duplicates[producer.name] = sum(n - 1 for n in held.values())
    assert duplicates[load.ck_producer.name] == 0, "the idempotent producer's records repeat"
    return duplicates


def check_request_log(
    lines: list[dict[str, Any]], load: Load, faulted: set[str], listener_of: Callable[[str], str]
) -> Counter[str]:
    """Every request each client says it sent has its line, on the listener it sent it to
    (none went round kafkalens): answered (with a latency), or incomplete with a reason
    that fits what happened. `listener_of` names the listener of a client's "port:P" or
    "node:N". Returns the incomplete lines' reasons."""
    reasons: Counter[str] = Counter()
    late = LateWrites(lines)
    for client in load.clients:
        mine = [
            line
            for line in lines
            if line["event"] in ("request", "request_incomplete")
            and line.get("client_id") == client.client_id
        ]
        for line in mine:
            if line["event"] == "request":
                assert line["latency_ms"] is not None, line
                continue
            reason = line["reason"]
            reasons[reason] += 1
            assert reason in UPSTREAM_GONE | CLIENT_GONE, line
            if reason in UPSTREAM_GONE:  # only on the listeners of brokers that went away
                assert line["listener"] in faulted, line
        assert client.requests, f"{client.name} reported no request"
        said: Counter[tuple[str, str, int, int]] = Counter()
        sent_at: dict[tuple[str, str, int, int], list[float]] = {}
        for key, count in client.requests.items():
            where, api, version, corr = key
            mapped = (listener_of(where), api, version, corr)
            said[mapped] += count
            sent_at.setdefault(mapped, []).extend(client.sent_at.get(key, []))
        if all(api == "*" for _, api, _, _ in said):  # counts only (the Java client)
            logged = Counter((line["listener"], "*", 0, 0) for line in mine)
        else:
            logged = Counter(
                (line["listener"], line["api"], line["api_version"], line["correlation_id"])
                for line in mine
            )
        line_times: dict[tuple[str, str, int, int], list[float]] = {}
        for line in mine:
            key = (line["listener"], line.get("api"), line.get("api_version"),
                   line.get("correlation_id"))
            line_times.setdefault(key, []).append(_epoch(line["ts"]))
        for key, count in (said - logged).items():
            listener = key[0]
            times: list[float | None] = [*unlogged(sent_at.get(key, []), line_times.get(key, []))]
            times = times or [None] * count
            for at in times:
                assert listener in faulted and late.explains(listener, client.client_id, at), (
                    f"{client.name}: {key} sent without a line, and not written to a "
                    f"connection kafkalens had closed for its broker (its account: {count} "
                    f"more than the lines{'' if at is None else f', logged at {at:.3f}'})"
                )
        if client.exact:
            extra = logged - said
            assert not extra, f"{client.name}: lines of no request it sent: {extra}"
    return reasons


def _epoch(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def unlogged(sends: list[float], lines: list[float]) -> list[float]:
    """The sends (librdkafka's log times) of one (listener, api, version, correlation id)
    that no line accounts for: each line takes the send nearest to it. librdkafka numbers
    requests per connection, so a reconnected client sends the same key again: the one
    without a line is not the latest, but the one farthest from every line."""
    left = sorted(sends)
    for at in sorted(lines):
        if not left:
            break
        left.remove(min(left, key=lambda sent: abs(sent - at)))
    return left


class LateWrites:
    """A client may write a request to a connection kafkalens has just closed because its
    broker went away (or refused it): no one received it, so it has no line. Each such
    connection (a connection_close line for a broker reason) explains at most one
    request of its client (or of any, when it received nothing and so names none) on its
    listener, written after it closed: librdkafka's next write after the close draws the
    reset, and the ones after it fail."""

    def __init__(self, lines: list[dict[str, Any]]) -> None:
        self.closes: dict[str, list[tuple[float, str | None]]] = {}
        for line in lines:
            if line["event"] == "connection_close" and line["reason"] in UPSTREAM_GONE:
                at = _epoch(line["ts"])
                self.closes.setdefault(line["listener"], []).append((at, line.get("client_id")))

    def explains(self, listener: str, client_id: str, logged_at: float | None) -> bool:
        """Whether a close on `listener` accounts for a request of `client_id` with no
        line. `logged_at`, librdkafka's, is after it was written (the log is served by
        poll), so the write is after the close only if this is; the Java client's count
        says nothing of when."""
        closes = self.closes.get(listener, [])
        for index, (closed_at, owner) in enumerate(closes):
            if owner not in (None, client_id):
                continue
            if logged_at is not None and not closed_at - 0.05 <= logged_at <= closed_at + 5.0:
                continue
            del closes[index]
            return True
        return False


# --- a gateway in front of a cluster ----------------------------------------------------


def gateway_agrees(
    gateway: str, direct: str, topic: str, ports: dict[int, int], gone: int | None
) -> bool:
    """The leaders the gateway hands out are the cluster's own as a client of the cluster
    reads them, every partition led (none by `gone`, if given, which the cluster no longer
    lists), and every broker it names is itself, at that broker's port."""
    theirs, live = leaders(direct, topic)
    ours, named = leaders(gateway, topic)
    return (
        (gone is None or (gone not in live and gone not in theirs.values()))
        and -1 not in theirs.values()
        and ours == theirs
        and named == {node: (LOCAL, ports[node]) for node in live}
    )


def survive(
    cluster: KafkaCluster,
    px: ObservedProxy,
    ports: dict[int, int],
    load: Load,
    node: int,
    how: str,
    also_down: tuple[str, ...] = (),
) -> None:
    """Node `node` killed (`how` "kill") or shut down ("stop") under `load`, then started
    again: /readyz names it (its broker listener, and `also_down`: its other listeners
    the gateway has routes to) and turns ready again, the gateway hands out the leaders
    without it and then lists it again, the load goes on meanwhile, and the node is back
    in every partition's in-sync replicas before this returns."""
    direct = cluster.bootstrap
    down = ", ".join(sorted([cluster.node(node).address, *also_down]))
    if how == "kill":
        cluster.kill_node(node)
    else:
        cluster.stop_node(node)
    try:
        until(
            lambda: readyz(px.http_port) == (200, f"ready; unreachable: {down}"),
            f"/readyz to name {down}",
            30,
        )
        until(
            lambda: gateway_agrees(px.bootstrap, direct, load.topic, ports, node),
            f"the gateway to hand out the leaders without node {node}",
        )
        load.goes_on()
    finally:
        cluster.start_node(node)
    until(lambda: readyz(px.http_port) == (200, "ready"), "/readyz to be ready again", 30)
    until(
        lambda: all(node in isr for isr in in_sync(direct, load.topic).values()),
        f"node {node} back in every partition's in-sync replicas",
    )
    until(
        lambda: gateway_agrees(px.bootstrap, direct, load.topic, ports, None),
        f"the gateway to hand out node {node} again",
    )


def listeners_of(px: ObservedProxy, gateway: bool) -> Callable[[str], str]:
    """How a client's "port:P" or "node:N" names kafkalens's listener it reached."""
    bound = px.call(lambda: {lsn.bound.port: name for name, lsn in px.server.listeners.items()})
    sidecar = next(iter(bound.values()))

    def listener_of(where: str) -> str:
        kind, _, number = where.partition(":")
        if kind == "port":
            return bound.get(int(number), f"not kafkalens: port {number}")
        if not gateway:
            return sidecar
        # (the KIP-848 consumer's coordinator connection to broker N is "node-+N")
        return "bootstrap" if int(number) < 0 else f"broker-{int(number)}"

    return listener_of


def finish_and_check(
    px: ObservedProxy, load: Load, direct: str, faulted: set[str], gateway: bool
) -> None:
    """The clients stop; kafkalens holds nothing more; nothing acknowledged was lost
    (`check_nothing_lost`), and every request the clients sent has its line
    (`check_request_log`), with at least one cut short by the brokers' faults."""
    load.finish()
    px.wait_all_closed(60)
    assert px.pending_total() == 0
    lines = px.lines()  # flushed first
    duplicates = check_nothing_lost(load, direct)
    reasons = check_request_log(lines, load, faulted, listeners_of(px, gateway))
    assert reasons.keys() & UPSTREAM_GONE, reasons  # the faults were seen as such
    print(f"duplicates {duplicates}, incomplete requests by reason {dict(reasons)}")
