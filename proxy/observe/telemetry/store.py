"""The latest value of each metric each client instance pushed (KIP-714), bounded.

A point pushed with delta temporality (what Apache Kafka's brokers ask for) is added to
its series' total, so every series holds a total as a cumulative push does
(otlp.cumulated): counted from the first push this process saw of the instance.

At most `max_instances` instances and `max_series` series in all: a push past either
bound keeps what fits and the rest is counted as dropped. An instance that stopped
pushing goes, with its series, `expire_after_intervals` push intervals after its last
push. State is per process: with `workers: N` each worker keeps the clients that
pushed to it (a client pushes over one connection).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from proxy.observe.telemetry.otlp import Point, cumulated

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]  # (OTLP name, attributes)
EXPIRE_CHECK_SECONDS = 1.0


@dataclass(frozen=True)
class ClientMeta:
    """Who an instance is, from the connection that pushed (proxy/observe/identity.py)."""

    client_id: str | None = None
    software_name: str | None = None
    software_version: str | None = None
    principal: str | None = None
    listener: str | None = None


@dataclass
class Instance:
    meta: ClientMeta
    interval_s: float
    last_push: float
    series: dict[SeriesKey, Point] = field(default_factory=dict)


class TelemetryStore:
    def __init__(
        self,
        max_instances: int,
        max_series: int,
        expire_after_intervals: int,
        default_interval_s: float,
        on_drop: Callable[[str, int], None] = lambda reason, n: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_instances = max_instances
        self.max_series = max_series
        self.expire_after_intervals = expire_after_intervals
        self.default_interval_s = default_interval_s
        self.instances: dict[str, Instance] = {}
        self.series_count = 0
        self._intervals: dict[str, float] = {}  # from subscriptions seen, bounded like instances
        self._on_drop = on_drop
        self._clock = clock
        self._next_expiry = 0.0

    def subscribed(self, instance_id: str, interval_s: float) -> None:
        """The push interval a subscription gave `instance_id` (observe mode: the broker's)."""
        if instance_id in self._intervals or len(self._intervals) < self.max_instances:
            self._intervals[instance_id] = interval_s
        if instance_id in self.instances:
            self.instances[instance_id].interval_s = interval_s

    def accept(
        self, instance_id: str, meta: ClientMeta, points: Iterable[Point], terminating: bool = False
    ) -> list[Point]:
        """Keep `points` as `instance_id`'s latest values; the points kept, a delta one as
        its series' total (otlp.cumulated). A terminating push (the client is closing)
        leaves its values for one push interval more."""
        now = self._clock()
        self.expire(now)
        instance = self.instances.get(instance_id)
        if instance is None:
            if len(self.instances) >= self.max_instances:
                self._on_drop("instances", 1)
                return []
            interval = self._intervals.get(instance_id, self.default_interval_s)
            instance = self.instances[instance_id] = Instance(meta, interval, now)
        instance.meta = meta
        instance.last_push = now
        kept: list[Point] = []
        refused = 0
        series = instance.series
        for point in points:
            key = (point.metric, point.attributes)
            known = series.get(key)
            if known is None:
                if self.series_count >= self.max_series:
                    refused += 1
                    continue
                self.series_count += 1
            if point.delta:
                point = cumulated(known, point)
            series[key] = point
            kept.append(point)
        if refused:
            self._on_drop("series", refused)
        if terminating:
            instance.last_push = now - instance.interval_s * (self.expire_after_intervals - 1)
        return kept

    def expire(self, now: float | None = None) -> None:
        now = self._clock() if now is None else now
        if now < self._next_expiry:
            return
        self._next_expiry = now + EXPIRE_CHECK_SECONDS
        gone = [
            key
            for key, instance in self.instances.items()
            if now - instance.last_push > instance.interval_s * self.expire_after_intervals
        ]
        for key in gone:
            self.forget(key)

    def forget(self, instance_id: str) -> None:
        instance = self.instances.pop(instance_id, None)
        self._intervals.pop(instance_id, None)
        if instance is not None:
            self.series_count -= len(instance.series)
