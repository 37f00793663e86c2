"""The lag tracker's tables as Prometheus gauges, with bounded cardinality.

Published when the registry is collected, in the collecting thread (for /metrics a
thread of its own: going through a hundred thousand tracked partitions takes longer
than the event loop may wait; tests/observe/test_lag.py holds the scrape's time), never
per request. With worker processes
nothing collects a worker's registry: a thread of its own publishes every second.
The tables are read from copies made without releasing the GIL, so the loop goes on
changing them meanwhile.

Per-partition series of each kind: the first `max_partitions` live entries (and
`max_clients` client label values) get their own; the rest are summed into one series
whose labels are all "other", each entry counted once in
kafkalens_lag_series_dropped_total{kind}. The per-topic consumer lag sums every tracked
partition, capped series or not, over `max_topics` (group, topic) pairs.

An entry not updated for `idle_expiry_seconds` is forgotten and its series removed. With
worker processes prometheus-client cannot remove a series (its value lives in a file):
there an expired series reads 0 and keeps its place, so the caps bound every series
a worker ever showed.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from proxy.metrics import OTHER, Metrics, sanitize_label
from proxy.observe.lag.metrics import LagMetrics
from proxy.observe.lag.tracker import Entry, LagTracker

KINDS = ("consumer", "consumer_topic", "committed", "follower", "tracked")


def _label(value: str) -> str:
    return sanitize_label(value) if value else ""


class _Shown:
    """The series of one gauge currently exposed, and which label tuples are admitted."""

    def __init__(self, gauge: Any, sticky: bool) -> None:
        self.gauge = gauge
        self.sticky = sticky
        self.children: dict[tuple[str, ...], Any] = {}

    def apply(self, values: dict[tuple[str, ...], float]) -> None:
        children = self.children
        for labels, value in values.items():
            child = children.get(labels)
            if child is None:
                child = children[labels] = self.gauge.labels(*labels)
            child.set(value)
        for labels in [labels for labels in children if labels not in values]:
            if self.sticky:
                children[labels].set(0)
            else:
                self.gauge.remove(*labels)
                del children[labels]


class _Admission:
    """Which label tuples get a series of their own: at most `cap`, first come. Not
    sticky: rebuilt each publication from the live entries (expired ones free room)."""

    def __init__(self, cap: int, sticky: bool) -> None:
        self.cap = cap
        self.sticky = sticky
        self.admitted: set[Any] = set()

    def start(self) -> None:
        if not self.sticky:
            self.admitted = set()

    def admit(self, value: Any) -> bool:
        if value in self.admitted:
            return True
        if len(self.admitted) >= self.cap:
            return False
        self.admitted.add(value)
        return True


class LagSeries:
    def __init__(self, tracker: LagTracker, metrics: Metrics, sticky: bool = False) -> None:
        self.tracker = tracker
        options = tracker.options
        counts = metrics.of(LagMetrics)
        self.dropped = {kind: counts.lag_series_dropped.labels(kind=kind) for kind in KINDS}
        self.consumer = _Shown(counts.consumer_lag, sticky)
        self.consumer_topic = _Shown(counts.consumer_topic_lag, sticky)
        self.committed = _Shown(counts.committed_lag, sticky)
        self.follower = _Shown(counts.follower_lag, sticky)
        self.admit = {
            kind: _Admission(options.max_partitions, sticky) for kind in ("consumer", "committed", "follower")
        }
        self.clients = _Admission(options.max_clients, sticky)
        self.topics = _Admission(options.max_topics, sticky)
        self.topic_folded: set[tuple[str, str]] = set()
        self.tracked_dropped = 0
        self._lock = threading.Lock()  # one publication at a time

    def start_thread(self, interval: float = 1.0) -> threading.Thread:
        """Publish every `interval` seconds from a daemon thread (worker processes)."""

        def run() -> None:
            while True:
                time.sleep(interval)
                self.publish()

        thread = threading.Thread(target=run, name="kafkalens-lag-series", daemon=True)
        thread.start()
        return thread

    def publish(self) -> None:
        with self._lock:
            self._publish()

    def _publish(self) -> None:
        tracker = self.tracker
        tracker.expire(time.monotonic())
        if tracker.dropped > self.tracked_dropped:
            self.dropped["tracked"].inc(tracker.dropped - self.tracked_dropped)
            self.tracked_dropped = tracker.dropped
        for admission in (*self.admit.values(), self.clients, self.topics):
            admission.start()
        self._consumers()
        self._partitions("committed", self.committed, tracker.committed)
        self._partitions("follower", self.follower, tracker.followers)

    def _consumers(self) -> None:
        admit, clients = self.admit["consumer"], self.clients
        series: dict[tuple[str, ...], float] = {}
        per_topic: dict[tuple[str, str], float] = {}
        other, folded = 0, False
        table = self.tracker.consumers
        for key in list(table):
            entry = table.get(key)
            if entry is None:
                continue
            if entry.labelled is not entry.group:
                client, topic, partition = key
                group, topic = _label(entry.group), _label(topic)
                entry.labels = (group, _label(client), topic, str(partition))
                entry.pair = (group, topic)
                entry.labelled = entry.group
            labels, pair = entry.labels, entry.pair
            lag = self.tracker.consumer_lag(key, entry)
            per_topic[pair] = per_topic.get(pair, 0) + lag
            if (labels in admit.admitted or clients.admit(labels[1])) and admit.admit(labels):
                series[labels] = lag
            else:
                other += lag
                folded = True
                self._fold(entry, "consumer")
        if folded:
            series[(OTHER,) * 4] = other
        self.consumer.apply(series)
        self.consumer_topic.apply(self._topics(per_topic))

    def _topics(self, per_topic: dict[tuple[str, str], float]) -> dict[tuple[str, ...], float]:
        out: dict[tuple[str, ...], float] = {}
        folded: set[tuple[str, str]] = set()
        for pair, lag in per_topic.items():
            if self.topics.admit(pair):
                out[pair] = lag
            else:
                out[(OTHER, OTHER)] = out.get((OTHER, OTHER), 0) + lag
                folded.add(pair)
        new = len(folded - self.topic_folded)
        if new:
            self.dropped["consumer_topic"].inc(new)
        self.topic_folded = folded
        return out

    def _partitions(self, kind: str, shown: _Shown, table: dict[Any, Entry]) -> None:
        admit = self.admit[kind]
        series: dict[tuple[str, ...], float] = {}
        other, folded = 0, False
        for key in list(table):
            entry = table.get(key)
            if entry is None:
                continue
            lag = entry.lag if kind == "follower" else self.tracker.committed_lag(key, entry)
            if lag is None:
                continue
            if not entry.labels:
                first, topic, partition = key
                entry.labels = (_label(str(first)), _label(topic), str(partition))
            labels = entry.labels
            if admit.admit(labels):
                series[labels] = lag
            else:
                other += lag
                folded = True
                self._fold(entry, kind)
        if folded:
            series[(OTHER,) * 3] = other
        shown.apply(series)

    def _fold(self, entry: Entry, kind: str) -> None:
        if not entry.folded:
            entry.folded = True
            self.dropped[kind].inc()
