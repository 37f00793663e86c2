"""The proxy's Prometheus metrics, in a registry of their own.

Hot path: `Metrics.api(name)` returns an `ApiMetrics`, which counts requests,
bytes and durations in plain Python numbers and adds them to its prometheus-client
series when the registry is collected (and, with worker processes, about once a
second): prometheus-client takes a lock per `inc`, five of them a request.
Every label value a peer chooses is bounded, so that a scrape stays small and fast
whatever clients and brokers send: api versions to those the codec knows, api names
to _MAX_APIS (the hooks name them: codec names or "unknown"), error names to Kafka's (and the api/error pairs to `max_error_series`), client
software and upstream addresses through a `LabelCapper`; the rest become "other",
counted by kafkalens_label_values_capped_total. No `_created` series either: they
doubled every counter and nobody graphs them.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import math
import socket
import ssl
import threading
from bisect import bisect_left
from collections import Counter as RefCounts
from collections.abc import Callable, Hashable, Iterator
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Literal, TypeVar, cast

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from codec.error_codes import ERROR_CODES, error_name
from codec.schema import api_messages

# Process-wide in prometheus-client; worker processes import this module too.
disable_created_metrics()

UNKNOWN = "unknown"
OTHER = "other"
MAX_LABEL_LENGTH = 64

# Buckets from 0.1 ms (a cached Metadata on loopback) to 30 s. Fetch long-polls up to the client's
# fetch.max.wait.ms (500 ms by default), JoinGroup waits out a rebalance: the buckets
# around 0.5-1 s and above keep those distinguishable from genuinely slow requests.
DURATION_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
# What prometheus-client's Histogram.observe does: the first bucket bound >= the value.
_BOUNDS = (*DURATION_BUCKETS, math.inf)

# Error names come from the broker: only Kafka's own names are labels, and the per-api
# cache of raw name -> series is bounded too (the names' capper alone would not bound it).
_ERROR_CACHE_LIMIT = 256
_ERROR_NAMES = frozenset(ERROR_CODES.values())
# Api labels: the codec's ~90 names and "unknown" fit, as do the bare hooks' key numbers.
_MAX_APIS = 256
# The request versions the codec can decode, by api name: the only api_version labels.
_KNOWN_VERSIONS: dict[str, dict[int, str]] = {
    request.name[: -len("Request")]: {v: str(v) for v in request.versions}
    for request, _ in api_messages().values()
}


def sanitize_label(value: str, max_length: int = MAX_LABEL_LENGTH) -> str:
    """Printable ASCII only, at most `max_length` characters; empty becomes "unknown"."""
    if value.isascii() and value.isprintable() and len(value) <= max_length:
        return value or UNKNOWN
    cleaned = "".join(c if " " <= c <= "~" else "_" for c in value[:max_length])
    return cleaned or UNKNOWN


F = TypeVar("F")


class LabelCapper:
    """Admits the first `max_values` distinct label values; later ones become "other".

    Values are sanitised first. Works on tuples too (e.g. software name and version
    capped as one pair), since it is the combination that makes a series. `on_cap` is
    called each time a value is turned into "other".
    """

    def __init__(self, max_values: int, on_cap: Callable[[], None] | None = None) -> None:
        self.max_values = max_values
        self._admitted: set[Hashable] = set()
        self._on_cap = on_cap

    def __call__(self, value: str) -> str:
        clean = sanitize_label(value)
        return clean if self.admit(clean) else OTHER

    def pair(self, first: str, second: str) -> tuple[str, str]:
        clean = (sanitize_label(first), sanitize_label(second))
        return clean if self.admit(clean) else (OTHER, OTHER)

    def admit(self, clean: Hashable) -> bool:
        """Whether `clean` (already a valid label value or tuple of them) gets its own series."""
        if clean in self._admitted:
            return True
        if len(self._admitted) >= self.max_values:
            if self._on_cap is not None:
                self._on_cap()
            return False
        self._admitted.add(clean)
        return True


class ApiMetrics:
    """The bound series of one api (e.g. "Produce"); get it from `Metrics.api`."""

    __slots__ = (
        "_m",
        "name",
        "_errors",
        "_codes",
        "_versions",
        "duration",
        "request_bytes",
        "response_bytes",
        "_requests",
        "_request_bytes",
        "_response_bytes",
        "_duration_sum",
        "_duration_counts",
    )

    def __init__(self, m: Metrics, name: str) -> None:
        self._m = m
        self.name = name
        self._errors: dict[str, Any] = {}
        self._codes: dict[int, Any] = {}
        self._versions = _KNOWN_VERSIONS.get(name, {})
        self.duration = m.request_duration.labels(api=name)
        self.request_bytes = m.request_bytes.labels(api=name)
        self.response_bytes = m.response_bytes.labels(api=name)
        # At 0 from this api's first request: a counter series that appears at 1 has no
        # increase to show, so rate() and the alerts would miss its first burst.
        for direction in ("request", "response"):
            m.decode_errors.labels(api=name, direction=direction)
        m.request_timeouts.labels(api=name)
        # Not yet added to the series above (see `flush`).
        self._requests: dict[int, int] = {}  # api version -> count
        self._request_bytes = 0
        self._response_bytes = 0
        self._duration_sum = 0.0
        self._duration_counts = [0] * len(_BOUNDS)

    def request(self, api_version: int, nbytes: int) -> None:
        """A request of this api arrived from a client (`nbytes` includes the size prefix)."""
        requests = self._requests
        requests[api_version] = requests.get(api_version, 0) + 1
        self._request_bytes += nbytes

    def response(self, duration_seconds: float, nbytes: int) -> None:
        """Its response went back to the client, `duration_seconds` after the request."""
        self._response_bytes += nbytes
        self._duration_sum += duration_seconds
        self._duration_counts[bisect_left(_BOUNDS, duration_seconds)] += 1

    def flush(self) -> None:
        """Add what was counted since the last flush to the prometheus-client series."""
        if self._requests:
            self._flush_requests()
        if self._request_bytes:
            self.request_bytes.inc(self._request_bytes)
            self._request_bytes = 0
        if self._response_bytes:
            self.response_bytes.inc(self._response_bytes)
            self._response_bytes = 0
        if any(self._duration_counts):
            self._flush_durations()

    def _flush_requests(self) -> None:
        requests, self._requests = self._requests, {}
        others = 0
        for api_version, count in requests.items():
            label = self._versions.get(api_version)
            if label is None:
                others += count
            else:
                self._m.requests.labels(api=self.name, api_version=label).inc(count)
        if others:
            self._m.requests.labels(api=self.name, api_version=OTHER).inc(others)
            self._m.capped_api_version.inc(others)

    def _flush_durations(self) -> None:
        # Histogram has no public "observe n values" call: its per-bucket values (not
        # cumulative) and sum are what observe() increments; tests/proxy/test_metrics.py checks
        # the result against observe() itself.
        counts, self._duration_counts = self._duration_counts, [0] * len(_BOUNDS)
        buckets = self.duration._buckets
        for index, count in enumerate(counts):
            if count:
                buckets[index].inc(count)
        self.duration._sum.inc(self._duration_sum)
        self._duration_sum = 0.0

    def error(self, name: str) -> None:
        """The response carried a Kafka error, by name, e.g. "UNKNOWN_TOPIC_OR_PARTITION"."""
        child = self._errors.get(name)
        if child is None:
            child = self._error_child(name)
            if len(self._errors) < _ERROR_CACHE_LIMIT:
                self._errors[name] = child
        child.inc()

    def error_code(self, code: int) -> None:
        """The response carried Kafka error `code` (non-zero); cheaper than `error`."""
        child = self._codes.get(code)
        if child is None:
            # Codes are int16: this cache holds at most 65536 entries even for a hostile broker.
            child = self._codes[code] = self._error_child(error_name(code))
        child.inc()

    def _error_child(self, name: str) -> Any:
        """The series of error `name`; "other" for a name that is not Kafka's or past the
        api/error pairs' cap, counted each time it is used (not only when first seen)."""
        if name in _ERROR_NAMES and self._m.error_capper.admit((self.name, name)):
            return self._m.request_errors.labels(api=self.name, error=name)
        return _CappedError(
            self._m.request_errors.labels(api=self.name, error=OTHER), self._m.capped_error
        )

    def decode_error(self, direction: str) -> None:
        """A frame of this api could not be decoded; `direction` "request" or "response"."""
        self._m.decode_errors.labels(api=self.name, direction=direction).inc()


