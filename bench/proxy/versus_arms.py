"""The arms of `bench.proxy.versus`: one Apache Kafka broker, every front in front of it at once.

One single-node Apache Kafka (KRaft) serves every arm, so the arms can be interleaved
workload by workload against the same broker in the same minutes. Its `CLIENT`
listener is the `direct` arm (and the paired baseline of the small requests). A front
that relays bytes unchanged (haproxy, kafkalens in sidecar mode) gets a listener of its
own that advertises the front's address, so every connection a client opens after
bootstrap crosses that front, as in a deployment where the broker advertises its proxy.
A front that rewrites broker addresses itself (Kroxylicious's port-per-broker gateway,
kafka-proxy's bootstrap mapping, tansu's proxy) points at `CLIENT`.

The broker runs with Apache Kafka's own defaults (`kafka-server-start.sh` /
`kafka-run-class.sh`: a 1 GiB heap, G1 and its pause settings, C2), not the tests' small
C1 broker. With a `Pinning`, the broker, the clients (this process and what it starts)
and the fronts (taskset) each run on the cores its placement gives them
(`PLACEMENTS`).

Every front keeps its shipped defaults. What differs from them, for every front alike:
connection limits set to what the descriptor limit allows (`connection_budget`: haproxy's
`maxconn`, kafkalens's `limits.max_connections*`; Kroxylicious has none), and on JVM fronts G1
named explicitly (a JVM that sees one CPU picks Serial GC, where it picks G1 on the
unpinned 2-core machine).
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from support import wire

from bench.proxy import fronts
from bench.proxy.arms import ArmSkipped, baseline_env, kafkalens_command
from proxy.apache_kafka import KafkaCluster, KafkaNode
from proxy.tansu import free_port, wait_for_port

HOST = "127.0.0.1"
REPO = Path(__file__).resolve().parents[2]
PEERS = REPO / "bench" / "peers" / "build"
KAFKA_BUILD = REPO / "tests" / "peers" / "build"
KROXYLICIOUS_VERSION = "0.12.0"
# The issue asked for 0.23.0; the Maven Central reachable here serves no
# kroxylicious-app at any version and kroxylicious-runtime only up to 0.12.0.
KROXYLICIOUS_NOTE = (
    f"Kroxylicious {KROXYLICIOUS_VERSION} (its runtime jars and a launcher: the"
    " distribution, kroxylicious-app, is not served here at any version, and the runtime"
    f" not past {KROXYLICIOUS_VERSION}), port-per-broker gateway, no filters"
)
ARMS = (
    "direct",
    "haproxy",
    "python-relay",
    "kroxylicious",
    "kroxylicious-0.23",
    "kafka-proxy",
    "tansu-proxy",
    "kafkalens-bare",
    "kafkalens",
    "kafkalens-detail",
)
# Built from its source by bench/peers/install (bench/README.md): its runtime is not on
# Maven Central past 0.12.0. Needs Java 21+ (the JDK the install found, named in JAVA).
KROXYLICIOUS_SOURCE_VERSION = "0.23.0"
# grepplabs/kafka-proxy, built from its source at this tag by bench/peers/install (the Go
# module proxy refuses the module at every version; its dependencies are vendored).
KAFKA_PROXY_VERSION = "v0.4.3"
# Apache Kafka's own JVM settings (kafka-server-start.sh: KAFKA_HEAP_OPTS;
# kafka-run-class.sh: KAFKA_JVM_PERFORMANCE_OPTS).
KAFKA_JVM_OPTS = (
    "-Xmx1G",
    "-Xms1G",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
    "-Djava.awt.headless=true",
)


def connection_budget() -> int:
    """Connections a front can hold under this process's descriptor limit (inherited by
    every front): two descriptors each (client and upstream), 100 spare."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return (hard - 100) // 2 if hard != resource.RLIM_INFINITY else 100_000


# `timeout connect`: kafkalens's default for its broker connections
# (limits.connect_timeout_seconds), haproxy having none of its own; at 5 s haproxy gave
# up on some of 9,900 connections opened 50 at a time while the broker accepted them.
HAPROXY_CONFIG = """\
global
    maxconn {maxconn}
defaults
    mode tcp
    maxconn {maxconn}
    timeout connect 10s
    timeout client 10m
    timeout server 10m
frontend kafka
    bind {host}:{front}
    default_backend broker
backend broker
    server broker0 {host}:{broker}
"""
KAFKALENS_CONFIG = """\
mode: sidecar
limits:
  max_connections: {maxconn}
  max_connections_per_ip: {maxconn}
request_log:
  record_detail: {detail}
"""
KROXYLICIOUS_CONFIG = """\
virtualClusters:
  - name: bench
    targetCluster:
      bootstrapServers: {broker}
    gateways:
      - name: default
        portIdentifiesNode:
          bootstrapAddress: {host}:{front}
          nodeStartPort: {node_port}
          nodeIdRanges:
            - name: brokers
              start: 1
              end: 1
"""


