"""Apache Kafka clusters of every KRaft layout, for the gateway's tests.

`proxy.apache_kafka.KafkaCluster` starts nodes that are each broker and controller (the
*combined* layout). `KraftCluster` adds the others operators run:

- **dedicated controllers**: `controllers=3, nodes=3` starts three controller-only
  processes (node ids 1-3, only a CONTROLLER listener) and three broker-only ones (ids
  4-6, only a CLIENT listener), the layout of most production clusters;
- **a broker joining later**: `add_broker()` formats and starts one more broker-only
  node (the next node id) in a running cluster of either layout, as an operator scales
  out.

Every node has the same static voter set (`controller.quorum.voters`: the controllers, or
every node when combined). Controllers get a smaller heap than brokers: they hold only
the metadata log.
"""

from __future__ import annotations

import signal
import socket
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codec import ApiKey, Request, decode_response, encode_request
from proxy.apache_kafka import DEFAULT_JVM_OPTS, KafkaCluster, KafkaNode
from proxy.tansu import free_ports
from support.kafka import kafka_libs

BROKER, CONTROLLER = "broker", "controller"
COMBINED = (BROKER, CONTROLLER)
# A controller-only node keeps the metadata log and nothing else.
CONTROLLER_JVM_OPTS = tuple(
    "-Xms64m" if o.startswith("-Xms") else "-Xmx192m" if o.startswith("-Xmx") else o
    for o in DEFAULT_JVM_OPTS
)


@dataclass
class KraftNode(KafkaNode):
    """A node and its roles. A controller-only node has no CLIENT listener: its `port`
    is its CONTROLLER listener's, so `address` is where it listens either way."""

    roles: tuple[str, ...] = COMBINED

    @property
    def is_broker(self) -> bool:
        return BROKER in self.roles

    @property
    def is_controller(self) -> bool:
        return CONTROLLER in self.roles

    @property
    def controller_address(self) -> str:
        return f"{self.host}:{self.controller_port}"


@dataclass
class KraftCluster(KafkaCluster):
    """A KRaft cluster of `nodes` brokers and, with `controllers` > 0, that many
    controller-only nodes before them; `controllers=0` is KafkaCluster's combined layout
    (`nodes` nodes, each broker and controller)."""

    controllers: int = 0

    # --- who is what ------------------------------------------------------------------

    @property
    def brokers(self) -> list[KraftNode]:
        return [m for m in self._nodes() if m.is_broker]

    @property
    def quorum(self) -> list[KraftNode]:
        """The controllers: the voters of the metadata quorum."""
        return [m for m in self._nodes() if m.is_controller]

    @property
    def bootstrap(self) -> str:
        """Every broker's CLIENT listener, comma-separated (--bootstrap-server)."""
        return ",".join(m.address for m in self.brokers)

    @property
    def controller_bootstrap(self) -> str:
        """Every controller's CONTROLLER listener (KIP-919's --bootstrap-controller)."""
        return ",".join(m.controller_address for m in self.quorum)

    @property
    def layout(self) -> str:
        return "combined" if self.controllers == 0 else "dedicated"

    def _nodes(self) -> list[KraftNode]:
        return [m for m in self.members if isinstance(m, KraftNode)]

    # --- planning and starting --------------------------------------------------------

    def plan(self) -> KraftCluster:
        if not self.members:
            total = self.controllers + self.nodes
            ports = iter(free_ports(2 * total, self.host))
            for node_id in range(1, total + 1):
                if self.controllers == 0:
                    roles: tuple[str, ...] = COMBINED
                else:
                    roles = (CONTROLLER,) if node_id <= self.controllers else (BROKER,)
                self.members.append(self._node(node_id, roles, next(ports), next(ports)))
        return self

    def _node(self, node_id: int, roles: tuple[str, ...], port: int, second: int) -> KraftNode:
        # combined: CLIENT and CONTROLLER; controller-only: CONTROLLER (port is it);
        # broker-only: CLIENT (its controller_port is never listened on)
        controller_port = port if roles == (CONTROLLER,) else second
        return KraftNode(
            node_id=node_id,
            host=self.host,
            port=port,
            controller_port=controller_port,
            proxied_port=None,
            data_dir=self.work_dir / f"node-{node_id}" / "data",
            log_path=self.work_dir / f"node-{node_id}" / "kafka.log",
            roles=roles,
        )

    def add_broker(self, timeout: float = 120.0) -> KraftNode:
        """One more broker-only node (the next node id), formatted, started and ready."""
        node_id = max(m.node_id for m in self.members) + 1
        port, second = free_ports(2, self.host)
        node = self._node(node_id, (BROKER,), port, second)
        self.members.append(node)
        self._format(node)
        self._launch(node)
        self._wait_ready(node, timeout)
        return node

    def move_broker(self, node_id: int, timeout: float = 120.0) -> str:
        """Broker-only node `node_id` shut down and started again on a new port, with its
        data (an operator moving a broker): its new CLIENT listener's address."""
        member = self.node(node_id)
        assert isinstance(member, KraftNode) and member.roles == (BROKER,), node_id
        self.stop_node(node_id)
        (member.port,) = free_ports(1, self.host)
        config = member.data_dir.parent / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self._server_properties(member).items()))
        self._launch(member)
        self._wait_ready(member, timeout)
        return member.address

    def stop(self, timeout: float = 30.0) -> None:
        """Stops the brokers (a controlled shutdown, which needs the quorum), then the
        controllers; SIGKILL after `timeout`. All at once, the brokers would wait out
        their shutdown for controllers already gone."""
        if self.controllers == 0:
            super().stop(timeout)
            return
        for wave in (self.brokers, self.quorum):
            for member in wave:
                if member.running:
                    assert member.process is not None
                    member.process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout
            for member in wave:
                self._reap(member, max(0.1, deadline - time.monotonic()))

    def _server_properties(self, member: KafkaNode) -> dict[str, str]:
        assert isinstance(member, KraftNode)
        props = super()._server_properties(member)
        voters = ",".join(f"{m.node_id}@{m.host}:{m.controller_port}" for m in self.quorum)
        brokers = len([m for m in self.brokers if m.node_id <= self.controllers + self.nodes])
        replicas = str(min(3, brokers))
        in_sync = "2" if brokers >= 3 else "1"
        props.update(
            {
                "process.roles": ",".join(member.roles),
                "controller.quorum.voters": voters,
                "default.replication.factor": replicas,
                "min.insync.replicas": in_sync,
                "offsets.topic.replication.factor": replicas,
                "transaction.state.log.replication.factor": replicas,
                "transaction.state.log.min.isr": in_sync,
                "share.coordinator.state.topic.replication.factor": replicas,
                "share.coordinator.state.topic.min.isr": in_sync,
            }
        )
        if member.roles == (CONTROLLER,):
            props["listeners"] = f"CONTROLLER://{member.host}:{member.controller_port}"
            props["advertised.listeners"] = props["listeners"]
            del props["inter.broker.listener.name"]
        elif member.roles == (BROKER,):
            props["listeners"] = f"CLIENT://{member.host}:{member.port}"
            props["advertised.listeners"] = props["listeners"]
        props.update(self.properties)
        return props

    def _launch(self, member: KafkaNode) -> None:
        if isinstance(member, KraftNode) and member.roles == (CONTROLLER,):
            saved, self.jvm_opts = self.jvm_opts, CONTROLLER_JVM_OPTS
            try:
                super()._launch(member)
            finally:
                self.jvm_opts = saved
        else:
            super()._launch(member)


