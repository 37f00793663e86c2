"""Consumer lag, share groups and topic traffic, registered as one feature: share groups
and topic traffic are configured in the `lag:` section (lag.enabled turns all three on
or off, their caps are lag.max_*) and share its series caps' counter."""

from __future__ import annotations

import os

from proxy.metrics import Metrics
from proxy.observe.chain import Shared
from proxy.observe.feature import Feature
from proxy.observe.lag.config import LagConfig
from proxy.observe.lag.hooks import LagLink
from proxy.observe.lag.metrics import LagMetrics
from proxy.observe.lag.series import LagSeries
from proxy.observe.lag.share import ShareTracker
from proxy.observe.lag.tracker import LagTracker
from proxy.observe.lag.traffic import TopicTraffic
from proxy.observe.summary import SummaryOptions, TopicIds

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def _summary(lag: LagConfig) -> list[str]:
    return [f"consumer lag and topic traffic: {'on' if lag.enabled else 'off'}"]


def lag_link(options: LagConfig, metrics: Metrics, topic_ids: TopicIds, summary: SummaryOptions) -> LagLink:
    """Consumer lag, share groups and topic traffic with `options`, published on metrics
    flushes; `topic_ids` the hooks' own."""
    lag = LagTracker(options, topic_ids, summary.max_string_length)
    traffic = TopicTraffic(options, metrics)
    share = ShareTracker(options, metrics, topic_ids, summary.max_string_length)
    metrics.publishers.append(traffic.publish)
    metrics.publishers.append(share.publish)
    if MULTIPROC_ENV in os.environ:
        # prometheus-client keeps every series in files (never removed), and nothing
        # collects this process's registry: a thread publishes every second.
        LagSeries(lag, metrics, sticky=True).start_thread()
    else:
        metrics.collectors.append(LagSeries(lag, metrics).publish)
    return LagLink(lag, traffic, summary, topic_ids, share)


def _link(options: LagConfig, shared: Shared) -> LagLink | None:
    return lag_link(options, shared.metrics, shared.topic_ids, shared.summary) if options.enabled else None


LAG = Feature(
    name="lag",
    section=LagConfig,
    default=LagConfig(),
    doc="Consumer lag and topic traffic from the Fetch, OffsetCommit and Produce the proxy"
    ' forwards (docs/lag.md): the'
    " kafkalens_consumer_lag_records, kafkalens_committed_lag_records,"
    " kafkalens_follower_lag_records and kafkalens_topic_* metrics, and the request log's"
    ' "positions" and "committed" fields.',
    summary=_summary,
    metrics=LagMetrics,
    link=_link,
)
