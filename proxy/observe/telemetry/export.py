"""The client metrics of a TelemetryStore as Prometheus families on /metrics.

`kafkalens_client_<name>` (proxy/observe/telemetry/otlp.py: prometheus_name), labelled
client_instance_id, client_id and software ("name/version"), plus each data point's
attributes. With `workers: N` a worker's families are written to a JSON snapshot
beside prometheus-client's multiprocess files (proxy/workers.py) and the parent merges
them: prometheus-client's multiprocess mode cannot drop a series once written, and
these must go when their client stops pushing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from proxy.metrics import sanitize_label
from proxy.observe.telemetry.otlp import HISTOGRAM, Point, label_name, prometheus_name
from proxy.observe.telemetry.store import Instance, TelemetryStore

BASE_LABELS = ("client_instance_id", "client_id", "software")
DOC = "A client's own metric, pushed by KIP-714 telemetry (OTLP name: {})."


def families(store: TelemetryStore) -> list[Metric]:
    store.expire()
    found: dict[str, Metric] = {}
    for instance_id, instance in list(store.instances.items()):
        base = _base_labels(instance_id, instance)
        for point in list(instance.series.values()):
            _add(found, point, base)
    return list(found.values())


def _base_labels(instance_id: str, instance: Instance) -> dict[str, str]:
    meta = instance.meta
    software = f"{meta.software_name or 'unknown'}/{meta.software_version or 'unknown'}"
    return {
        "client_instance_id": instance_id,
        "client_id": sanitize_label(meta.client_id or ""),
        "software": sanitize_label(software),
    }


def _add(found: dict[str, Metric], point: Point, base: dict[str, str]) -> None:
    name = prometheus_name(point)
    kind = "histogram" if point.kind == HISTOGRAM else "counter" if point.monotonic else "gauge"
    family = found.get(name)
    if family is None:
        family = found[name] = Metric(name, DOC.format(point.metric), kind)
    elif family.type != kind:
        return  # the same Prometheus name from another kind of metric: the first kind's
    labels = dict(base)
    for key, value in point.attributes:
        label = label_name(key)
        labels["attr_" + label if label in BASE_LABELS or label == "le" else label] = value
    if kind == "counter":
        family.add_sample(name + "_total", labels, point.value)
    elif kind == "gauge":
        family.add_sample(name, labels, point.value)
    else:
        for bound, count in point.buckets:
            family.add_sample(name + "_bucket", {**labels, "le": _le(bound)}, count)
        family.add_sample(name + "_count", labels, point.count or 0)
        family.add_sample(name + "_sum", labels, point.value)


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


class TelemetryCollector(Collector):
    """Registered in a Metrics registry: the store's families at each collection."""

    def __init__(self, store: TelemetryStore, on_collect: Callable[[], None] = lambda: None) -> None:
        self.store = store
        self.on_collect = on_collect  # e.g. refresh gauges of the store's size

    def collect(self) -> Iterator[Metric]:
        found = families(self.store)  # expires quiet clients first
        self.on_collect()
        return iter(found)

    def describe(self) -> list[Metric]:
        return []  # the names come and go with the clients


# -- workers > 1 ----------------------------------------------------------------------


def snapshot(store: TelemetryStore) -> list[Any]:
    """The families as JSON-able lists, for a worker's snapshot file."""
    return [
        [f.name, f.documentation, f.type, [[s.name, s.labels, s.value] for s in f.samples]]
        for f in families(store)
    ]


def merged(paths: Iterable[Path]) -> list[Metric]:
    """The families of every worker's snapshot, a name's samples together (unreadable
    or half-written files are skipped: the worker writes the next one within a second)."""
    found: dict[str, Metric] = {}
    for path in paths:
        try:
            families_json = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for name, doc, kind, samples in families_json:
            family = found.setdefault(name, Metric(name, doc, kind))
            if family.type != kind:
                continue
            for sample_name, labels, value in samples:
                family.add_sample(sample_name, labels, value)
    return list(found.values())


class SnapshotCollector(Collector):
    """The parent's: the merged snapshots matching `pattern` in `directory`."""

    def __init__(self, directory: Path, pattern: str) -> None:
        self.directory = directory
        self.pattern = pattern

    def collect(self) -> Iterator[Metric]:
        return iter(merged(sorted(self.directory.glob(self.pattern))))

    def describe(self) -> list[Metric]:
        return []