@dataclass(frozen=True)
class Pinning:
    """Cores for the fronts, the broker and the clients (this process and what it
    starts), by `taskset` and this process's own affinity."""

    placement: str
    fronts: frozenset[int]
    broker: frozenset[int]
    clients: frozenset[int]

    def prefix(self) -> list[str]:
        return ["taskset", "-c", _cores(self.fronts)]

    def describe(self) -> str:
        roles = {"fronts": self.fronts, "broker": self.broker, "clients": self.clients}
        by_cores: dict[frozenset[int], list[str]] = {}
        for role, cores in roles.items():
            by_cores.setdefault(cores, []).append(role)
        parts = [f"{' and '.join(r)} on core {_cores(c)}" for c, r in by_cores.items()]
        return f"{self.placement}: " + ", ".join(parts)


def _cores(cores: frozenset[int]) -> str:
    return ",".join(map(str, sorted(cores)))


# Where each process runs (on 2 cores, core 0 and core 1):
# * front-alone: every front alone on the last core; the broker and the clients share
#   the others. A front never waits for a client's CPU; direct's clients and broker
#   share one core as the proxied arms' do.
# * broker-alone: the broker alone on the first core; the clients and the fronts share
#   the others, as a sidecar shares its machine with the applications beside it. A
#   front's CPU is then taken from the clients' core, and the broker's JVM (its GC,
#   its threads) is not disturbed by the clients'.
PLACEMENTS = ("front-alone", "broker-alone")


