"""Consumer lag, share groups and topic traffic, registered as one feature: share groups
and topic traffic are configured in the `lag:` section (lag.enabled turns all three on
or off, their caps are lag.max_*) and share its series caps' counter."""

from __future__ import annotations

from proxy.observe.feature import Feature
from proxy.observe.lag.config import LagConfig
from proxy.observe.lag.metrics import LagMetrics


def _summary(lag: LagConfig) -> list[str]:
    return [f"consumer lag and topic traffic: {'on' if lag.enabled else 'off'}"]


LAG = Feature(
    name="lag",
    section=LagConfig,
    default=LagConfig(),
    doc="Consumer lag and topic traffic from the Fetch, OffsetCommit and Produce the proxy"
    ' forwards (README "Consumer lag and topic traffic"): the'
    " kafkalens_consumer_lag_records, kafkalens_committed_lag_records,"
    " kafkalens_follower_lag_records and kafkalens_topic_* metrics, and the request log's"
    ' "positions" and "committed" fields.',
    summary=_summary,
    metrics=LagMetrics,
)
