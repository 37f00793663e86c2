"""Start and stop Apache Kafka (KRaft, every node both broker and controller) from its jars.

Used by the tests, the benchmark and `kafkalens demo --broker apache-kafka`. The jars
are Maven Central's (`org.apache.kafka:kafka_2.13` and what it depends on, plus a
log4j2 binding), one directory per version; `tests/peers/install` puts them in
`tests/peers/build/kafka-<version>/`. Nothing here downloads anything.

A node is started as Kafka's own scripts do, minus the scripts: `kafka.tools.StorageTool
format` on a fresh log directory, then `kafka.Kafka server.properties`; it is ready when
its log says `Kafka Server started`. Every listener is on loopback unless told otherwise.

Each node has a `CLIENT` listener that advertises itself (clients talk to the broker
directly) and may have a `PROXIED` listener that advertises another address: a sidecar
in front of that listener then receives every connection the broker hands out, as in a
deployment where the broker advertises its sidecar.
"""

from __future__ import annotations

import base64
import ctypes
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from proxy.tansu import BrokerUnavailable, free_ports

# Enough for the tests' traffic; the benchmark passes its own heap and JIT settings.
DEFAULT_JVM_OPTS = (
    "-Xms256m",
    "-Xmx384m",
    "-XX:+UseSerialGC",
    # C1 only: a test broker starts sooner and its JIT does not compete with the
    # clients for the machine's cores; throughput is not what the tests measure.
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
)

