"""kafkalens.yaml: the config language (language.py), the core's sections (core.py),
the reader and writer of a whole file (file.py); and, here for now, the features'
sections and the whole file's `Config`.

Adding a key is one field in its section plus its use, then regenerating the file:

    max_share_groups: int = integer(
        default=1000, at_most=(100_000, "each share group is a time series"),
        doc="Share groups with their own series; later ones count under group=\"other\".",
    )

A new section is a new `@config_section` dataclass and one `section(...)` field in its
parent; a cross-key check is its `_check`. Command-line flags are applied on top of the
file through `Overrides`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from proxy.config.core import *  # noqa: F403
from proxy.config.core import DEFAULT_LISTENER, MODES, MetricsConfig, listener_list
from proxy.config.core import Limits as Limits
from proxy.config.core import ListenerConfig as ListenerConfig
from proxy.config.core import ListenerTLS as ListenerTLS
from proxy.config.core import LogConfig as LogConfig
from proxy.config.core import RequestLogConfig as RequestLogConfig
from proxy.config.core import UpstreamTLS as UpstreamTLS
from proxy.config.file import Overrides as Overrides
from proxy.config.file import documented, load, parse
from proxy.config.language import *  # noqa: F403
from proxy.config.language import (
    Address,
    ConfigError,
    address,
    api_ref,
    choice,
    config_section,
    custom,
    flag,
    integer,
    items,
    maxima,
    milliseconds,
    seconds,
    section,
    section_schemas,
    show,
    size,
    text,
    upstream_address,
)

ENFORCEMENTS = ("log", "reject")
TELEMETRY_ANSWERERS = ("proxy", "broker")
# KIP-714 / Kafka's record compression ids, by the names the config uses.
COMPRESSION_TYPES = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_VERSION_SPEC = re.compile(r"^\s*(\d+)\s*(\+|-\s*(\d+))?\s*$")


@dataclass(frozen=True)
class HeaderV3Rule:
    """Request header v3 for `api` (a name like "Metadata" or a key) from `min_version`."""

    api: str | int
    min_version: int
    max_version: int | None = None  # None: every version from min_version on


def _metric_prefix(item: object, key: str) -> str:
    """A metric name prefix; "" subscribes to every metric (KIP-714)."""
    if not isinstance(item, str):
        raise ConfigError(key, f"must be a metric name prefix (a string), got {show(item)}")
    return item


def _compression_type(item: object, key: str) -> str:
    if item not in COMPRESSION_TYPES:
        raise ConfigError(key, f"must be one of {', '.join(COMPRESSION_TYPES)}, got {show(item)}")
    return str(item)


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


def _header_v3(raw: object, key: str) -> tuple[HeaderV3Rule, ...]:
    if not isinstance(raw, dict):
        raise ConfigError(key, f"must be a mapping api: versions, got {show(raw)}")
    return tuple(_header_v3_rule(api, spec, f"{key}.{api}") for api, spec in raw.items())


def _header_v3_rule(api: object, spec: object, key: str) -> HeaderV3Rule:
    """`spec`: "3+" (3 and later), "3-5", "3" or 3."""
    name = api_ref(api, key)
    if isinstance(spec, int) and not isinstance(spec, bool) and spec >= 0:
        return HeaderV3Rule(name, spec, spec)
    match = _VERSION_SPEC.match(spec) if isinstance(spec, str) else None
    if match is None:
        raise ConfigError(key, f'must be versions like "3+", "3-5" or 3, got {spec!r}')
    low = int(match.group(1))
    if match.group(2) == "+":
        return HeaderV3Rule(name, low, None)
    high = int(match.group(3)) if match.group(3) else low
    if high < low:
        raise ConfigError(key, f"version range {spec!r} is empty")
    return HeaderV3Rule(name, low, high)


def _header_v3_yaml(rules: tuple[HeaderV3Rule, ...]) -> dict[object, object]:
    def versions(rule: HeaderV3Rule) -> object:
        if rule.max_version is None:
            return f"{rule.min_version}+"
        if rule.max_version == rule.min_version:
            return rule.min_version
        return f"{rule.min_version}-{rule.max_version}"

    return {rule.api: versions(rule) for rule in rules}


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
        doc="host put into rewritten broker addresses", example="kafkalens.example.com"
    )
    listen_host: str = text(default="0.0.0.0", doc="host the per-broker listeners bind")
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
    tls: ListenerTLS | None = section(
        ListenerTLS, default=None, doc="clients' side of the bootstrap and every broker listener"
    )


@config_section
class LagConfig:
    """Consumer lag, share groups and topic traffic from the Fetch, ShareFetch,
    ShareAcknowledge, group heartbeat, OffsetCommit and Produce exchanges seen."""

    enabled: bool = flag(default=True, doc="off: none of the metrics and log fields above")
    max_topics: int = integer(
        default=1000,
        at_most=(100_000, "each (group, topic) pair is a time series"),
        doc="(group, topic) pairs of the per-topic lag and share counters; topics of traffic."
        " Past this cap (and"
        ' each below) the label values are "other" (summed), counted in'
        " kafkalens_lag_series_dropped_total{kind}; the per-topic lag sums every partition.",
    )
    max_partitions: int = integer(
        default=10000,
        at_most=(1_000_000, "each partition of each kind is a time series"),
        doc="per-partition series of each kind; traffic label sets",
    )
    max_clients: int = integer(
        default=1000,
        at_most=(100_000, "each client is a label value of every partition it reads"),
        doc="client label values of per-partition lag; principals of traffic",
    )
    max_tracked: int = integer(
        default=200000,
        at_most=(10_000_000, "each tracked partition costs about 200 bytes per table"),
        doc='partitions kept in memory per table (kind "tracked" past it)',
    )
    max_logged_partitions: int = integer(
        default=1000,
        minimum=0,
        at_most=(1_000_000, "each is an object in a request log line"),
        doc="Elements of one log line's positions, committed, acquired, acknowledgements,"
        " fetch_partitions, forgotten_partitions, assignment and owned_partitions lists (the"
        " rest counted in the line and in kafkalens_log_lists_truncated_total{field})",
    )
    max_logged_ranges: int = integer(
        default=1000,
        minimum=0,
        at_most=(1_000_000, "each is an array in a request log line"),
        doc="share-group offset ranges listed in one log line (the rest counted)",
    )
    max_range_offsets: int = integer(
        default=1_000_000,
        at_most=(2**31 - 1, "a broker locks at most a few thousand records of a partition"),
        doc="An acquired or acknowledged offset range longer than this is malformed: not"
        ' counted (kafkalens_share_ranges_invalid_total{reason="too_long"})',
    )
    idle_expiry_seconds: float = seconds(
        default=1800.0,
        at_most=(7 * 86400, "1 week: a consumer that left must be let go some time"),
        doc="A consumer's series goes this long after its last fetch of the partition, a"
        " group's committed lag this long after its last commit: longer than the lag alerts"
        " need (deploy/prometheus/alerts.yml: 20-30 minutes of growth) to page on a consumer"
        " that stopped altogether while its producers go on.",
    )


@config_section
class Kip1313Config:
    enforcement: str = choice(
        default="log",
        options=ENFORCEMENTS,
        doc="log (warning + counter) | reject (INVALID_REQUEST, error 42)",
    )
    header_v3: tuple[HeaderV3Rule, ...] = custom(
        parse=_header_v3,
        to_yaml=_header_v3_yaml,
        default=(),
        doc="(api, versions) that use request header v3 beyond the KIP's own three RPCs, for"
        " brokers that adopt it for every RPC. A version past the schema's newest reuses the"
        ' newest body. Example: {DeleteGroups: "3+", Metadata: "14+"}',
    )


@config_section
class TelemetryLogConfig:
    """The telemetry log: one JSON line per pushed data point (None: no file)."""

    path: str | None = text(default=None, doc='a file, "-" for stdout, or null (off)')
    max_bytes: int = size(
        default=104857600,
        at_most=(2**40, "1 TiB: the size a log file is rotated at"),
        doc="rotate past this size",
    )
    backups: int = integer(
        default=5, minimum=0, at_most=(1000, "every rotation renames each backup"),
        doc="rotated files kept",
    )  # fmt: skip
    flush_interval_seconds: float = seconds(
        default=1.0,
        at_most=(3600, "1 hour: lines wait in memory meanwhile"),
        doc="a line is in the file within this long",
    )
    max_queued_bytes: int = size(
        default=16777216,
        at_most=(2**32, "4 GiB held in memory"),
        doc="lines waiting for the disk; beyond: dropped, counted",
    )


@config_section
class TelemetryConfig:
    """KIP-714 client telemetry (proxy/observe/telemetry/pushes.py)."""

    observe: bool = flag(default=True, doc="decode the PushTelemetry requests forwarded")
    collect: bool = flag(default=False, doc="the proxy answers telemetry itself")
    answer: str = choice(
        default="proxy",
        options=TELEMETRY_ANSWERERS,
        doc="collect mode, broker that supports telemetry: who answers",
    )
    metrics: tuple[str, ...] = items(
        default=("org.apache.kafka.",),
        each=_metric_prefix,
        doc='metric name prefixes requested; [""] = every metric',
    )
    push_interval_ms: int = milliseconds(
        default=30000,
        minimum=100,
        at_most=(86_400_000, "1 day: a series expires a few intervals after its last push"),
        doc="the interval the proxy's subscription asks clients to push at",
    )
    compression_types: tuple[str, ...] = items(
        default=("zstd", "lz4", "gzip", "snappy"),
        each=_compression_type,
        doc="accepted for pushes (none always is)",
    )
    max_push_bytes: int = size(
        default=1048576,
        at_most=(64 * 2**20, "64 MiB: a push is held whole while it is decoded"),
        doc="a larger push is not decoded (counted); collect: TelemetryMaxBytes",
    )
    max_decompressed_bytes: int = size(
        default=8388608,
        at_most=(2**30, "1 GiB: a push is inflated in memory"),
        doc="a push inflating past this is not decoded (counted)",
    )
    max_instances: int = integer(
        default=1000,
        at_most=(1_000_000, "each client instance holds its latest values"),
        doc="client instances with series; more are dropped, counted",
    )
    max_series: int = integer(
        default=20000,
        at_most=(10_000_000, "each series is a line of /metrics"),
        doc="client metric series in all; more are dropped, counted",
    )
    max_points_per_push: int = integer(
        default=2000,
        at_most=(1_000_000, "a push's points are read on the event loop, ~20 us each"),
        doc="read of one push; more are counted",
    )
    max_attributes: int = integer(
        default=16,
        minimum=0,
        at_most=(1000, "each attribute is a label of a series"),
        doc="data point attributes kept as labels; more are dropped",
    )
    expire_after_intervals: int = integer(
        default=3,
        at_most=(1000, "series of gone clients linger this many push intervals"),
        doc="series of a client that stopped pushing go after this many intervals",
    )
    log: TelemetryLogConfig = section(
        TelemetryLogConfig,
        default=TelemetryLogConfig(),
        doc='One JSON line per pushed data point (event "client_metric"), rotated and'
        " reopened on SIGHUP like the request log.",
    )


@config_section
class Config:
    mode: str = choice(
        default="sidecar",
        options=MODES,
        doc="sidecar: each listener forwards to one upstream broker, frames pass unchanged"
        " (the broker advertises the sidecar's address itself).\n"
        "gateway: one bootstrap listener for a whole cluster plus one listener per broker;"
        " broker addresses in responses are rewritten to the proxy's.",
    )
    listeners: tuple[ListenerConfig, ...] = listener_list(
        default=(DEFAULT_LISTENER,),
        doc="Sidecar listeners: client-facing address -> one upstream broker.",
    )
    gateway: GatewayConfig | None = section(
        GatewayConfig,
        default=None,
        doc="Gateway mode (mode: gateway) uses this instead of `listeners`.",
    )
    upstream_tls: UpstreamTLS | None = section(
        UpstreamTLS, default=None, doc="TLS from the proxy to the brokers (omit for plaintext)."
    )
    metrics: MetricsConfig = section(
        MetricsConfig,
        default=MetricsConfig(),
        doc="The admin port: /metrics, /livez (/healthz), /readyz (open, for Prometheus and Kubernetes)"
        " and /clients (every connection's address, client id and SASL principal: off unless"
        " clients_token_file or clients_listen is set).",
    )
    log: LogConfig = section(
        LogConfig,
        default=LogConfig(),
        doc="The proxy's own log, on stderr (the request log is apart: a file, or stdout as"
        ' "-"): a line at start (version, listeners, upstreams, config, request log, metrics),'
        " each upstream's reachability as it changes (with the reason, and how long it was"
        " down), the drain and stop, and warnings.",
    )
    request_log: RequestLogConfig = section(
        RequestLogConfig,
        default=RequestLogConfig(),
        doc="One JSON line per request, to stdout or to a file rotated by size (max_bytes,"
        " backups) and reopened on SIGHUP (logrotate: deploy/logrotate/kafkalens).",
    )
    limits: Limits = section(
        Limits,
        default=Limits(),
        doc="What a client or a broker can make the proxy hold, and how long it waits.",
    )
    kip1313: Kip1313Config = section(
        Kip1313Config,
        default=Kip1313Config(),
        doc="KIP-1313: a connection whose first request used request header v3 must carry the"
        " same non-zero client instance id on every later request (SaslHandshake excepted).",
    )
    telemetry: TelemetryConfig = section(
        TelemetryConfig,
        default=TelemetryConfig(),
        doc="KIP-714 client telemetry (clients' own metrics: librdkafka >= 2.5, Java >= 3.7)."
        " observe: decode the PushTelemetry requests the proxy forwards (when the broker hands"
        " out subscriptions). collect: the proxy answers GetTelemetrySubscriptions and"
        " PushTelemetry itself (and adds them to the ApiVersions it returns), so every client"
        " gets a client instance id and its metrics reach /metrics on any broker. State is per"
        " worker process (workers > 1: each keeps the clients that pushed to it).",
    )
    workers: int = integer(
        default=1,
        at_most=(
            256,
            "each worker is a whole process; fixed rather than per core so a file validates"
            " alike on every machine",
        ),
        doc="Worker processes sharing the listen ports (SO_REUSEPORT) to use more than one core.",
    )
    lag: LagConfig = section(
        LagConfig,
        default=LagConfig(),
        doc="Consumer lag and topic traffic from the Fetch, OffsetCommit and Produce the proxy"
        ' forwards (README "Consumer lag and topic traffic"): the'
        " kafkalens_consumer_lag_records, kafkalens_committed_lag_records,"
        " kafkalens_follower_lag_records and kafkalens_topic_* metrics, and the request log's"
        ' "positions" and "committed" fields.',
    )

    def _check(self, path: str) -> None:
        if self.mode == "gateway" and self.gateway is None:
            raise ConfigError("gateway", "is required when mode is gateway")


# The section class of each mapping of the file, by its path with list indices as []
# ("listeners[].tls"), so that an unknown key is named before any other problem.
SECTION_SCHEMAS: dict[str, type] = section_schemas(Config)

# The largest value of every number in the file, and why, by key path (as above): past
# it a value no longer tunes a protection but switches it off.
MAXIMA: dict[str, tuple[float, str]] = maxima(Config)


def parse_config(data: object) -> Config:
    """Validate an already-loaded YAML document."""
    return parse(Config, data)


def load_config(path: str | Path | None = None, overrides: Overrides | None = None) -> Config:
    """The configuration from `path` (None: the defaults) with `overrides` applied."""
    return load(Config, path, overrides)


def summary(config: Config) -> list[str]:
    """Human lines describing a valid config, for `kafkalens check-config`."""
    lines = [f"mode: {config.mode}, workers: {config.workers}"]
    for listener in config.listeners:
        tls = " (TLS)" if listener.tls else ""
        lines.append(f"listener {listener.name}: {listener.listen}{tls} -> {listener.upstream}")
    if config.gateway is not None:
        gw = config.gateway
        servers = ", ".join(str(a) for a in gw.bootstrap_servers)
        lines.append(f"gateway: bootstrap {gw.bootstrap_listen} -> {servers}")
        lines.append(
            f"gateway: brokers advertised as {gw.advertised_host}, ports from {gw.broker_port_base}"
        )
        if gw.tls is not None:
            lines.append("gateway: client listeners TLS")
    if config.upstream_tls is not None:
        lines.append("upstream TLS: on")
    metrics = config.metrics
    scheme = "https" if metrics.tls else "http"
    lines.append(f"metrics: {scheme}://{metrics.listen}/metrics")
    if metrics.clients_token_file:
        lines.append(f"clients: {scheme}://{metrics.listen}/clients (bearer token)")
    if metrics.clients_listen:
        lines.append(f"clients: http://{metrics.clients_listen}/clients")
    if not (metrics.clients_token_file or metrics.clients_listen):
        lines.append("clients: off")
    lines.append(f"request log: {config.request_log.path}")
    lines.append(f"kip1313 enforcement: {config.kip1313.enforcement}")
    telemetry = config.telemetry
    mode = "collect" if telemetry.collect else "observe" if telemetry.observe else "off"
    lines.append(f"telemetry: {mode}, log {telemetry.log.path or 'off'}")
    lines.append(f"consumer lag and topic traffic: {'on' if config.lag.enabled else 'off'}")
    return lines


def check_supported(config: Config) -> None:
    """What the configuration may ask for that this build cannot do yet."""
    if config.workers > 1:
        check_shareable(config)


def check_shareable(config: Config) -> None:
    """Port 0 would give every worker a different port."""
    for i, listener in enumerate(config.listeners):
        if listener.listen.port == 0:
            raise ConfigError(f"listeners[{i}].listen", "port 0 cannot be shared by workers > 1")
    if config.mode == "gateway" and config.gateway and config.gateway.bootstrap_listen.port == 0:
        raise ConfigError("gateway.bootstrap_listen", "port 0 cannot be shared by workers > 1")


DOCUMENTED_FILE_HEADER = """\
kafkalens configuration: the documented default.

