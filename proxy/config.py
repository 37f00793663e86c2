"""Load and validate kafkalens.yaml into frozen dataclasses.

config/kafkalens.yaml is the contract: every key there, with its default, and no
other key. A `ConfigError` names the key path and what is wrong, e.g.
``limits.max_frame_bytes: must be a positive integer, got -1``. Command-line flags
are applied on top of the file through `Overrides`.

Unknown keys are named before anything else is checked, with the nearest known key
suggested; every number has a finite upper bound (`MAXIMA`, with the reason shown
in the error), so no value can switch a protection off.

Hand-written rather than a schema library: msgspec (already a pipeline extra)
reports ``Expected `int` <= 2147483647 - at `$.limits.max_frame_bytes` `` and
``Object contains unknown field `upstrem` ``, with no suggestion and no reason,
and would turn these dataclasses into Structs; pydantic v2 adds pydantic-core
(~5 MB) to the image, prints multi-line errors, and still needs the host:port,
version-range and cross-key checks written by hand. Both would need the same
custom layer for suggestions and reasons that `_Section` already is.

Checks of the machine rather than the file (log path writable, certificates
loadable, api names known, ports free) are in proxy/preflight.py.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

TLS_VERSIONS = ("TLSv1.2", "TLSv1.3")
MODES = ("sidecar", "gateway")
ENFORCEMENTS = ("log", "reject")
TELEMETRY_ANSWERERS = ("proxy", "broker")
# KIP-714 / Kafka's record compression ids, by the names the config uses.
COMPRESSION_TYPES = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_MISSING = object()
_VERSION_SPEC = re.compile(r"^\s*(\d+)\s*(\+|-\s*(\d+))?\s*$")


class ConfigError(ValueError):
    """A bad configuration value; `str()` is ``<key path>: <what is wrong>``."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class ListenerTLS:
    cert: str
    key: str
    client_ca: str | None = None
    require_client_cert: bool = False
    min_version: str = "TLSv1.2"


@dataclass(frozen=True)
class ListenerConfig:
    name: str
    listen: Address
    upstream: Address
    tls: ListenerTLS | None = None


@dataclass(frozen=True)
class GatewayConfig:
    bootstrap_servers: tuple[Address, ...]
    advertised_host: str
    bootstrap_listen: Address = Address("0.0.0.0", 9092)
    listen_host: str = "0.0.0.0"
    broker_port_base: int = 9100
    broker_ports: Mapping[int, int] = field(default_factory=dict)
    tls: ListenerTLS | None = None  # clients' side of the bootstrap and every broker listener


@dataclass(frozen=True)
class UpstreamTLS:
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    check_hostname: bool = True
    server_hostname: str | None = None
    min_version: str = "TLSv1.2"


@dataclass(frozen=True)
class MetricsConfig:
    listen: Address = Address("0.0.0.0", 9180)
    max_label_values: int = 50
    max_error_series: int = 256
    clients_token_file: str | None = None  # /clients on `listen` with this bearer token
    clients_listen: Address | None = None  # /clients on this loopback listener
    allowed_hosts: tuple[str, ...] | None = None  # None: any Host header on `listen`
    tls: ListenerTLS | None = None
    max_connections: int = 32  # open at once, per admin listener
    max_connections_per_address: int = 8  # of those, from one client address (IPv6: /64)


@dataclass(frozen=True)
class RequestLogConfig:
    path: str = "-"
    max_bytes: int = 104857600
    backups: int = 5
    sample_rate: float = 1.0
    apis: tuple[str | int, ...] = ()
    errors_only: bool = False
    record_detail: bool = False
    header_value_allowlist: tuple[str, ...] = ("traceparent", "tracestate")
    max_string_length: int = 256
    flush_interval_seconds: float = 0.5
    max_queued_bytes: int = 16777216


@dataclass(frozen=True)
class Limits:
    max_frame_bytes: int = 104857600
    max_frame_bytes_before_auth: int = 1048576
    max_connections: int = 10000
    max_connections_per_ip: int = 1000
    max_in_flight_requests: int = 100
    request_timeout_seconds: float = 600.0
    connect_timeout_seconds: float = 10.0
    idle_timeout_seconds: float = 600.0
    frame_timeout_seconds: float = 30.0
    shutdown_grace_seconds: float = 25.0
    decompression_limit_bytes: int = 67108864
    observe_whole_frame_bytes: int = 262144
    observe_seconds_per_read: float = 0.1
    observe_max_field_bytes: int = 65536
    observe_max_elements: int = 20000
    socket_buffer_bytes: int = 1048576


