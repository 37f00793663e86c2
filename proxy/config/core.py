"""The core's sections of kafkalens.yaml: listeners and their TLS, TLS to the brokers,
the admin port, the proxy's own log, the request log, the limits. Each feature's
section is in its own package (proxy/features.py lists them, in the file's order).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from proxy.config.language import (
    ABSENT,
    INT32_MAX,
    Address,
    ConfigError,
    SectionList,
    address,
    api_ref,
    choice,
    config_section,
    declare,
    file_path,
    flag,
    fraction,
    host_name,
    integer,
    integer_or_auto,
    items,
    nonempty_str,
    read_section,
    seconds,
    section,
    show,
    size,
    text,
)

TLS_VERSIONS = ("TLSv1.2", "TLSv1.3")
MODES = ("sidecar", "gateway")
LOG_FORMATS = ("auto", "json", "console")
LOG_LEVELS = ("debug", "info", "warning", "error")
# limits.max_connections when `auto`: what the open-file limit holds, at most this many
AUTO_MAX_CONNECTIONS = 10_000
# request_log.max_string_length's default: client strings in a line are cut to this
MAX_STRING_LENGTH = 256


@config_section
class ListenerTLS:
    cert: str = file_path(
        doc="the server certificate (PEM, with its chain)",
        example="/etc/kafkalens/tls/server.crt",
        missing="is required for TLS",
    )
    key: str = file_path(
        doc="its private key (PEM)",
        example="/etc/kafkalens/tls/server.key",
        missing="is required for TLS",
    )
    client_ca: str | None = file_path(
        default=None,
        doc="verify client certificates with this CA",
        example="/etc/kafkalens/tls/ca.crt",
    )
    require_client_cert: bool = flag(
        default=False, doc="refuse a client without a certificate client_ca signed"
    )
    min_version: str = choice(
        default="TLSv1.2", options=TLS_VERSIONS, doc="TLSv1.2 or TLSv1.3; older is refused"
    )

    def _check(self, path: str) -> None:
        if self.require_client_cert and self.client_ca is None:
            raise ConfigError(f"{path}.client_ca", "is required when require_client_cert is true")


@config_section
class ListenerConfig:
    name: str = text(
        doc="names the listener in metrics labels and log lines",
        pattern=(r"[A-Za-z0-9_.-]{1,64}", "1-64 of A-Z a-z 0-9 _ . -"),
    )
    listen: Address = address(
        doc="the address clients connect to (port 0: any free port)", listen=True
    )
    upstream: Address = address(doc="the broker this listener forwards to")
    tls: ListenerTLS | None = section(
        ListenerTLS, default=None, doc="Client-side TLS termination (omit for plaintext):"
    )


@config_section
class UpstreamTLS:
    ca: str | None = file_path(
        default=None,
        doc="the brokers' CA (default: the system's)",
        example="/etc/kafkalens/tls/ca.crt",
    )
    cert: str | None = file_path(
        default=None, doc="optional client certificate", example="/etc/kafkalens/tls/client.crt"
    )
    key: str | None = file_path(
        default=None, doc="its private key", example="/etc/kafkalens/tls/client.key"
    )
    check_hostname: bool = flag(default=True, doc="the broker's certificate must name it")
    server_hostname: str | None = text(
        default=None, doc="override the name checked (default: upstream host)"
    )
    min_version: str = choice(
        default="TLSv1.2", options=TLS_VERSIONS, doc="TLSv1.2 or TLSv1.3; older is refused"
    )

    def _check(self, path: str) -> None:
        if (self.cert is None) != (self.key is None):
            which = "key" if self.key is None else "cert"
            raise ConfigError(f"{path}.{which}", "cert and key go together")


@config_section
class MetricsConfig:
    listen: Address = address(
        default=Address("0.0.0.0", 9180),
        doc="/metrics, /livez (/healthz), /readyz (and /clients with clients_token_file)",
        listen=True,
    )
    max_label_values: int = integer(
        default=50,
        at_most=(10_000, "each value is a time series of every labelled metric"),
        doc="Client-controlled label values (software name/version pairs) are capped to the"
        ' first N seen; the rest are reported as "other". Upstream addresses (gateway mode,'
        ' named by brokers) get max(N, 64). Api versions the codec does not know are "other".',
    )
    max_error_series: int = integer(
        default=256,
        at_most=(10_000, "each (api, error) pair is a time series"),
        doc="(api, error) pairs with their own series; later pairs, and error codes that are"
        ' not Kafka\'s, count under error="other".',
    )
    max_connections: int = integer(
        default=32,
        at_most=(10_000, "each open admin connection holds a socket and a buffer"),
        doc="Connections open at once on each admin listener. A connection past this (or past"
        " max_connections_per_address) takes the place of the oldest one still waiting for its"
        " request (of its own address, past the per-address limit), which is answered 503:"
        " idle connections cannot shut probes and scrapes out. Only if none is waiting is the"
        " newcomer answered 503. Counted in"
        ' kafkalens_admin_refused_total{reason="too_many_connections"|"per_address_limit"}.',
    )
    max_connections_per_address: int = integer(
        default=8,
        at_most=(10_000, "each open admin connection holds a socket and a buffer"),
        doc="Of those, open at once from one client address (an IPv6 /64).",
    )
    clients_token_file: str | None = file_path(
        default=None,
        doc='/clients on `listen`, for requests with "Authorization: Bearer <token>", the token'
        " being this file's content (surrounding whitespace ignored). The file is read again"
        " when it changes (a rotated Kubernetes Secret); unreadable or empty: refused.",
    )
    clients_listen: Address | None = address(
        default=None,
        loopback=True,
        listen=True,
        doc="/clients (and the other endpoints) on a second listener, without a token. Must be"
        " a loopback address, e.g. 127.0.0.1:9181; it only answers Host headers naming the"
        " loopback address it was reached on, localhost or allowed_hosts.",
    )
    allowed_hosts: tuple[str, ...] | None = items(
        default=None,
        each=host_name,
        doc="Host header names (without port) the admin port answers besides the address a"
        " request came in on and localhost, e.g. [kafkalens.monitoring.svc]; others get 421"
        " (DNS rebinding). [] allows those two only; null answers any Host on `listen`.",
    )
    tls: ListenerTLS | None = section(
        ListenerTLS,
        default=None,
        doc="HTTPS on `listen` (clients_listen stays plain HTTP on loopback):",
    )


@config_section
class LogConfig:
    format: str = choice(
        default="auto",
        options=LOG_FORMATS,
        doc="json: one JSON object a line (ts, level, msg, worker, then the event's fields);"
        " console: for a person at a terminal; auto: console when stderr is a terminal,"
        " else json",
    )
    level: str = choice(
        default="info",
        options=LOG_LEVELS,
        doc="the least severe lines written: debug, info (start, upstream reachability,"
        " stop), warning, error",
    )


@config_section
class RequestLogConfig:
    path: str = text(
        default="-",
        doc='"-" for stdout, or a file (kafkalens proxy creates its folder if missing)',
    )
    max_bytes: int = size(
        default=104857600,
        at_most=(2**40, "1 TiB: the size a log file is rotated at"),
        doc="rotate past this size: requests.log -> requests.log.1 ...",
    )
    backups: int = integer(
        default=5, minimum=0, at_most=(1000, "every rotation renames each backup"),
        doc="rotated files kept",
    )  # fmt: skip
    flush_interval_seconds: float = seconds(
        default=0.5,
        at_most=(3600, "1 hour: lines wait in memory meanwhile"),
        doc="a line is in the file within this long, traffic or not",
    )
    max_queued_bytes: int = size(
        default=16777216,
        at_most=(2**32, "4 GiB held in memory"),
        doc="lines waiting for a slow or failing disk; beyond: dropped, counted",
    )
    sample_rate: float = fraction(
        default=1.0, doc="fraction of successful requests logged (errors always are)"
    )
    apis: tuple[str | int, ...] = items(
        default=(), each=api_ref, doc="only these apis (names like Produce, or keys); [] = all"
    )
    errors_only: bool = flag(default=False, doc="only requests answered with an error")
    record_detail: bool = flag(
        default=False,
        doc="iterate records (decompressing) for per-record stats and header keys",
    )
    header_value_allowlist: tuple[str, ...] = items(
        default=("traceparent", "tracestate"),
        each=nonempty_str,
        doc="record headers whose values are logged (the others: keys only)",
    )
    max_string_length: int = integer(
        default=MAX_STRING_LENGTH,
        at_most=(1_048_576, "1 MiB: client strings are copied into every line"),
        doc="client-controlled strings are cut to this many characters",
    )


@config_section
class Limits:
    max_frame_bytes: int = size(
        default=104857600,
        at_most=(INT32_MAX, "a Kafka frame's length is an int32"),
        doc="the largest frame read from a client or a broker",
    )
    max_frame_bytes_before_auth: int = integer(
        default=1048576,
        at_most=(INT32_MAX, "a Kafka frame's length is an int32"),
        doc="before SASL authentication completes (at most max_frame_bytes)",
    )
    max_connections: int | None = integer_or_auto(
        auto=f"as many as the open-file limit holds, at most {AUTO_MAX_CONNECTIONS}",
        at_most=(1_048_576, "Linux's default nr_open, and each connection needs two sockets"),
        doc="client connections open at once; the soft open-file limit is raised to the"
        " hard one at start, each connection takes two descriptors (client and broker), and"
        " a number the limit cannot hold is warned of at start",
    )
    max_connections_per_ip: int = integer(
        default=1000, at_most=(1_048_576, "Linux's default nr_open"), doc="of those, from one IP"
    )
    max_in_flight_requests: int = integer(
        default=100,
        at_most=(1_000_000, "librdkafka's own maximum per connection"),
        doc="per connection; reading from the client waits beyond",
    )
    request_timeout_seconds: float = seconds(
        default=600.0,
        at_most=(86400, "1 day: a stuck broker must be let go some time"),
        doc="unanswered this long: broker stuck, close; keep above clients'"
        " max.poll.interval.ms (JoinGroup)",
    )
    connect_timeout_seconds: float = seconds(
        default=10.0, at_most=(3600, "1 hour"), doc="to the upstream broker"
    )
    idle_timeout_seconds: float = seconds(
        default=600.0,
        at_most=(86400, "1 day: a dead peer must be let go some time"),
        doc="no bytes either way",
    )
    frame_timeout_seconds: float = seconds(
        default=30.0,
        at_most=(3600, "1 hour: a slow sender holds a frame buffer meanwhile"),
        doc="a started frame must complete within this",
    )
    shutdown_grace_seconds: float = seconds(
        default=25.0,
        at_most=(3600, "1 hour: orchestrators kill a stopping process long before"),
        doc="SIGTERM: drain in-flight requests this long",
    )
    decompression_limit_bytes: int = size(
        default=67108864,
        at_most=(2**32, "4 GiB: a batch is inflated in memory"),
        doc="per batch, when record_detail is on",
    )
    observe_whole_frame_bytes: int = size(
        default=262144,
        minimum=0,
        at_most=(2**30, "1 GiB: a frame assembled whole costs its size per direction"),
        doc="Frames the request log reads are assembled whole up to this size (the most a"
        " direction keeps for it); larger ones are decoded as they stream past, never kept.",
    )
    observe_seconds_per_read: float = seconds(
        default=0.1,
        at_most=(10, "10 s: decoding one read stalls every connection of the process"),
        doc="Decoding one read of such a frame may take this long; past it the frame is a"
        " decode error (counted) and the rest goes on unparsed: the event loop is never held"
        " longer.",
    )
    observe_max_field_bytes: int = size(
        default=65536,
        at_most=(2**30, "1 GiB: a field is held whole while it is parsed"),
        doc="Of a frame decoded as it streams: the most one field (a string, bytes, a tagged"
        " field) may hold while it is parsed (past it: a decode error).",
    )
    observe_max_elements: int = integer(
        default=20000,
        at_most=(10_000_000, "each decoded element costs memory per frame"),
        doc="Of a frame decoded as it streams: the most array elements decoded over the frame"
        " (past it they are read and dropped, counted in"
        " kafkalens_observed_elements_dropped_total and the line's observed_elements_dropped).",
    )
    socket_buffer_bytes: int = size(
        default=1048576,
        minimum=0,
        at_most=(2**28, "256 MiB: the kernel holds this much per socket"),
        doc="SO_SNDBUF and SO_RCVBUF of both sockets of a connection (the kernel doubles it):"
        " bounds the kernel's buffers as the proxy's own are bounded. 0: the kernel's"
        " autotuned sizes (up to net.ipv4.tcp_wmem/tcp_rmem max, MBs per socket). What each"
        " size costs on big frames: bench.proxy.big_frames.",
    )

    def _check(self, path: str) -> None:
        if self.max_frame_bytes_before_auth > self.max_frame_bytes:
            raise ConfigError(
                f"{path}.max_frame_bytes_before_auth",
                f"must not exceed limits.max_frame_bytes ({self.max_frame_bytes}),"
                f" got {self.max_frame_bytes_before_auth}",
            )


DEFAULT_LISTENER = ListenerConfig(
    name="plaintext", listen=Address("0.0.0.0", 9092), upstream=Address("127.0.0.1", 19092)
)


@dataclass(frozen=True)
class Listeners(SectionList):
    """`listeners`: sidecar mode's list of listener sections (left out: `default`);
    gateway mode has none."""

    default: tuple[ListenerConfig, ...] = ()
    reads_absent = True

    def read(self, value: Any, key: str, given: Mapping[str, Any]) -> tuple[ListenerConfig, ...]:
        required = given["mode"] == "sidecar"
        if value is ABSENT or value is None:
            return self.default if required else ()
        if not required:
            raise ConfigError(key, "is for mode sidecar; gateway mode uses `gateway`")
        if not isinstance(value, list) or not value:
            raise ConfigError(key, f"must be a non-empty list, got {show(value)}")
        found = tuple(
            read_section(ListenerConfig, item, f"{key}[{i}]") for i, item in enumerate(value)
        )
        _check_unique(found)
        return found


def _check_unique(listeners: tuple[ListenerConfig, ...]) -> None:
    names: set[str] = set()
    addresses: set[Address] = set()
    for i, listener in enumerate(listeners):
        if listener.name in names:
            raise ConfigError(f"listeners[{i}].name", f"duplicate listener name {listener.name!r}")
        names.add(listener.name)
        if listener.listen in addresses and listener.listen.port != 0:
            raise ConfigError(f"listeners[{i}].listen", f"address {listener.listen} used twice")
        addresses.add(listener.listen)


def listener_list(*, default: tuple[ListenerConfig, ...], doc: str) -> Any:
    return declare(Listeners(ListenerConfig, default), doc, default)


class CoreConfig(Protocol):
    """The core's keys of a whole configuration (proxy/features.py's `Config`), as the
    rooms below the composition read it: they never see a feature's section."""

    @property
    def mode(self) -> str: ...
    @property
    def listeners(self) -> tuple[ListenerConfig, ...]: ...
    @property
    def upstream_tls(self) -> UpstreamTLS | None: ...
    @property
    def metrics(self) -> MetricsConfig: ...
    @property
    def log(self) -> LogConfig: ...
    @property
    def request_log(self) -> RequestLogConfig: ...
    @property
    def limits(self) -> Limits: ...
    @property
    def workers(self) -> int: ...
