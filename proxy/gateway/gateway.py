"""Gateway mode: bootstrap listeners for a whole cluster, one route per node and kind.

Clients bootstrap on `gateway.bootstrap_listen`, forwarded to the first of
`bootstrap_servers` that accepts (and, with `controller_bootstrap_listen`, on the
controllers: KIP-919's `--bootstrap-controller`). Every node address in a response is
rewritten (proxy/gateway/gateway_hooks.py) to `advertised_host` and the port of the
route this gateway serves that node's endpoint on. A KRaft node may be broker,
controller or both, each on a listener of its own under one node id: the kind of each
address is declared in proxy/gateway/addresses.py, and each kind has its own routes and
ports (brokers `broker_ports[node_id]`, else `broker_port_base + node_id`; controllers
`controller_ports[...]`, else `controller_port_base + node_id`). A controller's endpoint
therefore never moves a broker's route, nor the reverse.

A route opens the first time a response names its node, forwarding to the address the
response gave. The route's listener must accept before the client learns its port, or a
client quick to connect would be refused: rewriting is synchronous, so the socket is
bound and listening right there, and asyncio takes it over once the address has been
checked (proxy/gateway/route_check.py: a broker route goes only to a listener that
answers Produce and Fetch, a controller route only to one that answers Vote);
connections wait in the kernel's backlog meanwhile.

A route changes only for a reason: only the messages that are the cluster's word on
where its nodes are (Metadata and DescribeCluster for brokers, DescribeCluster and
DescribeQuorum for controllers: `Endpoints.moves`) move a route, and only to an address
that passes the check. A move is logged with the address before and after and the
message that said so, and counted (`kafkalens_gateway_routes_moved_total`); a move or an
opening refused by the check is logged and counted
(`kafkalens_gateway_routes_refused_total`), and the route stays where it was (an opening
refused: no route, its port refuses connections). Open connections never move.

At most `max_nodes` nodes of each kind are served (each is a listener, named by the
cluster's answers); a node named past that is logged and counted, and its address
rewritten to its port all the same, which nothing serves. A port that cannot be bound
(in use, say) is logged as an error and counted, and the address is rewritten anyway: leaving the node's real address in the response would let
clients go round the gateway, unobserved, while a port nobody serves fails visibly. The
bind is tried again when a later response names that node. A port that is already
another route's (the broker and controller port ranges overlap for these node ids) is
refused the same way, but the address is left as the cluster gave it, as is one of a
node id that maps past port 65535: the gateway has no port to give, and sending clients
to another node's route would be worse than sending them to the node.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from codec import HeaderPolicy
from proxy.config import Address, ConfigError, UpstreamTLS
from proxy.forward.server import BACKLOG, Listener, Server
from proxy.gateway.addresses import BROKER, CONTROLLER, EndpointKind, Named
from proxy.gateway.config import GatewayConfig
from proxy.gateway.gateway_hooks import GatewayHooks
from proxy.gateway.metrics import GatewayMetrics
from proxy.gateway.route_check import Verdict, listener_api_keys, verdict
from proxy.hooks import Hooks
from proxy.metrics import Metrics
from proxy.tls import client_context

log = structlog.get_logger("kafkalens.gateway")

BOOTSTRAP = "bootstrap"
CONTROLLER_BOOTSTRAP = "controller-bootstrap"
# After a failed bind, or a refused check, responses naming that node do not try again
# for this long: every client's Metadata would otherwise retry (and log) it.
RETRY_BIND_SECONDS = 5.0


@dataclass
class Route:
    """Where the gateway serves one node's endpoint of one kind."""

    kind: EndpointKind
    node_id: int
    port: int  # where the gateway serves it
    upstream: Address  # the node's address, as the cluster last said (and the check passed)
    listener: Listener | None = None  # once asyncio serves the bound socket
    checking: Address | None = None  # an address the route may move to, being checked
    refused_at: float | None = None  # when a move was last refused (monotonic)

    @property
    def name(self) -> str:
        return listener_name(self.kind, self.node_id)


def listener_name(kind: EndpointKind, node_id: int) -> str:
    return f"{kind.value}-{node_id}"