class _CappedError:
    """The "other" error series, counting the capping as well."""

    __slots__ = ("series", "capped")

    def __init__(self, series: Any, capped: Any) -> None:
        self.series = series
        self.capped = capped

    def inc(self) -> None:
        self.series.inc()
        self.capped.inc()


class ConnectionMetrics:
    """One open client connection, as counted by the connection gauges.

    Counted as software ("unknown", "unknown") until `identify`; `close` is idempotent.
    """

    __slots__ = ("_m", "listener", "software", "instance_id", "closed")

    def __init__(self, m: Metrics, listener: str) -> None:
        self._m = m
        self.listener = listener
        self.software = (UNKNOWN, UNKNOWN)
        self.instance_id: Hashable | None = None
        self.closed = False
        m.connections_opened.labels(listener=listener).inc()
        m.connections.labels(*self.software).inc()

    def identify(self, software_name: str, software_version: str) -> None:
        """ApiVersions v3+ named the client software: move the connection to its labels."""
        if self.closed:
            return
        labels = self._m.software_capper.pair(software_name, software_version)
        if labels == self.software:
            return
        self._m.connections.labels(*self.software).dec()
        self._m.connections.labels(*labels).inc()
        self.software = labels

    def client_instance(self, instance_id: Hashable | None) -> None:
        """The connection's client instance id (KIP-1313); None forgets it."""
        if self.closed or instance_id == self.instance_id:
            return
        self._m.release_instance(self.instance_id)
        self._m.acquire_instance(instance_id)
        self.instance_id = instance_id

    def close(self, reason: str) -> None:
        """The connection ended; `reason` from a fixed set (client_eof, idle_timeout, ...)."""
        if self.closed:
            return
        self.closed = True
        self._m.connections.labels(*self.software).dec()
        self._m.release_instance(self.instance_id)
        self._m.connections_closed.labels(listener=self.listener, reason=reason).inc()


