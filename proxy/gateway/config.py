"""The gateway slice's config section, `gateway:` in kafkalens.yaml (mode: gateway): the
bootstrap listeners, the cluster's brokers and controllers, how their addresses are
rewritten, the ports each node is served on, and the route checks."""

from __future__ import annotations

from collections.abc import Mapping

from proxy.config.core import ListenerTLS
from proxy.config.language import (
    Address,
    ConfigError,
    address,
    config_section,
    custom,
    integer,
    items,
    seconds,
    section,
    show,
    text,
    upstream_address,
)


def _broker_ports(raw: object, key: str) -> dict[int, int]:
    if not isinstance(raw, dict):
        raise ConfigError(key, f"must be a mapping node_id: port, got {show(raw)}")
    ports: dict[int, int] = {}
    for node, port in raw.items():
        where = f"{key}.{node}"
        if isinstance(node, bool) or not isinstance(node, int) or node < 0:
            raise ConfigError(where, f"node id must be an integer >= 0, got {node!r}")
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ConfigError(where, f"port must be 1..65535, got {port!r}")
        ports[node] = port
    return ports


@config_section
class GatewayConfig:
    bootstrap_listen: Address = address(
        default=Address("0.0.0.0", 9092), doc="clients bootstrap here", listen=True
    )
    bootstrap_servers: tuple[Address, ...] = items(
        each=upstream_address,
        doc="the cluster's brokers, asked for its metadata",
        at_least_one="must list at least one HOST:PORT",
        example=["broker-0:9092", "broker-1:9092"],
    )
    advertised_host: str = text(
        doc="host put into rewritten node addresses",
        example="kafkalens.example.com",
    )
    listen_host: str = text(default="0.0.0.0", doc="host the per-node listeners bind")
    broker_port_base: int = integer(
        default=9100, minimum=0, at_most=(65535, "a TCP port"),
        doc="broker node N is served on port base + N",
    )  # fmt: skip
    broker_ports: Mapping[int, int] = custom(
        parse=_broker_ports,
        to_yaml=dict,
        default_factory=dict,
        doc="or an explicit map, e.g. {0: 9200, 1: 9201}",
    )
    controller_bootstrap_listen: Address | None = address(
        default=None,
        doc="clients bootstrap on controllers here (KIP-919, --bootstrap-controller)",
        listen=True,
        example="0.0.0.0:9093",
    )
    controller_bootstrap_servers: tuple[Address, ...] = items(
        default=(),
        each=upstream_address,
        doc="the cluster's controllers, for that bootstrap",
        example=["controller-0:9093", "controller-1:9093"],
    )
    controller_port_base: int = integer(
        default=9300, minimum=0, at_most=(65535, "a TCP port"),
        doc="controller node N is served on port base + N",
    )  # fmt: skip
    controller_ports: Mapping[int, int] = custom(
        parse=_broker_ports,
        to_yaml=dict,
        default_factory=dict,
        doc="or an explicit map, e.g. {0: 9400, 1: 9401}",
    )
    max_nodes: int = integer(
        default=1000,
        at_most=(65535, "each node is a listener on a port of its own"),
        doc="brokers, and controllers, served at most; one named past it is not",
    )
    route_check_timeout_seconds: float = seconds(
        default=5.0,
        at_most=(60, "a route waits for it to open or move"),
        doc="a node's new address answers ApiVersions within this, or no route goes there",
    )
    tls: ListenerTLS | None = section(
        ListenerTLS, default=None, doc="clients' side of the bootstrap and every node listener"
    )

    def _check(self, path: str) -> None:
        if (self.controller_bootstrap_listen is None) != (not self.controller_bootstrap_servers):
            which = (
                "controller_bootstrap_servers"
                if self.controller_bootstrap_listen is not None
                else "controller_bootstrap_listen"
            )
            raise ConfigError(
                f"{path}.{which}",
                "controller_bootstrap_listen and controller_bootstrap_servers go together",
            )
        if self.controller_port_base == self.broker_port_base:
            raise ConfigError(
                f"{path}.controller_port_base",
                f"must differ from broker_port_base ({self.broker_port_base}): a node that"
                " is broker and controller would need one port for both",
            )
        owner: dict[int, str] = {}
        for kind, ports in (("broker_ports", self.broker_ports),
                            ("controller_ports", self.controller_ports)):  # fmt: skip
            for node, port in ports.items():
                if port in owner:
                    raise ConfigError(
                        f"{path}.{kind}.{node}", f"port {port} is {owner[port]}'s already"
                    )
                owner[port] = f"{kind}.{node}"