@dataclass(frozen=True)
class LagConfig:
    """Consumer lag, share groups and topic traffic from the Fetch, ShareFetch,
    ShareAcknowledge, group heartbeat, OffsetCommit and Produce exchanges seen."""

    enabled: bool = True
    max_topics: int = 1000  # (group, topic) pairs of the per-topic lag; topics of traffic
    max_partitions: int = 10000  # per-partition series of each kind; traffic label sets
    max_clients: int = 1000  # client label values of per-partition lag; principals of traffic
    max_tracked: int = 200000  # entries of each lag table kept in memory
    # elements of one log line's positions, committed, acquired, acknowledgements,
    # assignment and owned_partitions lists
    max_logged_partitions: int = 1000
    max_logged_ranges: int = 1000  # share-group offset ranges listed in one log line
    max_range_offsets: int = 1_000_000  # a longer acquired or acknowledged range is not counted
    # a consumer's (and a commit's) series goes this long after its last fetch (commit): past
    # the lag alerts' 20-30 minutes, so a consumer that stopped altogether is alerted on
    idle_expiry_seconds: float = 1800.0


@dataclass(frozen=True)
class HeaderV3Rule:
    """Request header v3 for `api` (a name like "Metadata" or a key) from `min_version`."""

    api: str | int
    min_version: int
    max_version: int | None = None  # None: every version from min_version on


@dataclass(frozen=True)
class Kip1313Config:
    enforcement: str = "log"
    header_v3: tuple[HeaderV3Rule, ...] = ()


@dataclass(frozen=True)
class TelemetryLogConfig:
    """The telemetry log: one JSON line per pushed data point (None: no file)."""

    path: str | None = None
    max_bytes: int = 104857600
    backups: int = 5
    flush_interval_seconds: float = 1.0
    max_queued_bytes: int = 16777216


@dataclass(frozen=True)
class TelemetryConfig:
    """KIP-714 client telemetry (proxy/observe/telemetry.py)."""

    observe: bool = True
    collect: bool = False
    answer: str = "proxy"  # collect mode, broker that supports telemetry: who answers
    metrics: tuple[str, ...] = ("org.apache.kafka.",)
    push_interval_ms: int = 30000
    compression_types: tuple[str, ...] = ("zstd", "lz4", "gzip", "snappy")
    max_push_bytes: int = 1048576
    max_decompressed_bytes: int = 8388608
    max_instances: int = 1000
    max_series: int = 20000
    max_points_per_push: int = 2000
    max_attributes: int = 16
    expire_after_intervals: int = 3
    log: TelemetryLogConfig = TelemetryLogConfig()


DEFAULT_LISTENER = ListenerConfig(
    name="plaintext", listen=Address("0.0.0.0", 9092), upstream=Address("127.0.0.1", 19092)
)


@dataclass(frozen=True)
class Config:
    mode: str = "sidecar"
    listeners: tuple[ListenerConfig, ...] = (DEFAULT_LISTENER,)
    gateway: GatewayConfig | None = None
    upstream_tls: UpstreamTLS | None = None
    metrics: MetricsConfig = MetricsConfig()
    request_log: RequestLogConfig = RequestLogConfig()
    limits: Limits = Limits()
    kip1313: Kip1313Config = Kip1313Config()
    telemetry: TelemetryConfig = TelemetryConfig()
    workers: int = 1
    lag: LagConfig = LagConfig()


@dataclass(frozen=True)
class Overrides:
    """Command-line flags; each replaces its key in the file (None: keep the file's)."""

    listen: str | None = None
    upstream: str | None = None
    metrics: str | None = None
    request_log: str | None = None


# The dataclass whose fields are the keys of each section, so that an unknown key is
# named before any other problem (`upstrem` is a typo, not a missing `upstream`).
# Paths as in MAXIMA; a new section is one line, a new key of a section nothing.
SECTION_SCHEMAS: dict[str, type] = {
    "": Config,
    "listeners[]": ListenerConfig,
    "listeners[].tls": ListenerTLS,
    "gateway": GatewayConfig,
    "gateway.tls": ListenerTLS,
    "metrics.tls": ListenerTLS,
    "upstream_tls": UpstreamTLS,
    "metrics": MetricsConfig,
    "request_log": RequestLogConfig,
    "limits": Limits,
    "kip1313": Kip1313Config,
    "telemetry": TelemetryConfig,
    "telemetry.log": TelemetryLogConfig,
    "lag": LagConfig,
}

