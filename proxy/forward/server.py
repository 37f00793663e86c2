"""Listeners, accepting, connection limits, timeouts and graceful shutdown.

`Server` owns the listeners (one per configured sidecar listener; gateway mode adds
more at run time with `add_listener`) and the registry of open connections that
the /clients endpoint lists. A sweeper task checks the idle and frame timeouts of
every connection about once a second, which is far cheaper than a timer per
connection re-armed on every read.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from proxy.config import Address, ConfigError, CoreConfig, ListenerTLS
from proxy.forward import fdlimit
from proxy.forward.connection import Connection, ListenerRoute, ProxyContext
from proxy.hooks import Hooks
from proxy.metrics import Metrics
from proxy.tls import client_context, server_context

log = structlog.get_logger("kafkalens.proxy")

BACKLOG = 1024
_DRAIN_POLL_SECONDS = 0.02


@dataclass(frozen=True)
class Drained:
    """What a shutdown's grace period ended with: connections still open (then closed)
    and the requests they awaited answers to."""

    connections: int
    requests: int


@dataclass
class Listener:
    name: str
    listen: Address  # as configured (port may be 0)
    route: ListenerRoute
    server: asyncio.Server
    tls: bool

    @property
    def bound(self) -> Address:
        """The address actually bound (the real port when configured with port 0)."""
        sockname = self.server.sockets[0].getsockname()
        return Address(self.listen.host, int(sockname[1]))


class Server:
    """The proxy's sockets. `start`, then `shutdown` (SIGTERM) or `close`."""

    def __init__(
        self,
        config: CoreConfig,
        hooks: Hooks | None = None,
        metrics: Metrics | None = None,
        *,
        reuse_port: bool = False,
    ) -> None:
        self.config = config
        self.metrics = metrics or Metrics(config.metrics.max_label_values)
        self.ctx = ProxyContext(config.limits, hooks or Hooks(), self.metrics)
        self.listeners: dict[str, Listener] = {}
        self.reuse_port = reuse_port
        self._upstream_tls = client_context(config.upstream_tls) if config.upstream_tls else None
        self._sweeper: asyncio.Task[None] | None = None
        # Set once the proxy said it started (proxy/announce.py lists the listeners then):
        # only listeners opened later (gateway mode's, one per broker) get a line of their own.
        self.announced = False
        # prometheus_client's multiprocess mode (workers > 1) reads samples from files,
        # which a function gauge never writes: the sweeper sets the value instead.
        self._multiprocess = "PROMETHEUS_MULTIPROC_DIR" in os.environ
        if not self._multiprocess:
            self.metrics.pending_requests.set_function(self.pending_total)

    @property
    def hooks(self) -> Hooks:
        return self.ctx.hooks

    async def start(self) -> None:
        """Bind every configured sidecar listener and start the timeout sweeper."""
        self.ctx.open_hangups()
        for listener in self.config.listeners:
            await self.add_listener(listener.name, listener.listen, listener.upstream, listener.tls)
        self.ctx.fd_ceiling = fdlimit.ceiling()
        self.ctx.max_connections = fdlimit.size_max_connections(self.config.limits.max_connections)
        self._start_sweeper()

    async def add_listener(
        self,
        name: str,
        listen: Address,
        upstream: Address | Sequence[Address],
        tls: ListenerTLS | None = None,
        sock: socket.socket | None = None,
    ) -> Listener:
        """Accept on `listen` and forward to `upstream` (several: tried in order).

        Usable while running: gateway mode opens one listener per broker it discovers,
        passing `sock` already bound and listening (then `listen` only names it).
        """
        if name in self.listeners:
            raise ValueError(f"listener {name!r} exists already")
        upstreams = (upstream,) if isinstance(upstream, Address) else tuple(upstream)
        upstream_tls = self.config.upstream_tls
        route = ListenerRoute(
            name,
            upstreams,
            self._upstream_tls,
            upstream_tls.server_hostname if upstream_tls else None,
        )
        ctx = self.ctx
        try:
            where: dict[str, Any] = {"sock": sock}
            if sock is None:
                where = {
                    "host": listen.host,
                    "port": listen.port,
                    "reuse_address": True,
                    "reuse_port": self.reuse_port or None,
                    "family": socket.AF_INET6 if ":" in listen.host else socket.AF_INET,
                }
            server = await asyncio.get_running_loop().create_server(
                lambda: Connection(ctx, route),
                ssl=server_context(tls) if tls else None,
                ssl_handshake_timeout=self.config.limits.connect_timeout_seconds if tls else None,
                backlog=BACKLOG,
                **where,
            )
        except OSError as exc:
            raise ConfigError(
                f"listener {name}", f"cannot listen on {listen}: {exc.strerror or exc}"
            ) from exc
        listener = Listener(name, listen, route, server, tls is not None)
        self.listeners[name] = listener
        ctx.metrics.listener_added(name)
        (log.info if self.announced else log.debug)(
            "listening",
            listener=name,
            listen=str(listener.bound),
            upstream=", ".join(str(address) for address in upstreams),
        )
        return listener

    async def remove_listener(self, name: str) -> None:
        """Stop accepting on a listener; its open connections go on."""
        listener = self.listeners.pop(name)
        listener.server.close()
        await listener.server.wait_closed()

    @property
    def connections(self) -> dict[str, Connection]:
        return self.ctx.connections

    def clients(self) -> list[dict[str, Any]]:
        """Every open connection, for /clients."""
        return [conn.snapshot() for conn in list(self.ctx.connections.values())]

    def pending_total(self) -> int:
        # list(): the /metrics rendering thread calls this (proxy/metrics.py render_off_loop)
        return sum(conn.in_flight for conn in list(self.ctx.connections.values()))

    def upstreams(self) -> set[Address]:
        return {a for listener in self.listeners.values() for a in listener.route.upstreams}

    def listening(self) -> bool:
        return bool(self.listeners) and all(
            listener.server.is_serving() for listener in self.listeners.values()
        )

    def _start_sweeper(self) -> None:
        limits = self.config.limits
        shortest = min(
            limits.idle_timeout_seconds,
            limits.frame_timeout_seconds,
            limits.request_timeout_seconds,
        )
        interval = max(0.05, min(1.0, shortest / 4))
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep(interval))

    async def _sweep(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for conn in list(self.ctx.connections.values()):
                conn.check_timeouts(now)
            if self._multiprocess:
                # the parent's /metrics reads this worker's files, never its registry
                self.metrics.pending_requests.set(self.pending_total())
                self.metrics.flush()

    def bound(self) -> dict[str, Address]:
        """Each listener's name and the address it is bound to."""
        return {name: listener.bound for name, listener in self.listeners.items()}

    async def shutdown(self, grace: float | None = None) -> Drained:
        """Stop accepting, let in-flight requests finish for up to `grace` seconds
        (default limits.shutdown_grace_seconds), then close what is left; returns what
        was cut then."""
        if grace is None:
            grace = self.config.limits.shutdown_grace_seconds
        self.ctx.accepting = False
        for listener in self.listeners.values():
            listener.server.close()
        for conn in list(self.ctx.connections.values()):
            conn.begin_drain()
        deadline = time.monotonic() + grace
        while self.ctx.connections and time.monotonic() < deadline:
            await asyncio.sleep(_DRAIN_POLL_SECONDS)
        cut = Drained(len(self.ctx.connections), self.pending_total())
        if cut.connections:
            log.warning(
                "closing connections after the grace period",
                left=cut.connections,
                requests_in_flight=cut.requests,
                grace_s=grace,
            )
        await self.close()
        return cut

    async def close(self) -> None:
        """Close every listener and connection now."""
        self.ctx.accepting = False
        for conn in list(self.ctx.connections.values()):
            conn.close("shutdown")
        for listener in self.listeners.values():
            listener.server.close()
        self.ctx.close_hangups()
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        try:
            self.hooks.close()
        except Exception:
            log.exception("hooks.close failed")
