"""The lag slice's config section, `lag:` in kafkalens.yaml: consumer lag, share
groups and topic traffic (their caps, what a line lists, how long a series lives)."""

from __future__ import annotations

from proxy.config.language import config_section, flag, integer, seconds


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

