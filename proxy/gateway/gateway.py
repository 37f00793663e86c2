"""Gateway mode: one bootstrap listener for a whole cluster, one listener per broker.

Clients bootstrap on `gateway.bootstrap_listen`, forwarded to the first of
`bootstrap_servers` that accepts. Every broker address in a response is rewritten
(proxy/gateway/gateway_hooks.py) to `advertised_host` and the port this gateway serves that
broker on: `broker_ports[node_id]`, else `broker_port_base + node_id`. The first
time a broker is named, its listener is opened, forwarding to the broker's real
address as the response gave it; if a later response gives another address, the
listener's new connections go there.

The listener must accept before the client learns its port, or a client quick to
connect would be refused. Rewriting is synchronous, so the socket is bound and
listening right there, and asyncio takes it over a moment later; connections wait
in the kernel's backlog meanwhile.

A port that cannot be bound (in use, say) is logged as an error and counted, and
the address is rewritten anyway: leaving the broker's real address in the response
would let clients go round the gateway, unobserved, while a port nobody serves fails
visibly. The bind is tried again when a later response names that broker.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import time
from dataclasses import dataclass
from typing import Any

import structlog

from proxy.config import Address, ConfigError
from proxy.forward.server import BACKLOG, Listener, Server
from proxy.gateway.gateway_hooks import GatewayHooks
from proxy.hooks import Hooks
from proxy.metrics import Metrics
from proxy.observe.observer import header_policy

log = structlog.get_logger("kafkalens.gateway")

BOOTSTRAP = "bootstrap"
# After a failed bind, responses naming that broker do not try again for this long:
# every client's Metadata would otherwise retry (and log) it.
RETRY_BIND_SECONDS = 5.0


@dataclass
class Broker:
    node_id: int
    port: int  # where the gateway serves it
    upstream: Address  # its real address, as the latest response gave it
    listener: Listener | None = None  # once asyncio serves the bound socket


class Gateway:
    """The broker listeners: `start` opens the bootstrap one, `advertise` the others."""

    def __init__(self, config: Any, metrics: Metrics) -> None:
        assert config.gateway is not None
        self.config = config.gateway
        self.metrics = metrics
        self.policy = header_policy(config.kip1313.header_v3)
        self.brokers: dict[int, Broker] = {}
        self.server: Server | None = None
        self._failed: dict[int, float] = {}  # node id -> when binding its port failed
        self._tasks: set[asyncio.Task[None]] = set()

    def wrap(self, hooks: Hooks) -> Hooks:
        """`hooks`, with every broker address rewritten to this gateway's."""
        return GatewayHooks(hooks, self.advertise, self.policy)

    async def start(self, server: Server) -> None:
        self.server = server
        gw = self.config
        await server.add_listener(BOOTSTRAP, gw.bootstrap_listen, gw.bootstrap_servers, gw.tls)

    def port_for(self, node_id: int) -> int | None:
        port = self.config.broker_ports.get(node_id, self.config.broker_port_base + node_id)
        return port if port <= 65535 else None

    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int] | None:
        """The address clients must use for broker `node_id` (a proxy.gateway.addresses Mapper).

        Its listener is listening before this returns. None (leave the address as it
        is) only when the node id maps to no valid port.
        """
        real = Address(host, port)
        broker = self.brokers.get(node_id)
        if broker is not None:
            self._follow(broker, real)
            return self.config.advertised_host, broker.port
        wanted = self.port_for(node_id)
        if wanted is None:
            if not self._recently_failed(node_id):
                self._failed_to_open(node_id, real, "no_port", "node id maps past port 65535")
            return None
        if (host, port) == (self.config.advertised_host, wanted):
            return None  # already ours (a gateway in front of a gateway): no loop to itself
        broker = self._open(node_id, wanted, real)
        return self.config.advertised_host, broker.port if broker else wanted

    def _follow(self, broker: Broker, real: Address) -> None:
        if real == broker.upstream or real == Address(self.config.advertised_host, broker.port):
            return
        log.info("broker moved", node_id=broker.node_id, old=str(broker.upstream), new=str(real))
        broker.upstream = real
        if broker.listener is not None:
            broker.listener.route.upstreams = (real,)  # for new connections; open ones stay

    def _recently_failed(self, node_id: int) -> bool:
        failed = self._failed.get(node_id)
        return failed is not None and time.monotonic() - failed < RETRY_BIND_SECONDS

    def _open(self, node_id: int, port: int, upstream: Address) -> Broker | None:
        if self._recently_failed(node_id):
            return None
        assert self.server is not None, "Gateway.start first"
        try:
            sock = listening_socket(self.config.listen_host, port, self.server.reuse_port)
        except OSError as exc:
            reason = "port_in_use" if exc.errno == errno.EADDRINUSE else "bind_failed"
            self._failed_to_open(node_id, upstream, reason, exc.strerror or str(exc), port)
            return None
        self._failed.pop(node_id, None)
        broker = Broker(node_id, int(sock.getsockname()[1]), upstream)
        self.brokers[node_id] = broker
        task = asyncio.get_running_loop().create_task(self._serve(broker, sock))
        self._tasks.add(task)  # the loop keeps only a weak reference to a task
        task.add_done_callback(self._tasks.discard)
        return broker

    async def _serve(self, broker: Broker, sock: socket.socket) -> None:
        """Hand the listening socket to asyncio, as a listener of the server."""
        server = self.server
        assert server is not None
        listen = Address(self.config.listen_host, broker.port)
        try:
            listener = await server.add_listener(
                f"broker-{broker.node_id}", listen, broker.upstream, self.config.tls, sock=sock
            )
        except (ConfigError, ValueError) as exc:
            sock.close()
            del self.brokers[broker.node_id]
            self._failed_to_open(
                broker.node_id, broker.upstream, "bind_failed", str(exc), listen.port
            )
            return
        listener.route.upstreams = (broker.upstream,)  # it may have moved meanwhile
        broker.listener = listener
        if not server.ctx.accepting:  # the proxy began stopping meanwhile
            await server.remove_listener(listener.name)

    def _failed_to_open(
        self, node_id: int, upstream: Address, reason: str, why: str, port: int | None = None
    ) -> None:
        self._failed[node_id] = time.monotonic()
        self.metrics.gateway_listener_error(reason)
        log.error(
            "cannot serve a broker: clients sent to it will fail",
            node_id=node_id,
            listen=None if port is None else str(Address(self.config.listen_host, port)),
            upstream=str(upstream),
            reason=reason,
            error=why,
        )


def listening_socket(host: str, port: int, reuse_port: bool) -> socket.socket:
    """A TCP socket bound to host:port and listening, synchronously (OSError if not)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:  # workers > 1: every worker serves the same broker ports
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # as asyncio does
        sock.bind((host, port))
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
