"""A minimal HTTP/1.1 endpoint, the admin port: /metrics, /livez (also /healthz), /readyz,
/clients, /top.

One request per connection (answered with `Connection: close`), GET and HEAD only,
headers capped at 8 KiB and 5 seconds: enough for Prometheus and Kubernetes probes
without a web framework, and nothing a bad client sends can hold resources long.

Whoever floods the port must not deny the kubelet's probes or Prometheus's scrapes
(a liveness probe turned away restarts the pod). Each listener holds at most
`metrics.max_connections` connections, and one client address (an IPv6 /64) at most
`metrics.max_connections_per_address`. A connection that would pass a limit makes room
instead: the oldest connection still waiting for its request (of its own address, at
the per-address limit) is answered 503 and closed. A probe or scrape sends its request
within a millisecond of connecting, so it is never the oldest waiting; idle connections
are. Only when every connection it could replace is already being answered is the
newcomer itself answered 503. Every
refused or replaced connection is counted by reason in `kafkalens_admin_refused_total`
(`per_address_limit`, `too_many_connections`, and the reasons of refused requests).

/metrics, /livez, /healthz and /readyz are open. /livez (Kubernetes' and Kroxylicious's
name for it) and /healthz are the same: the process answers; /readyz adds the listeners
and the upstream. /clients names every connection's address,
client id and SASL principal: it is off unless `metrics.clients_token_file` (then only
with that bearer token) or `metrics.clients_listen` (a second, loopback-only listener)
is set. /top (the busiest clients, apis, groups: proxy/admin/top.py, read by `kafkalens
top`) names clients too and follows the same rule. A listener that checks Host headers (`metrics.allowed_hosts`, and always the
loopback one) answers only names it was given and the address it was reached on, so a
web page cannot reach it through DNS rebinding.
"""

from __future__ import annotations

import asyncio
import hmac
import inspect
import ipaddress
import json
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, cast

from prometheus_client import CONTENT_TYPE_LATEST

from proxy.admin.top import BadQuery, Query, TopAnswer
from proxy.config import Address, ConfigError, MetricsConfig
from proxy.metrics import AdminRefusals

MAX_HEADER_BYTES = 8192
HEADER_TIMEOUT_SECONDS = 5.0
# The kernel's queue of connections not yet accepted (capped by net.core.somaxconn).
# asyncio's default of 100 overflows when a flood connects all at once: the kernel
# then drops SYNs, a probe's among them, and its client retries only after 1 s.
ACCEPT_BACKLOG = 4096
_TEXT = "text/plain; charset=utf-8"
_JSON = "application/json"


@dataclass
class Endpoints:
    """Where the answers come from."""

    metrics: Callable[[], bytes]
    ready: Callable[[], tuple[bool, str]]  # (ready, reason shown in the body)
    clients: Callable[[], list[dict[str, Any]]]
    # Preferred to `metrics` when set: renders without holding up the event loop.
    metrics_later: Callable[[], Awaitable[bytes]] | None = None
    refusals: AdminRefusals = field(default_factory=AdminRefusals)
    top: TopAnswer | None = None  # /top (proxy/admin/top.py)


@dataclass
class Response:
    status: HTTPStatus
    body: bytes
    content_type: str = _TEXT
    headers: tuple[tuple[str, str], ...] = ()
    refused: str | None = None  # the reason counted, for a request the port refuses