ADMIN_REFUSALS = (
    "too_many_connections", "per_address_limit", "clients_off", "unauthorized", "host",
    "bad_request", "method", "header_too_large", "header_timeout",
)  # fmt: skip


class AdminRefusals:
    """Requests the admin port (proxy/admin/http.py) refused, by reason: a collector of
    its own, so that the parent of workers, which has no Metrics, exports it too. Every
    reason is at 0 from the start, so that the first refusals show in rate() too."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = dict.fromkeys(ADMIN_REFUSALS, 0)

    def note(self, reason: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "kafkalens_admin_refused",
            "Admin port requests refused, by reason (too_many_connections, per_address_limit, clients_off, "
            "unauthorized, host, bad_request, method, header_too_large, header_timeout).",
            labels=("reason",),
        )
        for reason, count in sorted(self.counts.items()):
            family.add_metric((reason,), count)
        yield family


# Why a connection to a broker could not be opened: kafkalens_upstream_failures_total's
# `reason` and the log lines of the probe and of connections alike.
CONNECT_REFUSED, DNS, UNREACHABLE, TIMEOUT, TLS = (
    "connect_refused", "dns", "unreachable", "timeout", "tls"
)  # fmt: skip
_NO_ROUTE = frozenset({errno.EHOSTUNREACH, errno.ENETUNREACH})


def connect_failure(exc: BaseException, *, tls: bool) -> tuple[str, str]:
    """(reason, error in words) of a failed connection to a broker: `dns` (its name does
    not resolve), `unreachable` (no route to it), `timeout`, `tls` (the handshake
    failed: certificate, name, versions; or the broker hung up during it), else
    `connect_refused`."""
    error = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    if isinstance(exc, TimeoutError):
        return TIMEOUT, "no answer in time"
    if isinstance(exc, ssl.SSLError | ssl.CertificateError):
        verify = getattr(exc, "verify_message", None)
        return TLS, verify or getattr(exc, "reason", None) or error
    if isinstance(exc, socket.gaierror):
        return DNS, error
    if isinstance(exc, ConnectionResetError) and tls:
        # TCP was up: a broker that hangs up mid-handshake (no common TLS version, no
        # alert sent) is a TLS failure, not a refused connection
        return TLS, f"reset during the TLS handshake ({error})"
    if isinstance(exc, OSError) and exc.errno in _NO_ROUTE:
        return UNREACHABLE, error
    return CONNECT_REFUSED, error


class ProcessesCollector(Collector):
    """process_* of several processes, for the parent of `workers: N`: the families
    prometheus-client's ProcessCollector gives for one process (read from /proc), with
    a `worker` label on each series, `parent` or the worker's index; `sum()` over it is
    the whole proxy's. A process that is gone has no series."""

    def __init__(self, pids: Callable[[], dict[str, int]]) -> None:
        self.pids = pids

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for worker, pid in self.pids().items():
            one = ProcessCollector(namespace="", pid=functools.partial(int, pid), registry=None)
            for family in one.collect():
                into = merged.setdefault(
                    family.name, Metric(family.name, family.documentation, family.type)
                )
                for sample in family.samples:
                    into.add_sample(sample.name, {**sample.labels, "worker": worker}, sample.value)
        yield from merged.values()


