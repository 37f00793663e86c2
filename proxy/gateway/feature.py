"""The gateway, registered as a feature (`gateway:` in kafkalens.yaml, used when
mode is gateway): its section, and what check-config says of it."""

from __future__ import annotations

from proxy.gateway.config import GatewayConfig
from proxy.gateway.metrics import GatewayMetrics
from proxy.observe.feature import Feature


def _gateway_summary(gw: GatewayConfig | None) -> list[str]:
    if gw is None:
        return []
    servers = ", ".join(str(a) for a in gw.bootstrap_servers)
    lines = [
        f"gateway: bootstrap {gw.bootstrap_listen} -> {servers}",
        f"gateway: brokers advertised as {gw.advertised_host}, ports from {gw.broker_port_base}",
    ]
    if gw.controller_bootstrap_listen is not None:
        servers = ", ".join(str(a) for a in gw.controller_bootstrap_servers)
        lines.append(f"gateway: controller bootstrap {gw.controller_bootstrap_listen} -> {servers}")
    lines.append(
        f"gateway: controllers advertised as {gw.advertised_host},"
        f" ports from {gw.controller_port_base}"
    )
    if gw.tls is not None:
        lines.append("gateway: client listeners TLS")
    return lines


GATEWAY: Feature[GatewayConfig] = Feature(
    name="gateway",
    section=GatewayConfig,
    default=None,
    doc="Gateway mode (mode: gateway) uses this instead of `listeners`.",
    summary=_gateway_summary,
    metrics=GatewayMetrics,
)
