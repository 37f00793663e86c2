"""kafkalens's features, registered: the whole configuration file, `Config`, made of the
core's sections (proxy/config/core.py) and each feature's (in its own package), one
field a feature. Its reader and writer (`parse_config`, `load_config`,
`documented_file`, the views `SECTION_SCHEMAS` and `MAXIMA`), `check-config`'s summary,
and the list of features, `FEATURES`, in the order of their fields, which is the order
of the sections in kafkalens.yaml and of the links in the observers' chain.

Adding a feature is adding its package and one line here (ARCHITECTURE.md, "Add a
feature"):

    lag: LagConfig = LAG.declare()

The core never imports this module, nor any feature; the composition (runner.py,
workers.py, cli.py, ...) does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from codec.stream import StreamLimits
from proxy.config.core import (
    DEFAULT_LISTENER,
    MODES,
    Limits,
    ListenerConfig,
    LogConfig,
    MetricsConfig,
    RequestLogConfig,
    UpstreamTLS,
    listener_list,
)
from proxy.config.file import Overrides, documented, load, parse
from proxy.config.language import (
    ConfigError,
    choice,
    config_section,
    declared,
    integer,
    maxima,
    section,
    section_schemas,
)
from proxy.gateway.config import GatewayConfig
from proxy.gateway.feature import GATEWAY
from proxy.metrics import Metrics
from proxy.observe.chain import Observer, Shared
from proxy.observe.client_security.config import ClientSecurityConfig
from proxy.observe.client_security.feature import CLIENT_SECURITY
from proxy.observe.feature import Feature
from proxy.observe.instance_join import InstanceJoins
from proxy.observe.kip1313.config import Kip1313Config, header_policy
from proxy.observe.kip1313.feature import KIP1313
from proxy.observe.lag.config import LagConfig
from proxy.observe.lag.feature import LAG
from proxy.observe.observing_hooks import ObservingHooks
from proxy.observe.request_log import LineSink, RequestLog
from proxy.observe.summary import SummaryOptions, TopicIds
from proxy.observe.telemetry.config import TelemetryConfig
from proxy.observe.telemetry.feature import TELEMETRY
from proxy.observe.telemetry.hooks import TelemetryLink

__all__ = [
    "FEATURES", "MAXIMA", "SECTION_SCHEMAS", "Config", "GatewayConfig", "Overrides", "build_hooks",
    "check_shareable", "check_supported", "documented_file", "load_config", "metric_names", "parse_config",
    "proxy_metrics", "summary",
]  # fmt: skip


@config_section
class Config:
    """The whole of kafkalens.yaml: the core's sections, and one field a feature."""

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
    gateway: GatewayConfig | None = GATEWAY.declare()
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
    kip1313: Kip1313Config = KIP1313.declare()
    telemetry: TelemetryConfig = TELEMETRY.declare()
    workers: int = integer(
        default=1,
        at_most=(
            256,
            "each worker is a whole process; fixed rather than per core so a file validates"
            " alike on every machine",
        ),
        doc="Worker processes sharing the listen ports (SO_REUSEPORT) to use more than one core.",
    )
    lag: LagConfig = LAG.declare()
    client_security: ClientSecurityConfig = CLIENT_SECURITY.declare()

    def _check(self, path: str) -> None:
        if self.mode == "gateway" and self.gateway is None:
            raise ConfigError("gateway", "is required when mode is gateway")


# The features, in the order of their fields.
FEATURES: tuple[Feature[Any], ...] = tuple(
    key.owner for _field, key in declared(Config).values() if isinstance(key.owner, Feature)
)


def proxy_metrics(config: Config, build_version: str | None = None) -> Metrics:
    """The metrics of a proxy of `config`: the core's, and every feature's."""
    metrics = Metrics(
        config.metrics.max_label_values, build_version, config.metrics.max_error_series
    )
    for feature in FEATURES:
        if feature.metrics is not None:
            metrics.of(feature.metrics)
    return metrics