class TokenFile:
    """A bearer token kept in a file, read again whenever the file changes (a Kubernetes
    Secret is updated by swapping a symlink: a new inode). Unreadable or empty: no token
    matches."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[int, ...] | None = None
        self._token = b""

    def current(self) -> bytes:
        try:
            st = os.stat(self.path)
            stamp = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
            if stamp != self._stamp:
                with open(self.path, "rb") as f:
                    self._token = f.read(MAX_HEADER_BYTES).strip()
                self._stamp = stamp
        except OSError:
            self._stamp, self._token = None, b""
        return self._token

    def matches(self, presented: bytes) -> bool:
        token = self.current()
        return bool(token) and hmac.compare_digest(token, presented)  # constant time


@dataclass(frozen=True)
class Access:
    """What one listener of the admin port lets through."""

    clients: str = "off"  # "off", "token" (with `token`) or "open"
    token: TokenFile | None = None
    check_host: bool = False
    allowed_hosts: frozenset[str] = field(default_factory=frozenset)

    def clients_refusal(self, headers: dict[str, str]) -> Response | None:
        """None if this request may read /clients, else the answer that refuses it."""
        if self.clients == "open":
            return None
        if self.clients == "off" or self.token is None:
            return Response(
                HTTPStatus.NOT_FOUND,
                b"/clients is off: set metrics.clients_token_file or metrics.clients_listen\n",
                refused="clients_off",
            )
        scheme, _, presented = headers.get("authorization", "").strip().partition(" ")
        if scheme.lower() == "bearer" and self.token.matches(presented.strip().encode("latin-1")):
            return None
        return Response(
            HTTPStatus.UNAUTHORIZED,
            b"/clients needs Authorization: Bearer <token>\n",
            headers=(("WWW-Authenticate", 'Bearer realm="kafkalens"'),),
            refused="unauthorized",
        )

    def host_allowed(self, host: str | None, local_address: str | None) -> bool:
        if not self.check_host:
            return True
        name = host_name(host) if host is not None else None
        if not name:
            return False
        return name in self.allowed_hosts or name == "localhost" or name == local_address


def host_name(host: str) -> str:
    """The name in a Host header, without its port: "[::1]:9180" -> "::1"."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    name = host.rpartition(":")[0] if host.count(":") == 1 else host
    return name.rstrip(".")


def _local_address(transport: asyncio.BaseTransport) -> str | None:
    sockname = transport.get_extra_info("sockname")
    if not sockname:
        return None
    address = str(sockname[0]).lower().partition("%")[0]
    return address.removeprefix("::ffff:") if "." in address else address


def route(
    endpoints: Endpoints,
    method: str,
    target: str,
    access: Access | None = None,
    headers: dict[str, str] | None = None,
) -> Response | Awaitable[Response]:
    if method not in ("GET", "HEAD"):
        return Response(HTTPStatus.METHOD_NOT_ALLOWED, b"GET or HEAD only\n", refused="method")
    path = target.split("?", 1)[0]
    if path == "/metrics":
        if endpoints.metrics_later is not None:
            return _metrics_later(endpoints.metrics_later)
        return Response(HTTPStatus.OK, endpoints.metrics(), CONTENT_TYPE_LATEST)
    if path in ("/livez", "/healthz"):
        return Response(HTTPStatus.OK, b"ok\n")
    if path == "/readyz":
        ready, reason = endpoints.ready()
        status = HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE
        return Response(status, reason.encode() + b"\n")
    if path == "/clients":
        refusal = (access or Access()).clients_refusal(headers or {})
        if refusal is not None:
            return refusal
        body = json.dumps(endpoints.clients(), default=str).encode()
        return Response(HTTPStatus.OK, body, _JSON)
    if path == "/top":
        refusal = (access or Access()).clients_refusal(headers or {})
        if refusal is not None:
            return refusal
        if endpoints.top is None:
            return Response(HTTPStatus.NOT_FOUND, b"/top is not served by this process\n")
        try:
            query = Query.parse(target.partition("?")[2])
        except BadQuery as exc:
            return Response(HTTPStatus.BAD_REQUEST, f"/top: {exc}\n".encode())
        return _top_later(endpoints.top, query)
    return Response(HTTPStatus.NOT_FOUND, b"not found: try /metrics /livez /readyz /clients /top\n")


async def _top_later(top: TopAnswer, query: Query) -> Response:
    body = json.dumps(await top(query), default=str).encode()
    return Response(HTTPStatus.OK, body, _JSON)


async def _metrics_later(render: Callable[[], Awaitable[bytes]]) -> Response:
    return Response(HTTPStatus.OK, await render(), CONTENT_TYPE_LATEST)


TOO_MANY_CONNECTIONS = "too_many_connections"
PER_ADDRESS_LIMIT = "per_address_limit"


def _busy(reason: str) -> Response:
    return Response(
        HTTPStatus.SERVICE_UNAVAILABLE,
        b"too many admin connections\n",
        headers=(("Retry-After", "1"),),
        refused=reason,
    )


def address_key(peername: Any) -> str:
    """Whose connection it is, for the per-address limit: the IPv4 address, or the /64
    of an IPv6 one (one host gets a whole /64 to pick addresses from)."""
    host = str(peername[0]) if peername else ""
    try:
        address = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return host  # not an IP (a Unix socket): one key for all
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


