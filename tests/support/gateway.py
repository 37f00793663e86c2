"""A gateway (`mode: gateway`, the hooks `kafkalens proxy` runs) in front of a cluster,
and the raw requests that show what it tells clients about the brokers."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codec import ApiKey, decode_response
from proxy.features import Config, build_hooks, parse_config
from proxy.metrics import Metrics
from proxy.tansu import free_port, free_ports
from support.proxy_harness import LOCAL, ProxyThread, read_frame, request_frame, write_frame

METADATA, FIND_COORDINATOR = ApiKey.METADATA, ApiKey.FIND_COORDINATOR

# --- raw requests -------------------------------------------------------------------------


def ask(sock: socket.socket, api_key: int, version: int, body: bytes) -> dict[str, Any]:
    sock.sendall(request_frame(api_key, version, 1, body))
    return decode_response(read_frame(sock), api_key, version).body


def metadata_v1(sock: socket.socket) -> dict[int, tuple[str, int]]:
    """node id -> (host, port), from a Metadata v1 for no topic in particular."""
    body = ask(sock, METADATA, 1, struct.pack(">i", 0))
    return {b["node_id"]: (b["host"], b["port"]) for b in body["brokers"]}


def find_coordinator_v1(sock: socket.socket, group: str) -> tuple[int, str, int]:
    key = group.encode()
    body = ask(sock, FIND_COORDINATOR, 1, struct.pack(">h", len(key)) + key + b"\x00")
    return body["node_id"], body["host"], body["port"]


def brokers_of(bootstrap: str) -> dict[int, tuple[str, int]]:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        return metadata_v1(sock)


# --- a gateway in front of a cluster --------------------------------------------------------


def gateway_config(
    bootstrap: str, broker_ports: dict[int, int], request_log: str = "-", **gateway: object
) -> Config:
    """A gateway's config on loopback; `gateway` adds keys of its section
    (controller_ports, controller_bootstrap_servers, ...)."""
    return parse_config(
        {
            "mode": "gateway",
            "gateway": {
                "bootstrap_servers": bootstrap.split(","),
                "bootstrap_listen": f"{LOCAL}:0",
                "advertised_host": LOCAL,
                "listen_host": LOCAL,
                "broker_ports": broker_ports,
                **gateway,
            },
            "metrics": {"listen": f"{LOCAL}:0"},
            "request_log": {"path": request_log},
        }
    )


# --- scripted nodes: what a route's check (ApiVersions) finds, and what the tests read ----

BROKER_APIS = (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA, ApiKey.API_VERSIONS)
CONTROLLER_APIS = (ApiKey.FETCH, ApiKey.API_VERSIONS, ApiKey.VOTE, ApiKey.DESCRIBE_QUORUM)


def api_versions_v0(correlation: bytes, api_keys: tuple[int, ...]) -> bytes:
    """An ApiVersions v0 answer (without its length) listing `api_keys`."""
    entries = b"".join(struct.pack(">hhh", key, 0, 0) for key in api_keys)
    return correlation + struct.pack(">hi", 0, len(api_keys)) + entries


def node_listener(payload: bytes, api_keys: tuple[int, ...]) -> Any:
    """A FakeBroker handler for a node's listener: an ApiVersions v0 is answered with
    `api_keys` (what a route's check reads), any other request with `payload`."""

    def handler(sock: socket.socket) -> None:
        while True:
            request = read_frame(sock)
            api_key, version = struct.unpack(">hh", request[:4])
            if (api_key, version) == (ApiKey.API_VERSIONS, 0):
                write_frame(sock, api_versions_v0(request[4:8], api_keys))
            else:
                write_frame(sock, request[4:8] + payload)

    return handler


@dataclass
class Running:
    px: ProxyThread
    ports: dict[int, int]  # node id -> the gateway's port for it
    hook_metrics: Metrics  # what the observing hooks counted


@contextmanager
def gateway_in_front_of(bootstrap: str, tmp_path: Path) -> Iterator[Running]:
    """The gateway, with the hooks `kafkalens proxy` runs, in front of a cluster."""
    ports = {node: free_port() for node in brokers_of(bootstrap)}
    config = gateway_config(bootstrap, ports, str(tmp_path / "requests.log"))
    hook_metrics = Metrics()
    with ProxyThread(config, build_hooks(config, hook_metrics)) as px:
        yield Running(px, ports, hook_metrics)


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def requests_of(metrics: Metrics, api: str) -> float:
    """Requests of `api` the hooks saw, all versions."""
    return sum(
        s.value
        for family in metrics.registry.collect()
        for s in family.samples
        if s.name == "kafkalens_requests_total" and s.labels["api"] == api
    )


def opened(px: ProxyThread, listener: str) -> float:
    """Client connections the listener accepted so far."""
    return sample(px.server.metrics, "kafkalens_connections_opened_total", listener=listener)


def listeners(px: ProxyThread) -> list[str]:
    return px.call(lambda: sorted(px.server.listeners))


def assert_only_gateway_addresses(
    brokers: dict[int, tuple[str, int]], ports: dict[int, int]
) -> None:
    assert brokers == {node: (LOCAL, port) for node, port in ports.items()}


def spread_topic(producer: object, stem: str) -> str:
    """A topic whose partition leaders sit on more than one broker: the mock cluster
    places the leaders of an auto-created topic itself, not always spread."""
    for attempt in range(8):
        topic = f"{stem}-{attempt}"
        metadata = producer.list_topics(topic, timeout=10)  # type: ignore[attr-defined]
        if len({p.leader for p in metadata.topics[topic].partitions.values()}) > 1:
            return topic
    raise AssertionError("the mock cluster put every leader of 8 topics on one broker")


def routes(px: ProxyThread) -> dict[str, str]:
    """Every node route a running gateway has: listener name -> where it forwards."""

    def read() -> dict[str, str]:
        return {
            name: ",".join(str(a) for a in listener.route.upstreams)
            for name, listener in px.server.listeners.items()
            if name.startswith(("broker-", "controller-")) and name != "controller-bootstrap"
        }

    return px.call(read)


def listener_port(px: ProxyThread, name: str) -> int:
    return px.call(lambda: px.server.listeners[name].bound.port)


def api_keys_at(address: str) -> set[int]:
    """The api keys a listener answers (ApiVersions v0), asked directly."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        body = ask(sock, ApiKey.API_VERSIONS, 0, b"")
    assert body["error_code"] == 0, body
    return {entry["api_key"] for entry in body["api_keys"]}


# --- a gateway in front of a KRaft cluster of any layout ------------------------------------


@dataclass
class LayoutGateway:
    """A gateway (the hooks `kafkalens proxy` runs, a request log) in front of a cluster,
    serving its brokers and its controllers on ports of their own, with a bootstrap for
    each kind; and where each node really is, to check what clients are told."""

    layout: str  # combined, dedicated
    px: Any  # support.observed.ObservedProxy
    broker_ports: dict[int, int]
    controller_ports: dict[int, int]
    brokers: dict[int, str]  # node id -> the broker's own listener
    controllers: dict[int, str]  # node id -> the controller's own listener

    @property
    def bootstrap(self) -> str:
        return f"{LOCAL}:{listener_port(self.px, 'bootstrap')}"

    @property
    def controller_bootstrap(self) -> str:
        return f"{LOCAL}:{listener_port(self.px, 'controller-bootstrap')}"

    @property
    def direct(self) -> str:
        return ",".join(self.brokers.values())

    @property
    def direct_controllers(self) -> str:
        return ",".join(self.controllers.values())

    def expected_routes(self, brokers: dict[int, str] | None = None) -> dict[str, str]:
        """What `routes` must be once every node was named: each route to its own node."""
        want = {f"broker-{n}": a for n, a in (brokers or self.brokers).items()}
        return want | {f"controller-{n}": a for n, a in self.controllers.items()}

    def gateway_address(self, kind: str, node_id: int) -> str:
        ports = self.broker_ports if kind == "broker" else self.controller_ports
        return f"{LOCAL}:{ports[node_id]}"


@contextmanager
def layout_gateway(
    layout: str, brokers: dict[int, str], controllers: dict[int, str], log_path: Path
) -> Iterator[LayoutGateway]:
    from support.observed import ObservedProxy

    # room for a broker that joins later: node ids up to 16 have a port planned
    ports = iter(free_ports(16 + len(controllers), LOCAL))
    broker_ports = {node: next(ports) for node in range(1, 17)}
    controller_ports = {node: next(ports) for node in controllers}
    config = gateway_config(
        ",".join(brokers.values()),
        broker_ports,
        str(log_path),
        controller_bootstrap_listen=f"{LOCAL}:0",
        controller_bootstrap_servers=list(controllers.values()),
        controller_ports=controller_ports,
    )
    with ObservedProxy(config) as px:
        yield LayoutGateway(layout, px, broker_ports, controller_ports, brokers, controllers)