def build_hooks(config: Config, metrics: Metrics) -> ObservingHooks:
    """The request log's hooks `kafkalens proxy` runs, and their chain: each feature's
    link, in the order of the features."""
    log_config = config.request_log
    sink = LineSink(
        log_config.path,
        log_config.max_bytes,
        log_config.backups,
        flush_interval=log_config.flush_interval_seconds,
        max_queued_bytes=log_config.max_queued_bytes,
        metrics=metrics,
    )
    request_log = RequestLog(sink, log_config.sample_rate, log_config.apis, log_config.errors_only)
    summary = SummaryOptions(
        record_detail=log_config.record_detail,
        header_value_allowlist=frozenset(log_config.header_value_allowlist),
        max_string_length=log_config.max_string_length,
        decompression_limit=config.limits.decompression_limit_bytes,
    )
    # which requests use header v3: the kip1313 section's, for the core's decoding too
    shared = Shared(metrics, TopicIds(), summary, header_policy(config.kip1313.header_v3))
    links: list[Observer] = []
    for feature in FEATURES:
        if feature.link is not None and (link := feature.link(feature.of(config), shared)) is not None:
            links.append(link)
    # A client's connections share an instance id: keys for four times the telemetry
    # instances kept
    telemetry_on = any(isinstance(link, TelemetryLink) for link in links)
    max_keys = 4 * (config.telemetry.max_instances if telemetry_on else 1000)
    limits = config.limits
    return ObservingHooks(
        metrics,
        request_log,
        summary,
        shared.policy,
        StreamLimits(
            record_detail_bytes=limits.observe_whole_frame_bytes if log_config.record_detail else 0,
            decompression_limit=limits.decompression_limit_bytes,
            max_seconds_per_piece=limits.observe_seconds_per_read,
            max_field_bytes=limits.observe_max_field_bytes,
            max_elements=limits.observe_max_elements,
        ),
        links=tuple(links),
        topic_ids=shared.topic_ids,
        joins=InstanceJoins(max_keys=max_keys),
    )


def metric_names() -> set[str]:
    """Every sample name kafkalens can expose (dashboards and alerts are checked against
    it)."""
    return proxy_metrics(Config()).metric_names()

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



def _listener_lines(listeners: tuple[ListenerConfig, ...]) -> list[str]:
    return [
        f"listener {listener.name}: {listener.listen}{' (TLS)' if listener.tls else ''} -> {listener.upstream}"
        for listener in listeners
    ]


def _metrics_lines(metrics: MetricsConfig) -> list[str]:
    scheme = "https" if metrics.tls else "http"
    lines = [f"metrics: {scheme}://{metrics.listen}/metrics"]
    if metrics.clients_token_file:
        lines.append(f"clients: {scheme}://{metrics.listen}/clients (bearer token)")
    if metrics.clients_listen:
        lines.append(f"clients: http://{metrics.clients_listen}/clients")
    if not (metrics.clients_token_file or metrics.clients_listen):
        lines.append("clients: off")
    return lines


# What check-config says of each core section (mode and workers open the summary).
_CORE_LINES: dict[str, Callable[[Any], list[str]]] = {
    "listeners": _listener_lines,
    "upstream_tls": lambda tls: [] if tls is None else ["upstream TLS: on"],
    "metrics": _metrics_lines,
    "request_log": lambda request_log: [f"request log: {request_log.path}"],
}


def summary(config: Config) -> list[str]:
    """Human lines describing a valid config, for `kafkalens check-config`: each
    section's, in the file's order."""
    lines = [f"mode: {config.mode}, workers: {config.workers}"]
    for name, (_field, key) in declared(Config).items():
        value = getattr(config, name)
        if isinstance(key.owner, Feature):
            lines.extend(key.owner.summary(value))
        elif name in _CORE_LINES:
            lines.extend(_CORE_LINES[name](value))
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

Written by `python -m proxy.config` from the keys declared in proxy/config/core.py
and in each feature's package (proxy/features.py lists them)."""


def documented_file() -> str:
    """config/kafkalens.yaml: every key with its default, documentation and bounds."""
    return documented(Config, DOCUMENTED_FILE_HEADER)