class Gateway:
    """The node listeners: `start` opens the bootstrap ones, `advertise` the others."""

    def __init__(
        self, config: GatewayConfig, metrics: Metrics, policy: HeaderPolicy, upstream_tls: UpstreamTLS | None
    ) -> None:
        """`policy`: which requests use header v3 (the kip1313 section's); `upstream_tls`:
        how the route checks reach the nodes, as the routes' connections do."""
        self.config = config
        self.metrics = metrics
        self.counts = metrics.of(GatewayMetrics)
        self.policy = policy
        self.routes: dict[EndpointKind, dict[int, Route]] = {BROKER: {}, CONTROLLER: {}}
        self.server: Server | None = None
        self._failed: dict[tuple[EndpointKind, int], float] = {}  # -> when opening it failed
        self._check_tls = client_context(upstream_tls) if upstream_tls else None
        self._check_hostname = upstream_tls.server_hostname if upstream_tls else None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def brokers(self) -> dict[int, Route]:
        return self.routes[BROKER]

    @property
    def controllers(self) -> dict[int, Route]:
        return self.routes[CONTROLLER]

    def wrap(self, hooks: Hooks) -> Hooks:
        """`hooks`, with every node address rewritten to this gateway's."""
        return GatewayHooks(hooks, self.advertise, self.route_kind, self.policy)

    async def start(self, server: Server) -> None:
        self.server = server
        gw = self.config
        await server.add_listener(BOOTSTRAP, gw.bootstrap_listen, gw.bootstrap_servers, gw.tls)
        if gw.controller_bootstrap_listen is not None:
            await server.add_listener(
                CONTROLLER_BOOTSTRAP,
                gw.controller_bootstrap_listen,
                gw.controller_bootstrap_servers,
                gw.tls,
            )

    @staticmethod
    def route_kind(listener: str) -> EndpointKind:
        """The kind of endpoint the listener `listener` forwards to."""
        return CONTROLLER if listener.startswith(CONTROLLER.value) else BROKER

    def port_for(self, kind: EndpointKind, node_id: int) -> int | None:
        gw = self.config
        if kind is BROKER:
            port = gw.broker_ports.get(node_id, gw.broker_port_base + node_id)
        else:
            port = gw.controller_ports.get(node_id, gw.controller_port_base + node_id)
        return port if port <= 65535 else None

    def snapshot(self) -> dict[str, str]:
        """Every route's listener name -> where it forwards (for tests and logs)."""
        return {
            route.name: str(route.upstream)
            for table in self.routes.values()
            for route in table.values()
        }

    def advertise(self, named: Named) -> tuple[str, int] | None:
        """The address clients must use for what `named` names (a Mapper of
        proxy.gateway.addresses). Its listener is bound and listening before this
        returns. None (leave the address as it is) only when the gateway has no port
        for it."""
        real = Address(named.host, named.port)
        route = self.routes[named.kind].get(named.node_id)
        if route is not None:
            if named.moves:
                self._consider_move(route, real, named.source)
            return self.config.advertised_host, route.port
        wanted = self.port_for(named.kind, named.node_id)
        key = (named.kind, named.node_id)
        if wanted is None:
            if not self._recently_failed(key):
                self._failed_to_open(key, real, "no_port", "node id maps past port 65535")
            return None
        if (named.host, named.port) == (self.config.advertised_host, wanted):
            return None  # already ours (a gateway in front of a gateway): no loop to itself
        owner = self._route_on(wanted)
        if owner is not None:
            if not self._recently_failed(key):
                why = f"port {wanted} serves {owner.name} already"
                self._failed_to_open(key, real, "port_conflict", why, wanted)
            return None
        if len(self.routes[named.kind]) >= self.config.max_nodes:
            if not self._recently_failed(key):
                why = f"gateway.max_nodes ({self.config.max_nodes}) {named.kind.value}s served"
                self._failed_to_open(key, real, "too_many_nodes", why, wanted)
            return self.config.advertised_host, wanted  # unserved: its clients fail visibly
        route = self._open(named.kind, named.node_id, wanted, real, named.source)
        return self.config.advertised_host, route.port if route else wanted

    def _route_on(self, port: int) -> Route | None:
        for table in self.routes.values():
            for route in table.values():
                if route.port == port:
                    return route
        return None

    # --- moving a route ------------------------------------------------------------------

    def _consider_move(self, route: Route, real: Address, source: str) -> None:
        if real in (route.upstream, route.checking):
            return
        if real == Address(self.config.advertised_host, route.port):
            return  # our own address (a response rewritten already)
        if route.refused_at is not None and time.monotonic() - route.refused_at < RETRY_BIND_SECONDS:
            return
        route.checking = real
        self._spawn(self._move(route, real, source))

    async def _move(self, route: Route, real: Address, source: str) -> None:
        found = await self._check(route.kind, real)
        route.checking = None
        if found is not Verdict.FITS:
            route.refused_at = time.monotonic()
            self.counts.route_refused(route.kind.value, found.value)
            log.warning(
                "route not moved: the new address failed its check",
                route=route.name,
                upstream=str(route.upstream),
                refused=str(real),
                reason=found.value,
                named_by=source,
            )
            return
        old, route.upstream, route.refused_at = route.upstream, real, None
        if route.listener is not None:
            route.listener.route.upstreams = (real,)  # for new connections; open ones stay
        self.counts.route_moved(route.kind.value)
        log.info("route moved", route=route.name, old=str(old), new=str(real), named_by=source)

    async def _check(self, kind: EndpointKind, address: Address) -> Verdict:
        api_keys = await listener_api_keys(
            address, self.config.route_check_timeout_seconds, self._check_tls, self._check_hostname
        )
        return verdict(kind, api_keys)

    # --- opening a route -----------------------------------------------------------------

    def _recently_failed(self, key: tuple[EndpointKind, int]) -> bool:
        failed = self._failed.get(key)
        return failed is not None and time.monotonic() - failed < RETRY_BIND_SECONDS

    def _open(
        self, kind: EndpointKind, node_id: int, port: int, upstream: Address, source: str
    ) -> Route | None:
        key = (kind, node_id)
        if self._recently_failed(key):
            return None
        assert self.server is not None, "Gateway.start first"
        try:
            sock = listening_socket(self.config.listen_host, port, self.server.reuse_port)
        except OSError as exc:
            reason = "port_in_use" if exc.errno == errno.EADDRINUSE else "bind_failed"
            self._failed_to_open(key, upstream, reason, exc.strerror or str(exc), port)
            return None
        self._failed.pop(key, None)
        route = Route(kind, node_id, int(sock.getsockname()[1]), upstream)
        self.routes[kind][node_id] = route
        self._spawn(self._serve(route, sock, source))
        return route

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)  # the loop keeps only a weak reference to a task
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, route: Route, sock: socket.socket, source: str) -> None:
        """Check the route's address, then hand the listening socket to asyncio, as a
        listener of the server. A node that cannot be reached is served all the same
        (the cluster named it: its clients' connections fail, counted as upstream
        failures, until it is back); one that answers as another kind is refused."""
        server = self.server
        assert server is not None
        first = route.upstream
        found = await self._check(route.kind, first)
        if found is Verdict.WRONG_KIND:
            sock.close()
            del self.routes[route.kind][route.node_id]
            self._failed[(route.kind, route.node_id)] = time.monotonic()
            self.counts.route_refused(route.kind.value, found.value)
            log.error(
                "route not opened: the address failed its check",
                route=route.name,
                refused=str(first),
                reason=found.value,
                named_by=source,
            )
            return
        if found is Verdict.UNREACHABLE:
            log.warning(
                "route opened unchecked: the node did not answer",
                route=route.name,
                upstream=str(first),
                named_by=source,
            )
        listen = Address(self.config.listen_host, route.port)
        try:
            listener = await server.add_listener(
                route.name, listen, route.upstream, self.config.tls, sock=sock
            )
        except (ConfigError, ValueError) as exc:
            sock.close()
            del self.routes[route.kind][route.node_id]
            self._failed_to_open(
                (route.kind, route.node_id), route.upstream, "bind_failed", str(exc), listen.port
            )
            return
        listener.route.upstreams = (route.upstream,)  # it may have moved meanwhile
        route.listener = listener
        self.counts.routes.labels(kind=route.kind.value).set(
            len(self.routes[route.kind])
        )
        if not server.ctx.accepting:  # the proxy began stopping meanwhile
            await server.remove_listener(listener.name)

    def _failed_to_open(
        self,
        key: tuple[EndpointKind, int],
        upstream: Address,
        reason: str,
        why: str,
        port: int | None = None,
    ) -> None:
        kind, node_id = key
        now = time.monotonic()
        if len(self._failed) >= 2 * self.config.max_nodes:  # node ids are the peer's to name
            self._failed = {k: t for k, t in self._failed.items() if now - t < RETRY_BIND_SECONDS}
            if len(self._failed) >= 2 * self.config.max_nodes:
                self._failed.clear()
        self._failed[key] = now
        self.counts.listener_error(reason)
        log.error(
            f"cannot serve a {kind.value}: clients sent to it will fail",
            route=listener_name(kind, node_id),
            listen=None if port is None else str(Address(self.config.listen_host, port)),
            upstream=str(upstream),
            reason=reason,
            error=why,
        )


def broker_upstreams(listeners: Mapping[str, Listener]) -> set[Address]:
    """The brokers' addresses among a gateway's listeners' (the bootstrap's and the broker
    routes'): the gateway is ready while one of them answers, whatever its controllers do."""
    return {
        address
        for name, listener in listeners.items()
        if Gateway.route_kind(name) is BROKER
        for address in listener.route.upstreams
    }


def listening_socket(host: str, port: int, reuse_port: bool) -> socket.socket:
    """A TCP socket bound to host:port and listening, synchronously (OSError if not)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:  # workers > 1: every worker serves the same node ports
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