def default_pinning(placement: str = "front-alone") -> Pinning | None:
    """Cores by `placement`; None on one core."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None
    first, last = frozenset(cores[:1]), frozenset(cores[-1:])
    if placement == "front-alone":
        rest = frozenset(cores[:-1])
        return Pinning(placement, fronts=last, broker=rest, clients=rest)
    if placement == "broker-alone":
        rest = frozenset(cores[1:])
        return Pinning(placement, fronts=rest, broker=first, clients=rest)
    raise ValueError(f"unknown placement {placement!r}: one of {', '.join(PLACEMENTS)}")


@dataclass
class Front:
    """One arm: where clients connect, and the process whose CPU and memory count."""

    name: str
    port: int
    process: subprocess.Popen[bytes] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"


@dataclass
class Bench:
    """The broker and every front that started; `skipped` says why the others did not."""

    work: Path
    arms: tuple[str, ...]
    pinning: Pinning | None
    kafka_version: str
    # added to (and winning over) the broker's properties below
    broker_properties: dict[str, str] = field(default_factory=dict)
    # a front's command, wrapped before it is pinned (a tracer: bench/proxy/per_gb.py)
    wrap: Callable[[Front, list[str]], list[str]] | None = None
    start_fronts: bool = True  # False: the broker alone, fronts by `restart_front`
    kafka: KafkaCluster | None = None
    fronts: dict[str, Front] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    _listeners: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def direct_port(self) -> int:
        assert self.kafka is not None
        return self.kafka.members[0].port

    def start(self) -> Bench:
        self.work.mkdir(parents=True, exist_ok=True)
        try:
            # the broker inherits this process's cores when it starts, the clients later
            if self.pinning is not None:
                os.sched_setaffinity(0, self.pinning.broker)
            self._start_kafka()
            if self.pinning is not None:
                os.sched_setaffinity(0, self.pinning.clients)
            for name in self.arms if self.start_fronts else ():
                self._start_front(name)
        except BaseException:  # __exit__ does not run when __enter__ raises
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for front in self.fronts.values():
            if front.process is not None:
                fronts.stop_process(front.process)
        if self.kafka is not None:
            self.kafka.stop()

    def __enter__(self) -> Bench:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the broker ----------------------------------------------------------------

    def _start_kafka(self) -> None:
        libs = KAFKA_BUILD / f"kafka-{self.kafka_version}"
        if not any(libs.glob("kafka_2.13-*.jar")):
            raise RuntimeError(f"no Apache Kafka jars in {libs}: run `bash bench/peers/install`")
        node = KafkaNode(
            node_id=1,
            host=HOST,
            port=free_port(HOST),
            controller_port=free_port(HOST),
            proxied_port=None,
            data_dir=self.work / "kafka" / "node-1" / "data",
            log_path=self.work / "kafka" / "node-1" / "kafka.log",
        )
        listeners = [f"CLIENT://{HOST}:{node.port}"]
        advertised = [f"CLIENT://{HOST}:{node.port}"]
        protocols = ["CLIENT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
        for name in self.arms:
            if name in ADVERTISED:
                label = "ARM_" + name.upper().replace("-", "_")
                own, front = free_port(HOST), free_port(HOST)
                self._listeners[name] = (own, front)
                listeners.append(f"{label}://{HOST}:{own}")
                advertised.append(f"{label}://{HOST}:{front}")
                protocols.append(f"{label}:PLAINTEXT")
        listeners.append(f"CONTROLLER://{HOST}:{node.controller_port}")
        self.kafka = KafkaCluster(
            libs=libs,
            work_dir=self.work / "kafka",
            members=[node],
            jvm_opts=KAFKA_JVM_OPTS,
            properties={
                "listeners": ",".join(listeners),
                "advertised.listeners": ",".join(advertised),
                "listener.security.protocol.map": ",".join(protocols),
                # Kafka's own defaults again where the tests' cluster shrinks them.
                "offsets.topic.num.partitions": "50",
                "log.segment.bytes": str(1024 * 1024 * 1024),
                **self.broker_properties,
            },
        )
        self.kafka.start(timeout=180.0)

    # --- the fronts ----------------------------------------------------------------

    def _start_front(self, name: str) -> None:
        if name == "direct":
            self.fronts[name] = Front(name, self.direct_port, notes=[self._kafka_note()])
            return
        builder = BUILDERS.get(name)
        if builder is None:
            self.skipped[name] = f"unknown arm {name!r}"
            return
        own, port = self._listeners.get(name, (self.direct_port, free_port(HOST)))
        front = Front(name, port)
        log = self.work / f"{name}.log"
        try:
            cmd, env = builder(self, front, own, log)
            if self.wrap is not None:
                cmd = self.wrap(front, cmd)
            if self.pinning is not None:
                cmd = self.pinning.prefix() + cmd
            front.process = fronts.spawn(cmd, log, env)
            _wait_ready(front, log)
        except ArmSkipped as exc:
            self._drop(front)
            self.skipped[name] = str(exc)
            return
        except Exception as exc:  # one front failing must not lose the others
            self._drop(front)
            self.skipped[name] = f"failed to start: {exc}"
            return
        if self.pinning is not None:
            front.notes.append(self.pinning.describe())
        self.fronts[name] = front

    def restart_front(self, name: str) -> Front | None:
        """The arm's front stopped and started again on the same ports (with the
        current `wrap`); None if it did not start (`skipped` says why)."""
        old = self.fronts.pop(name, None)
        if old is not None:
            self._drop(old)
        self.skipped.pop(name, None)
        self._start_front(name)
        return self.fronts.get(name)

    @staticmethod
    def _drop(front: Front) -> None:
        if front.process is not None:
            fronts.stop_process(front.process)

    def _kafka_note(self) -> str:
        return f"Apache Kafka {self.kafka_version}, one KRaft node, JVM {' '.join(KAFKA_JVM_OPTS)}"


Builder = Callable[[Bench, Front, int, Path], tuple[list[str], dict[str, str] | None]]


def _haproxy(bench: Bench, front: Front, broker: int, log: Path) -> tuple[list[str], None]:
    binary = shutil.which("haproxy")
    if binary is None:
        raise ArmSkipped("haproxy is not installed (apt-get install haproxy)")
    config = bench.work / "haproxy.cfg"
    config.write_text(
        HAPROXY_CONFIG.format(
            maxconn=connection_budget(), host=HOST, front=front.port, broker=broker
        )
    )
    front.notes.append(fronts.version_line([binary, "-v"]) + ", mode tcp")
    return [binary, "-db", "-f", str(config)], None


def _kroxylicious(bench: Bench, front: Front, broker: int, log: Path) -> tuple[list[str], None]:
    libs = PEERS / f"kroxylicious-{KROXYLICIOUS_VERSION}"
    launcher = PEERS / "kroxylicious"
    if not (launcher / "KroxyliciousMain.class").exists():
        raise ArmSkipped("Kroxylicious is not installed: run `bash bench/peers/install`")
    config = bench.work / "kroxylicious.yaml"
    config.write_text(
        KROXYLICIOUS_CONFIG.format(
            broker=f"{HOST}:{broker}", host=HOST, front=front.port, node_port=free_port(HOST)
        )
    )
    front.notes.append(KROXYLICIOUS_NOTE + "; JVM defaults with -XX:+UseG1GC")
    java = shutil.which("java") or "java"
    classpath = f"{libs}/*{os.pathsep}{launcher}"
    return [java, "-XX:+UseG1GC", "-cp", classpath, "KroxyliciousMain", str(config)], None


def _kroxylicious_source(
    bench: Bench, front: Front, broker: int, log: Path
) -> tuple[list[str], None]:
    libs = PEERS / f"kroxylicious-{KROXYLICIOUS_SOURCE_VERSION}"
    launcher = PEERS / f"kroxylicious-launcher-{KROXYLICIOUS_SOURCE_VERSION}"
    if not (launcher / "KroxyliciousMain.class").exists():
        raise ArmSkipped(
            f"Kroxylicious {KROXYLICIOUS_SOURCE_VERSION} is not built: run `bash bench/peers/install`"
            " where its source can be cloned and a JDK 21+ is installed (bench/README.md,"
            " KROXYLICIOUS_GIT)"
        )
    java = (libs / "JAVA").read_text().strip()
    config = bench.work / f"{front.name}.yaml"
    config.write_text(
        KROXYLICIOUS_CONFIG.format(
            broker=f"{HOST}:{broker}", host=HOST, front=front.port, node_port=free_port(HOST)
        )
    )
    front.notes.append(
        f"Kroxylicious {KROXYLICIOUS_SOURCE_VERSION} built from its source (its runtime and the"
        " launcher, as for 0.12.0), port-per-broker gateway, no filters;"
        f" {_java_version(java)}, JVM defaults with -XX:+UseG1GC"
    )
    classpath = f"{libs}/*{os.pathsep}{launcher}"
    return [java, "-XX:+UseG1GC", "-cp", classpath, "KroxyliciousMain", str(config)], None


def _java_version(java: str) -> str:
    """`java -version`'s first line (it writes to stderr)."""
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "java version unknown"
    return (done.stderr or done.stdout or "java version unknown").splitlines()[0]