@dataclass(eq=False)
class Gate:
    """The connections one listener has open, by client address, against its limits.
    (Dicts keep insertion order: oldest first. Finding the oldest waiting connection
    passes only the older ones being answered, which are done within milliseconds.)"""

    limit: int = 32
    per_address: int = 8
    conns: dict[HttpProtocol, None] = field(default_factory=dict)  # every open one
    by_address: dict[str, dict[HttpProtocol, None]] = field(default_factory=dict)

    @property
    def open(self) -> int:
        return len(self.conns)

    def admit(self, newcomer: HttpProtocol) -> str | None:
        """Takes `newcomer` in, replacing an idle connection if a limit says so; the
        reason it is refused instead, if every connection it could replace is busy."""
        mine = self.by_address.get(newcomer.address, {})
        if len(mine) >= self.per_address and not self._replace_oldest_waiting(mine, PER_ADDRESS_LIMIT):
            return PER_ADDRESS_LIMIT
        if len(self.conns) >= self.limit and not self._replace_oldest_waiting(self.conns, TOO_MANY_CONNECTIONS):
            return TOO_MANY_CONNECTIONS
        self.by_address.setdefault(newcomer.address, {})[newcomer] = None
        self.conns[newcomer] = None
        return None

    def release(self, conn: HttpProtocol) -> None:
        if conn not in self.conns:
            return  # refused, or released already
        del self.conns[conn]
        mine = self.by_address[conn.address]
        del mine[conn]
        if not mine:
            del self.by_address[conn.address]

    def _replace_oldest_waiting(self, conns: dict[HttpProtocol, None], reason: str) -> bool:
        for conn in conns:
            if conn.waiting:
                self.release(conn)
                conn.replaced(reason)
                return True
        return False


class HttpProtocol(asyncio.Protocol):
    def __init__(self, endpoints: Endpoints, access: Access | None = None, gate: Gate | None = None) -> None:
        self.endpoints = endpoints
        self.access = access or Access()
        self.gate = gate or Gate()
        self.address = ""  # address_key() of the client
        self.waiting = False  # admitted, its request not yet complete: may be replaced
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.later: asyncio.Task[None] | None = None  # an answer being rendered

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.address = address_key(transport.get_extra_info("peername"))
        refused = self.gate.admit(self)
        if refused is not None:
            self._send(_busy(refused))
            return
        self.waiting = True
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(HEADER_TIMEOUT_SECONDS, self._header_timeout)

    def replaced(self, reason: str) -> None:
        """The gate let a newer connection take this one's place (it is no longer counted)."""
        self.waiting = False
        self._send(_busy(reason))

    def _header_timeout(self) -> None:
        self.timer = None
        self.waiting = False
        self.endpoints.refusals.note("header_timeout")
        assert self.transport is not None
        self.transport.abort()

    def data_received(self, data: bytes) -> None:
        if self.timer is None:
            return  # answered already
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > MAX_HEADER_BYTES:
                self._send(
                    Response(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, b"too large\n", refused="header_too_large")
                )
            return
        self._stop_timer()  # the request is in: what is left is ours to answer
        self.waiting = False
        self._answer(bytes(self.buffer[:end]))

    def _answer(self, head: bytes) -> None:
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            self._send(Response(HTTPStatus.BAD_REQUEST, b"bad request\n", refused="bad_request"))
            return
        method, target, _version = parts
        headers = _headers(head)
        assert self.transport is not None
        if headers is None:
            response = Response(HTTPStatus.BAD_REQUEST, b"bad or repeated header\n", refused="bad_request")
        elif not self.access.host_allowed(headers.get("host"), _local_address(self.transport)):
            response = Response(HTTPStatus.MISDIRECTED_REQUEST, b"Host not served here\n", refused="host")
        else:
            try:
                answer = route(self.endpoints, method, target, self.access, headers)
            except Exception as exc:  # an endpoint bug must not kill the server
                answer = _failed(exc)
            if inspect.isawaitable(answer):
                self.later = asyncio.ensure_future(self._send_later(answer, method == "HEAD"))
                return
            response = answer
        self._send(response, head_only=method == "HEAD")

    async def _send_later(self, answer: Awaitable[Response], head_only: bool) -> None:
        try:
            response = await answer
        except Exception as exc:
            response = _failed(exc)
        self._send(response, head_only)

    def _stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _send(self, response: Response, head_only: bool = False) -> None:
        self._stop_timer()
        self.waiting = False
        assert self.transport is not None
        if response.refused is not None:
            self.endpoints.refusals.note(response.refused)
        if self.transport.is_closing():
            return  # the client went away while its answer was made
        head = (
            f"HTTP/1.1 {response.status.value} {response.status.phrase}\r\n"
            f"Content-Type: {response.content_type}\r\n"
            f"Content-Length: {len(response.body)}\r\n"
            + "".join(f"{name}: {value}\r\n" for name, value in response.headers)
            + "Connection: close\r\n\r\n"
        ).encode()
        self.transport.write(head if head_only else head + response.body)
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        self.waiting = False
        self.gate.release(self)