# The largest value of every number in the file, and why: past it a value no longer
# tunes a protection but switches it off (an endless timeout, an unbounded buffer).
# Keys are paths with list indices as [] ("listeners[].x"); a new key is one line.
INT32_MAX = 2**31 - 1
MAXIMA: dict[str, tuple[float, str]] = {
    "workers": (256, "each worker is a whole process; fixed rather than per core so a file validates alike on every machine"),
    "metrics.max_label_values": (10_000, "each value is a time series of every labelled metric"),
    "request_log.max_bytes": (2**40, "1 TiB: the size a log file is rotated at"),
    "request_log.backups": (1000, "every rotation renames each backup"),
    "request_log.max_string_length": (1_048_576, "1 MiB: client strings are copied into every line"),
    "limits.max_frame_bytes": (INT32_MAX, "a Kafka frame's length is an int32"),
    "limits.max_frame_bytes_before_auth": (INT32_MAX, "a Kafka frame's length is an int32"),
    "limits.max_connections": (1_048_576, "Linux's default nr_open, and each connection needs two sockets"),
    "limits.max_connections_per_ip": (1_048_576, "Linux's default nr_open"),
    "limits.connect_timeout_seconds": (3600, "1 hour"),
    "limits.idle_timeout_seconds": (86400, "1 day: a dead peer must be let go some time"),
    "limits.frame_timeout_seconds": (3600, "1 hour: a slow sender holds a frame buffer meanwhile"),
    "limits.shutdown_grace_seconds": (3600, "1 hour: orchestrators kill a stopping process long before"),
    "limits.decompression_limit_bytes": (2**32, "4 GiB: a batch is inflated in memory"),
    "gateway.broker_port_base": (65535, "a TCP port"),
    # Keys that branches merged alongside this table add, their bounds ready:
    "metrics.max_error_series": (10_000, "each (api, error) pair is a time series"),
    "metrics.max_connections": (10_000, "each open admin connection holds a socket and a buffer"),
    "metrics.max_connections_per_address": (10_000, "each open admin connection holds a socket and a buffer"),
    "limits.max_in_flight_requests": (1_000_000, "librdkafka's own maximum per connection"),
    "limits.request_timeout_seconds": (86400, "1 day: a stuck broker must be let go some time"),
    "limits.observe_whole_frame_bytes": (2**30, "1 GiB: a frame assembled whole costs its size per direction"),
    "limits.observe_seconds_per_read": (10, "10 s: decoding one read stalls every connection of the process"),
    "limits.observe_max_field_bytes": (2**30, "1 GiB: a field is held whole while it is parsed"),
    "limits.observe_max_elements": (10_000_000, "each decoded element costs memory per frame"),
    "limits.socket_buffer_bytes": (2**28, "256 MiB: the kernel holds this much per socket"),
    "request_log.flush_interval_seconds": (3600, "1 hour: lines wait in memory meanwhile"),
    "request_log.max_queued_bytes": (2**32, "4 GiB held in memory"),
    "telemetry.push_interval_ms": (86_400_000, "1 day: a series expires a few intervals after its last push"),
    "telemetry.max_push_bytes": (64 * 2**20, "64 MiB: a push is held whole while it is decoded"),
    "telemetry.max_decompressed_bytes": (2**30, "1 GiB: a push is inflated in memory"),
    "telemetry.max_instances": (1_000_000, "each client instance holds its latest values"),
    "telemetry.max_series": (10_000_000, "each series is a line of /metrics"),
    "telemetry.max_points_per_push": (1_000_000, "a push's points are read on the event loop, ~20 us each"),
    "telemetry.max_attributes": (1000, "each attribute is a label of a series"),
    "telemetry.expire_after_intervals": (1000, "series of gone clients linger this many push intervals"),
    "telemetry.log.max_bytes": (2**40, "1 TiB: the size a log file is rotated at"),
    "telemetry.log.backups": (1000, "every rotation renames each backup"),
    "telemetry.log.flush_interval_seconds": (3600, "1 hour: lines wait in memory meanwhile"),
    "telemetry.log.max_queued_bytes": (2**32, "4 GiB held in memory"),
    "lag.max_topics": (100_000, "each (group, topic) pair is a time series"),
    "lag.max_partitions": (1_000_000, "each partition of each kind is a time series"),
    "lag.max_clients": (100_000, "each client is a label value of every partition it reads"),
    "lag.max_tracked": (10_000_000, "each tracked partition costs about 200 bytes per table"),
    "lag.max_logged_partitions": (1_000_000, "each is an object in a request log line"),
    "lag.max_logged_ranges": (1_000_000, "each is an array in a request log line"),
    "lag.max_range_offsets": (2**31 - 1, "a broker locks at most a few thousand records of a partition"),
    "lag.idle_expiry_seconds": (7 * 86400, "1 week: a consumer that left must be let go some time"),
}
# Without an entry (a key added without its line): still finite.
DEFAULT_MAXIMUM = {int: (INT32_MAX, "the largest int32"), float: (86400, "1 day")}