def _kafka_proxy(bench: Bench, front: Front, broker: int, log: Path) -> tuple[list[str], None]:
    binary = PEERS / "kafka-proxy" / "kafka-proxy"
    if not binary.exists():
        raise ArmSkipped(
            "kafka-proxy is not installed: run `bash bench/peers/install` where its source"
            " can be cloned (bench/README.md, KAFKA_PROXY_GIT)"
        )
    front.notes.append(
        f"kafka-proxy {KAFKA_PROXY_VERSION} (grepplabs, built from its source with its vendored"
        " modules), its defaults; listeners on loopback, its HTTP endpoints off"
    )
    # One mapping, the broker's advertised address to the front's: Metadata and
    # FindCoordinator answers are rewritten to it. Listeners on loopback (its default is
    # 0.0.0.0), and no HTTP server (health and metrics, 0.0.0.0:9080 by default): the
    # other fronts run none either.
    cmd = [str(binary), "server", "--bootstrap-server-mapping", f"{HOST}:{broker},{front.bootstrap}"]
    return cmd + ["--default-listener-ip", HOST, "--http-disable"], None


def _tansu_proxy(bench: Bench, front: Front, broker: int, log: Path) -> tuple[list[str], None]:
    from proxy.tansu import tansu_binary

    binary = tansu_binary()
    url = f"tcp://{HOST}:{front.port}"
    front.notes.append(fronts.version_line([binary, "--version"]))
    cmd = [binary, "proxy", "--listener-url", url, "--advertised-listener-url", url]
    return cmd + ["--origin-url", f"tcp://{HOST}:{broker}"], None


def _kafkalens(detail: bool, baseline: bool = False) -> Builder:
    def build(
        bench: Bench, front: Front, broker: int, log: Path
    ) -> tuple[list[str], dict[str, str]]:
        config = bench.work / f"{front.name}.yaml"
        config.write_text(
            KAFKALENS_CONFIG.format(maxconn=connection_budget(), detail=str(detail).lower())
        )
        request_log = bench.work / f"{front.name}-requests.log"
        metrics = f"{HOST}:{free_port(HOST)}"
        front.notes.append(
            f"sidecar, request log {request_log.name} (every request), metrics {metrics},"
            f" lag on{', record_detail: true' if detail else ''}"
        )
        if baseline:
            env = baseline_env(front.notes)
            cmd = [sys.executable, "-P", "-m", "proxy.cli", "proxy", "--config", str(config)]
        else:
            env = fronts.working_tree_env()
            cmd = [kafkalens_command(), "proxy", "--config", str(config)]
        cmd += ["--listen", front.bootstrap, "--upstream", f"{HOST}:{broker}"]
        cmd += ["--metrics", metrics, "--request-log", str(request_log)]
        return cmd, env

    return build