Every key is optional; the values below are the defaults. Command-line flags
(`kafkalens proxy --listen ... --upstream ... --metrics ... --request-log ...`)
override the file. Validate a file without starting: `kafkalens check-config FILE`
(add --check-ports to also bind the listen addresses); it also checks api names,
that request_log.path can be written and that certificates load. Unknown keys are
errors. Every number has a finite maximum, named with its reason when exceeded and
given below with each key: timeouts 1 hour (idle_timeout_seconds 1 day), frame
sizes 2^31-1 (Kafka's int32), decompression_limit_bytes 4 GiB, request_log.max_bytes
1 TiB, connections 1048576, workers 256.
Sizes (the keys ending in _bytes) are bytes, or a number with a unit: 64KiB, 10MB,
1GiB (KiB, MiB, GiB, TiB are 1024s; KB, MB, GB, TB 1000s). Durations (the keys ending
in _seconds, and telemetry.push_interval_ms) are seconds (milliseconds), or a number
with a unit: 500ms, 30s, 10m, 1h, 1d, 1h30m.
In the container image the file is read from /etc/kafkalens/kafkalens.yaml.

Written by `python -m proxy.config` from the keys declared in proxy/config.py."""


def documented_file() -> str:
    """config/kafkalens.yaml: every key with its default, documentation and bounds."""
    return documented(Config, DOCUMENTED_FILE_HEADER)
