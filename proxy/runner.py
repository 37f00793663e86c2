"""Run a whole proxy: listeners, the HTTP endpoint, the upstream probe, signals.

Used by `kafkalens proxy` and `kafkalens demo`; tests use `start_proxy` directly.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from dataclasses import dataclass

from proxy import announce
from proxy.admin.http import AdminServers, Endpoints, start_admin
from proxy.admin.readiness import UpstreamProbe
from proxy.admin.top import TopSource, metrics_families
from proxy.config import Address, ConfigError
from proxy.features import Config, build_hooks, check_supported, proxy_metrics
from proxy.forward import fdlimit
from proxy.forward.allocator import keep_large_buffers
from proxy.forward.server import Drained, Server
from proxy.hooks import Hooks
from proxy.metrics import Metrics
from proxy.signals import reopen_logs_on_sighup, stop_signal
from proxy.signals import wait_for_stop_signal as wait_for_stop_signal  # bench/proxy/bare_proxy.py


@dataclass
class RunningProxy:
    server: Server
    admin: AdminServers
    probe: UpstreamProbe
    metrics: Metrics

    @property
    def http(self) -> asyncio.Server:
        return self.admin.main

    @property
    def http_address(self) -> Address:
        host, port = self.http.sockets[0].getsockname()[:2]
        return Address(str(host), int(port))

    @property
    def clients_address(self) -> Address | None:
        """Where metrics.clients_listen was bound, if it is set."""
        if self.admin.local is None:
            return None
        host, port = self.admin.local.sockets[0].getsockname()[:2]
        return Address(str(host), int(port))

    def readiness(self) -> tuple[bool, str]:
        if not self.server.listening():
            return False, "listeners not bound"
        if self.server.config.mode != "gateway":
            return self.probe.verdict(need_all=True)
        from proxy.gateway.gateway import broker_upstreams

        return self.probe.verdict(need_all=False, needed=broker_upstreams(self.server.listeners))

    async def stop(self, grace: float | None = None) -> Drained:
        """Graceful: stop accepting, drain in-flight requests, close; what was cut."""
        self.admin.close()
        await self.probe.stop()
        return await self.server.shutdown(grace)




async def open_server(
    config: Config, hooks: Hooks, metrics: Metrics, *, reuse_port: bool = False
) -> Server:
    """A started Server: the sidecar listeners, or gateway mode's bootstrap listener
    (its broker listeners open as responses name the brokers, see proxy/gateway/gateway.py)."""
    gateway = None
    if config.mode == "gateway":
        from proxy.gateway.gateway import Gateway
        from proxy.observe.kip1313.config import header_policy

        assert config.gateway is not None  # Config._check: mode gateway has its section
        gateway = Gateway(config.gateway, metrics, header_policy(config.kip1313.header_v3), config.upstream_tls)
        hooks = gateway.wrap(hooks)
    server = Server(config, hooks, metrics, reuse_port=reuse_port)
    try:
        await server.start()
        if gateway is not None:
            await gateway.start(server)
    except BaseException:
        await server.close()  # the listeners bound so far, and the hooks' files
        raise
    return server


async def start_proxy(
    config: Config,
    hooks: Hooks | None = None,
    metrics: Metrics | None = None,
    *,
    probe_now: bool = True,
) -> RunningProxy:
    """`probe_now` False: the upstream probe waits for `running.probe.start()` (the
    demo starts its broker after the proxy, and a broker still starting is no news)."""
    check_supported(config)
    metrics = metrics or proxy_metrics(config)
    hooks = hooks if hooks is not None else build_hooks(config, metrics)
    server = await open_server(config, hooks, metrics)
    probe = UpstreamProbe.of(config, server.upstreams, metrics.upstream_reachability)
    if probe_now:
        probe.start()
    running: RunningProxy | None = None

    def ready() -> tuple[bool, str]:
        assert running is not None
        return running.readiness()

    endpoints = Endpoints(
        metrics=metrics.render,
        ready=ready,
        clients=server.clients,
        metrics_later=metrics.render_off_loop,
        refusals=metrics.admin_refusals,
        top=TopSource(metrics_families(metrics), server.clients, before=metrics.flush).answer,
    )
    try:
        admin = await start_admin(config.metrics, endpoints)
    except ConfigError:
        await probe.stop()
        await server.close()
        raise
    running = RunningProxy(server, admin, probe, metrics)
    return running


def freeze_startup_objects() -> None:
    """For a process that only serves (not for tests: frozen objects are never
    collected as cycles). Move what start-up created (the codec's schema tables above
    all, tens of thousands of objects) out of the cyclic garbage collector's reach. A
    full collection walks every tracked object, milliseconds with them and next to
    nothing without (bench.proxy.choices), and such a collection comes along when a
    large response is decoded, stalling every connection."""
    gc.collect()
    gc.freeze()


async def serve(
    config: Config,
    on_ready: Callable[[RunningProxy], None] | None = None,
    config_path: str | None = None,
) -> None:
    """Run until SIGTERM/SIGINT, then shut down gracefully; SIGHUP reopens the log.
    Says so in the proxy's own log (proxy/announce.py)."""
    stop = stop_signal()  # before the listeners open
    # the probe's first verdict comes after the start line, which says what it probes
    running = await start_proxy(config, probe_now=False)
    freeze_startup_objects()
    keep_large_buffers()
    reopen_logs_on_sighup(running.server.hooks)
    server = running.server
    announce.started(
        config,
        config_path,
        bound=server.bound(),
        metrics=running.http_address,
        clients=running.clients_address,
        max_connections=server.ctx.max_connections,
        open_file_limit=fdlimit.soft_limit(),
    )
    server.announced = True
    running.probe.start()
    if on_ready is not None:
        on_ready(running)
    await stop.wait()
    grace = config.limits.shutdown_grace_seconds
    stopping = announce.Stopping.now(
        stop.name, connections=len(server.connections), requests=server.pending_total(), grace=grace
    )
    cut = await running.stop(grace)
    stopping.done(connections_cut=cut.connections, requests_cut=cut.requests)