def _kafkalens_bare(
    bench: Bench, front: Front, broker: int, log: Path
) -> tuple[list[str], dict[str, str]]:
    """kafkalens's forwarding machinery with the no-op hooks (`bench/proxy/bare_proxy.py`):
    framing, matching answers to requests, the limits; no decoding, request log,
    per-request metrics or lag. The config is the kafkalens arm's."""
    config = bench.work / f"{front.name}.yaml"
    config.write_text(KAFKALENS_CONFIG.format(maxconn=connection_budget(), detail="false"))
    metrics = f"{HOST}:{free_port(HOST)}"
    front.notes.append("forwarding only: no decoding, request log, per-request metrics or lag")
    cmd = [sys.executable, "-m", "bench.proxy.bare_proxy", "--config", str(config)]
    cmd += ["--listen", front.bootstrap, "--upstream", f"{HOST}:{broker}", "--metrics", metrics]
    return cmd, fronts.working_tree_env()


def _kafkalens_bare_baseline(
    bench: Bench, front: Front, broker: int, log: Path
) -> tuple[list[str], dict[str, str]]:
    """kafkalens-bare on the baseline checkout (its bench.proxy.bare_proxy and proxy/, this
    tree's bench after them on the path): a change to the forwarding, before and after
    in one run."""
    cmd, _ = _kafkalens_bare(bench, front, broker, log)
    env = baseline_env(front.notes)
    env["PYTHONPATH"] += os.pathsep + str(REPO)
    return [cmd[0], "-P", *cmd[1:]], env


def _python_relay(
    bench: Bench, front: Front, broker: int, log: Path
) -> tuple[list[str], dict[str, str]]:
    """A uvloop relay of bytes in Python (`bench/proxy/plain_relay.py`): the floor of any
    Python proxy on this machine."""
    front.notes.append(f"a uvloop relay of bytes, nothing else; {python_note()}")
    cmd = [sys.executable, "-m", "bench.proxy.plain_relay", "--listen", front.bootstrap]
    return cmd + ["--upstream", f"{HOST}:{broker}"], fronts.working_tree_env()


# Not in ARMS (the default set): another checkout's code, KAFKALENS_BASELINE_TREE=DIR
# (bench/proxy/arms.py), for a change measured before and after in one run.
BASELINE_ARMS = ("kafkalens-baseline", "kafkalens-bare-baseline")
# Fronts that relay the broker's own Metadata: the broker must advertise them.
ADVERTISED = frozenset(
    {"haproxy", "python-relay", "kafkalens-bare", "kafkalens", "kafkalens-detail", *BASELINE_ARMS}
)
BUILDERS: dict[str, Builder] = {
    "haproxy": _haproxy,
    "python-relay": _python_relay,
    "kafkalens-bare": _kafkalens_bare,
    "kroxylicious": _kroxylicious,
    "kroxylicious-0.23": _kroxylicious_source,
    "kafka-proxy": _kafka_proxy,
    "tansu-proxy": _tansu_proxy,
    "kafkalens": _kafkalens(False),
    "kafkalens-detail": _kafkalens(True),
    "kafkalens-baseline": _kafkalens(False, baseline=True),
    "kafkalens-bare-baseline": _kafkalens_bare_baseline,
}
START_SECONDS = 60.0


def _wait_ready(front: Front, log: Path) -> None:
    """Listening, and one ApiVersions and one Metadata answered through it."""
    assert front.process is not None
    deadline = time.monotonic() + START_SECONDS
    if not wait_for_port(HOST, front.port, START_SECONDS) or front.process.poll() is not None:
        code = front.process.poll()
        state = f"exited with code {code}" if code is not None else "did not listen"
        raise RuntimeError(f"{front.name} {state}: {fronts.log_tail(log)}")
    try:
        # A JVM front listens before it has loaded what its first request needs (Kroxylicious's
        # first ApiVersions took over 10 s on a loaded 2-core CI machine): the first answer gets
        # what is left of the same start deadline, not a socket's default.
        sock = wire.connect(HOST, front.port, timeout=max(10.0, deadline - time.monotonic()))
        try:
            wire.roundtrip(sock, wire.api_versions().frame(1))
            wire.roundtrip(sock, wire.metadata(None).frame(2))
        finally:
            sock.close()
    except OSError as exc:
        raise ArmSkipped(
            f"{front.name} does not answer ApiVersions and Metadata in front of this broker"
            f" ({exc}); its log: {fronts.log_tail(log)}"
        ) from exc


def python_note() -> str:
    return f"Python {sys.version.split()[0]} ({sys.executable})"
