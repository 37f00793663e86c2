"""The telemetry slice's config section, `telemetry:` in kafkalens.yaml (KIP-714 client
telemetry: observe and collect modes, the subscription the proxy hands out, the bounds
of pushes, instances and series, and the telemetry log)."""

from __future__ import annotations

from proxy.config.language import (
    ConfigError,
    choice,
    config_section,
    flag,
    integer,
    items,
    milliseconds,
    seconds,
    section,
    show,
    size,
    text,
)

TELEMETRY_ANSWERERS = ("proxy", "broker")
# KIP-714 / Kafka's record compression ids, by the names the config uses.
COMPRESSION_TYPES = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _metric_prefix(item: object, key: str) -> str:
    """A metric name prefix; "" subscribes to every metric (KIP-714)."""
    if not isinstance(item, str):
        raise ConfigError(key, f"must be a metric name prefix (a string), got {show(item)}")
    return item


def _compression_type(item: object, key: str) -> str:
    if item not in COMPRESSION_TYPES:
        raise ConfigError(key, f"must be one of {', '.join(COMPRESSION_TYPES)}, got {show(item)}")
    return str(item)


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
        at_most=(1_000_000, "a push's points are read on the event loop"),
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


