"""Records and bytes produced and fetched per topic, client software and principal.

Fed the `record_stats.per_topic` a Produce request's or Fetch response's log line
already has (so it costs a dict update per topic of the request); added to the
kafkalens_topic_records_total / kafkalens_topic_bytes_total counters when the metrics
are flushed. Label values are capped: topics at `max_topics`, principals at
`max_clients`, software by the registry's client-software capper, and the label
combinations at `max_partitions`; past a cap the value is "other", each combination
counted once in kafkalens_lag_series_dropped_total{kind="traffic"}.
"""

from __future__ import annotations

from typing import Any

from proxy.metrics import OTHER, LabelCapper, Metrics, sanitize_label
from proxy.observe.lag.config import LagConfig
from proxy.observe.lag.metrics import LagMetrics

Key = tuple[str, str, str, str]  # topic, direction, software, principal


class TopicTraffic:
    def __init__(self, options: LagConfig, metrics: Metrics) -> None:
        self.options = options
        self.metrics = metrics
        self.counts = metrics.of(LagMetrics)
        self.pending: dict[Key, list[int]] = {}  # [records, bytes] since the last publish
        self.labels: dict[Key, Key] = {}  # raw key -> its label values (bounded cache)
        self.topics = LabelCapper(options.max_topics)
        self.principals = LabelCapper(options.max_clients)
        self.series = LabelCapper(options.max_partitions)
        self.dropped = self.counts.lag_series_dropped.labels(kind="traffic")

    def add(self, per_topic: dict[str, Any], direction: str, software: str, principal: str) -> None:
        pending = self.pending
        for topic, stats in per_topic.items():
            key = (topic, direction, software, principal)
            counts = pending.get(key)
            if counts is None:
                if len(pending) >= self.options.max_tracked:
                    key = (OTHER, direction, OTHER, OTHER)  # until the next publish
                counts = pending.setdefault(key, [0, 0])
            counts[0] += stats["records"]
            counts[1] += stats["bytes"]

    def publish(self) -> None:
        pending, self.pending = self.pending, {}
        records, nbytes = self.counts.topic_records, self.counts.topic_bytes
        for key, (count, size) in pending.items():
            labels = self._labels(key)
            if count:
                records.labels(*labels).inc(count)
            if size:
                nbytes.labels(*labels).inc(size)

    def _labels(self, key: Key) -> Key:
        labels = self.labels.get(key)
        if labels is not None:
            return labels
        topic, direction, software, principal = key
        labels = (self.topics(topic), direction, software, self.principals(principal))
        if not self.series.admit(labels):
            labels = (OTHER, direction, OTHER, OTHER)
        if labels != (sanitize_label(topic), direction, software, sanitize_label(principal)):
            self.dropped.inc()
        if len(self.labels) < self.options.max_tracked:
            self.labels[key] = labels
        return labels
