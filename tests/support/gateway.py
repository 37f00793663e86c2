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
from proxy.features import Config, parse_config
from proxy.metrics import Metrics
from proxy.observe.observer import build_hooks
from proxy.tansu import free_port
from support.proxy_harness import LOCAL, ProxyThread, read_frame, request_frame

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


def gateway_config(bootstrap: str, broker_ports: dict[int, int], request_log: str = "-") -> Config:
    return parse_config(
        {
            "mode": "gateway",
            "gateway": {
                "bootstrap_servers": bootstrap.split(","),
                "bootstrap_listen": f"{LOCAL}:0",
                "advertised_host": LOCAL,
                "listen_host": LOCAL,
                "broker_ports": broker_ports,
            },
            "metrics": {"listen": f"{LOCAL}:0"},
            "request_log": {"path": request_log},
        }
    )


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
