"""What `kafkalens proxy` says of itself as it starts and stops, in its own log.

One line when it is serving (`kafkalens started`: version, mode, listeners and their
upstreams, the config file, the request log, the admin addresses, connections the
open-file limit allows), one when a stop signal comes (`stopping`: which signal, the
connections and requests in flight, the grace period) and one when it has stopped
(`stopped`: how long the drain took, and what was cut at the end of the grace period).
Each upstream's reachability is the probe's to say (proxy/admin/readiness.py). Light
on imports: the parent of worker processes says the same.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import structlog

from proxy.config import Address
from proxy.features import Config

log = structlog.get_logger("kafkalens")


def package_version() -> str:
    try:
        return version("kafkalens")
    except PackageNotFoundError:
        return "unknown"


def listener_lines(config: Config, bound: dict[str, Address] | None = None) -> list[str]:
    """`name listen -> upstream` for each listener (the bound address where known: a
    port 0 becomes the port the system gave)."""
    bound = bound or {}
    if config.mode == "gateway" and config.gateway is not None:
        gateway = config.gateway
        listen = bound.get("bootstrap", gateway.bootstrap_listen)
        servers = ", ".join(map(str, gateway.bootstrap_servers))
        ports = (
            f"ports {dict(sorted(gateway.broker_ports.items()))}"
            if gateway.broker_ports
            else f"port {gateway.broker_port_base} + node id"
        )
        return [
            f"bootstrap {listen} -> {servers}",
            f"brokers on {gateway.listen_host}, advertised as {gateway.advertised_host}, {ports}",
        ]
    return [
        f"{listener.name} {bound.get(listener.name, listener.listen)} -> {listener.upstream}"
        for listener in config.listeners
    ]


def upstreams(config: Config) -> list[str]:
    if config.mode == "gateway" and config.gateway is not None:
        return [str(a) for a in config.gateway.bootstrap_servers]
    return sorted({str(listener.upstream) for listener in config.listeners})


def started(
    config: Config,
    config_path: str | None,
    *,
    bound: dict[str, Address] | None = None,
    metrics: Address | None = None,
    clients: Address | None = None,
    max_connections: int | None = None,
    open_file_limit: int | None = None,
) -> None:
    from codec import accel

    scheme = "https" if config.metrics.tls else "http"
    fields: dict[str, Any] = {
        "version": package_version(),
        "mode": config.mode,
        "pid": os.getpid(),
        "workers": config.workers,
        "config": config_path or "built-in defaults",
        "listeners": listener_lines(config, bound),
        "upstreams": upstreams(config),
        "request_log": "stdout" if config.request_log.path == "-" else config.request_log.path,
        "metrics": f"{scheme}://{metrics or config.metrics.listen}/metrics",
    }
    if clients is not None:
        fields["clients"] = f"http://{clients}/clients"
    elif config.metrics.clients_token_file:
        fields["clients"] = f"{scheme}://{metrics or config.metrics.listen}/clients (bearer token)"
    if config.telemetry.log.path is not None:
        fields["telemetry_log"] = config.telemetry.log.path
    if max_connections is not None:
        fields["max_connections"] = max_connections
    if open_file_limit is not None:
        fields["open_file_limit"] = open_file_limit
    fields["codec"] = "C" if accel.ACTIVE else "Python"
    log.info("kafkalens started", **fields)


@dataclass
class Stopping:
    """From the stop signal to the end: what was in flight, what the drain left."""

    signal: str
    began: float

    @classmethod
    def now(cls, signal: str, *, connections: int, requests: int, grace: float, **more: Any) -> Stopping:
        log.info(
            "stopping",
            signal=signal,
            connections=connections,
            requests_in_flight=requests,
            grace_s=grace,
            **more,
        )
        return cls(signal, time.monotonic())

    def done(self, **what: Any) -> None:
        log.info("stopped", took_s=round(time.monotonic() - self.began, 2), **what)