def broker_listeners(cluster: KafkaCluster) -> dict[int, str]:
    """node id -> CLIENT listener of every broker (every node of a KafkaCluster)."""
    if isinstance(cluster, KraftCluster):
        return {m.node_id: m.address for m in cluster.brokers}
    return {m.node_id: m.address for m in cluster.members}


def controller_listeners(cluster: KafkaCluster) -> dict[int, str]:
    """node id -> CONTROLLER listener of every controller (every node of a KafkaCluster)."""
    if isinstance(cluster, KraftCluster):
        return {m.node_id: m.controller_address for m in cluster.quorum}
    return {m.node_id: f"{m.host}:{m.controller_port}" for m in cluster.members}


@contextmanager
def kraft_cluster(work_dir: Path, nodes: int, controllers: int) -> Iterator[KraftCluster]:
    """A started KraftCluster of the newest tested release (stopped on leaving)."""
    cluster = KraftCluster(
        libs=kafka_libs(), work_dir=work_dir, nodes=nodes, controllers=controllers
    )
    with cluster:
        yield cluster


# --- the quorum, as the cluster itself says -------------------------------------------------


def describe_quorum(addresses: str) -> dict[str, Any]:
    """The metadata partition of a DescribeQuorum v2 answer (leader, epoch, high watermark,
    voters, observers), asked directly of the first of `addresses` (comma-separated) that
    answers it: a broker forwards it to the active controller, a controller answers it
    only while it is the quorum's leader (NOT_LEADER_OR_FOLLOWER otherwise)."""
    body = {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]}
    frame = encode_request(
        Request(ApiKey.DESCRIBE_QUORUM, 2, {"correlation_id": 1, "client_id": "kraft-test"}, body)
    )
    failures = []
    for address in addresses.split(","):
        host, port = address.rsplit(":", 1)
        try:
            with socket.create_connection((host, int(port)), timeout=10) as sock:
                sock.sendall(struct.pack(">i", len(frame)) + frame)
                (size,) = struct.unpack(">i", _read(sock, 4))
                answer = decode_response(_read(sock, size), ApiKey.DESCRIBE_QUORUM, 2).body
        except OSError as exc:
            failures.append(f"{address}: {exc}")
            continue
        partitions = [p for t in answer["topics"] for p in t["partitions"]]
        errors = [answer["error_code"], *(p["error_code"] for p in partitions)]
        if any(errors) or len(partitions) != 1:
            failures.append(f"{address}: error codes {errors}")
            continue
        result: dict[str, Any] = partitions[0]
        return result
    raise NoQuorumAnswer(f"no DescribeQuorum answer: {failures}")


class NoQuorumAnswer(AssertionError):
    """No address answered DescribeQuorum (an election under way, nodes down)."""


def quorum_leader(addresses: str) -> int:
    """The active controller's node id (-1 while the quorum has none)."""
    leader: int = describe_quorum(addresses)["leader_id"]
    return leader


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed mid-answer")
        data += chunk
    return data