class UpstreamReachability:
    """Whether each upstream accepted the last TCP connection of the background probe
    (proxy/admin/readiness.py, what /readyz reports): a collector of its own, so that
    the parent of workers, which has no Metrics, exports it too. A broker that is down
    shows here whether or not clients are trying it. At most MAX_SERIES upstreams get a
    series of their own; the rest are one series "other", 1 only if all are reachable."""

    MAX_SERIES = 64

    def __init__(self) -> None:
        self.results: dict[str, bool] = {}  # replaced whole by each probe round

    def update(self, results: dict[str, bool]) -> None:
        self.results = results

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "kafkalens_upstream_reachable",
            "1 if the upstream broker accepted the background probe's last TCP connection"
            " (every 2 s), else 0.",
            labels=("upstream",),
        )
        results = sorted(self.results.items())
        for upstream, ok in results[: self.MAX_SERIES]:
            family.add_metric((sanitize_label(upstream),), 1.0 if ok else 0.0)
        rest = results[self.MAX_SERIES :]
        if rest:
            family.add_metric((OTHER,), 1.0 if all(ok for _, ok in rest) else 0.0)
        yield family


class Metrics:
    """Every kafkalens metric, registered in `self.registry` (not the global registry)."""

    def __init__(
        self,
        max_label_values: int = 50,
        build_version: str | None = None,
        max_error_series: int = 256,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._by_name: dict[str, Counter | Gauge | Histogram] = {}
        self.registry.register(_Flusher(self))  # first: collected before the series
        self.admin_refusals = AdminRefusals()
        self.registry.register(self.admin_refusals)
        self.upstream_reachability = UpstreamReachability()
        self.registry.register(self.upstream_reachability)
        # prometheus-client's own: process_* (CPU, memory, open files: this process's;
        # with workers the parent serves every process's, ProcessesCollector) and python_info
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self._apis: dict[str, ApiMetrics] = {}
        self._instances: RefCounts[Hashable] = RefCounts()
        self._render_thread = threading.local()  # .flushed: the loop flushed already
        self._rendering: asyncio.Future[bytes] | None = None
        self._define_request_metrics()
        self._define_connection_metrics()
        self._define_proxy_metrics()
        self._define_capping(max_label_values, max_error_series)
        # Each feature's metrics (`of`), defined on this registry by the feature's package.
        self._features: dict[Callable[[Metrics], Any], Any] = {}
        # Called on every flush (on the event loop), after the api series: topic
        # traffic (proxy/observe/lag/traffic.py) hands over its counts then.
        self.publishers: list[Callable[[], None]] = []
        # Called on every collection, in the collecting thread (off the loop for
        # /metrics): the lag tables (proxy/observe/lag/series.py) publish their series.
        self.collectors: list[Callable[[], None]] = []
        self.build_info.labels(version=build_version or _package_version()).set(1)

    def of(self, kind: Callable[[Metrics], F]) -> F:
        """A feature's metrics: `kind(self)`, made once (its families defined on this
        registry then), the same object after. The proxy makes every feature's as it
        starts (proxy/features.py), so /metrics names them all from the start."""
        found = self._features.get(kind)
        if found is None:
            found = self._features[kind] = kind(self)
        return cast(F, found)  # made by `kind` itself

    def family(self, name: str) -> Counter | Gauge | Histogram | None:
        """The metric named `name` (as exposed, without _total), if one was defined."""
        return self._by_name.get(name)

    def counter(self, name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
        made = Counter(name, doc, labels, registry=self.registry)
        self._by_name[name.removesuffix("_total")] = made
        return made

    def gauge(
        self,
        name: str,
        doc: str,
        labels: tuple[str, ...] = (),
        mode: Literal["livesum", "max"] = "livesum",
    ) -> Gauge:
        # With workers > 1 each process writes its own value; "livesum" adds up those
        # of the workers alive (connections, pending requests), "max" keeps one.
        made = Gauge(name, doc, labels, registry=self.registry, multiprocess_mode=mode)
        self._by_name[name] = made
        return made

    def _define_request_metrics(self) -> None:
        c = self.counter
        self.requests = c(
            "kafkalens_requests_total", "Requests by api and version.", ("api", "api_version")
        )
        self.request_duration = Histogram(
            "kafkalens_request_duration_seconds",
            "Time from a request's arrival to its response's, by api.",
            ("api",),
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self._by_name["kafkalens_request_duration_seconds"] = self.request_duration
        self.request_errors = c(
            "kafkalens_request_errors_total",
            "Responses carrying a Kafka error code.",
            ("api", "error"),
        )
        self.request_bytes = c("kafkalens_request_bytes_total", "Request bytes by api.", ("api",))
        self.response_bytes = c(
            "kafkalens_response_bytes_total", "Response bytes by api.", ("api",)
        )
        self.decode_errors = c(
            "kafkalens_decode_errors_total",
            "Frames the codec could not decode.",
            ("api", "direction"),
        )
        self.unknown_requests = c(
            "kafkalens_unknown_requests_total",
            "Requests forwarded undecoded: unknown api key or version.",
            ("reason",),
        )
        # at 0 from the start: the first ones show in rate() too
        for reason in ("api_key", "api_version"):
            self.unknown_requests.labels(reason=reason)

    def _define_connection_metrics(self) -> None:
        c = self.counter
        self.connections = self.gauge(
            "kafkalens_connections",
            "Open client connections by client software (KIP-511).",
            ("client_software_name", "client_software_version"),
        )
        self.client_instances = self.gauge(
            "kafkalens_client_instances", "Distinct client instance ids among open connections."
        )
        self.connections_opened = c(
            "kafkalens_connections_opened_total", "Accepted client connections.", ("listener",)
        )
        self.connections_closed = c(
            "kafkalens_connections_closed_total",
            "Closed client connections.",
            ("listener", "reason"),
        )
        self.connections_rejected = c(
            "kafkalens_connections_rejected_total",
            "Refused client connections.",
            ("listener", "reason"),
        )

    def _define_proxy_metrics(self) -> None:
        c = self.counter
        self.upstream_failures = c(
            "kafkalens_upstream_failures_total",
            "Upstream broker connections that could not be opened (connect_refused, dns,"
            " unreachable, timeout, tls), were reset (reset), or that the broker closed with"
            " requests unanswered (closed); not those it closed idle.",
            ("upstream", "reason"),
        )
        self.pending_requests = self.gauge(
            "kafkalens_pending_requests", "Requests forwarded and awaiting their response."
        )
        self.in_flight_limit_hits = c(
            "kafkalens_in_flight_limit_hits_total",
            "Times reading from a client paused: limits.max_in_flight_requests of its"
            " requests awaited their responses.",
        )
        self.paused_clients_gone = c(
            "kafkalens_paused_clients_gone_total",
            "Clients that closed or reset while reading from them was paused, seen at once"
            " and their connection closed, by why it was paused: in_flight"
            " (limits.max_in_flight_requests), backlogged (the broker not reading),"
            " draining.",
            ("paused",),
        )
        for paused in ("in_flight", "backlogged", "draining"):
            self.paused_clients_gone.labels(paused=paused)
        self.requests_incomplete = c(
            "kafkalens_requests_incomplete_total",
            "Requests that were awaiting their response when the connection closed (each"
            " a request_incomplete line of the request log), by api and the close reason.",
            ("api", "reason"),
        )
        self.incomplete_requests_unlogged = c(
            "kafkalens_incomplete_requests_unlogged_total",
            "Requests a closing connection had received and not forwarded, past"
            " limits.max_in_flight_requests of them: in kafkalens_requests_incomplete_total,"
            " without a request_incomplete line each.",
        )
        self.request_timeouts = c(
            "kafkalens_request_timeouts_total",
            "Connections closed because a request went unanswered for"
            " limits.request_timeout_seconds, by the api of that request.",
            ("api",),
        )
        self.forwarded_bytes = c(
            "kafkalens_forwarded_bytes_total", "Bytes relayed.", ("direction",)
        )
        self.bytes_to_broker = self.forwarded_bytes.labels(direction="client_to_broker")
        self.bytes_to_client = self.forwarded_bytes.labels(direction="broker_to_client")
        self.frames_observed_in_pieces = c(
            "kafkalens_frames_observed_in_pieces_total",
            "Frames over limits.observe_whole_frame_bytes: decoded as they streamed past,"
            " never assembled.",
            ("direction",),
        )
        self.observed_elements_dropped = c(
            "kafkalens_observed_elements_dropped_total",
            "Array elements of streamed frames past limits.observe_max_elements: read,"
            " not decoded.",
            ("direction",),
        )
        self.build_info = self.gauge("kafkalens_build_info", "Always 1.", ("version",), "max")
        self.request_log_errors = c(
            "kafkalens_request_log_errors_total",
            "Request log writes (or reopenings, rotations) that failed: ENOSPC, EIO, ...",
        )
        self.request_log_dropped_lines = c(
            "kafkalens_request_log_dropped_lines_total",
            "Request log lines lost: their write failed, or the writer fell too far behind.",
            ("reason",),
        )
        # Why a line was lost: its write failed, or the queue to the writer was full.
        for reason in ("write_failed", "queue_full"):  # at 0 from the start, for alerts
            self.request_log_dropped_lines.labels(reason=reason)

    def _define_capping(self, max_label_values: int, max_error_series: int) -> None:
        capped = self.counter(
            "kafkalens_label_values_capped_total",
            'Observations counted under label value "other": the value was chosen by a'
            " peer and is unknown to the codec, or past its label's cap.",
            ("label",),
        )
        self.capped_api_version = capped.labels(label="api_version")
        self.capped_error = capped.labels(label="error")
        self.software_capper = LabelCapper(
            max_label_values, capped.labels(label="client_software").inc
        )
        self.error_capper = LabelCapper(max_error_series)  # counted by _CappedError
        self.upstream_capper = LabelCapper(
            max(max_label_values, 64), capped.labels(label="upstream").inc
        )

    def api(self, name: str) -> ApiMetrics:
        """The cached series of api `name`, named by the hooks (the codec's api names, or
        key numbers): past _MAX_APIS names, "unknown", whoever chose them."""
        api = self._apis.get(name)
        if api is None:
            if len(self._apis) >= _MAX_APIS and name != UNKNOWN:
                return self.api(UNKNOWN)  # not cached under `name`: that would grow unbounded
            api = self._apis[name] = ApiMetrics(self, name)
        return api

    def flush(self) -> None:
        """Hand what the ApiMetrics counted to prometheus-client (done on every collect;
        worker processes also call it about once a second, their series live in files)."""
        for api in list(self._apis.values()):
            api.flush()
        for publish in self.publishers:
            publish()

    def connection_opened(self, listener: str) -> ConnectionMetrics:
        return ConnectionMetrics(self, listener)

    def listener_added(self, listener: str) -> None:
        """A listener opened: its connection and rejection counters at 0, so that the
        first connections and a first burst of rejections show in rate() (and the
        alert) too."""
        self.connections_opened.labels(listener=listener)
        for reason in ("max_connections", "per_ip_limit", "fd_limit"):
            self.connections_rejected.labels(listener=listener, reason=reason)

    def connection_rejected(self, listener: str, reason: str) -> None:
        """`reason`: max_connections, per_ip_limit, fd_limit, tls_handshake, ..."""
        self.connections_rejected.labels(listener=listener, reason=reason).inc()

    def request_timeout(self, api: str) -> None:
        """`api`: the name of the oldest unanswered request (a bounded set, like `api`)."""
        self.request_timeouts.labels(api=api).inc()

    def paused_client_gone(self, paused: str) -> None:
        """`paused`: in_flight, backlogged or draining."""
        self.paused_clients_gone.labels(paused=paused).inc()

    def request_incomplete(self, api: str, reason: str) -> None:
        """`api` a name the codec knows (or unknown), `reason` a close reason."""
        self.requests_incomplete.labels(api=api, reason=reason).inc()

    def upstream_failure(self, upstream: str, reason: str) -> None:
        """`reason`: connect_failure's, reset, closed."""
        self.upstream_failures.labels(upstream=self.upstream_capper(upstream), reason=reason).inc()

    def unknown_request(self, reason: str) -> None:
        """`reason`: "api_key" or "api_version"; the frame was forwarded untouched."""
        self.unknown_requests.labels(reason=reason).inc()

    def frame_observed_in_pieces(self, direction: str, size: int) -> None:
        """`direction`: "request" or "response"; `size` is the frame's body size."""
        self.frames_observed_in_pieces.labels(direction=direction).inc()

    def request_log_error(self) -> None:
        """From the request log's writer thread (prometheus-client counters take a lock)."""
        self.request_log_errors.inc()

    def request_log_dropped(self, reason: str, lines: int) -> None:
        """`reason`: "write_failed" or "queue_full"."""
        self.request_log_dropped_lines.labels(reason=reason).inc(lines)

    def acquire_instance(self, instance_id: Hashable | None) -> None:
        if instance_id is not None:
            self._instances[instance_id] += 1
            self.client_instances.set(len(self._instances))

    def release_instance(self, instance_id: Hashable | None) -> None:
        if instance_id is None or instance_id not in self._instances:
            return
        self._instances[instance_id] -= 1
        if self._instances[instance_id] <= 0:
            del self._instances[instance_id]
        self.client_instances.set(len(self._instances))

    def render(self) -> bytes:
        """The text exposition of this registry."""
        return generate_latest(self.registry)

    async def render_off_loop(self) -> bytes:
        """The exposition for the /metrics handler, rendered in a thread: with every
        series a peer can create, formatting takes longer than the loop may stall
        (tests/proxy/test_metrics_scrape.py holds its size and CPU), and a thread hands
        the GIL back to the loop every few ms (sys.getswitchinterval), so forwarding
        goes on meanwhile. The counts are
        flushed here first: only the loop's thread touches them. Scrapes that come
        while a rendering runs share it."""
        if self._rendering is None:
            self.flush()
            rendering = asyncio.ensure_future(asyncio.to_thread(self._render_flushed))
            self._rendering = rendering
            rendering.add_done_callback(lambda _: setattr(self, "_rendering", None))
        return await asyncio.shield(self._rendering)

    def _render_flushed(self) -> bytes:
        self._render_thread.flushed = True
        try:
            return generate_latest(self.registry)
        finally:
            self._render_thread.flushed = False

    def metric_names(self) -> set[str]:
        """Every sample name this registry can expose, whether or not it has samples yet."""
        names: set[str] = set()
        for family in self.registry.collect():
            names.update(_SAMPLE_SUFFIXES[family.type](family.name))
        return names


class _Flusher(Collector):
    """Registered first, so every collection of the registry sees up-to-date series."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Any]:
        if not getattr(self._metrics._render_thread, "flushed", False):
            self._metrics.flush()
        for publish in self._metrics.collectors:
            publish()
        return iter(())

    def describe(self) -> list[Any]:
        return []


_SAMPLE_SUFFIXES: dict[str, Callable[[str], tuple[str, ...]]] = {
    "counter": lambda n: (f"{n}_total",),
    "gauge": lambda n: (n,),
    "histogram": lambda n: (f"{n}_bucket", f"{n}_count", f"{n}_sum"),
}


def _package_version() -> str:
    try:
        return version("kafkalens")
    except PackageNotFoundError:
        return UNKNOWN