_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.state.name = state.change.logger
logger.state.level = warn
logger.request.name = kafka.request.logger
logger.request.level = warn
"""

READY_LINE = "Kafka Server started"


def java_binary(java_home: str | None = None) -> str:
    """`java` of `java_home`, else of $JAVA_HOME, else the one on PATH."""
    home = java_home or os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if candidate.exists():
            return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise BrokerUnavailable("no Java runtime: Apache Kafka needs `java` (17 or newer)")
    return found


MIN_JAVA = 17  # Apache Kafka 4's brokers


def check_java(java_home: str | None = None) -> None:
    """BrokerUnavailable, saying what is wanted, unless `java` (java_binary) is 17+."""
    java = java_binary(java_home)
    try:
        shown = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60
        ).stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BrokerUnavailable(f"cannot run {java}: {exc}") from None
    # `openjdk version "17.0.12" 2024-07-16`, `java version "1.8.0_402"`
    quoted = shown.split('"')[1] if shown.count('"') >= 2 else ""
    parts = quoted.removeprefix("1.").split(".")
    if not parts[0].isdigit() or int(parts[0]) < MIN_JAVA:
        first = shown.splitlines()[0] if shown else "no version"
        raise BrokerUnavailable(
            f"Apache Kafka needs Java {MIN_JAVA} or newer; {java} is {first!r}"
            " (set JAVA_HOME to a newer one)"
        )


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (as
    `kafka-storage.sh random-uuid` prints). Like Kafka's Uuid.randomUuid, never one that
    starts with "-": the storage tool would read `-t -xyz...` as an option (1 in 64)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


_prctl: Callable[..., int] | None
try:  # loaded here, not in the forked child: dlopen there could wait on a lock forever
    _prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
except OSError:  # not glibc Linux: brokers are stopped by stop() only
    _prctl = None
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """The broker is killed when the thread that started it ends (Linux's
    PR_SET_PDEATHSIG), so a test run that dies leaves no JVM behind holding ports.
    Start brokers from a thread that outlives them (the main thread)."""
    os.setsid()
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class KafkaNode:
    """One node's ports, log and process."""

    node_id: int
    host: str
    port: int
    controller_port: int
    proxied_port: int | None
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    # Where this start's lines begin in log_path (a restart appends to the same file).
    log_offset: int = 0

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def proxied_address(self) -> str:
        if self.proxied_port is None:
            raise ValueError("this node has no PROXIED listener")
        return f"{self.host}:{self.proxied_port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class KafkaCluster:
    """`nodes` Apache Kafka nodes of one KRaft cluster, each broker and controller.

    `libs` is a directory of the version's jars. `advertise_proxied` maps a node id to
    the `host:port` its PROXIED listener advertises (a sidecar in front of it); a node
    missing from it has no PROXIED listener. `properties` are added to every node's
    `server.properties` (and win over the defaults here); `classpath` adds directories
    or jars (a broker plug-in) to the broker's.
    """

    libs: Path
    work_dir: Path
    nodes: int = 1
    host: str = "127.0.0.1"
    advertise_proxied: dict[int, str] = field(default_factory=dict)
    properties: dict[str, str] = field(default_factory=dict)
    classpath: list[Path] = field(default_factory=list)
    jvm_opts: tuple[str, ...] = DEFAULT_JVM_OPTS
    java_home: str | None = None
    cluster_id: str = field(default_factory=new_cluster_id)
    members: list[KafkaNode] = field(default_factory=list)

    # --- addresses -------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """Every node's CLIENT listener, comma-separated."""
        return ",".join(node.address for node in self.members)

    def node(self, node_id: int) -> KafkaNode:
        for member in self.members:
            if member.node_id == node_id:
                return member
        raise KeyError(node_id)

    @property
    def version(self) -> str:
        """The Kafka version of the jars (from kafka_2.13-<version>.jar)."""
        for jar in self.libs.glob("kafka_2.13-*.jar"):
            return jar.stem.removeprefix("kafka_2.13-")
        raise BrokerUnavailable(f"no kafka_2.13 jar in {self.libs}")

    # --- lifecycle -------------------------------------------------------------------

    def start(self, timeout: float = 90.0) -> KafkaCluster:
        if not any(self.libs.glob("kafka_2.13-*.jar")):
            raise BrokerUnavailable(
                f"no Apache Kafka jars in {self.libs}: run `bash tests/peers/install`"
            )
        self.work_dir.mkdir(parents=True, exist_ok=True)
        (self.work_dir / "log4j2.properties").write_text(_LOG4J2)
        self.plan()
        for member in self.members:
            self._format(member)
        for member in self.members:
            self._launch(member)
        try:
            for member in self.members:
                self._wait_ready(member, timeout)
        except BrokerUnavailable:
            self.stop()
            raise
        return self

    def plan(self) -> KafkaCluster:
        """Chooses each node's ports (once), so that what sits in front of the cluster
        can be configured before it starts; `start` plans too."""
        if not self.members:
            ports = iter(free_ports(3 * self.nodes, self.host))  # distinct, all nodes'
            for node_id in range(1, self.nodes + 1):
                port, controller_port, proxied_port = next(ports), next(ports), next(ports)
                self.members.append(
                    KafkaNode(
                        node_id=node_id,
                        host=self.host,
                        port=port,
                        controller_port=controller_port,
                        proxied_port=proxied_port if node_id in self.advertise_proxied else None,
                        data_dir=self.work_dir / f"node-{node_id}" / "data",
                        log_path=self.work_dir / f"node-{node_id}" / "kafka.log",
                    )
                )
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stops every node: SIGTERM (a controlled shutdown), SIGKILL after `timeout`."""
        for member in self.members:
            if member.running:
                assert member.process is not None
                member.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for member in self.members:
            self._reap(member, max(0.1, deadline - time.monotonic()))

    def kill_node(self, node_id: int) -> None:
        """`kill -9` of one node: no controlled shutdown, no leadership handed over."""
        member = self.node(node_id)
        if member.process is not None:
            member.process.kill()
            member.process.wait()
            member.process = None

    def stop_node(self, node_id: int, timeout: float = 60.0) -> None:
        """A clean shutdown of one node (SIGTERM: Kafka's controlled shutdown)."""
        member = self.node(node_id)
        if member.running:
            assert member.process is not None
            member.process.send_signal(signal.SIGTERM)
        self._reap(member, timeout)

    def start_node(self, node_id: int, timeout: float = 90.0) -> None:
        """Starts a stopped node again on its ports, with its data."""
        member = self.node(node_id)
        if member.running:
            return
        self._launch(member)
        self._wait_ready(member, timeout)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- internals -------------------------------------------------------------------

    def _server_properties(self, member: KafkaNode) -> dict[str, str]:
        voters = ",".join(f"{m.node_id}@{m.host}:{m.controller_port}" for m in self.members)
        listeners = [f"CLIENT://{member.host}:{member.port}"]
        advertised = [f"CLIENT://{member.host}:{member.port}"]
        protocols = ["CLIENT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
        if member.proxied_port is not None:
            listeners.append(f"PROXIED://{member.host}:{member.proxied_port}")
            advertised.append(f"PROXIED://{self.advertise_proxied[member.node_id]}")
            protocols.append("PROXIED:PLAINTEXT")
        listeners.append(f"CONTROLLER://{member.host}:{member.controller_port}")
        replicas = str(min(3, len(self.members)))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(member.node_id),
            "controller.quorum.voters": voters,
            "listeners": ",".join(listeners),
            "advertised.listeners": ",".join(advertised),
            "listener.security.protocol.map": ",".join(protocols),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "CLIENT",
            "log.dirs": str(member.data_dir),
            "num.partitions": "1",
            "default.replication.factor": replicas,
            "min.insync.replicas": "2" if len(self.members) >= 3 else "1",
            "offsets.topic.replication.factor": replicas,
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": "2" if len(self.members) >= 3 else "1",
            "transaction.state.log.num.partitions": "3",
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": "2" if len(self.members) >= 3 else "1",
            "share.coordinator.state.topic.num.partitions": "3",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "true",
            "log.flush.interval.messages": "9223372036854775807",
            # A test broker's segments stay small, so a kill -9 recovers quickly.
            "log.segment.bytes": str(64 * 1024 * 1024),
        }
        props.update(self.properties)
        return props

    def _format(self, member: KafkaNode) -> None:
        node_dir = member.data_dir.parent
        node_dir.mkdir(parents=True, exist_ok=True)
        if member.data_dir.exists():
            shutil.rmtree(member.data_dir)
        config = node_dir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self._server_properties(member).items()))
        result = subprocess.run(
            [
                *self._java(),
                "kafka.tools.StorageTool",
                "format",
                "-t",
                self.cluster_id,
                "-c",
                str(config),
            ],
            capture_output=True,
            timeout=120,
        )
        if result.returncode != 0:
            raise BrokerUnavailable(
                f"kafka-storage format failed for node {member.node_id}: "
                + (result.stderr or result.stdout).decode(errors="replace")[-2000:]
            )

    def _java(self) -> list[str]:
        classpath = [str(self.libs / "*"), *(str(p) for p in self.classpath)]
        return [
            java_binary(self.java_home),
            *self.jvm_opts,
            f"-Dlog4j2.configurationFile={self.work_dir / 'log4j2.properties'}",
            "-cp",
            os.pathsep.join(classpath),
        ]

    def _launch(self, member: KafkaNode) -> None:
        config = member.data_dir.parent / "server.properties"
        with open(member.log_path, "ab") as out:
            member.log_offset = out.tell()
            member.process = subprocess.Popen(
                [*self._java(), "kafka.Kafka", str(config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )

    def _wait_ready(self, member: KafkaNode, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(member.log_path, "rb") as log:
                log.seek(member.log_offset)
                if READY_LINE.encode() in log.read():
                    return
            if not member.running:
                break
            time.sleep(0.1)
        tail = member.log_path.read_bytes()[-3000:].decode(errors="replace")
        state = "exited" if not member.running else f"not ready within {timeout:.0f}s"
        raise BrokerUnavailable(f"Kafka node {member.node_id} {state}; its log ends:\n{tail}")

    @staticmethod
    def _reap(member: KafkaNode, timeout: float) -> None:
        proc, member.process = member.process, None
        if proc is None:
            return
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