def parse_address(text: object, key: str, *, allow_port_zero: bool = False) -> Address:
    """HOST:PORT or [IPV6]:PORT."""
    if not isinstance(text, str):
        raise ConfigError(key, f"must be HOST:PORT, got {text!r}")
    match = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d+)|([^:\s\[\]]+):(\d+)", text.strip())
    if not match:
        raise ConfigError(key, f"must be HOST:PORT, got {text!r}")
    host = match.group(1) or match.group(3)
    port = int(match.group(2) or match.group(4))
    lowest = 0 if allow_port_zero else 1
    if not lowest <= port <= 65535:
        raise ConfigError(key, f"port must be {lowest}..65535, got {port}")
    return Address(host, port)


class _Section:
    """Reads one mapping of the YAML, each getter naming the full key path on error."""

    def __init__(self, data: object, path: str) -> None:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(path or "(top level)", f"must be a mapping, got {_show(data)}")
        self.data: dict[Any, Any] = data
        self.path = path
        self._read: set[str] = set()
        schema = SECTION_SCHEMAS.get(generic_key(path))
        if schema is not None:
            self._refuse_unknown({f.name for f in fields(schema)})

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def raw(self, name: str, default: object = _MISSING) -> Any:
        self._read.add(name)
        value = self.data.get(name, _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                raise ConfigError(self.key(name), "is required")
            return default
        return value

    def has(self, name: str) -> bool:
        return name in self.data and self.data[name] is not None

    def done(self) -> None:
        """Unknown keys are errors: a typo must not silently fall back to a default."""
        self._refuse_unknown(self._read)

    def _refuse_unknown(self, known: set[str]) -> None:
        for name in self.data:
            if name not in known:
                hint = _suggest(str(name), known, self.path)
                raise ConfigError(self.key(str(name)), f"unknown key{hint}")

    def integer(self, name: str, default: int, *, minimum: int = 1) -> int:
        value = self.raw(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise ConfigError(self.key(name), f"must be {what}, got {_show(value)}")
        self._at_most(name, value, int, f"{minimum}..")
        return value

    def seconds(self, name: str, default: float) -> float:
        value = self.raw(name, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ConfigError(self.key(name), f"must be a positive number, got {_show(value)}")
        self._at_most(name, value, float, "more than 0 and at most ")
        return float(value)

    def _at_most(self, name: str, value: float, kind: type, low: str) -> None:
        key = self.key(name)
        maximum, why = MAXIMA.get(generic_key(key), DEFAULT_MAXIMUM[kind])
        if not value <= maximum:
            shown = int(maximum) if float(maximum).is_integer() else maximum
            raise ConfigError(key, f"must be {low}{shown} ({why}), got {_show(value)}")

    def boolean(self, name: str, default: bool) -> bool:
        value = self.raw(name, default)
        if not isinstance(value, bool):
            raise ConfigError(self.key(name), f"must be true or false, got {_show(value)}")
        return value

    def string(self, name: str, default: object = _MISSING) -> str:
        value = self.raw(name, default)
        if not isinstance(value, str) or not value:
            raise ConfigError(self.key(name), f"must be a non-empty string, got {_show(value)}")
        return value

    def optional_string(self, name: str) -> str | None:
        if not self.has(name):
            self.raw(name, None)
            return None
        return self.string(name)

    def choice(self, name: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.raw(name, default)
        if value not in choices:
            raise ConfigError(
                self.key(name), f"must be one of {', '.join(choices)}, got {_show(value)}"
            )
        return str(value)

    def address(self, name: str, default: object = _MISSING, *, listen: bool = False) -> Address:
        value = self.raw(name, default)
        if isinstance(value, Address):
            return value
        return parse_address(value, self.key(name), allow_port_zero=listen)

    def file(self, name: str) -> str | None:
        """A path that must name a readable file (checked now, not at the first handshake)."""
        if not self.has(name):
            self.raw(name, None)
            return None
        return readable_file(self.string(name), self.key(name))

    def section(self, name: str) -> _Section:
        return _Section(self.raw(name, None), self.key(name))

    def list(self, name: str, default: list[Any]) -> list[Any]:
        value = self.raw(name, default)
        if not isinstance(value, list):
            raise ConfigError(self.key(name), f"must be a list, got {_show(value)}")
        return value


def readable_file(path: str, key: str) -> str:
    """`path`, if it names a file this process may read; else ConfigError for `key`.
    For any file a config names (certificates, token files), at parse time."""
    if not os.path.isfile(path):
        what = "is a directory, not a file" if os.path.isdir(path) else "file not found"
        raise ConfigError(key, f"{what}: {path}")
    if not os.access(path, os.R_OK):
        raise ConfigError(key, f"file not readable: {path}")
    return path


def generic_key(key: str) -> str:
    """listeners[2].tls -> listeners[].tls: the path as SECTION_SCHEMAS and MAXIMA name it."""
    return re.sub(r"\[\d+\]", "[]", key)


def _suggest(name: str, known: set[str], path: str) -> str:
    """ (did you mean X?): the same key in another section (put at the wrong level),
    else the nearest key of this one (misspelt)."""
    here = generic_key(path)
    for section, schema in SECTION_SCHEMAS.items():
        if section != here and name in {f.name for f in fields(schema)}:
            return f" (did you mean {section + '.' if section else ''}{name}?)"
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def _show(value: object) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def load_config(path: str | Path | None = None, overrides: Overrides | None = None) -> Config:
    """The configuration from `path` (None: the defaults) with `overrides` applied."""
    data: object = {}
    if path is not None:
        data = _read_yaml(Path(path))
    if overrides is not None:
        data = _apply_overrides(data, overrides)
    return parse_config(data)


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load, but a key given twice in one mapping is an error: YAML keeps
    the last silently, so a second `limits:` further down would undo the first."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *defaults` then overriding keys is what merge is for
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:
                continue  # unhashable: the base class reports it
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def _read_yaml(path: Path) -> object:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(path), f"cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(str(path), f"not UTF-8 text (byte {exc.start})") from exc
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader
    except RecursionError:
        raise ConfigError(str(path), "nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise ConfigError(str(path), str(exc).split(":")[0]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(str(path), f"{problem}{where}") from exc


def _apply_overrides(data: object, flags: Overrides) -> object:
    """Put flag values into the raw mapping; flag errors name the flag, not the key."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return data  # parse_config reports the bad top level
    data = dict(data)
    if flags.metrics is not None:
        metrics = dict(data.get("metrics") or {})
        metrics["listen"] = parse_address(flags.metrics, "--metrics", allow_port_zero=True)
        data["metrics"] = metrics
    if flags.request_log is not None:
        if not flags.request_log:
            raise ConfigError("--request-log", "must be a path or -")
        request_log = dict(data.get("request_log") or {})
        request_log["path"] = flags.request_log
        data["request_log"] = request_log
    if flags.listen is not None or flags.upstream is not None:
        if data.get("mode", "sidecar") == "gateway":
            _override_gateway(data, flags)
        else:
            _override_listener(data, flags)
    return data


def _override_listener(data: dict[str, Any], flags: Overrides) -> None:
    listeners = data.get("listeners")
    if listeners is None:
        listeners = [{"name": DEFAULT_LISTENER.name}]
    if not isinstance(listeners, list) or len(listeners) != 1:
        raise ConfigError(
            "--listen" if flags.listen is not None else "--upstream",
            "applies to a config with exactly one listener; edit `listeners` in the file",
        )
    first = dict(listeners[0]) if isinstance(listeners[0], dict) else {}
    if flags.listen is not None:
        first["listen"] = parse_address(flags.listen, "--listen", allow_port_zero=True)
    if flags.upstream is not None:
        first["upstream"] = parse_address(flags.upstream, "--upstream")
    first.setdefault("listen", DEFAULT_LISTENER.listen)
    first.setdefault("upstream", DEFAULT_LISTENER.upstream)
    data["listeners"] = [first]


def _override_gateway(data: dict[str, Any], flags: Overrides) -> None:
    gateway = dict(data.get("gateway") or {})
    if flags.listen is not None:
        gateway["bootstrap_listen"] = parse_address(flags.listen, "--listen", allow_port_zero=True)
    if flags.upstream is not None:
        gateway["bootstrap_servers"] = [str(parse_address(flags.upstream, "--upstream"))]
    data["gateway"] = gateway


def parse_config(data: object) -> Config:
    """Validate an already-loaded YAML document."""
    root = _Section(data, "")
    mode = root.choice("mode", "sidecar", MODES)
    gateway = _gateway(root.section("gateway")) if root.has("gateway") else None
    root.raw("gateway", None)
    if mode == "gateway" and gateway is None:
        raise ConfigError("gateway", "is required when mode is gateway")
    listeners = _listeners(root, required=mode == "sidecar")
    config = Config(
        mode=mode,
        listeners=listeners,
        gateway=gateway,
        upstream_tls=_upstream_tls(root.section("upstream_tls"))
        if root.has("upstream_tls")
        else None,
        metrics=_metrics(root.section("metrics")),
        request_log=_request_log(root.section("request_log")),
        limits=_limits(root.section("limits")),
        kip1313=_kip1313(root.section("kip1313")),
        telemetry=_telemetry(root.section("telemetry")),
        workers=root.integer("workers", 1),
        lag=_lag(root.section("lag")),
    )
    root.raw("upstream_tls", None)
    root.done()
    return config


def _listeners(root: _Section, *, required: bool) -> tuple[ListenerConfig, ...]:
    raw = root.raw("listeners", None)
    if raw is None:
        return (DEFAULT_LISTENER,) if required else ()
    if not required:
        raise ConfigError("listeners", "is for mode sidecar; gateway mode uses `gateway`")
    if not isinstance(raw, list) or (required and not raw):
        raise ConfigError("listeners", f"must be a non-empty list, got {_show(raw)}")
    listeners = tuple(_listener(_Section(item, f"listeners[{i}]")) for i, item in enumerate(raw))
    _check_unique(listeners)
    return listeners


def _listener(s: _Section) -> ListenerConfig:
    name = s.string("name")
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
        raise ConfigError(s.key("name"), f"must be 1-64 of A-Z a-z 0-9 _ . -, got {name!r}")
    listener = ListenerConfig(
        name=name,
        listen=s.address("listen", listen=True),
        upstream=s.address("upstream"),
        tls=_listener_tls(s.section("tls")) if s.has("tls") else None,
    )
    s.raw("tls", None)
    s.done()
    return listener


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


def _listener_tls(s: _Section) -> ListenerTLS:
    cert, key = s.file("cert"), s.file("key")
    if cert is None or key is None:
        raise ConfigError(s.key("cert" if cert is None else "key"), "is required for TLS")
    tls = ListenerTLS(
        cert=cert,
        key=key,
        client_ca=s.file("client_ca"),
        require_client_cert=s.boolean("require_client_cert", False),
        min_version=s.choice("min_version", "TLSv1.2", TLS_VERSIONS),
    )
    if tls.require_client_cert and tls.client_ca is None:
        raise ConfigError(s.key("client_ca"), "is required when require_client_cert is true")
    s.done()
    return tls


def _upstream_tls(s: _Section) -> UpstreamTLS:
    tls = UpstreamTLS(
        ca=s.file("ca"),
        cert=s.file("cert"),
        key=s.file("key"),
        check_hostname=s.boolean("check_hostname", True),
        server_hostname=s.optional_string("server_hostname"),
        min_version=s.choice("min_version", "TLSv1.2", TLS_VERSIONS),
    )
    if (tls.cert is None) != (tls.key is None):
        raise ConfigError(s.key("key" if tls.key is None else "cert"), "cert and key go together")
    s.done()
    return tls


def _gateway(s: _Section) -> GatewayConfig:
    servers = s.list("bootstrap_servers", [])
    if not servers:
        raise ConfigError(s.key("bootstrap_servers"), "must list at least one HOST:PORT")
    gateway = GatewayConfig(
        bootstrap_listen=s.address("bootstrap_listen", "0.0.0.0:9092", listen=True),
        bootstrap_servers=tuple(
            parse_address(item, f"{s.key('bootstrap_servers')}[{i}]")
            for i, item in enumerate(servers)
        ),
        advertised_host=s.string("advertised_host"),
        listen_host=s.string("listen_host", "0.0.0.0"),
        broker_port_base=s.integer("broker_port_base", 9100, minimum=0),
        broker_ports=_broker_ports(s),
        tls=_listener_tls(s.section("tls")) if s.has("tls") else None,
    )
    s.raw("tls", None)
    s.done()
    return gateway


def _broker_ports(s: _Section) -> dict[int, int]:
    raw = s.raw("broker_ports", {})
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(
            s.key("broker_ports"), f"must be a mapping node_id: port, got {_show(raw)}"
        )
    ports: dict[int, int] = {}
    for node, port in raw.items():
        key = f"{s.key('broker_ports')}.{node}"
        if isinstance(node, bool) or not isinstance(node, int) or node < 0:
            raise ConfigError(key, f"node id must be an integer >= 0, got {node!r}")
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ConfigError(key, f"port must be 1..65535, got {port!r}")
        ports[node] = port
    return ports


def _metrics(s: _Section) -> MetricsConfig:
    metrics = MetricsConfig(
        listen=s.address("listen", "0.0.0.0:9180", listen=True),
        max_label_values=s.integer("max_label_values", 50),
        max_error_series=s.integer("max_error_series", 256),
        clients_token_file=s.file("clients_token_file"),
        clients_listen=_loopback(s, "clients_listen") if s.has("clients_listen") else None,
        allowed_hosts=tuple(
            _nonempty_str(item, f"{s.key('allowed_hosts')}[{i}]").lower()
            for i, item in enumerate(s.list("allowed_hosts", []))
        )
        if s.has("allowed_hosts")
        else None,
        tls=_listener_tls(s.section("tls")) if s.has("tls") else None,
        max_connections=s.integer("max_connections", 32),
        max_connections_per_address=s.integer("max_connections_per_address", 8),
    )
    s.raw("clients_listen", None)
    s.raw("allowed_hosts", None)
    s.raw("tls", None)
    s.done()
    return metrics


LOOPBACK_HOSTS = ("localhost", "::1")


def _loopback(s: _Section, name: str) -> Address:
    address = s.address(name, listen=True)
    if address.host.lower() not in LOOPBACK_HOSTS and not address.host.startswith("127."):
        raise ConfigError(
            s.key(name), f"must be a loopback address (127.0.0.1, [::1], localhost), got {address}"
        )
    return address


def _request_log(s: _Section) -> RequestLogConfig:
    sample_rate = s.raw("sample_rate", 1.0)
    if (
        isinstance(sample_rate, bool)
        or not isinstance(sample_rate, int | float)
        or not (0.0 <= sample_rate <= 1.0)
    ):
        raise ConfigError(s.key("sample_rate"), f"must be a number 0..1, got {_show(sample_rate)}")
    log = RequestLogConfig(
        path=s.string("path", "-"),
        max_bytes=s.integer("max_bytes", 104857600),
        backups=s.integer("backups", 5, minimum=0),
        sample_rate=float(sample_rate),
        apis=tuple(
            _api_ref(item, f"{s.key('apis')}[{i}]") for i, item in enumerate(s.list("apis", []))
        ),
        errors_only=s.boolean("errors_only", False),
        record_detail=s.boolean("record_detail", False),
        header_value_allowlist=tuple(
            _nonempty_str(item, f"{s.key('header_value_allowlist')}[{i}]")
            for i, item in enumerate(
                s.list("header_value_allowlist", ["traceparent", "tracestate"])
            )
        ),
        max_string_length=s.integer("max_string_length", 256),
        flush_interval_seconds=s.seconds("flush_interval_seconds", 0.5),
        max_queued_bytes=s.integer("max_queued_bytes", 16777216),
    )
    s.done()
    return log


def _api_ref(item: object, key: str) -> str | int:
    """An api named like "Produce" or given by its key (0..32767)."""
    if isinstance(item, int) and not isinstance(item, bool) and 0 <= item <= 32767:
        return item
    if isinstance(item, str) and re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", item):
        return item
    raise ConfigError(key, f"must be an api name like Produce or an api key, got {item!r}")


def _nonempty_str(item: object, key: str) -> str:
    if not isinstance(item, str) or not item:
        raise ConfigError(key, f"must be a non-empty string, got {_show(item)}")
    return item


def _limits(s: _Section) -> Limits:
    limits = Limits(
        max_frame_bytes=s.integer("max_frame_bytes", 104857600),
        max_frame_bytes_before_auth=s.integer("max_frame_bytes_before_auth", 1048576),
        max_connections=s.integer("max_connections", 10000),
        max_connections_per_ip=s.integer("max_connections_per_ip", 1000),
        max_in_flight_requests=s.integer("max_in_flight_requests", 100),
        request_timeout_seconds=s.seconds("request_timeout_seconds", 600.0),
        connect_timeout_seconds=s.seconds("connect_timeout_seconds", 10.0),
        idle_timeout_seconds=s.seconds("idle_timeout_seconds", 600.0),
        frame_timeout_seconds=s.seconds("frame_timeout_seconds", 30.0),
        shutdown_grace_seconds=s.seconds("shutdown_grace_seconds", 25.0),
        decompression_limit_bytes=s.integer("decompression_limit_bytes", 67108864),
        observe_whole_frame_bytes=s.integer("observe_whole_frame_bytes", 262144, minimum=0),
        observe_seconds_per_read=s.seconds("observe_seconds_per_read", 0.1),
        observe_max_field_bytes=s.integer("observe_max_field_bytes", 65536, minimum=1),
        observe_max_elements=s.integer("observe_max_elements", 20000, minimum=1),
        socket_buffer_bytes=s.integer("socket_buffer_bytes", 1048576, minimum=0),
    )
    if limits.max_frame_bytes > 2**31 - 1:
        raise ConfigError(
            s.key("max_frame_bytes"), f"must be at most {2**31 - 1}, got {limits.max_frame_bytes}"
        )
    if limits.max_frame_bytes_before_auth > limits.max_frame_bytes:
        raise ConfigError(
            s.key("max_frame_bytes_before_auth"),
            f"must not exceed limits.max_frame_bytes ({limits.max_frame_bytes}),"
            f" got {limits.max_frame_bytes_before_auth}",
        )
    s.done()
    return limits


def _lag(s: _Section) -> LagConfig:
    lag = LagConfig(
        enabled=s.boolean("enabled", True),
        max_topics=s.integer("max_topics", 1000),
        max_partitions=s.integer("max_partitions", 10000),
        max_clients=s.integer("max_clients", 1000),
        max_tracked=s.integer("max_tracked", 200000),
        max_logged_partitions=s.integer("max_logged_partitions", 1000, minimum=0),
        max_logged_ranges=s.integer("max_logged_ranges", 1000, minimum=0),
        max_range_offsets=s.integer("max_range_offsets", 1_000_000),
        idle_expiry_seconds=s.seconds("idle_expiry_seconds", 1800.0),
    )
    s.done()
    return lag


def _kip1313(s: _Section) -> Kip1313Config:
    raw = s.raw("header_v3", {})
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(s.key("header_v3"), f"must be a mapping api: versions, got {_show(raw)}")
    rules = tuple(
        _header_v3_rule(api, spec, f"{s.key('header_v3')}.{api}") for api, spec in raw.items()
    )
    kip = Kip1313Config(enforcement=s.choice("enforcement", "log", ENFORCEMENTS), header_v3=rules)
    s.done()
    return kip


def _telemetry(s: _Section) -> TelemetryConfig:
    telemetry = TelemetryConfig(
        observe=s.boolean("observe", True),
        collect=s.boolean("collect", False),
        answer=s.choice("answer", "proxy", TELEMETRY_ANSWERERS),
        metrics=tuple(
            _metric_prefix(item, f"{s.key('metrics')}[{i}]")
            for i, item in enumerate(s.list("metrics", ["org.apache.kafka."]))
        ),
        push_interval_ms=s.integer("push_interval_ms", 30000, minimum=100),
        compression_types=tuple(
            _compression_type(item, f"{s.key('compression_types')}[{i}]")
            for i, item in enumerate(s.list("compression_types", ["zstd", "lz4", "gzip", "snappy"]))
        ),
        max_push_bytes=s.integer("max_push_bytes", 1048576),
        max_decompressed_bytes=s.integer("max_decompressed_bytes", 8388608),
        max_instances=s.integer("max_instances", 1000),
        max_series=s.integer("max_series", 20000),
        max_points_per_push=s.integer("max_points_per_push", 2000),
        max_attributes=s.integer("max_attributes", 16, minimum=0),
        expire_after_intervals=s.integer("expire_after_intervals", 3),
        log=_telemetry_log(s.section("log")),
    )
    s.done()
    return telemetry


def _metric_prefix(item: object, key: str) -> str:
    """A metric name prefix; "" subscribes to every metric (KIP-714)."""
    if not isinstance(item, str):
        raise ConfigError(key, f"must be a metric name prefix (a string), got {_show(item)}")
    return item


def _compression_type(item: object, key: str) -> str:
    if item not in COMPRESSION_TYPES:
        raise ConfigError(key, f"must be one of {', '.join(COMPRESSION_TYPES)}, got {_show(item)}")
    return str(item)


def _telemetry_log(s: _Section) -> TelemetryLogConfig:
    log = TelemetryLogConfig(
        path=s.optional_string("path"),
        max_bytes=s.integer("max_bytes", 104857600),
        backups=s.integer("backups", 5, minimum=0),
        flush_interval_seconds=s.seconds("flush_interval_seconds", 1.0),
        max_queued_bytes=s.integer("max_queued_bytes", 16777216),
    )
    s.done()
    return log


def _header_v3_rule(api: object, spec: object, key: str) -> HeaderV3Rule:
    """`spec`: "3+" (3 and later), "3-5", "3" or 3."""
    name = _api_ref(api, key)
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

