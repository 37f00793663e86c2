"""The observer `kafkalens proxy` runs, built from the config: the request log's hooks
(observing_hooks.py) and the observers' chain they hand each exchange to (chain.py),
composed in order: telemetry (telemetry/hooks.py), then consumer lag, share groups and
topic traffic (lag/hooks.py).

ObservingHooks, Token and Streamed are importable from here, as they always were.
"""

from __future__ import annotations

import os
from typing import Any

from codec import HeaderPolicy
from codec.stream import StreamLimits
from proxy.metrics import Metrics
from proxy.observe.chain import Observer, Token
from proxy.observe.instance_join import InstanceJoins
from proxy.observe.kip1313.config import header_policy
from proxy.observe.lag.hooks import LagLink
from proxy.observe.lag.series import LagSeries
from proxy.observe.lag.share import ShareTracker
from proxy.observe.lag.tracker import LagTracker
from proxy.observe.lag.traffic import TopicTraffic
from proxy.observe.observing_hooks import ObservingHooks
from proxy.observe.request_log import LineSink, RequestLog
from proxy.observe.streamed import Streamed
from proxy.observe.summary import SummaryOptions, TopicIds
from proxy.observe.telemetry.hooks import TelemetryLink
from proxy.observe.telemetry.pushes import Telemetry

__all__ = [
    "ObservingHooks", "Streamed", "Token", "build_hooks", "lag_link", "telemetry_link",
]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def build_hooks(config: Any, metrics: Metrics) -> ObservingHooks:
    """ObservingHooks and their chain from a proxy.config.Config."""
    log_config = config.request_log
    sink = LineSink(
        log_config.path,
        log_config.max_bytes,
        log_config.backups,
        flush_interval=log_config.flush_interval_seconds,
        max_queued_bytes=log_config.max_queued_bytes,
        metrics=metrics,
    )
    request_log = RequestLog(sink, log_config.sample_rate, log_config.apis, log_config.errors_only)
    policy = header_policy(config.kip1313.header_v3)
    summary = SummaryOptions(
        record_detail=log_config.record_detail,
        header_value_allowlist=frozenset(log_config.header_value_allowlist),
        max_string_length=log_config.max_string_length,
        decompression_limit=config.limits.decompression_limit_bytes,
    )
    topic_ids = TopicIds()
    links: list[Observer] = []
    telemetry = telemetry_link(config, metrics, policy)
    if telemetry is not None:
        links.append(telemetry)
    if config.lag.enabled:
        links.append(lag_link(config.lag, metrics, topic_ids, summary))
    # A client's connections share an instance id: keys for four times the instances kept
    max_keys = 4 * (config.telemetry.max_instances if telemetry is not None else 1000)
    return ObservingHooks(
        metrics,
        request_log,
        summary,
        policy,
        config.kip1313.enforcement,
        StreamLimits(
            record_detail_bytes=config.limits.observe_whole_frame_bytes if log_config.record_detail else 0,
            decompression_limit=config.limits.decompression_limit_bytes,
            max_seconds_per_piece=config.limits.observe_seconds_per_read,
            max_field_bytes=config.limits.observe_max_field_bytes,
            max_elements=config.limits.observe_max_elements,
        ),
        links=tuple(links),
        topic_ids=topic_ids,
        joins=InstanceJoins(max_keys=max_keys),
    )


def lag_link(options: Any, metrics: Metrics, topic_ids: TopicIds, summary: SummaryOptions) -> LagLink:
    """Consumer lag, share groups and topic traffic with `options` (a
    proxy.config.LagConfig), published on metrics flushes; `topic_ids` the hooks' own."""
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


def telemetry_link(config: Any, metrics: Metrics, policy: HeaderPolicy) -> TelemetryLink | None:
    """KIP-714 telemetry (observe or collect mode), None when neither is on."""
    telemetry = config.telemetry
    if not (telemetry.observe or telemetry.collect):
        return None
    log = None
    if telemetry.log.path is not None:
        sink = LineSink(
            telemetry.log.path,
            telemetry.log.max_bytes,
            telemetry.log.backups,
            flush_interval=telemetry.log.flush_interval_seconds,
            max_queued_bytes=telemetry.log.max_queued_bytes,
            metrics=metrics,
        )
        log = RequestLog(sink)
    return TelemetryLink(Telemetry(telemetry, metrics, policy, log))
