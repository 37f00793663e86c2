"""Apache Kafka for the tests: where its jars are, and clusters started from them.

The jars come from `tests/peers/install` (Maven Central), one directory per version of
`tests/peers/kafka-versions` (newest first). When they are missing the first test that
needs them runs the install step (it is cached and idempotent); if that cannot run here
(no java, javac or mvn) the test is skipped with the reason, unless
`KAFKALENS_REQUIRE_PEERS=1` (CI) makes it fail instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from proxy.apache_kafka import KafkaCluster, KafkaNode
from proxy.tansu import free_ports

PEERS = Path(__file__).resolve().parent.parent / "peers"
BUILD = PEERS / "build"
VERSIONS: list[str] = (PEERS / "kafka-versions").read_text().split()
NEWEST, OLDEST = VERSIONS[0], VERSIONS[-1]

_install_lock = threading.Lock()
_install_result: list[str | None] = []  # [None] installed, [reason] could not
# Why tests were skipped for want of a peer this session: the compatibility table's
# check (support.compat) cannot tell a row missing from a row not run then.
SKIPPED_FOR: list[str] = []


def _unavailable(reason: str) -> None:
    if os.environ.get("KAFKALENS_REQUIRE_PEERS") == "1":
        pytest.fail(f"KAFKALENS_REQUIRE_PEERS=1 but the Kafka peers are missing: {reason}")
    SKIPPED_FOR.append(reason)
    pytest.skip(reason)


def ensure_peers() -> None:
    """Runs tests/peers/install once per test session (a no-op when it is current)."""
    with _install_lock:
        if not _install_result:
            missing = [tool for tool in ("java", "javac", "mvn") if shutil.which(tool) is None]
            if missing:
                _install_result.append(f"no {', '.join(missing)} on PATH to install Apache Kafka")
            else:
                done = subprocess.run(
                    ["bash", str(PEERS / "install")], capture_output=True, text=True
                )
                _install_result.append(
                    None
                    if done.returncode == 0
                    else f"tests/peers/install failed: {done.stderr[-2000:]}"
                )
    reason = _install_result[0]
    if reason is not None:
        _unavailable(reason)


def kafka_libs(version: str = NEWEST) -> Path:
    ensure_peers()
    libs = BUILD / f"kafka-{version}"
    if not any(libs.glob("kafka_2.13-*.jar")):
        _unavailable(f"no jars in {libs}")
    return libs


def java_classes() -> Path:
    """The compiled Java client programs (tests/peers/java/)."""
    ensure_peers()
    return BUILD / "java"


def broker_plugins() -> Path:
    """The compiled broker plug-ins (tests/peers/broker-plugins/)."""
    ensure_peers()
    return BUILD / "broker-plugins"


def go_binary(name: str) -> Path:
    """A Go client program of tests/peers/go/cmd/<name>."""
    ensure_peers()
    path = BUILD / "bin" / name
    if not path.exists():
        _unavailable(f"{path} was not built (is `go` on PATH?)")
    return path


class SharedKafka:
    """A running single-node cluster with a PROXIED listener that advertises
    `sidecar_address`: a sidecar started there (`--listen <sidecar_address>
    --upstream <upstream>`) receives every connection the broker hands out, while
    `direct` reaches the broker without it. A SECOND listener does the same for a
    second sidecar (`second_upstream`, `second_sidecar_port`), so that two sidecars
    of the one broker can run at once, each seeing all of its own clients' traffic
    (tests/proxy/test_soak.py's steady and leaking soaks)."""

    def __init__(self, cluster: KafkaCluster, sidecar_port: int, second: tuple[int, int]) -> None:
        self.cluster = cluster
        self.sidecar_port = sidecar_port
        self.second = second  # the SECOND listener's port, the sidecar's port it advertises

    @property
    def version(self) -> str:
        return self.cluster.version

    @property
    def direct(self) -> str:
        return self.cluster.bootstrap

    @property
    def upstream(self) -> str:
        """The PROXIED listener, for a sidecar's --upstream."""
        return self.cluster.node(1).proxied_address

    @property
    def sidecar_address(self) -> str:
        return f"127.0.0.1:{self.sidecar_port}"

    @property
    def second_upstream(self) -> str:
        """The SECOND listener, for a second sidecar's --upstream."""
        return f"{self.cluster.node(1).host}:{self.second[0]}"

    @property
    def second_sidecar_port(self) -> int:
        return self.second[1]


@contextmanager
def shared_kafka(
    work_dir: Path,
    version: str = NEWEST,
    properties: dict[str, str] | None = None,
    **fields: object,
) -> Iterator[SharedKafka]:
    host = "127.0.0.1"
    # chosen together (free_ports), so that no two of them are the same port
    sidecar, port, controller, proxied, second, second_sidecar = free_ports(6, host)
    node = KafkaNode(
        node_id=1,
        host=host,
        port=port,
        controller_port=controller,
        proxied_port=proxied,
        data_dir=work_dir / "node-1" / "data",
        log_path=work_dir / "node-1" / "kafka.log",
    )
    cluster = KafkaCluster(
        libs=kafka_libs(version),
        work_dir=work_dir,
        members=[node],
        advertise_proxied={1: f"{host}:{sidecar}"},
        properties={
            "listeners": f"CLIENT://{host}:{port},PROXIED://{host}:{proxied},"
            f"SECOND://{host}:{second},CONTROLLER://{host}:{controller}",
            "advertised.listeners": f"CLIENT://{host}:{port},PROXIED://{host}:{sidecar},"
            f"SECOND://{host}:{second_sidecar}",
            "listener.security.protocol.map": (
                "CLIENT:PLAINTEXT,PROXIED:PLAINTEXT,SECOND:PLAINTEXT,CONTROLLER:PLAINTEXT"
            ),
            **(properties or {}),
        },
        **fields,  # type: ignore[arg-type]
    )
    with cluster:
        yield SharedKafka(cluster, sidecar, (second, second_sidecar))


@contextmanager
def kafka_cluster(
    work_dir: Path, nodes: int, version: str = NEWEST, **fields: object
) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(libs=kafka_libs(version), work_dir=work_dir, nodes=nodes, **fields)  # type: ignore[arg-type]
    with cluster:
        yield cluster


@contextmanager
def observed_sidecar(kafka: SharedKafka, log_path: Path) -> Iterator[Any]:
    """An ObservedProxy (the real hooks, a request log at `log_path`) as the sidecar of
    the shared broker: it listens on the address the broker advertises and forwards to
    its PROXIED listener, so every connection a client makes goes through it."""
    import dataclasses

    from proxy.config import Address
    from support.observed import ObservedProxy

    proxy = ObservedProxy(kafka.upstream, log_path)
    listener = dataclasses.replace(
        proxy.config.listeners[0], listen=Address("127.0.0.1", kafka.sidecar_port)
    )
    proxy.config = dataclasses.replace(proxy.config, listeners=(listener,))
    with proxy:
        yield proxy
