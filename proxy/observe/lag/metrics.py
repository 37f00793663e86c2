"""The lag slice's own metrics: consumer, committed and follower lag, topic traffic,
share groups' deliveries and acknowledgements, and what was folded or cut past the
caps; defined on the proxy's registry by `Metrics.of(LagMetrics)`."""

from __future__ import annotations

from proxy.metrics import Metrics


class LagMetrics:
    def __init__(self, metrics: Metrics) -> None:
        g, c = metrics.gauge, metrics.counter
        self.consumer_lag = g(
            "kafkalens_consumer_lag_records",
            "High watermark (last stable offset for read_committed) minus the consumer's"
            " position, from its last Fetch of the partition. client: instance id, else"
            ' client id; group "" when unknown.',
            ("group", "client", "topic", "partition"),
        )
        self.consumer_topic_lag = g(
            "kafkalens_consumer_topic_lag_records",
            "kafkalens_consumer_lag_records summed over every tracked partition, capped or not.",
            ("group", "topic"),
        )
        self.committed_lag = g(
            "kafkalens_committed_lag_records",
            "Last high watermark seen minus the group's last committed offset.",
            ("group", "topic", "partition"),
        )
        self.follower_lag = g(
            "kafkalens_follower_lag_records",
            "High watermark minus a follower broker's position (Fetch with a replica id).",
            ("replica", "topic", "partition"),
        )
        traffic = ("topic", "direction", "software", "principal")
        self.topic_records = c(
            "kafkalens_topic_records_total", "Records produced and fetched, by topic.", traffic
        )
        self.topic_bytes = c(
            "kafkalens_topic_bytes_total", "Record batch bytes produced and fetched, by topic.", traffic
        )
        self.lag_series_dropped = c(
            "kafkalens_lag_series_dropped_total",
            'Lag and traffic series folded into "other" past their caps (lag.max_*), and'
            ' entries not tracked (kind "tracked": lag.max_tracked).',
            ("kind",),
        )
        for kind in ("consumer", "consumer_topic", "committed", "follower", "traffic", "share", "tracked"):
            self.lag_series_dropped.labels(kind=kind)  # at 0 from the start, for alerts
        share = ("group", "topic")
        self.share_delivered = c(
            "kafkalens_share_records_delivered_total",
            "Records (offsets) a share group's members acquired, from ShareFetch answers.",
            share,
        )
        self.share_redelivered = c(
            "kafkalens_share_records_redelivered_total",
            "Of kafkalens_share_records_delivered_total, those delivered before (delivery count above 1).",
            share,
        )
        self.share_acknowledged = c(
            "kafkalens_share_records_acknowledged_total",
            "Records a share group's members acknowledged and the broker confirmed, by type"
            " (accept, release, reject, renew).",
            (*share, "type"),
        )
        self.share_ranges_invalid = c(
            "kafkalens_share_ranges_invalid_total",
            "Partitions whose acknowledgement batches (what=acknowledgement) or acquired"
            " records (what=acquired) were malformed, by the first fault; not counted.",
            ("what", "reason"),
        )
        self.log_lists_truncated = c(
            "kafkalens_log_lists_truncated_total",
            "Request-log lines whose list `field` was cut at its cap (lag.max_logged_partitions,"
            " lag.max_logged_ranges); the line counts what it left out.",
            ("field",),
        )