def _failed(exc: Exception) -> Response:
    """An endpoint bug must not kill the server."""
    return Response(HTTPStatus.INTERNAL_SERVER_ERROR, f"{exc!r}\n".encode())


def _headers(head: bytes) -> dict[str, str] | None:
    """Header fields by lower-case name; None if one is malformed or Host/Authorization
    comes twice (which of two would a check have looked at?)."""
    headers: dict[str, str] = {}
    for line in head.split(b"\r\n")[1:]:
        name, colon, value = line.decode("latin-1").partition(":")
        name = name.strip().lower()
        if not colon or not name:
            return None
        if name in headers and name in ("host", "authorization"):
            return None
        headers[name] = value.strip()
    return headers


async def start_http(
    listen: Address,
    endpoints: Endpoints,
    access: Access | None = None,
    ssl: Any = None,
    max_connections: int = 32,
    max_connections_per_address: int = 8,
    gate: Gate | None = None,
) -> asyncio.Server:
    """`gate`, if given, is the listener's (its limits win over the two above)."""
    loop = asyncio.get_running_loop()
    if gate is None:
        gate = Gate(limit=max_connections, per_address=max_connections_per_address)
    return await loop.create_server(
        lambda: HttpProtocol(endpoints, access, gate),
        listen.host,
        listen.port,
        reuse_address=True,
        backlog=ACCEPT_BACKLOG,
        ssl=ssl,
        ssl_handshake_timeout=HEADER_TIMEOUT_SECONDS if ssl is not None else None,
    )


@dataclass
class AdminServers:
    """The admin port's listeners: `main` on metrics.listen, `local` on clients_listen."""

    main: asyncio.Server
    local: asyncio.Server | None = None
    gates: dict[str, Gate] = field(default_factory=dict)  # by config key: what is open

    def close(self) -> None:
        self.main.close()
        if self.local is not None:
            self.local.close()


async def start_admin(config: MetricsConfig, endpoints: Endpoints) -> AdminServers:
    """Open the admin listeners as `config` says; ConfigError naming the key if one
    cannot be opened, or if the token file holds no token."""
    from proxy.tls import server_context

    token = None
    if config.clients_token_file is not None:
        token = TokenFile(config.clients_token_file)
        if not token.current():
            raise ConfigError("metrics.clients_token_file", "holds no token")
    hosts = frozenset(config.allowed_hosts or ())
    main_access = Access(
        clients="token" if token else "off",
        token=token,
        check_host=config.allowed_hosts is not None,
        allowed_hosts=hosts,
    )
    ssl = None
    if config.tls is not None:
        try:
            ssl = server_context(config.tls)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            raise ConfigError("metrics.tls", f"cannot load the certificate: {exc}") from exc
    gates = {
        key: Gate(limit=config.max_connections, per_address=config.max_connections_per_address)
        for key in ("metrics.listen", "metrics.clients_listen")
    }
    main = await _open("metrics.listen", config, endpoints, main_access, gates, ssl)
    if config.clients_listen is None:
        return AdminServers(main, gates={"metrics.listen": gates["metrics.listen"]})
    local_access = Access(clients="open", check_host=True, allowed_hosts=hosts)
    try:
        local = await _open("metrics.clients_listen", config, endpoints, local_access, gates)
    except BaseException:
        main.close()
        raise
    return AdminServers(main, local, gates)


async def _open(
    key: str, config: MetricsConfig, endpoints: Endpoints, access: Access, gates: dict[str, Gate], ssl: Any = None
) -> asyncio.Server:
    listen = config.listen if key == "metrics.listen" else config.clients_listen
    assert listen is not None
    try:
        return await start_http(listen, endpoints, access, ssl, gate=gates[key])
    except OSError as exc:
        raise ConfigError(key, f"cannot listen on {listen}: {exc.strerror or exc}") from exc
